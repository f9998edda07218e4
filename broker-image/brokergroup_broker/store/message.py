"""RocketMQ v1 commit log record codec and the pure record scanner (DESIGN.md §3.1).

Record layout (big-endian, exactly RocketMQ's CommitLog / MessageDecoder v1):

    off  size  field
      0     4  totalSize             whole record, these 4 bytes included
      4     4  magicCode             MESSAGE_MAGIC_CODE 0xdaa320a7 (-626843481)
      8     4  bodyCRC               zlib CRC32 of the body & 0x7FFFFFFF (UtilAll.crc32)
     12     4  queueId
     16     4  flag
     20     8  queueOffset           index of the record in its consume queue
     28     8  physicalOffset        commit log offset of this record
     36     4  sysFlag               bit 4: born host IPv6, bit 5: store host IPv6
     40     8  bornTimestamp (ms)
     48   8|20 bornHost              IPv4 4 bytes + port int, or IPv6 16 bytes + port
      .     8  storeTimestamp (ms)
      .  8|20  storeHost
      .     4  reconsumeTimes
      .     8  preparedTransactionOffset
      .     4  bodyLength, then body
      .     1  topicLength (v1: one byte, so topics are at most 127 bytes), then topic
      .     2  propertiesLength (short), then properties

Properties are `name \\x01 value \\x02` repeated (MessageDecoder
messageProperties2String). A segment's unused tail is a blank record:
`int maxBlank, int BLANK_MAGIC_CODE (0xcbd43194)` followed by zeros up to the
segment end. A message is placed in a segment only if `msgLen + 8 <= space
left` (END_FILE_MIN_BLANK_LENGTH), so every full segment ends with a blank of
at least 8 bytes and a reader can always tell "segment finished" from "log ends".

The consume queue's tagsCode is Java's `String.hashCode()` of the TAGS property
(0 when absent), as in MessageExtBrokerInner.tagsString2tagsCode.

`scan_records` is a pure function over bytes: recovery, the slave's dispatch
and the audit all use it, so one definition of "a valid record" exists.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from brokergroup_broker.topics import MAX_TOPIC_BYTES, topic_error

from .errors import MessageInvalid, StoreCorruption, TopicNotStorable

MESSAGE_MAGIC_CODE = -626843481  # 0xdaa320a7
BLANK_MAGIC_CODE = -875286124  # 0xcbd43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x1 << 1
BORNHOST_V6_FLAG = 0x1 << 4
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"

MAX_PROPERTIES_BYTES = 32767  # stored as a Java short

#: Bytes of a record with IPv4 hosts, excluding body, topic and properties.
FIXED_V4_BYTES = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2
MIN_RECORD_BYTES = FIXED_V4_BYTES + 1  # a topic has at least one byte

_HEAD = struct.Struct(">iiiiiqqiq")  # totalSize .. bornTimestamp (48 bytes)
_SIZE_MAGIC = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_Q = struct.Struct(">q")
_HOST_V4 = struct.Struct(">4si")
_HOST_V6 = struct.Struct(">16si")
_AFTER_HOSTS = struct.Struct(">iqi")  # reconsumeTimes, preparedTransactionOffset, bodyLength
_TAGS_NEEDLE = b"TAGS\x01"
#: scan_records' fast path: totalSize, magic, bodyCRC, queueId, (flag), queueOffset,
#: physicalOffset, sysFlag, (born ts, hosts, store ts, reconsumeTimes, prepared
#: offset: 44 bytes for IPv4 hosts), bodyLength.
_SCAN_V4 = struct.Struct(">iiii4xqqi44xi")


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """RocketMQ's UtilAll.crc32: CRC32 masked to a non-negative Java int."""
    return zlib.crc32(body) & 0x7FFFFFFF


def java_string_hash(text: str) -> int:
    """Java's String.hashCode() (over UTF-16 code units) as a signed 32-bit int."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    return java_string_hash(tags) if tags else 0


def encode_properties(properties: Mapping[str, str]) -> bytes:
    if not properties:
        return b""
    return "".join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
    ).encode()


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """MessageDecoder.string2messageProperties: items without exactly one separator are dropped."""
    result: dict[str, str] = {}
    if not data:
        return result
    for item in bytes(data).decode("utf-8", "replace").split(PROPERTY_SEPARATOR):
        parts = item.split(NAME_VALUE_SEPARATOR)
        if len(parts) == 2 and parts[0] and parts[1]:
            result[parts[0]] = parts[1]
    return result


@functools.lru_cache(maxsize=1024)
def encode_host(host: tuple[str, int]) -> tuple[bytes, bool]:
    """(address bytes, is_ipv6) of a (ip, port) pair (cached: pure, and ipaddress is slow)."""
    # ipaddress, not socket.inet_*: pysyncobj replaces socket.inet_ntop with a
    # Windows-only shim at import time, which breaks any process importing both.
    ip = ipaddress.ip_address(host[0])
    return ip.packed, ip.version == 6


def decode_host(addr: bytes, port: int) -> tuple[str, int]:
    return str(ipaddress.ip_address(addr)), port


def message_length(sys_flag: int, body_len: int, topic_len: int, properties_len: int) -> int:
    """CommitLog.calMsgLength."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    return (
        4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
        + 4 + max(body_len, 0) + 1 + topic_len + 2 + max(properties_len, 0)
    )  # fmt: skip


@dataclass(frozen=True)
class MessageInput:
    """What the master appends; properties hold KEYS / TAGS / UNIQ_KEY as in RocketMQ."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)


@dataclass(frozen=True)
class AppendedMessage:
    physical_offset: int
    size: int
    queue_id: int
    queue_offset: int


@dataclass(frozen=True)
class AppendResult:
    start_offset: int
    end_offset: int
    messages: list[AppendedMessage]


@dataclass(frozen=True)
class StoredMessage:
    """One decoded v1 record."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    store_timestamp_ms: int
    born_host: tuple[str, int]
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body_crc: int

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)


@dataclass(frozen=True)
class FileRange:
    """A slice of ONE segment file, for os.sendfile(sock, fd, file_position, length).

    `offset` is the commit log offset of the first byte. The fd belongs to the
    store: do not close it; it stays valid until the segment is truncated away.
    """

    fd: int
    file_position: int
    length: int
    offset: int


class RecordIndex(NamedTuple):
    """What dispatch needs from a record: its consume queue entry."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    tags_code: int


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


def _check_properties(properties: Mapping[str, str]) -> bytes:
    text = "".join([f"{k}\x01{v}\x02" for k, v in properties.items()])
    n = len(properties)
    # One C-speed count instead of scanning every key and value for the separators.
    if text.count(NAME_VALUE_SEPARATOR) != n or text.count(PROPERTY_SEPARATOR) != n:
        bad = {k: v for k, v in properties.items() if any(c in k + v for c in "\x01\x02")}
        raise MessageInvalid(f"properties {bad!r} contain a \\x01/\\x02 separator")
    data = text.encode()
    if len(data) > MAX_PROPERTIES_BYTES:
        raise MessageInvalid(
            f"properties are {len(data)} bytes encoded; the limit is {MAX_PROPERTIES_BYTES}"
        )
    return data


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
    topic_bytes = _check_topic(topic)
    if queue_id < 0:
        raise MessageInvalid(f"queue id {queue_id} of topic {topic!r} is negative")
    born_addr, born_v6 = encode_host(born_host)
    store_addr, store_v6 = encode_host(store_host)
    sys_flag &= ~(BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG)
    sys_flag |= (BORNHOST_V6_FLAG if born_v6 else 0) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    middle = (
        (_HOST_V6 if born_v6 else _HOST_V4).pack(born_addr, born_host[1])
        + _Q.pack(store_timestamp_ms)
        + (_HOST_V6 if store_v6 else _HOST_V4).pack(store_addr, store_host[1])
        + _AFTER_HOSTS.pack(reconsume_times, prepared_transaction_offset, 0)[:12]
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
    if properties is None:
        # The common case: no properties anywhere, one constant trailer.
        for body in bodies:
            blen = len(body)
            total = fixed + blen
            if total > limit:
                raise MessageInvalid(
                    f"message of {total} bytes (body {blen}) to {topic!r} exceeds "
                    f"max_message_bytes {max_message_bytes}"
                )
            if total + END_FILE_MIN_BLANK_LENGTH > segment_bytes - pos % segment_bytes:
                space = segment_bytes - pos % segment_bytes
                append(_SIZE_MAGIC.pack(space, BLANK_MAGIC_CODE) + bytes(space - 8))
                pos += space
            append(
                pack(
                    total, magic, crc32(body) & 0x7FFFFFFF, queue_id, flag, qo, pos, sys_flag,
                    born_timestamp_ms, middle, blen,
                )
            )  # fmt: skip
            append(body)
            append(plain_trailer)
            phys_list.append(pos)
            sizes.append(total)
            pos += total
            qo += 1
    else:
        if len(properties) != len(bodies):
            raise ValueError(f"{len(properties)} property maps for {len(bodies)} bodies")
        tcodes = []
        tag_codes: dict[str, int] = {}
        for body, props_map in zip(bodies, properties, strict=True):
            if props_map:
                props = _check_properties(props_map)
                trailer = topic_part + _I16.pack(len(props)) + props
                tags = props_map.get(PROPERTY_TAGS)
                tcode = 0
                if tags:
                    cached = tag_codes.get(tags)
                    tcode = tag_codes[tags] = java_string_hash(tags) if cached is None else cached
            else:
                props = b""
                trailer = plain_trailer
                tcode = 0
            blen = len(body)
            total = fixed + blen + len(props)
            if total > limit:
                raise MessageInvalid(
                    f"message of {total} bytes (body {blen}) to {topic!r} exceeds "
                    f"max_message_bytes {max_message_bytes}"
                )
            if total + END_FILE_MIN_BLANK_LENGTH > segment_bytes - pos % segment_bytes:
                space = segment_bytes - pos % segment_bytes
                append(_SIZE_MAGIC.pack(space, BLANK_MAGIC_CODE) + bytes(space - 8))
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
            tcodes.append(tcode)
            pos += total
            qo += 1
    return EncodedRun(b"".join(parts), start_offset, first_queue_offset, phys_list, sizes, tcodes)


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0) -> StoredMessage:
    """Decode the message record at `buf[pos:]` (no CRC check; callers validated or trust it)."""
    (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = _HEAD.unpack_from(
        buf, pos
    )
    if magic != MESSAGE_MAGIC_CODE:
        raise StoreCorruption(phys, f"magic code {magic:#x} is not a message record")
    p = pos + 48
    host = _HOST_V6 if sys_flag & BORNHOST_V6_FLAG else _HOST_V4
    born_addr, born_port = host.unpack_from(buf, p)
    p += host.size
    (store_ts,) = _Q.unpack_from(buf, p)
    p += 8
    host = _HOST_V6 if sys_flag & STOREHOSTADDRESS_V6_FLAG else _HOST_V4
    store_addr, store_port = host.unpack_from(buf, p)
    p += host.size
    reconsume, prepared, body_len = _AFTER_HOSTS.unpack_from(buf, p)
    p += 16
    body = bytes(buf[p : p + body_len])
    p += body_len
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    props = decode_properties(buf[p + 2 : p + 2 + props_len]) if props_len > 0 else {}
    return StoredMessage(
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        physical_offset=phys,
        size=total,
        body=body,
        properties=props,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ts,
        store_timestamp_ms=store_ts,
        born_host=decode_host(born_addr, born_port),
        store_host=decode_host(store_addr, store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        body_crc=crc,
    )


class ScanStop(StrEnum):
    """Why a scan stopped; the first two are clean ends, the rest mean 'cut here'."""

    END = "end of data"
    PARTIAL = "record incomplete (torn write or still arriving)"
    ZEROS = "zero-filled space (preallocated or never written)"
    BAD_MAGIC = "unknown magic code"
    BAD_SIZE = "record size out of range"
    BAD_BLANK = "blank record does not end at the segment end"
    BAD_PHYSICAL_OFFSET = "physicalOffset field differs from the record position"
    BAD_STRUCTURE = "field lengths do not add up to totalSize"
    BAD_CRC = "body CRC mismatch"

    @property
    def is_corrupt(self) -> bool:
        return self not in (ScanStop.END, ScanStop.PARTIAL, ScanStop.ZEROS)


@dataclass(frozen=True)
class ScanResult:
    end: int
    """Commit log offset just past the last complete valid record (or blank)."""
    records: list[RecordIndex]
    stop: ScanStop
    detail: str


def scan_records(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    segment_bytes: int,
    *,
    verify_crc: bool = True,
    max_record_bytes: int | None = None,
) -> ScanResult:
    """Walk records in `buf` (whose first byte is at commit log offset `base_offset`).

    `buf` must start at a record boundary. Blank records are accepted when they
    end exactly at a segment end (`buf` may continue into the next segment).
    Returns the records found and why the walk stopped; never raises on bad input.
    """
    n = len(buf)
    pos = 0
    size_limit = max_record_bytes if max_record_bytes is not None else segment_bytes
    records: list[RecordIndex] = []
    append = records.append
    unpack_head = _SIZE_MAGIC.unpack_from
    # Fast path for the common record (IPv4 hosts, no properties): one unpack of the
    # 88-byte prefix, the CRC over a memoryview slice, topics decoded once per scan.
    # Anything unusual goes through `_check_record`, which gives the verdict and detail.
    unpack_v4 = _SCAN_V4.unpack_from
    view = memoryview(buf)
    raw_buf = buf if isinstance(buf, bytes) else bytes(buf)  # slices of bytes are bytes
    new_index = tuple.__new__  # RecordIndex(...) runs a Python-level __new__
    crc32 = zlib.crc32
    topics: dict[bytes, str] = {}
    v6_bits = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
    while True:
        if n - pos >= 88:
            total, magic, crc, queue_id, queue_offset, phys_field, sys_flag, body_len = unpack_v4(
                buf, pos
            )
            phys = base_offset + pos
            if (
                magic == MESSAGE_MAGIC_CODE
                and not sys_flag & v6_bits
                and phys_field == phys
                and MIN_RECORD_BYTES <= total <= size_limit
                and total + END_FILE_MIN_BLANK_LENGTH <= segment_bytes - phys % segment_bytes
                and total <= n - pos
                and body_len >= 0
            ):
                tl_at = pos + 88 + body_len
                end = pos + total
                if tl_at + 3 <= end:
                    topic_len = buf[tl_at]
                    p_at = tl_at + 1 + topic_len
                    # No properties: the lengths add up exactly (props_len 0 checked).
                    if (
                        0 < topic_len <= MAX_TOPIC_BYTES
                        and p_at + 2 == end
                        and buf[p_at] == 0
                        and buf[p_at + 1] == 0
                        and (not verify_crc or crc32(view[pos + 88 : tl_at]) & 0x7FFFFFFF == crc)
                    ):
                        raw = raw_buf[tl_at:p_at]  # length byte + topic
                        topic = topics.get(raw)
                        if topic is None:
                            try:
                                topic = topics[raw] = raw[1:].decode()
                            except UnicodeDecodeError:
                                topic = None
                        if topic is not None:
                            append(
                                new_index(
                                    RecordIndex, (topic, queue_id, queue_offset, phys, total, 0)
                                )
                            )
                            pos = end
                            continue
        if pos == n:
            return ScanResult(base_offset + pos, records, ScanStop.END, "")
        phys = base_offset + pos
        space = segment_bytes - phys % segment_bytes
        if n - pos < 8:
            stop = ScanStop.ZEROS if not any(buf[pos:n]) else ScanStop.PARTIAL
            return ScanResult(phys, records, stop, f"{n - pos} header bytes at {phys}")
        total, magic = unpack_head(buf, pos)
        if magic == BLANK_MAGIC_CODE:
            if total != space:
                return ScanResult(
                    phys, records, ScanStop.BAD_BLANK,
                    f"blank at {phys} claims {total} bytes, segment has {space} left",
                )  # fmt: skip
            if n - pos < total:
                return ScanResult(phys, records, ScanStop.PARTIAL, f"blank at {phys}")
            pos += total
            continue
        if magic != MESSAGE_MAGIC_CODE:
            if total == 0 and magic == 0:
                return ScanResult(phys, records, ScanStop.ZEROS, f"zeros at {phys}")
            return ScanResult(
                phys, records, ScanStop.BAD_MAGIC, f"magic {magic & 0xFFFFFFFF:#010x} at {phys}"
            )
        if (
            total < MIN_RECORD_BYTES
            or total + END_FILE_MIN_BLANK_LENGTH > space
            or total > size_limit
        ):
            return ScanResult(
                phys, records, ScanStop.BAD_SIZE,
                f"totalSize {total} at {phys} with {space} bytes left in the segment",
            )  # fmt: skip
        if n - pos < total:
            return ScanResult(
                phys, records, ScanStop.PARTIAL, f"{n - pos} of {total} bytes at {phys}"
            )
        record = _check_record(buf, pos, total, phys, verify_crc)
        if not isinstance(record, RecordIndex):  # RecordIndex is a tuple too: test it first
            stop, detail = record
            return ScanResult(phys, records, stop, detail)
        append(record)
        pos += total


def _check_record(
    buf: bytes | bytearray | memoryview, pos: int, total: int, phys: int, verify_crc: bool
) -> RecordIndex | tuple[ScanStop, str]:
    """Structure, position and CRC checks of one complete message record."""
    (_, _, crc, queue_id, _, queue_offset, phys_field, sys_flag, _) = _HEAD.unpack_from(buf, pos)
    if phys_field != phys:
        return ScanStop.BAD_PHYSICAL_OFFSET, f"record at {phys} says physicalOffset {phys_field}"
    p = pos + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
    p += (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8) + 16
    end = pos + total
    (body_len,) = _I32.unpack_from(buf, p - 4)
    if body_len < 0 or p + body_len + 3 > end:
        return ScanStop.BAD_STRUCTURE, f"bodyLength {body_len} at {phys} overruns totalSize {total}"
    body_at = p
    p += body_len
    topic_len = buf[p]
    if topic_len == 0 or topic_len > MAX_TOPIC_BYTES or p + 1 + topic_len + 2 > end:
        return ScanStop.BAD_STRUCTURE, f"topicLength {topic_len} at {phys}"
    topic_at = p + 1
    p = topic_at + topic_len
    (props_len,) = _I16.unpack_from(buf, p)
    if message_length(sys_flag, body_len, topic_len, props_len) != total:
        return ScanStop.BAD_STRUCTURE, (
            f"record at {phys}: body {body_len} + topic {topic_len} + properties {props_len} "
            f"do not add up to totalSize {total}"
        )
    if verify_crc:
        actual = zlib.crc32(memoryview(buf)[body_at : body_at + body_len]) & 0x7FFFFFFF
        if actual != crc:
            return ScanStop.BAD_CRC, f"record at {phys}: bodyCRC {crc}, computed {actual}"
    try:
        topic = bytes(buf[topic_at : topic_at + topic_len]).decode()
    except UnicodeDecodeError:
        return ScanStop.BAD_STRUCTURE, f"record at {phys}: topic is not UTF-8"
    tcode = 0
    if props_len > 0:
        props = bytes(buf[p + 2 : p + 2 + props_len])
        if _TAGS_NEEDLE in props:
            tags = decode_properties(props).get(PROPERTY_TAGS)
            tcode = tags_code(tags)
    return RecordIndex(topic, queue_id, queue_offset, phys, total, tcode)
