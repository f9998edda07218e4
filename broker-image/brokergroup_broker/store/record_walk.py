"""Walking the v1 layout from a known record start: the chain of totalSize fields.

Part of the one decoder (`record_columns` holds the layout and the validity rules;
`message_scan` gives the store its record-by-record view; the audit reads slices
through `scan_slice`). On a clean log the records chain (start + totalSize == next
start), so their starts are found with one 4-byte read per record instead of a
search of every byte:

- `walk_chain`: the header-valid message records chained from a start, the rule
  every reader applies to a record start (magic, physicalOffset == position,
  MIN_RECORD_BYTES <= totalSize <= the limit, fits the segment with room for the
  end blank, and wholly in the data);
- `clean_slice`: a slice's columns when the chain covers it and ends cleanly: at the
  data end, at a blank record ending at the segment end, in a zero-filled tail, or
  at a valid record start past the slice end (so no gap is owned by this slice);
  anything else returns None;
- `scan_slice`: `clean_slice`, else `scan_columns` (which searches for starts and
  reports the damage). So its result is always `scan_columns`' result; a unit test
  compares both, and an independent oracle in the tests, on random and damaged logs.

Pure: bytes in, starts or columns out.
"""

from __future__ import annotations

import mmap
import zlib

import numpy as np

from .message import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_BYTES,
)
from .record_columns import (
    PHYSICAL_OFFSET_AT,
    ColumnScan,
    Crc32,
    columns_at,
    scan_columns,
    structure_ok,
)

Buffer = bytes | bytearray | memoryview | mmap.mmap
#: What `clean_slice` searches with `find` (the audit's mmap or bytes).
Searchable = bytes | bytearray | mmap.mmap
_MESSAGE_MAGIC = (MESSAGE_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big")
_BLANK = BLANK_MAGIC_CODE & 0xFFFFFFFF


def walk_chain(
    buf: Buffer, p: int, hi: int, base: int, segment_end: int, max_record: int
) -> tuple[list[int], int]:
    """(starts, end): the message records chained from position `p` while they start
    before `hi` and each passes the record-start rule (module doc); `end` is the
    position after the last (== p if none). What stops the walk (a blank, zeros, a
    torn or damaged record, `hi`) is for the caller to classify."""
    starts: list[int] = []
    append = starts.append
    n = len(buf)
    from_bytes = int.from_bytes
    magic = _MESSAGE_MAGIC
    phys_at = PHYSICAL_OFFSET_AT
    space_of = segment_end - base - END_FILE_MIN_BLANK_LENGTH
    while p < hi:
        # The record-start rule, inline (the loop is per record).
        if p + phys_at + 8 > n or buf[p + 4 : p + 8] != magic:
            break
        total = from_bytes(buf[p : p + 4], "big")
        if (
            from_bytes(buf[p + phys_at : p + phys_at + 8], "big") != base + p
            or not MIN_RECORD_BYTES <= total <= max_record
            or total > space_of - p
            or p + total > n
        ):
            break
        append(p)
        p += total
    return starts, p


def message_size_at(buf: Buffer, p: int, base: int, segment_end: int, max_record: int) -> int:
    """totalSize of a record at `p` that passes the record-start rule, else 0."""
    starts, _ = walk_chain(buf, p, p + 1, base, segment_end, max_record)
    return int.from_bytes(buf[p : p + 4], "big") if starts else 0


def scan_slice(
    buf: Searchable,
    base_offset: int,
    segment_end: int,
    own_from: int,
    own_to: int,
    *,
    first_is_boundary: bool,
    max_record_bytes: int,
    crc32: Crc32 = zlib.crc32,
) -> ColumnScan:
    """`scan_columns`' result for the slice (same arguments): the chain walk when the
    slice is clean, else `scan_columns` itself."""
    fast = clean_slice(
        buf, base_offset, segment_end, own_from, own_to,
        first_is_boundary=first_is_boundary, max_record_bytes=max_record_bytes, crc32=crc32,
    )  # fmt: skip
    if fast is not None:
        return fast
    return scan_columns(
        buf, base_offset, segment_end, own_from, own_to,
        first_is_boundary=first_is_boundary, max_record_bytes=max_record_bytes, crc32=crc32,
    )  # fmt: skip


def clean_slice(
    buf: Searchable,
    base_offset: int,
    segment_end: int,
    own_from: int,
    own_to: int,
    *,
    first_is_boundary: bool,
    max_record_bytes: int,
    crc32: Crc32 = zlib.crc32,
) -> ColumnScan | None:
    """The slice's records when it is clean (see the module doc), else None."""
    n = len(buf)
    lo = own_from - base_offset
    own_hi = min(n, own_to - base_offset)
    if lo >= own_hi:
        return None
    first = (
        lo
        if first_is_boundary
        else _first_start(buf, lo, own_hi, base_offset, segment_end, max_record_bytes)
    )
    if first is None:
        return None
    starts = _clean_chain(buf, first, own_hi, base_offset, segment_end, max_record_bytes)
    if starts is None:
        return None
    if len(starts) < 2:
        return None  # nothing owned (or an odd slice): let the general reader decide
    a = np.frombuffer(buf, dtype=np.uint8)
    chain = np.asarray(starts, dtype=np.int64)
    s = chain[:-1]
    sizes = chain[1:] - s
    if not structure_ok(a, s, sizes, np.zeros(len(s), dtype=bool)).all():
        return None
    return ColumnScan(columns_at(a, buf, s, sizes, base_offset, crc32), [])


def _first_start(
    buf: Searchable, lo: int, own_hi: int, base: int, segment_end: int, max_record: int
) -> int | None:
    """The first message record start in [lo, own_hi) (magic + own offset + sane size)."""
    at = lo + 4
    while True:
        q = buf.find(_MESSAGE_MAGIC, at, own_hi + 8)
        if q < 0 or q - 4 >= own_hi:
            return None
        p = q - 4
        if p >= lo and message_size_at(buf, p, base, segment_end, max_record):
            return p
        at = q + 1


def _clean_chain(
    buf: Buffer, p: int, own_hi: int, base: int, segment_end: int, max_record: int
) -> list[int] | None:
    """Record starts from p chained by totalSize, plus the end of the last one; None
    unless the chain ends cleanly (see the module doc)."""
    starts, p = walk_chain(buf, p, own_hi, base, segment_end, max_record)
    n = len(buf)
    if p < own_hi and p + PHYSICAL_OFFSET_AT + 8 <= n and buf[p + 4 : p + 8] == _MESSAGE_MAGIC:
        return None  # a message record that breaks the rule: damage, decided by scan_columns
    starts.append(p)
    # p: the first byte after the slice's last record. Clean iff nothing, a readable
    # record, the segment's blank or zeros follow: then the general reader reports no
    # gap owned by this slice.
    if p == n or (p >= own_hi and message_size_at(buf, p, base, segment_end, max_record)):
        return starts
    if p + 8 <= n:
        total = int.from_bytes(buf[p : p + 4], "big")
        kind = int.from_bytes(buf[p + 4 : p + 8], "big")
        if (
            kind == _BLANK
            and total == segment_end - (base + p)
            and total <= max_record + END_FILE_MIN_BLANK_LENGTH
        ):
            return starts
    if not np.frombuffer(buf, np.uint8)[p:n].any():
        return starts  # zero-filled tail (preallocated): a clean end
    return None
