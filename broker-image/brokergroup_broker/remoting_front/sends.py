"""The send codes of the broker's remoting port: SEND_MESSAGE, SEND_MESSAGE_V2,
SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK, over the one produce path.

Every send goes through `start_send_batch`, so the commit rule, masterEpoch fencing, lease
and admission are the same as for the project's own protocol: a RocketMQ SEND_OK means what
our SUCCESS means, and a refusal is RocketMQ's code through `wire.SEND_CODE_OF`. A send
refused because this broker is not the master closes its connection once the answer is on
its way, so a client that reached it through a stable master address reconnects to the new
one. A send to an unknown topic is refused unless `auto_create_topic` (or the topic is a
group's retry or DLQ topic); such a topic's config is written once its first record is stored
and before the send is answered (`DeclaredTopics.stored_first`: only a master stores, and a
crash in between leaves a stored topic a new master adopts). CONSUMER_SEND_MSG_BACK sends a
message to its group's DLQ after the group's retryMaxTimes (the subscription group's config,
metadata/) unless the request names its own maxReconsumeTimes, as RocketMQ's broker does.
A delayed or timer send is stored under its system topic (`schedule.admission`), and a
send-back goes to %RETRY%<group> through SCHEDULE_TOPIC_XXXX at its delay level (the retry
back-off, docs/scheduled-messages.md). A stored single send carries MSG_REGION, TRACE_ON and
CLUSTER (`Stamps`, as RocketMQ's SendMessageProcessor); a send's body (a batch's whole body)
is bounded by maxMessageSize, not by a count of messages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.protocol.messages import (
    BrokerError,
    ErrorResponse,
    Response,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_broker.schedule import rules as schedule_rules
from brokergroup_broker.schedule.admission import ScheduledSends
from brokergroup_broker.store.message import StoredMessage
from brokergroup_broker.transaction import rules as tx_rules
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

log = logging.getLogger(__name__)

#: MessageConst: properties a send may carry that need features not built here.
_DELAY_PROPERTIES = ("DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")
#: MessageConst: what a RocketMQ broker stamps on a message it stores from a send.
PROPERTY_MSG_REGION = "MSG_REGION"
PROPERTY_TRACE_SWITCH = "TRACE_ON"
PROPERTY_CLUSTER = "CLUSTER"
#: What `schedule_rules.is_scheduled` reads: a batch naming one goes the reference path.
_SCHEDULE_PROPERTIES = frozenset((schedule_rules.PROPERTY_DELAY, *schedule_rules.TIMER_PROPERTIES))
#: The smallest entry of a batch body: totalSize, magic, bodyCRC, flag, bodyLength, an empty
#: body and propertiesLength (so a body of n bytes holds at most n // this messages).
_MIN_BATCH_ENTRY = 22


@dataclass(frozen=True)
class Stamps:
    """What the broker adds to what it stores from a send, as RocketMQ's send processors
    do: MSG_REGION and TRACE_ON (buildMsgContext, on every send's and reply's properties;
    a consumer's trace hook drops the traces of a message without MSG_REGION), CLUSTER
    (sendMessage, on a single send only: MessageUtil.createReplyMessage needs it to name
    the reply topic). A batch's messages get none: RocketMQ stamps the batch, whose own
    properties its store does not write into the messages."""

    cluster: str
    region_id: str = "DefaultRegion"
    trace_on: bool = True

    def trace(self, props: Mapping[str, str]) -> dict[str, str]:
        return {
            **props,
            PROPERTY_MSG_REGION: self.region_id,
            PROPERTY_TRACE_SWITCH: str(self.trace_on).lower(),
        }

    def send(self, props: Mapping[str, str]) -> dict[str, str]:
        return {**self.trace(props), PROPERTY_CLUSTER: self.cluster}

    def answer_fields(self) -> dict[str, str]:
        """The extFields every send's and reply's answer carries (preSend)."""
        return {
            PROPERTY_MSG_REGION: self.region_id,
            PROPERTY_TRACE_SWITCH: str(self.trace_on).lower(),
        }


def size_refusal(body_size: int, max_message_size: int) -> str | None:
    """Why a send's body (a batch's whole body) is refused, or None: RocketMQ bounds a
    batch by its bytes (MessageExtEncoder: the batch's body ≤ maxMessageSize), not by its
    count. The remark is RocketMQ's for a message its store finds too large."""
    if body_size <= max_message_size:
        return None
    return (
        "the message is illegal, maybe msg body or properties length not matched. "
        f"msg body length limit {max_message_size}B, msg properties length limit 32KB. "
        f"(body of {body_size} bytes)"
    )


class SendPath(Protocol):
    """What the sends call of the produce path (`front.ProduceAndPull` has it)."""

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...


class Sends:
    """Handlers of SEND_MESSAGE/V2, SEND_BATCH_MESSAGE and CONSUMER_SEND_MSG_BACK; owns the
    closes of not-master connections in flight."""

    def __init__(
        self,
        produce: SendPath,
        topics: DeclaredTopics,
        *,
        store_host: tuple[str, int],
        auto_create_topic: bool,
        stats: BrokerStats,
        max_message_size: int = 4 << 20,
        stamps: Stamps | None = None,
        retry_max_times: Callable[[str], int | None] = lambda _group: None,
        scheduling: ScheduledSends | None = None,
        transactions: bool = False,
    ) -> None:
        self._produce = produce
        #: Delay levels and timers (None: refused, as before the feature).
        self._scheduling = scheduling
        #: Half messages (the transaction service; False: refused, as before the feature).
        self._transactions = transactions
        self._retry_max_times = retry_max_times
        self._stats = stats  # SNDBCK_PUT_NUMS (puts count in the produce path)
        self._topics = topics
        self._message_id_prefix = wire.store_host_prefix(store_host)
        self._auto_create_topic = auto_create_topic
        self._max_message_size = max_message_size
        self._stamps = Stamps("DefaultCluster") if stamps is None else stamps
        self._closing: set[asyncio.Task[None]] = set()

    async def send_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = wire.send_request(cmd.fields(), v2=cmd.code != RequestCode.SEND_MESSAGE)
        # A half message goes to RMQ_SYS_TRANS_HALF_TOPIC (transaction/rules.py).
        prepared = self._transactions and tx_rules.is_prepared(req.sys_flag, req.properties)
        if req.sys_flag & wire.TRANSACTION_TYPE_MASK and not prepared:
            return response_to(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                "transactional messages are not supported by brokergroup "
                "(docs/rocketmq-compatibility.md)",
            )
        scheduling = self._scheduling
        if scheduling is None and any(
            req.properties.get(p) not in (None, "", "0") for p in _DELAY_PROPERTIES
        ):
            return response_to(
                cmd,
                ResponseCode.MESSAGE_ILLEGAL,
                "scheduled (delayed/timer) messages are not supported by brokergroup "
                "(docs/rocketmq-compatibility.md)",
            )
        new_topic = not self._topics.known(req.topic)
        group_topic = req.topic.startswith(
            (wire.RETRY_GROUP_TOPIC_PREFIX, wire.DLQ_GROUP_TOPIC_PREFIX)
        )
        if new_topic and not self._auto_create_topic and not group_topic:
            return response_to(
                cmd,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{req.topic}] not exist, apply first please! "
                "(autoCreateTopicEnable is off on this broker)",
            )
        too_large = size_refusal(len(cmd.body), self._max_message_size)
        if too_large is not None:
            return response_to(
                cmd, ResponseCode.MESSAGE_ILLEGAL, too_large, self._stamps.answer_fields()
            )
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or req.batch:
            # Bytes bound the batch (above); the count follows from them.
            inner = wire.decode_batch_send(
                cmd.body,
                req.properties,
                max_messages=max(1, len(cmd.body) // _MIN_BATCH_ENTRY),
                reference_names=_SCHEDULE_PROPERTIES,
            )
            if not inner.one_flag:
                return response_to(
                    cmd, ResponseCode.MESSAGE_ILLEGAL, "a batch's messages must share one flag"
                )
            bodies, props, flag = inner.bodies, inner.properties, inner.flag
            if (
                scheduling is not None
                and inner.may_name_reference
                and any(map(schedule_rules.is_scheduled, props))
            ):
                return response_to(
                    cmd,
                    ResponseCode.MESSAGE_ILLEGAL,
                    "TimeDelayLevel is not supported for batching",
                )
        else:
            if not cmd.body:
                return response_to(cmd, ResponseCode.MESSAGE_ILLEGAL, "the message body is empty")
            bodies, props, flag = [cmd.body], [self._stamps.send(req.properties)], req.flag
        store_topic, store_queue = req.topic, req.queue_id if req.queue_id >= 0 else None
        if scheduling is not None:
            schedule_rules.refuse_system_topic(req.topic)
            redirect = (
                None
                if len(props) > 1 or prepared
                else scheduling.redirect(req.topic, store_queue, props[0])
            )
            if redirect is not None:
                store_topic, store_queue = redirect.topic, redirect.queue_id
                props = [redirect.properties]
        sys_flag = req.sys_flag
        if self._transactions:
            tx_rules.refuse_system_topic(req.topic)
        if prepared:
            if len(props) > 1:
                return response_to(
                    cmd, ResponseCode.MESSAGE_ILLEGAL, "a batch cannot be a transactional message"
                )
            half = tx_rules.half_send(req.topic, store_queue, props[0], req.sys_flag)
            store_topic, store_queue, props = half.topic, half.queue_id, [half.properties]
            sys_flag = half.sys_flag
        # A batch's properties reach the store as they came (`SendBatch.store_properties`).
        batch = SendBatch(
            store_topic,
            store_queue,
            bodies,
            [(None, None, p) for p in props],
            flag=flag,
            sys_flag=sys_flag,
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
            self._topics.stored_first(req.topic)
        ids = ",".join(wire.message_ids_after(self._message_id_prefix, response.physical_offsets))
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            None,
            {
                "msgId": ids,
                # A scheduled send answers the queue it asked for (SendMessageProcessor).
                "queueId": str(response.queue_id if store_topic == req.topic else req.queue_id),
                "queueOffset": str(response.first_queue_offset),
                **({"transactionId": props[0].get("UNIQ_KEY", "")} if prepared else {}),
                **self._stamps.answer_fields(),
            },
        )

    async def send_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """CONSUMER_SEND_MSG_BACK: the message at `offset` again, to %RETRY%<group>, or to
        %DLQ%<group> once it was reconsumed maxReconsumeTimes times (or delayLevel < 0).
        Through the one produce path. A retry waits its delay level (the client's, or 3 +
        reconsumeTimes when it asks 0) in SCHEDULE_TOPIC_XXXX."""
        fields = cmd.fields()
        offset = header.int64(fields, "offset", low=0, high=header.INT64_MAX)
        group = names.group_name(fields, "group")
        delay_level = header.optional_int32(fields, "delayLevel", 0)
        group_max = self._retry_max_times(group)
        default_max = wire.DEFAULT_MAX_RECONSUME_TIMES if group_max is None else group_max
        max_times = header.optional_int32(fields, "maxReconsumeTimes", default_max, low=-1)
        if max_times < 0:
            max_times = default_max
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
        new_topic = not self._topics.known(topic)
        store_topic, store_queue = topic, 0
        props.pop(schedule_rules.PROPERTY_DELAY, None)
        if not dead and self._scheduling is not None:
            # The retry back-off: to %RETRY%<group> after the level's delay.
            rules = self._scheduling.rules
            level = schedule_rules.delay_level_for_send_back(
                delay_level, msg.reconsume_times, rules
            )
            props[schedule_rules.PROPERTY_DELAY] = str(level)
            redirect = schedule_rules.redirect_send(topic, 0, props, 0, rules)
            assert redirect is not None  # a delay level always redirects
            store_topic, store_queue, props = redirect.topic, redirect.queue_id, redirect.properties
        batch = SendBatch(
            store_topic,
            store_queue,
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
            self._topics.stored_first(topic)
        self._stats.on_send_back(group, topic)
        return response_to(cmd, ResponseCode.SUCCESS)

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

    async def _send(self, batch: SendBatch) -> Response:
        return await send_through(self._produce, batch)


async def send_through(produce: SendPath, batch: SendBatch) -> Response:
    """`batch` through the one produce path; a refusal before the append comes back as an
    ErrorResponse too."""
    future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

    def reply(response: Response) -> None:
        if not future.done():
            future.set_result(response)

    try:
        produce.start_send_batch(batch, reply)
    except BrokerError as exc:
        return ErrorResponse(0, exc.code, exc.message, exc.master_address)
    return await future


def _host_port(peer: str) -> tuple[str, int] | None:
    host, _, port = peer.rpartition(":")
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        return None
