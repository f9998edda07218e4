"""The request side of a broker (DESIGN.md §3.3, §3.4b, §3.5): the one produce
path (`start_send_batch`; `send_messages` wraps it) — checks, append, commit
rule wait — and pulls, offsets and consumer offsets with their role checks.
A mixin of `Broker`: the state lives there."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    _OUTCOME_CODES,
    _require_valid_topic,
    mono_ms,
    wall_ms,
)
from brokergroup_broker.core.broker_state import BrokerState
from brokergroup_broker.core.commit_rule import (
    AckOutcome,
    ReplicationView,
)
from brokergroup_broker.protocol.messages import (
    NO_CONSUMER_OFFSET,
    BrokerError,
    ErrorResponse,
    ProduceMessage,
    PulledMessage,
    PullResult,
    RequestCode,
    Response,
    ResponseCode,
    SendBatch,
    SendResult,
    SendRunResult,
    SentMessage,
)
from brokergroup_broker.store.errors import (
    MessageInvalid,
    StoreBusy,
    StoreNotWritable,
    TopicNotStorable,
)

if TYPE_CHECKING:
    from brokergroup_broker.core.broker import Broker

log = logging.getLogger(__name__)


class RequestHandling(BrokerState):
    def _master_hint(self: Broker) -> str | None:
        return self.role.master_address

    def _require_master_for_write(self: Broker) -> None:
        if self.role.acting_master:
            raise BrokerError(
                ResponseCode.READ_ONLY,
                f"broker {self.broker_id} is acting master (read-only, RIP-32): the group has "
                "no master; writes resume once the controller elects one",
            )
        if self.role.role is roles.Role.SLAVE:
            raise BrokerError(
                ResponseCode.NOT_MASTER,
                f"broker {self.broker_id} is a slave at masterEpoch {self.role.master_epoch}",
                master_address=self._master_hint(),
            )
        if self.role.role is not roles.Role.MASTER or not self._accepting_writes:
            raise BrokerError(
                ResponseCode.FENCED,
                f"broker {self.broker_id} has no confirmed role yet "
                f"(role {self.role.role}, masterEpoch {self.role.master_epoch})",
            )

    def _require_readable(self: Broker) -> None:
        if self.role.role is roles.Role.FENCED and not self.role.acting_master:
            raise BrokerError(
                ResponseCode.FENCED,
                f"broker {self.broker_id} is fenced: its role is not confirmed "
                f"(masterEpoch {self.role.master_epoch})",
            )

    def _require_master_reads(self: Broker) -> None:
        """Offset queries and consumer offsets: the master or an acting master."""
        self._require_readable()
        if self.role.role is roles.Role.SLAVE and not self.role.acting_master:
            raise BrokerError(
                ResponseCode.NOT_MASTER,
                f"broker {self.broker_id} is a slave; ask the master",
                master_address=self._master_hint(),
            )

    def confirm_offset(self: Broker) -> int:
        store = self.store
        if store is None:
            return 0
        return min(self._confirm_offset, store.max_offset)

    def _check_send(self: Broker, count: int) -> int:
        """The checks before a produce appends (role, size, lease, store, admission);
        raises BrokerError; returns now (mono ms)."""
        self._require_master_for_write()
        if count < 1:
            raise BrokerError(ResponseCode.BAD_REQUEST, "a produce needs at least one message")
        if count > self.config.max_send_batch_messages:
            raise BrokerError(
                ResponseCode.BAD_REQUEST,
                f"{count} messages in one batch; maxSendBatchMessages is "
                f"{self.config.max_send_batch_messages}",
            )
        now = mono_ms()
        if not self.lease.valid(now):
            raise BrokerError(
                ResponseCode.FENCED,
                f"master {self.broker_id} at masterEpoch {self.role.master_epoch} has had no "
                f"controller heartbeat answer for masterLeaseMs {self.config.master_lease_ms}: "
                "not acknowledging writes until the controller confirms it",
            )
        writable, reason = self._store_health()
        if not writable:
            raise BrokerError(
                ResponseCode.STORE_NOT_WRITABLE,
                f"broker {self.broker_id} store is not writable: {reason}",
            )
        view = self._view()
        refusal = self.waiters.admit(view)
        if refusal is not None:
            raise BrokerError(_OUTCOME_CODES[refusal], self._refusal_text(refusal, view))
        return now

    def _appended(
        self: Broker, end_offset: int, now: int, on_outcome: Callable[[AckOutcome], None]
    ) -> None:
        """After an append ending at `end_offset`: wake the group commit thread and the
        HA senders, then call `on_outcome` once the commit rule decides (maybe now)."""
        committer = self._committer
        if committer is not None:
            committer.request(end_offset)
        if self.ha_master is not None:
            self.ha_master.notify_appended()
        token = next(self._tokens)
        outcome = self.waiters.add(token, end_offset, now, self._view())
        if outcome is not None:
            on_outcome(outcome)
            return
        self._futures[token] = on_outcome
        self._release()

    def _outcome_error(self: Broker, outcome: AckOutcome) -> BrokerError:
        return BrokerError(
            _OUTCOME_CODES[outcome],
            self._refusal_text(outcome, self._view()),
            master_address=self._master_hint(),
        )

    def start_send_batch(self: Broker, batch: SendBatch, reply: Callable[[Response], None]) -> None:
        """The produce fast path (protocol server, `SendBatch` from the wire): the same
        checks, order and commit rule as `send_messages`, without per-message objects.
        Appends synchronously (so a connection's batches keep their order); `reply` is
        called once, now or when the commit rule decides. Raises BrokerError to refuse
        before anything is appended."""
        _require_valid_topic(batch.topic)
        now = self._check_send(len(batch))
        store = self._store()
        chosen = self._choose_queue(batch.topic, batch.queue_id)
        host = (self.settings.advertise_address, self.settings.client_port)
        born = wall_ms()
        committer = self._committer
        try:
            run = store.put_run(
                batch.topic,
                chosen,
                batch.bodies,
                batch.store_properties(),
                store_host=host,
                born_host=host,
                now_ms=born,
                flush=False if committer is not None else None,
            )
        except TopicNotStorable as exc:
            raise BrokerError(ResponseCode.TOPIC_INVALID, str(exc)) from exc
        except MessageInvalid as exc:
            raise BrokerError(ResponseCode.BAD_REQUEST, str(exc)) from exc
        except StoreBusy as exc:
            raise BrokerError(ResponseCode.SYSTEM_BUSY, str(exc)) from exc
        except StoreNotWritable as exc:
            self._heartbeat_now.set()
            raise BrokerError(ResponseCode.STORE_NOT_WRITABLE, str(exc)) from exc
        result = SendRunResult(
            chosen, run.first_queue_offset, run.physical_offsets, self.role.master_epoch
        )

        def on_outcome(outcome: AckOutcome) -> None:
            if outcome is AckOutcome.ACKED:
                reply(result)
                return
            err = self._outcome_error(outcome)
            reply(
                ErrorResponse(RequestCode.SEND_MESSAGES, err.code, err.message, err.master_address)
            )

        self._appended(run.end_offset, now, on_outcome)

    async def send_messages(
        self: Broker, topic: str, queue_id: int | None, messages: Sequence[ProduceMessage]
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

    def _refusal_text(self: Broker, outcome: AckOutcome, view: ReplicationView) -> str:
        sync = self.sync
        members = sorted(sync.effective_set()) if sync is not None else []
        match outcome:
            case AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH:
                return (
                    f"SyncStateSet {members} has {view.in_sync_count} in-sync replicas, "
                    f"minInSyncReplicas is {self.config.min_in_sync_replicas}"
                )
            case AckOutcome.SLAVE_TIMEOUT:
                return (
                    f"not acknowledged by SyncStateSet {members} within slaveTimeoutMs "
                    f"{self.config.slave_timeout_ms} (confirmOffset {view.confirm_offset}); "
                    "the message may still be stored"
                )
            case AckOutcome.SYSTEM_BUSY:
                return (
                    f"{len(self.waiters)} produces wait for replication (maxPendingAcks "
                    f"{self.config.max_pending_acks}); retry later"
                )
            case AckOutcome.FENCED:
                return (
                    f"master {self.broker_id} lost its lease (masterLeaseMs "
                    f"{self.config.master_lease_ms}) before replication finished"
                )
            case _:
                return f"broker {self.broker_id} is no longer master"

    def _choose_queue(self: Broker, topic: str, queue_id: int | None) -> int:
        count = self._store().queue_count(topic) or self.config.default_topic_queue_nums
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
        self: Broker, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        _require_valid_topic(topic)
        self._require_readable()
        store = self._store()
        confirm = self.confirm_offset()
        low, high = store.queue_offset_range(topic, queue_id, confirm)
        if queue_offset < low:
            return PullResult((), low, low, high)
        limit = max(1, min(max_count, self.config.max_pull_messages))
        stored = store.get_messages(topic, queue_id, queue_offset, limit, confirm)
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
        return PullResult(pulled, next_offset, low, high)

    async def query_offsets(self: Broker, topic: str, queue_id: int) -> tuple[int, int]:
        _require_valid_topic(topic)
        self._require_master_reads()
        # Max is what a consumer can read: records up to confirmOffset.
        return self._store().queue_offset_range(topic, queue_id, self.confirm_offset())

    async def topic_queue_count(self: Broker, topic: str) -> int:
        _require_valid_topic(topic)
        self._require_readable()
        count = self._store().queue_count(topic)
        if count == 0:
            raise BrokerError(ResponseCode.TOPIC_NOT_FOUND, f"topic {topic} has no queues here")
        return count

    async def commit_consumer_offset(
        self: Broker, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        _require_valid_topic(topic)
        self._require_master_reads()  # the master, or an acting master (RIP-32)
        self._store().consumer_offsets.commit(group, topic, queue_id, offset, wall_ms())

    async def query_consumer_offset(self: Broker, group: str, topic: str, queue_id: int) -> int:
        _require_valid_topic(topic)
        self._require_master_reads()
        found = self._store().consumer_offsets.get(group, topic, queue_id)
        return NO_CONSUMER_OFFSET if found is None else found
