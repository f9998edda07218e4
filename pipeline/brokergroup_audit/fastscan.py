"""The audit's reader of a slice of a commit log segment: the broker store's one v1
decoder (`brokergroup_broker.store.record_walk.scan_slice`: the totalSize chain walk
on a clean slice, else `record_columns.scan_columns`, which finds and reports
damage) with ISA-L's crc32 (same polynomial and values as zlib's; ~3x faster on
1 KiB bodies) for both CRCs. The audit keeps no decoder of its own."""

from __future__ import annotations

import mmap
import zlib
from typing import cast

from brokergroup_broker.store.record_columns import ColumnScan, Crc32
from brokergroup_broker.store.record_walk import clean_slice as _clean_slice
from brokergroup_broker.store.record_walk import scan_slice as _scan_slice

try:  # ISA-L's CRC32 (PCLMUL): ~3x zlib's on 1 KiB bodies; the same function.
    from isal.isal_zlib import crc32 as _isal_crc32

    crc32: Crc32 = cast(Crc32, _isal_crc32)
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    crc32 = zlib.crc32

Buffer = bytes | bytearray | mmap.mmap


def scan_slice(
    buf: Buffer,
    base_offset: int,
    segment_end: int,
    own_from: int,
    own_to: int,
    *,
    first_is_boundary: bool,
    max_record_bytes: int,
) -> ColumnScan:
    """`scan_columns`' result for the slice (same arguments), with ISA-L's crc32."""
    return _scan_slice(
        buf, base_offset, segment_end, own_from, own_to,
        first_is_boundary=first_is_boundary, max_record_bytes=max_record_bytes, crc32=crc32,
    )  # fmt: skip


def clean_slice(
    buf: Buffer,
    base_offset: int,
    segment_end: int,
    own_from: int,
    own_to: int,
    *,
    first_is_boundary: bool,
    max_record_bytes: int,
    complete: bool = True,
) -> ColumnScan | None:
    """The slice's records when it is clean, else None (`record_walk.clean_slice`;
    `complete`=False for a ranged read's window that ends before the segment's data)."""
    return _clean_slice(
        buf, base_offset, segment_end, own_from, own_to,
        first_is_boundary=first_is_boundary, max_record_bytes=max_record_bytes, crc32=crc32,
        complete=complete,
    )  # fmt: skip
