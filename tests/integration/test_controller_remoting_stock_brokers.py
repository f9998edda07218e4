"""Stock RocketMQ 5.3 brokers run under the brokergroup controller (issue 20 items 1-2).

The server jars are what `make rocketmq-servers` fetched (5.3.3: Maven Central has no
rocketmq-namesrv for 5.3.0-5.3.2); the controller protocol is unchanged since 5.3.1.

Three controller nodes (real processes, 127.0.40.1-3, remoting port 9879, signed requests
only), a stock name server and three stock brokers (BrokerStartup, enableControllerMode=true,
brokerId=-1, controllerAddr naming our nodes, innerClientAuthenticationCredentials set):
- the brokers get persistent ids 1-3, one is elected, the SyncStateSet grows to all three;
- mqadmin getControllerMetaData and getSyncStateSet read the same state as the HTTP API;
- the master is SIGKILLed: this controller elects a new master from the SyncStateSet, the
  brokers switch roles (NOTIFY_BROKER_ROLE_CHANGED / their polling), and the survivors form
  the SyncStateSet again;
- the old master restarted keeps its BrokerId and rejoins as a slave;
- mqadmin electMaster moves the master back; mqadmin cleanBrokerMetadata forgets a stopped
  broker.
Skips, saying why, without Java or the stock jars (make rocketmq-servers).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from brokergroup_remoting.net import Credentials
from tests.integration.broker_harness import Controllers
from tests.integration.rocketmq_brokers import (
    RocketMQHome,
    StockBroker,
    StockNameServer,
    find_home,
    mqadmin,
    tail,
)

pytestmark = pytest.mark.integration

BLOCK = 40
KEYS = Credentials("rocketmq-brokers", "secret-key-of-the-stock-broker-test")
C, B = "DefaultCluster", "broker-a"
T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float, logs: Callable[[], str]
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout_s:.0f} s\n{logs()}")
        time.sleep(0.25)


class World:
    def __init__(self, home: RocketMQHome, base: Path) -> None:
        self.home = home
        self.base = base
        keys = base / "remoting-keys.json"
        keys.write_text(json.dumps({"accessKey": KEYS.access_key, "secretKey": KEYS.secret_key}))
        self.controllers = Controllers(
            base / "controllers",
            block=BLOCK,
            config={"remotingCredentialsFile": str(keys), "heartbeatTimeoutMs": 3000},
        )
        self.remoting = [f"127.0.{BLOCK}.{i}:9879" for i in (1, 2, 3)]
        self.namesrv = StockNameServer(home, base / "namesrv", host=f"127.0.{BLOCK}.9")
        self.brokers = {
            slot: StockBroker(
                home,
                base / f"broker{slot}",
                host=f"127.0.{BLOCK}.{10 + slot}",
                port=21001 + 10 * slot,
                controllers=";".join(self.remoting),
                namesrv=self.namesrv.address,
                credentials=KEYS,
            )
            for slot in (1, 2, 3)
        }

    def logs(self) -> str:
        parts = [f"== controllers\n{self.controllers.logs(tail_lines=15)}"]
        for slot, broker in self.brokers.items():
            parts.append(f"== broker{slot} stdout\n{tail(broker.log_path, 8)}")
            parts.append(f"== broker{slot} log\n{tail(self.broker_log(slot), 15)}")
        return "\n".join(parts)

    def broker_log(self, slot: int) -> Path:
        return self.brokers[slot].base_dir / "logs" / "rocketmqlogs" / "broker.log"

    def info(self) -> dict[str, Any] | None:
        """The broker set through the HTTP API (the same state the remoting port serves),
        read through node 1 (it forwards) with NOT_LEADER retried as a broker's client
        does: a stall of the loaded machine can start an election between two steps,
        and a step that reads once must not see it (CI run 50)."""
        query = urllib.parse.urlencode({"clusterName": C, "brokerName": B})
        result = self.controllers.request_retrying(1, "GET", f"/v1/replica-info?{query}")
        return result.body if result.status == 200 else None

    def controller_meta_data(self, via: str) -> tuple[int, str]:
        """mqadmin getControllerMetaData and the leader it must name: the same one found
        before and after it (a stall may move the leader while the JVM starts)."""
        for _ in range(5):
            leader = self.controllers.wait_for_leader()
            out = self.mqadmin("getControllerMetaData", "-a", via)
            if self.controllers.wait_for_leader() == leader:
                return leader, out
        raise AssertionError("the Raft leader moved around every getControllerMetaData")

    def slot_of(self, broker_id: int) -> int:
        return next(s for s, b in self.brokers.items() if b.broker_id() == broker_id)

    def switched(self, slot: int, broker_id: int | None, role: str, master_epoch: int) -> bool:
        """Whether the broker logged taking `role` at `master_epoch` (ReplicasManager's
        "Change broker [id:…] to SLAVE|SYNC_MASTER, …, newMasterEpoch:…" line)."""
        try:
            text = self.broker_log(slot).read_text(errors="replace")
        except OSError:
            return False
        return any(
            f"Change broker [id:{broker_id}]" in line
            and f" to {role}," in line
            and f"newMasterEpoch:{master_epoch}," in line
            for line in text.splitlines()
        )

    def mqadmin(self, *args: str) -> str:
        return mqadmin(self.home, self.base / "mqadmin", KEYS, *args)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    w = World(home, tmp_path)
    try:
        w.controllers.start_all()
        w.controllers.wait_for_leader()
        w.namesrv.start()
        yield w
    finally:
        for broker in w.brokers.values():
            broker.kill()
        w.namesrv.stop()
        w.controllers.stop_all()


def _in_sync(info: dict[str, Any] | None, members: set[int]) -> dict[str, Any] | None:
    if info is None or set(info["syncStateSet"]) != members or not info["masterAlive"]:
        return None
    return info


def test_stock_brokers_register_fail_over_and_rejoin(world: World) -> None:
    w = world
    for broker in w.brokers.values():
        broker.start()

    # Persistent ids 1-3, one master, and every broker replicating in the SyncStateSet.
    info = wait_for("a SyncStateSet of 3", lambda: _in_sync(w.info(), {1, 2, 3}), 180, w.logs)
    ids = {slot: b.broker_id() for slot, b in w.brokers.items()}
    assert sorted(ids.values()) == [1, 2, 3], ids  # type: ignore[type-var]
    master = info["masterBrokerId"]
    old_slot = w.slot_of(master)
    assert info["masterAddress"] == w.brokers[old_slot].address
    epoch = info["masterEpoch"]

    leader, out = w.controller_meta_data(w.remoting[2])
    assert f"#ControllerLeaderAddress\t{w.remoting[leader - 1]}" in out, out
    out = w.mqadmin("getSyncStateSet", "-a", w.remoting[0], "-b", B)
    assert "#SyncStateSetNums\t3" in out and f"#MasterBrokerId\t{master}" in out, out

    # SIGKILL the master: a new master from the SyncStateSet, and the brokers follow.
    w.brokers[old_slot].kill()
    after = wait_for(
        "a new master",
        lambda: (lambda i: i if i and i["masterBrokerId"] not in (None, master) else None)(
            w.info()
        ),
        60,
        w.logs,
    )
    new_master = after["masterBrokerId"]
    assert new_master in info["syncStateSet"] and after["masterEpoch"] > epoch
    new_slot = w.slot_of(new_master)
    wait_for(
        f"broker {new_master} switching to master",
        lambda: w.switched(new_slot, new_master, "SYNC_MASTER", after["masterEpoch"]),
        60,
        w.logs,
    )
    (other_slot,) = set(w.brokers) - {old_slot, new_slot}
    wait_for(
        "the other slave following the new master",
        lambda: w.switched(
            other_slot, w.brokers[other_slot].broker_id(), "SLAVE", after["masterEpoch"]
        ),
        60,
        w.logs,
    )
    survivors = {1, 2, 3} - {master}
    wait_for("the survivors in sync", lambda: _in_sync(w.info(), survivors), 90, w.logs)

    # The old master comes back: same BrokerId, now a slave, in sync again.
    w.brokers[old_slot].start()
    back = wait_for(
        "the old master back in sync", lambda: _in_sync(w.info(), {1, 2, 3}), 120, w.logs
    )
    assert w.brokers[old_slot].broker_id() == master
    assert back["nextBrokerId"] == 4 and back["masterBrokerId"] == new_master
    assert w.switched(old_slot, master, "SLAVE", back["masterEpoch"]), w.logs()

    # mqadmin electMaster: the old master is designated and elected.
    out = w.mqadmin("electMaster", "-a", w.remoting[1], "-c", C, "-bn", B, "-b", str(master))
    assert f"#BrokerMasterAddr\t{w.brokers[old_slot].address}" in out, out
    moved = w.info()
    assert moved is not None and moved["masterBrokerId"] == master, moved
    wait_for(
        f"broker {master} master again",
        lambda: w.switched(old_slot, master, "SYNC_MASTER", moved["masterEpoch"]),
        60,
        w.logs,
    )

    # mqadmin cleanBrokerMetadata: a live broker is refused, a stopped one forgotten.
    victim = next(i for i in (1, 2, 3) if i not in (master,))
    out = w.mqadmin(
        "cleanBrokerMetadata", "-a", w.remoting[0], "-c", C, "-bn", B, "-b", str(victim)
    )
    assert "success" not in out, out
    w.brokers[w.slot_of(victim)].kill()
    wait_for(
        f"broker {victim} inactive",
        lambda: (
            lambda i: i and not next(b for b in i["brokers"] if b["brokerId"] == victim)["alive"]
        )(w.info()),
        60,
        w.logs,
    )
    out = w.mqadmin(
        "cleanBrokerMetadata", "-a", w.remoting[0], "-c", C, "-bn", B, "-b", str(victim)
    )
    assert "success" in out, out
    final = w.info()
    assert final is not None and victim not in {b["brokerId"] for b in final["brokers"]}, final
