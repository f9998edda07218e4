"""The one produce/pull path of a broker (DESIGN.md §3.3, §3.4b, §3.5): every front
end (the project's protocol server today, RocketMQ remoting next) calls this, so
there is one commit rule and one fencing. A produce: checks (role, size, lease,
store, admission) → `store.put_run` *before the first await* (keeps a connection's
pipelined batches in order) → the group commit thread → `ReplicationLink.wait_for_ack`
→ the reply. Pulls, offsets and consumer offsets with their role checks.

`ProduceAndPull` is the narrow interface a front end gets."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from brokergroup_broker.broker_stats import OWN_PROTOCOL_GROUP, BrokerStats, LatencyBuckets
from brokergroup_broker.core.broker_settings import (
    OUTCOME_CODES,
    BrokerSettings,
    mono_ms,
    require_valid_topic,
    wall_ms,
)
from brokergroup_broker.core.commit_rule import AckOutcome, ReplicationView
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.replication import ReplicationLink
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.core.store_faults import StoreFaults
from brokergroup_broker.protocol.handler import RequestHandler
from brokergroup_broker.protocol.messages import (
    NO_CONSUMER_OFFSET,
    BrokerError,
    ErrorResponse,
    ProduceMessage,
    PulledMessage,
    PullResult,
    RecordPull,
    RequestCode,
    Response,
    ResponseCode,
    SendBatch,
    SendResult,
    SendRunResult,
    SentMessage,
)
from brokergroup_broker.store import LoopGroupCommit, MessageStore
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetsFull
from brokergroup_broker.store.errors import (
    MessageInvalid,
    StoreBusy,
    StoreNotWritable,
    TopicNotStorable,
)
from brokergroup_broker.store.message import MESSAGE_MAGIC_CODE, StoredMessage
from brokergroup_broker.store.message_scan import decode_record

log = logging.getLogger(__name__)


class ProduceAndPull(RequestHandler, Protocol):
    """What a client front end may call: the protocol server's `RequestHandler` plus
    the produce fast path (protocol/handler.py)."""

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...

    async def pull_records(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> RecordPull: ...

    async def store_timestamp_at(
        self, topic: str, queue_id: int, queue_offset: int
    ) -> int | None: ...

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...

    def topic_queue_counts(self) -> dict[str, int]: ...

    def holds_topic(self, topic: str) -> bool: ...


class ProducePath:
    """Implements `ProduceAndPull`; the one owner of the round-robin queue cursors."""

    def __init__(
        self,
        *,
        settings: BrokerSettings,
        config: BrokerConfig,
        store: MessageStore,
        role: RoleCore,
        lease: MasterLease,
        replication: ReplicationLink,
        faults: StoreFaults,
        committer: LoopGroupCommit | None,
        heartbeat_now: Callable[[], None],
        clock_ms: Callable[[], int] = mono_ms,
        wall_clock_ms: Callable[[], int] = wall_ms,
        stats: BrokerStats | None = None,
        round_clock_s: Callable[[], float] = time.perf_counter,
        fixed_queue_counts: Mapping[str, int] | None = None,
        configured_queues: Callable[[str], int | None] = lambda _topic: None,
    ) -> None:
        """`clock_ms`: monotonic milliseconds for the lease check and the commit rule's
        waiter timeouts; `wall_clock_ms`: wall milliseconds stamped on messages and
        consumer offsets; `round_clock_s`: the commit round's clock (seconds). Tests pass
        fakes. `stats`: the broker's put/get counters (docs/metrics.md), fed here for every
        front end's sends and for the own protocol's pulls. `fixed_queue_counts`: topics
        whose queues are fixed by the broker, not by defaultTopicQueueNums
        (SCHEDULE_TOPIC_XXXX has one queue per delay level). `configured_queues`: a topic's
        writeQueueNums from its config (UPDATE_AND_CREATE_TOPIC), None without one."""
        self._fixed_queue_counts = dict(fixed_queue_counts or {})
        self._configured_queues = configured_queues
        self.stats = (
            BrokerStats(wall_clock_ms, cluster_name=settings.cluster_name)
            if stats is None
            else stats
        )
        #: Append to acknowledgement of every acknowledged send (the commit round).
        self.commit_rounds = LatencyBuckets()
        self._round_clock_s = round_clock_s
        self._settings = settings
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self._config = config
        self._store = store
        self._role = role
        self._lease = lease
        self._replication = replication
        self._faults = faults
        #: SYNC_FLUSH: fdatasyncs appended produces, once per loop pass (group commit).
        self._committer = committer
        self._heartbeat_now = heartbeat_now
        self._queue_cursor: dict[str, int] = {}
        self.arrivals = store.arrivals  # held pulls of the remoting front (store/arrivals.py)

    def _check_send(self, count: int) -> tuple[int, ReplicationView]:
        """The checks before a produce appends (role, size, lease, store, admission);
        raises BrokerError; returns now (mono ms) and the view admission decided on."""
        self._role.require_master_for_write()
        if count < 1:
            raise BrokerError(ResponseCode.BAD_REQUEST, "a produce needs at least one message")
        if count > self._config.max_send_batch_messages:
            raise BrokerError(
                ResponseCode.BAD_REQUEST,
                f"{count} messages in one batch; maxSendBatchMessages is "
                f"{self._config.max_send_batch_messages}",
            )
        now = self._clock_ms()
        if not self._lease.valid(now):
            raise BrokerError(
                ResponseCode.FENCED,
                f"master {self._role.broker_id} at masterEpoch {self._role.master_epoch} has had no "
                f"controller heartbeat answer for masterLeaseMs {self._config.master_lease_ms}: "
                "not acknowledging writes until the controller confirms it",
            )
        # The store's one verdict, the same heartbeats and /readyz report (§3.4a).
        writable, reason = self._faults.health(self._store)
        if not writable:
            raise BrokerError(
                ResponseCode.STORE_NOT_WRITABLE,
                f"broker {self._role.broker_id} store is not writable: {reason}",
            )
        refusal, view = self._replication.admit()
        if refusal is not None:
            raise BrokerError(OUTCOME_CODES[refusal], self._replication.refusal_text(refusal, view))
        return now, view

    def _outcome_error(self, outcome: AckOutcome) -> BrokerError:
        return BrokerError(
            OUTCOME_CODES[outcome],
            self._replication.refusal_text(outcome, self._replication.advance_confirm_offset()),
            master_address=self._role.state.master_address,
        )

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None:
        """The produce fast path (protocol server, `SendBatch` from the wire): the same
        checks, order and commit rule as `send_messages`, without per-message objects.
        Appends synchronously (so a connection's batches keep their order); `reply` is
        called once, now or when the commit rule decides. Raises BrokerError to refuse
        before anything is appended."""
        require_valid_topic(batch.topic)
        now, view = self._check_send(len(batch))
        store = self._store
        chosen = self._choose_queue(batch.topic, batch.queue_id)
        host = self._settings.store_host
        born = self._wall_clock_ms()
        committer = self._committer
        try:
            run = store.put_run(
                batch.topic,
                chosen,
                batch.bodies,
                batch.store_properties(),
                store_host=host,
                born_host=host if batch.born_host is None else batch.born_host,
                now_ms=born,
                flush=False if committer is not None else None,
                flag=batch.flag,
                sys_flag=batch.sys_flag,
                born_timestamp_ms=batch.born_timestamp_ms,
                reconsume_times=batch.reconsume_times,
            )
        except TopicNotStorable as exc:
            raise BrokerError(ResponseCode.TOPIC_INVALID, str(exc)) from exc
        except MessageInvalid as exc:
            raise BrokerError(ResponseCode.BAD_REQUEST, str(exc)) from exc
        except StoreBusy as exc:
            raise BrokerError(ResponseCode.SYSTEM_BUSY, str(exc)) from exc
        except StoreNotWritable as exc:
            self._heartbeat_now()
            raise BrokerError(ResponseCode.STORE_NOT_WRITABLE, str(exc)) from exc
        result = SendRunResult(
            chosen, run.first_queue_offset, run.physical_offsets, self._role.master_epoch
        )
        started_s = self._round_clock_s()

        def on_outcome(outcome: AckOutcome) -> None:
            if outcome is AckOutcome.ACKED:
                # Counted once acknowledged: a put the commit rule refused may be cut.
                self.commit_rounds.observe(self._round_clock_s() - started_s)
                self.stats.on_put(batch.topic, len(run.sizes), sum(run.sizes))
                reply(result)
                return
            err = self._outcome_error(outcome)
            reply(
                ErrorResponse(RequestCode.SEND_MESSAGES, err.code, err.message, err.master_address)
            )

        if committer is not None:
            # The append did not fdatasync, so admission's view still holds (the group
            # commit's progress reaches the commit rule later, as a release of its own).
            # The committer orders the sync and the HA wake-up (the slaves receive while
            # the master syncs, whether on its loop or in its thread).
            committer.request(
                run.end_offset,
                lambda: self._replication.wait_for_ack(run.end_offset, now, on_outcome, view),
            )
        else:  # the append synced (or counts unsynced): the view moved with it
            self._replication.wait_for_ack(run.end_offset, now, on_outcome)

    async def send_messages(
        self, topic: str, queue_id: int | None, messages: Sequence[ProduceMessage]
    ) -> SendResult:
        """`ProduceMessage`s through the one produce path (`start_send_batch`)."""
        for name in {m.topic for m in messages if m.topic} - {topic}:
            raise BrokerError(
                ResponseCode.BAD_REQUEST,
                f"a send request is for one topic: {topic!r}, not also {name!r}",
            )
        extras = [
            (m.key, m.tags, m.properties) if m.properties or m.key is not None or m.tags is not None
            else None
            for m in messages
        ]  # fmt: skip
        batch = SendBatch(
            topic, queue_id, [m.body for m in messages], extras if any(extras) else None
        )
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def reply(response: Response) -> None:
            if not future.done():
                future.set_result(response)

        self.start_send_batch(batch, reply)
        response = await future
        if isinstance(response, ErrorResponse):
            raise response.to_error()
        assert isinstance(response, SendRunResult)
        return SendResult(
            messages=tuple(
                SentMessage(response.queue_id, response.first_queue_offset + i, phys)
                for i, phys in enumerate(response.physical_offsets)
            ),
            master_epoch=response.master_epoch,
        )

    def _choose_queue(self, topic: str, queue_id: int | None) -> int:
        configured = self._configured_queues(topic)
        if configured is None:
            configured = self._store.queue_count(topic) or self._config.default_topic_queue_nums
        count = max(configured, self._fixed_queue_counts.get(topic, 0))
        if queue_id is not None and queue_id >= 0:
            if queue_id >= count:
                raise BrokerError(
                    ResponseCode.BAD_REQUEST,
                    f"topic {topic} has {count} queues; queue {queue_id} does not exist",
                )
            return queue_id
        cursor = self._queue_cursor.get(topic, 0)
        self._queue_cursor[topic] = cursor + 1
        return cursor % count

    async def pull_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        require_valid_topic(topic)
        self._role.require_readable()
        store = self._store
        confirm = self._replication.confirm_offset()
        low, high = store.queue_offset_range(topic, queue_id, confirm)
        if queue_offset < low:
            return PullResult((), low, low, high)
        limit = max(1, min(max_count, self._config.max_pull_messages))
        stored = store.get_messages(topic, queue_id, queue_offset, limit, confirm)
        if stored and stored[0].queue_offset != queue_offset:
            # Retention moved the queue's min between the two reads: continue at it.
            low, high = store.queue_offset_range(topic, queue_id, confirm)
            return PullResult((), low, low, high)
        pulled = tuple(
            PulledMessage(
                topic=m.topic,
                queue_id=m.queue_id,
                queue_offset=m.queue_offset,
                physical_offset=m.physical_offset,
                body=bytes(m.body),
                properties=dict(m.properties),
                born_timestamp_ms=m.born_timestamp_ms,
                store_timestamp_ms=m.store_timestamp_ms,
                body_crc=m.body_crc,
                flag=m.flag,
            )
            for m in stored
        )
        next_offset = pulled[-1].queue_offset + 1 if pulled else queue_offset
        if stored:
            self.stats.on_get(OWN_PROTOCOL_GROUP, topic, len(stored), sum(m.size for m in stored))
        return PullResult(pulled, next_offset, low, high)

    async def pull_records(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> RecordPull:
        """`pull_messages` with each record's bytes as stored: the same role check and
        confirmOffset bound."""
        require_valid_topic(topic)
        self._role.require_readable()
        store = self._store
        confirm = self._replication.confirm_offset()
        low, high = store.queue_offset_range(topic, queue_id, confirm)
        if queue_offset < low or queue_offset >= high:
            return RecordPull((), queue_offset, low, high)
        limit = max(1, min(max_count, self._config.max_pull_messages))
        got = store.get_records(topic, queue_id, queue_offset, limit, confirm)
        if got and got[0][0].queue_offset != queue_offset:
            # Retention moved the queue's min between the two reads: answer as below it.
            low, high = store.queue_offset_range(topic, queue_id, confirm)
            return RecordPull((), queue_offset, low, high)
        next_offset = got[-1][0].queue_offset + 1 if got else queue_offset
        return RecordPull(tuple(raw for _, raw in got), next_offset, low, high)

    async def pull_matching_records(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        *,
        keep_tags_code: Callable[[int], bool],
        keep_properties: Callable[[dict[str, str]], bool],
        max_scan: int,
    ) -> RecordPull:
        """`pull_records` through a subscription's filter (brokergroup_broker.filter): an
        entry whose consume queue tagsCode `keep_tags_code` refuses is passed over without
        reading its record; a record whose properties `keep_properties` refuses is read but
        not answered. `next_offset` is past every entry looked at (at most `max_scan`), so
        a pull that matched nothing still moves on."""
        require_valid_topic(topic)
        self._role.require_readable()
        store = self._store
        confirm = self._replication.confirm_offset()
        low, high = store.queue_offset_range(topic, queue_id, confirm)
        if queue_offset < low or queue_offset >= high:
            return RecordPull((), queue_offset, low, high)
        limit = max(1, min(max_count, self._config.max_pull_messages))
        got, start, next_offset = store.scan_records(
            topic, queue_id, queue_offset, limit, confirm, keep_tags_code, max_scan
        )
        if start != queue_offset:
            # Retention moved the queue's min between the two reads: answer as below it.
            low, high = store.queue_offset_range(topic, queue_id, confirm)
            return RecordPull((), queue_offset, low, high)
        kept = tuple(raw for message, raw in got if keep_properties(message.properties))
        return RecordPull(kept, next_offset, low, high)

    async def store_timestamp_at(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        """storeTimestamp of the record at `queue_offset` (None if not readable there)."""
        require_valid_topic(topic)
        self._role.require_readable()
        got = self._store.get_records(
            topic, queue_id, queue_offset, 1, self._replication.confirm_offset(), raw=False
        )
        return got[0][0].store_timestamp_ms if got else None

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None:
        """The record starting at `physical_offset` with its bytes, if it is one a consumer
        may read (below confirmOffset); None otherwise."""
        self._role.require_readable()
        store = self._store
        bound = min(self._replication.confirm_offset(), store.max_offset)
        if not store.served_min_offset <= physical_offset < bound:
            return None
        head = store.read_bytes(physical_offset, 8)
        if len(head) < 8:
            return None
        size, magic = struct.unpack(">ii", head)
        if magic != MESSAGE_MAGIC_CODE or size <= 8 or physical_offset + size > bound:
            return None
        raw = store.read_bytes(physical_offset, size)
        if len(raw) != size:
            return None
        return decode_record(raw, 0), raw

    def topic_queue_counts(self) -> dict[str, int]:
        """Every topic this store holds, with its queue count (a name server registration)."""
        default = self._config.default_topic_queue_nums
        return {t: max(n, default) for t, n in self._store.queues.topics().items()}

    def holds_topic(self, topic: str) -> bool:
        """`topic in topic_queue_counts()`, without building it."""
        return self._store.queue_count(topic) > 0

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        require_valid_topic(topic)
        self._role.require_master_reads()
        # Max is what a consumer can read: records up to confirmOffset.
        return self._store.queue_offset_range(topic, queue_id, self._replication.confirm_offset())

    async def topic_queue_count(self, topic: str) -> int:
        require_valid_topic(topic)
        self._role.require_readable()
        count = self._store.queue_count(topic)
        if count == 0:
            raise BrokerError(ResponseCode.TOPIC_NOT_FOUND, f"topic {topic} has no queues here")
        return count

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        require_valid_topic(topic)
        self._role.require_master_reads()  # the master, or an acting master (RIP-32)
        try:
            self._store.consumer_offsets.commit(
                group, topic, queue_id, offset, self._wall_clock_ms()
            )
        except ConsumerOffsetsFull as exc:  # a bound of the table (docs/security.md)
            raise BrokerError(ResponseCode.SYSTEM_BUSY, str(exc)) from None

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        require_valid_topic(topic)
        self._role.require_master_reads()
        found = self._store.consumer_offsets.get(group, topic, queue_id)
        return NO_CONSUMER_OFFSET if found is None else found

    def consumer_offset_keys(self) -> list[tuple[str, str, int]]:
        """(group, topic, queueId) of every consumer offset held here, sorted (which groups
        consume a topic and which topics a group consumes: the admin queries' whichGroupByTopic
        and whichTopicByConsumer)."""
        return sorted(self._store.consumer_offsets.snapshot().offsets)
