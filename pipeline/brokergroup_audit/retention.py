"""What retention deleted, and which acknowledgements it took (pure: no Spark, no I/O).

The broker deletes whole commit log segments oldest first, so a replica's log starts at
its first remaining segment (its min offset). Before unlinking a segment it appends one
JSON line to `<store>/retention.log` (rotated to `retention.log.1` beyond 1 MiB):

    {"atMs": 1795425426297, "segment": "00000000000001048576", "fromOffset": 1048576,
     "toOffset": 2097152, "reason": "expired", "newMinOffset": 2097152}

`reason`: "expired" (older than fileReservedTime), "disk" (above
diskMaxUsedSpaceRatio) or "forced" (above diskSpaceCleanForciblyRatio, unexpired).

An acknowledged message is EXPIRED when its offset is below what EVERY replica of its
group still holds: retention deleted it everywhere, nothing was lost. Below the
reference replica's min offset but still held by another replica it is judged on that
replica's log (`holders`), so one replica deleting earlier than another is neither a
loss nor a divergence. docs/audit.md, "Retention".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from brokergroup_audit.checks import Finding, FindingKind, ReplicaFacts

RETENTION_LOG = "retention.log"
#: Older lines, moved aside when retention.log passes 1 MiB (read first).
RETENTION_LOG_ROTATED = "retention.log.1"
REASONS = ("expired", "disk", "forced")
#: The offset no holder range ends at (the reference's range is open upwards).
OPEN_END = (1 << 63) - 1
_SEGMENT = re.compile(r"^\d{20}$")
_FIELDS = ("atMs", "fromOffset", "toOffset", "newMinOffset")


@dataclass(frozen=True)
class Deletion:
    """One line of a retention.log: a segment the broker was about to unlink."""

    at_ms: int
    segment: str
    from_offset: int
    to_offset: int
    reason: str
    new_min_offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "atMs": self.at_ms,
            "segment": self.segment,
            "fromOffset": self.from_offset,
            "toOffset": self.to_offset,
            "reason": self.reason,
            "newMinOffset": self.new_min_offset,
        }


def parse_retention_log(text: str, name: str) -> tuple[list[Deletion], list[str]]:
    """The deletions of one retention.log file, and a problem per line that is not one.

    A bad line is skipped and named, never fatal: the log is evidence about the store,
    and the audit still reads the segments themselves. A last line without its newline
    is what a crash mid-append leaves: named as torn."""
    deletions: list[Deletion] = []
    problems: list[str] = []
    lines = text.split("\n")
    torn_last = lines[-1] != ""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            deletions.append(_deletion(json.loads(line)))
        except (ValueError, TypeError, KeyError) as exc:
            why = "torn last line (no newline)" if torn_last and n == len(lines) else str(exc)
            problems.append(f"{name}:{n}: {why}")
    return deletions, problems


def _deletion(value: object) -> Deletion:
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    numbers = {}
    for key in _FIELDS:
        v = value[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValueError(f"{key} {v!r} is not an offset or time")
        numbers[key] = v
    segment, reason = value["segment"], value["reason"]
    if not isinstance(segment, str) or not _SEGMENT.match(segment):
        raise ValueError(f"segment {segment!r} is not a 20-digit name")
    if int(segment) != numbers["fromOffset"] or numbers["toOffset"] <= numbers["fromOffset"]:
        raise ValueError(
            f"segment {segment} does not span fromOffset {numbers['fromOffset']} .. "
            f"toOffset {numbers['toOffset']}"
        )
    if reason not in REASONS:
        raise ValueError(f"reason {reason!r} is not one of {', '.join(REASONS)}")
    return Deletion(
        numbers["atMs"], segment, numbers["fromOffset"], numbers["toOffset"], reason,
        numbers["newMinOffset"],
    )  # fmt: skip


@dataclass(frozen=True)
class DeletedRange:
    """Adjacent logged deletions of one reason: [from_offset, to_offset)."""

    from_offset: int
    to_offset: int
    reason: str
    segments: int
    first_at_ms: int
    last_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "fromOffset": self.from_offset,
            "toOffset": self.to_offset,
            "reason": self.reason,
            "segments": self.segments,
            "firstAtMs": self.first_at_ms,
            "lastAtMs": self.last_at_ms,
        }


@dataclass(frozen=True)
class ReplicaRetention:
    """What one replica no longer holds below its min offset, and why."""

    group: str
    broker_id: int
    min_offset: int
    deleted: tuple[DeletedRange, ...]
    """Logged deletions below min_offset, oldest first."""
    unlogged: tuple[tuple[int, int], ...]
    """[from, to) below min_offset that no retention.log line explains: deleted before
    the oldest line kept (the log rotates), by a broker that writes no such log
    (RocketMQ), or never held (a replica that started from its master's minimum)."""
    pending: tuple[Deletion, ...]
    """Logged, but the segment is still there (a crash between the line and the unlink:
    the broker deletes it again)."""
    problems: tuple[str, ...] = ()

    @property
    def deleted_bytes(self) -> int:
        return sum(d.to_offset - d.from_offset for d in self.deleted)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "minOffset": self.min_offset,
            "deleted": [d.to_json() for d in self.deleted],
            "deletedBytes": self.deleted_bytes,
            "unlogged": [list(u) for u in self.unlogged],
            "pending": [p.to_json() for p in self.pending],
            "problems": list(self.problems),
        }

    def describe(self) -> str:
        parts = [f"[{d.from_offset}, {d.to_offset}) {d.reason}" for d in self.deleted]
        parts += [f"[{a}, {b}) not in its retention.log" for a, b in self.unlogged]
        return f"broker {self.broker_id} " + ("; ".join(parts) or "deleted nothing")


def replica_retention(
    group: str,
    broker_id: int,
    min_offset: int,
    deletions: Iterable[Deletion],
    problems: Sequence[str] = (),
) -> ReplicaRetention:
    """Merge a replica's logged deletions (both files, any order) into ranges below its
    min offset. A segment logged twice (deleted again after a crash) counts once, at
    its last line. The log starts at 0 (this project's and RocketMQ's commit logs)."""
    by_segment: dict[int, Deletion] = {}
    for d in deletions:
        if d.from_offset not in by_segment or d.at_ms >= by_segment[d.from_offset].at_ms:
            by_segment[d.from_offset] = d
    done = sorted((d for d in by_segment.values() if d.from_offset < min_offset),
                  key=lambda d: d.from_offset)  # fmt: skip
    pending = tuple(sorted((d for d in by_segment.values() if d.from_offset >= min_offset),
                           key=lambda d: d.from_offset))  # fmt: skip
    merged: list[DeletedRange] = []
    for d in done:
        to = min(d.to_offset, min_offset)
        last = merged[-1] if merged else None
        if last is not None and last.to_offset == d.from_offset and last.reason == d.reason:
            merged[-1] = DeletedRange(
                last.from_offset, to, d.reason, last.segments + 1,
                min(last.first_at_ms, d.at_ms), max(last.last_at_ms, d.at_ms),
            )  # fmt: skip
        else:
            merged.append(DeletedRange(d.from_offset, to, d.reason, 1, d.at_ms, d.at_ms))
    unlogged: list[tuple[int, int]] = []
    at = 0
    for r in merged:
        if r.from_offset > at:
            unlogged.append((at, r.from_offset))
        at = max(at, r.to_offset)
    if at < min_offset:
        unlogged.append((at, min_offset))
    return ReplicaRetention(
        group, broker_id, min_offset, tuple(merged), tuple(unlogged), pending, tuple(problems)
    )


def retaining(replicas: Sequence[ReplicaFacts]) -> list[ReplicaFacts]:
    """The replicas that hold any record (an empty or never-synced one retains nothing,
    so it does not lower what every replica retains)."""
    return [r for r in replicas if r.end_offset > r.min_offset]


def expired_below(replicas: Sequence[ReplicaFacts]) -> int:
    """Offsets below this are held by no replica of the group: retention deleted them
    everywhere. 0 when no replica holds anything (then nothing is called expired)."""
    holding = retaining(replicas)
    return min(r.min_offset for r in holding) if holding else 0


@dataclass(frozen=True)
class Holder:
    """The replica whose log answers for acknowledgements at [low, high)."""

    broker_id: int
    low: int
    high: int


def holders(replicas: Sequence[ReplicaFacts], ref: ReplicaFacts) -> list[Holder]:
    """Disjoint ranges covering [expired_below, OPEN_END): the reference from its own min
    offset up (and wherever no replica holds the offset: a loss is judged on it, as
    before retention); below that, the first replica in brokerId order whose
    [min, end) holds the offset."""
    low = min(expired_below(replicas), ref.min_offset)
    others = sorted((r for r in retaining(replicas) if r is not ref), key=lambda r: r.broker_id)
    cuts = sorted({low, ref.min_offset, *(x for r in others for x in (r.min_offset, r.end_offset))})
    out: list[Holder] = []
    for a, b in zip(cuts, [*cuts[1:], OPEN_END], strict=True):
        if a < low or a >= b:
            continue
        owner = ref if a >= ref.min_offset else next(
            (r for r in others if r.min_offset <= a < r.end_offset), ref
        )  # fmt: skip
        if out and out[-1].broker_id == owner.broker_id and out[-1].high == a:
            out[-1] = Holder(owner.broker_id, out[-1].low, b)
        else:
            out.append(Holder(owner.broker_id, a, b))
    return out


def holder_of(ranges: Sequence[Holder], offset: int) -> int | None:
    return next((h.broker_id for h in ranges if h.low <= offset < h.high), None)


@dataclass(frozen=True)
class ExpiredAcks:
    """The acknowledgements of one group below `expired_below`."""

    count: int
    first_line: int
    last_line: int
    low_offset: int
    high_offset: int
    first_ack_ms: int
    last_ack_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "ackLines": [self.first_line, self.last_line],
            "physicalOffsets": [self.low_offset, self.high_offset],
            "ackTimeMs": [self.first_ack_ms, self.last_ack_ms],
        }


def expired_acks(acks: Iterable[dict[str, Any]], below: int) -> ExpiredAcks | None:
    """Reference rule for `job`'s vectorised split (a unit test checks both agree)."""
    out = [a for a in acks if a["physicalOffset"] < below]
    if not out:
        return None
    return ExpiredAcks(
        len(out),
        min(a["ackLine"] for a in out),
        max(a["ackLine"] for a in out),
        min(a["physicalOffset"] for a in out),
        max(a["physicalOffset"] for a in out),
        min(a["ackTimeMs"] for a in out),
        max(a["ackTimeMs"] for a in out),
    )


def expired_finding(
    group: str, below: int, acks: ExpiredAcks, deleted: Sequence[ReplicaRetention]
) -> Finding:
    """One EXPIRED finding per group (not data-costing): how many acknowledged messages
    retention took from every replica, and what each replica deleted."""
    return Finding(
        FindingKind.EXPIRED, group, None, acks.low_offset,
        f"{acks.count} acknowledged messages (ack lines {acks.first_line}..{acks.last_line}, "
        f"offsets {acks.low_offset}..{acks.high_offset}, acknowledged {acks.first_ack_ms}.."
        f"{acks.last_ack_ms}) are below every replica's log start ({below}): deleted by "
        "retention; " + "; ".join(r.describe() for r in sorted(deleted, key=lambda r: r.broker_id)),
    )  # fmt: skip


def split_expired(acks: pa.Table, below: Mapping[str, int]) -> tuple[pa.Table, pa.Table]:
    """(expired, live) rows of an acknowledgement table (`inputs.ACK_SCHEMA`): expired
    when its physicalOffset is below its group's `below` (`expired_below`)."""
    expired = pa.array(np.zeros(acks.num_rows, dtype=bool))
    for group, low in below.items():
        mine = pc.and_(pc.equal(acks["group"], group), pc.less(acks["physicalOffset"], low))
        expired = pc.or_(expired, pc.fill_null(mine, False))
    return acks.filter(expired), acks.filter(pc.invert(expired))


def expired_by_group(expired: pa.Table) -> dict[str, ExpiredAcks]:
    """`expired_acks` per group over `split_expired`'s expired rows, in Arrow."""
    if expired.num_rows == 0:
        return {}
    stats = expired.group_by("group").aggregate(
        [("ackLine", "count"), ("ackLine", "min"), ("ackLine", "max"),
         ("physicalOffset", "min"), ("physicalOffset", "max"),
         ("ackTimeMs", "min"), ("ackTimeMs", "max")]
    )  # fmt: skip
    return {
        row["group"]: ExpiredAcks(
            row["ackLine_count"],
            row["ackLine_min"],
            row["ackLine_max"],
            row["physicalOffset_min"],
            row["physicalOffset_max"],
            row["ackTimeMs_min"],
            row["ackTimeMs_max"],
        )
        for row in stats.to_pylist()
    }
