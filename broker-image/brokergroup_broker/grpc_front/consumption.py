"""ReceiveMessage, AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue over
the broker's POP service (pop/service.py), as the proxy's consumer activities answer them.

- ReceiveMessage streams a status (OK, or MESSAGE_NOT_FOUND when the long poll found
  nothing), then one response per message, then the delivery timestamp
  (ReceiveMessageResponseStreamWriter). A message is converted as GrpcConverter.buildMessage
  does (`to_v2_message`): user properties are those not in MessageConst.STRING_HASH_SET (nor
  __SHARDINGKEY and TRACE_CONTEXT, which are system properties of a v2 message), the
  topic is the one the consumer subscribed (a retried message's is the retry topic on
  disk), the receipt handle is the POP service's, deliveryAttempt = attempts + 1.
- The long polling time is the request's, capped by the consumer's default (20 s); a
  receive with auto_renew (push consumers) is invisible 60 s, not renewed.
- The POP service's refusals become the proxy's codes (`_code_of`); a broker that is not
  the master answers INTERNAL_SERVER_ERROR, which the SDKs retry (over the stable endpoint,
  to the new master).
- ForwardMessageToDeadLetterQueue (ProducerProcessor.forwardMessageToDeadLetterQueue): the
  in-flight message of the receipt handle is put to %DLQ%<group> queue 0 through the one
  produce path (as CONSUMER_SEND_MSG_BACK with delayLevel -1 stores it: RETRY_TOPIC and
  ORIGIN_MESSAGE_ID kept or set, reconsume times + 1), and once that is stored the handle is
  acked. A handle that is not in flight any more stores nothing (INVALID_RECEIPT_HANDLE).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from brokergroup_broker.filter import FilterRefused, compile_filter
from brokergroup_broker.grpc_front import convert
from brokergroup_broker.grpc_front.definitions import pb, service_pb
from brokergroup_broker.metadata import BrokerMetadata
from brokergroup_broker.pop.service import PopError, PopErrorKind, Popped, PopService
from brokergroup_broker.protocol.messages import BrokerError, SendBatch
from brokergroup_broker.store.message import StoredMessage
from brokergroup_remoting import names

#: MessageConst names a dead-lettered message keeps its origin under.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
#: MessageSysFlag's transaction type bits (cleared on a send-back).
TRANSACTION_TYPE_MASK = 0x3 << 2

#: ProxyConfig: grpcClientConsumerMaxLongPollingTimeoutMillis and the invisible-time bounds.
MAX_LONG_POLLING_MS = 20_000
MIN_INVISIBLE_MS = 10_000
#: ProxyConfig.defaultInvisibleTimeMills: a receive with auto_renew (the push consumers') is
#: invisible this long. The proxy also renews it while the client holds the message; this
#: front end does not (a listener that runs longer sees the message again).
DEFAULT_INVISIBLE_MS = 60_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
#: The proxy's NACK when a message could not be written to the stream.
NACK_INVISIBLE_MS = 1_000

MESSAGE_NOT_FOUND = 40401
INVALID_RECEIPT_HANDLE = 40013
ILLEGAL_INVISIBLE_TIME = 40011
ILLEGAL_POLLING_TIME = 40018
ILLEGAL_FILTER_EXPRESSION = 40010

_POP_CODES: dict[PopErrorKind, int] = {
    PopErrorKind.ILLEGAL_ARGUMENT: convert.BAD_REQUEST,
    PopErrorKind.RECEIPT_INVALID: INVALID_RECEIPT_HANDLE,
    PopErrorKind.RECEIPT_EXPIRED: INVALID_RECEIPT_HANDLE,
    PopErrorKind.IN_FLIGHT_FULL: convert.TOO_MANY_REQUESTS,
    PopErrorKind.POLLING_FULL: convert.TOO_MANY_REQUESTS,
    PopErrorKind.NOT_READY: convert.TOO_MANY_REQUESTS,
}


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _code_of(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, PopError):
        return _POP_CODES[exc.kind], exc.message
    if isinstance(exc, BrokerError):
        return convert.status_of_broker_code(exc.code), f"{exc.code.name}: {exc.message}"
    raise exc


def _status(code: int, message: str | None = None) -> Any:
    return convert.status(code, message, pb)


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _timestamp(ms: int) -> Any:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


#: Properties a received message does not show as user properties: MessageConst's system
#: names, and the two the v2 message carries as system properties (message_group,
#: trace_context), which RocketMQ's proxy would also hand back as user properties (they are
#: not in STRING_HASH_SET): a FIFO sender would see __SHARDINGKEY appear among its own.
_NOT_USER_PROPERTIES = convert.SYSTEM_PROPERTY_NAMES | {
    convert.PROPERTY_SHARDING_KEY,
    convert.PROPERTY_TRACE_CONTEXT,
}


def to_v2_message(popped: Popped, topic: Any) -> Any:
    """A popped message as GrpcConverter.buildMessage sends it (`topic`: the subscribed
    topic's Resource)."""
    return stored_to_v2(
        popped.message,
        topic,
        receipt_handle=popped.receipt_handle,
        delivery_attempt=max(popped.attempts, popped.message.reconsume_times) + 1,
    )


def stored_to_v2(
    m: StoredMessage, topic: Any, *, receipt_handle: str = "", delivery_attempt: int = 0
) -> Any:
    """A stored message as GrpcConverter.buildMessage converts it (`topic`: the Resource it
    is shown under)."""
    props: Mapping[str, str] = m.properties
    system = pb.SystemProperties(
        message_id=props.get(convert.PROPERTY_UNIQ_KEY, ""),
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(m.body).hexdigest().upper()),
        body_encoding=pb.GZIP if m.sys_flag & convert.COMPRESSED_FLAG else pb.IDENTITY,
        born_timestamp=_timestamp(m.born_timestamp_ms),
        store_timestamp=_timestamp(m.store_timestamp_ms),
        store_host=f"{m.store_host[0]}:{m.store_host[1]}",
        queue_id=m.queue_id,
        queue_offset=m.queue_offset,
        delivery_attempt=delivery_attempt,
    )
    if receipt_handle:
        system.receipt_handle = receipt_handle
    if convert.PROPERTY_TAGS in props:
        system.tag = props[convert.PROPERTY_TAGS]
    if convert.PROPERTY_KEYS in props:
        system.keys.extend(props[convert.PROPERTY_KEYS].split(" "))
    if props.get(convert.PROPERTY_TRANSACTION_PREPARED) == "true":
        system.message_type = pb.TRANSACTION
    elif any(p in props for p in ("DELAY", convert.PROPERTY_TIMER_DELIVER_MS, "TIMER_DELAY_SEC")):
        system.message_type = pb.DELAY
    elif convert.PROPERTY_SHARDING_KEY in props:
        system.message_type = pb.FIFO
    else:
        system.message_type = pb.NORMAL
    born_host = props.get(convert.PROPERTY_BORN_HOST) or f"{m.born_host[0]}:{m.born_host[1]}"
    system.born_host = born_host
    if convert.PROPERTY_TIMER_DELIVER_MS in props:
        system.delivery_timestamp.CopyFrom(
            _timestamp(int(props[convert.PROPERTY_TIMER_DELIVER_MS]))
        )
    if convert.PROPERTY_SHARDING_KEY in props:
        system.message_group = props[convert.PROPERTY_SHARDING_KEY]
    if convert.PROPERTY_TRACE_CONTEXT in props:
        system.trace_context = props[convert.PROPERTY_TRACE_CONTEXT]
    user = {k: v for k, v in props.items() if k not in _NOT_USER_PROPERTIES}
    return pb.Message(topic=topic, user_properties=user, system_properties=system, body=m.body)


class PopConsumption:
    """The consumer RPCs over one broker's `PopService`."""

    def __init__(
        self,
        pop: PopService,
        *,
        orderly: Callable[[str], bool] = lambda _group: False,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._pop = pop
        self._orderly = orderly
        self._wall_ms = wall_ms

    async def receive(
        self, request: Any, group: str, topic: str, context: Any
    ) -> AsyncIterator[Any]:
        try:
            batch = int(request.batch_size)
            if not 1 <= batch <= 32:
                raise convert.GrpcRefusal(
                    convert.BAD_REQUEST, f"batch size {batch} is not in [1, 32]"
                )
            invisible_ms = (
                DEFAULT_INVISIBLE_MS if request.auto_renew else _ms(request.invisible_duration)
            )
            if not MIN_INVISIBLE_MS <= invisible_ms <= MAX_INVISIBLE_MS:
                raise convert.GrpcRefusal(
                    ILLEGAL_INVISIBLE_TIME,
                    f"the invisible time {invisible_ms} ms is not in "
                    f"[{MIN_INVISIBLE_MS}, {MAX_INVISIBLE_MS}]",
                )
            poll_ms = (
                _ms(request.long_polling_timeout)
                if request.HasField("long_polling_timeout")
                else MAX_LONG_POLLING_MS
            )
            if poll_ms < 0:
                raise convert.GrpcRefusal(ILLEGAL_POLLING_TIME, "negative long polling time")
            poll_ms = min(poll_ms, MAX_LONG_POLLING_MS)
            expression = request.filter_expression
            kind = "SQL92" if expression.type == pb.SQL else "TAG"
            try:
                matcher = compile_filter(kind, expression.expression or "*")
            except FilterRefused as exc:
                raise convert.GrpcRefusal(ILLEGAL_FILTER_EXPRESSION, str(exc)) from exc
            # Every queue of the topic on this broker, whatever queue the SDK names: the
            # proxy's ReceiveMessageQueueSelector keeps only the broker of the request's
            # queue and pops its acting queue (-1). The SDKs name route queues in turn, so
            # popping the named one kept a message of another queue from a fresh consumer
            # for (queues - 1) long polls (10 s with 4 queues and 2 s polls).
            result = await self._pop.pop(
                group,
                topic,
                None,
                batch,
                invisible_ms,
                poll_ms,
                fifo=self._orderly(group),
                filter=matcher.matches,
            )
        except convert.GrpcRefusal as exc:
            yield service_pb.ReceiveMessageResponse(status=_status(exc.code, exc.message))
            yield self._delivered()
            return
        except (PopError, BrokerError) as exc:
            code, message = _code_of(exc)
            yield service_pb.ReceiveMessageResponse(status=_status(code, message))
            yield self._delivered()
            return
        if not result.messages:
            yield service_pb.ReceiveMessageResponse(
                status=_status(MESSAGE_NOT_FOUND, "no new message")
            )
        else:
            yield service_pb.ReceiveMessageResponse(status=_status(convert.OK))
            resource = request.message_queue.topic
            for popped in result.messages:
                yield service_pb.ReceiveMessageResponse(message=to_v2_message(popped, resource))
        yield self._delivered()

    def _delivered(self) -> Any:
        return service_pb.ReceiveMessageResponse(delivery_timestamp=_timestamp(self._wall_ms()))

    async def ack(self, request: Any) -> Any:
        group, topic = request.group.name, request.topic.name
        handles = [entry.receipt_handle for entry in request.entries]
        try:
            errors = await self._pop.ack_batch(group, topic, handles)
        except (PopError, BrokerError) as exc:
            code, message = _code_of(exc)
            return service_pb.AckMessageResponse(status=_status(code, message))
        entries = []
        for entry, error in zip(request.entries, errors, strict=True):
            status = _status(convert.OK) if error is None else _status(*_code_of(error))
            entries.append(
                service_pb.AckMessageResultEntry(
                    message_id=entry.message_id,
                    receipt_handle=entry.receipt_handle,
                    status=status,
                )
            )
        code = convert.merged_code(e.status.code for e in entries)
        return service_pb.AckMessageResponse(status=_status(code), entries=entries)

    async def change_invisible_duration(self, request: Any) -> Any:
        invisible_ms = _ms(request.invisible_duration)
        try:
            if not 0 <= invisible_ms <= MAX_INVISIBLE_MS:
                raise convert.GrpcRefusal(
                    ILLEGAL_INVISIBLE_TIME, f"the invisible time {invisible_ms} ms is illegal"
                )
            handle = await self._pop.change_invisible(
                request.group.name, request.topic.name, request.receipt_handle, invisible_ms
            )
        except convert.GrpcRefusal as exc:
            return service_pb.ChangeInvisibleDurationResponse(status=_status(exc.code, exc.message))
        except (PopError, BrokerError) as exc:
            code, message = _code_of(exc)
            return service_pb.ChangeInvisibleDurationResponse(status=_status(code, message))
        return service_pb.ChangeInvisibleDurationResponse(
            status=_status(convert.OK), receipt_handle=handle
        )

    def dead_letter_batch(self, request: Any) -> SendBatch:
        """The %DLQ%<group> put of a ForwardMessageToDeadLetterQueue; raises GrpcRefusal
        (nothing stored) when the handle holds no message in flight."""
        group, topic = request.group.name, request.topic.name
        try:
            msg = self._pop.in_flight_message(group, topic, request.receipt_handle)
        except (PopError, BrokerError) as exc:
            raise convert.GrpcRefusal(*_code_of(exc)) from exc
        return dead_letter_batch(msg, group, str(request.message_id))

    async def ack_one(self, request: Any) -> Any:
        """Ack a forwarded message's handle: its status (OK, or why not)."""
        try:
            await self._pop.ack(request.group.name, request.topic.name, request.receipt_handle)
        except (PopError, BrokerError) as exc:
            return _status(*_code_of(exc))
        return _status(convert.OK)


def dead_letter_batch(msg: StoredMessage, group: str, origin_message_id: str) -> SendBatch:
    """SendMessageProcessor's consumer send-back with delayLevel -1: the message to
    %DLQ%<group> queue 0, its origin kept (pure)."""
    props = dict(msg.properties)
    props.setdefault(PROPERTY_RETRY_TOPIC, msg.topic)
    origin = origin_message_id or props.get(convert.PROPERTY_UNIQ_KEY, "")
    if origin:
        props.setdefault(PROPERTY_ORIGIN_MESSAGE_ID, origin)
    return SendBatch(
        names.DLQ_GROUP_TOPIC_PREFIX + group,
        0,
        [msg.body],
        [(None, None, props)],
        flag=msg.flag,
        sys_flag=msg.sys_flag & ~TRANSACTION_TYPE_MASK,
        born_timestamp_ms=msg.born_timestamp_ms,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times + 1,
    )


def orderly_of(metadata: BrokerMetadata) -> Callable[[str], bool]:
    """Whether a group consumes orderly (its subscription group's consumeMessageOrderly):
    a FIFO group's POP hands out a queue's next message only after the previous is acked."""

    def orderly(group: str) -> bool:
        config = metadata.groups.get(group)
        return config is not None and config.consume_message_orderly

    return orderly
