"""The status view's model: one snapshot of the whole local installation.

`build_snapshot` (pure) joins four sources, each possibly missing:

- the state file / supervisor memory: which process runs each slot, its
  pid, address, restart count;
- the controller's ReplicaInfo (`GET /v1/replica-info`): master, masterEpoch,
  SyncStateSet + epoch, and per BrokerId the leader's liveness view with the
  last heartbeat's offsets;
- each broker's own `GET /v1/status`: BrokerId, role, offsets;
- each controller's `GET /v1/raft`: leader and term.

A broker's own answer wins over the controller's heartbeat copy (it is
fresher); the controller decides `alive` (it is the one that elects).
Rendering is plain text (the live view redraws it with ANSI codes) or JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_cli.local.state import ChildRecord, Phase, RuntimeState


@dataclass(frozen=True)
class BrokerRow:
    slot: int
    broker_id: int | None
    address: str
    role: str
    """master / slave (from the broker, else inferred), starting, backoff, down."""
    alive: bool | None
    """The controller leader's liveness view of this BrokerId (None: unknown)."""
    process: str
    """running / starting / backoff / stopped / dead (supervisor's view)."""
    pid: int | None
    start_ticks: int | None
    max_offset: int | None
    confirm_offset: int | None
    lag: int | None
    """Bytes behind the master: master maxOffset − this maxOffset."""
    in_sync_state_set: bool
    restarts: int
    previous_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerRow:
    node_id: int
    address: str
    raft_address: str
    pid: int | None
    start_ticks: int | None
    process: str
    reachable: bool
    is_leader: bool
    term: int | None
    commit_index: int | None
    restarts: int


@dataclass(frozen=True)
class StatusSnapshot:
    root_dir: str
    cluster_name: str
    broker_name: str
    taken_at_ms: int
    supervisor_pid: int | None
    supervisor_alive: bool
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set: tuple[int, ...]
    sync_state_set_epoch: int | None
    leader_node_id: int | None
    leader_term: int | None
    brokers: tuple[BrokerRow, ...]
    controllers: tuple[ControllerRow, ...]
    problems: tuple[str, ...] = ()
    # The master the controller records while it is not alive (master_broker_id is None then).
    dead_master_broker_id: int | None = None
    event_loop: str | None = None
    """The event loop the supervisor runs on and starts its children on (None: unknown)."""

    def to_json(self) -> dict[str, Any]:
        master = (
            None
            if self.master_broker_id is None
            else {"brokerId": self.master_broker_id, "address": self.master_address}
        )
        return {
            "dir": self.root_dir,
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "takenAtMs": self.taken_at_ms,
            "supervisor": {"pid": self.supervisor_pid, "alive": self.supervisor_alive},
            "eventLoop": self.event_loop,
            "master": master,
            "deadMasterBrokerId": self.dead_master_broker_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": list(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "controllerLeader": (
                None
                if self.leader_node_id is None
                else {"nodeId": self.leader_node_id, "term": self.leader_term}
            ),
            "brokers": [
                {
                    "slot": b.slot,
                    "brokerId": b.broker_id,
                    "address": b.address,
                    "role": b.role,
                    "alive": b.alive,
                    "process": b.process,
                    "pid": b.pid,
                    "maxOffset": b.max_offset,
                    "confirmOffset": b.confirm_offset,
                    "lag": b.lag,
                    "inSyncStateSet": b.in_sync_state_set,
                    "restarts": b.restarts,
                    "previousAddresses": list(b.previous_hosts),
                }
                for b in self.brokers
            ],
            "controllers": [
                {
                    "nodeId": c.node_id,
                    "address": c.address,
                    "raftAddress": c.raft_address,
                    "pid": c.pid,
                    "process": c.process,
                    "reachable": c.reachable,
                    "isLeader": c.is_leader,
                    "term": c.term,
                    "commitIndex": c.commit_index,
                    "restarts": c.restarts,
                }
                for c in self.controllers
            ],
            "problems": list(self.problems),
        }


def _process_word(record: ChildRecord, alive: bool) -> str:
    if record.phase is Phase.STOPPED:
        return "stopped"
    if record.phase is Phase.BACKOFF:
        return "backoff"
    if not alive:
        return "dead"
    return "running" if record.phase is Phase.RUNNING else "starting"


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def build_snapshot(
    state: RuntimeState,
    *,
    cluster_name: str,
    broker_name: str,
    raft_port: int,
    replica_info: Mapping[str, Any] | None,
    raft: Mapping[int, Mapping[str, Any] | None],
    broker_status: Mapping[int, Mapping[str, Any] | None],
    process_alive: Mapping[tuple[str, int], bool],
    supervisor_alive: bool,
    now_ms: int,
    problems: tuple[str, ...] = (),
) -> StatusSnapshot:
    """Join the sources (see module doc). Missing sources give None fields."""
    info = replica_info or {}
    recorded_master = _int_or_none(info.get("masterBrokerId"))
    # Controllers before masterAlive sent the id only while the master was alive.
    master_alive = bool(info.get("masterAlive", recorded_master is not None))
    master_id = recorded_master if master_alive else None
    master_address = info.get("masterAddress") if master_id is not None else None
    sync_state_set = tuple(sorted(int(x) for x in info.get("syncStateSet", []) or []))
    liveness: dict[int, Mapping[str, Any]] = {}
    by_address: dict[str, int] = {}
    for entry in info.get("brokers", []) or []:
        broker_id = _int_or_none(entry.get("brokerId"))
        if broker_id is None:
            continue
        liveness[broker_id] = entry
        if entry.get("address"):
            by_address[str(entry["address"])] = broker_id

    partial: list[dict[str, Any]] = []
    # A running broker the controller holds not alive (a full disk, say): say why.
    not_alive: list[str] = []
    for record in state.brokers:
        own = broker_status.get(record.index) or {}
        alive_proc = process_alive.get((record.kind.value, record.index), False)
        broker_id = _int_or_none(own.get("brokerId")) if own else None
        if broker_id is None:
            broker_id = record.broker_id
        if broker_id is None:
            broker_id = by_address.get(record.address)
        view = liveness.get(broker_id, {}) if broker_id is not None else {}
        # The controller's entry describes this process only if it has its address.
        view_current = bool(view) and str(view.get("address")) == record.address
        max_offset = _int_or_none(own.get("maxOffset"))
        confirm_offset = _int_or_none(own.get("confirmOffset"))
        # The heartbeat copy stands in only for a running process at that address.
        if max_offset is None and view_current and alive_proc:
            max_offset = _int_or_none(view.get("maxOffset"))
        if confirm_offset is None and view_current and alive_proc:
            confirm_offset = _int_or_none(view.get("confirmOffset"))
        process = _process_word(record, alive_proc)
        if process in ("backoff", "stopped", "dead"):
            role = "down" if process == "dead" else process
        elif own.get("role"):
            role = str(own["role"]).lower()
        elif broker_id is not None and broker_id == master_id:
            role = "master"
        elif broker_id is not None and view_current:
            role = "slave"
        else:
            role = "starting"
        alive: bool | None = None
        if view:
            alive = bool(view.get("alive")) and view_current
        elif replica_info is not None:
            alive = False
        if view_current and alive_proc and not alive and view.get("inactiveReason"):
            not_alive.append(
                f"broker {broker_id} ({record.address}) is running but not alive to the "
                f"controller: {view['inactiveReason']}"
            )
        partial.append(
            {
                "record": record,
                "broker_id": broker_id,
                "role": role,
                "alive": alive,
                "process": process,
                "max_offset": max_offset,
                "confirm_offset": confirm_offset,
            }
        )

    master_max: int | None = None
    for row in partial:
        if master_id is not None and row["broker_id"] == master_id:
            master_max = row["max_offset"]
    if master_max is None and master_id is not None and master_id in liveness:
        master_max = _int_or_none(liveness[master_id].get("maxOffset"))

    brokers: list[BrokerRow] = []
    for row in partial:
        record = row["record"]
        is_master = row["broker_id"] is not None and row["broker_id"] == master_id
        lag = lag_bytes(master_max, row["max_offset"], is_master)
        brokers.append(
            BrokerRow(
                slot=record.index,
                broker_id=row["broker_id"],
                address=record.address,
                role=row["role"],
                alive=row["alive"],
                process=row["process"],
                pid=record.pid,
                start_ticks=record.start_ticks,
                max_offset=row["max_offset"],
                confirm_offset=row["confirm_offset"],
                lag=lag,
                in_sync_state_set=row["broker_id"] in sync_state_set,
                restarts=record.restarts,
                previous_hosts=record.previous_hosts,
            )
        )

    controllers: list[ControllerRow] = []
    leader_node_id: int | None = None
    leader_term: int | None = None
    raft_addresses = {c.index: f"{c.host}:{raft_port}" for c in state.controllers}
    claimed_leader: str | None = None
    for record in state.controllers:
        answer = raft.get(record.index)
        is_leader = bool(answer and answer.get("isLeader"))
        term = _int_or_none(answer.get("term")) if answer else None
        if is_leader:
            if leader_term is None or (term is not None and term >= leader_term):
                leader_node_id, leader_term = record.index, term
        elif answer and answer.get("leader") and claimed_leader is None:
            claimed_leader = str(answer["leader"])
        controllers.append(
            ControllerRow(
                node_id=record.index,
                address=record.address,
                raft_address=raft_addresses[record.index],
                pid=record.pid,
                start_ticks=record.start_ticks,
                process=_process_word(
                    record, process_alive.get((record.kind.value, record.index), False)
                ),
                reachable=answer is not None,
                is_leader=is_leader,
                term=term,
                commit_index=_int_or_none(answer.get("commitIndex")) if answer else None,
                restarts=record.restarts,
            )
        )
    if leader_node_id is None and claimed_leader is not None:
        for node_id, address in raft_addresses.items():
            if address == claimed_leader:
                leader_node_id = node_id
                leader_term = max((c.term for c in controllers if c.term is not None), default=None)

    return StatusSnapshot(
        root_dir=state.root_dir,
        cluster_name=cluster_name,
        broker_name=broker_name,
        taken_at_ms=now_ms,
        supervisor_pid=state.supervisor_pid,
        supervisor_alive=supervisor_alive,
        master_broker_id=master_id,
        master_address=master_address,
        master_epoch=_int_or_none(info.get("masterEpoch")),
        sync_state_set=sync_state_set,
        sync_state_set_epoch=_int_or_none(info.get("syncStateSetEpoch")),
        leader_node_id=leader_node_id,
        leader_term=leader_term,
        brokers=tuple(brokers),
        controllers=tuple(controllers),
        problems=(*problems, *not_alive),
        dead_master_broker_id=None if master_alive else recorded_master,
        event_loop=state.event_loop,
    )


def cell(value: object) -> str:
    """One table cell: `-` for unknown, yes/no for booleans."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned columns as wide as their widest cell."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def lag_bytes(master_max_offset: int | None, max_offset: int | None, is_master: bool) -> int | None:
    """Bytes a replica is behind its master (0 for the master itself, None if unknown)."""
    if is_master:
        return 0
    if master_max_offset is None or max_offset is None:
        return None
    return max(0, master_max_offset - max_offset)


def group_lines(
    *,
    master_broker_id: int | None,
    master_where: str | None,
    dead_master_broker_id: int | None,
    master_epoch: int | None,
    sync_state_set: tuple[int, ...],
    sync_state_set_epoch: int | None,
) -> list[str]:
    """The master and SyncStateSet lines (also `kubectl brokergroup status`'s)."""
    if master_broker_id is None and dead_master_broker_id is not None:
        master = (
            f"master: broker {dead_master_broker_id} is not alive (awaiting election)   "
            f"masterEpoch {cell(master_epoch)}"
        )
    elif master_broker_id is None:
        master = f"master: none          masterEpoch {cell(master_epoch)}"
    else:
        master = (
            f"master: broker {master_broker_id} at {master_where}   "
            f"masterEpoch {cell(master_epoch)}"
        )
    sss = "{" + ", ".join(str(i) for i in sync_state_set) + "}"
    return [master, f"SyncStateSet: {sss}   syncStateSetEpoch {cell(sync_state_set_epoch)}"]


def render_text(snapshot: StatusSnapshot, clock: str = "") -> str:
    """The human view (`local status`, and each frame of the live view)."""
    s = snapshot
    lines = [
        f"brokergroup local · {s.cluster_name}/{s.broker_name} · {s.root_dir}"
        + (f" · {clock}" if clock else ""),
    ]
    if s.supervisor_pid is None:
        lines.append("supervisor: not running")
    elif not s.supervisor_alive:
        lines.append(f"supervisor: pid {s.supervisor_pid} is gone (run `local down` to clean up)")
    lines += group_lines(
        master_broker_id=s.master_broker_id,
        master_where=s.master_address,
        dead_master_broker_id=s.dead_master_broker_id,
        master_epoch=s.master_epoch,
        sync_state_set=s.sync_state_set,
        sync_state_set_epoch=s.sync_state_set_epoch,
    )
    if s.leader_node_id is None:
        lines.append("controller leader: none")
    else:
        leader = next((c for c in s.controllers if c.node_id == s.leader_node_id), None)
        where = f" ({leader.address})" if leader else ""
        lines.append(
            f"controller leader: controller-{s.leader_node_id}{where}   term {cell(s.leader_term)}"
        )
    lines.append("")
    lines += table(
        [
            "SLOT",
            "ID",
            "ADDRESS",
            "ROLE",
            "ALIVE",
            "IN-SYNC",
            "MAXOFFSET",
            "CONFIRM",
            "LAG",
            "RESTARTS",
            "PROCESS",
            "PID",
        ],
        [
            [
                str(b.slot),
                cell(b.broker_id),
                b.address,
                b.role,
                cell(b.alive),
                cell(b.in_sync_state_set),
                cell(b.max_offset),
                cell(b.confirm_offset),
                cell(b.lag),
                str(b.restarts),
                b.process,
                cell(b.pid),
            ]
            for b in s.brokers
        ],
    )
    lines.append("")
    lines += table(
        ["CONTROLLER", "ADDRESS", "RAFT", "TERM", "COMMIT", "RESTARTS", "PROCESS", "PID"],
        [
            [
                f"controller-{c.node_id}",
                c.address,
                "leader" if c.is_leader else ("follower" if c.reachable else "unreachable"),
                cell(c.term),
                cell(c.commit_index),
                str(c.restarts),
                c.process,
                cell(c.pid),
            ]
            for c in s.controllers
        ],
    )
    if s.problems:
        lines.append("")
        lines += [f"! {p}" for p in s.problems]
    return "\n".join(lines)
