"""The audit's decisions over small, already-collected facts (pure: no Spark, no I/O).

Spark does the per-record work (job.py); what comes back per group is small: epoch
files, replica ends, controller events, acknowledgement times. This module turns
those into findings and the failover list, and decides the exit code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class FindingKind(StrEnum):
    """Every finding the audit reports (docs/audit.md has an example of each)."""

    ACKED_MISSING = "ACKED_MISSING"
    DIVERGENCE = "DIVERGENCE"
    EPOCH_CONFLICT = "EPOCH_CONFLICT"
    CORRUPT_RECORD = "CORRUPT_RECORD"
    TORN_TAIL = "TORN_TAIL"
    DUPLICATE = "DUPLICATE"
    DUPLICATE_QUEUE_OFFSET = "DUPLICATE_QUEUE_OFFSET"
    UNCOMMITTED_TAIL = "UNCOMMITTED_TAIL"

    @property
    def costs_data(self) -> bool:
        """A finding a user pays for in lost or wrong data: the audit exits non-zero."""
        return self in _COSTS_DATA


_COSTS_DATA = frozenset(
    {
        FindingKind.ACKED_MISSING,
        FindingKind.DIVERGENCE,
        FindingKind.EPOCH_CONFLICT,
        FindingKind.CORRUPT_RECORD,
        FindingKind.DUPLICATE_QUEUE_OFFSET,
    }
)


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    group: str
    broker_id: int | None
    physical_offset: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "costsData": self.kind.costs_data,
            "group": self.group,
            "brokerId": self.broker_id,
            "physicalOffset": self.physical_offset,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class ReplicaFacts:
    group: str
    broker_id: int
    epochs: tuple[tuple[int, int], ...]
    min_offset: int
    end_offset: int
    """Just past the last valid record."""
    confirm_offset: int | None


@dataclass
class Failover:
    group: str
    epoch: int
    start_offset: int
    previous_epoch: int | None
    truncated_bytes: int | None = None
    truncated_source: str = ""
    new_master_broker_id: int | None = None
    previous_master_broker_id: int | None = None
    elected_at_ms: int | None = None
    unavailable_ms: int | None = None
    """Controller view: previous master's last heartbeat → new master elected."""
    ack_gap_ms: int | None = None
    """Client view: last acknowledgement in an older epoch → first in this one."""
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        return {_camel(k): v for k, v in out.items()}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def reference_replica(replicas: Sequence[ReplicaFacts]) -> ReplicaFacts:
    """The replica a controller would elect: newest epoch, then longest log, then lowest id."""
    return max(
        replicas,
        key=lambda r: (r.epochs[-1][0] if r.epochs else 0, r.end_offset, -r.broker_id),
    )


def committed_prefix(replicas: Sequence[ReplicaFacts]) -> tuple[int, int]:
    """[start, end) every replica of a group holds and has confirmed: where they must agree."""
    start = max(r.min_offset for r in replicas)
    end = min(
        min(r.end_offset, r.confirm_offset if r.confirm_offset is not None else r.end_offset)
        for r in replicas
    )
    return start, max(start, end)


def epoch_conflicts(replicas: Sequence[ReplicaFacts]) -> list[Finding]:
    """Two replicas of a group that give one epoch different start offsets."""
    seen: dict[int, tuple[int, int]] = {}
    out: list[Finding] = []
    for r in sorted(replicas, key=lambda x: x.broker_id):
        for epoch, start in r.epochs:
            first = seen.setdefault(epoch, (r.broker_id, start))
            if first[1] != start:
                out.append(
                    Finding(
                        FindingKind.EPOCH_CONFLICT,
                        r.group,
                        r.broker_id,
                        start,
                        f"epoch {epoch} starts at {start} on broker {r.broker_id} but at "
                        f"{first[1]} on broker {first[0]}",
                    )
                )
    return out


def uncommitted_tails(replicas: Sequence[ReplicaFacts], ref: ReplicaFacts) -> list[Finding]:
    """A replica whose log runs on past where the reference lineage started a newer
    epoch: bytes the next handshake truncates (never acknowledged if the commit rule held)."""
    out: list[Finding] = []
    for r in replicas:
        if r is ref:
            continue
        cut = _divergence_point(r, ref)
        if cut is not None and r.end_offset > cut:
            out.append(
                Finding(
                    FindingKind.UNCOMMITTED_TAIL,
                    r.group,
                    r.broker_id,
                    cut,
                    f"{r.end_offset - cut} bytes past {cut} belong to an older epoch than the "
                    f"reference broker {ref.broker_id}'s; they will be truncated",
                )
            )
    return out


def _epoch_at(epochs: Sequence[tuple[int, int]], offset: int) -> int | None:
    found = None
    for epoch, start in epochs:
        if start <= offset:
            found = epoch
    return found


def _divergence_point(r: ReplicaFacts, ref: ReplicaFacts) -> int | None:
    """First reference epoch start at which `r`'s own epoch differs (None: same lineage)."""
    for epoch, start in ref.epochs:
        if start >= r.end_offset:
            return None
        if _epoch_at(r.epochs, start) != epoch:
            return start
    return None


def failovers(
    replicas: Sequence[ReplicaFacts],
    events: Sequence[Mapping[str, Any]],
    ack_epochs: Mapping[int, tuple[int, int]],
) -> list[Failover]:
    """One entry per epoch change in the reference lineage.

    `events`: this group's controller events (docs/audit.md format), oldest first.
    `ack_epochs`: masterEpoch -> (first, last) ackTimeMs of acknowledgements in it.
    """
    ref = reference_replica(replicas)
    out: list[Failover] = []
    for i, (epoch, start) in enumerate(ref.epochs):
        if i == 0:
            continue
        f = Failover(ref.group, epoch, start, ref.epochs[i - 1][0])
        # Bytes truncated: from a replica that still holds the old epoch's tail ...
        for r in replicas:
            if r is not ref and _epoch_at(r.epochs, start) != epoch and r.end_offset > start:
                f.truncated_bytes = max(f.truncated_bytes or 0, r.end_offset - start)
                f.truncated_source = f"broker {r.broker_id}'s log still holds them"
        elected = _election_event(events, epoch)
        if elected is not None:
            f.elected_at_ms = _int(elected.get("timeMs"))
            f.new_master_broker_id = _int(elected.get("masterBrokerId"))
            f.previous_master_broker_id = _int(elected.get("previousMasterBrokerId"))
            last_hb = _int(elected.get("previousMasterLastHeartbeatMs"))
            if f.elected_at_ms is not None and last_hb is not None:
                f.unavailable_ms = max(0, f.elected_at_ms - last_hb)
            old_max = _int(elected.get("previousMasterMaxOffset"))
            # ... or from the old master's last reported maxOffset (controller view).
            if f.truncated_bytes is None and old_max is not None:
                f.truncated_bytes = max(0, old_max - start)
                f.truncated_source = "previous master's last heartbeat maxOffset"
        if f.truncated_bytes is None:
            f.truncated_source = "unknown (no replica holds the old tail; no controller events)"
        older = [last for e, (_, last) in ack_epochs.items() if e < epoch]
        this = ack_epochs.get(epoch)
        if older and this is not None:
            f.ack_gap_ms = max(0, this[0] - max(older))
        out.append(f)
    return out


def _election_event(events: Iterable[Mapping[str, Any]], epoch: int) -> Mapping[str, Any] | None:
    for e in events:
        if e.get("type") == "MasterElected" and _int(e.get("masterEpoch")) == epoch:
            return e
    return None


def _int(value: object) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float | str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def unavailability_windows(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per group: intervals without an alive master, from the controller events."""
    out: list[dict[str, Any]] = []
    for e in events:
        if e.get("type") != "MasterElected":
            continue
        t = _int(e.get("timeMs"))
        hb = _int(e.get("previousMasterLastHeartbeatMs"))
        if t is None or hb is None:
            continue
        out.append(
            {
                "group": e.get("brokerName"),
                "fromMs": hb,
                "toMs": t,
                "durationMs": max(0, t - hb),
                "masterEpoch": _int(e.get("masterEpoch")),
                "newMaster": _int(e.get("masterBrokerId")),
                "previousMaster": _int(e.get("previousMasterBrokerId")),
            }
        )
    return out


def exit_code(findings: Iterable[Finding]) -> int:
    return 1 if any(f.kind.costs_data for f in findings) else 0
