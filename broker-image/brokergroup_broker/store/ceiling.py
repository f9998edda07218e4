"""Disk ceiling probe (DESIGN.md §9, §10): what this filesystem does with fdatasync.

Benchmarks report their numbers next to this ceiling measured in the same
run, in a temporary directory on the filesystem under test:

- sequential: `chunk_bytes` writes (os.write), each followed by fdatasync,
  appending to one file -> MB/s (the shape of a group-committed commit log);
- small: 4 KiB pwrite + fdatasync at increasing offsets -> ops/s and µs/op
  (the shape of one tiny synchronous commit).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class DiskCeiling:
    directory: str
    seq_write_fdatasync_mb_s: float
    seq_chunk_bytes: int
    seq_total_bytes: int
    small_write_fdatasync_ops_s: float
    small_write_latency_us: float
    small_write_bytes: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def measure_disk_ceiling(
    directory: Path | str,
    *,
    seq_total_bytes: int = 128 * 1024 * 1024,
    seq_chunk_bytes: int = 1024 * 1024,
    small_ops: int = 1000,
    small_write_bytes: int = 4096,
    max_seconds: float = 10.0,
) -> DiskCeiling:
    """Measure in a fresh temp dir under `directory` (same filesystem); removes its files."""
    with tempfile.TemporaryDirectory(prefix="disk-ceiling-", dir=directory) as tmp:
        seq_path = Path(tmp) / "seq"
        chunk = os.urandom(seq_chunk_bytes)
        fd = os.open(seq_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = 0
        try:
            t0 = time.perf_counter()
            deadline = t0 + max_seconds / 2
            while written < seq_total_bytes and time.perf_counter() < deadline:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
                os.fdatasync(fd)
                written += seq_chunk_bytes
            seq_elapsed = time.perf_counter() - t0
        finally:
            os.close(fd)
            seq_path.unlink()

        small_path = Path(tmp) / "small"
        block = os.urandom(small_write_bytes)
        fd = os.open(small_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        ops = 0
        try:
            t0 = time.perf_counter()
            deadline = t0 + max_seconds / 2
            while ops < small_ops and time.perf_counter() < deadline:
                os.pwrite(fd, block, ops * small_write_bytes)
                os.fdatasync(fd)
                ops += 1
            small_elapsed = time.perf_counter() - t0
        finally:
            os.close(fd)
    return DiskCeiling(
        directory=str(directory),
        seq_write_fdatasync_mb_s=round(written / seq_elapsed / 1e6, 1),
        seq_chunk_bytes=seq_chunk_bytes,
        seq_total_bytes=written,
        small_write_fdatasync_ops_s=round(ops / small_elapsed, 1),
        small_write_latency_us=round(small_elapsed / ops * 1e6, 1),
        small_write_bytes=small_write_bytes,
    )
