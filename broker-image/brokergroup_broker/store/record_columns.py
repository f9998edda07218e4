"""The audit's executor of the one v1 decoder: `record_layout`'s positions and rules
applied to whole slices as numpy columns.

`layout` (field positions), `structure_ok` (the lengths rule), `_candidates` (the
record-start and blank rules) call `record_layout`'s functions with arrays; CRCs and
columns are computed here. `record_walk` follows the totalSize chain from a known
start; `message_scan` applies the same rules record by record for the store
(recovery, the slave's dispatch), which needs no numpy. The audit must read
terabytes, so a whole slice of a segment is decoded at once. An independent
decoder in the tests (tests/unit/v1_oracle.py) checks every entry point.

Theory of operation
-------------------
A v1 record identifies itself: MESSAGE_MAGIC_CODE at +4 and, at +28, its own
commit log offset (physicalOffset). So record starts can be found without walking
from the segment start: every position where the magic bytes sit and the
physicalOffset field equals the position is a record start (a body would have to
contain a forged record at exactly its own offset to fool this). Blank records are
BLANK_MAGIC_CODE with a size that ends exactly at the segment end. That lets

- a segment be split across tasks at any byte: a slice owns the records that
  START in it and reads on past its end only to finish its last record or to find
  where an unreadable region ends;
- the reader resynchronise after damage: a flipped byte costs one record (reported
  as a `Problem`), not the rest of the segment.

Consecutive starts must chain (start + totalSize == next start). A gap is an
unreadable region (bad magic, zeroed hole); at the end of the data a zero-filled
region is a preallocated tail (clean) and a record cut short is a torn last record
(clean: recovery cuts it). Only the CRCs need one C call per record (zlib.crc32 on a
memoryview slice); everything else is array arithmetic.

Pure: bytes in (a memoryview, e.g. of an mmap), columns out; no I/O of its own.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .message import (
    BLANK_MAGIC_CODE,
    COMPRESSED_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
)
from .record_layout import (
    BODY_CRC_AT,
    HEAD_BYTES,
    MAGIC_AT,
    PHYSICAL_OFFSET_AT,
    QUEUE_ID_AT,
    QUEUE_OFFSET_AT,
    SYS_FLAG_AT,
    TOTAL_SIZE_AT,
    ScanStop,
    blank_fits,
    body_length_at,
    lengths_add_up,
    record_start_ok,
    store_timestamp_at,
)

if TYPE_CHECKING:
    import mmap

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
#: zlib.crc32's signature (data, starting value) -> CRC.
Crc32 = Callable[[Any, int], int]

_MESSAGE_MAGIC = (MESSAGE_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big")
_BLANK_MAGIC = (BLANK_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big")
_HEAD_BYTES = HEAD_BYTES

__all__ = [
    "PHYSICAL_OFFSET_AT",
    "ColumnScan",
    "Crc32",
    "Problem",
    "RecordColumns",
    "ScanStop",
    "columns_at",
    "gather",
    "layout",
    "scan_columns",
    "structure_ok",
]


@dataclass(frozen=True)
class Problem:
    """A region of the log that is not a valid record (offsets are commit log offsets)."""

    offset: int
    length: int
    stop: ScanStop
    detail: str

    @property
    def is_corrupt(self) -> bool:
        return self.stop.is_corrupt


@dataclass
class RecordColumns:
    """Message records (blanks excluded) as parallel arrays; positions are into the buffer."""

    physical_offset: I64
    size: I64
    stored_crc: I64
    queue_id: I64
    queue_offset: I64
    sys_flag: I64
    store_timestamp_ms: I64
    body_at: I64
    body_len: I64
    topic_at: I64
    topic_len: I64
    properties_at: I64
    properties_len: I64
    body_crc: I64
    """zlib CRC32 (unsigned) of the body as sent: decompressed when sysFlag says compressed."""
    record_crc: I64
    """CRC32 of header + topic + properties seeded with the stored body's CRC: covers every
    byte of the record, so two replicas hold the same record iff equal (w.h.p.)."""
    crc_ok: Mask
    """stored bodyCRC == CRC32(stored body) & 0x7FFFFFFF (RocketMQ's UtilAll.crc32)."""

    def __len__(self) -> int:
        return len(self.physical_offset)


@dataclass
class ColumnScan:
    records: RecordColumns
    problems: list[Problem] = field(default_factory=list)


_BE_SIGNED = {2: np.dtype(">i2"), 4: np.dtype(">i4"), 8: np.dtype(">i8")}


def _clamp(pos: I64, high: int) -> I64:
    """`pos` limited to [0, high] (np.clip's Python-level checks cost more than the work
    on the store's small batches)."""
    out: I64 = np.minimum(np.maximum(pos, 0), high)
    return out


def _read_be(a: npt.NDArray[np.uint8], pos: I64, width: int) -> I64:
    """Signed big-endian integers of `width` (2, 4 or 8) bytes at each position."""
    if len(a) < width:
        return np.zeros(len(pos), dtype=np.int64)
    pos = _clamp(pos, len(a) - width)  # damaged lengths may point past the data
    # One gather of width-byte rows, read as big-endian integers.
    rows = a[pos[:, None] + np.arange(width)]
    out: I64 = rows.view(_BE_SIGNED[width]).reshape(len(pos)).astype(np.int64)
    return out


def _find(a: npt.NDArray[np.uint8], lo: int, hi: int, magic: bytes) -> I64:
    """Positions p in [lo, hi) with `magic` at p + MAGIC_AT."""
    n = len(a)
    hi = min(hi, n - MAGIC_AT - 3)
    if hi <= lo:
        return np.zeros(0, dtype=np.int64)
    window = a[lo + MAGIC_AT : hi + MAGIC_AT]
    pos = np.flatnonzero(window == magic[0]).astype(np.int64)
    for i in range(1, 4):
        pos = pos[a[pos + lo + MAGIC_AT + i] == magic[i]]
    return pos + lo


def scan_columns(
    buf: bytes | bytearray | memoryview | mmap.mmap,
    base_offset: int,
    segment_end: int,
    own_from: int,
    own_to: int,
    *,
    first_is_boundary: bool,
    max_record_bytes: int,
    crc32: Crc32 = zlib.crc32,
) -> ColumnScan:
    """Decode the records that start in [own_from, own_to) of one segment's bytes.

    `buf` holds the segment's data from commit log offset `base_offset` (to the end of
    the file, zero-filled tails included); `segment_end` is the offset where the
    segment ends (start + segment size). `first_is_boundary`: own_from is known to be a
    record start (the segment start); else the slice starts at its first record start.
    Never raises on bad data: damage comes back as `Problem`s.
    """
    a = np.frombuffer(buf, dtype=np.uint8)
    n = len(a)
    lo = own_from - base_offset
    own_hi = min(n, own_to - base_offset)
    hi = min(n, own_hi + max_record_bytes + END_FILE_MIN_BLANK_LENGTH)
    while True:
        starts, sizes, is_blank, partial = _candidates(
            a, lo, hi, base_offset, segment_end, max_record_bytes
        )
        # Every region that starts in the slice must end at a later start (or the data end).
        if hi >= n or (len(starts) and starts[-1] >= own_hi):
            break
        hi = n
    problems: list[Problem] = []
    # Overlaps (a start inside the previous record): keep the earlier record when its
    # lengths add up (the later start lies in its body: dropped), else cut the earlier one
    # at the later start: one BAD_SIZE problem, reported below by the slice that owns its
    # start like any damaged record, and its bytes are not a gap as well.
    sound = structure_ok(a, starts, sizes, is_blank)
    cut = np.zeros(len(starts), dtype=bool)
    while len(starts) > 1:
        ends = starts + sizes
        overlap = np.flatnonzero(ends[:-1] > starts[1:])
        if not len(overlap):
            break
        k = int(overlap[0])
        if sound[k]:
            keep = np.ones(len(starts), dtype=bool)
            keep[k + 1] = False
            starts, sizes, is_blank = starts[keep], sizes[keep], is_blank[keep]
            sound, cut = sound[keep], cut[keep]
        else:
            sizes[k] = starts[k + 1] - starts[k]
            cut[k] = True
    ends = starts + sizes
    # Gaps between consecutive starts, and before the first one. A gap belongs to the
    # slice that owns the record before it (that slice reads on to the next start); the
    # gap before a segment's first record to the slice at the segment start.
    gaps: list[tuple[int, int, int]] = []  # (owner start, from, to); to -1 = data end
    if first_is_boundary and (len(starts) == 0 or starts[0] > lo):
        gaps.append((lo, lo, int(starts[0]) if len(starts) else -1))
    for k in np.flatnonzero(ends[:-1] < starts[1:]).tolist():
        gaps.append((int(starts[k]), int(ends[k]), int(starts[k + 1])))
    if len(starts) and ends[-1] < n and ends[-1] + base_offset < segment_end:
        gaps.append((int(starts[-1]), int(ends[-1]), -1))
    for owner, g0, g1 in gaps:
        if lo <= owner < own_hi:
            problems.extend(_classify_gap(a, g0, g1, base_offset, partial))
    owned = (starts >= lo) & (starts < own_hi) & ~is_blank
    for k in np.flatnonzero(owned & cut).tolist():
        problems.append(
            _problem(base_offset, int(starts[k]), int(sizes[k]),
                     ScanStop.BAD_SIZE, "totalSize runs into the next record")
        )  # fmt: skip
    bad_structure = owned & ~sound & ~cut
    for k in np.flatnonzero(bad_structure).tolist():
        at, size = int(starts[k]), int(sizes[k])
        written = _written_of_torn_tail(a, at, size) if k == len(starts) - 1 else None
        if written is not None:
            problems.append(
                _problem(base_offset, at, size, ScanStop.PARTIAL,
                         f"torn last record ({written} of {size} bytes written)")
            )  # fmt: skip
            continue
        problems.append(
            _problem(base_offset, at, size, ScanStop.BAD_STRUCTURE,
                     "field lengths do not add up to totalSize")
        )  # fmt: skip
    records = columns_at(a, buf, starts[owned & sound], sizes[owned & sound], base_offset, crc32)
    problems.sort(key=lambda p: p.offset)
    return ColumnScan(records, problems)


def _written_of_torn_tail(a: npt.NDArray[np.uint8], at: int, size: int) -> int | None:
    """Bytes written of a last record cut mid-way in a preallocated (zero-filled) file, or
    None. Its header names it (magic, its own offset, a totalSize that fits), but from some
    point inside it to the end of the data every byte is zero: the write stopped there
    (a crash before the pages reached the disk), so its lengths cannot add up. That is a
    torn tail, like a record cut short at the end of a file, not a damaged structure."""
    end = at + size
    if a[end:].any():
        return None
    nonzero = np.flatnonzero(a[at:end])
    written = int(nonzero[-1]) + 1 if len(nonzero) else 0
    return written if _HEAD_BYTES <= written < size else None


def _problem(base: int, at: int, length: int, stop: ScanStop, detail: str) -> Problem:
    return Problem(base + at, length, stop, f"{detail} at {base + at}")


def _candidates(
    a: npt.NDArray[np.uint8], lo: int, hi: int, base: int, segment_end: int, max_record: int
) -> tuple[I64, I64, Mask, int | None]:
    """Sorted (starts, sizes, is_blank) of record starts in [lo, hi), and the position of
    a message start whose record runs past the data (a torn last record), if any."""
    n = len(a)
    msg = _find(a, lo, hi, _MESSAGE_MAGIC)
    msg = msg[msg + _HEAD_BYTES <= n]
    phys = _read_be(a, msg + PHYSICAL_OFFSET_AT, 8)
    total = _read_be(a, msg + TOTAL_SIZE_AT, 4)
    ok = record_start_ok(total, phys, base + msg, segment_end, max_record)
    msg, total = msg[ok], total[ok]
    whole = msg + total <= n
    partial = int(msg[~whole][0]) if (~whole).any() else None
    msg, total = msg[whole], total[whole]
    # A blank fills what the next message did not fit: it starts within the segment's
    # last max_record + 8 bytes, so only that window is searched.
    blank = _find(
        a, max(lo, segment_end - base - max_record - END_FILE_MIN_BLANK_LENGTH), hi, _BLANK_MAGIC
    )
    blank_size = _read_be(a, blank + TOTAL_SIZE_AT, 4)
    ok = blank_fits(blank_size, base + blank, segment_end)
    blank, blank_size = blank[ok], blank_size[ok]
    starts = np.concatenate([msg, blank])
    sizes = np.concatenate([total, blank_size])
    is_blank = np.concatenate([np.zeros(len(msg), bool), np.ones(len(blank), bool)])
    order = np.argsort(starts, kind="stable")
    return starts[order], sizes[order], is_blank[order], partial


def layout(a: npt.NDArray[np.uint8], starts: I64) -> dict[str, I64]:
    """Positions and lengths of the variable part of each record (`record_layout`'s
    positions; garbage when the record is damaged: `structure_ok` decides). Positions
    stay as computed, reads are clamped into the data."""
    n = len(a)
    sys_flag = _read_be(a, starts + SYS_FLAG_AT, 4)
    body_at = body_length_at(starts, sys_flag) + 4
    body_len = _read_be(a, body_at - 4, 4)
    topic_len_at = body_at + body_len
    topic_len = a[_clamp(topic_len_at, n - 1)].astype(np.int64)
    props_len_at = topic_len_at + 1 + topic_len
    props_len = _read_be(a, props_len_at, 2)
    return {
        "sys_flag": sys_flag,
        "store_ts_at": store_timestamp_at(starts, sys_flag),
        "body_at": body_at,
        "body_len": body_len,
        "topic_at": topic_len_at + 1,
        "topic_len": topic_len,
        "props_len_at": props_len_at,
        "props_at": props_len_at + 2,
        "props_len": props_len,
    }


def structure_ok(
    a: npt.NDArray[np.uint8],
    starts: I64,
    sizes: I64,
    is_blank: Mask,
    fields: dict[str, I64] | None = None,
) -> Mask:
    """`record_layout.lengths_add_up` for each message record (blanks pass).
    `fields`: `layout(a, starts)` when the caller has it (no blanks among the starts)."""
    ok = is_blank.copy()
    msg = np.flatnonzero(~is_blank)
    if not len(msg):
        return ok
    s, z = starts[msg], sizes[msg]
    f = fields if fields is not None else layout(a, s)
    ok[msg] = lengths_add_up(s, z, f["body_len"], f["topic_len"], f["props_len_at"], f["props_len"])
    return ok


def _classify_gap(
    a: npt.NDArray[np.uint8], g0: int, g1: int, base: int, partial: int | None
) -> list[Problem]:
    """A region that is not records; g1 == -1 means 'to the end of the data'."""
    end = len(a) if g1 < 0 else g1
    length = end - g0
    if length <= 0:
        return []
    zeros = not a[g0:end].any()
    magic = bytes(a[g0 + MAGIC_AT : min(end, g0 + 8)])
    if g1 < 0:  # the tail of the data
        if zeros:
            return []  # preallocated or never written: clean
        if partial == g0 or _MESSAGE_MAGIC.startswith(magic):
            return [
                _problem(base, g0, length, ScanStop.PARTIAL, f"torn last record ({length} bytes)")
            ]
    if zeros:
        return [
            _problem(base, g0, length, ScanStop.BAD_MAGIC, f"zero-filled hole of {length} bytes")
        ]
    return [
        _problem(base, g0, length, ScanStop.BAD_MAGIC,
                 f"magic {magic.hex() or '-'}, {length} bytes unreadable")
    ]  # fmt: skip


def columns_at(
    a: npt.NDArray[np.uint8],
    buf: bytes | bytearray | memoryview | mmap.mmap,
    starts: I64,
    sizes: I64,
    base: int,
    crc32: Crc32 = zlib.crc32,
) -> RecordColumns:
    """The columns of whole, sound message records at `starts` (positions in `buf`).

    `crc32`: zlib's or any function with its signature and values (the audit passes
    ISA-L's). Both CRCs come out of one loop of C calls per record.
    """
    f = layout(a, starts)
    view = memoryview(buf)
    body_at, body_len = f["body_at"], f["body_len"]
    body_crcs: list[int] = []
    record_crcs: list[int] = []
    add_body, add_record = body_crcs.append, record_crcs.append
    for s, z, b, m in zip(
        starts.tolist(), sizes.tolist(), body_at.tolist(), body_len.tolist(), strict=True
    ):
        c = crc32(view[b : b + m], 0)
        add_body(c)
        # Over every byte of the record without reading the body twice: the header,
        # then the topic and properties, chained onto the body's CRC.
        add_record(crc32(view[b + m : s + z], crc32(view[s:b], c)))
    body_crc = np.array(body_crcs, dtype=np.int64)
    record_crc = np.array(record_crcs, dtype=np.int64)
    stored_crc = _read_be(a, starts + BODY_CRC_AT, 4)
    crc_ok = (body_crc & 0x7FFFFFFF) == stored_crc
    sys_flag = f["sys_flag"]
    for k in np.flatnonzero(sys_flag & COMPRESSED_FLAG).tolist():
        # The client compressed the body (RocketMQ compressMsgBodyOverHowmuch): the CRC a
        # producer knows is of the body it sent. Rare, so one record at a time.
        try:
            body = zlib.decompress(view[body_at[k] : body_at[k] + body_len[k]])
        except zlib.error:
            continue  # stays the stored body's CRC; the stored CRC check still applies
        body_crc[k] = crc32(body, 0)
    return RecordColumns(
        physical_offset=starts + base,
        size=sizes,
        stored_crc=stored_crc,
        queue_id=_read_be(a, starts + QUEUE_ID_AT, 4),
        queue_offset=_read_be(a, starts + QUEUE_OFFSET_AT, 8),
        sys_flag=sys_flag,
        store_timestamp_ms=_read_be(a, f["store_ts_at"], 8),
        body_at=body_at,
        body_len=body_len,
        topic_at=f["topic_at"],
        topic_len=f["topic_len"],
        properties_at=f["props_at"],
        properties_len=f["props_len"],
        body_crc=body_crc,
        record_crc=record_crc,
        crc_ok=crc_ok,
    )


def gather(a: npt.NDArray[np.uint8], at: I64, length: I64) -> tuple[npt.NDArray[np.uint8], I64]:
    """Concatenate the byte ranges [at, at + length) into (data, offsets) — Arrow's
    variable-length layout (offsets has len(at) + 1 entries, starting at 0)."""
    length = np.maximum(length, 0)
    offsets = np.zeros(len(at) + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, dtype=np.uint8), offsets
    index = np.arange(total, dtype=np.int64) + np.repeat(at - offsets[:-1], length)
    return a[index], offsets
