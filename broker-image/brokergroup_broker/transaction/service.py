"""The transaction service of the master (the shell around `half_queue`).

Runs on every broker and works only while the broker is the master taking writes, one
master term (masterEpoch) at a time, as schedule/service.py does. A term starts from the
persisted progress (CID_RMQ_SYS_TRANS's consumer offsets on the half and op topics, which
slaves copy every second and a new master takes from its live peers before it goes online:
core/peer_offsets.py) and reads both queues up to confirmOffset (only committed records:
they survive a failover).

- `end_transaction` (END_TRANSACTION from any front end): finds the half message by its
  commit log offset, checks it is one (producer group, queue offset), and unless it is
  resolved already or being ended (a repeat: answered SUCCESS, nothing stored), commits it
  (the message again to REAL_TOPIC / REAL_QID) or rolls it back, then writes the op record.
  Both go through the one produce path (`start_send_batch`), appended back to back in one
  loop step, and the answer waits for both acknowledgements.
- every transactionCheckInterval a check round: half messages past their immunity with no
  op record get a "c" op record (their check count) and, once it is acknowledged,
  a check to a live producer of their group (`ProducerChecks`: the remoting front's
  CHECK_TRANSACTION_STATE, then the gRPC front's RecoverOrphanedTransactionCommand); those checked transactionCheckMax times are stored in TRANS_CHECK_MAX_TIME_TOPIC
  and resolved with a "d" op record.
- the progress is committed after every tick that moved it.
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
    RequestCode,
    Response,
    ResponseCode,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetsFull
from brokergroup_broker.store.message import StoredMessage
from brokergroup_broker.transaction import rules as tx
from brokergroup_broker.transaction.half_queue import HalfQueue, Progress
from brokergroup_remoting import ResponseCode as RemotingCode
from brokergroup_remoting.fields import RequestRefused

log = logging.getLogger(__name__)

#: How often the queues are read and the progress saved (checks run every
#: transactionCheckInterval; an END_TRANSACTION reads what it needs itself).
TICK_S = 0.2
#: Records read from one queue per tick (the loop is shared with every request).
READ_BUDGET = 4096
#: Records an END_TRANSACTION reads at most to catch up (a new master's first ones).
CATCH_UP_BUDGET = 65_536


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class EndPath(Protocol):
    """The produce path (core/produce.py `ProducePath`)."""

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...


@dataclass(frozen=True)
class HalfCheck:
    """One check back: the half message as stored, and the check's number (its
    TRANSACTION_CHECK_TIMES)."""

    producer_group: str
    message: StoredMessage
    check_times: int


class ProducerChecks(Protocol):
    """Asks a live producer of a group for a half message's state (a front end's)."""

    def check_producer(self, check: HalfCheck) -> bool:
        """Start the check; False when no producer of the group is online."""
        ...


@dataclass(frozen=True)
class EndTransaction:
    """EndTransactionRequestHeader, decoded by a front end."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    from_transaction_check: bool = False
    msg_id: str = ""
    transaction_id: str | None = None


@dataclass(frozen=True)
class EndOutcome:
    """An END_TRANSACTION's result: `error` the produce path's refusal of the commit's
    re-put or of the op record (None: done, or a repeat of a done one)."""

    error: ErrorResponse | None = None
    repeated: bool = False


@dataclass
class TransactionCounts:
    committed: int = 0
    rolled_back: int = 0
    repeated: int = 0
    checked: int = 0
    no_producer: int = 0
    discarded: int = 0
    lost_to_retention: int = 0


class TransactionService:
    def __init__(
        self,
        *,
        store: MessageStore,
        produce: EndPath,
        rules: tx.TransactionRules,
        master_term: Callable[[], int | None],
        confirm_offset: Callable[[], int],
        wall_ms: Callable[[], int] = _wall_ms,
        tick_s: float = TICK_S,
    ) -> None:
        """`master_term`: the masterEpoch while this broker is the master taking writes,
        else None; `confirm_offset`: what is committed (records beyond it are not read)."""
        self._store = store
        self._produce = produce
        self.rules = rules
        self._master_term = master_term
        self._confirm_offset = confirm_offset
        self._wall_ms = wall_ms
        self._tick_s = tick_s
        self._checks: list[ProducerChecks] = []
        self._term: int | None = None
        self._queue = HalfQueue(Progress())
        self._saved: Progress | None = None
        self._next_round_ms = 0
        self.counts = TransactionCounts()

    def attach_checks(self, checks: ProducerChecks) -> None:
        """A front end's producers (fronts start after the service); a check goes to the
        first front, in attach order, that has a live producer of the group."""
        self._checks.append(checks)

    # -- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            self.step()
            await asyncio.sleep(self._tick_s)

    def step(self) -> None:
        """One tick: (re)start the term, read, maybe a check round, checkpoint."""
        if not self._in_term():
            return
        self._read(self._confirm_offset(), READ_BUDGET)
        now = self._wall_ms()
        if now >= self._next_round_ms:
            self._next_round_ms = now + self.rules.check_interval_ms
            self._round(now)
        self._checkpoint(now)

    def _in_term(self) -> bool:
        term = self._master_term()
        if term is None:
            if self._term is not None:
                log.info("transactions: not the master any more; checks stop")
            self._term = None
            return False
        if term != self._term:
            self._start_term(term)
        return True

    def _start_term(self, term: int) -> None:
        offsets = self._store.consumer_offsets
        half = offsets.get(tx.SYSTEM_GROUP, tx.HALF_TOPIC, tx.HALF_QUEUE)
        op = offsets.get(tx.SYSTEM_GROUP, tx.OP_TOPIC, tx.HALF_QUEUE)
        # fetchConsumeOffset: no offset yet is the queue's min.
        if half is None:
            half = self._store.queue_offset_range(tx.HALF_TOPIC, tx.HALF_QUEUE)[0]
        if op is None:
            op = self._store.queue_offset_range(tx.OP_TOPIC, tx.HALF_QUEUE)[0]
        self._term = term
        self._queue = HalfQueue(Progress(half, op))
        self._saved = Progress(half, op)
        # As RocketMQ's check thread, the first round comes one interval after the start.
        self._next_round_ms = self._wall_ms() + self.rules.check_interval_ms
        log.info(
            "transactions: master at masterEpoch %d, half queue from %d, op queue from %d",
            term, half, op,
        )  # fmt: skip

    # -- reading ----------------------------------------------------------------------------
    def _read(self, confirm: int, budget: int) -> bool:
        """Read both queues up to `confirm` (halves first: an op names an earlier half);
        True when both are read to their end."""
        queue, store = self._queue, self._store
        low, high = store.queue_offset_range(tx.HALF_TOPIC, tx.HALF_QUEUE, confirm)
        if queue.half_cursor < low:
            lost = low - queue.half_cursor
            log.warning(
                "transactions: %d half messages below the queue's min %d were deleted by "
                "retention before they were resolved", lost, low,
            )  # fmt: skip
            self.counts.lost_to_retention += lost
            while queue.half_cursor < low:
                queue.skip_half(queue.half_cursor)
        left = budget
        while queue.half_cursor < high and left > 0:
            found = store.get_messages(
                tx.HALF_TOPIC, tx.HALF_QUEUE, queue.half_cursor, min(left, 256), confirm
            )
            if not found or found[0].queue_offset != queue.half_cursor:
                return False  # retention moved the min meanwhile: the next read skips
            for msg in found:
                queue.add_half(
                    msg.queue_offset,
                    msg.born_timestamp_ms,
                    tx.check_immunity_ms(msg.properties, self.rules),
                )
            left -= len(found)
        low, op_high = store.queue_offset_range(tx.OP_TOPIC, tx.HALF_QUEUE, confirm)
        if queue.op_cursor < low:
            queue.op_cursor = low  # deleted op records name long resolved halves
        left = budget
        while queue.op_cursor < op_high and left > 0:
            found = store.get_messages(
                tx.OP_TOPIC, tx.HALF_QUEUE, queue.op_cursor, min(left, 256), confirm
            )
            if not found or found[0].queue_offset != queue.op_cursor:
                return False
            for msg in found:
                queue.add_op(msg.queue_offset, msg.tags, tx.op_offsets(msg.body))
            left -= len(found)
        return queue.half_cursor >= high and queue.op_cursor >= op_high

    # -- END_TRANSACTION --------------------------------------------------------------------
    async def end_transaction(self, request: EndTransaction) -> EndOutcome | None:
        """Commit or roll back a half message (EndTransactionProcessor). None: nothing to do
        (commitOrRollback is TRANSACTION_NOT_TYPE: it stays open until checked). Raises
        RequestRefused naming why the request does not end a half message here."""
        kind = request.commit_or_rollback
        if kind == tx.TRANSACTION_NOT_TYPE:
            return None
        if kind not in (tx.TRANSACTION_COMMIT_TYPE, tx.TRANSACTION_ROLLBACK_TYPE):
            raise RequestRefused(
                RemotingCode.SYSTEM_ERROR,
                f"commitOrRollback {kind} is none of 0 (unknown), 8 (commit), 12 (rollback)",
            )
        self._require_master()
        found = await self._produce.message_at(request.commit_log_offset)
        term = self._require_master()
        if found is None:
            raise RequestRefused(
                RemotingCode.SYSTEM_ERROR, "Find prepared transaction message failed"
            )
        half = found[0]
        self._check_half(half, request)
        if not self._read(self._confirm_offset(), CATCH_UP_BUDGET):
            raise RequestRefused(
                RemotingCode.SYSTEM_BUSY,
                "the transaction state of this new master is still being read; retry",
            )
        offset = half.queue_offset
        if not self._queue.begin_end(offset):
            # Resolved already, or being ended: a repeat (the producer's END and a check
            # answer, or a resend) is answered without storing anything again.
            self.counts.repeated += 1
            return EndOutcome(repeated=True)
        commit = kind == tx.TRANSACTION_COMMIT_TYPE
        waits: list[asyncio.Future[Response]] = []
        if commit:
            first = self._start(self._committed_batch(half), real_queue=tx.real_queue_of(
                half.properties
            ))  # fmt: skip
            if isinstance(first, ErrorResponse):
                self._queue.release(offset)
                return EndOutcome(first)
            waits.append(first)
        op = self._start(_op_batch(tx.REMOVE_TAG, [offset]))
        if isinstance(op, ErrorResponse):
            if not commit:
                self._queue.release(offset)
            # A commit's message is stored: the half stays claimed this term, so no check
            # commits it again; a new term checks it (at-least-once).
            log.error("transactions: op record of half %d not stored: %s", offset, op.message)
            return EndOutcome(op)
        waits.append(op)
        answers = await asyncio.gather(*waits)
        if self._term != term:
            log.info("transactions: END of half %d answered after a role change", offset)
        for answer in answers:
            if isinstance(answer, ErrorResponse):
                return EndOutcome(answer)  # may be stored (at-least-once); claimed this term
        if commit:
            self.counts.committed += 1
        else:
            self.counts.rolled_back += 1
        return EndOutcome()

    def _require_master(self) -> int:
        if not self._in_term():
            raise RequestRefused(
                RemotingCode.SLAVE_NOT_AVAILABLE,
                "this broker is not the master taking writes: end transaction is forbidden",
            )
        assert self._term is not None
        return self._term

    def _check_half(self, half: StoredMessage, request: EndTransaction) -> None:
        """checkPrepareMessage and rejectCommitOrRollback, plus: it is a half message."""
        if half.topic != tx.HALF_TOPIC:
            raise RequestRefused(
                RemotingCode.SYSTEM_ERROR,
                f"Find prepared transaction message failed: the message at commit log offset "
                f"{request.commit_log_offset} is in topic {half.topic}, not a half message",
            )
        if half.properties.get(tx.PROPERTY_PRODUCER_GROUP) != request.producer_group:
            raise RequestRefused(RemotingCode.SYSTEM_ERROR, "The producer group wrong")
        if half.queue_offset != request.tran_state_table_offset:
            raise RequestRefused(
                RemotingCode.SYSTEM_ERROR, "The transaction state table offset wrong"
            )
        if half.physical_offset != request.commit_log_offset:
            raise RequestRefused(RemotingCode.SYSTEM_ERROR, "The commit log offset wrong")
        if (
            not request.from_transaction_check
            and tx.PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS in half.properties
            and self._wall_ms() - half.born_timestamp_ms
            > tx.check_immunity_ms(half.properties, self.rules)
        ):
            raise RequestRefused(
                RemotingCode.ILLEGAL_OPERATION,
                "the producer's commit or rollback came after the message's "
                "CHECK_IMMUNITY_TIME_IN_SECONDS: it waits for its check",
            )

    def _committed_batch(self, half: StoredMessage) -> SendBatch:
        """endMessageTransaction: the message for its real topic, every property kept (as
        RocketMQ's stored properties string keeps them), sysFlag of the commit type."""
        topic = half.properties.get(tx.PROPERTY_REAL_TOPIC) or ""
        return SendBatch(
            topic,
            tx.real_queue_of(half.properties),
            [half.body],
            [(None, None, half.properties)],
            flag=half.flag,
            sys_flag=tx.reset_transaction_type(half.sys_flag, tx.TRANSACTION_COMMIT_TYPE),
            born_timestamp_ms=half.born_timestamp_ms,
            born_host=half.born_host,
            reconsume_times=half.reconsume_times,
        )

    def _start(
        self, batch: SendBatch, *, real_queue: int | None = None
    ) -> asyncio.Future[Response] | ErrorResponse:
        """Append `batch` through the produce path now; its acknowledgement's future, or
        the refusal before anything was appended. A REAL_QID the topic does not have (any
        more) goes to any queue, as scheduled messages do."""
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def reply(response: Response) -> None:
            if not future.done():
                future.set_result(response)

        try:
            self._produce.start_send_batch(batch, reply)
        except BrokerError as exc:
            if exc.code is ResponseCode.BAD_REQUEST and real_queue is not None:
                return self._start(_any_queue(batch))
            return ErrorResponse(RequestCode.SEND_MESSAGES, exc.code, exc.message)
        return future

    # -- check rounds -----------------------------------------------------------------------
    def _round(self, now: int) -> None:
        decided = self._queue.check_round(now, self.rules.check_max)
        for offset in decided.discard:
            self._discard(offset)
        if decided.check:
            self._write_checks(decided.check)

    def _half_at(self, offset: int) -> StoredMessage | None:
        found = self._store.get_messages(
            tx.HALF_TOPIC, tx.HALF_QUEUE, offset, 1, self._confirm_offset()
        )
        return found[0] if found and found[0].queue_offset == offset else None

    def _discard(self, offset: int) -> None:
        """resolveDiscardMsg: to TRANS_CHECK_MAX_TIME_TOPIC queue 0 as it is (with its
        check count), then resolved by a "d" op record."""
        half = self._half_at(offset)
        if half is None:
            self.counts.lost_to_retention += 1
        else:
            log.warning(
                "transactions: half %d (%s) checked %d times without an answer: moved to %s",
                offset, half.properties.get(tx.PROPERTY_UNIQ_KEY), self.rules.check_max,
                tx.CHECK_MAX_TOPIC,
            )  # fmt: skip
            props = dict(half.properties)
            props[tx.PROPERTY_TRANSACTION_CHECK_TIMES] = str(self.rules.check_max)
            batch = SendBatch(
                tx.CHECK_MAX_TOPIC, 0, [half.body], [(None, None, props)], flag=half.flag,
                sys_flag=half.sys_flag, born_timestamp_ms=half.born_timestamp_ms,
                born_host=half.born_host, reconsume_times=half.reconsume_times,
            )  # fmt: skip
            if not self._put(batch, f"discard of half {offset}"):
                self._queue.release(offset)
                return
        if not self._put(_op_batch(tx.REMOVE_TAG, [offset]), f"op of discarded half {offset}"):
            self._queue.release(offset)
            return
        self.counts.discarded += 1

    def _put(self, batch: SendBatch, what: str) -> bool:
        """Append without waiting; False when refused before the append. A refusal after
        it is logged: the record may survive (its op is read back if so)."""

        def reply(response: Response) -> None:
            if isinstance(response, ErrorResponse):
                log.warning("transactions: %s not acknowledged: %s", what, response.message)

        try:
            self._produce.start_send_batch(batch, reply)
        except BrokerError as exc:
            log.warning("transactions: %s refused: %s", what, exc)
            return False
        return True

    def _write_checks(self, checks: list[tuple[int, int]]) -> None:
        """One "c" op record counts this round's checks; once it is acknowledged (the count
        survives a failover) the checks go out."""
        term = self._term

        def reply(response: Response) -> None:
            if isinstance(response, SendRunResult) and self._term == term:
                for offset, times in checks:
                    self._send_check(offset, times)
                return
            for offset, _ in checks:
                self._queue.release(offset)

        try:
            self._produce.start_send_batch(_op_batch(tx.CHECK_TAG, [o for o, _ in checks]), reply)
        except BrokerError as exc:
            log.warning("transactions: check round refused: %s", exc)
            for offset, _ in checks:
                self._queue.release(offset)

    def _send_check(self, offset: int, times: int) -> None:
        half = self._half_at(offset)
        if half is None:
            return
        group = half.properties.get(tx.PROPERTY_PRODUCER_GROUP, "")
        self.counts.checked += 1
        check = HalfCheck(group, half, times)
        if not any(front.check_producer(check) for front in self._checks):
            # As RocketMQ: the check counts even with nobody to ask.
            self.counts.no_producer += 1
            log.info("transactions: no live producer of group %s to check half %d", group, offset)

    # -- progress ---------------------------------------------------------------------------
    def _checkpoint(self, now: int) -> None:
        progress = self._queue.progress()
        if progress == self._saved:
            return
        offsets = self._store.consumer_offsets
        try:
            # One loop step: a peer's snapshot holds both or neither.
            offsets.commit(tx.SYSTEM_GROUP, tx.HALF_TOPIC, tx.HALF_QUEUE, progress.half, now)
            offsets.commit(tx.SYSTEM_GROUP, tx.OP_TOPIC, tx.HALF_QUEUE, progress.op, now)
        except ConsumerOffsetsFull as exc:
            log.error("transactions: progress not saved: %s", exc)
            return
        self._saved = progress

    # -- /v1/status -------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        queue = self._queue
        saved = self._saved or Progress()
        return {
            "masterEpoch": self._term,
            "pending": len(queue.pending) if self._term is not None else None,
            "halfCursor": queue.half_cursor,
            "opCursor": queue.op_cursor,
            "halfProgress": saved.half,
            "opProgress": saved.op,
            "committed": self.counts.committed,
            "rolledBack": self.counts.rolled_back,
            "repeated": self.counts.repeated,
            "checked": self.counts.checked,
            "noProducer": self.counts.no_producer,
            "discarded": self.counts.discarded,
            "lostToRetention": self.counts.lost_to_retention,
        }


def _op_batch(tag: str, half_offsets: list[int]) -> SendBatch:
    return SendBatch(tx.OP_TOPIC, tx.HALF_QUEUE, [tx.op_body(half_offsets)], [(None, tag, {})])


def _any_queue(batch: SendBatch) -> SendBatch:
    return SendBatch(
        batch.topic, None, batch.bodies, batch.extras, flag=batch.flag, sys_flag=batch.sys_flag,
        born_timestamp_ms=batch.born_timestamp_ms, born_host=batch.born_host,
        reconsume_times=batch.reconsume_times,
    )  # fmt: skip
