"""`brokergroup local kill TARGET`: which process a target names (pure).

Targets:
    master              the broker process that is the group's current master
    broker-ID           the broker process holding BrokerId ID
    controller-leader   the controller node that is the Raft leader
    controller-N        controller node N (1-based, as in --node-id)

Resolution reads a `StatusSnapshot`, so "master" means what the controller
says now (not what the broker last claimed), and a target whose process is
not running is refused with the reason instead of signalling anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from brokergroup_cli.local.status import StatusSnapshot


class TargetKind(StrEnum):
    MASTER = "master"
    BROKER = "broker"
    CONTROLLER_LEADER = "controller-leader"
    CONTROLLER = "controller"


class TargetError(ValueError):
    """The target is malformed or names nothing that runs now."""


@dataclass(frozen=True)
class KillRequest:
    kind: TargetKind
    number: int | None = None


@dataclass(frozen=True)
class KillTarget:
    pid: int
    start_ticks: int | None
    description: str


_NUMBERED = re.compile(r"^(broker|controller)-(\d+)$")


def parse_target(text: str) -> KillRequest:
    word = text.strip().lower()
    if word == "master":
        return KillRequest(TargetKind.MASTER)
    if word == "controller-leader":
        return KillRequest(TargetKind.CONTROLLER_LEADER)
    match = _NUMBERED.match(word)
    if match:
        kind = TargetKind.BROKER if match.group(1) == "broker" else TargetKind.CONTROLLER
        return KillRequest(kind, int(match.group(2)))
    raise TargetError(
        f"unknown target {text!r}: use master, broker-ID, controller-leader or controller-N"
    )


def awaits_controllers(request: KillRequest, snapshot: StatusSnapshot) -> bool:
    """Whether `request` names a process by the controllers' view and `snapshot` has none
    (no controller answered: a Raft election, a suspended leader). The view, not the group,
    is missing, so `local kill` asks again for a while instead of refusing."""
    if request.kind is TargetKind.MASTER:
        return snapshot.master_epoch is None
    if request.kind is TargetKind.CONTROLLER_LEADER:
        return snapshot.leader_node_id is None
    return False


def resolve_target(request: KillRequest, snapshot: StatusSnapshot) -> KillTarget:
    if request.kind in (TargetKind.MASTER, TargetKind.BROKER):
        if request.kind is TargetKind.MASTER:
            if snapshot.master_epoch is None:
                why = "; ".join(snapshot.problems) or "no answer"
                raise TargetError(f"no controller answered with the group's master ({why})")
            if snapshot.master_broker_id is None:
                raise TargetError(
                    f"the group has no live master now (masterEpoch {snapshot.master_epoch})"
                )
            broker_id = snapshot.master_broker_id
            what = f"master broker {broker_id}"
        else:
            assert request.number is not None
            broker_id = request.number
            what = f"broker {broker_id}"
        rows = [b for b in snapshot.brokers if b.broker_id == broker_id]
        if not rows:
            known = sorted(b.broker_id for b in snapshot.brokers if b.broker_id is not None)
            raise TargetError(f"no broker process holds BrokerId {broker_id} (known: {known})")
        row = rows[0]
        if row.pid is None or row.process not in ("running", "starting"):
            raise TargetError(f"{what} (slot {row.slot}) is not running: {row.process}")
        return KillTarget(
            pid=row.pid,
            start_ticks=row.start_ticks,
            description=f"{what} (slot {row.slot}, {row.address}, pid {row.pid})",
        )
    if request.kind is TargetKind.CONTROLLER_LEADER:
        if snapshot.leader_node_id is None:
            raise TargetError("no controller reports a Raft leader now")
        node_id = snapshot.leader_node_id
        what = f"controller leader controller-{node_id}"
    else:
        assert request.number is not None
        node_id = request.number
        what = f"controller-{node_id}"
    controllers = [c for c in snapshot.controllers if c.node_id == node_id]
    if not controllers:
        ids = [c.node_id for c in snapshot.controllers]
        raise TargetError(f"there is no controller-{node_id} (nodes: {ids})")
    row_c = controllers[0]
    if row_c.pid is None or row_c.process not in ("running", "starting"):
        raise TargetError(f"{what} is not running: {row_c.process}")
    term = f", term {row_c.term}" if row_c.term is not None else ""
    return KillTarget(
        pid=row_c.pid,
        start_ticks=row_c.start_ticks,
        description=f"{what} ({row_c.address}{term}, pid {row_c.pid})",
    )
