"""The delivery service of scheduled and timer messages (the shell around `scheduler`).

Runs on every broker and works only while the broker is the master taking writes. Each
master term starts from the persisted progress of each schedule queue (consumer offsets of
the system groups below, which slaves copy every second and a new master takes from its
live peers before going online: core/peer_offsets.py), reads the queues up to
confirmOffset (only committed entries: they survive a failover), and every tick re-puts the
entries that are due to their real topic and queue through the one produce path
(`start_send_batch`), so a re-put is replicated and acknowledged like any send. An entry
counts as delivered once its re-put is acknowledged; the progress is committed after every
tick that moved it.

Delay-level queues are in due order (one delay per queue, store order), so they are read
only as far as what is due; the timer queue is read whole (bounded by timerMaxPending at
the send: `timers_pending`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.protocol.messages import (
    BrokerError,
    ErrorResponse,
    Response,
    ResponseCode,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.schedule.rules import (
    SCHEDULE_TOPIC,
    TIMER_QUEUE,
    TIMER_TOPIC,
    ScheduleRules,
    due_ms,
    redelivery,
)
from brokergroup_broker.schedule.scheduler import (
    Progress,
    QueueSchedule,
    due_of,
    offset_of,
)
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetsFull

log = logging.getLogger(__name__)

#: The progress of a schedule queue, as consumer offsets of these groups on its topic and
#: queue (RocketMQ keeps its transaction progress as CID_RMQ_SYS_TRANS's offsets likewise).
GROUP_LOW = "CID_RMQ_SYS_SCHEDULE"
GROUP_SCAN = "CID_RMQ_SYS_SCHEDULE_SCAN"
GROUP_WATERMARK = "CID_RMQ_SYS_SCHEDULE_WATERMARK"
PROGRESS_GROUPS = (GROUP_LOW, GROUP_SCAN, GROUP_WATERMARK)

#: How often the service looks for due entries at the latest (delivery is at most this
#: late plus the re-put's commit round); it also wakes at the next due time.
TICK_S = 0.05
#: Entries read from one queue per tick (the loop is shared with every request).
READ_BUDGET = 4096
#: Re-puts waiting for their acknowledgement at once (maxPendingAcks bounds all sends).
MAX_IN_FLIGHT = 512
#: After a refused re-put, wait this long before the next.
RETRY_PAUSE_S = 0.2

QueueKey = tuple[str, int]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class RePuts(Protocol):
    """The produce path (core/produce.py `ProducePath`)."""

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...


@dataclass
class DeliveryCounts:
    delivered: int = 0
    retried: int = 0
    undeliverable: int = 0
    lost_to_retention: int = 0


class ScheduleService:
    def __init__(
        self,
        *,
        store: MessageStore,
        produce: RePuts,
        rules: ScheduleRules,
        master_term: Callable[[], int | None],
        confirm_offset: Callable[[], int],
        wall_ms: Callable[[], int] = _wall_ms,
        tick_s: float = TICK_S,
    ) -> None:
        """`master_term`: the masterEpoch while this broker is the master taking writes,
        else None; `confirm_offset`: what is committed (entries beyond it are not read)."""
        self._store = store
        self._produce = produce
        self.rules = rules
        self._master_term = master_term
        self._confirm_offset = confirm_offset
        self._wall_ms = wall_ms
        self._tick_s = tick_s
        self._term: int | None = None
        self._queues: dict[QueueKey, QueueSchedule] = {}
        self._saved: dict[QueueKey, Progress] = {}
        self._saved_delivered: dict[QueueKey, int] = {}
        #: A delay-level queue's first unread entry's due time (read no further before it).
        self._head_due: dict[QueueKey, int] = {}
        self._pause_until_ms = 0
        self.counts = DeliveryCounts()

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            delay = self.step()
            await asyncio.sleep(delay)

    def step(self) -> float:
        """One tick: (re)start the term, read, deliver, checkpoint. Returns the seconds to
        wait before the next."""
        term = self._master_term()
        if term is None:
            if self._term is not None:
                log.info("schedule: not the master any more; delivery stops")
            self._term = None
            self._queues = {}
            return self._tick_s
        if term != self._term:
            self._start_term(term)
        now = self._wall_ms()
        confirm = self._confirm_offset()
        for key, queue in self._queues.items():
            self._read(key, queue, now, confirm)
        if now >= self._pause_until_ms:
            self._deliver(now, confirm)
        self._checkpoint(now)
        next_due = min(
            (d for q in self._queues.values() if (d := q.next_due_ms()) is not None),
            default=None,
        )
        if next_due is None:
            return self._tick_s
        return min(self._tick_s, max(0.0, (next_due - now) / 1000))

    def _start_term(self, term: int) -> None:
        self._term = term
        offsets = self._store.consumer_offsets
        keys = [(SCHEDULE_TOPIC, q) for q in range(self.rules.max_level)]
        keys.append((TIMER_TOPIC, TIMER_QUEUE))
        self._queues = {}
        self._head_due = {}
        for topic, queue_id in keys:
            low = offsets.get(GROUP_LOW, topic, queue_id) or 0
            scan = max(low, offsets.get(GROUP_SCAN, topic, queue_id) or 0)
            watermark = offsets.get(GROUP_WATERMARK, topic, queue_id) or 0
            progress = Progress(low, scan, watermark)
            self._queues[(topic, queue_id)] = QueueSchedule(progress)
            self._saved[(topic, queue_id)] = progress
            self._saved_delivered[(topic, queue_id)] = 0
        log.info("schedule: delivering as master at masterEpoch %d", term)

    # -- reading ----------------------------------------------------------------------------
    def _read(self, key: QueueKey, queue: QueueSchedule, now: int, confirm: int) -> None:
        topic, queue_id = key
        fifo = topic == SCHEDULE_TOPIC
        if fifo and self._head_due.get(key, 0) > now:
            return
        low, high = self._store.queue_offset_range(topic, queue_id, confirm)
        if queue.cursor < low:
            lost = low - queue.cursor
            log.warning(
                "schedule: %d entries of %s queue %d below its min %d were deleted by "
                "retention before delivery", lost, topic, queue_id, low,
            )  # fmt: skip
            self.counts.lost_to_retention += lost
            while queue.cursor < low:
                queue.skip(queue.cursor)
        budget = READ_BUDGET
        while queue.cursor < high and budget > 0:
            chunk = min(budget, 64 if fifo else 256)
            stored = self._store.get_messages(topic, queue_id, queue.cursor, chunk, confirm)
            if not stored or stored[0].queue_offset != queue.cursor:
                return  # retention moved the min meanwhile: the next tick skips to it
            for msg in stored:
                due = due_ms(topic, queue_id, msg.store_timestamp_ms, msg.properties, self.rules)
                if due is None:
                    log.error(
                        "schedule: %s queue %d offset %d has no due time; skipped",
                        topic, queue_id, msg.queue_offset,
                    )  # fmt: skip
                    self.counts.undeliverable += 1
                    queue.skip(msg.queue_offset)
                    continue
                if fifo and due > now:
                    self._head_due[key] = due
                    return
                queue.ingest(msg.queue_offset, due)
            budget -= len(stored)

    # -- delivering -------------------------------------------------------------------------
    def _deliver(self, now: int, confirm: int) -> None:
        room = MAX_IN_FLIGHT - sum(q.in_flight for q in self._queues.values())
        for key, queue in self._queues.items():
            if room <= 0:
                return
            entries = queue.take_due(now, room)
            room -= len(entries)
            for i, entry in enumerate(entries):
                if not self._put(key, queue, entry, now, confirm):
                    for rest in entries[i:]:
                        queue.retry(rest)
                    self._pause_until_ms = now + int(RETRY_PAUSE_S * 1000)
                    return

    def _put(self, key: QueueKey, queue: QueueSchedule, entry: int, now: int, confirm: int) -> bool:
        """Start the re-put of `entry`; False when the produce path refused it at once
        (the entry is then still in flight for the caller to retry)."""
        topic, queue_id = key
        offset = offset_of(entry)
        found = self._store.get_messages(topic, queue_id, offset, 1, confirm)
        if not found or found[0].queue_offset != offset:
            log.warning(
                "schedule: %s queue %d offset %d is gone (retention)", topic, queue_id, offset
            )
            self.counts.lost_to_retention += 1
            queue.delivered(entry)
            return True
        msg = found[0]
        target = redelivery(topic, msg.properties, msg.store_timestamp_ms, now)
        if target is None:
            log.error("schedule: %s queue %d offset %d has no REAL_TOPIC", topic, queue_id, offset)
            self.counts.undeliverable += 1
            queue.delivered(entry)
            return True
        term = self._term

        def reply(response: Response) -> None:
            if self._term != term or key not in self._queues or self._queues[key] is not queue:
                return  # a later term re-reads the queue from its progress
            if isinstance(response, SendRunResult):
                queue.delivered(entry)
                self.counts.delivered += 1
            else:
                assert isinstance(response, ErrorResponse)
                self._refused(queue, entry, response.code, response.message)

        queue_ids = (target.queue_id, None) if target.queue_id is not None else (None,)
        for real_queue in queue_ids:
            batch = SendBatch(
                target.topic,
                real_queue,
                [msg.body],
                [(None, None, target.properties)],
                flag=msg.flag,
                sys_flag=msg.sys_flag,
                born_timestamp_ms=msg.born_timestamp_ms,
                born_host=msg.born_host,
                reconsume_times=msg.reconsume_times,
            )
            try:
                self._produce.start_send_batch(batch, reply)
                return True
            except BrokerError as exc:
                if exc.code is ResponseCode.BAD_REQUEST and real_queue is not None:
                    continue  # REAL_QID is not a queue of the topic (any more): any queue
                if exc.code in (ResponseCode.BAD_REQUEST, ResponseCode.TOPIC_INVALID):
                    log.error("schedule: cannot deliver %s offset %d: %s", topic, offset, exc)
                    self.counts.undeliverable += 1
                    queue.delivered(entry)
                    return True
                log.info("schedule: re-put refused (%s), retrying", exc)
                self.counts.retried += 1
                return False
        return True  # unreachable: the last try has no queue

    def _refused(self, queue: QueueSchedule, entry: int, code: ResponseCode, why: str) -> None:
        """The commit rule refused a re-put after its append (it may survive: at-least-once)."""
        log.info("schedule: re-put not acknowledged (%s: %s), retrying", code.name, why)
        self.counts.retried += 1
        queue.retry(entry)
        self._pause_until_ms = self._wall_ms() + int(RETRY_PAUSE_S * 1000)

    # -- progress ---------------------------------------------------------------------------
    def _checkpoint(self, now: int) -> None:
        offsets = self._store.consumer_offsets
        for (topic, queue_id), queue in self._queues.items():
            key = (topic, queue_id)
            progress = queue.checkpoint(now)
            saved = self._saved.get(key)
            if progress == saved:
                continue
            moved = saved is None or (progress.low, progress.scan) != (saved.low, saved.scan)
            if not moved and queue.delivered_count == self._saved_delivered.get(key, 0):
                # Only the watermark moved, over no delivery: the saved progress still holds,
                # and an idle broker does not rewrite its offsets every tick.
                continue
            try:
                # One loop step: a peer's snapshot holds all three or none of them.
                offsets.commit(GROUP_LOW, topic, queue_id, progress.low, now)
                offsets.commit(GROUP_SCAN, topic, queue_id, progress.scan, now)
                offsets.commit(GROUP_WATERMARK, topic, queue_id, progress.watermark_ms, now)
            except ConsumerOffsetsFull as exc:
                log.error("schedule: progress of %s queue %d not saved: %s", topic, queue_id, exc)
                continue
            self._saved[key] = progress
            self._saved_delivered[key] = queue.delivered_count

    # -- what the send path and /v1/status ask ----------------------------------------------
    def timers_pending(self) -> int:
        """Timers stored on this broker and not yet delivered (timerMaxPending bounds it)."""
        queue = self._queues.get((TIMER_TOPIC, TIMER_QUEUE))
        _, high = self._store.queue_offset_range(TIMER_TOPIC, TIMER_QUEUE)
        if queue is None:
            progress = self._saved.get((TIMER_TOPIC, TIMER_QUEUE), Progress())
            return max(0, high - progress.low)
        return queue.pending + max(0, high - queue.cursor)

    def status(self) -> dict[str, object]:
        queues = {
            f"{topic}:{queue_id}": {
                "pending": queue.pending,
                "cursor": queue.cursor,
                "nextDueMs": queue.next_due_ms(),
                **_progress_json(self._saved.get((topic, queue_id), Progress())),
            }
            for (topic, queue_id), queue in self._queues.items()
            if queue.cursor or queue.pending
        }
        return {
            "masterEpoch": self._term,
            "timersPending": self.timers_pending(),
            "delivered": self.counts.delivered,
            "retried": self.counts.retried,
            "undeliverable": self.counts.undeliverable,
            "lostToRetention": self.counts.lost_to_retention,
            "queues": queues,
        }


def _progress_json(progress: Progress) -> dict[str, int]:
    return {"low": progress.low, "scan": progress.scan, "watermarkMs": progress.watermark_ms}


__all__ = ["GROUP_LOW", "GROUP_SCAN", "GROUP_WATERMARK", "ScheduleService", "due_of"]
