"""The keys a stored record can be found by (QUERY_MESSAGE), read from its v1 bytes (pure).

RocketMQ's IndexService indexes a record under `topic#key` for each key of its KEYS
property (MessageConst.KEY_SEPARATOR, one space, between keys) and under `topic#UNIQ_KEY`
(the message id the client gave it); a query by key or by unique key looks in that one key
space, and the client then keeps the records whose keys (or msgId) equal what it asked.
`record_keys` gives the same set from the record itself, so a scan matches what RocketMQ's
index would have found (without its hash collisions).

Only the fields a query needs are read (topic, storeTimestamp, properties), with
`record_layout`'s positions; the body is not copied. No I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .message import (
    MESSAGE_MAGIC_CODE,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    decode_properties,
)
from .record_layout import (
    MAGIC_AT,
    PHYSICAL_OFFSET_AT,
    SYS_FLAG_AT,
    TOTAL_SIZE_AT,
    body_length_at,
    store_timestamp_at,
)

#: MessageConst.KEY_SEPARATOR.
KEY_SEPARATOR = " "

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class NotARecord(ValueError):
    """The bytes are not one whole v1 message record."""


@dataclass(frozen=True)
class RecordKeys:
    """What a key query asks of one record."""

    topic: str
    store_timestamp_ms: int
    physical_offset: int
    keys: frozenset[str]
    """The KEYS property's keys and the UNIQ_KEY, as RocketMQ's index holds them."""


def keys_of(properties: dict[str, str]) -> frozenset[str]:
    """IndexService.buildIndex's keys: UNIQ_KEY, then each non-empty key of KEYS."""
    found = {k for k in properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k}
    uniq = properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    if uniq:
        found.add(uniq)
    return frozenset(found)


def record_keys(raw: bytes | bytearray | memoryview) -> RecordKeys:
    """The topic, storeTimestamp, physicalOffset and keys of the one record `raw` holds
    (the bytes a pull or the commit log gives, starting at the record's totalSize)."""
    if len(raw) < SYS_FLAG_AT + 4:
        raise NotARecord(f"{len(raw)} bytes are shorter than a record's head")
    (total,) = _I32.unpack_from(raw, TOTAL_SIZE_AT)
    (magic,) = _I32.unpack_from(raw, MAGIC_AT)
    if magic != MESSAGE_MAGIC_CODE or total != len(raw):
        raise NotARecord(
            f"magic {magic:#x} / totalSize {total} do not make a {len(raw)}-byte record"
        )
    (physical_offset,) = _I64.unpack_from(raw, PHYSICAL_OFFSET_AT)
    (sys_flag,) = _I32.unpack_from(raw, SYS_FLAG_AT)
    try:
        (store_ts,) = _I64.unpack_from(raw, store_timestamp_at(0, sys_flag))
        at = body_length_at(0, sys_flag)
        (body_len,) = _I32.unpack_from(raw, at)
        at += 4 + body_len
        topic_len = raw[at]
        topic = bytes(raw[at + 1 : at + 1 + topic_len]).decode("utf-8")
        at += 1 + topic_len
        (props_len,) = _I16.unpack_from(raw, at)
    except (struct.error, IndexError, UnicodeDecodeError) as exc:
        raise NotARecord(f"record at {physical_offset}: fields do not fit: {exc}") from None
    if body_len < 0 or props_len < 0 or at + 2 + props_len != total:
        raise NotARecord(f"record at {physical_offset}: lengths do not add up to {total}")
    props = decode_properties(raw[at + 2 : at + 2 + props_len]) if props_len else {}
    return RecordKeys(topic, store_ts, physical_offset, keys_of(props))
