"""Request translation of the gRPC front end (pure): apache.rocketmq.v2 messages to what the
one produce path stores, and the broker's refusals to apache.rocketmq.v2.Code, as RocketMQ's
proxy does it (proxy/grpc/v2/producer/SendMessageActivity, common/ResponseBuilder).

A send is stored as the proxy hands it to a broker: the user properties, TAGS, KEYS (joined
by a space), UNIQ_KEY = the client's message id, __SHARDINGKEY = the message group (FIFO),
TIMER_DELIVER_MS = the delivery timestamp (delay/timer), PGROUP = the topic (the proxy's
producer group for a gRPC producer), RECONSUME_TIME, TRACE_CONTEXT, __BORNHOST and
BORN_TIMESTAMP. A request that breaks the proxy's rules is refused with the proxy's code
before anything is stored (`GrpcRefusal`).

The queue of a send is chosen here, as the proxy does (the v2 Message names no queue): a
message group hashes to one write queue with Guava's consistentHash of Java's
String.hashCode (so a group keeps its queue, and its order, across sends), any other send
takes the next queue round-robin.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_broker.protocol.messages import ResponseCode as BrokerCode

#: apache.rocketmq.v2.Code values this front end answers (definition.proto).
OK = 20000
MULTIPLE_RESULTS = 30000
BAD_REQUEST = 40000
ILLEGAL_TOPIC = 40002
ILLEGAL_CONSUMER_GROUP = 40003
ILLEGAL_MESSAGE_TAG = 40004
ILLEGAL_MESSAGE_KEY = 40005
ILLEGAL_MESSAGE_GROUP = 40006
ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
INVALID_TRANSACTION_ID = 40008
ILLEGAL_MESSAGE_ID = 40009
ILLEGAL_DELIVERY_TIME = 40012
MESSAGE_CORRUPTED = 40016
CLIENT_ID_REQUIRED = 40017
UNAUTHORIZED = 40100
FORBIDDEN = 40300
TOPIC_NOT_FOUND = 40402
MESSAGE_BODY_TOO_LARGE = 41301
MESSAGE_BODY_EMPTY = 41302
MESSAGE_PROPERTIES_TOO_LARGE = 43101
TOO_MANY_REQUESTS = 42900
INTERNAL_ERROR = 50000
INTERNAL_SERVER_ERROR = 50001
HA_NOT_AVAILABLE = 50002
NOT_IMPLEMENTED = 50100
PROXY_TIMEOUT = 50400
SLAVE_PERSISTENCE_TIMEOUT = 50402

#: apache.rocketmq.v2 enums (definition.proto).
ENCODING_GZIP = 2
MESSAGE_TYPE_NORMAL, MESSAGE_TYPE_FIFO, MESSAGE_TYPE_DELAY, MESSAGE_TYPE_TRANSACTION = 1, 2, 3, 4

#: MessageConst property names.
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_TRACE_CONTEXT = "TRACE_CONTEXT"
PROPERTY_BORN_HOST = "__BORNHOST"
PROPERTY_BORN_TIMESTAMP = "BORN_TIMESTAMP"
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"

#: MessageConst.STRING_HASH_SET (RocketMQ 5.3): a user property may not take these names.
SYSTEM_PROPERTY_NAMES = frozenset(
    [
        "1ST_POP_TIME",
        "ARRIVE_TIME",
        "BORN_TIMESTAMP",
        "BUYER_ID",
        "CLUSTER",
        "CONSUME_START_TIME",
        "CORRECTION_FLAG",
        "CORRELATION_ID",
        "DELAY",
        "DLQ_ORIGIN_MESSAGE_ID",
        "DLQ_ORIGIN_TOPIC",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INNER_MULTI_QUEUE_OFFSET",
        "INSTANCE_ID",
        "KEYS",
        "MAX_OFFSET",
        "MAX_RECONSUME_TIMES",
        "MIN_OFFSET",
        "MQ2_FLAG",
        "MSG_REGION",
        "MSG_TYPE",
        "ORIGIN_MESSAGE_ID",
        "PGROUP",
        "POP_CK",
        "POP_CK_OFFSET",
        "PUSH_REPLY_TIME",
        "REAL_QID",
        "REAL_TOPIC",
        "RECONSUME_TIME",
        "REPLY_TO_CLIENT",
        "RETRY_TOPIC",
        "TAGS",
        "TIMER_DELAY_LEVEL",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DEQUEUE_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_OUT_MS",
        "TIMER_ROLL_TIMES",
        "TRACE_ON",
        "TRANSFER_FLAG",
        "TRAN_MSG",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "TTL",
        "UNIQ_KEY",
        "WAIT",
        "__BORNHOST",
        "__CRC32#",
    ]
)

#: ProxyConfig defaults the proxy checks a send against.
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
USER_PROPERTY_MAX_NUM = 128
MAX_USER_PROPERTY_SIZE = 16 * 1024
MAX_MESSAGE_GROUP_SIZE = 64
MAX_DELAY_TIME_MS = 24 * 3600 * 1000
MAX_TRANSACTION_RECOVERY_S = 3600

#: MessageSysFlag bits a send may set.
COMPRESSED_FLAG = 0x1
TRANSACTION_PREPARED_TYPE = 0x1 << 2


class GrpcRefusal(Exception):
    """A request refused with an apache.rocketmq.v2.Code (the proxy's GrpcProxyException)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


#: The produce path's refusals as the proxy answers them (ResponseBuilder: a broker's
#: remoting code through RESPONSE_CODE_MAPPING, INTERNAL_SERVER_ERROR for the rest). A
#: broker that may not take writes answers INTERNAL_SERVER_ERROR, which the SDKs retry.
SEND_STATUS_OF: dict[BrokerCode, int] = {
    BrokerCode.SYSTEM_BUSY: TOO_MANY_REQUESTS,
    BrokerCode.SLAVE_TIMEOUT: SLAVE_PERSISTENCE_TIMEOUT,
    BrokerCode.IN_SYNC_REPLICAS_NOT_ENOUGH: HA_NOT_AVAILABLE,
    BrokerCode.TOPIC_NOT_FOUND: TOPIC_NOT_FOUND,
    BrokerCode.TOPIC_INVALID: ILLEGAL_TOPIC,
    BrokerCode.BAD_REQUEST: BAD_REQUEST,
}


def status_of_broker_code(code: BrokerCode) -> int:
    return SEND_STATUS_OF.get(code, INTERNAL_SERVER_ERROR)


@dataclass(frozen=True)
class StoreSend:
    """One v2 message as the produce path stores it."""

    topic: str
    body: bytes
    properties: dict[str, str]
    sys_flag: int
    message_id: str
    message_group: str
    born_timestamp_ms: int | None


def _has_control(text: str) -> bool:
    # GrpcValidator.containControlCharacter: any char below 0x20 but \t \r \n... the proxy
    # refuses Character.isISOControl, which is < 0x20 or 0x7f..0x9f.
    return any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in text)


def _timestamp_ms(ts: Any) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def store_send(message: Any, peer_host: str | None, now_ms: int) -> StoreSend:
    """`message` (apache.rocketmq.v2.Message) as the proxy stores it; raises GrpcRefusal."""
    topic = message.topic.name
    sysprops = message.system_properties
    body = bytes(message.body)
    if not body:
        raise GrpcRefusal(MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if len(body) > MAX_MESSAGE_SIZE:
        raise GrpcRefusal(
            MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {MAX_MESSAGE_SIZE}"
        )
    user = dict(message.user_properties)
    if len(user) > USER_PROPERTY_MAX_NUM:
        raise GrpcRefusal(
            MESSAGE_PROPERTIES_TOO_LARGE,
            f"too many user properties, max is {USER_PROPERTY_MAX_NUM}",
        )
    size = 0
    for key, value in user.items():
        if key in SYSTEM_PROPERTY_NAMES:
            raise GrpcRefusal(ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if _has_control(key) or _has_control(value):
            raise GrpcRefusal(
                ILLEGAL_MESSAGE_PROPERTY_KEY,
                "a property's key or value cannot contain control character",
            )
        size += len(key.encode()) + len(value.encode())
    props = dict(user)
    tag = sysprops.tag
    if tag:
        if not tag.strip() or "|" in tag or _has_control(tag):
            raise GrpcRefusal(ILLEGAL_MESSAGE_TAG, f"tag is illegal: {tag!r}")
        props[PROPERTY_TAGS] = tag
        size += len(tag.encode())
    keys = list(sysprops.keys)
    for key in keys:
        if key and (not key.strip() or _has_control(key)):
            raise GrpcRefusal(
                ILLEGAL_MESSAGE_KEY, "key cannot be whitespace only or contain control character"
            )
        size += len(key.encode())
    if keys:
        props[PROPERTY_KEYS] = " ".join(keys)
    if size > MAX_USER_PROPERTY_SIZE:
        raise GrpcRefusal(
            MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {MAX_USER_PROPERTY_SIZE}",
        )
    message_id = sysprops.message_id
    if not message_id.strip():
        raise GrpcRefusal(ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    props[PROPERTY_UNIQ_KEY] = message_id
    sys_flag = COMPRESSED_FLAG if sysprops.body_encoding == ENCODING_GZIP else 0
    if sysprops.message_type == MESSAGE_TYPE_TRANSACTION:
        sys_flag |= TRANSACTION_PREPARED_TYPE
        props[PROPERTY_TRANSACTION_PREPARED] = "true"
        if sysprops.HasField("orphaned_transaction_recovery_duration"):
            # The first check of the half message waits this long (never below
            # transactionTimeOut: transaction/rules.py).
            recovery_s = int(sysprops.orphaned_transaction_recovery_duration.seconds)
            if recovery_s > MAX_TRANSACTION_RECOVERY_S:
                raise GrpcRefusal(
                    BAD_REQUEST,
                    "the max transaction recovery time of message is too large, max is "
                    f"{MAX_TRANSACTION_RECOVERY_S}",
                )
            props[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(recovery_s)
    if sysprops.HasField("delivery_timestamp"):
        deliver_ms = _timestamp_ms(sysprops.delivery_timestamp)
        if deliver_ms - now_ms > MAX_DELAY_TIME_MS:
            raise GrpcRefusal(
                ILLEGAL_DELIVERY_TIME,
                f"the max delay time of message is too large, max is {MAX_DELAY_TIME_MS}",
            )
        props[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
    props[PROPERTY_RECONSUME_TIME] = str(int(sysprops.delivery_attempt))
    props[PROPERTY_PRODUCER_GROUP] = topic
    group = sysprops.message_group
    if group:
        if not group.strip() or _has_control(group):
            raise GrpcRefusal(
                ILLEGAL_MESSAGE_GROUP, "message group is whitespace or has control character"
            )
        if len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE:
            raise GrpcRefusal(
                ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {MAX_MESSAGE_GROUP_SIZE}"
            )
        props[PROPERTY_SHARDING_KEY] = group
    if sysprops.trace_context:
        props[PROPERTY_TRACE_CONTEXT] = sysprops.trace_context
    born_host = sysprops.born_host.strip() or (peer_host or "")
    if born_host:
        props[PROPERTY_BORN_HOST] = born_host
    born_ms: int | None = None
    if sysprops.HasField("born_timestamp"):
        born_ms = _timestamp_ms(sysprops.born_timestamp)
        props[PROPERTY_BORN_TIMESTAMP] = str(born_ms)
    return StoreSend(topic, body, props, sys_flag, message_id, group, born_ms)


def store_sends(messages: Iterable[Any], peer_host: str | None, now_ms: int) -> list[StoreSend]:
    """Every message of one SendMessageRequest (all of one topic, as the proxy requires)."""
    out = [store_send(m, peer_host, now_ms) for m in messages]
    if not out:
        raise GrpcRefusal(MESSAGE_CORRUPTED, "no message to send")
    if any(s.topic != out[0].topic for s in out):
        raise GrpcRefusal(MESSAGE_CORRUPTED, "topic in message is not same")
    return out


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def consistent_hash(value: int, buckets: int) -> int:
    """Guava's Hashing.consistentHash(long, int) (its linear congruential generator)."""
    if buckets <= 0:
        raise ValueError(f"buckets must be positive: {buckets}")
    state = value & 0xFFFFFFFFFFFFFFFF
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        # (int) (state >>> 33): 31 bits, a non-negative Java int.
        next_double = ((state >> 33) + 1) / float(1 << 31)
        nxt = int((candidate + 1) / next_double)
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def queue_for_group(message_group: str, queue_count: int) -> int:
    """The write queue of a message group, as the proxy's SendMessageQueueSelector picks it."""
    return consistent_hash(java_string_hash(message_group), queue_count)


def status(code: int, message: str | None = None, pb: Any = None) -> Any:
    """An apache.rocketmq.v2.Status; the message defaults to the code's name."""
    assert pb is not None
    return pb.Status(code=code, message=message if message else pb.Code.Name(code))


def merged_code(codes: Mapping[int, int] | Iterable[int]) -> int:
    """A SendMessageResponse's status: the one code of its entries, else MULTIPLE_RESULTS."""
    distinct = set(codes)
    if not distinct:
        return INTERNAL_SERVER_ERROR
    return distinct.pop() if len(distinct) == 1 else MULTIPLE_RESULTS
