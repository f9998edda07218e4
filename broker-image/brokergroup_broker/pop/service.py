"""The master's POP service: the one API the remoting front end (remoting_front/pop.py)
and the gRPC front end call, and the revive loop. The shell around `state` (docs/pop.md).

API (all on the event loop; each raises `PopError` for what the client got wrong or may
retry later, and `BrokerError` (NOT_MASTER, FENCED, …) from the produce path when this
broker does not take writes):

- `pop(group, topic, queue_id, max_nums, invisible_ms, poll_ms, *, fifo, filter)` →
  `PopResult`: up to `max_nums` messages of the topic's queue `queue_id` (None: any queue)
  and of the group's pop retry topic `%RETRY%<group>_<topic>`, each invisible to other pops
  for `invisible_ms` and carrying its receipt handle. With none readable it waits (long
  polling) up to `poll_ms` for one. `fifo`: a queue with a receipt still invisible hands
  out nothing; its unacked messages come back in order after the invisible time with their
  delivery count raised. `filter`: a predicate on a message's properties (None: all);
  messages it refuses are skipped (done). The answer comes once the pop's CK record is
  committed (on every SyncStateSet member), so a failover redelivers what it handed out.
- `ack(group, topic, receipt_handle)`: the message is done (never revived); an ack of a
  done message is a no-op. Raises PopError RECEIPT_EXPIRED if the handle is not the
  message's current one (its invisible time was changed, or its revive has started).
- `ack_batch(group, topic, receipt_handles)` → one `PopError | None` per handle, in order.
- `change_invisible(group, topic, receipt_handle, invisible_ms)` → the new receipt
  handle: invisible for `invisible_ms` from now; the old handle no longer counts.

`topic` is the topic the consumer subscribed (a receipt's topic mark says whether it is of
the retry topic); a remoting ACK may also name the retry topic itself.

The revive loop (`run`): a receipt past its invisible time is re-put, through the one
produce path, to the group's retry topic (%DLQ%<group> after MAX_RECONSUME_TIMES) with its
reconsumeTimes raised; once that put is acknowledged the offset is done (an ACK record).
Every change is a CK or ACK record appended to the revive topic; a new master rebuilds the
receipts from the committed records, reading from the revive low (a consumer offset of
CID_RMQ_SYS_REVIVE_GROUP), and each queue's consumer offset (the lowest un-acked offset)
is a consumer offset of the group, copied to the slaves like any.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from brokergroup_broker.pop import records as rec
from brokergroup_broker.pop.state import AckCheck, InFlightFull, PopState, QueueKey, Revival
from brokergroup_broker.protocol.messages import (
    BrokerError,
    ErrorResponse,
    Response,
    ResponseCode,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetsFull
from brokergroup_broker.store.message import StoredMessage

log = logging.getLogger(__name__)

#: The revive loop's tick at the latest (a revive is at most this late).
TICK_S = 0.1
#: Revive re-puts waiting for their acknowledgement at once.
MAX_REVIVING = 256
RETRY_PAUSE_S = 0.2
#: Messages one pop may ask for (RocketMQ's PopMessageProcessor refuses more than 32).
MAX_POP_NUMS = 32
#: Every this many pops, the retry topic is read before the topic (RocketMQ reads it first
#: with popFromRetryProbability 20 %).
RETRY_FIRST_EVERY = 5
#: Revive-queue records one rebuild step reads at once.
REBUILD_CHUNK = 256


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class PopErrorKind(Enum):
    ILLEGAL_ARGUMENT = "illegal argument"
    RECEIPT_INVALID = "receipt handle invalid"
    RECEIPT_EXPIRED = "receipt handle expired"
    IN_FLIGHT_FULL = "too many messages in flight"
    POLLING_FULL = "too many pops held"
    NOT_READY = "not serving POP yet"


class PopError(Exception):
    def __init__(self, kind: PopErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class Popped:
    message: StoredMessage
    """The message as stored (its topic is the retry topic for a retried one)."""
    record: bytes
    """The record's bytes as stored (RocketMQ's layout; the remoting answer's body)."""
    receipt_handle: str
    attempts: int
    """Earlier deliveries of this offset (a FIFO queue's orderCount; 0 the first time)."""


@dataclass(frozen=True)
class PopResult:
    messages: list[Popped]
    pop_time_ms: int
    invisible_ms: int
    revive_qid: int
    rest_num: int
    """Messages left readable in the queues this pop read (restNum)."""


MessageFilter = Callable[[Mapping[str, str]], bool]


class PopProduce(Protocol):
    """The produce path (core/produce.py `ProducePath`)."""

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...


@dataclass
class PopCounts:
    popped: int = 0
    acked: int = 0
    revived: int = 0
    dead_lettered: int = 0
    lost_to_retention: int = 0


class PopService:
    def __init__(
        self,
        *,
        store: MessageStore,
        produce: PopProduce,
        cluster_name: str,
        broker_name: str,
        master_term: Callable[[], int | None],
        confirm_offset: Callable[[], int],
        max_in_flight_per_group: int = 100_000,
        max_held_pops: int = 10_000,
        wall_ms: Callable[[], int] = _wall_ms,
        tick_s: float = TICK_S,
    ) -> None:
        """`master_term`: the masterEpoch while this broker is the master taking writes,
        else None; `confirm_offset`: what is committed (POP reads and rebuilds no further)."""
        self._store = store
        self._produce = produce
        self.broker_name = broker_name
        self.revive_topic = rec.revive_topic(cluster_name)
        self._master_term = master_term
        self._confirm_offset = confirm_offset
        self._max_in_flight = max_in_flight_per_group
        self._max_held = max_held_pops
        self._wall_ms = wall_ms
        self._tick_s = tick_s
        self._term: int | None = None
        self._state = PopState(max_in_flight_per_group=max_in_flight_per_group)
        self._saved: dict[QueueKey, int] = {}
        self._saved_low: int | None = None
        self._pops = 0
        self._held = 0
        self._pause_until_ms = 0
        self._reviving = 0
        #: Woken by an ack or a change (a FIFO queue may have unlocked).
        self._changed: set[asyncio.Future[None]] = set()
        self.counts = PopCounts()

    # ================================================================ the API
    async def pop(
        self,
        group: str,
        topic: str,
        queue_id: int | None,
        max_nums: int,
        invisible_ms: int,
        poll_ms: int,
        *,
        fifo: bool = False,
        filter: MessageFilter | None = None,
        init_from_min: bool = True,
    ) -> PopResult:
        """See the module docstring. `init_from_min`: where a queue this group never
        consumed starts (RocketMQ's initMode: MIN 0 its first message, else its end)."""
        if not 1 <= max_nums <= MAX_POP_NUMS:
            raise PopError(PopErrorKind.ILLEGAL_ARGUMENT,
                           f"maxMsgNums {max_nums} is not in [1, {MAX_POP_NUMS}]")  # fmt: skip
        if invisible_ms <= 0 or poll_ms < 0:
            raise PopError(
                PopErrorKind.ILLEGAL_ARGUMENT,
                f"invisibleTime {invisible_ms} must be > 0 and pollTime {poll_ms} >= 0",
            )
        if topic.startswith(rec.RETRY_PREFIX) or not group:
            raise PopError(PopErrorKind.ILLEGAL_ARGUMENT,
                           f"pop needs a group and a topic, not {topic!r}/{group!r}")  # fmt: skip
        self._require_serving()
        queues = self._candidates(topic, queue_id)
        retry = (rec.retry_topic(group, topic), 0)
        self._pops += 1
        order = [retry, *queues] if self._pops % RETRY_FIRST_EVERY == 0 else [*queues, retry]
        deadline = self._wall_ms() + poll_ms
        while True:
            result = await self._pop_once(group, order, max_nums, invisible_ms, fifo, filter,
                                          init_from_min)  # fmt: skip
            if result.messages:
                return result
            left = deadline - self._wall_ms()
            if left <= 0:
                return result
            await self._hold(order, left)
            self._require_serving()

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        errors = await self.ack_batch(group, topic, [receipt_handle])
        if errors[0] is not None:
            raise errors[0]

    async def ack_batch(
        self, group: str, topic: str, receipt_handles: Sequence[str]
    ) -> list[PopError | None]:
        self._require_serving()
        outcome: list[PopError | None] = [None] * len(receipt_handles)
        by_key: dict[QueueKey, list[int]] = {}
        for i, handle in enumerate(receipt_handles):
            try:
                key, receipt = self._key_of(group, topic, handle)
            except PopError as exc:
                outcome[i] = exc
                continue
            check = self._state.check(key, receipt.offset, receipt.pop_time_ms)
            if check is AckCheck.IN_FLIGHT:
                if receipt.offset not in by_key.setdefault(key, []):
                    by_key[key].append(receipt.offset)
            elif check is AckCheck.STALE:
                outcome[i] = PopError(
                    PopErrorKind.RECEIPT_EXPIRED,
                    f"receipt handle of {key[1]} queue {key[2]} offset {receipt.offset} is "
                    "not the message's current one (its invisible time changed or it is "
                    "being revived)",
                )
            elif check is AckCheck.NOT_POPPED:
                outcome[i] = PopError(
                    PopErrorKind.RECEIPT_INVALID,
                    f"{key[1]} queue {key[2]} offset {receipt.offset} was not popped by "
                    f"group {group}",
                )
        waits = [self._write(rec.Ack(*key, tuple(offsets))) for key, offsets in by_key.items()]
        self.counts.acked += sum(len(o) for o in by_key.values())
        self._wake_changed()
        for wait in waits:
            await wait
        return outcome

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        if invisible_ms < 0:
            raise PopError(PopErrorKind.ILLEGAL_ARGUMENT, f"invisibleTime {invisible_ms} < 0")
        self._require_serving()
        key, receipt = self._key_of(group, topic, receipt_handle)
        check = self._state.check(key, receipt.offset, receipt.pop_time_ms)
        if check is not AckCheck.IN_FLIGHT:
            kind = (
                PopErrorKind.RECEIPT_INVALID
                if check is AckCheck.NOT_POPPED
                else PopErrorKind.RECEIPT_EXPIRED
            )
            raise PopError(kind, f"{key[1]} queue {key[2]} offset {receipt.offset}: {check.value}")
        now = self._wall_ms()
        ck = self._state.checkpoint_for_change(key, receipt.offset, now, invisible_ms)
        wait = self._write(ck)
        self._wake_changed()
        await wait
        return rec.Receipt(
            receipt.offset, now, invisible_ms, receipt.revive_qid, receipt.mark,
            self.broker_name, receipt.queue_id, receipt.offset,
        ).encode()  # fmt: skip

    def in_flight_message(self, group: str, topic: str, receipt_handle: str) -> StoredMessage:
        """The message a receipt handle holds while it is in flight (the gRPC front's
        ForwardMessageToDeadLetterQueue puts it to %DLQ%<group>, then acks the handle)."""
        self._require_serving()
        key, receipt = self._key_of(group, topic, receipt_handle)
        check = self._state.check(key, receipt.offset, receipt.pop_time_ms)
        if check is not AckCheck.IN_FLIGHT:
            kind = (
                PopErrorKind.RECEIPT_INVALID
                if check is AckCheck.NOT_POPPED
                else PopErrorKind.RECEIPT_EXPIRED
            )
            raise PopError(kind, f"{key[1]} queue {key[2]} offset {receipt.offset}: {check.value}")
        found = self._store.get_messages(key[1], key[2], receipt.offset, 1, self._confirm_offset())
        if not found or found[0].queue_offset != receipt.offset:
            raise PopError(
                PopErrorKind.RECEIPT_INVALID,
                f"{key[1]} queue {key[2]} offset {receipt.offset} is gone (retention)",
            )
        return found[0]

    @staticmethod
    def retry_topic(group: str, topic: str) -> str:
        return rec.retry_topic(group, topic)

    # ================================================================ pop internals
    def _require_serving(self) -> None:
        term = self._master_term()
        if term is None:
            raise BrokerError(ResponseCode.NOT_MASTER, "POP is served by the master only")
        if term != self._term:
            raise PopError(PopErrorKind.NOT_READY,
                           "the master is rebuilding its POP state; retry shortly")  # fmt: skip

    def _candidates(self, topic: str, queue_id: int | None) -> list[tuple[str, int]]:
        count = self._store.queue_count(topic)
        if queue_id is not None and queue_id >= 0:
            return [(topic, queue_id)]
        start = self._pops % count if count else 0
        return [(topic, (start + i) % count) for i in range(count)]

    def _start_of(self, key: QueueKey, init_from_min: bool, confirm: int) -> int:
        group, topic, queue_id = key
        found = self._store.consumer_offsets.get(group, topic, queue_id)
        if found is not None:
            return found
        low, high = self._store.queue_offset_range(topic, queue_id, confirm)
        return low if init_from_min or topic.startswith(rec.RETRY_PREFIX) else high

    async def _pop_once(
        self,
        group: str,
        order: list[tuple[str, int]],
        max_nums: int,
        invisible_ms: int,
        fifo: bool,
        filter: MessageFilter | None,
        init_from_min: bool,
    ) -> PopResult:
        if self._state.room(group) <= 0:
            raise PopError(
                PopErrorKind.IN_FLIGHT_FULL,
                f"consumer group {group} holds {self._state.in_flight_of(group)} messages in "
                f"flight (popMaxInFlightPerGroup {self._max_in_flight}): ack some first",
            )
        now = self._wall_ms()
        confirm = self._confirm_offset()
        revive_qid = rec.ORDER_REVIVE_QID if fifo else 0
        popped: list[Popped] = []
        waits: list[asyncio.Future[None]] = []
        rest = 0
        for topic, queue_id in order:
            key = (group, topic, queue_id)
            room = min(max_nums - len(popped), self._state.room(group))
            low, high = self._store.queue_offset_range(topic, queue_id, confirm)
            if key not in self._state.queues and high == 0:
                continue
            q = self._state.queue(key, self._start_of(key, init_from_min, confirm))
            if q.next < low:
                self.counts.lost_to_retention += len(self._state.skip_to(key, low))
            rest += max(0, high - q.next)
            if room <= 0:
                continue
            if fifo and self._state.locked(key, now):
                continue
            ck: rec.CheckPoint | None = None
            got: list[tuple[StoredMessage, bytes]] = []
            if fifo:
                ck = self._state.checkpoint_for_redelivery(key, now, invisible_ms, room)
                if ck is not None:
                    for offset in ck.offsets:
                        got += self._store.get_records(topic, queue_id, offset, 1, confirm)
                    if [m.queue_offset for m, _ in got] != list(ck.offsets):
                        log.warning("pop: %s queue %d: redelivered offsets gone", topic, queue_id)
                        continue
            if ck is None:
                if q.next >= high:
                    continue
                read = self._store.get_records(topic, queue_id, q.next, room, confirm)
                if not read or read[0][0].queue_offset != q.next:
                    continue  # retention moved the min meanwhile: the next pop skips to it
                end = read[-1][0].queue_offset + 1
                got = [(m, raw) for m, raw in read if filter is None or filter(m.properties)]
                try:
                    ck = self._state.checkpoint_for_pop(
                        key, [m.queue_offset for m, _ in got], end, now, invisible_ms, fifo=fifo
                    )
                except InFlightFull as exc:
                    if popped:
                        break
                    raise PopError(PopErrorKind.IN_FLIGHT_FULL, str(exc)) from None
            try:
                waits.append(self._write(ck))
            except BrokerError:
                if popped:
                    break  # what was handed out so far stands
                raise
            mark = rec.topic_mark(topic)
            first = ck.offsets[0] if ck.offsets else 0
            for (message, raw), attempts in zip(got, ck.attempts, strict=True):
                handle = rec.Receipt(first, now, invisible_ms, revive_qid, mark,
                                     self.broker_name, queue_id, message.queue_offset)  # fmt: skip
                popped.append(Popped(message, raw, handle.encode(), attempts))
            if len(popped) >= max_nums:
                break
        for wait in waits:
            await wait
        self.counts.popped += len(popped)
        return PopResult(popped, now, invisible_ms, revive_qid, max(0, rest - len(popped)))

    async def _hold(self, order: list[tuple[str, int]], wait_ms: int) -> None:
        """Wait until a queue of the pop may have grown, an ack or change may have unlocked
        a FIFO queue, or `wait_ms` passed (capped at one revive tick: a FIFO queue unlocks
        at a time, not at an event)."""
        if self._held >= self._max_held:
            raise PopError(PopErrorKind.POLLING_FULL,
                           f"{self._max_held} pops are held on this broker (maxPopPollingSize); "
                           "pop again later")  # fmt: skip
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        arrivals = self._store.arrivals
        holds = [arrivals.hold(topic, queue_id, wake) for topic, queue_id in order]
        self._changed.add(woken)
        self._held += 1
        try:
            await asyncio.wait((woken,), timeout=min(wait_ms / 1000, 1.0))
        finally:
            self._held -= 1
            self._changed.discard(woken)
            for held in holds:
                held.cancel()

    def _wake_changed(self) -> None:
        for waiter in list(self._changed):
            if not waiter.done():
                waiter.set_result(None)

    def _key_of(self, group: str, topic: str, handle: str) -> tuple[QueueKey, rec.Receipt]:
        try:
            receipt = rec.parse_receipt(handle)
            stored = rec.stored_topic_of(receipt.mark, group, topic)
        except rec.ReceiptInvalid as exc:
            raise PopError(PopErrorKind.RECEIPT_INVALID, str(exc)) from None
        if receipt.broker_name != self.broker_name:
            raise PopError(PopErrorKind.RECEIPT_INVALID,
                           f"receipt handle is of broker {receipt.broker_name!r}, "
                           f"not {self.broker_name!r}")  # fmt: skip
        return (group, stored, receipt.queue_id), receipt

    # ================================================================ records
    def _write(self, record: rec.PopRecord) -> asyncio.Future[None]:
        """Append `record` to the revive queue and apply it; the future is done when the
        append is committed (its exception: the commit rule's refusal). Raises BrokerError
        when nothing was appended (nothing applied)."""
        tag, body = rec.encode_record(record)
        _, pos = self._store.queue_offset_range(self.revive_topic, rec.REVIVE_QUEUE)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def reply(response: Response) -> None:
            if done.done():
                return
            if isinstance(response, SendRunResult):
                done.set_result(None)
            else:
                assert isinstance(response, ErrorResponse)
                done.set_exception(response.to_error())

        batch = SendBatch(self.revive_topic, rec.REVIVE_QUEUE, [body], [(None, tag, {})])
        self._produce.start_send_batch(batch, reply)
        self._state.apply(record, pos)
        return done

    def _write_quietly(self, record: rec.PopRecord) -> bool:
        """`_write` where nobody waits for the commit (the revive loop's ACKs)."""
        try:
            done = self._write(record)
        except BrokerError as exc:
            log.info("pop: %s record not written (%s)", type(record).__name__, exc)
            return False
        done.add_done_callback(lambda f: f.exception())  # a refusal is logged by nobody
        return True

    # ================================================================ the revive loop
    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.step())

    def step(self) -> float:
        """One tick: (re)start the term (rebuild), revive what is due, save the offsets."""
        term = self._master_term()
        if term is None:
            if self._term is not None:
                log.info("pop: not the master any more; POP stops")
            self._term = None
            return self._tick_s
        if term != self._term:
            self._rebuild()
            self._term = term
            log.info("pop: serving POP as master at masterEpoch %d", term)
        now = self._wall_ms()
        if now >= self._pause_until_ms:
            self._revive(now)
        self._save(now)
        return self._tick_s

    def _rebuild(self) -> None:
        """The receipts from the committed CK/ACK records from the revive low on."""
        state = PopState(max_in_flight_per_group=self._max_in_flight)
        offsets = self._store.consumer_offsets
        confirm = self._confirm_offset()
        low, high = self._store.queue_offset_range(self.revive_topic, rec.REVIVE_QUEUE, confirm)
        cursor = max(low, offsets.get(rec.REVIVE_GROUP, self.revive_topic, rec.REVIVE_QUEUE) or 0)
        applied = 0
        while cursor < high:
            got = self._store.get_messages(
                self.revive_topic, rec.REVIVE_QUEUE, cursor, REBUILD_CHUNK, confirm
            )
            if not got:
                break
            for message in got:
                try:
                    record = rec.decode_record(message.tags, message.body)
                except rec.RecordInvalid as exc:
                    log.error("pop: revive record at %d skipped: %s", message.queue_offset, exc)
                    continue
                key = (record.group, record.topic, record.queue_id)
                floor = offsets.get(*key) if key not in state.queues else None
                state.apply(record, message.queue_offset, floor or 0)
                applied += 1
            cursor = got[-1].queue_offset + 1
        self._state = state
        self._saved = {}
        self._saved_low = None
        log.info("pop: rebuilt %d queues' receipts from %d revive records",
                 len(state.queues), applied)  # fmt: skip

    def _revive(self, now: int) -> None:
        room = MAX_REVIVING - self._reviving
        if room <= 0:
            return
        confirm = self._confirm_offset()
        for revival in self._state.due(now, room):
            if not self._revive_one(revival, confirm):
                self._pause_until_ms = now + int(RETRY_PAUSE_S * 1000)
                for rest in self._state.due(now, MAX_REVIVING):
                    self._state.revive_failed(rest.key, rest.offset)
                self._state.revive_failed(revival.key, revival.offset)
                return

    def _revive_one(self, revival: Revival, confirm: int) -> bool:
        group, topic, queue_id = revival.key
        offset = revival.offset
        found = self._store.get_messages(topic, queue_id, offset, 1, confirm)
        if not found or found[0].queue_offset != offset:
            log.warning("pop: %s queue %d offset %d is gone (retention)", topic, queue_id, offset)
            self.counts.lost_to_retention += 1
            return self._write_quietly(rec.Ack(group, topic, queue_id, (offset,)))
        msg = found[0]
        reconsume = msg.reconsume_times + 1
        if reconsume > rec.MAX_RECONSUME_TIMES:
            target = rec.DLQ_PREFIX + group
        elif topic.startswith(rec.RETRY_PREFIX):
            target = topic
        else:
            target = rec.retry_topic(group, topic)
        props = dict(msg.properties)
        if msg.reconsume_times == 0 or rec.PROPERTY_FIRST_POP_TIME not in props:
            props[rec.PROPERTY_FIRST_POP_TIME] = str(revival.receipt.pop_time_ms)
        term = self._term
        state = self._state

        def reply(response: Response) -> None:
            self._reviving -= 1
            if self._term != term or self._state is not state:
                return  # a later term rebuilds from the records
            if isinstance(response, SendRunResult):
                self.counts.revived += 1
                if target.startswith(rec.DLQ_PREFIX):
                    self.counts.dead_lettered += 1
                if not self._write_quietly(rec.Ack(group, topic, queue_id, (offset,))):
                    state.revive_failed(revival.key, offset)
            else:
                state.revive_failed(revival.key, offset)
                self._pause_until_ms = self._wall_ms() + int(RETRY_PAUSE_S * 1000)

        batch = SendBatch(
            target,
            0,
            [msg.body],
            [(None, None, props)],
            flag=msg.flag,
            sys_flag=msg.sys_flag,
            born_timestamp_ms=msg.born_timestamp_ms,
            born_host=msg.born_host,
            reconsume_times=reconsume,
        )
        try:
            self._produce.start_send_batch(batch, reply)
        except BrokerError as exc:
            log.info("pop: revive of %s queue %d offset %d refused (%s)", topic, queue_id,
                     offset, exc)  # fmt: skip
            return False
        self._reviving += 1
        return True

    def _save(self, now: int) -> None:
        """Each queue's consumer offset and the revive low, as consumer offsets (in one
        loop step: a peer's snapshot holds them together)."""
        offsets = self._store.consumer_offsets
        try:
            for key, offset in self._state.consumer_offsets().items():
                if self._saved.get(key) != offset:
                    offsets.commit(*key, offset, now)
                    self._saved[key] = offset
            _, end = self._store.queue_offset_range(self.revive_topic, rec.REVIVE_QUEUE)
            low = self._state.revive_low(end)
            if low != self._saved_low:
                offsets.commit(rec.REVIVE_GROUP, self.revive_topic, rec.REVIVE_QUEUE, low, now)
                self._saved_low = low
        except ConsumerOffsetsFull as exc:
            log.error("pop: consumer offsets not saved: %s", exc)

    # ================================================================ status
    def status(self) -> dict[str, object]:
        return {
            "masterEpoch": self._term,
            "queues": len(self._state.queues),
            "inFlight": sum(len(q.in_flight) for q in self._state.queues.values()),
            "popped": self.counts.popped,
            "acked": self.counts.acked,
            "revived": self.counts.revived,
            "deadLettered": self.counts.dead_lettered,
            "lostToRetention": self.counts.lost_to_retention,
        }
