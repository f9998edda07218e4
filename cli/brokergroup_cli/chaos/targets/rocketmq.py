"""Target `rocketmq`: a plain Apache RocketMQ 5.3 controller-mode group (issue 37 item 1).

Every process a JVM of the jars `tools/rocketmq/fetch.sh server` caches, started by this
module with `rocketmq_stock`'s command lines (no RocketMQ scripts), each a child of this
process, signalled by PID (+ start time) only:

- three DLedger controllers (`ControllerStartup`, controllerType=DLedger) on
  127.0.<lane>.1-3, so a fault can kill or stop the controller leader; RocketMQ's DLedger
  controller answers the controller protocol on its DLedger peer port;
- one name server on 127.0.<lane>.9;
- three brokers of one broker set (`broker-a`, brokerId=-1, enableControllerMode) on
  127.0.<lane>.11-13 with allAckInSyncStateSet=true and SYNC_FLUSH (a SEND_OK is on every
  in-sync replica's disk: the promise brokergroup makes); everything else at RocketMQ's
  defaults unless `settings` say otherwise (`controller.X=V` goes to the controllers' conf).

No supervisor: a fault's SIGKILLed process stays dead until its window ends, then
`revive()` (called by the runner while it waits for health) starts it again on the same
address and store, as a process manager would. Roles come from the controller leader over
RocketMQ's remoting protocol (CONTROLLER_GET_METADATA_INFO to find the leader,
CONTROLLER_GET_REPLICA_INFO for master and SyncStateSet), with this project's client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from brokergroup_cli.chaos.targets.base import (
    ClientEndpoint,
    Node,
    NodeKind,
    ReplicaStore,
    TargetError,
)
from brokergroup_cli.chaos.targets.mqadmin import update_topic
from brokergroup_cli.local.procs import is_alive, process_start_ticks, send_signal
from brokergroup_cli.local.rocketmq_stock import (
    BROKER_MAIN,
    CONTROLLER_MAIN,
    NAMESRV_MAIN,
    RocketMQHome,
    find_home,
    java_argv,
    java_env,
    properties_text,
)
from brokergroup_remoting import RequestCode, ResponseCode, request
from brokergroup_remoting.command import RemotingCommand
from brokergroup_remoting.net import RemotingClient

BROKER_NAME = "broker-a"
#: Third octet of each lane's 127.0.X.0/24 (clear of the benches' 127.0.50/60/62).
_LANE_OCTET = {0: 72, 1: 73, 2: 74}
DLEDGER_PORT = 29090
CONTROLLER_LISTEN_PORT = 29879
NAMESRV_PORT = 9876
#: Broker listen ports apart by 1000: RocketMQ binds the HA port (listen + 1) and the fast
#: port (listen - 2) on every interface, whatever the broker's address.
BROKER_FIRST_PORT = 40911
#: RocketMQ's controller protocol over this project's remoting client: one call's bound.
CALL_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class ReplicaInfo:
    master_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]


def _conf_value(value: object) -> str:
    return str(value)


class RocketMQTarget:
    """The plain RocketMQ group (module docstring)."""

    name = "rocketmq"

    def __init__(
        self,
        root: Path,
        *,
        lane: int = 0,
        brokers: int = 3,
        controllers: int = 3,
        settings: tuple[str, ...] = (),
        home: RocketMQHome | None = None,
    ) -> None:
        if lane not in _LANE_OCTET:
            raise ValueError(f"lane must be one of {sorted(_LANE_OCTET)}")
        found = home if home is not None else find_home()
        if isinstance(found, str):
            raise TargetError(found)
        self.home = found
        self.root = root
        self.brokers = brokers
        self.controllers = controllers
        self.prefix = f"127.0.{_LANE_OCTET[lane]}"
        self.port_offset = 100 * lane
        self.broker_settings: dict[str, str] = {}
        self.controller_settings: dict[str, str] = {}
        for item in settings:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--set {item!r}: expected KEY=VALUE")
            if key.startswith("controller."):
                self.controller_settings[key.removeprefix("controller.")] = value
            elif not key.startswith("local."):  # the local runtime's own settings
                self.broker_settings[key] = value
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.paused: set[tuple[int, int | None]] = set()

    # -- layout ---------------------------------------------------------------------------
    def controller_host(self, n: int) -> str:
        return f"{self.prefix}.{n}"

    @property
    def controller_addresses(self) -> list[str]:
        return [f"{self.controller_host(n)}:{DLEDGER_PORT}" for n in range(1, self.controllers + 1)]

    @property
    def namesrv(self) -> str:
        return f"{self.prefix}.9:{NAMESRV_PORT}"

    def broker_host(self, slot: int) -> str:
        return f"{self.prefix}.{11 + slot}"

    def broker_port(self, slot: int) -> int:
        return BROKER_FIRST_PORT + 1000 * slot + self.port_offset

    def broker_dir(self, slot: int) -> Path:
        return self.root / "brokers" / str(slot)

    def commitlog_dir(self, slot: int) -> Path:
        return self.broker_dir(slot) / "store" / "commitlog"

    # -- processes ------------------------------------------------------------------------
    def _start(self, name: str, main: str, conf: dict[str, object], work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        path = work / f"{name}.conf"
        path.write_text(properties_text({k: _conf_value(v) for k, v in conf.items()}))
        argv = java_argv(self.home, main, ["-c", str(path)], user_home=work)
        with open(work / "out.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                argv, cwd=work, env=java_env(work), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def _start_controller(self, n: int) -> None:
        work = self.root / "controllers" / str(n)
        peers = ";".join(
            f"n{i}-{self.controller_host(i)}:{DLEDGER_PORT}" for i in range(1, self.controllers + 1)
        )
        conf: dict[str, object] = {
            "controllerType": "DLedger",
            "controllerDLegerGroup": "chaos",
            "controllerDLegerPeers": peers,
            "controllerDLegerSelfId": f"n{n}",
            "listenPort": CONTROLLER_LISTEN_PORT,
            "bindAddress": self.controller_host(n),
            "controllerStorePath": work / "store",
            "configStorePath": work / "controller.properties",
            "enableElectUncleanMaster": "false",
            "notifyBrokerRoleChanged": "true",
            **self.controller_settings,
        }
        self._start(f"controller-{n}", CONTROLLER_MAIN, conf, work)

    def _start_namesrv(self) -> None:
        host, port = self.namesrv.split(":")
        work = self.root / "namesrv"
        conf: dict[str, object] = {"listenPort": port, "bindAddress": host}
        self._start("namesrv", NAMESRV_MAIN, conf, work)

    def _start_broker(self, slot: int) -> None:
        work = self.broker_dir(slot)
        store = work / "store"
        port, host = self.broker_port(slot), self.broker_host(slot)
        conf: dict[str, object] = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": BROKER_NAME,
            "brokerId": -1,
            "brokerRole": "SLAVE",
            "enableControllerMode": "true",
            "controllerAddr": ";".join(self.controller_addresses),
            "namesrvAddr": self.namesrv,
            "brokerIP1": host,
            "brokerIP2": host,
            "bindAddress": host,
            "listenPort": port,
            "haListenPort": port + 1,
            "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "mappedFileSizeCommitLog": 16 << 20,
            "allAckInSyncStateSet": "true",
            "flushDiskType": "SYNC_FLUSH",
            "autoCreateTopicEnable": "true",
            **self.broker_settings,
        }
        self._start(f"broker-{slot}", BROKER_MAIN, conf, work)

    def up(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        for n in range(1, self.controllers + 1):
            self._start_controller(n)
        self._start_namesrv()
        # A broker that finds no controller leader at start-up gives up on controller mode
        # for good (ReplicasManager: "Failed to start replicasManager"): wait for one.
        deadline = time.monotonic() + 120
        while self._leader_address() is None:
            if time.monotonic() > deadline:
                self.down()
                raise TargetError("RocketMQ's DLedger controllers elected no leader in 120 s")
            time.sleep(0.3)
        for slot in range(self.brokers):
            self._start_broker(slot)

    def revive(self) -> None:
        """Start again every process that exited (a fault's SIGKILL), same address and store."""
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            kind, _, index = name.partition("-")
            if kind == "controller":
                self._start_controller(int(index))
            elif kind == "broker":
                self._start_broker(int(index))
            else:
                self._start_namesrv()

    def down(self) -> None:
        for pid, ticks in list(self.paused):
            send_signal(pid, ticks, signal.SIGCONT)
        self.paused.clear()
        order = sorted(self.procs, key=lambda n: (not n.startswith("broker"), n))
        for name in order:
            proc = self.procs[name]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        for name in order:
            proc = self.procs.pop(name)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)

    # -- the Target interface -------------------------------------------------------------
    def _node(self, name: str, proc: subprocess.Popen[bytes]) -> Node:
        kind, _, index = name.partition("-")
        ticks = process_start_ticks(proc.pid)
        if kind == "broker":
            slot = int(index)
            return Node(
                NodeKind.BROKER, name, slot, self.broker_host(slot), proc.pid, ticks,
                self.broker_dir(slot), self.commitlog_dir(slot),
            )  # fmt: skip
        if kind == "controller":
            n = int(index)
            return Node(NodeKind.CONTROLLER, name, n, self.controller_host(n), proc.pid, ticks)
        return Node(NodeKind.NAMESRV, name, 0, self.namesrv.split(":")[0], proc.pid, ticks)

    def nodes(self, kind: NodeKind | None = None) -> list[Node]:
        out = []
        for name, proc in sorted(self.procs.items()):
            if proc.poll() is not None:
                continue
            node = self._node(name, proc)
            if (kind is None or node.kind is kind) and is_alive(node.pid, node.start_ticks):
                out.append(node)
        return out

    def signal(self, node: Node, sig: signal.Signals) -> bool:
        process = (node.pid, node.start_ticks)
        if sig is signal.SIGSTOP:
            self.paused.add(process)
        sent = send_signal(node.pid, node.start_ticks, sig)
        if sig in (signal.SIGCONT, signal.SIGKILL):
            self.paused.discard(process)
        return sent

    def _leader_address(self) -> str | None:
        return asyncio.run(_find_leader(self.controller_addresses))

    def controller_leader(self) -> Node | None:
        address = self._leader_address()
        if address is None:
            return None
        host = address.rpartition(":")[0]
        return next((n for n in self.nodes(NodeKind.CONTROLLER) if n.host == host), None)

    def replica_info(self) -> ReplicaInfo | None:
        return asyncio.run(_replica_info(self.controller_addresses))

    def master(self) -> Node | None:
        info = self.replica_info()
        if info is None or not info.master_address:
            return None
        host = info.master_address.rpartition(":")[0]
        return next((n for n in self.nodes(NodeKind.BROKER) if n.host == host), None)

    def healthy(self) -> bool:
        """Every process running, a controller leader, a live master and every broker in
        its SyncStateSet."""
        if len(self.nodes(NodeKind.CONTROLLER)) < self.controllers:
            return False
        if len(self.nodes(NodeKind.BROKER)) < self.brokers or not self.nodes(NodeKind.NAMESRV):
            return False
        info = self.replica_info()
        if info is None or info.master_address is None:
            return False
        host = info.master_address.rpartition(":")[0]
        if host not in {n.host for n in self.nodes(NodeKind.BROKER)}:
            return False
        return len(info.sync_state_set) >= self.brokers

    def client(self) -> ClientEndpoint:
        return ClientEndpoint(self.namesrv)

    def create_topic(self, topic: str, queues: int) -> None:
        addresses = [f"{self.broker_host(s)}:{self.broker_port(s)}" for s in range(self.brokers)]
        update_topic(self.home, self.root / "mqadmin", self.namesrv, topic, queues,
                     brokers=addresses)  # fmt: skip

    def replica_stores(self) -> list[ReplicaStore]:
        return [ReplicaStore(f"broker-{s}", self.commitlog_dir(s)) for s in range(self.brokers)]


async def _call(address: str, code: int, fields: dict[str, str] | None) -> RemotingCommand | None:
    try:
        client = await RemotingClient.connect(address, connect_timeout_s=0.5)
    except Exception:  # refused, unreachable, timed out: the caller asks the next
        return None
    try:
        return await client.invoke(request(code, 0, fields), timeout_s=CALL_TIMEOUT_S)
    except Exception:  # a node that is down, stopped or slow: the caller asks the next
        return None
    finally:
        await client.close()


async def _find_leader(addresses: list[str]) -> str | None:
    for address in addresses:
        answer = await _call(address, RequestCode.CONTROLLER_GET_METADATA_INFO, None)
        if answer is None:
            continue
        fields = answer.fields()
        if str(fields.get("isLeader", "")).lower() == "true":
            return address
    return None


async def _replica_info(addresses: list[str]) -> ReplicaInfo | None:
    leader = await _find_leader(addresses)
    if leader is None:
        return None
    answer = await _call(
        leader, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BROKER_NAME}
    )
    if answer is None or answer.code != ResponseCode.SUCCESS:
        return None
    fields = answer.fields()
    body = json.loads(answer.body) if answer.body else {}
    master = fields.get("masterBrokerId")
    address = fields.get("masterAddress")
    return ReplicaInfo(
        int(master) if master not in (None, "", "null") else None,
        address if address not in (None, "", "null") else None,
        int(fields.get("masterEpoch") or 0),
        frozenset(int(x) for x in body.get("syncStateSet", [])),
    )
