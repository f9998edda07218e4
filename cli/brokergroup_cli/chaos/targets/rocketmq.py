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
address and store, as a process manager would — a killed master only once the controllers
have replaced it (or `REPLACEMENT_HOLD_S` passed): a master back before the controllers
noticed its death is simply master again with everything it held, so on a slow machine a
kill window would test a restart, not a failover. Roles come from the controller leader
over RocketMQ's remoting protocol (CONTROLLER_GET_METADATA_INFO to find the leader, asked
of every controller at once; CONTROLLER_GET_REPLICA_INFO for master and SyncStateSet),
with this project's client.

A stock workload tells the target what it acknowledged (`acknowledged_since`, set by
`stock_run`): a SIGKILL of the master then waits (up to `FRESH_ACK_WAIT_S`) until a send
invoked after the kill was asked for is acknowledged, so every kill lands on a master that
has just acknowledged a write — under a lagging-slaves fault, a write only it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from brokergroup_cli.chaos import netfault
from brokergroup_cli.chaos.targets.base import (
    ClientEndpoint,
    Node,
    NodeKind,
    ReplicaStore,
    TargetError,
)
from brokergroup_cli.chaos.targets.mqadmin import update_topic
from brokergroup_cli.local.procs import group_kwargs, is_alive, process_start_ticks, send_signal
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
#: RocketMQ's controller protocol over this project's remoting client: one connection's
#: and one call's bound. Liveness bounds, not speed asserts: a controller JVM beside six
#: other starting JVMs on a loaded 2-core machine can take seconds to answer, and a health
#: probe that counted that as "no leader" would call a working group unhealthy.
#: Each process's own group id (the uid stays root) is this + 100 * lane + its address's
#: last octet: the owner match of the address-pair faults tells apart what the addresses
#: cannot (every stock JVM dials from 127.0.0.1; `netfault.owner_matches`).
GID_BASE = 47000
CONNECT_TIMEOUT_S = 2.0
CALL_TIMEOUT_S = 3.0
#: Longest a SIGKILLed broker stays down while the controllers still name it master (or no
#: controller leader answers): a liveness bound on the failover, after which it is started
#: again anyway (a broker set whose SyncStateSet held only the master has no one else).
#: Twice the longest unavailability seen (42 s, the controller leader killed too, a loaded
#: CI machine): a new DLedger leader, its scanInactiveMasterInterval, the brokers finding it.
REPLACEMENT_HOLD_S = 90.0
#: Longest a SIGKILL of the master waits for a fresh acknowledgment (module docstring);
#: shorter than RocketMQ's haMaxTimeSlaveNotCatchup (15 s), after which a master drops
#: lagging slaves from its SyncStateSet and none of them could be elected.
FRESH_ACK_WAIT_S = 10.0


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
        #: Set by a workload: whether a send invoked at or after this wall-clock time
        #: (time.time()) has been acknowledged.
        self.acknowledged_since: Callable[[float], bool] | None = None
        #: The broker process the controllers named master last (master()).
        self._named_master: tuple[int, int | None] | None = None
        #: Broker slot -> when its process was SIGKILLed (monotonic), until revived.
        self._killed_at: dict[int, float] = {}
        #: Every process is a stock JVM dialing from 127.0.0.1: told apart by its own group
        #: where this machine can match owners (`groups.enabled`); where it cannot, the
        #: address-pair faults say so instead of cutting nothing (`netfault.NodeGroups`).
        self.node_gids = True
        self.groups = netfault.NodeGroups()

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

    def gid(self, host: str) -> int | None:
        """The group id the process on `host` runs with (None: the target's own)."""
        if not self.groups.enabled:
            return None
        return GID_BASE + self.port_offset + int(host.rpartition(".")[2])

    def _hosts(self) -> list[str]:
        return [
            *(self.controller_host(n) for n in range(1, self.controllers + 1)),
            self.namesrv.split(":")[0],
            *(self.broker_host(s) for s in range(self.brokers)),
        ]

    # -- processes ------------------------------------------------------------------------
    def _start(self, name: str, main: str, conf: dict[str, object], work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        path = work / f"{name}.conf"
        path.write_text(properties_text({k: _conf_value(v) for k, v in conf.items()}))
        argv = java_argv(self.home, main, ["-c", str(path)], user_home=work)
        gid = self.gid(str(conf["bindAddress"]))
        with open(work / "out.log", "ab") as log:
            self.procs[name] = subprocess.Popen(
                argv, cwd=work, env=java_env(work), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, **group_kwargs(gid),
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
        # Before any process starts: a connection's dialer is marked by its first packet.
        self.groups.mark(g for g in map(self.gid, self._hosts()) if g is not None)
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
        """Start again every process that exited (a fault's SIGKILL), same address and
        store; a killed broker the controllers still name master (or that no controller
        leader can say anything about) only after `REPLACEMENT_HOLD_S`."""
        asked: list[ReplicaInfo | None] = []
        for name, proc in list(self.procs.items()):
            if proc.poll() is None:
                continue
            kind, _, index = name.partition("-")
            if kind == "controller":
                self._start_controller(int(index))
            elif kind == "broker":
                slot = int(index)
                killed = self._killed_at.get(slot)
                if killed is not None and time.monotonic() - killed < REPLACEMENT_HOLD_S:
                    if not asked:
                        asked.append(self.replica_info())
                    if _names_master(asked[0], self.broker_host(slot)):
                        continue
                self._killed_at.pop(slot, None)
                self._start_broker(slot)
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
        self.groups.unmark()

    # -- the Target interface -------------------------------------------------------------
    def _node(self, name: str, proc: subprocess.Popen[bytes]) -> Node:
        kind, _, index = name.partition("-")
        ticks = process_start_ticks(proc.pid)
        if kind == "broker":
            slot = int(index)
            return Node(
                NodeKind.BROKER, name, slot, self.broker_host(slot), proc.pid, ticks,
                self.broker_dir(slot), self.commitlog_dir(slot),
                ha_port=self.broker_port(slot) + 1,  # haListenPort (_start_broker)
                gid=self.gid(self.broker_host(slot)),
            )  # fmt: skip
        if kind == "controller":
            host = self.controller_host(int(index))
            return Node(NodeKind.CONTROLLER, name, int(index), host, proc.pid, ticks,
                        gid=self.gid(host))  # fmt: skip
        host = self.namesrv.split(":")[0]
        return Node(NodeKind.NAMESRV, name, 0, host, proc.pid, ticks, gid=self.gid(host))

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
        if sig is signal.SIGKILL and node.kind is NodeKind.BROKER:
            if process == self._named_master:
                self._await_fresh_ack()
            self._killed_at[node.index] = time.monotonic()
        if sig is signal.SIGSTOP:
            self.paused.add(process)
        sent = send_signal(node.pid, node.start_ticks, sig)
        if sig in (signal.SIGCONT, signal.SIGKILL):
            self.paused.discard(process)
        return sent

    def _await_fresh_ack(self) -> bool:
        """Until a send invoked from now on is acknowledged (`FRESH_ACK_WAIT_S` at most;
        at once without a workload telling)."""
        acknowledged_since = self.acknowledged_since
        if acknowledged_since is None:
            return False
        asked = time.time()
        deadline = time.monotonic() + FRESH_ACK_WAIT_S
        while not acknowledged_since(asked):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _leader_address(self) -> str | None:
        return asyncio.run(_find_leader(self.controller_addresses))

    def controller_leader(self) -> Node | None:
        address = self._leader_address()
        if address is None:
            return None
        host = address.rpartition(":")[0]
        return next((n for n in self.nodes(NodeKind.CONTROLLER) if n.host == host), None)

    def replica_info(self) -> ReplicaInfo | None:
        answer = asyncio.run(_replica_info(self.controller_addresses))
        return answer if isinstance(answer, ReplicaInfo) else None

    def master(self) -> Node | None:
        info = self.replica_info()
        if info is None or not info.master_address:
            return None
        host = info.master_address.rpartition(":")[0]
        node = next((n for n in self.nodes(NodeKind.BROKER) if n.host == host), None)
        if node is not None:
            self._named_master = (node.pid, node.start_ticks)
        return node

    def health_problem(self) -> str | None:
        """What keeps the group from healthy (None: healthy): every process running, a
        controller leader, a live master and every broker in its SyncStateSet."""
        controllers = len(self.nodes(NodeKind.CONTROLLER))
        if controllers < self.controllers:
            return f"{controllers} of {self.controllers} controllers running"
        brokers = self.nodes(NodeKind.BROKER)
        if len(brokers) < self.brokers:
            return f"{len(brokers)} of {self.brokers} brokers running"
        if not self.nodes(NodeKind.NAMESRV):
            return "the name server is not running"
        info = asyncio.run(_replica_info(self.controller_addresses))
        if not isinstance(info, ReplicaInfo):
            return info
        if info.master_address is None:
            return f"the controllers name no master (master epoch {info.master_epoch})"
        host = info.master_address.rpartition(":")[0]
        if host not in {n.host for n in brokers}:
            return f"the controllers name {info.master_address} master: not running"
        if len(info.sync_state_set) < self.brokers:
            return (
                f"SyncStateSet {sorted(info.sync_state_set)} (master {info.master_id}, "
                f"epoch {info.master_epoch}): not all {self.brokers} brokers"
            )
        return None

    def healthy(self) -> bool:
        return self.health_problem() is None

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
        client = await RemotingClient.connect(address, connect_timeout_s=CONNECT_TIMEOUT_S)
    except Exception:  # refused, unreachable, timed out: the caller asks the next
        return None
    try:
        return await client.invoke(request(code, 0, fields), timeout_s=CALL_TIMEOUT_S)
    except Exception:  # a node that is down, stopped or slow: the caller asks the next
        return None
    finally:
        await client.close()


async def _find_leader(addresses: list[str]) -> str | None:
    """The first of `addresses` that says it leads; all asked at once (a stopped or slow
    controller costs one call's bound, not one per controller)."""
    answers = await asyncio.gather(
        *(_call(a, RequestCode.CONTROLLER_GET_METADATA_INFO, None) for a in addresses)
    )
    for address, answer in zip(addresses, answers, strict=True):
        if answer is not None and str(answer.fields().get("isLeader", "")).lower() == "true":
            return address
    return None


def _names_master(info: ReplicaInfo | None, host: str) -> bool:
    """Whether `host` may still be master as far as anyone can tell (None: no leader)."""
    return info is None or (info.master_address or "").rpartition(":")[0] == host


async def _replica_info(addresses: list[str]) -> ReplicaInfo | str:
    """The broker set's replica info from the controller leader, or why there is none."""
    leader = await _find_leader(addresses)
    if leader is None:
        return "no controller answered as leader"
    answer = await _call(
        leader, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BROKER_NAME}
    )
    if answer is None:
        return f"the controller leader {leader} did not answer CONTROLLER_GET_REPLICA_INFO"
    if answer.code != ResponseCode.SUCCESS:
        return f"the controller leader {leader} knows no {BROKER_NAME} yet ({answer.remark})"
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
