"""RocketMQ remoting requests of the broker port, decoded and bounded (pure).

Field names and numbers are apache/rocketmq 5.3.x facts: SendMessageRequestHeader (SEND_MESSAGE,
full names) and SendMessageRequestHeaderV2 (SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE, one letter
each: a producerGroup, b topic, c defaultTopic, d defaultTopicQueueNums, e queueId, f sysFlag,
g bornTimestamp, h flag, i properties, j reconsumeTimes, k unitMode, l maxReconsumeTimes,
m batch, n brokerName), PullMessageRequestHeader, the consumer-offset headers,
MessageDecoder (properties string, batch body, offset message id). Header fields are read
by `brokergroup_remoting.fields` (Java's parsing rules), topic and group names by
`brokergroup_remoting.names` (RocketMQ's rules); every decoder raises `BadField`
naming the field and why; the transport answers it and the store is untouched.
The mapping of the one produce path's refusals to RocketMQ response codes is here too.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter

from brokergroup_broker import kernels
from brokergroup_broker.protocol.messages import ResponseCode as BrokerCode
from brokergroup_broker.store.message_encode import EncodedProperties
from brokergroup_remoting import ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.fields import BadField

#: MessageDecoder: name and value separators of the properties string.
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
#: MessageSysFlag.TRANSACTION_PREPARED_TYPE / COMMIT / ROLLBACK (bits 2-3).
TRANSACTION_TYPE_MASK = 0x3 << 2
#: PullSysFlag bits.
PULL_FLAG_COMMIT_OFFSET = 0x1
PULL_FLAG_SUSPEND = 0x2
#: MixAll: retry and dead-letter topic prefixes.
RETRY_GROUP_TOPIC_PREFIX = names.RETRY_GROUP_TOPIC_PREFIX
DLQ_GROUP_TOPIC_PREFIX = names.DLQ_GROUP_TOPIC_PREFIX
#: MessageConst properties a sent-back message carries.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
#: SubscriptionGroupConfig's retryMaxTimes default (maxReconsumeTimes -1 means this).
DEFAULT_MAX_RECONSUME_TIMES = 16
#: The default topic a producer routes a new topic by (TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC).
AUTO_CREATE_TOPIC_KEY = "TBW102"
#: PermName: read 4, write 2, inherit 1.
PERM_READ, PERM_WRITE, PERM_INHERIT = 4, 2, 1

_MAX_PROPERTIES_BYTES = 32767  # the record's properties length is a short


def decode_properties(raw: str | None) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: `name\\x01value\\x02`…; a pair without the
    name separator is skipped, as Java skips it."""
    if not raw:
        return {}
    if len(raw.encode("utf-8", "surrogatepass")) > _MAX_PROPERTIES_BYTES:
        raise BadField(f"the message properties are over {_MAX_PROPERTIES_BYTES} bytes")
    out: dict[str, str] = {}
    for pair in raw.split(PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep and name:
            out[name] = value
    return out


def encode_properties(props: Mapping[str, str]) -> str:
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in props.items())


@dataclass(frozen=True)
class SendRequest:
    """SendMessageRequestHeader(V2), whichever names it came in."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp_ms: int
    flag: int
    properties: dict[str, str]
    reconsume_times: int
    max_reconsume_times: int | None
    batch: bool


_V2_NAMES = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "maxReconsumeTimes": "l",
    "batch": "m",
}


def send_request(fields: Mapping[str, str], *, v2: bool) -> SendRequest:
    """The send header of SEND_MESSAGE (`v2=False`) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""
    if v2:
        fields = {long: fields[short] for long, short in _V2_NAMES.items() if short in fields}
    return SendRequest(
        producer_group=header.text(fields, "producerGroup"),
        topic=names.topic_name(fields, "topic"),
        default_topic=header.optional_text(fields, "defaultTopic") or AUTO_CREATE_TOPIC_KEY,
        default_topic_queue_nums=header.optional_int32(
            fields, "defaultTopicQueueNums", 4, low=0, high=1024
        ),
        queue_id=header.int32(fields, "queueId", low=-1, high=header.INT32_MAX),
        sys_flag=header.int32(fields, "sysFlag"),
        born_timestamp_ms=header.int64(fields, "bornTimestamp", low=0, high=header.INT64_MAX),
        flag=header.int32(fields, "flag"),
        properties=decode_properties(fields.get("properties")),
        reconsume_times=header.optional_int32(
            fields, "reconsumeTimes", 0, low=0, high=header.INT32_MAX
        ),
        max_reconsume_times=(
            header.optional_int32(fields, "maxReconsumeTimes", 0)
            if fields.get("maxReconsumeTimes")
            else None
        ),
        batch=header.boolean(fields, "batch"),
    )


@dataclass(frozen=True)
class BatchMessage:
    flag: int
    body: bytes
    properties: dict[str, str]


_BATCH_PREFIX = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLength
_SHORT = struct.Struct(">h")  # propertiesLength


def decode_batch_body(body: bytes, *, max_messages: int) -> list[BatchMessage]:
    """MessageDecoder.encodeMessages' layout, one after another: int totalSize, int magic,
    int bodyCRC, int flag, int bodyLength, body, short propertiesLength, properties."""
    out: list[BatchMessage] = []
    pos = 0
    while pos < len(body):
        if len(out) >= max_messages:
            raise BadField(f"the batch holds more than {max_messages} messages")
        if len(body) - pos < _BATCH_PREFIX.size:
            raise BadField(f"the batch body is cut inside message {len(out)}")
        total, _magic, _crc, flag, body_len = _BATCH_PREFIX.unpack_from(body, pos)
        end = pos + total
        start = pos + _BATCH_PREFIX.size
        if total < _BATCH_PREFIX.size + 2 or end > len(body) or body_len < 0:
            raise BadField(f"message {len(out)} of the batch has a bad length ({total})")
        if start + body_len + 2 > end:
            raise BadField(f"message {len(out)} of the batch has a bad body length ({body_len})")
        msg_body = body[start : start + body_len]
        (props_len,) = struct.unpack_from(">h", body, start + body_len)
        props_start = start + body_len + 2
        if props_len < 0 or props_start + props_len != end:
            raise BadField(f"message {len(out)} of the batch has a bad properties length")
        try:
            props_text = body[props_start:end].decode("utf-8")
        except UnicodeDecodeError:
            raise BadField(f"message {len(out)} of the batch has non-UTF-8 properties") from None
        out.append(BatchMessage(flag, msg_body, decode_properties(props_text)))
        pos = end
    if not out:
        raise BadField("the batch holds no message")
    return out


@dataclass(frozen=True)
class BatchSend:
    """A SEND_BATCH_MESSAGE body with the request's properties merged into each message's
    (`{**request, **message}`, as the send path has always stored them)."""

    flag: int
    #: Do all messages carry `flag`? (A batch's messages must share one.)
    one_flag: bool
    bodies: list[bytes]
    properties: list[Mapping[str, str]]
    #: False when no message names a property in `decode_batch_send`'s `reference_names`
    #: (the one-pass path guarantees it); True: the caller must look.
    may_name_reference: bool


def decode_batch_send(
    body: bytes,
    request_properties: Mapping[str, str],
    *,
    max_messages: int,
    reference_names: frozenset[str],
) -> BatchSend:
    """`decode_batch_body` and the merge of the request's properties, in one pass over the
    body when the batch is the ordinary kind: each message's properties are kept as the
    bytes they arrived in (reordered as the merge orders them) and handed to the store as
    `EncodedProperties`, so no per-message dict is built or re-serialized. Anything else
    (a malformed body, properties the reference decoder would drop or rewrite, names in
    `reference_names`, mixed flags, over 32767 bytes merged) goes through the reference
    path, so records, answers and refusals are the reference's byte for byte."""
    fast = _batch_send_one_pass(body, request_properties, max_messages, reference_names)
    if fast is not None:
        return fast
    inner = decode_batch_body(body, max_messages=max_messages)
    flag = inner[0].flag
    return BatchSend(
        flag,
        all(m.flag == flag for m in inner),
        [m.body for m in inner],
        [{**request_properties, **m.properties} for m in inner],
        may_name_reference=True,
    )


#: A property value as the canonical layout holds it (no separator inside).
_VALUE = rb"\x01[^\x01\x02]*\x02"


@dataclass(frozen=True)
class _Plan:
    """The merge for messages whose properties name `names`, in this order, each once, in
    the canonical layout: `layout` matches exactly those properties (one group per pair);
    the merged bytes are `pick(match.groups() + missing)` joined, where `missing` is the
    request's pairs the messages lack (None: the groups are in order already, the merged
    bytes are the properties plus `missing`); `tags_part` is where the TAGS pair is in
    `groups() + missing` (-1: none)."""

    layout: re.Pattern[bytes]
    missing: tuple[bytes, ...]
    pick: Callable[[tuple[bytes, ...]], tuple[bytes, ...]] | None
    tags_part: int
    #: With nothing missing and at least two pairs: `pick` as group numbers (one C call).
    groups: tuple[int, ...] | None


def _names(raw: bytes) -> tuple[bytes, ...] | None:
    """The names of properties in the canonical layout (`name\\x01value\\x02` each, names
    non-empty and distinct), or None when the reference decoder would read `raw` other
    than its bytes say (a pair without or with two separators, an empty or repeated name,
    text after the last pair)."""
    pieces = raw.split(b"\x02")
    if pieces.pop():
        return None
    names = []
    for piece in pieces:
        name, sep, value = piece.partition(b"\x01")
        if not name or not sep or b"\x01" in value:
            return None
        names.append(name)
    if len(set(names)) != len(names):
        return None
    return tuple(names)


def _plan(
    names: tuple[bytes, ...],
    request: Sequence[tuple[bytes, bytes]],
    reference_names: frozenset[str],
) -> _Plan | None:
    """`{**request, **message}` for a message naming `names`: the request's names first, in
    its order (the message's value where it has one), then the message's other names in
    its order. None when a name is in `reference_names`."""
    if any(n.decode() in reference_names for n in names):
        return None
    at = {n: i for i, n in enumerate(names)}
    order: list[int] = []
    missing: list[bytes] = []
    merged_names: list[bytes] = []
    for name, pair in request:
        i = at.get(name)
        if i is None:
            i = len(names) + len(missing)
            missing.append(pair)
        order.append(i)
        merged_names.append(name)
    requested = {name for name, _ in request}
    for i, n in enumerate(names):
        if n not in requested:
            order.append(i)
            merged_names.append(n)
    tags_part = order[merged_names.index(b"TAGS")] if b"TAGS" in merged_names else -1
    pick = None if order == sorted(order) else itemgetter(*order)
    layout = re.compile(b"".join(b"(" + re.escape(n) + _VALUE + b")" for n in names))
    groups = tuple(i + 1 for i in order) if not missing and len(order) > 1 else None
    return _Plan(layout, tuple(missing), pick, tags_part, groups)


def _batch_send_one_pass(
    body: bytes,
    request_properties: Mapping[str, str],
    max_messages: int,
    reference_names: frozenset[str],
) -> BatchSend | None:
    """`decode_batch_send`'s one pass, or None where the reference path must decide."""
    request: list[tuple[bytes, bytes]] = []
    for k, v in request_properties.items():
        # decode_properties never gives a separator or an empty name; a caller's map might.
        text = f"{k}{v}"
        if not k or k in reference_names or "\x01" in text or "\x02" in text:
            return None
        try:
            request.append((k.encode(), f"{k}\x01{v}\x02".encode()))
        except UnicodeEncodeError:
            return None
    native = kernels.NATIVE
    if native is not None and type(body) is bytes:
        got = native.batch_send_one_pass(
            body, request, max_messages, reference_names, EncodedProperties
        )
        if got is None:
            return None
        flag, kernel_bodies, kernel_props = got
        return BatchSend(flag, True, kernel_bodies, kernel_props, may_name_reference=False)
    plans: dict[tuple[bytes, ...], _Plan | None] = {}
    plan: _Plan | None = None
    tag_texts: dict[bytes, str] = {}
    bodies: list[bytes] = []
    props: list[Mapping[str, str]] = []
    unpack = _BATCH_PREFIX.unpack_from
    short = _SHORT.unpack_from
    size = len(body)
    pos = 0
    flag = None
    while pos < size:
        if len(bodies) >= max_messages or size - pos < _BATCH_PREFIX.size:
            return None
        total, _magic, _crc, msg_flag, body_len = unpack(body, pos)
        end = pos + total
        start = pos + _BATCH_PREFIX.size
        props_start = start + body_len + 2
        if total < _BATCH_PREFIX.size + 2 or end > size or body_len < 0 or props_start > end:
            return None
        if short(body, props_start - 2)[0] != end - props_start:
            return None
        if flag is None:
            flag = msg_flag
        elif msg_flag != flag:
            return None
        raw = body[props_start:end]
        if not raw.isascii():
            try:
                raw.decode()
            except UnicodeDecodeError:
                return None
        # Messages of one batch mostly name the same properties in the same order: the
        # previous message's plan first, one C-speed match; a new layout is parsed once.
        if plan is None or (match := plan.layout.fullmatch(raw)) is None:
            names = _names(raw)
            if names is None:
                return None
            if names in plans:
                plan = plans[names]
            else:
                plan = plans[names] = _plan(names, request, reference_names)
            if plan is None:
                return None
            match = plan.layout.fullmatch(raw)
            assert match is not None  # the layout of exactly these names
        tags = None
        if plan.pick is None and plan.tags_part < 0:
            merged = raw + b"".join(plan.missing) if plan.missing else raw
        elif plan.groups is not None and plan.tags_part < 0:
            merged = b"".join(match.group(*plan.groups))  # reordered, nothing missing
        else:
            parts = match.groups() + plan.missing if plan.missing else match.groups()
            merged = b"".join(parts if plan.pick is None else plan.pick(parts))
            if plan.tags_part >= 0:
                value = parts[plan.tags_part][5:-1]  # TAGS\x01 value \x02
                if value:
                    tags = tag_texts.get(value)
                    if tags is None:
                        tags = tag_texts[value] = value.decode()
        if len(merged) > _MAX_PROPERTIES_BYTES:
            return None
        bodies.append(body[start : start + body_len])
        props.append(EncodedProperties(merged, tags))
        pos = end
    if flag is None:
        return None
    return BatchSend(flag, True, bodies, props, may_name_reference=False)


def offset_message_id(store_host: tuple[str, int], physical_offset: int) -> str:
    """MessageDecoder.createMessageId: store host address, port and commit log offset,
    upper-case hex (what SendResult.offsetMsgId and VIEW_MESSAGE_BY_ID use)."""
    return offset_message_ids(store_host, (physical_offset,))[0]


def offset_message_ids(store_host: tuple[str, int], physical_offsets: Iterable[int]) -> list[str]:
    """`offset_message_id` of each offset, the host parsed once (a batch answers 128)."""
    return message_ids_after(store_host_prefix(store_host), physical_offsets)


def store_host_prefix(store_host: tuple[str, int]) -> bytes:
    """The first bytes of every offset message id of `store_host`: its packed address
    and port. A broker computes it once; parsing the address per send was 1-8 % of it."""
    return ipaddress.ip_address(store_host[0]).packed + struct.pack(">i", store_host[1])


def message_ids_after(prefix: bytes, physical_offsets: Iterable[int]) -> list[str]:
    """`offset_message_ids` from a `store_host_prefix`."""
    pack = _OFFSET.pack
    return [(prefix + pack(offset)).hex().upper() for offset in physical_offsets]


_OFFSET = struct.Struct(">q")


def decode_message_id(msg_id: str) -> tuple[str, int, int]:
    """(host, port, commit log offset) of an offset message id; BadField if it is not one."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise BadField(f"message id {msg_id[:40]!r} is not hex") from None
    if len(raw) not in (16, 28):
        raise BadField(f"message id {msg_id[:40]!r} is not 16 or 28 bytes")
    host = str(ipaddress.ip_address(raw[:-12]))
    port, offset = struct.unpack(">iq", raw[-12:])
    return host, port, offset


@dataclass(frozen=True)
class PullRequest:
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_ms: int


def pull_request(fields: Mapping[str, str]) -> PullRequest:
    return PullRequest(
        consumer_group=names.group_name(fields, "consumerGroup"),
        topic=names.topic_name(fields, "topic"),
        queue_id=header.int32(fields, "queueId", low=0, high=header.INT32_MAX),
        queue_offset=header.int64(fields, "queueOffset", low=0, high=header.INT64_MAX),
        max_msg_nums=header.int32(fields, "maxMsgNums", low=0, high=header.INT32_MAX),
        sys_flag=header.int32(fields, "sysFlag"),
        commit_offset=header.int64(fields, "commitOffset", low=-1, high=header.INT64_MAX),
        suspend_timeout_ms=header.optional_int64(
            fields, "suspendTimeoutMillis", 0, low=0, high=header.INT64_MAX
        ),
    )


@dataclass(frozen=True)
class QueueRef:
    """A (topic, queueId) a request names, with its group if it has one."""

    topic: str
    queue_id: int
    group: str | None = None


def queue_ref(fields: Mapping[str, str], *, group: str | None = None) -> QueueRef:
    return QueueRef(
        topic=names.topic_name(fields, "topic"),
        queue_id=header.int32(fields, "queueId", low=0, high=header.INT32_MAX),
        group=None if group is None else names.group_name(fields, group),
    )


#: The one produce path's refusals as RocketMQ answers a send. A broker that may not take
#: writes (a slave, a fenced or unconfirmed master, a store that refuses writes) answers
#: SERVICE_NOT_AVAILABLE, as RocketMQ's store does for a slave's putMessage: the stock
#: producer retries another broker, and a route refresh names the new master.
SEND_CODE_OF: dict[BrokerCode, ResponseCode] = {
    BrokerCode.NOT_MASTER: ResponseCode.SERVICE_NOT_AVAILABLE,
    BrokerCode.FENCED: ResponseCode.SERVICE_NOT_AVAILABLE,
    BrokerCode.READ_ONLY: ResponseCode.SERVICE_NOT_AVAILABLE,
    BrokerCode.STORE_NOT_WRITABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    # RocketMQ answers IN_SYNC_REPLICAS_NOT_ENOUGH with SYSTEM_ERROR (a producer retries it).
    BrokerCode.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.SYSTEM_ERROR,
    # Appended but not acknowledged by the SyncStateSet: SendStatus.FLUSH_SLAVE_TIMEOUT, so
    # the application sees "not SEND_OK" and the producer does not send it twice.
    BrokerCode.SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    BrokerCode.SYSTEM_BUSY: ResponseCode.SYSTEM_BUSY,
    BrokerCode.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    BrokerCode.TOPIC_INVALID: ResponseCode.MESSAGE_ILLEGAL,
    BrokerCode.BAD_REQUEST: ResponseCode.MESSAGE_ILLEGAL,
    BrokerCode.SYSTEM_ERROR: ResponseCode.SYSTEM_ERROR,
    BrokerCode.SUCCESS: ResponseCode.SUCCESS,
}

#: A send refused because this broker is not the master: RocketMQ answers a send on a slave
#: SERVICE_NOT_AVAILABLE (DefaultMessageStore: "messages are put to the slave"); here the
#: connection is closed after that answer too, so a client that reached a deposed master
#: through a stable address reconnects to the current one (docs/rocketmq-compatibility.md
#: "Following the master").
NOT_MASTER_CODES = frozenset({BrokerCode.NOT_MASTER, BrokerCode.FENCED, BrokerCode.READ_ONLY})

#: The same for reads and offsets: a slave or unconfirmed broker is not available to them.
READ_CODE_OF: dict[BrokerCode, ResponseCode] = {
    **SEND_CODE_OF,
    BrokerCode.TOPIC_INVALID: ResponseCode.SYSTEM_ERROR,
    BrokerCode.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,
}


def topic_config(name: str, queues: int, perm: int = PERM_READ | PERM_WRITE) -> dict[str, object]:
    """TopicConfig as RocketMQ serializes it (registrations, GET_ALL_TOPIC_CONFIG)."""
    return {
        "topicName": name,
        "readQueueNums": queues,
        "writeQueueNums": queues,
        "perm": perm,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
        "attributes": {},
    }
