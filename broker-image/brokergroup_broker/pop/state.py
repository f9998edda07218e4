"""POP's pure core: every (group, topic, queue)'s in-flight receipts and its consumer
offset, decided from inputs (records, the clock) with no I/O.

A queue's state is `next` (the next offset to pop) and its in-flight receipts (offset →
pop time, invisible time, delivery count, and where the CK record that set it lies in the
revive queue). An offset below `next` that is not in flight is done: acknowledged, revived
to the retry topic, or skipped (filtered out). So the consumer offset, the lowest offset not
done, is the lowest in flight, else `next`; it never passes an un-acked message.

Every change goes through `apply` of a CK or ACK record (records.py), the same records the
service appends to the revive topic, so a new master that applies the committed records
again (from the revive low, `revive_low`) holds the same receipts (`rebuild` in the
service). The service asks this core what to write (`checkpoint_for_pop`,
`checkpoint_for_change`, `due`) and applies the record once it is appended.

FIFO (order=true): a queue with a receipt still invisible is locked (nothing more of it is
handed out); once its receipts' invisible time passes they are handed out again, in order,
with their delivery count raised (RocketMQ's ConsumerOrderInfoManager), never revived.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from brokergroup_broker.pop.records import Ack, CheckPoint, PopRecord

#: (consumer group, the topic the queue is of — the topic or its retry topic, queue id)
QueueKey = tuple[str, str, int]


@dataclass(frozen=True)
class InFlight:
    pop_time_ms: int
    invisible_ms: int
    attempts: int
    """Deliveries of this offset before this one (a FIFO queue's orderCount)."""
    ck_pos: int
    """Revive-queue offset at or below the CK record that set this receipt."""

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms


@dataclass
class PopQueue:
    next: int
    fifo: bool = False
    in_flight: dict[int, InFlight] = field(default_factory=dict)
    reviving: set[int] = field(default_factory=set)

    @property
    def consumer_offset(self) -> int:
        return min(self.in_flight, default=self.next)


class AckCheck(Enum):
    IN_FLIGHT = "in flight"
    """The receipt is the offset's current one: an ack or a change applies."""
    DONE = "done"
    """The offset is acknowledged or revived already: an ack is a no-op."""
    STALE = "stale"
    """The offset is in flight under a newer receipt (changed invisible time, a FIFO
    redelivery), or its revive has started: this receipt no longer counts."""
    NOT_POPPED = "not popped"
    """The offset was never handed out (at or beyond `next`)."""


class InFlightFull(Exception):
    """The group holds `max_in_flight` receipts already."""


@dataclass(frozen=True)
class Revival:
    key: QueueKey
    offset: int
    receipt: InFlight


class PopState:
    """The in-flight receipts of every queue a POP consumer reads on this master."""

    def __init__(self, *, max_in_flight_per_group: int) -> None:
        self.max_in_flight_per_group = max_in_flight_per_group
        self.queues: dict[QueueKey, PopQueue] = {}
        self._group_in_flight: Counter[str] = Counter()

    # -- reads ------------------------------------------------------------------------------
    def queue(self, key: QueueKey, start: int) -> PopQueue:
        """The queue's state, made at `start` (its consumer offset) when new."""
        found = self.queues.get(key)
        if found is None:
            found = self.queues[key] = PopQueue(start)
        return found

    def in_flight_of(self, group: str) -> int:
        return self._group_in_flight[group]

    def room(self, group: str) -> int:
        return max(0, self.max_in_flight_per_group - self._group_in_flight[group])

    def locked(self, key: QueueKey, now_ms: int) -> bool:
        """A FIFO queue with a receipt not yet past its invisible time hands out nothing."""
        q = self.queues.get(key)
        return q is not None and any(r.deadline_ms > now_ms for r in q.in_flight.values())

    def check(self, key: QueueKey, offset: int, pop_time_ms: int) -> AckCheck:
        q = self.queues.get(key)
        if q is None or offset >= q.next:
            return AckCheck.NOT_POPPED
        receipt = q.in_flight.get(offset)
        if receipt is None:
            return AckCheck.DONE
        if receipt.pop_time_ms != pop_time_ms or offset in q.reviving:
            return AckCheck.STALE
        return AckCheck.IN_FLIGHT

    def revive_low(self, end: int) -> int:
        """Where a new master starts reading the revive queue: at or below every CK record
        that set a receipt still in flight (`end`, the revive queue's end, when none is)."""
        return min(
            (r.ck_pos for q in self.queues.values() for r in q.in_flight.values()), default=end
        )

    def consumer_offsets(self) -> dict[QueueKey, int]:
        return {key: q.consumer_offset for key, q in self.queues.items()}

    # -- what to write ----------------------------------------------------------------------
    def checkpoint_for_pop(
        self,
        key: QueueKey,
        offsets: Iterable[int],
        end: int,
        now_ms: int,
        invisible_ms: int,
        *,
        fifo: bool,
    ) -> CheckPoint:
        """The CK of handing out `offsets` of the queue (read from its `next` on; `end` is
        where that read stopped: offsets skipped on the way are done). Raises InFlightFull
        beyond the group's bound, ValueError for offsets not poppable."""
        group, topic, queue_id = key
        q = self.queues[key]
        handed = tuple(offsets)
        if any(o < q.next or o >= end for o in handed) or end < q.next:
            raise ValueError(f"offsets {handed} are not in [{q.next}, {end})")
        if len(handed) > self.room(group):
            raise InFlightFull(
                f"consumer group {group} holds {self._group_in_flight[group]} messages in "
                f"flight (popMaxInFlightPerGroup {self.max_in_flight_per_group}): ack some first"
            )
        return CheckPoint(group, topic, queue_id, handed, (0,) * len(handed), end, now_ms,
                          invisible_ms, fifo)  # fmt: skip

    def checkpoint_for_redelivery(
        self, key: QueueKey, now_ms: int, invisible_ms: int, limit: int
    ) -> CheckPoint | None:
        """FIFO: the CK that hands the queue's receipts past their invisible time out again
        (lowest first, delivery count raised); None when there are none."""
        group, topic, queue_id = key
        q = self.queues[key]
        expired = sorted(o for o, r in q.in_flight.items() if r.deadline_ms <= now_ms)[:limit]
        if not expired:
            return None
        attempts = tuple(q.in_flight[o].attempts + 1 for o in expired)
        return CheckPoint(group, topic, queue_id, tuple(expired), attempts, q.next, now_ms,
                          invisible_ms, True)  # fmt: skip

    def checkpoint_for_change(
        self, key: QueueKey, offset: int, now_ms: int, invisible_ms: int
    ) -> CheckPoint:
        """The CK of a new invisible time for an in-flight receipt (`check` first)."""
        group, topic, queue_id = key
        q = self.queues[key]
        receipt = q.in_flight[offset]
        return CheckPoint(group, topic, queue_id, (offset,), (receipt.attempts,), q.next,
                          now_ms, invisible_ms, q.fifo)  # fmt: skip

    def due(self, now_ms: int, limit: int) -> list[Revival]:
        """Receipts of non-FIFO queues past their invisible time, not yet being revived;
        marked reviving (an ack of them is then stale) until `revived` or `revive_failed`."""
        out: list[Revival] = []
        for key, q in self.queues.items():
            if q.fifo:
                continue
            for offset, receipt in q.in_flight.items():
                if len(out) >= limit:
                    return out
                if receipt.deadline_ms <= now_ms and offset not in q.reviving:
                    q.reviving.add(offset)
                    out.append(Revival(key, offset, receipt))
        return out

    def revive_failed(self, key: QueueKey, offset: int) -> None:
        q = self.queues.get(key)
        if q is not None:
            q.reviving.discard(offset)

    # -- the one mutation -------------------------------------------------------------------
    def apply(self, record: PopRecord, pos: int, floor: int = 0) -> None:
        """Apply a CK or ACK record at revive-queue position `pos` (at or below where it
        lies); `floor` is the queue's consumer offset when it is new here (a rebuild:
        offsets below it are done)."""
        key = (record.group, record.topic, record.queue_id)
        q = self.queue(key, floor)
        if isinstance(record, Ack):
            for offset in record.offsets:
                if q.in_flight.pop(offset, None) is not None:
                    self._group_in_flight[record.group] -= 1
                q.reviving.discard(offset)
            return
        q.fifo = record.fifo
        for offset, attempts in zip(record.offsets, record.attempts, strict=True):
            if offset < floor and offset not in q.in_flight:
                continue  # done before the consumer offset this queue started from
            if offset not in q.in_flight:
                self._group_in_flight[record.group] += 1
            q.in_flight[offset] = InFlight(record.pop_time_ms, record.invisible_ms, attempts, pos)
            q.reviving.discard(offset)
        q.next = max(q.next, record.end)

    def skip_to(self, key: QueueKey, offset: int) -> list[int]:
        """Retention deleted the queue below `offset`: what was in flight there is gone
        (returned, to be counted); `next` moves up to it."""
        q = self.queues.get(key)
        if q is None:
            return []
        gone = sorted(o for o in q.in_flight if o < offset)
        for o in gone:
            del q.in_flight[o]
            q.reviving.discard(o)
            self._group_in_flight[key[0]] -= 1
        q.next = max(q.next, offset)
        return gone
