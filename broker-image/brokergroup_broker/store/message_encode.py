"""The one encoder of the v1 record layout (`message.py`): `encode_run` for a run
of one topic and queue (the produce path), `encode_batch` and `encode_message`
built on it. Pure: bytes in, bytes out.
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from brokergroup_broker import kernels
from brokergroup_broker.topics import topic_error

from .errors import MessageInvalid, TopicNotStorable
from .message import (
    AFTER_HOSTS,
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    HOST_V4,
    HOST_V6,
    I16,
    I64,
    MAX_PROPERTIES_BYTES,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    SIZE_MAGIC,
    STOREHOSTADDRESS_V6_FLAG,
    AppendedMessage,
    MessageInput,
    RecordIndex,
    encode_host,
    java_string_hash,
    message_length,
)


def encode_message(
    message: MessageInput,
    *,
    queue_offset: int,
    physical_offset: int,
    store_host: tuple[str, int],
    store_timestamp_ms: int,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    sys_flag: int = 0,
) -> bytes:
    """One record, every field settable (tests and tools); `encode_run` lays it out."""
    return encode_run(
        message.topic,
        message.queue_id,
        [message.body],
        [message.properties] if message.properties else None,
        flag=message.flag,
        born_timestamp_ms=message.born_timestamp_ms,
        born_host=message.born_host,
        start_offset=physical_offset,
        segment_bytes=1 << 62,  # one record: never a segment end
        store_host=store_host,
        store_timestamp_ms=store_timestamp_ms,
        first_queue_offset=queue_offset,
        max_message_bytes=1 << 31,
        reconsume_times=reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        sys_flag=sys_flag,
    ).data


def _check_topic(topic: str) -> bytes:
    """The topic's bytes; refuses a name the consume queues could not index."""
    error = topic_error(topic)
    if error is not None:
        raise TopicNotStorable(error)
    return topic.encode("ascii")


class EncodedProperties(Mapping[str, str]):
    """A message's properties already in the record's encoding (`data`: `name\\x01value\\x02`
    per property, UTF-8, each name once and non-empty, no separator inside a name or value,
    at most MAX_PROPERTIES_BYTES) with its TAGS value, so `encode_run` writes the bytes as
    they are instead of re-serializing a dict (a batch send's properties arrive encoded:
    `wire.decode_batch_send`). The builder vouches for the layout. As a Mapping it is the
    dict those bytes decode to, built only if something asks."""

    __slots__ = ("_map", "data", "tags")

    def __init__(self, data: bytes, tags: str | None) -> None:
        self.data = data
        self.tags = tags
        self._map: dict[str, str] | None = None

    def _items(self) -> dict[str, str]:
        if self._map is None:
            pairs = self.data.decode().split(PROPERTY_SEPARATOR)[:-1]
            self._map = dict(p.split(NAME_VALUE_SEPARATOR, 1) for p in pairs)
        return self._map

    def __getitem__(self, key: str) -> str:
        return self._items()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())

    def __bool__(self) -> bool:
        return bool(self.data)

    def __repr__(self) -> str:
        return f"EncodedProperties({self.data!r})"


def _check_properties(properties: Mapping[str, str]) -> bytes:
    text = "".join([f"{k}\x01{v}\x02" for k, v in properties.items()])
    n = len(properties)
    # One C-speed count instead of scanning every key and value for the separators.
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n:
        bad = {k: v for k, v in properties.items() if any(c in k + v for c in "\x01\x02")}
        raise MessageInvalid(f"properties {bad!r} contain a \\x01/\\x02 separator")
    data = text.encode()
    if len(data) > MAX_PROPERTIES_BYTES:
        raise _properties_too_large(len(data))
    return data


def _properties_too_large(size: int) -> MessageInvalid:
    return MessageInvalid(
        f"properties are {size} bytes encoded; the limit is {MAX_PROPERTIES_BYTES}"
    )


def _record_too_large(total: int, body_bytes: int, topic: str, limit: int) -> MessageInvalid:
    return MessageInvalid(
        f"message of {total} bytes (body {body_bytes}) to {topic!r} exceeds max_message_bytes {limit}"
    )


@dataclass
class EncodedBatch:
    """A batch laid out for the log at `start_offset`, blank records included."""

    data: bytearray
    start_offset: int
    messages: list[AppendedMessage]
    index: list[RecordIndex]
    next_queue_offsets: dict[tuple[str, int], int]


def encode_batch(
    batch: Sequence[MessageInput],
    *,
    start_offset: int,
    segment_bytes: int,
    store_host: tuple[str, int],
    store_timestamp_ms: int,
    queue_offset_of: Callable[[tuple[str, int]], int],
    max_message_bytes: int,
) -> EncodedBatch:
    """Lay a batch of any topics and queues out as it will sit in the log from
    `start_offset` (pure): each maximal run of messages with the same topic,
    queue, flag, born timestamp and born host goes through `encode_run`, the
    one encoder of the record layout.

    Validates every message before returning anything, so a bad message
    rejects the whole batch. `queue_offset_of` gives the next queue offset of
    a (topic, queueId); the advanced values are returned, not stored anywhere.
    """
    for msg in batch:
        if msg.queue_id < 0:
            raise MessageInvalid(f"queue id {msg.queue_id} of topic {msg.topic!r} is negative")
    next_qo: dict[tuple[str, int], int] = {}
    parts: list[bytes] = []
    messages: list[AppendedMessage] = []
    index: list[RecordIndex] = []
    pos = start_offset
    i = 0
    while i < len(batch):
        first = batch[i]
        j = i + 1
        while j < len(batch) and _same_run(first, batch[j]):
            j += 1
        run_msgs = batch[i:j]
        key = (first.topic, first.queue_id)
        qo = next_qo.get(key)
        if qo is None:
            qo = queue_offset_of(key)
        props = [m.properties or None for m in run_msgs]
        run = encode_run(
            first.topic,
            first.queue_id,
            [m.body for m in run_msgs],
            props if any(props) else None,
            flag=first.flag,
            born_timestamp_ms=first.born_timestamp_ms,
            born_host=first.born_host,
            start_offset=pos,
            segment_bytes=segment_bytes,
            store_host=store_host,
            store_timestamp_ms=store_timestamp_ms,
            first_queue_offset=qo,
            max_message_bytes=max_message_bytes,
        )
        tcodes = run.tags_codes or [0] * len(run_msgs)
        for n, (phys, size, tcode) in enumerate(
            zip(run.physical_offsets, run.sizes, tcodes, strict=True)
        ):
            messages.append(AppendedMessage(phys, size, first.queue_id, qo + n))
            index.append(RecordIndex(first.topic, first.queue_id, qo + n, phys, size, tcode))
        next_qo[key] = qo + len(run_msgs)
        parts.append(run.data)
        pos = run.end_offset
        i = j
    return EncodedBatch(bytearray(b"".join(parts)), start_offset, messages, index, next_qo)


def _same_run(a: MessageInput, b: MessageInput) -> bool:
    return (
        a.topic == b.topic
        and a.queue_id == b.queue_id
        and a.flag == b.flag
        and a.born_timestamp_ms == b.born_timestamp_ms
        and a.born_host == b.born_host
    )


@dataclass
class EncodedRun:
    """A batch of ONE topic and queue laid out for the log (`encode_run`), blank records
    included. Message i sits at `physical_offsets[i]`, is `sizes[i]` bytes long and has
    queue offset `first_queue_offset + i`."""

    data: bytes
    start_offset: int
    first_queue_offset: int
    physical_offsets: list[int]
    sizes: list[int]
    tags_codes: list[int] | None  # None: every message's tagsCode is 0

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self.data)


#: Record prefix up to and including bodyLength, with the hosts/storeTimestamp/
#: reconsumeTimes/preparedTransactionOffset block (constant within a batch) as one
#: string: v4 hosts make it 8 + 8 + 8 + 4 + 8 = 36 bytes, v6 ones 60 or 48.
_RUN_PREFIX: dict[int, struct.Struct] = {}


def _run_prefix(middle_len: int) -> struct.Struct:
    st = _RUN_PREFIX.get(middle_len)
    if st is None:
        st = _RUN_PREFIX[middle_len] = struct.Struct(f">iiiiiqqiq{middle_len}si")
    return st


def encode_run(
    topic: str,
    queue_id: int,
    bodies: Sequence[bytes | bytearray | memoryview],
    properties: Sequence[Mapping[str, str] | None] | None,
    *,
    flag: int,
    born_timestamp_ms: int,
    born_host: tuple[str, int],
    start_offset: int,
    segment_bytes: int,
    store_host: tuple[str, int],
    store_timestamp_ms: int,
    first_queue_offset: int,
    max_message_bytes: int,
    reconsume_times: int = 0,
    prepared_transaction_offset: int = 0,
    sys_flag: int = 0,
) -> EncodedRun:
    """THE encoder of the v1 record layout (module docstring): a run of messages
    of one topic, queue, flag, born timestamp and born host, laid out for the log
    from `start_offset` with blank records at segment ends (pure). The produce
    path calls it directly (`Store.put_run`); `encode_batch` and `encode_message`
    are built on it.

    No per-message objects: per message one CRC, one `struct.pack` of the record
    prefix, and the body and a per-topic trailer (topic, properties) joined once.
    `properties` is None when no message has any, else one mapping (or None) per
    message. `sys_flag` bits other than the host ones are kept (tools and tests
    write any record). Validates everything before returning, so an invalid
    message rejects the batch.
    """
    left = segment_bytes - start_offset % segment_bytes
    if left < END_FILE_MIN_BLANK_LENGTH:
        raise ValueError(
            f"start offset {start_offset} leaves {left} bytes in its segment: no log ends there"
        )
    topic_bytes = _check_topic(topic)
    if queue_id < 0:
        raise MessageInvalid(f"queue id {queue_id} of topic {topic!r} is negative")
    born_addr, born_v6 = encode_host(born_host)
    store_addr, store_v6 = encode_host(store_host)
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    middle = (
        (HOST_V6 if born_v6 else HOST_V4).pack(born_addr, born_host[1])
        + I64.pack(store_timestamp_ms)
        + (HOST_V6 if store_v6 else HOST_V4).pack(store_addr, store_host[1])
        + AFTER_HOSTS.pack(reconsume_times, prepared_transaction_offset, 0)[:12]
    )
    pack = _run_prefix(len(middle)).pack
    fixed = message_length(sys_flag, 0, len(topic_bytes), 0)
    topic_part = bytes([len(topic_bytes)]) + topic_bytes
    plain_trailer = topic_part + b"\x00\x00"
    crc32 = zlib.crc32
    magic = MESSAGE_MAGIC_CODE
    parts: list[bytes | bytearray | memoryview] = []
    append = parts.append
    phys_list: list[int] = []
    sizes: list[int] = []
    tcodes: list[int] | None = None
    pos = start_offset
    qo = first_queue_offset
    limit = max_message_bytes
    if properties is not None and len(properties) != len(bodies):
        raise ValueError(f"{len(properties)} property maps for {len(bodies)} bodies")
    native = kernels.NATIVE
    # The kernel takes EncodedProperties (a batch's) or none; a single send's dict is
    # serialized and checked by `_trailer` (asking the kernel first only costs a call).
    dict_first = properties is not None and len(properties) > 0 and type(properties[0]) is dict
    if (
        native is not None
        and type(bodies) is list
        and (properties is None or (type(properties) is list and not dict_first))
    ):
        try:
            got = native.encode_run_records(
                topic_part, queue_id, bodies, properties, EncodedProperties, flag,
                born_timestamp_ms, middle, sys_flag, fixed, start_offset, segment_bytes,
                first_queue_offset, max_message_bytes,
            )  # fmt: skip
        except OverflowError:  # a number past 64 bits: the reference refuses it
            got = None
        if got is not None:
            if len(got) == 4:
                return EncodedRun(got[0], start_offset, first_queue_offset, *got[1:])
            _refuse(got, topic, bodies, max_message_bytes)
    extras: Iterator[tuple[bytes, bytes, int]]
    if properties is None:
        # The common case: no properties anywhere, one constant trailer.
        extras = itertools.repeat((b"", plain_trailer, 0))
    else:
        tcodes = []
        tag_codes: dict[str, int] = {}
        extras = (_trailer(m, topic_part, plain_trailer, tag_codes) for m in properties)
    for body, (props, trailer, tcode) in zip(bodies, extras):  # noqa: B905 (repeat is endless)
        blen = len(body)
        total = fixed + blen + len(props)
        if total > limit:
            raise _record_too_large(total, blen, topic, max_message_bytes)
        if total + END_FILE_MIN_BLANK_LENGTH > segment_bytes - pos % segment_bytes:
            space = segment_bytes - pos % segment_bytes
            append(SIZE_MAGIC.pack(space, BLANK_MAGIC_CODE) + bytes(space - 8))
            pos += space
        append(
            pack(
                total, magic, crc32(body) & 0x7FFFFFFF, queue_id, flag, qo, pos, sys_flag,
                born_timestamp_ms, middle, blen,
            )
        )  # fmt: skip
        append(body)
        append(trailer)
        phys_list.append(pos)
        sizes.append(total)
        if tcodes is not None:
            tcodes.append(tcode)
        pos += total
        qo += 1
    return EncodedRun(b"".join(parts), start_offset, first_queue_offset, phys_list, sizes, tcodes)


def _refuse(
    refusal: tuple[str, int, int],
    topic: str,
    bodies: Sequence[bytes | bytearray | memoryview],
    max_message_bytes: int,
) -> NoReturn:
    """The kernel's refusal of message i, worded as the reference loop words it."""
    what, i, value = refusal
    if what == "properties":
        raise _properties_too_large(value)
    raise _record_too_large(value, len(bodies[i]), topic, max_message_bytes)


def _trailer(
    props_map: Mapping[str, str] | None,
    topic_part: bytes,
    plain_trailer: bytes,
    tag_codes: dict[str, int],
) -> tuple[bytes, bytes, int]:
    """(properties bytes, record trailer after the body, tagsCode) of one message."""
    if type(props_map) is EncodedProperties:
        # Encoded and checked by its builder; the size is checked again as it is cheap.
        props = props_map.data
        if len(props) > MAX_PROPERTIES_BYTES:
            raise _properties_too_large(len(props))
        tags = props_map.tags
    elif not props_map:
        return b"", plain_trailer, 0
    else:
        props = _check_properties(props_map)
        tags = props_map.get(PROPERTY_TAGS)
    if not props:
        return b"", plain_trailer, 0
    tcode = 0
    if tags:
        cached = tag_codes.get(tags)
        tcode = tag_codes[tags] = java_string_hash(tags) if cached is None else cached
    return props, topic_part + I16.pack(len(props)) + props, tcode
