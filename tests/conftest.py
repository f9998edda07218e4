"""Settings every test tier shares, and how the tiers run in parallel.

`make test` runs pytest-xdist with a worker per core and `--dist loadgroup`
(docs/development.md "Parallel tiers"). Two workers must never share an
address, a port or the kernel's routing rules, so each worker enters a network
namespace of its own before it collects anything: its own loopback device (every
127.x.y.z address and port free again), its own policy-routing rules and `local`
table rule (netfault's partitions move it), its own bridges and routes (the cluster
tier). Tests keep their fixed addresses, and a new test gets the isolation without
asking. Temporary directories are per worker already (xdist's basetemp).

Scheduling: a unit test is a work unit of its own. Outside tests/unit a module is one
work unit (its module-scoped processes start once), the cluster tier is one (one
control plane per run), the pipeline tier is one (one SparkSession, a JVM, and one
chaos-run store per run: its session fixtures), and other modules that share a session
fixture carry an `xdist_group` mark of their own. Where a worker cannot have its own
namespace (not root, no `ip`), every real-process test joins one group: they then run
one after another on one worker, as before, and only the unit tier runs in parallel.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis's 200 ms per-example deadline is a timing assert: on a loaded 2-core CI machine
# it fails correct code (test_operator_labels once took 266 ms). Timings belong to bench/.
settings.register_profile("brokergroup", deadline=None)
settings.load_profile("brokergroup")

_CLONE_NEWNET = 0x40000000
_TESTS = Path(__file__).resolve().parent
#: Set in a worker by pytest_configure: its own network namespace, or why not.
_NO_OWN_NETWORK: list[str] = []


def _enter_own_network() -> str | None:
    """Move this process's main thread, and so everything it starts later, into a new
    network namespace with loopback up. None on success, otherwise why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "iproute2's ip is missing"
    if threading.current_thread() is not threading.main_thread():
        return "not on the main thread"  # unshare moves the calling thread only
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        return f"unshare(CLONE_NEWNET): {os.strerror(ctypes.get_errno())}"
    # Nothing can have started in the new namespace yet; without loopback nothing works.
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, capture_output=True)
    return None


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return  # one process: the host's network, as a developer's `pytest` always had
    reason = _enter_own_network()
    if reason is not None:
        _NO_OWN_NETWORK.append(reason)


def work_unit(path: Path) -> str | None:
    """The xdist group of a test in `path` that carries none: None for a unit test (its own
    work unit), else its module, or its whole tier (cluster, pipeline)."""
    relative = path.resolve().relative_to(_TESTS)
    tier = relative.parts[0]
    if tier == "unit":
        return None
    if _NO_OWN_NETWORK:
        return "host-network"
    if tier in ("cluster", "pipeline"):  # their session fixtures: once per run, not per worker
        return f"{tier}-tier"
    return relative.as_posix()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns marks into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = work_unit(item.path)
        if group is None:
            continue
        if _NO_OWN_NETWORK:  # one group, whatever a module asked for
            for node in item.listchain():
                node.own_markers[:] = [m for m in node.own_markers if m.name != "xdist_group"]
        elif item.get_closest_marker("xdist_group") is not None:
            continue  # a module's own group (a session fixture several modules share)
        item.add_marker(pytest.mark.xdist_group(group))
