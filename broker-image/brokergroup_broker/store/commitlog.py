"""Commit log segment files (DESIGN.md §3.1): raw bytes, no record knowledge.

Files live in `<root>/commitlog/`, each named by its start offset as 20
zero-padded digits (RocketMQ's UtilAll.offset2FileName), each at most
`segment_bytes` long; start offsets are multiples of `segment_bytes` and
consecutive. Files are not preallocated: a file's length is the bytes written,
so `max_offset = last.start + last.size`. A finished segment is exactly
`segment_bytes` long because the writer fills its tail with a blank record.

Invariants: the log is contiguous from `min_offset` to `max_offset`; only the
last segment is partially filled; a failed write is rolled back (files cut to
their previous length, new files removed), so in-memory sizes always match the
files. Writes use os.pwrite on fds that stay open, so one batch costs one
syscall per segment touched; `sync` is fdatasync of the segments written since
the last sync. New files are made durable with an fsync of the directory.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ._fileio import fsync_dir, write_all
from .errors import OffsetOutOfRange, StoreConfigMismatch, StoreOffsetMismatch
from .message import FileRange

log = logging.getLogger(__name__)

_SEGMENT_NAME = re.compile(r"^\d{20}$")
_PAGE_BYTES = 4096
#: drop_cache_below works in steps of at least this many bytes (one fadvise per step).
_DROP_CHUNK_BYTES = 4 << 20


def segment_file_name(start_offset: int) -> str:
    return f"{start_offset:020d}"


@dataclass
class Segment:
    start: int
    path: Path
    fd: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []
        self._starts: list[int] = []
        # segment start -> (fd, write sequence number) of segments written since their last sync
        self._unsynced: dict[int, tuple[int, int]] = {}
        self._write_seq = 0
        self._cache_dropped = 0  # page cache below this offset was already let go
        directory.mkdir(parents=True, exist_ok=True)
        self._load()

    def _load(self) -> None:
        names = sorted(p.name for p in self.directory.iterdir() if _SEGMENT_NAME.match(p.name))
        prev: int | None = None
        for name in names:
            start = int(name)
            path = self.directory / name
            size = path.stat().st_size
            if start % self.segment_bytes:
                raise StoreConfigMismatch(
                    f"segment {path} starts at {start}, not a multiple of the configured "
                    f"segment size {self.segment_bytes}"
                )
            if size > self.segment_bytes:
                raise StoreConfigMismatch(
                    f"segment {path} is {size} bytes, larger than the configured segment size "
                    f"{self.segment_bytes}"
                )
            if prev is not None and start != prev + self.segment_bytes:
                raise StoreConfigMismatch(
                    f"segment {path} starts at {start} but the previous one starts at {prev}: "
                    f"gap in the log or another segment size than {self.segment_bytes}"
                )
            prev = start
            fd = os.open(path, os.O_RDWR)
            self.segments.append(Segment(start, path, fd, size))
            self._starts.append(start)

    # -- geometry ------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def max_offset(self) -> int:
        return self.segments[-1].end if self.segments else 0

    def segment_for(self, offset: int) -> Segment | None:
        """The segment holding `offset` (a segment also 'holds' its own end if it is last)."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        if offset - seg.start >= self.segment_bytes:
            return None
        return seg

    # -- writing -------------------------------------------------------------------------
    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Append `data` at `offset` == max_offset, rolling to new segments at boundaries.

        On OSError every touched file is cut back and new files removed before re-raising.
        """
        if offset != self.max_offset:
            raise StoreOffsetMismatch(offset, self.max_offset)
        view = memoryview(data)
        pos = offset
        touched: list[tuple[Segment, int]] = []
        created: list[Segment] = []
        try:
            while view:
                seg = self.segments[-1] if self.segments else None
                if seg is None or pos - seg.start >= self.segment_bytes:
                    seg = self._create_segment(pos)
                    created.append(seg)
                else:
                    touched.append((seg, seg.size))
                within = pos - seg.start
                n = min(len(view), self.segment_bytes - within)
                write_all(seg.fd, view[:n], within)
                seg.size = within + n
                self._write_seq += 1
                self._unsynced[seg.start] = (seg.fd, self._write_seq)
                pos += n
                view = view[n:]
        except OSError:
            self._rollback(touched, created)
            raise

    def _create_segment(self, start: int) -> Segment:
        if start % self.segment_bytes:
            raise StoreConfigMismatch(
                f"cannot start a segment at {start}: not a multiple of {self.segment_bytes}"
            )
        path = self.directory / segment_file_name(start)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg = Segment(start, path, fd, 0)
        self.segments.append(seg)
        self._starts.append(start)
        try:
            fsync_dir(self.directory)
        except OSError:
            self._drop_last_segment()
            raise
        return seg

    def _drop_last_segment(self) -> None:
        seg = self.segments.pop()
        self._starts.pop()
        self._unsynced.pop(seg.start, None)
        os.close(seg.fd)
        seg.path.unlink(missing_ok=True)

    def _rollback(self, touched: list[tuple[Segment, int]], created: list[Segment]) -> None:
        for _ in created:
            try:
                self._drop_last_segment()
            except OSError:
                log.exception("rollback: could not remove a new segment")
        for seg, old_size in touched:
            try:
                os.ftruncate(seg.fd, old_size)
            except OSError:
                log.exception("rollback: could not cut %s back to %d bytes", seg.path, old_size)
            seg.size = old_size

    def capture_unsynced(self) -> list[tuple[int, int, int]]:
        """(start, fd, seq) of segments written since their last sync; fdatasync the fds
        (without holding the writer's lock) then pass the list to `mark_synced`."""
        return [(start, fd, seq) for start, (fd, seq) in self._unsynced.items()]

    def mark_synced(self, captured: list[tuple[int, int, int]]) -> None:
        for start, _, seq in captured:
            current = self._unsynced.get(start)
            # A write after the capture keeps the segment dirty for the next sync.
            if current is not None and current[1] == seq:
                del self._unsynced[start]

    def sync(self) -> None:
        captured = self.capture_unsynced()
        for _, fd, _ in captured:
            os.fdatasync(fd)
        self.mark_synced(captured)

    def sync_range(self, start: int, end: int) -> None:
        """fdatasync every segment overlapping [start, end) (recovery: make scanned bytes durable)."""
        for seg in self.segments:
            if seg.end > start and seg.start < end:
                os.fdatasync(seg.fd)
        self._unsynced.clear()

    def drop_cache_below(self, offset: int) -> None:
        """Let the kernel drop the page cache of [.., offset) (durable bytes only: the
        caller passes at most the flushed offset). A hint: reads still work, from disk."""
        start = max(self._cache_dropped, self.min_offset)
        if offset - start < _DROP_CHUNK_BYTES:
            return
        for seg in self.segments:
            lo, hi = max(start, seg.start), min(offset, seg.end)
            if hi <= lo:
                continue
            first = (lo - seg.start) & ~(_PAGE_BYTES - 1)
            last = (hi - seg.start) & ~(_PAGE_BYTES - 1)  # keep a partial last page
            if last > first:
                os.posix_fadvise(seg.fd, first, last - first, os.POSIX_FADV_DONTNEED)
        self._cache_dropped = offset

    # -- reading -------------------------------------------------------------------------
    def file_range(self, offset: int, max_bytes: int, end: int) -> FileRange | None:
        """Bytes [offset, min(offset+max_bytes, end, segment end)) as one file slice."""
        if offset < self.min_offset or offset > self.max_offset:
            raise OffsetOutOfRange("commit log", offset, self.min_offset, self.max_offset)
        end = min(end, self.max_offset)
        if offset >= end or max_bytes <= 0:
            return None
        seg = self.segment_for(offset)
        if seg is None:  # offset is exactly the end of a full segment with no successor
            return None
        within = offset - seg.start
        length = min(max_bytes, seg.size - within, end - offset)
        if length <= 0:
            return None
        return FileRange(seg.fd, within, length, offset)

    def read(self, offset: int, max_bytes: int, end: int) -> bytes:
        rng = self.file_range(offset, max_bytes, end)
        if rng is None:
            return b""
        return os.pread(rng.fd, rng.length, rng.file_position)

    def read_exact(self, offset: int, length: int) -> bytes:
        """Bytes of one record (never spans segments); raises if fewer are held."""
        seg = self.segment_for(offset)
        if seg is None or offset + length > seg.end:
            raise OffsetOutOfRange("commit log", offset + length, self.min_offset, self.max_offset)
        data = os.pread(seg.fd, length, offset - seg.start)
        if len(data) != length:
            raise OffsetOutOfRange("commit log", offset + length, self.min_offset, self.max_offset)
        return data

    # -- cutting -------------------------------------------------------------------------
    def truncate(self, offset: int) -> int:
        """Cut the log to end at `offset`; returns the number of bytes removed."""
        if offset >= self.max_offset:
            return 0
        if offset < self.min_offset:
            raise OffsetOutOfRange("truncate", offset, self.min_offset, self.max_offset)
        removed = 0
        dir_changed = False
        self._cache_dropped = min(self._cache_dropped, offset)
        # Later segments go entirely; the first segment is kept (empty) so the log start survives.
        while len(self.segments) > 1 and self.segments[-1].start >= offset:
            removed += self.segments[-1].size
            self._drop_last_segment()
            dir_changed = True
        seg = self.segments[-1]
        keep = offset - seg.start
        if keep < seg.size:
            removed += seg.size - keep
            os.ftruncate(seg.fd, keep)
            os.fsync(seg.fd)
            seg.size = keep
        if dir_changed:
            fsync_dir(self.directory)
        return removed

    def remove_first_segment(self) -> Segment:
        """Delete the oldest segment (retention): close, unlink, fsync the directory, so
        the log starts at the next segment. Never the last one (the one being written).
        Its fd is closed at once: a reader that keeps bytes past the store's locks (the HA
        master's sendfile) holds its own duplicate (`Reader.hold_range`)."""
        if len(self.segments) < 2:
            raise OffsetOutOfRange("retention", self.min_offset, self.min_offset, self.max_offset)
        seg = self.segments.pop(0)
        self._starts.pop(0)
        self._unsynced.pop(seg.start, None)
        os.close(seg.fd)
        seg.path.unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._cache_dropped = max(self._cache_dropped, self.min_offset)
        return seg

    def reset(self, offset: int) -> None:
        """Drop every segment and start an empty log at `offset` (a segment boundary)."""
        if offset % self.segment_bytes:
            raise StoreConfigMismatch(
                f"reset offset {offset} is not a multiple of the segment size {self.segment_bytes}"
            )
        while self.segments:
            self._drop_last_segment()
        self._cache_dropped = offset
        self._create_segment(offset)

    def close(self) -> None:
        for seg in self.segments:
            try:
                os.close(seg.fd)
            except OSError:
                log.exception("closing %s", seg.path)
        self.segments.clear()
        self._starts.clear()
        self._unsynced.clear()
