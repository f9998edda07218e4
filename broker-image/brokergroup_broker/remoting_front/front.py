"""The broker's RocketMQ remoting front end: one handler per request code, over the one
produce/pull path (`ProduceAndPull`, core/produce.py).

Theory of operation: the transport (`brokergroup_remoting.net`) has already checked the
request's AccessKey/SecretKey signature and its code before a handler here runs. A handler
decodes its header with `wire` (a bad field → SYSTEM_ERROR with the reason, as RocketMQ
answers a RemotingCommandException; nothing is stored), calls the produce path, and turns
its answer or its `BrokerError` into RocketMQ's response (`wire.SEND_CODE_OF`). Sends go
through `start_send_batch`, so the commit rule, masterEpoch fencing, lease and admission
are the same as for the project's own protocol: a RocketMQ SEND_OK means what our SUCCESS
means. Pulls send the records exactly as the store holds them (RocketMQ's v1 layout), up to
confirmOffset; a pull with the suspend flag that finds nothing new holds (long polling) until
its queue's readable end moves (the store's `Arrivals`, as RocketMQ's PullRequestHoldService
is woken by NotifyMessageArrivingListener), at most its suspendTimeoutMillis; an idle held
pull costs no CPU. Over `max_held_pulls` held at once, a pull is answered SYSTEM_BUSY.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.protocol.messages import (
    NO_CONSUMER_OFFSET,
    BrokerError,
    ErrorResponse,
    RecordPull,
    Response,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.admin_queries import AdminQueries
from brokergroup_broker.remoting_front.broker_status import BrokerStatus
from brokergroup_broker.remoting_front.clients import ConsumerGroups, QueueLocks
from brokergroup_broker.remoting_front.group_notify import GroupNotifier
from brokergroup_broker.remoting_front.key_query import RecordSource
from brokergroup_broker.store.arrivals import Arrivals
from brokergroup_broker.store.health import DiskSpace
from brokergroup_broker.store.message import StoredMessage
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import decode_json_object, json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import BadField, RequestRefused
from brokergroup_remoting.net import Connection, Dispatch, Handler

log = logging.getLogger(__name__)

#: MessageConst: properties a send may carry that need features not built here.
_DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
_MAX_HEARTBEAT_GROUPS = 1024
#: Topics declared before their first record (UPDATE_AND_CREATE_TOPIC's, consumer groups'
#: retry topics); docs/security.md "Client state".
MAX_DECLARED_TOPICS = 10_000


def _mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ProduceAndPull(RecordSource, Protocol):
    """What this front end calls of the broker's one produce/pull path
    (`core.produce.ProducePath` implements it; the broker package's layering keeps this
    package from importing `core`)."""

    @property
    def arrivals(self) -> Arrivals: ...

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...

    def topic_queue_counts(self) -> dict[str, int]: ...

    def holds_topic(self, topic: str) -> bool: ...

    async def topic_queue_count(self, topic: str) -> int: ...

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None: ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...


@dataclass(frozen=True)
class FrontSettings:
    """What the front end needs of the broker's settings."""

    cluster_name: str
    broker_name: str
    store_host: tuple[str, int]
    """The address records are stored with (offset message ids are built from it)."""
    auto_create_topic: bool = False
    """Create a topic on its first send (RocketMQ's autoCreateTopicEnable): on in the local
    runtime, off by default elsewhere (a typo'd topic then fails instead of existing)."""
    default_queue_nums: int = 4
    """Queues of a created topic (UPDATE_AND_CREATE_TOPIC asks for more: capped here, since
    the produce path's queue choice is bounded by defaultTopicQueueNums)."""
    max_batch_messages: int = 1024
    max_held_pulls: int = 100_000
    """Pulls held (long polling) at once on this broker; one more is answered SYSTEM_BUSY
    (a stock consumer pulls again 3 s later), as RocketMQ answers when its pull thread
    pool's queue is full. Each connection holds at most its in-flight limit (net.py)."""
    max_suspend_ms: int = 30_000
    """Upper bound of a pull's suspendTimeoutMillis (the stock consumer asks 15 s)."""
    key_query_budget_bytes: int = 32 << 20
    """Record bytes one QUERY_MESSAGE may look at (key_query.py): more finds older
    messages in a busy topic, at up to that many bytes read per query."""


def rocketmq_config(settings: FrontSettings) -> dict[str, str]:
    """The settings GET_BROKER_CONFIG shows, under RocketMQ's BrokerConfig names (only
    those this broker has; Java's Boolean.toString spelling)."""
    return {
        "brokerClusterName": settings.cluster_name,
        "brokerName": settings.broker_name,
        "brokerIP1": settings.store_host[0],
        "listenPort": str(settings.store_host[1]),
        "autoCreateTopicEnable": str(settings.auto_create_topic).lower(),
        "defaultTopicQueueNums": str(settings.default_queue_nums),
        "longPollingEnable": "true",
    }


class RemotingFront:
    """Request handlers of the broker's remoting port; `handlers` is what the server serves."""

    def __init__(
        self,
        produce: ProduceAndPull,
        settings: FrontSettings,
        *,
        on_new_topic: Callable[[str], None] = lambda _topic: None,
        disk_space: Callable[[], DiskSpace] | None = None,
        clock_ms: Callable[[], int] = _mono_ms,
    ) -> None:
        self._produce = produce
        self._settings = settings
        self._message_id_prefix = wire.store_host_prefix(settings.store_host)
        self._on_new_topic = on_new_topic
        self._clock_ms = clock_ms
        self.consumers = ConsumerGroups()
        self.locks = QueueLocks()
        self._notifier = GroupNotifier()
        #: Topics that exist before their first record: retry topics of the consumer groups
        #: that heartbeat here and UPDATE_AND_CREATE_TOPIC's; name → queue count.
        self.declared: dict[str, int] = {}
        self._watched: set[int] = set()
        admin = AdminQueries(
            produce,
            broker_name=settings.broker_name,
            topics=self.topics,
            consumers=self.consumers,
            clock_ms=clock_ms,
            key_query_budget_bytes=settings.key_query_budget_bytes,
        )
        self._closing: set[asyncio.Task[None]] = set()
        status = BrokerStatus(
            produce,
            broker_name=settings.broker_name,
            config=rocketmq_config(settings),
            topics=self.topics,
            disk_space=disk_space,
        )
        table: dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]] = {
            RequestCode.SEND_MESSAGE: self.send_message,
            RequestCode.SEND_MESSAGE_V2: self.send_message,
            RequestCode.SEND_BATCH_MESSAGE: self.send_message,
            RequestCode.PULL_MESSAGE: self.pull_message,
            # DefaultLitePullConsumer's pulls (PullSysFlag litePull bit): the same header and
            # answer; RocketMQ's PullMessageProcessor serves both.
            RequestCode.LITE_PULL_MESSAGE: self.pull_message,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_consumer_offset,
            RequestCode.HEART_BEAT: self.heart_beat,
            RequestCode.UNREGISTER_CLIENT: self.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.get_consumer_list,
            RequestCode.GET_MAX_OFFSET: self.get_max_offset,
            RequestCode.GET_MIN_OFFSET: self.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest_store_time,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topic_config,
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.LOCK_BATCH_MQ: self.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock_batch,
            RequestCode.QUERY_MESSAGE: admin.query_message,
            RequestCode.GET_CONSUME_STATS: admin.consume_stats,
            RequestCode.GET_TOPIC_CONFIG: admin.topic_config,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: admin.consumer_connections,
            RequestCode.GET_TOPIC_STATS_INFO: status.topic_stats,
            RequestCode.GET_BROKER_RUNTIME_INFO: status.runtime_info,
            RequestCode.GET_BROKER_CONFIG: status.broker_config,
        }
        self.handlers: dict[int, Handler] = {int(code): h for code, h in table.items()}
        self.dispatch = Dispatch(translate=refusal_of)

    # ------------------------------------------------------------------ sends

    async def send_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = wire.send_request(cmd.fields(), v2=cmd.code != RequestCode.SEND_MESSAGE)
        if req.sys_flag & wire.TRANSACTION_TYPE_MASK:
            return response_to(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                "transactional messages are not supported by brokergroup "
                "(docs/rocketmq-compatibility.md)",
            )
        if any(req.properties.get(p) not in (None, "", "0") for p in _DELAY_PROPERTIES):
            return response_to(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                "scheduled (delayed/timer) messages are not supported by brokergroup "
                "(docs/rocketmq-compatibility.md)",
            )
        new_topic = not self._known_topic(req.topic)
        group_topic = req.topic.startswith(
            (wire.RETRY_GROUP_TOPIC_PREFIX, wire.DLQ_GROUP_TOPIC_PREFIX)
        )
        if new_topic and not self._settings.auto_create_topic and not group_topic:
            return response_to(
                cmd,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{req.topic}] not exist, apply first please! "
                "(autoCreateTopicEnable is off on this broker)",
            )
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or req.batch:
            inner = wire.decode_batch_body(cmd.body, max_messages=self._settings.max_batch_messages)
            if any(m.flag != inner[0].flag for m in inner):
                return response_to(
                    cmd, ResponseCode.MESSAGE_ILLEGAL, "a batch's messages must share one flag"
                )
            bodies = [m.body for m in inner]
            props = [{**req.properties, **m.properties} for m in inner]
            flag = inner[0].flag
        else:
            if not cmd.body:
                return response_to(cmd, ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
            bodies, props, flag = [cmd.body], [req.properties], req.flag
        batch = SendBatch(
            req.topic,
            req.queue_id if req.queue_id >= 0 else None,
            bodies,
            [(None, None, p) for p in props],
            flag=flag,
            sys_flag=req.sys_flag,
            born_timestamp_ms=req.born_timestamp_ms,
            born_host=_host_port(conn.peer),
            reconsume_times=req.reconsume_times,
        )
        response = await self._send(batch)
        if isinstance(response, ErrorResponse):
            if response.code in wire.NOT_MASTER_CODES:
                self._close_soon(conn, f"send refused: {response.message}")
            return response_to(cmd, wire.SEND_CODE_OF[response.code], response.message)
        assert isinstance(response, SendRunResult)
        if new_topic:
            self._on_new_topic(req.topic)
        ids = ",".join(wire.message_ids_after(self._message_id_prefix, response.physical_offsets))
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            None,
            {
                "msgId": ids,
                "queueId": str(response.queue_id),
                "queueOffset": str(response.first_queue_offset),
                "MSG_REGION": "DefaultRegion",
                "TRACE_ON": "true",
            },
        )

    def _close_soon(self, conn: Connection, reason: str) -> None:
        """Close `conn` once this handler's answer is on its way: the transport writes what
        it holds before it closes, and the answer is handed to it in the step that ends the
        handler. Were it lost all the same, nothing was stored: the client retries."""

        async def close() -> None:
            await asyncio.sleep(0)
            log.info("remoting: closing %s (not the master): %s", conn.peer, reason)
            await conn.close()

        task = asyncio.ensure_future(close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _send(self, batch: SendBatch, cmd_code: int = 0) -> Response:
        """Through the one produce path; a refusal before the append comes back as an
        ErrorResponse too."""
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def reply(response: Response) -> None:
            if not future.done():
                future.set_result(response)

        try:
            self._produce.start_send_batch(batch, reply)
        except BrokerError as exc:
            return ErrorResponse(cmd_code, exc.code, exc.message, exc.master_address)
        return await future

    def topics(self) -> dict[str, int]:
        """Every topic this broker serves: declared ones and the store's."""
        return {**self.declared, **self._produce.topic_queue_counts()}

    def _known_topic(self, topic: str) -> bool:
        """`topic in self.topics()` without building it: every send asks, and a broker may
        serve thousands of topics."""
        return topic in self.declared or self._produce.holds_topic(topic)

    def _declare(self, topic: str, queues: int) -> bool:
        """Make `topic` routable before its first record; False when MAX_DECLARED_TOPICS
        topics already wait for theirs."""
        if self._known_topic(topic):
            return True
        if len(self.declared) >= MAX_DECLARED_TOPICS:
            return False
        self.declared[topic] = queues
        self._on_new_topic(topic)
        return True

    async def _queue_count(self, topic: str) -> int:
        """Queues of `topic` as the routes announce them (0: not a topic of this broker)."""
        declared = self.declared.get(topic)
        if declared is not None:
            return declared
        if not self._produce.holds_topic(topic):
            return 0
        count = await self._produce.topic_queue_count(topic)
        return max(count, self._settings.default_queue_nums)

    async def _offset_refusal(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> RequestRefused | None:
        """Why a consumer offset may not be committed here (None: it may): only for a known
        group (one whose consumer heartbeat this broker heard, as RocketMQ creates a
        group's subscription config at its heartbeat: a stock client persists its offsets
        right after it unregisters; or one this broker already holds an offset of for this
        very queue, e.g. replicated before a failover), a topic this broker serves, a queue
        the topic has and an offset within the queue (docs/security.md "Client state")."""
        if not self.consumers.known(group):
            held = await self._produce.query_consumer_offset(group, topic, queue_id)
            if held == NO_CONSUMER_OFFSET:
                return RequestRefused(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                    f"Group {group} not exist! (no consumer of it heartbeats to this broker)",
                )
        queues = await self._queue_count(topic)
        if queues == 0:
            return RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!")
        if queue_id >= queues:
            return RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId {queue_id} is illegal: topic {topic} has {queues} queues",
            )
        _, max_offset = await self._produce.query_offsets(topic, queue_id)
        if offset > max_offset:
            return RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"offset {offset} is beyond the max offset {max_offset} of {topic}:{queue_id}",
            )
        return None

    async def _commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a consumer offset once `_offset_refusal` allows it (RequestRefused if not)."""
        refusal = await self._offset_refusal(group, topic, queue_id, offset)
        if refusal is not None:
            raise refusal
        await self._produce.commit_consumer_offset(group, topic, queue_id, offset)

    async def send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: the message at `offset` again, to %RETRY%<group>, or to
        %DLQ%<group> once it was reconsumed maxReconsumeTimes times (or delayLevel < 0).
        Through the one produce path. Redelivery is immediate: the retry delay levels need
        scheduled messages, which are not supported."""
        fields = cmd.fields()
        offset = header.int64(fields, "offset", low=0, high=header.INT64_MAX)
        group = names.group_name(fields, "group")
        delay_level = header.optional_int32(fields, "delayLevel", 0)
        max_times = header.optional_int32(
            fields, "maxReconsumeTimes", wire.DEFAULT_MAX_RECONSUME_TIMES, low=-1
        )
        if max_times < 0:
            max_times = wire.DEFAULT_MAX_RECONSUME_TIMES
        found = await self._produce.message_at(offset)
        if found is None:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {offset}"
            )
        msg, _ = found
        props = dict(msg.properties)
        props.setdefault(wire.PROPERTY_RETRY_TOPIC, msg.topic)
        origin = (
            fields.get("originMsgId")
            or props.get("UNIQ_KEY")
            or wire.offset_message_id(msg.store_host, msg.physical_offset)
        )
        props.setdefault(wire.PROPERTY_ORIGIN_MESSAGE_ID, origin)
        dead = delay_level < 0 or msg.reconsume_times >= max_times
        topic = (wire.DLQ_GROUP_TOPIC_PREFIX if dead else wire.RETRY_GROUP_TOPIC_PREFIX) + group
        new_topic = not self._known_topic(topic)
        batch = SendBatch(
            topic,
            0,
            [msg.body],
            [(None, None, props)],
            flag=msg.flag,
            sys_flag=msg.sys_flag & ~wire.TRANSACTION_TYPE_MASK,
            born_timestamp_ms=msg.born_timestamp_ms,
            born_host=msg.born_host,
            reconsume_times=msg.reconsume_times + 1,
        )
        response = await self._send(batch)
        if isinstance(response, ErrorResponse):
            return response_to(cmd, wire.SEND_CODE_OF[response.code], response.message)
        if new_topic:
            self.declared.pop(topic, None)
            self._on_new_topic(topic)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def view_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the record at the commit log `offset`, exactly as stored."""
        offset = header.int64(cmd.fields(), "offset", low=0, high=header.INT64_MAX)
        found = await self._produce.message_at(offset)
        if found is None:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return response_to(cmd, ResponseCode.SUCCESS, None, None, found[1])

    async def all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG: TopicConfigSerializeWrapper of every topic served here."""
        table = {
            name: wire.topic_config(name, queues) for name, queues in sorted(self.topics().items())
        }
        body = {
            "topicConfigTable": table,
            "dataVersion": {"stateVersion": 0, "timestamp": 0, "counter": 0},
        }
        return response_to(cmd, ResponseCode.SUCCESS, None, None, json_body(body))

    async def create_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: the topic is routable at once and stored on its first send.
        An admin request: the port's authorization (core/remoting_keys.py) lets only the
        group's broker pair make it."""
        fields = cmd.fields()
        topic = names.topic_name(fields, "topic")
        wanted = header.optional_int32(fields, "writeQueueNums", 0, low=0, high=1024)
        queues = max(1, min(wanted or self._settings.default_queue_nums,
                            self._settings.default_queue_nums))  # fmt: skip
        if not self._declare(topic, queues):
            return response_to(
                cmd,
                ResponseCode.SYSTEM_BUSY,
                f"{MAX_DECLARED_TOPICS} topics already wait for their first record on this "
                f"broker (MAX_DECLARED_TOPICS); send to one of them first",
            )
        return response_to(cmd, ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ pulls

    async def pull_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = wire.pull_request(cmd.fields())
        if req.sys_flag & wire.PULL_FLAG_COMMIT_OFFSET and req.commit_offset >= 0:
            # A slave keeps no offsets of its own; the pull is still served.
            with contextlib.suppress(BrokerError, RequestRefused):
                await self._commit_offset(
                    req.consumer_group, req.topic, req.queue_id, req.commit_offset
                )
        wait_ms = (
            min(req.suspend_timeout_ms, self._settings.max_suspend_ms)
            if req.sys_flag & wire.PULL_FLAG_SUSPEND
            else 0
        )
        deadline = self._clock_ms() + wait_ms
        while True:
            got = await self._produce.pull_records(
                req.topic, req.queue_id, req.queue_offset, max(1, req.max_msg_nums)
            )
            if got.records:
                return self._pull_answer(cmd, ResponseCode.SUCCESS, got.next_offset, got,
                                         b"".join(got.records))  # fmt: skip
            if req.queue_offset < got.min_offset or req.queue_offset > got.max_offset:
                moved = got.min_offset if req.queue_offset < got.min_offset else got.max_offset
                return self._pull_answer(cmd, ResponseCode.PULL_OFFSET_MOVED, moved, got)
            left_ms = deadline - self._clock_ms()
            if left_ms <= 0:
                return self._pull_answer(cmd, ResponseCode.PULL_NOT_FOUND, req.queue_offset, got)
            if not await self._hold(req.topic, req.queue_id, left_ms):
                return response_to(
                    cmd,
                    ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD] {self._settings.max_held_pulls} pulls are held on this broker "
                    "(max_held_pulls); pull again later",
                )

    async def _hold(self, topic: str, queue_id: int, wait_ms: int) -> bool:
        """Wait until the queue's readable end may have moved (arrivals.py) or `wait_ms`
        passed; False at once when `max_held_pulls` pulls already wait. A cancelled pull
        (its connection closed) leaves nothing behind."""
        arrivals = self._produce.arrivals
        if len(arrivals) >= self._settings.max_held_pulls:
            return False
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        held = arrivals.hold(topic, queue_id, wake)
        try:
            await asyncio.wait((woken,), timeout=wait_ms / 1000)
        finally:
            held.cancel()
        return True

    @staticmethod
    def _pull_answer(
        cmd: RemotingCommand,
        code: int,
        next_offset: int,
        got: RecordPull,
        body: bytes = b"",
    ) -> RemotingCommand:
        min_offset, max_offset = got.min_offset, got.max_offset
        return response_to(
            cmd,
            code,
            None,
            {
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(next_offset),
                "minOffset": str(min_offset),
                "maxOffset": str(max_offset),
            },
            body,
        )

    # ------------------------------------------------------------------ consumer offsets

    async def query_consumer_offset(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        fields = cmd.fields()
        ref = wire.queue_ref(fields, group="consumerGroup")
        assert ref.group is not None
        offset = await self._produce.query_consumer_offset(ref.group, ref.topic, ref.queue_id)
        if offset != NO_CONSUMER_OFFSET:
            return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        # ConsumerManageProcessor: a new group starts at 0 while the queue still begins at 0.
        low, _ = await self._produce.query_offsets(ref.topic, ref.queue_id)
        if fields.get("setZeroIfNotFound", "true").lower() != "false" and low == 0:
            return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": "0"})
        return response_to(
            cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
        )

    async def update_consumer_offset(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        fields = cmd.fields()
        ref = wire.queue_ref(fields, group="consumerGroup")
        assert ref.group is not None
        offset = header.int64(fields, "commitOffset", low=0, high=header.INT64_MAX)
        await self._commit_offset(ref.group, ref.topic, ref.queue_id, offset)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def get_max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ref = wire.queue_ref(cmd.fields())
        _, high = await self._produce.query_offsets(ref.topic, ref.queue_id)
        return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(high)})

    async def get_min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ref = wire.queue_ref(cmd.fields())
        low, _ = await self._produce.query_offsets(ref.topic, ref.queue_id)
        return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(low)})

    async def search_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The first queue offset whose record was stored at or after `timestamp` (the
        queue's end when none was): a binary search over store timestamps, which grow with
        the queue offset on one master (the log is appended in order)."""
        fields = cmd.fields()
        ref = wire.queue_ref(fields)
        timestamp = header.int64(fields, "timestamp")
        low, high = await self._produce.query_offsets(ref.topic, ref.queue_id)
        while low < high:
            mid = (low + high) // 2
            stored = await self._produce.store_timestamp_at(ref.topic, ref.queue_id, mid)
            if stored is None or stored >= timestamp:
                high = mid
            else:
                low = mid + 1
        return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(low)})

    async def earliest_store_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ref = wire.queue_ref(cmd.fields())
        low, high = await self._produce.query_offsets(ref.topic, ref.queue_id)
        stored = (
            await self._produce.store_timestamp_at(ref.topic, ref.queue_id, low)
            if low < high
            else None
        )
        return response_to(
            cmd, ResponseCode.SUCCESS, None, {"timestamp": str(-1 if stored is None else stored)}
        )

    # ------------------------------------------------------------------ clients

    async def heart_beat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "HeartbeatData")
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not client_id:
            raise BadField("HeartbeatData has no clientID")
        if len(client_id) > header.MAX_TEXT_BYTES:
            raise BadField(f"HeartbeatData's clientID is over {header.MAX_TEXT_BYTES} characters")
        consumers = data.get("consumerDataSet") or []
        if not isinstance(consumers, list) or len(consumers) > _MAX_HEARTBEAT_GROUPS:
            raise BadField("HeartbeatData's consumerDataSet is not a list of groups")
        # Every name is checked before any member is recorded.
        groups = [
            names.check_group(
                consumer.get("groupName") if isinstance(consumer, dict) else None,
                "a consumer's groupName in HeartbeatData",
            )
            for consumer in consumers
        ]
        now = self._clock_ms()
        if consumers:
            self._watch(conn)
        for consumer, group in zip(consumers, groups, strict=True):
            joins = self.consumers.joins(group, client_id, id(conn))
            busy = self.consumers.refusal(group, client_id, id(conn), now)
            if busy is not None:
                return response_to(cmd, ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {busy}")
            self.consumers.heartbeat(group, client_id, id(conn), now)
            clustering = consumer.get("messageModel", "CLUSTERING") == "CLUSTERING"
            if joins and clustering:  # the group rebalances now (group_notify.py)
                self._notifier.notify(group, self.consumers.connections(group))
            # A clustering consumer also consumes its group's retry topic: make it routable
            # (RocketMQ creates it on heartbeat too).
            # Over MAX_DECLARED_TOPICS it is routable from its first send-back instead.
            if clustering:
                self._declare(names.retry_topic(group), 1)
        # The client records the answer's version as the broker's (MQClientAPIImpl): answer
        # with its own, so no version-gated path takes this broker for an older one.
        return response_to(
            cmd, ResponseCode.SUCCESS, None, {"isSupportHeartBeatV2": "false"}, version=cmd.version
        )

    def _watch(self, conn: Connection) -> None:
        """Forget a connection's consumers when it closes (ClientHousekeepingService)."""
        key = id(conn)
        if key in self._watched:
            return
        self._watched.add(key)
        self._notifier.track(conn)

        def forget() -> None:
            self._watched.discard(key)
            self._notifier.forget(key)
            for group in self.consumers.drop_connection(key):
                self._notifier.notify(group, self.consumers.connections(group))

        conn.on_close(forget)

    async def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        client_id = header.text(fields, "clientID")
        group = names.optional_group_name(fields, "consumerGroup")
        if group is not None and self.consumers.unregister(group, client_id):
            self._notifier.notify(group, self.consumers.connections(group))
        return response_to(cmd, ResponseCode.SUCCESS)

    async def get_consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = names.group_name(cmd.fields(), "consumerGroup")
        members = self.consumers.members(group, self._clock_ms())
        if not members:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
            )
        return response_to(
            cmd, ResponseCode.SUCCESS, None, None, json_body({"consumerIdList": members})
        )

    async def lock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "LockBatchRequestBody")
        group, client_id, queues = _lock_body(data)
        held = self.locks.lock([(group, *q) for q in queues], client_id, self._clock_ms())
        ok = [{"topic": t, "brokerName": b, "queueId": i} for _, t, b, i in held]
        return response_to(cmd, ResponseCode.SUCCESS, None, None, json_body({"lockOKMQSet": ok}))

    async def unlock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "UnlockBatchRequestBody")
        group, client_id, queues = _lock_body(data)
        self.locks.unlock([(group, *q) for q in queues], client_id)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def close(self) -> None:
        await self._notifier.close()


def _lock_body(data: dict[str, object]) -> tuple[str, str, list[tuple[str, str, int]]]:
    """LockBatchRequestBody / UnlockBatchRequestBody: group, clientId, mqSet."""
    group = names.check_group(data.get("consumerGroup"), "a lock request's consumerGroup")
    client_id, mq_set = data.get("clientId"), data.get("mqSet")
    if not isinstance(client_id, str) or not 0 < len(client_id) <= header.MAX_TEXT_BYTES:
        raise BadField("a lock request needs a clientId")
    if not isinstance(mq_set, list) or len(mq_set) > 10_000:
        raise BadField("a lock request's mqSet is not a list of queues")
    queues: list[tuple[str, str, int]] = []
    for mq in mq_set:
        topic = mq.get("topic") if isinstance(mq, dict) else None
        broker = mq.get("brokerName") if isinstance(mq, dict) else None
        queue_id = mq.get("queueId") if isinstance(mq, dict) else None
        if not (
            isinstance(broker, str)
            and 0 < len(broker) <= header.MAX_TEXT_BYTES
            and type(queue_id) is int
            and 0 <= queue_id <= header.INT32_MAX
        ):
            raise BadField("a queue in mqSet needs topic, brokerName and queueId")
        queues.append((names.check_topic(topic, "a queue's topic in mqSet"), broker, queue_id))
    return group, client_id, queues


def _host_port(peer: str) -> tuple[str, int] | None:
    host, _, port = peer.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None


def refusal_of(exc: Exception) -> RequestRefused | None:
    """The one produce path's refusals as RocketMQ answers a read, an offset or an admin
    request (a send maps its own through `wire.SEND_CODE_OF` before it gets here)."""
    if isinstance(exc, BrokerError):
        return RequestRefused(wire.READ_CODE_OF[exc.code], exc.message)
    return None
