"""Carrying out retention in the store (DESIGN.md §3.1; docs/retention.md): delete the
oldest commit log segment, move the consume queues and the epoch file to the new
minimum, and record each deletion for the audit. What to delete is decided elsewhere
(`retention_policy`, pure); this only does it, one segment a call, under both store
locks (flush, then write: no fd is closed while being synced or read).

Order of one deletion (each step durable before the next):

1. append one JSON line to `<root>/retention.log` and fsync it (the audit's record:
   `atMs, segment, fromOffset, toOffset, reason, newMinOffset`);
2. close and unlink the segment, fsync the commit log directory (the log's minimum
   moved);
3. trim every consume queue to the new minimum (entries before it leave; files wholly
   before it are unlinked, each queue's last file kept);
4. drop the epoch entries that end at or before the new minimum (RocketMQ's
   `truncateEpochFilePrefix`).

A crash after 1 leaves a record of a deletion that did not happen: the next run deletes
the segment again and records it again (readers of the log take the last record of a
segment). A crash after 2 leaves queues and epoch entries below the minimum: `open`
trims both again from the commit log's minimum (`recovery.recover_store`), so the store
opens and serves exactly what it would have.

The served floor (`MinOffsetFloor`, file `<root>/minOffsetFloor`): the lowest commit log
offset consumers may read, at least the log's minimum. A slave raises it to the master's
minimum it learns, so a slave promoted before its own retention ran never serves what
the old master deleted (docs/retention.md "A new master never resurrects").
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ._fileio import atomic_write, format_properties, fsync_dir, read_properties, write_all
from .commitlog import CommitLog, segment_file_name
from .consume_queue import ConsumeQueueSet
from .epoch_file import EpochFile
from .health import StoreHealth
from .locks import StoreLocks
from .retention_policy import DeleteReason, SegmentFacts

log = logging.getLogger(__name__)

RETENTION_LOG_NAME = "retention.log"
#: retention.log is rotated to retention.log.1 past this size (one old file is kept).
RETENTION_LOG_MAX_BYTES = 1 << 20
MIN_OFFSET_FLOOR_NAME = "minOffsetFloor"


class RetentionLog:
    """`<root>/retention.log`: one JSON line per deleted segment, appended and fsynced
    before the segment is unlinked; past `max_bytes` it becomes `retention.log.1` (the
    previous `.1` goes) and a new file starts."""

    def __init__(self, root: Path, max_bytes: int = RETENTION_LOG_MAX_BYTES) -> None:
        self.path = root / RETENTION_LOG_NAME
        self.old_path = root / (RETENTION_LOG_NAME + ".1")
        self.max_bytes = max_bytes

    def append(self, record: dict[str, object]) -> None:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        if size and size + len(line) > self.max_bytes:
            os.replace(self.path, self.old_path)
            fsync_dir(self.path.parent)
            size = 0
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a line torn by a crash stays one bad line
            write_all(fd, line, 0)  # O_APPEND: the position is ignored
            os.fsync(fd)
        finally:
            os.close(fd)
        if not size:
            fsync_dir(self.path.parent)

    def records(self) -> list[dict[str, object]]:
        """Every record still kept, oldest first (tests and tools)."""
        out: list[dict[str, object]] = []
        for path in (self.old_path, self.path):
            if path.exists():
                out.extend(json.loads(line) for line in path.read_text().splitlines() if line)
        return out


class MinOffsetFloor:
    """The served floor, persisted in `<root>/minOffsetFloor` (properties text, written
    atomically); 0 when the file is missing or unreadable (it only ever hides data)."""

    def __init__(self, root: Path) -> None:
        self.path = root / MIN_OFFSET_FLOOR_NAME
        self.value = 0
        if self.path.exists():
            try:
                self.value = int(read_properties(self.path.read_text())["minOffsetFloor"])
            except (OSError, ValueError, KeyError) as exc:
                log.warning("min offset floor %s unreadable (%s); using 0", self.path, exc)

    def save(self, value: int) -> None:
        data = format_properties("brokergroup served min offset", {"minOffsetFloor": str(value)})
        atomic_write(self.path, data)
        self.value = value


@dataclass(frozen=True)
class SegmentRemoved:
    """One deletion as it happened (also the retention.log record)."""

    at_ms: int
    start: int
    end: int
    reason: DeleteReason
    new_min_offset: int

    def to_json(self) -> dict[str, object]:
        return {
            "atMs": self.at_ms,
            "segment": segment_file_name(self.start),
            "fromOffset": self.start,
            "toOffset": self.end,
            "reason": self.reason.value,
            "newMinOffset": self.new_min_offset,
        }


class StoreRetention:
    """Deletes segments as the policy decided; counts what it deleted (the metrics read
    `deleted_segments_total`, `deleted_bytes_total`, `last_run_ms`)."""

    def __init__(
        self,
        root: Path,
        locks: StoreLocks,
        health: StoreHealth,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        epoch_file: EpochFile,
        floor: MinOffsetFloor,
    ) -> None:
        self._root = root
        self._locks = locks
        self._health = health
        self._commitlog = commitlog
        self._queues = queues
        self._epoch_file = epoch_file
        self._floor = floor
        self.log = RetentionLog(root)
        self.deleted_segments_total = 0
        self.deleted_bytes_total = 0
        self.last_run_ms: int | None = None
        """Wall-clock ms of the last policy run (set by the broker's retention service)."""

    @property
    def served_min_offset(self) -> int:
        """The lowest offset consumers are served: the log's minimum or the floor."""
        return max(self._commitlog.min_offset, self._floor.value)

    @property
    def min_offset_floor(self) -> int:
        return self._floor.value

    def segment_facts(self) -> tuple[list[SegmentFacts], int]:
        """The segments with their last write times (mtime), and the active one's start."""
        with self._locks.write:
            self._health.check_open()
            facts = [
                SegmentFacts(seg.start, seg.size, os.fstat(seg.fd).st_mtime_ns // 1_000_000)
                for seg in self._commitlog.segments
            ]
        return facts, (facts[-1].start if facts else 0)

    def delete_oldest(self, start: int, reason: DeleteReason, now_ms: int) -> SegmentRemoved | None:
        """Delete the segment starting at `start` if it is still the oldest and not the
        last (a decision made on older facts is dropped: None). Steps in the module
        docstring. Call off the event loop (fsyncs), then wake held pulls on it."""
        with self._locks.flush, self._locks.write:
            self._health.check_open()
            segments = self._commitlog.segments
            if len(segments) < 2 or segments[0].start != start:
                return None
            seg, new_min = segments[0], segments[1].start
            removed = SegmentRemoved(now_ms, seg.start, seg.end, reason, new_min)
            self.log.append(removed.to_json())
            self._commitlog.remove_first_segment()
            entries = self._queues.set_min_physical(max(new_min, self._floor.value))
            self._epoch_file.truncate_prefix(new_min)
            self.deleted_segments_total += 1
            self.deleted_bytes_total += seg.size
        log.info(
            "store %s: deleted commit log segment %s [%d, %d) (%s); min offset now %d, "
            "%d consume queue entries left their queues",
            self._root, segment_file_name(seg.start), seg.start, seg.end, reason.value,
            new_min, entries,
        )  # fmt: skip
        return removed

    def raise_floor(self, offset: int) -> bool:
        """Serve nothing below `offset` from now on (a slave learned the master's min);
        only raises. True if it moved (then wake held pulls on the event loop)."""
        with self._locks.write:
            self._health.check_open()
            if offset <= self._floor.value:
                return False
            self._floor.save(offset)
            self._queues.set_min_physical(max(self._commitlog.min_offset, offset))
        log.info("store %s: serving nothing below %d (the master's min offset)", self._root, offset)
        return True
