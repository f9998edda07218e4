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

The one encoder is `message_encode.encode_run`; the one decoder is `record_layout`
(field positions and the validity rules, written once) with two executors:
`message_scan` record by record for the store (recovery, the slave's dispatch (HA),
pulls) and `record_columns` / `record_walk` as numpy columns for the audit. So one
definition of "a valid record" exists.
"""

from __future__ import annotations

import functools
import ipaddress
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

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

RECORD_HEAD = struct.Struct(">iiiiiqqiq")  # totalSize .. bornTimestamp (48 bytes)
SIZE_MAGIC = struct.Struct(">ii")
I32 = struct.Struct(">i")
I16 = struct.Struct(">h")
I64 = struct.Struct(">q")
HOST_V4 = struct.Struct(">4si")
HOST_V6 = struct.Struct(">16si")
AFTER_HOSTS = struct.Struct(">iqi")  # reconsumeTimes, preparedTransactionOffset, bodyLength
TAGS_NEEDLE = b"TAGS\x01"
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
