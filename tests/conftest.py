"""Settings every test tier shares, and how the tiers run in parallel.

`make test` runs pytest-xdist with a worker per core (docs/development.md "Parallel
tiers"). Two workers must never share an address, a port or the kernel's routing rules,
so each worker enters a network namespace of its own before it collects anything: its
own loopback device (every 127.x.y.z address and port free again), its own
policy-routing rules and `local` table rule (netfault's partitions move it), its own
bridges and routes (the cluster tier). Tests keep their fixed addresses, and a new test
gets the isolation without asking. Temporary directories are per worker already
(xdist's basetemp).

Scheduling (`--dist loadgroup` runs `TierScheduling`, by the test's path): a unit test is a work unit of its
own. Outside tests/unit a module is one work unit (its module-scoped processes start
once), the pipeline tier is one (one SparkSession, a JVM, and one chaos-run store per
run: its package fixtures), the cluster tier is one (one control plane per run, stopped
after its last test);
`SHARED` names modules that share a session fixture. Where a worker cannot have its own
namespace (not root, no `ip`, no CAP_SYS_ADMIN), every real-process test is one work
unit: they run one after another on one worker, as before, and only the unit tier runs
in parallel.

The groups are decided here from node ids rather than by `xdist_group` marks:
pytest 9.2's structured node ids no longer carry the "@group" suffix xdist's loadgroup
writes into them, so marks are silently ignored (pytest-dev/pytest-xdist#1386).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest
from hypothesis import settings
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

# Hypothesis's 200 ms per-example deadline is a timing assert: on a loaded 2-core CI machine
# it fails correct code (test_operator_labels once took 266 ms). Timings belong to bench/.
settings.register_profile("brokergroup", deadline=None)
settings.load_profile("brokergroup")

_CLONE_NEWNET = 0x40000000
#: The controller's verdict, inherited by the workers it spawns: "own" or "host".
NETWORK_ENV = "BROKERGROUP_TEST_WORKER_NETWORK"
#: Modules that share a session fixture run as one work unit: {module path: group}.
#: Also modules that must not run beside each other: "stock-jvms" keeps the chaos targets
#: running plain RocketMQ groups (seven JVMs on 2 cores, tests/chaos/test_chaos_targets.py)
#: off the worker next to the stock-client modules, whose three-controller runtime and
#: timing-sensitive checks starve beside them: in CI the Raft leadership of
#: test_stock_client_app_features's runtime changed 33 times in a minute while
#: test_kill_master_twice[local-rocketmq] and [rocketmq] ran on the other worker, its
#: master fenced itself (no heartbeat answer within masterLeaseMs) and the stock client's
#: sends failed; test_stock_client_delay's timers were delivered twice. Correct behaviour
#: of a starved group, not of these tests' subject.
#: The cluster tier joins that unit for the same reason: in CI runs 48 and 49 its tests
#: (a roll under `kubectl brokergroup`, the chart's pod faults) met ~2 s stalls of the
#: whole machine while test_chaos_targets' JVMs started on the other worker: every pod's
#: readiness probe failed at once, the master's heartbeats timed out and the controller
#: moved the master in the middle of a roll. One worker runs both, one after the other.
STOCK_JVMS_AND_CLUSTER = "stock-jvms+cluster-tier"
SHARED: dict[str, str] = {
    path: STOCK_JVMS_AND_CLUSTER
    for path in (
        "tests/chaos/test_chaos_targets.py",
        "tests/integration/test_stock_client_app_features.py",
        "tests/integration/test_stock_client_delay.py",
        "tests/integration/test_stock_client_failover.py",
        "tests/integration/test_stock_client_filters.py",
        "tests/integration/test_stock_client_local.py",
        "tests/integration/test_stock_client_pop.py",
        "tests/integration/test_stock_client_retention.py",
        "tests/integration/test_stock_client_transactions.py",
    )
}
#: Where the commands look for a user's credentials and CA when no flag names them: a test
#: must never find the machine's own (a `brokergroup local up` run before the suite left
#: ~/.brokergroup/local/client-keys.json, and a unit test's client presented its key pair
#: to a fake broker that expected none: UNAUTHENTICATED in CI).
USER_ENV = (
    "BROKERGROUP_TOKEN",
    "BROKERGROUP_CA_FILE",
    "BROKERGROUP_KEY_FILE",
    "BROKERGROUP_CONTROLLER_TOKEN",
)
LOCAL_DIR_ENV = "BROKERGROUP_LOCAL_DIR"
#: Every JVM the tiers start reads this variable (the `java` launcher does): stock RocketMQ
#: brokers, name servers and proxies, the stock Java clients and mqadmin, Spark's drivers and
#: executors, and the cluster tier's pods (tier/kubelet.py passes it on). The serial collector
#: only: G1's threads are cost on 2 cores. Not C1 alone (-XX:TieredStopAtLevel=1, stop 51):
#: a stock broker's timer wheel flush ran ~10x slower under it, ~21 % of a core per idle broker
#: (docs/development.md "Where the suite's CPU goes"); the short-lived test programs that gain
#: from C1 ask for it on their own command lines (stock_client_harness, tools/rocketmq/
#: stock_client.py). Only the tests' JVMs: the product's own command lines are what they are.
JVM_OPTIONS_ENV = "JDK_JAVA_OPTIONS"
TEST_JVM_OPTIONS = "-XX:+UseSerialGC"


def _unshare_network() -> str | None:
    """Move the calling thread, and so every process it starts later, into a new network
    namespace with loopback up. None on success, otherwise why not."""
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


def _workers_can_have_own_network() -> bool:
    """Asked by the controller: can a process here enter a namespace of its own?"""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"import ctypes, sys; sys.exit(ctypes.CDLL(None).unshare({_CLONE_NEWNET}) != 0)"
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def _isolate_from_user_files(config: pytest.Config) -> None:
    """The default local runtime directory becomes an empty one of this run, and the user's
    credential variables are dropped; workers and every process a test starts inherit it.
    A test that wants a runtime's files names its directory, as a user would."""
    for name in USER_ENV:
        os.environ.pop(name, None)
    local_dir = tempfile.mkdtemp(prefix="brokergroup-test-local-")
    os.environ[LOCAL_DIR_ENV] = local_dir
    config.add_cleanup(lambda: shutil.rmtree(local_dir, ignore_errors=True))


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is not None:
        if os.environ.get(NETWORK_ENV) == "own":
            reason = _unshare_network()
            if reason is not None:  # the controller's probe said it could: never share
                raise pytest.UsageError(f"worker's own network namespace: {reason}")
        # The controller isolated the environment; each worker gets a directory of its own.
        inherited = os.environ.get(LOCAL_DIR_ENV)
        if inherited:
            os.environ[LOCAL_DIR_ENV] = os.path.join(inherited, os.environ["PYTEST_XDIST_WORKER"])
        return
    _isolate_from_user_files(config)
    os.environ.setdefault(JVM_OPTIONS_ENV, TEST_JVM_OPTIONS)  # a caller's own setting wins
    if config.getoption("numprocesses", None):
        os.environ[NETWORK_ENV] = "own" if _workers_can_have_own_network() else "host"


def work_unit(nodeid: str, *, own_network: bool) -> str:
    """The work unit (xdist scope) of the test `nodeid` (tests/<tier>/<module>::<name>)."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    if tier == "unit":
        return nodeid
    if not own_network:
        return "host-network"
    if tier == "cluster":  # its package fixture: once per run, not per worker
        return STOCK_JVMS_AND_CLUSTER
    if tier == "pipeline":  # its package fixtures: once per run, not per worker
        return "pipeline-tier"
    return SHARED.get(path, path)


class TierScheduling(LoadScopeScheduling):
    """xdist's scope scheduling (largest work unit first) with `work_unit` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid, own_network=os.environ.get(NETWORK_ENV) == "own")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> TierScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None  # another --dist asked for: xdist's own
    return TierScheduling(config, log)
