"""Truncation point at HA handshake (DESIGN.md §3.2; seed controller-mode-design,
"The specific log truncation algorithm flow"). Pure: no I/O, no clock.

Theory of operation
-------------------
Every master writes its records under one masterEpoch, and the epoch file
records ``(epoch, startOffset)`` for each. An epoch's *end* is the next
entry's start, or the log's max offset for the last entry. Because the
controller gives every epoch to exactly one master, two replicas holding the
same ``(epoch, startOffset)`` entry hold the same bytes in that epoch for as
long as both have them -- so they agree on
``[0, min(local end, master end))`` of that epoch and on everything before it.

The slave walks its own entries from the newest; the first one whose epoch the
master also has *with the same startOffset* is the newest common epoch, and
the truncation point is ``min(local end, master end)`` of that epoch. Bytes
past it on the slave were written by a master the group has since replaced
(a stale tail) and must go; then the slave asks for everything from the
point on.

If no epoch is common (the slave's history is unrelated to the master's, or
the slave has no epoch entries at all) the only safe answer is a *full
resync*: drop the whole local log and copy from the master's min offset. The
caller logs that loudly (except for a brand-new empty replica, where it is the
normal first start).

Kafka's follower does the same with its high watermark (seed
kafka-controller-isr-design, ``becomeFollower``: "truncate the log to
r.hw"); epochs make the cut exact instead of conservative.

Invariants (tested with hypothesis in tests/unit/test_truncation.py)
----------------------------------------------------------------------
* After truncating the slave to the point, its log is a prefix of the
  master's.
* The point is never below ``min(committed offset, slave max offset)``: a
  record acknowledged under allAck (end <= confirmOffset) is on every
  SyncStateSet member, and any master elected from that set has it in the same
  epoch, so the cut never removes it.
* ``local_max`` and ``master_max`` bound the result: ``offset <= local_max``
  unless ``full_resync`` (then the slave starts over from the master's min).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "EpochEntryLike",
    "TruncationPoint",
    "TruncationReason",
    "find_truncation_point",
]


class EpochEntryLike(Protocol):
    """Anything with ``epoch`` and ``start_offset``: the store's ``EpochEntry``
    and the codec's ``WireEpochEntry`` both fit."""

    @property
    def epoch(self) -> int: ...

    @property
    def start_offset(self) -> int: ...


class TruncationReason(enum.Enum):
    """Why the point is where it is; the value is text for logs."""

    COMMON_EPOCH = "newest common epoch found; cut at min(local end, master end) of that epoch"
    EMPTY_LOCAL = "the local epoch file is empty (a new replica): copy from the master's min offset"
    NO_COMMON_EPOCH = (
        "no local epoch matches the master's (epoch, startOffset): the local log is unrelated "
        "to the master's, full resync from the master's min offset"
    )


@dataclass(frozen=True, slots=True)
class TruncationPoint:
    """Where the slave cuts its log (and epoch file) before asking for data.

    ``offset``: truncate the commit log and consume queues to this offset and
    drop epoch entries starting at or after it; with ``full_resync`` the whole
    local log goes and replication starts at ``offset`` (the master's min).
    ``matched_epoch``: the newest common epoch, None on a full resync.
    ``detail``: the deciding values, for the log line.
    """

    offset: int
    matched_epoch: int | None
    full_resync: bool
    reason: TruncationReason
    detail: str


def _end_of(entries: Sequence[EpochEntryLike], index: int, log_max: int) -> int:
    # The last epoch runs to the log's end; others end where the next begins.
    if index + 1 < len(entries):
        return entries[index + 1].start_offset
    return log_max


def find_truncation_point(
    local: Sequence[EpochEntryLike],
    master_entries: Sequence[EpochEntryLike],
    local_max: int,
    master_max: int,
    *,
    master_min_offset: int | None = None,
) -> TruncationPoint:
    """The seed's algorithm: newest local epoch with the same (epoch, startOffset)
    on the master gives ``min(local end, master end)``.

    ``local``/``master_entries`` are epoch files in ascending epoch order;
    ``local_max``/``master_max`` the two commit logs' max offsets. The master's
    min offset for a full resync defaults to its first epoch's start (the
    master's epoch file is prefix-truncated together with its log), or 0.
    """
    if local_max < 0 or master_max < 0:
        raise ValueError(f"negative max offset: local {local_max}, master {master_max}")
    if master_min_offset is None:
        master_min_offset = master_entries[0].start_offset if master_entries else 0

    if not local:
        return TruncationPoint(
            offset=master_min_offset,
            matched_epoch=None,
            full_resync=True,
            reason=TruncationReason.EMPTY_LOCAL,
            detail=(
                f"local epoch file empty, local max {local_max}; "
                f"start from the master's min offset {master_min_offset}"
            ),
        )

    master_index = {entry.epoch: i for i, entry in enumerate(master_entries)}
    for i in range(len(local) - 1, -1, -1):
        entry = local[i]
        j = master_index.get(entry.epoch)
        if j is None or master_entries[j].start_offset != entry.start_offset:
            continue
        local_end = _end_of(local, i, local_max)
        master_end = _end_of(master_entries, j, master_max)
        point = min(local_end, master_end)
        return TruncationPoint(
            offset=point,
            matched_epoch=entry.epoch,
            full_resync=False,
            reason=TruncationReason.COMMON_EPOCH,
            detail=(
                f"epoch {entry.epoch} starts at {entry.start_offset} on both; local end "
                f"{local_end}, master end {master_end}; cut at {point} "
                f"(local max {local_max}, {max(0, local_max - point)} bytes dropped)"
            ),
        )

    local_text = ", ".join(f"{e.epoch}@{e.start_offset}" for e in local)
    master_text = ", ".join(f"{e.epoch}@{e.start_offset}" for e in master_entries)
    return TruncationPoint(
        offset=master_min_offset,
        matched_epoch=None,
        full_resync=True,
        reason=TruncationReason.NO_COMMON_EPOCH,
        detail=(
            f"local epochs [{local_text}] (max {local_max}) share none with the master's "
            f"[{master_text}] (max {master_max}); the whole local log is dropped, "
            f"copy from {master_min_offset}"
        ),
    )
