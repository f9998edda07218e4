"""The local runtime end to end (DESIGN.md §4): `local up --detach`,
`local status --json`, `local kill master`, `local down`, with real processes
on loopback (controllers 127.0.1.1-3, brokers from 127.0.0.10).

The runtime uses its own ports here (not the defaults), so a developer's running
`local up` is not disturbed. Every process is started by the runtime under
test and stopped by `local down`; the fixture then SIGKILLs, by pid and
start time, any process it saw in state.json that is somehow still alive.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.procs import is_alive
from tests.integration.local_harness import (
    CONTROLLER_API_ADDRESSES,
    Runtime,
    brokergroup,
    local_runtime,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local") as rt:
        yield rt


def test_kill_master_fails_over_and_the_broker_returns_on_a_new_address(
    runtime: Runtime,
) -> None:
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    assert "the group has a master" in up.stdout

    # The slaves must be in the SyncStateSet first: a master that dies alone in it
    # has no electable successor (no unclean election by default).
    before = wait_for(
        "three brokers in the SyncStateSet",
        lambda: (
            ((s := runtime.status())["master"] is not None and len(s["syncStateSet"]) == 3 and s)
            or None
        ),
        60,
        runtime,
    )
    old_master = before["master"]["brokerId"]
    old_epoch = before["masterEpoch"]
    old_row = next(b for b in before["brokers"] if b["brokerId"] == old_master)
    assert len(before["controllers"]) == 3 and len(before["brokers"]) == 3
    hosts = sorted(b["address"].split(":")[0] for b in before["brokers"])
    assert hosts == ["127.0.0.10", "127.0.0.11", "127.0.0.12"]

    killed = runtime.run("kill", "master")
    assert killed.returncode == 0, killed.stderr
    assert f"killed master broker {old_master}" in killed.stdout

    def failed_over() -> dict[str, Any] | None:
        s = runtime.status()
        master = s["master"]
        if master is None or master["brokerId"] == old_master or s["masterEpoch"] <= old_epoch:
            return None
        back = [b for b in s["brokers"] if b["brokerId"] == old_master]
        if not back or back[0]["process"] != "running" or back[0]["alive"] is not True:
            return None
        return s

    after = wait_for("a new master and the old one back", failed_over, 45, runtime)
    back = next(b for b in after["brokers"] if b["brokerId"] == old_master)
    assert back["slot"] == old_row["slot"]
    assert back["address"] != old_row["address"]
    assert back["address"].split(":")[0] not in hosts  # the next unused 127.0.0.x
    assert back["restarts"] >= 1
    assert back["role"] != "master"
    assert old_row["address"].split(":")[0] in back["previousAddresses"]

    pids = set(runtime.seen)
    down = runtime.run("down", timeout_s=60)
    assert down.returncode == 0, down.stderr
    assert pids and not [p for p in pids if is_alive(*p)]
    assert runtime.state()["supervisorPid"] is None


def test_controller_restarts_on_its_own_address_and_up_refuses_twice(
    runtime: Runtime,
) -> None:
    up = runtime.up(brokers=2)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"

    again = runtime.up(brokers=2)
    assert again.returncode == 1
    assert "already running" in again.stderr

    before = runtime.status()
    leader = before["controllerLeader"]
    assert leader is not None, before
    row = next(c for c in before["controllers"] if c["nodeId"] == leader["nodeId"])
    killed = runtime.run("kill", "controller-leader")
    assert killed.returncode == 0, killed.stderr
    assert f"controller-{leader['nodeId']}" in killed.stdout

    def restarted() -> dict[str, Any] | None:
        s = runtime.status()
        c = next(c for c in s["controllers"] if c["nodeId"] == leader["nodeId"])
        ok = c["restarts"] >= 1 and c["process"] == "running" and c["pid"] != row["pid"]
        return s if ok and c["reachable"] and s["controllerLeader"] is not None else None

    after = wait_for("the controller back on its address", restarted, 45, runtime)
    c = next(c for c in after["controllers"] if c["nodeId"] == leader["nodeId"])
    assert c["address"] == row["address"]

    unknown = runtime.run("kill", "broker-99")
    assert unknown.returncode == 1 and "BrokerId 99" in unknown.stderr


def test_admin_finds_the_local_runtime_token(runtime: Runtime, tmp_path: Path) -> None:
    """Issue 8 item 3: `brokergroup admin elect-master` against `local up` needs no
    --token-file; when no token can be found it says where it looked."""
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    status = wait_for(
        "three in-sync brokers",
        lambda: (
            ((s := runtime.status())["master"] is not None and len(s["syncStateSet"]) == 3 and s)
            or None
        ),
        60,
        runtime,
    )
    target = next(b["brokerId"] for b in status["brokers"] if b["role"] == "slave")
    base = {k: v for k, v in os.environ.items() if k != "BROKERGROUP_TOKEN"}
    elect = ("admin", "elect-master", "--controller-addresses", CONTROLLER_API_ADDRESSES,
             "--broker-name", "broker-a", "--broker-id", str(target), "--json")  # fmt: skip

    lost = brokergroup(*elect, env={**base, "HOME": str(tmp_path), "BROKERGROUP_LOCAL_DIR": ""})
    assert lost.returncode == 2, lost.stdout
    assert "no controller API token found" in lost.stderr
    assert str(tmp_path / ".brokergroup" / "local" / "token") in lost.stderr

    found = brokergroup(*elect, env={**base, "BROKERGROUP_LOCAL_DIR": str(runtime.root)})
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["masterBrokerId"] == target
