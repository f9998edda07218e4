"""The read side of the store: byte ranges for the HA master's sendfile, messages of a
queue for pulls (decoded through `message_scan`), queue offsets and counts. Serves
only what is durable per the flush policy (`serve_end`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from .appender import Appender
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueSet
from .durability import Durability
from .errors import StoreCorruption
from .health import StoreHealth
from .locks import StoreLocks
from .message import FileRange, StoredMessage
from .message_scan import decode_records

_MAX_READ_SPAN_BYTES = 1 << 20

log = logging.getLogger(__name__)


class Reader:
    def __init__(
        self,
        config: StoreConfig,
        locks: StoreLocks,
        health: StoreHealth,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        appender: Appender,
        durability: Durability,
    ) -> None:
        self._config = config
        self._locks = locks
        self._health = health
        self._commitlog = commitlog
        self._queues = queues
        self._appender = appender
        self._durability = durability

    def serve_end(self) -> int:
        """End of what consumers may be served: on SYNC_FLUSH only durable whole records."""
        if self._config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            return min(self._durability.flushed_offset, self._appender.last_record_end)
        return self._appender.last_record_end

    # -- reads ----------------------------------------------------------------------------
    def read_range(self, offset: int, max_bytes: int) -> FileRange | None:
        """Bytes from `offset` inside ONE segment, for os.sendfile; None when nothing is there."""
        with self._locks.write:
            self._health.check_open()
            return self._commitlog.file_range(offset, max_bytes, self._commitlog.max_offset)

    def hold_range(self, offset: int, max_bytes: int) -> FileRange | None:
        """`read_range` with a duplicate of the segment's fd that the caller owns and must
        close: it stays valid after retention deletes the segment (the HA master's
        sendfile runs outside the store's locks; the space is freed at its close)."""
        with self._locks.write:
            self._health.check_open()
            rng = self._commitlog.file_range(offset, max_bytes, self._commitlog.max_offset)
            if rng is None:
                return None
            return FileRange(os.dup(rng.fd), rng.file_position, rng.length, rng.offset)

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """The bytes `read_range` describes, copied."""
        with self._locks.write:
            self._health.check_open()
            return self._commitlog.read(offset, max_bytes, self._commitlog.max_offset)

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_physical_offset: int,
    ) -> list[StoredMessage]:
        """Messages from `queue_offset` on, stopping before the first record that ends after
        `max_physical_offset` (confirmOffset) or after what is servable (module docstring)."""
        return [msg for msg, _ in self.get_records(
            topic, queue_id, queue_offset, max_count, max_physical_offset, raw=False
        )]  # fmt: skip

    def get_records(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_physical_offset: int,
        *,
        raw: bool = True,
    ) -> list[tuple[StoredMessage, bytes]]:
        """`get_messages`, each with its record's bytes exactly as stored (a RocketMQ pull
        sends them unchanged); `raw=False` leaves the bytes empty."""
        with self._locks.write:
            self._health.check_open()
            cq = self._queues.get(topic, queue_id)
            if cq is None or max_count <= 0:
                return []
            bound = min(max_physical_offset, self.serve_end())
            entries: list[tuple[int, int, int]] = []
            index = max(queue_offset, cq.min_offset)
            while len(entries) < max_count:
                got = cq.read(index, max_count - len(entries))
                if not got:
                    break
                entries.extend(got)
                index += len(got)
            usable = 0
            for off, size, _ in entries:
                if off + size > bound:
                    break
                usable += 1
            return self._read_records(entries[:usable], raw)

    def scan_records(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        max_physical_offset: int,
        keep_tags_code: Callable[[int], bool],
        max_scan: int,
    ) -> tuple[list[tuple[StoredMessage, bytes]], int, int]:
        """`get_records` of the entries whose consume queue tagsCode `keep_tags_code`
        accepts (a server-side tag filter, RocketMQ's isMatchedByConsumeQueue: the others'
        records are not read), looking at up to `max_scan` entries; with the queue offset
        the scan started at (above `queue_offset` if retention moved the queue's min) and
        the one after the last entry looked at (never past one not readable yet)."""
        with self._locks.write:
            self._health.check_open()
            cq = self._queues.get(topic, queue_id)
            if cq is None or max_count <= 0:
                return [], queue_offset, queue_offset
            bound = min(max_physical_offset, self.serve_end())
            start = index = max(queue_offset, cq.min_offset)
            kept: list[tuple[int, int, int]] = []
            while len(kept) < max_count and index - start < max_scan:
                got = cq.read(index, min(max_scan - (index - start), 1024))
                if not got:
                    break
                for entry in got:
                    if entry[0] + entry[1] > bound or len(kept) >= max_count:
                        return self._read_records(kept, True), start, index
                    index += 1
                    if keep_tags_code(entry[2]):
                        kept.append(entry)
            return self._read_records(kept, True), start, index

    def _read_records(
        self, entries: list[tuple[int, int, int]], raw: bool
    ) -> list[tuple[StoredMessage, bytes]]:
        out: list[tuple[StoredMessage, bytes]] = []
        i = 0
        seg_bytes = self._commitlog.segment_bytes
        while i < len(entries):
            first = entries[i][0]
            seg_end = first - first % seg_bytes + seg_bytes
            j = i
            span_end = first + entries[i][1]
            # One pread for a run of records in the same segment, if the run is compact.
            while j + 1 < len(entries):
                off, size, _ = entries[j + 1]
                if off + size > seg_end or off + size - first > _MAX_READ_SPAN_BYTES:
                    break
                j += 1
                span_end = off + size
            data = self._commitlog.read_exact(first, span_end - first)
            run = entries[i : j + 1]
            # One decoder call per span: its per-call cost is paid once, not per message.
            decoded = decode_records(data, [off - first for off, _, _ in run])
            for (off, size, _), msg in zip(run, decoded, strict=True):
                if msg.physical_offset != off or msg.size != size:
                    raise StoreCorruption(
                        off, f"consume queue entry ({off}, {size}) points at record "
                        f"({msg.physical_offset}, {msg.size})",
                    )  # fmt: skip
                start = off - first
                out.append((msg, bytes(data[start : start + size]) if raw else b""))
            i = j + 1
        return out

    def queue_offset_range(
        self, topic: str, queue_id: int, max_physical_offset: int | None = None
    ) -> tuple[int, int]:
        """(min, max) queue offsets; max is the next offset to be written, or, given
        `max_physical_offset`, the first whose record ends after it."""
        with self._locks.write:
            cq = self._queues.get(topic, queue_id)
            if cq is None:
                return (0, 0)
            if max_physical_offset is None:
                return (cq.min_offset, cq.max_offset)
            return (cq.min_offset, cq.count_ending_at_or_before(max_physical_offset))

    def queue_count(self, topic: str) -> int:
        """Queues of a known topic: at least default_queue_count; 0 for an unknown topic."""
        n = self._queues.queue_count(topic)
        return max(n, self._config.default_queue_count) if n else 0
