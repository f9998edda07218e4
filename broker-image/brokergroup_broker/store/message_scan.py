"""The store's record-by-record view of the one v1 decoder (`record_columns`,
`record_walk`): `scan_records` for recovery, the slave's dispatch (HA) and
truncation; `decode_record(s)` for pulls.

`scan_records` walks the totalSize chain (`record_walk.walk_chain`, the record-start
rule every reader applies), checks the chained records' field lengths with
`record_columns.structure_ok` (the audit's rule) and their body CRCs, and stops at
the first position that is not a valid record; `_classify` then says why (or
steps over the segment's blank record and walks on in the next segment). So the
store, the HA path and the audit accept exactly the same records.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from brokergroup_broker.topics import MAX_TOPIC_BYTES

from .errors import StoreCorruption
from .message import (
    _HEAD,
    _HOST_V4,
    _HOST_V6,
    _I16,
    _I32,
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
from .record_columns import (
    BORN_HOST_AT,
    ScanStop,
    _read_be,
    layout,
    structure_ok,
)
from .record_walk import walk_chain

__all__ = ["ScanResult", "ScanStop", "decode_record", "decode_records", "scan_records"]

Buffer = bytes | bytearray | memoryview

_FLAG_AT = 16
_BORN_TIMESTAMP_AT = 40
_QUEUE_ID_AT = 12
_QUEUE_OFFSET_AT = 20
_BODY_CRC_AT = 8
_SYS_FLAG_AT = 36


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
    size_limit = max_record_bytes if max_record_bytes is not None else segment_bytes
    records: list[RecordIndex] = []
    a = np.frombuffer(buf, dtype=np.uint8) if n else np.zeros(0, dtype=np.uint8)
    topics: dict[bytes, str] = {}
    pos = 0
    while True:
        if pos == n:
            return ScanResult(base_offset + pos, records, ScanStop.END, "")
        phys = base_offset + pos
        segment_end = phys - phys % segment_bytes + segment_bytes
        starts, end = walk_chain(buf, pos, n, base_offset, segment_end, size_limit)
        if starts:
            pos = _accept(a, buf, starts, end, base_offset, verify_crc, topics, records)
            if pos == n:
                continue
        verdict = _classify(buf, pos, base_offset + pos, segment_bytes, size_limit, verify_crc)
        if isinstance(verdict, int):  # the segment's blank record: walk on after it
            pos += verdict
            continue
        if isinstance(verdict, RecordIndex):  # RecordIndex is a tuple too: test it first
            # The walk and the per-record check are the same rule; should they ever
            # differ, the record-by-record answer wins (nothing valid is cut).
            records.append(verdict)
            pos += verdict.size
            continue
        stop, detail = verdict
        return ScanResult(base_offset + pos, records, stop, detail)


def _accept(
    a: npt.NDArray[np.uint8],
    buf: Buffer,
    starts: list[int],
    end: int,
    base: int,
    verify_crc: bool,
    topics: dict[bytes, str],
    records: list[RecordIndex],
) -> int:
    """Append the chained records up to the first that fails the structure, CRC or
    topic check; returns where that one starts (or `end` when all pass)."""
    s = np.asarray(starts, dtype=np.int64)
    sizes = np.diff(np.append(s, end))
    f = layout(a, s)
    sound = structure_ok(a, s, sizes, np.zeros(len(s), dtype=bool), f)
    bad = np.flatnonzero(~sound)
    count = int(bad[0]) if len(bad) else len(starts)
    view = memoryview(buf)
    crc32 = zlib.crc32
    new_index = tuple.__new__  # RecordIndex(...) runs a Python-level __new__
    append = records.append
    stored = _read_be(a, s[:count] + _BODY_CRC_AT, 4).tolist()
    queue_ids = _read_be(a, s[:count] + _QUEUE_ID_AT, 4).tolist()
    queue_offsets = _read_be(a, s[:count] + _QUEUE_OFFSET_AT, 8).tolist()
    p: int
    for p, z, crc, qid, qoff, b, m, t, tl, pa, pl in zip(
        starts[:count],
        sizes[:count].tolist(),
        stored,
        queue_ids,
        queue_offsets,
        f["body_at"][:count].tolist(),
        f["body_len"][:count].tolist(),
        f["topic_at"][:count].tolist(),
        f["topic_len"][:count].tolist(),
        f["props_at"][:count].tolist(),
        f["props_len"][:count].tolist(),
        strict=True,
    ):
        if verify_crc and crc32(view[b : b + m]) & 0x7FFFFFFF != crc:
            return p
        raw = bytes(view[t : t + tl])
        topic = topics.get(raw)
        if topic is None:
            try:
                topic = topics[raw] = raw.decode()
            except UnicodeDecodeError:
                return p
        tcode = 0
        if pl > 0:
            props = bytes(view[pa : pa + pl])
            if _TAGS_NEEDLE in props:
                tcode = tags_code(decode_properties(props).get(PROPERTY_TAGS))
        append(new_index(RecordIndex, (topic, qid, qoff, base + p, z, tcode)))
    return starts[count] if count < len(starts) else end


def _classify(
    buf: Buffer, pos: int, phys: int, segment_bytes: int, size_limit: int, verify_crc: bool
) -> int | RecordIndex | tuple[ScanStop, str]:
    """What is at `pos`, where the record walk stopped: the size of the segment's blank
    record (step over it), or why the log ends here."""
    n = len(buf)
    space = segment_bytes - phys % segment_bytes
    if n - pos < 8:
        stop = ScanStop.ZEROS if not any(buf[pos:n]) else ScanStop.PARTIAL
        return stop, f"{n - pos} header bytes at {phys}"
    total, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if total != space:
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
    if total < MIN_RECORD_BYTES or total + END_FILE_MIN_BLANK_LENGTH > space or total > size_limit:
        return (
            ScanStop.BAD_SIZE,
            f"totalSize {total} at {phys} with {space} bytes left in the segment",
        )
    if n - pos < total:
        return ScanStop.PARTIAL, f"{n - pos} of {total} bytes at {phys}"
    return _check_record(buf, pos, total, phys, verify_crc)


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
    if props_len < 0 or message_length(sys_flag, body_len, topic_len, props_len) != total:
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


def decode_records(buf: Buffer, positions: list[int]) -> list[StoredMessage]:
    """Decode the message records at `positions` of `buf` (no CRC check; callers validated
    or trust them): the pull path. Field positions come from `record_columns.layout`."""
    if not positions:
        return []
    a = np.frombuffer(buf, dtype=np.uint8)
    s = np.asarray(positions, dtype=np.int64)
    f = layout(a, s)
    view = memoryview(buf)
    out: list[StoredMessage] = []
    for p, sys_flag, b, m, t, tl, pa, pl, st in zip(
        positions,
        f["sys_flag"].tolist(),
        f["body_at"].tolist(),
        f["body_len"].tolist(),
        f["topic_at"].tolist(),
        f["topic_len"].tolist(),
        f["props_at"].tolist(),
        f["props_len"].tolist(),
        f["store_ts_at"].tolist(),
        strict=True,
    ):
        total, magic = _SIZE_MAGIC.unpack_from(buf, p)
        phys = _be64(view, p + 28)
        if magic != MESSAGE_MAGIC_CODE:
            raise StoreCorruption(phys, f"magic code {magic:#x} is not a message record")
        born_host = _HOST_V6 if sys_flag & BORNHOST_V6_FLAG else _HOST_V4
        store_host = _HOST_V6 if sys_flag & STOREHOSTADDRESS_V6_FLAG else _HOST_V4
        born_addr, born_port = born_host.unpack_from(buf, p + BORN_HOST_AT)
        store_addr, store_port = store_host.unpack_from(buf, st + 8)
        out.append(
            StoredMessage(
                topic=bytes(view[t : t + tl]).decode(),
                queue_id=_I32.unpack_from(buf, p + _QUEUE_ID_AT)[0],
                queue_offset=_be64(view, p + _QUEUE_OFFSET_AT),
                physical_offset=phys,
                size=total,
                body=bytes(view[b : b + m]),
                properties=decode_properties(view[pa : pa + pl]) if pl > 0 else {},
                flag=_I32.unpack_from(buf, p + _FLAG_AT)[0],
                sys_flag=sys_flag,
                born_timestamp_ms=_be64(view, p + _BORN_TIMESTAMP_AT),
                store_timestamp_ms=_be64(view, st),
                born_host=decode_host(born_addr, born_port),
                store_host=decode_host(store_addr, store_port),
                reconsume_times=_I32.unpack_from(buf, b - 16)[0],
                prepared_transaction_offset=_be64(view, b - 12),
                body_crc=_I32.unpack_from(buf, p + _BODY_CRC_AT)[0],
            )
        )
    return out


def decode_record(buf: Buffer, pos: int = 0) -> StoredMessage:
    """Decode the message record at `buf[pos:]` (no CRC check; callers validated or trust it)."""
    return decode_records(buf, [pos])[0]


def _be64(view: memoryview, at: int) -> int:
    return int.from_bytes(view[at : at + 8], "big", signed=True)
