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
    TORN_COMMITTED = "TORN_COMMITTED"
    TORN_TAIL = "TORN_TAIL"
    DUPLICATE = "DUPLICATE"
    DUPLICATE_QUEUE_OFFSET = "DUPLICATE_QUEUE_OFFSET"
    UNCOMMITTED_TAIL = "UNCOMMITTED_TAIL"
    EXPIRED = "EXPIRED"
    """Acknowledged, then deleted by retention from every replica (retention.py)."""

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
        FindingKind.TORN_COMMITTED,
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
    recover_offset: int | None = None
    """This project's storeCheckpoint recoverOffset: every byte below it was fsynced."""

    @property
    def durable_end(self) -> int | None:
        """Where the replica's own checkpoint says its log reaches at least."""
        return durable_end(self.confirm_offset, self.recover_offset)


def durable_end(confirm_offset: int | None, recover_offset: int | None) -> int | None:
    """The larger of the checkpoint's marks (None: the store has no checkpoint). Bytes
    below confirmOffset were confirmed by the SyncStateSet; bytes below recoverOffset
    were fsynced: a log that ends below either lost what its own store vouched for."""
    marks = [m for m in (confirm_offset, recover_offset) if m is not None]
    return max(marks) if marks else None


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


@dataclass(frozen=True)
class AgreementSpan:
    """[low, high) of one replica's log that it holds and has confirmed: where every
    other replica that also confirmed an offset must hold the same record."""

    group: str
    broker_id: int
    low: int
    high: int

    def covers(self, offset: int) -> bool:
        return self.low <= offset < self.high


def agreement_span(r: ReplicaFacts) -> AgreementSpan:
    confirmed = r.end_offset if r.confirm_offset is None else r.confirm_offset
    return AgreementSpan(
        r.group, r.broker_id, r.min_offset, max(r.min_offset, min(r.end_offset, confirmed))
    )


@dataclass(frozen=True)
class Copy:
    """One replica's record (or damaged region) starting at an offset."""

    broker_id: int
    record_crc: int
    size: int
    problem: str | None = None

    def describe(self) -> str:
        text = f"broker {self.broker_id}: {self.size} bytes crc {self.record_crc}"
        return text + (f" ({self.problem})" if self.problem else "")


def divergence(
    group: str, offset: int, copies: Sequence[Copy], spans: Sequence[AgreementSpan]
) -> Finding | None:
    """Replicas that both confirmed `offset` must hold the same record there.

    Judged per pair, each up to the smaller of the two confirmed ends (not up to the
    shortest replica of the group: one short replica would hide divergence between
    the others). Copies from replicas that have not confirmed `offset` are ignored.
    """
    expected = sorted(s.broker_id for s in spans if s.group == group and s.covers(offset))
    held = sorted((c for c in copies if c.broker_id in expected), key=lambda c: c.broker_id)
    if len(expected) < 2:
        return None
    missing = [b for b in expected if b not in {c.broker_id for c in held}]
    if not missing and len({(c.record_crc, c.size) for c in held}) == 1:
        return None
    text = f"{len(held)} of {len(expected)} replicas that confirmed this offset hold a record here"
    if missing:
        text += f" (none on broker {', '.join(map(str, missing))})"
    if held:
        text += "; " + ", ".join(c.describe() for c in held)
    return Finding(FindingKind.DIVERGENCE, group, None, offset, text)


#: The source's `problem` for a record cut short (a crash mid-write).
PARTIAL = "PARTIAL"


def damage(
    group: str, broker_id: int, offset: int, problem: str, detail: str, confirm_offset: int | None
) -> Finding:
    """A damaged record or region of one replica, judged by where it sits.

    `confirm_offset`: the replica's durable end (`durable_end`). Below it the replica
    confirmed (or fsynced) those bytes, so a torn record there costs data as much as a
    corrupt one; at or above it, a torn last record is what a crash mid-append leaves
    (recovery cuts it) and other damage is truncated at the next handshake. A store
    without a checkpoint confirmed every whole record it holds, but nothing proves a
    torn last record was ever confirmed: it is a torn tail.
    """
    committed = offset < confirm_offset if confirm_offset is not None else problem != PARTIAL
    if problem == PARTIAL:
        kind = FindingKind.TORN_COMMITTED if committed else FindingKind.TORN_TAIL
    else:
        kind = FindingKind.CORRUPT_RECORD if committed else FindingKind.UNCOMMITTED_TAIL
    text = f"{problem}: {detail}"
    if kind is FindingKind.TORN_COMMITTED:
        text += f" (below confirmOffset {confirm_offset})"
    return Finding(kind, group, broker_id, offset, text)


def short_of_checkpoint(r: ReplicaFacts, damaged_at: Iterable[int] = ()) -> Finding | None:
    """A replica whose valid records end before its own checkpoint's marks (confirmOffset,
    recoverOffset): the bytes between are zeroed or gone (a zero-filled tail reads as no
    records at all). The store itself proves the loss, so no acknowledgement log is
    needed. Not reported again when a damaged record is already reported where the
    valid records end."""
    mark = r.durable_end
    if mark is None or r.end_offset >= mark:
        return None
    if r.end_offset in set(damaged_at):
        return None
    vouched = []
    if r.confirm_offset is not None and r.confirm_offset > r.end_offset:
        vouched.append(f"confirmed up to {r.confirm_offset}")
    if r.recover_offset is not None and r.recover_offset > r.end_offset:
        vouched.append(f"fsynced up to {r.recover_offset} (recoverOffset)")
    return Finding(
        FindingKind.TORN_COMMITTED, r.group, r.broker_id, r.end_offset,
        f"valid records end at {r.end_offset} but broker {r.broker_id}'s checkpoint says it "
        f"{' and '.join(vouched)}: {mark - r.end_offset} bytes are zeroed or missing",
    )  # fmt: skip


@dataclass(frozen=True)
class StoredRecord:
    """What the reference log holds at an acknowledged physicalOffset."""

    topic: str
    queue_id: int
    queue_offset: int
    keys: str | None
    body_crc: int
    real_topic: str | None = None
    """REAL_TOPIC / REAL_QID: a delay or timer message is stored in a system topic
    (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer) and acknowledged with its real topic and
    queue but the system queue's offset (RocketMQ HookUtils.handleScheduleMessage)."""
    real_queue_id: int | None = None
    uniq_key: str | None = None
    """UNIQ_KEY: the client's message id, which the acknowledgement's msgId repeats."""


#: The message properties that say where a parked message really goes, and the client's id.
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
UNIQ_KEY = "UNIQ_KEY"

#: `produce` logs the full CRC32, the chaos tool RocketMQ's 31-bit UtilAll.crc32:
#: acknowledgements and records are compared on the 31 bits both carry.
CRC_BITS = 0x7FFFFFFF


def holds_acknowledged(ack: Mapping[str, Any], stored: StoredRecord) -> bool:
    """The record at an acknowledged physicalOffset is the acknowledged message: its queue
    (stored, or the REAL_TOPIC/REAL_QID it is parked for), queue offset, body CRC, and the
    key and message id when the acknowledgement names them. job.py's Spark filter is the
    same rule (a unit test checks both on the same cases)."""
    queue = (ack["topic"], ack["queueId"])
    return (
        (queue == (stored.topic, stored.queue_id) or queue == (stored.real_topic, stored.real_queue_id))
        and stored.queue_offset == ack["queueOffset"]
        and stored.body_crc & CRC_BITS == ack["bodyCrc"] & CRC_BITS
        and (ack["key"] is None or stored.keys == ack["key"])
        and (ack.get("msgId") is None or stored.uniq_key in (None, ack["msgId"]))
    )  # fmt: skip


def acked_missing(
    group: str, broker_id: int, ack: Mapping[str, Any], stored: StoredRecord | None
) -> Finding | None:
    """An acknowledgement (`job.acknowledged` fields) against the reference log's record
    at its physicalOffset: missing, or another record, is a lost acknowledged write."""
    if stored is not None and holds_acknowledged(ack, stored):
        return None
    what = (
        "no record at that offset"
        if stored is None
        else f"a different record is there ({stored.topic}/{stored.queue_id} queue offset "
        f"{stored.queue_offset}, key {stored.keys}, crc {stored.body_crc})"
    )
    return Finding(
        FindingKind.ACKED_MISSING, group, broker_id, ack["physicalOffset"],
        f"ack line {ack['ackLine']}: {ack['topic']}/{ack['queueId']} queue offset "
        f"{ack['queueOffset']} key {ack['key']} acknowledged at {ack['ackTimeMs']}: {what}",
    )  # fmt: skip


def duplicate(
    group: str, broker_id: int, topic: str, keys: str, at: Sequence[int]
) -> Finding | None:
    """One key and body stored more than once in the reference log (at-least-once)."""
    if len(at) < 2:
        return None
    return Finding(
        FindingKind.DUPLICATE, group, broker_id, min(at),
        f"topic {topic} key {keys} stored {len(at)} times at {sorted(at)}",
    )  # fmt: skip


def duplicate_queue_offset(
    group: str, broker_id: int, topic: str, queue_id: int, queue_offset: int, at: Sequence[int]
) -> Finding | None:
    """Two records on one queue slot: every consumer would skip one of them."""
    if len(at) < 2:
        return None
    return Finding(
        FindingKind.DUPLICATE_QUEUE_OFFSET, group, broker_id, min(at),
        f"{topic}/{queue_id} queue offset {queue_offset} used by {len(at)} records at {sorted(at)}",
    )  # fmt: skip


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
    """First offset of `r`'s log where its own epoch differs from the reference's (None:
    same lineage). Only where `r` still holds bytes: retention deleted its log below
    its min offset, and its epoch file dropped the entries that ended there (RocketMQ
    EpochFileCache.truncatePrefixByOffset), so an older epoch it no longer has is no
    difference."""
    for i, (epoch, start) in enumerate(ref.epochs):
        if start >= r.end_offset:
            return None
        end = ref.epochs[i + 1][1] if i + 1 < len(ref.epochs) else None
        if end is not None and end <= r.min_offset:
            continue
        at = max(start, r.min_offset)
        if _epoch_at(r.epochs, at) != epoch:
            return at
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
        # Bytes truncated: from a replica that still holds the old epoch's tail (0 when
        # its log ends exactly where the new epoch starts: the old master lost nothing) ...
        for r in replicas:
            # (A replica whose retention deleted `start` says nothing about that tail.)
            if (
                r is not ref
                and r.min_offset <= start <= r.end_offset
                and _epoch_at(r.epochs, start) != epoch
            ):
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
            # ... or from the old master's last reported maxOffset (controller view):
            # both are lower bounds, the larger one wins.
            if old_max is not None and (
                f.truncated_bytes is None or old_max - start > f.truncated_bytes
            ):
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
