"""Walking the v1 layout from a known record start: the chain of totalSize fields.

The audit's side of the one decoder (`record_layout` holds the field positions and
the validity rules, `record_columns` applies them to columns, `message_scan` record
by record for the store; the audit reads slices through `scan_slice`). On a clean log the records chain (start + totalSize == next
start), so their starts are found with one 4-byte read per record instead of a
search of every byte:

- `walk_chain`: the header-valid message records chained from a start: the loop
  follows totalSize, then `record_layout.record_start_ok` (the rule every reader
  applies to a record start) judges the whole chain as columns;
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
import struct
import zlib

import numpy as np

from .message import (
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    I64,
    MESSAGE_MAGIC_CODE,
    SIZE_MAGIC,
)
from .record_columns import (
    ColumnScan,
    Crc32,
    columns_at,
    scan_columns,
    structure_ok,
)
from .record_layout import HEAD_BYTES, PHYSICAL_OFFSET_AT, blank_fits, record_start_ok

Buffer = bytes | bytearray | memoryview | mmap.mmap
#: What `clean_slice` searches with `find` (the audit's mmap or bytes).
Searchable = bytes | bytearray | mmap.mmap
_MESSAGE_MAGIC = (MESSAGE_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big")
_BLANK = BLANK_MAGIC_CODE & 0xFFFFFFFF
_MESSAGE = MESSAGE_MAGIC_CODE & 0xFFFFFFFF
_TOTAL_MAGIC = struct.Struct(">iI")
_PHYSICAL = struct.Struct(">q")


def walk_chain(
    buf: Buffer, p: int, hi: int, base: int, segment_end: int, max_record: int
) -> tuple[list[int], int]:
    """(starts, end): the message records chained from position `p` while they start
    before `hi` and each passes the record-start rule (`record_layout.record_start_ok`,
    whole in the data); `end` is the position after the last (== p if none). What stops
    the walk (a blank, zeros, a torn or damaged record, `hi`) is for the caller to
    classify.

    The loop only follows totalSize (one 4-byte read per record); the rule is then
    applied to the whole chain at once, and the chain ends at its first failure."""
    starts: list[int] = []
    totals: list[int] = []
    add_start, add_total = starts.append, totals.append
    n = len(buf)
    size_magic = SIZE_MAGIC.unpack_from
    q = p
    while q < hi and q + HEAD_BYTES <= n:
        total, magic = size_magic(buf, q)
        if magic != MESSAGE_MAGIC_CODE or total <= 0 or q + total > n:
            break  # not a message record that ends in the data (the rule says no too)
        add_start(q)
        add_total(total)
        q += total
    if not starts:
        return starts, p
    a = np.frombuffer(buf, dtype=np.uint8)
    s = np.asarray(starts, dtype=np.int64)
    phys = a[s[:, None] + np.arange(PHYSICAL_OFFSET_AT, PHYSICAL_OFFSET_AT + 8)]
    phys_field = phys.view(">i8").reshape(len(s)).astype(np.int64)
    ok = record_start_ok(np.asarray(totals, dtype=np.int64), phys_field, s + base,
                         segment_end, max_record)  # fmt: skip
    bad = np.flatnonzero(~ok)
    if len(bad):
        k = int(bad[0])
        return starts[:k], starts[k]
    return starts, q


def message_size_at(buf: Buffer, p: int, base: int, segment_end: int, max_record: int) -> int:
    """totalSize of a record at `p` that passes the record-start rule, else 0."""
    if p < 0 or p + HEAD_BYTES > len(buf):
        return 0
    total, magic = SIZE_MAGIC.unpack_from(buf, p)
    (phys_field,) = I64.unpack_from(buf, p + PHYSICAL_OFFSET_AT)
    if magic != MESSAGE_MAGIC_CODE or p + total > len(buf):
        return 0
    return (
        int(total) if record_start_ok(total, phys_field, base + p, segment_end, max_record) else 0
    )


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
    complete: bool = True,
) -> ColumnScan | None:
    """The slice's records when it is clean (see the module doc), else None.

    `complete`: `buf` runs to the end of the segment's data. A ranged read passes
    False for a window that ends earlier (at least one largest record past the
    slice end): then the walk may not end at the window's edge or in zeros that
    might not last (the data end and a zero-filled tail are only known with the
    whole rest of the segment), only at a whole record or the segment's blank."""
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
    starts = _clean_chain(buf, first, own_hi, base_offset, segment_end, max_record_bytes, complete)
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
    buf: Buffer,
    p: int,
    own_hi: int,
    base: int,
    segment_end: int,
    max_record: int,
    complete: bool = True,
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
    if (p == n and complete) or (
        p >= own_hi and message_size_at(buf, p, base, segment_end, max_record)
    ):
        return starts
    if p + 8 <= n:
        total = int.from_bytes(buf[p : p + 4], "big")
        kind = int.from_bytes(buf[p + 4 : p + 8], "big")
        # A blank starts within the segment's last max_record + 8 bytes (what the
        # general reader searches: it fills what the next message did not fit).
        if (
            kind == _BLANK
            and blank_fits(total, base + p, segment_end)
            and total <= max_record + END_FILE_MIN_BLANK_LENGTH
        ):
            return starts
    if complete and not np.frombuffer(buf, np.uint8)[p:n].any():
        return starts  # zero-filled tail (preallocated): a clean end
    return None
