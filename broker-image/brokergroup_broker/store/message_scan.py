"""The pure record scanner and decoder of the v1 layout (`message.py`).

`scan_records` is a pure function over bytes: recovery, the slave's dispatch
and the audit all use it, so one definition of "a valid record" exists.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from enum import StrEnum

from brokergroup_broker.topics import MAX_TOPIC_BYTES

from .errors import StoreCorruption
from .message import (
    _AFTER_HOSTS,
    _HEAD,
    _HOST_V4,
    _HOST_V6,
    _I16,
    _I32,
    _Q,
    _SCAN_V4,
    _SIZE_MAGIC,
    _TAGS_NEEDLE,
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_BYTES,
    PROPERTY_TAGS,
    STOREHOSTADDRESS_V6_FLAG,
    RecordIndex,
    StoredMessage,
    decode_host,
    decode_properties,
    message_length,
    tags_code,
)


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
