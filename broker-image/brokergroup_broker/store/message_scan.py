"""The store's executor of the one v1 decoder: `scan_records` for recovery, the
slave's dispatch (HA) and truncation; `decode_record(s)` for pulls.

`scan_records` reads one record at a time with `struct` and judges it with
`record_layout`'s rules (field positions, the record-start rule, the lengths rule,
the blank rule), the same functions the audit's columnar executor
(`record_columns`) applies to whole slices: so the store, the HA path and the audit
accept exactly the same records, and the rules exist once. Record by record because
the slave's replicated chains are short (a few records per transfer): numpy's
per-call cost made a 1-record scan ~15x slower and cost 9-11% replicated produce
throughput; the broker needs no numpy.

A record the loop does not accept goes to `_classify`, which asks the same rules
again in order to say why the log stops there (or steps over the segment's blank).

`decode_record(s)` reads the fields of a record the consume queue points at with
message.py's structs (the layout table).
"""

from __future__ import annotations

import functools
import struct
import zlib
from dataclasses import dataclass

from brokergroup_broker import kernels
from brokergroup_broker.topics import MAX_TOPIC_BYTES

from .errors import StoreCorruption
from .message import (
    AFTER_HOSTS,
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    HOST_V4,
    HOST_V6,
    I16,
    I32,
    I64,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_BYTES,
    PROPERTY_TAGS,
    RECORD_HEAD,
    SIZE_MAGIC,
    STOREHOSTADDRESS_V6_FLAG,
    TAGS_NEEDLE,
    RecordIndex,
    StoredMessage,
    decode_host,
    decode_properties,
    tags_code,
)
from .record_layout import (
    THROUGH_SYS_FLAG_BYTES,
    ScanStop,
    blank_fits,
    body_length_at,
    lengths_add_up,
    record_start_ok,
)

__all__ = ["ScanResult", "ScanStop", "decode_record", "decode_records", "scan_records"]

Buffer = bytes | bytearray | memoryview

#: totalSize, magic, bodyCRC, queueId, (flag), queueOffset, physicalOffset, sysFlag:
#: record_layout's positions from TOTAL_SIZE_AT through SYS_FLAG_AT.
_THROUGH_SYS_FLAG = struct.Struct(">iiii4xqqi")
assert _THROUGH_SYS_FLAG.size == THROUGH_SYS_FLAG_BYTES
_HOST_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
#: Where the body starts from the record start, by the sysFlag's two host bits
#: (`record_layout.body_length_at` asked once per combination, not per record).
_BODY_AT = {
    bits: body_length_at(0, bits) + 4
    for bits in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, _HOST_FLAGS)
}
#: The common record's fixed part in one read: `_THROUGH_SYS_FLAG`'s fields, then
#: bodyLength where IPv4 hosts put it (a record with an IPv6 host reads it again).
_COMMON_HEAD = struct.Struct(f">iiii4xqqi{_BODY_AT[0] - 4 - THROUGH_SYS_FLAG_BYTES}xi")
assert _COMMON_HEAD.size == _BODY_AT[0]


#: `record_layout`'s numbers for the compiled walk (kernels.py: `scan_accepted`).
_RULES = {
    "body_at": [_BODY_AT[b] for b in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, _HOST_FLAGS)],
    "born_v6_flag": BORNHOST_V6_FLAG,
    "store_v6_flag": STOREHOSTADDRESS_V6_FLAG,
    "min_record_bytes": MIN_RECORD_BYTES,
    "max_topic_bytes": MAX_TOPIC_BYTES,
}
_NEW_INDEX = functools.partial(tuple.__new__, RecordIndex)


@dataclass(frozen=True)
class ScanResult:
    end: int
    """Commit log offset just past the last complete valid record (or blank)."""
    records: list[RecordIndex]
    stop: ScanStop
    detail: str


def scan_records(
    buf: Buffer,
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
    limit = max_record_bytes if max_record_bytes is not None else segment_bytes
    records: list[RecordIndex] = []
    append = records.append
    head = _COMMON_HEAD.unpack_from
    head_bytes = _COMMON_HEAD.size  # fewer bytes than the smallest record
    i32 = I32.unpack_from
    i16 = I16.unpack_from
    view = memoryview(buf)
    raw_buf = buf if isinstance(buf, bytes) else bytes(buf)  # slices of bytes are bytes
    new_index = tuple.__new__  # RecordIndex(...) runs a Python-level __new__
    crc32 = zlib.crc32
    body_at_of = _BODY_AT
    topics: dict[bytes, str] = {}
    native = kernels.NATIVE
    pos = 0
    while True:
        if native is not None:
            # The compiled walk takes the records it accepts; this one goes on from there.
            pos, accepted = native.scan_accepted(
                raw_buf, pos, base_offset, segment_bytes, limit, verify_crc, _RULES, _NEW_INDEX
            )
            records += accepted
        while n - pos >= head_bytes:
            # One record, judged by record_layout's rules; anything else goes to _classify.
            # The reads are `_lengths`', inline (this loop runs once per record).
            total, magic, crc, queue_id, queue_offset, phys_field, sys_flag, body_len = head(
                buf, pos
            )
            phys = base_offset + pos
            end = pos + total
            if not (
                magic == MESSAGE_MAGIC_CODE
                and end <= n
                and record_start_ok(
                    total, phys_field, phys, phys - phys % segment_bytes + segment_bytes, limit
                )
            ):
                break
            if sys_flag & _HOST_FLAGS:
                body_at = pos + body_at_of[sys_flag & _HOST_FLAGS]
                (body_len,) = i32(buf, body_at - 4)
            else:
                body_at = pos + head_bytes
            tl_at = body_at + body_len
            if not body_at <= tl_at < end:
                break
            pl_at = tl_at + 1 + buf[tl_at]
            if pl_at + 2 > end:
                break
            (props_len,) = i16(buf, pl_at)
            if not lengths_add_up(pos, total, body_len, buf[tl_at], pl_at, props_len):
                break
            if verify_crc and crc32(view[body_at:tl_at]) & 0x7FFFFFFF != crc:
                break
            raw = raw_buf[tl_at:pl_at]  # length byte + topic
            topic = topics.get(raw)
            if topic is None:
                try:
                    topic = topics[raw] = raw[1:].decode()
                except UnicodeDecodeError:
                    break
            tcode = 0
            if props_len:
                props = raw_buf[pl_at + 2 : end]
                if TAGS_NEEDLE in props:
                    tcode = tags_code(decode_properties(props).get(PROPERTY_TAGS))
            append(new_index(RecordIndex, (topic, queue_id, queue_offset, phys, total, tcode)))
            pos = end
        if pos == n:
            return ScanResult(base_offset + pos, records, ScanStop.END, "")
        verdict = _classify(buf, pos, base_offset + pos, segment_bytes, limit, verify_crc)
        if isinstance(verdict, int):  # the segment's blank record: walk on after it
            pos += verdict
            continue
        stop, detail = verdict
        return ScanResult(base_offset + pos, records, stop, detail)


def _lengths(buf: Buffer, pos: int, end: int, body_at: int) -> tuple[int, int, int, int] | None:
    """(body at, topicLength at, propertiesLength at, propertiesLength) of the whole
    message record [pos, end) when its lengths add up (`record_layout.lengths_add_up`),
    else None. A field found outside the record means they cannot add up, so reading
    stops there."""
    (body_len,) = I32.unpack_from(buf, body_at - 4)
    tl_at = body_at + body_len
    if not body_at <= tl_at < end:
        return None
    topic_len = buf[tl_at]
    pl_at = tl_at + 1 + topic_len
    if pl_at + 2 > end:
        return None
    (props_len,) = I16.unpack_from(buf, pl_at)
    if not lengths_add_up(pos, end - pos, body_len, topic_len, pl_at, props_len):
        return None
    return body_at, tl_at, pl_at, props_len


def _classify(
    buf: Buffer, pos: int, phys: int, segment_bytes: int, size_limit: int, verify_crc: bool
) -> int | tuple[ScanStop, str]:
    """What is at `pos`, where the record walk stopped: the size of the segment's blank
    record (step over it), or why the log ends here. The same rules as the walk, asked
    one at a time so the answer names the one that failed."""
    n = len(buf)
    segment_end = phys - phys % segment_bytes + segment_bytes
    space = segment_end - phys
    if n - pos < 8:
        stop = ScanStop.ZEROS if not any(buf[pos:n]) else ScanStop.PARTIAL
        return stop, f"{n - pos} header bytes at {phys}"
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if not blank_fits(total, phys, segment_end):
            return (
                ScanStop.BAD_BLANK,
                f"blank at {phys} claims {total} bytes, segment has {space} left",
            )
        if n - pos < total:
            return ScanStop.PARTIAL, f"blank at {phys}"
        return int(total)
    if magic != MESSAGE_MAGIC_CODE:
        if total == 0 and magic == 0:
            return ScanStop.ZEROS, f"zeros at {phys}"
        return ScanStop.BAD_MAGIC, f"magic {magic & 0xFFFFFFFF:#010x} at {phys}"
    if not record_start_ok(total, phys, phys, segment_end, size_limit):  # the size alone
        return (
            ScanStop.BAD_SIZE,
            f"totalSize {total} at {phys} with {space} bytes left in the segment",
        )
    if n - pos < total:
        return ScanStop.PARTIAL, f"{n - pos} of {total} bytes at {phys}"
    (_, _, crc, _, _, phys_field, sys_flag) = _THROUGH_SYS_FLAG.unpack_from(buf, pos)
    if not record_start_ok(total, phys_field, phys, segment_end, size_limit):
        return ScanStop.BAD_PHYSICAL_OFFSET, f"record at {phys} says physicalOffset {phys_field}"
    fields = _lengths(buf, pos, pos + total, pos + _BODY_AT[sys_flag & _HOST_FLAGS])
    if fields is None:
        return ScanStop.BAD_STRUCTURE, (
            f"record at {phys}: field lengths do not add up to totalSize {total}"
        )
    body_at, tl_at, _, _ = fields
    if verify_crc:
        actual = zlib.crc32(memoryview(buf)[body_at:tl_at]) & 0x7FFFFFFF
        if actual != crc:
            return ScanStop.BAD_CRC, f"record at {phys}: bodyCRC {crc}, computed {actual}"
    # The walk refused the record and only the topic's encoding is left.
    return ScanStop.BAD_STRUCTURE, f"record at {phys}: topic is not UTF-8"


def decode_records(buf: Buffer, positions: list[int]) -> list[StoredMessage]:
    """Decode the message records at `positions` of `buf` (the pull path)."""
    return [decode_record(buf, p) for p in positions]


def decode_record(buf: bytes | bytearray | memoryview, pos: int = 0) -> StoredMessage:
    """Decode the message record at `buf[pos:]` (no CRC check; callers validated or trust it)."""
    (total, magic, crc, queue_id, flag, queue_offset, phys, sys_flag, born_ts) = (
        RECORD_HEAD.unpack_from(buf, pos)
    )
    if magic != MESSAGE_MAGIC_CODE:
        raise StoreCorruption(phys, f"magic code {magic:#x} is not a message record")
    p = pos + 48
    host = HOST_V6 if sys_flag & BORNHOST_V6_FLAG else HOST_V4
    born_addr, born_port = host.unpack_from(buf, p)
    p += host.size
    (store_ts,) = I64.unpack_from(buf, p)
    p += 8
    host = HOST_V6 if sys_flag & STOREHOSTADDRESS_V6_FLAG else HOST_V4
    store_addr, store_port = host.unpack_from(buf, p)
    p += host.size
    reconsume, prepared, body_len = AFTER_HOSTS.unpack_from(buf, p)
    p += 16
    body = bytes(buf[p : p + body_len])
    p += body_len
    topic_len = buf[p]
    topic = bytes(buf[p + 1 : p + 1 + topic_len]).decode()
    p += 1 + topic_len
    (props_len,) = I16.unpack_from(buf, p)
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
