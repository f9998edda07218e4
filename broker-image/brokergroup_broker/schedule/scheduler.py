"""The delivery decisions of one schedule queue (pure: offsets, due times and `now` in,
what to deliver and the progress to persist out).

A schedule queue (SCHEDULE_TOPIC_XXXX queue L-1, rmq_sys_wheel_timer queue 0) is a consume
queue of scheduled messages, each with a due time (wall ms). Its entries are read in queue
order (`ingest`); they are delivered in due order (`take_due` → the shell re-puts them →
`delivered`, or `retry` when the put failed), never before they are due.

Progress (persisted, replicated as consumer offsets, the one that survives failover) is
three numbers, each only ever growing, so a peer's copy merged entry by entry with the
larger value (ConsumerOffsetStore.merge_newer) is always one consistent checkpoint:

- `low` L: every entry below L is delivered;
- `scan` O (L ≤ O): every entry in [L, O) due at or before W is delivered;
- `watermark` W (wall ms): see `scan`.

A restart (a new master) reads the queue from L again and skips the entries in [L, O) due
at or before W; every other entry is pending. So nothing delivered before the checkpoint
is lost or redelivered early, and what was delivered after it (its progress not yet
persisted or replicated) is delivered again: RocketMQ's at-least-once, counted by the
tests and bench/delay.py.

The checkpoint keeps the rule true: W is below the due time of every entry read but not
delivered (and ≤ now); O is the read cursor, unless an undelivered entry read after the
last checkpoint is due at or before W (it was due on arrival): then O stops at the first
such entry until it is delivered.

Memory: an entry read and not delivered is one int in a heap (due and offset packed, about
36 bytes and a list slot, 8), plus one bit for every entry between L and the read cursor
(whether it is delivered), docs/scheduled-messages.md.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

OFFSET_BITS = 40
"""An entry is `due_ms << OFFSET_BITS | queue_offset` (queue offsets stay below 2^40)."""
_OFFSET_MASK = (1 << OFFSET_BITS) - 1
#: Bitmap bytes below the low-water mark dropped at once.
_COMPACT_BYTES = 4096


def entry_of(due_ms: int, offset: int) -> int:
    return (due_ms << OFFSET_BITS) | offset


def due_of(entry: int) -> int:
    return entry >> OFFSET_BITS


def offset_of(entry: int) -> int:
    return entry & _OFFSET_MASK


@dataclass(frozen=True)
class Progress:
    low: int = 0
    scan: int = 0
    watermark_ms: int = 0

    def covers(self, offset: int, due_ms: int) -> bool:
        """Was the entry delivered before this checkpoint?"""
        return offset < self.low or (offset < self.scan and due_ms <= self.watermark_ms)


class QueueSchedule:
    """One schedule queue's pending entries and progress; see the module docstring."""

    def __init__(self, progress: Progress) -> None:
        if not progress.low <= progress.scan:
            raise ValueError(f"progress {progress}: low must be ≤ scan")
        self._saved = progress
        #: Next queue offset to read.
        self.cursor = progress.low
        self._low = progress.low
        self._heap: list[int] = []
        self._in_flight: set[int] = set()
        # Bit i: entry _base + i is delivered (or skipped); _base ≤ _low, a multiple of 8.
        self._base = progress.low & ~7
        self._bits = bytearray()
        for offset in range(self._base, progress.low):
            self._set_done(offset)
        #: Entries skipped because they were covered by the saved progress (a restart).
        self.skipped = 0
        #: Entries delivered by this instance (a checkpoint with none since the last one
        #: need not be saved: the saved one still holds).
        self.delivered_count = 0

    # -- reading the queue ------------------------------------------------------------------
    def ingest(self, offset: int, due_ms: int) -> bool:
        """The entry at `offset` (== cursor) is due at `due_ms`; False when the saved
        progress says it was delivered (nothing to do)."""
        self._check_next(offset)
        self.cursor = offset + 1
        if self._saved.covers(offset, due_ms):
            self.skipped += 1
            self._set_done(offset)
            return False
        heapq.heappush(self._heap, entry_of(due_ms, offset))
        return True

    def skip(self, offset: int) -> None:
        """The entry at `offset` (== cursor) cannot be delivered (unreadable, or deleted by
        retention): it counts as done."""
        self._check_next(offset)
        self.cursor = offset + 1
        self._set_done(offset)

    def _check_next(self, offset: int) -> None:
        if offset != self.cursor:
            raise ValueError(
                f"entries are read in queue order: expected {self.cursor}, got {offset}"
            )

    # -- delivering -------------------------------------------------------------------------
    def next_due_ms(self) -> int | None:
        return due_of(self._heap[0]) if self._heap else None

    def take_due(self, now_ms: int, limit: int) -> list[int]:
        """Up to `limit` entries due at or before `now_ms`, earliest first; they are in
        flight until `delivered` or `retry`."""
        out: list[int] = []
        heap = self._heap
        while heap and len(out) < limit and due_of(heap[0]) <= now_ms:
            entry = heapq.heappop(heap)
            self._in_flight.add(entry)
            out.append(entry)
        return out

    def delivered(self, entry: int) -> None:
        self._in_flight.remove(entry)
        self._set_done(offset_of(entry))
        self.delivered_count += 1

    def retry(self, entry: int) -> None:
        """The put failed: the entry is pending again (due already, so next in line)."""
        self._in_flight.remove(entry)
        heapq.heappush(self._heap, entry)

    @property
    def pending(self) -> int:
        """Entries read and not delivered (in flight included)."""
        return len(self._heap) + len(self._in_flight)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    # -- progress ---------------------------------------------------------------------------
    def checkpoint(self, now_ms: int) -> Progress:
        """The progress to persist now (each number ≥ the last checkpoint's)."""
        saved = self._saved
        min_due = min(
            (d for d in (self.next_due_ms(), min(map(due_of, self._in_flight), default=None))
             if d is not None),
            default=None,
        )  # fmt: skip
        watermark = max(saved.watermark_ms, now_ms if min_due is None else min(now_ms, min_due - 1))
        scan = self.cursor
        if min_due is not None and min_due <= watermark:
            late = [offset_of(e) for e in self._undelivered_due_by(watermark)]
            scan = min(late)
        progress = Progress(self._low, max(scan, saved.scan), watermark)
        self._saved = progress
        return progress

    def _undelivered_due_by(self, watermark_ms: int) -> Iterator[int]:
        """Undelivered entries due at or before `watermark_ms` (few: due on arrival)."""
        yield from (e for e in self._in_flight if due_of(e) <= watermark_ms)
        heap = self._heap
        stack = [0] if heap else []
        while stack:  # the heap as a tree: a node's children are never due earlier
            i = stack.pop()
            if i < len(heap) and due_of(heap[i]) <= watermark_ms:
                yield heap[i]
                stack.extend((2 * i + 1, 2 * i + 2))

    # -- the delivered bitmap ---------------------------------------------------------------
    def _set_done(self, offset: int) -> None:
        i = offset - self._base
        byte = i >> 3
        if byte >= len(self._bits):
            self._bits.extend(bytes(byte + 1 - len(self._bits)))
        self._bits[byte] |= 1 << (i & 7)
        if offset == self._low:
            self._advance_low()

    def _advance_low(self) -> None:
        bits, low, end = self._bits, self._low, self.cursor
        while low < end:
            i = low - self._base
            byte = i >> 3
            if byte >= len(bits):
                break
            if bits[byte] == 0xFF and i & 7 == 0:
                low += 8
                continue
            if not bits[byte] >> (i & 7) & 1:
                break
            low += 1
        self._low = min(low, end)
        drop = (self._low - self._base) >> 3
        if drop >= _COMPACT_BYTES:
            del bits[:drop]
            self._base += drop * 8
