"""Targets `local` and `local-rocketmq`: `brokergroup local up` (built-in brokers, or
stock RocketMQ 5.3 brokers with `--engine rocketmq`) under brokergroup's controllers,
driven from outside through `LocalRuntime` (state.json for PIDs, the controller API for
roles). The runtime's supervisor restarts a killed broker on a new loopback address, so
`revive()` has nothing to do.

A stock broker dials every link from 127.0.0.1 (and the controllers' notifications to it
leave from there too), so under `local-rocketmq` each controller and broker slot runs in a
group of its own (`local.nodeGidBase`, per lane: `GID_BASE`), its connection marks in
place before `local up` starts anything, and every node carries its group (state.json's
`gid`): the address-pair faults cut such links by owner, as on the `rocketmq` target
(`netfault.NodeGroups`)."""

from __future__ import annotations

import json
from pathlib import Path

from brokergroup_cli.chaos import netfault
from brokergroup_cli.chaos.runtime import LocalRuntime
from brokergroup_cli.chaos.targets.base import (
    ClientEndpoint,
    Node,
    NodeKind,
    ReplicaStore,
    TargetError,
)
from brokergroup_cli.chaos.targets.mqadmin import update_topic
from brokergroup_cli.local.config import node_gids
from brokergroup_cli.local.rocketmq_stock import find_home
from brokergroup_cli.local.state import ChildKind, ChildRecord

NAMESRV_PORT = 9876
_KINDS = {ChildKind.BROKER: NodeKind.BROKER, ChildKind.CONTROLLER: NodeKind.CONTROLLER}
#: `local.nodeGidBase` of lane L is this + 100 * L (clear of the rocketmq target's
#: 47000-47299, so runs on both at once never share a group).
GID_BASE = 47500


class LocalTarget(LocalRuntime):
    """A `local up` runtime as a chaos target (its own-protocol workload still reads the
    runtime's controller API and credentials through `LocalRuntime`)."""

    _groups: netfault.NodeGroups | None = None

    @property
    def name(self) -> str:
        return "local-rocketmq" if self.engine == "rocketmq" else "local"

    @property
    def node_gids(self) -> bool:
        """Whether the nodes are told apart by process group (stock brokers; module doc)."""
        return self.engine == "rocketmq"

    @property
    def gid_base(self) -> int:
        """This lane's `local.nodeGidBase`."""
        return GID_BASE + 100 * self.addresses.lane

    def gids(self) -> list[int]:
        """Every group `local.nodeGidBase` gives this runtime's controllers and brokers."""
        controllers, brokers = node_gids(
            self.gid_base, len(self.addresses.controller_hosts), self.brokers
        )
        return [g for g in (*controllers, *brokers) if g is not None]

    def up(self) -> None:
        if self.node_gids and self._groups is None:
            self._groups = netfault.NodeGroups()
            if self._groups.enabled:
                # Before any process starts: a connection's dialer is marked by its first packet.
                self._groups.mark(self.gids())
                self.settings = (*self.settings, f"local.nodeGidBase={self.gid_base}")
        try:
            super().up()
        except BaseException:
            self._unmark()
            raise

    def down(self) -> None:
        try:
            super().down()
        finally:
            self._unmark()

    def _unmark(self) -> None:
        if self._groups is not None:
            self._groups.unmark()
            self._groups = None

    def _commitlog_dir(self, slot: int) -> Path:
        base = self.broker_dir(slot)
        return base / "store" / "commitlog" if self.engine == "rocketmq" else base / "commitlog"

    def _node(self, child: ChildRecord) -> Node:
        kind = _KINDS[child.kind]
        broker = kind is NodeKind.BROKER
        return Node(
            kind,
            f"broker-{child.index}" if broker else f"controller-{child.index}",
            child.index,
            child.host,
            child.pid or 0,
            child.start_ticks,
            self.broker_dir(child.index) if broker else None,
            self._commitlog_dir(child.index) if broker else None,
            gid=child.gid,
        )

    def nodes(self, kind: NodeKind | None = None) -> list[Node]:
        out = []
        for child_kind, node_kind in _KINDS.items():
            if kind is None or kind is node_kind:
                out += [self._node(c) for c in self.live_children(child_kind)]
        return out

    def master(self) -> Node | None:
        info = self.replica_info()
        if info is None or not info.get("masterAlive") or not info.get("masterAddress"):
            return None
        host = str(info["masterAddress"]).rpartition(":")[0]
        return next((n for n in self.nodes(NodeKind.BROKER) if n.host == host), None)

    def controller_leader(self) -> Node | None:  # type: ignore[override]
        leader = super().controller_leader()
        return None if leader is None else self._node(leader)

    def healthy(self) -> bool:
        """The controller sees a live master and a full SyncStateSet, every broker
        process (the master's included) is really running (a new controller
        leader counts unheard brokers alive for a grace period), and every
        controller is running with a leader among them."""
        info = self.replica_info()
        if info is None or not info.get("masterAlive") or not info.get("masterAddress"):
            return False
        running = {c.host for c in self.live_children(ChildKind.BROKER)}
        master_host = str(info["masterAddress"]).rpartition(":")[0]
        if len(running) < self.brokers or master_host not in running:
            return False
        # Every controller back too: the next fault must not meet one still in its
        # restart backoff (a leader kill would then take out a majority).
        controllers = self.live_children(ChildKind.CONTROLLER)
        if len(controllers) < len(self.addresses.controller_hosts):
            return False
        if self.controller_leader() is None:
            return False
        rows = info.get("brokers")
        alive = (
            [b for b in rows if isinstance(b, dict) and b.get("alive")]
            if isinstance(rows, list)
            else []
        )
        sss = info.get("syncStateSet")
        return len(alive) >= self.brokers and isinstance(sss, list) and len(sss) >= self.brokers

    def revive(self) -> None:
        return None  # the supervisor restarts what died

    def client(self) -> ClientEndpoint:
        pair = self.client_pair()
        namesrv = ";".join(f"{h}:{NAMESRV_PORT}" for h in self.addresses.controller_hosts)
        tls = self.tls().stock_jvm_options()  # TLS verified against the CA under local.tls
        return ClientEndpoint(namesrv, pair.access_key, pair.secret_key, tls)

    def create_topic(self, topic: str, queues: int) -> None:
        create_topic(self, topic, queues)

    def replica_stores(self) -> list[ReplicaStore]:
        return [
            ReplicaStore(f"broker-{slot}", self._commitlog_dir(slot))
            for slot in range(self.brokers)
        ]


def create_topic(runtime: LocalRuntime, topic: str, queues: int) -> None:
    """`mqadmin updateTopic` on a `local up` runtime's group (also bench/rocketmq_client.py's)."""
    home = find_home()
    if isinstance(home, str):
        raise TargetError(home)
    # Creating a topic is an admin right: the group's broker pair has it, the client's not.
    keys = json.loads((runtime.root / "broker-keys.json").read_text())
    namesrv = ";".join(f"{h}:{NAMESRV_PORT}" for h in runtime.addresses.controller_hosts)
    update_topic(
        home, runtime.root / "chaos-mqadmin", namesrv, topic, queues,
        pair=(keys["accessKey"], keys["secretKey"]), jvm_options=runtime.tls().stock_jvm_options(),
    )  # fmt: skip
