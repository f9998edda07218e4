"""Consume queues (DESIGN.md §3.1): per topic/queue index of the commit log.

Layout as in RocketMQ: `<root>/consumequeue/<topic>/<queueId>/<20-digit byte
offset>`; each file holds `entries_per_file` fixed 20-byte entries
`long commitLogOffset, int size, long tagsCode` (big-endian). Entry i (the
message with queue offset i) sits in file `i // entries_per_file` at byte
`(i % entries_per_file) * 20`. Files are not preallocated.

Invariants: entries of one queue are contiguous from `min_offset` to
`max_offset` (the next queue offset) and their commit log offsets increase, so
"first entry whose record ends after X" is a binary search. A valid entry has
size > 0: zero entries at the tail (preallocated files, torn writes) are cut at
load, and a partial trailing entry is cut too. Consume queues are written
without fsync on the hot path; `sync` (from the store's flush) makes them
durable and recovery rebuilds whatever came after the last checkpoint.
"""

from __future__ import annotations

import logging
import operator
import os
import re
import shutil
import struct
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from pathlib import Path

from brokergroup_broker.topics import is_valid_topic

from ._fileio import fsync_dir, write_all
from .errors import StoreConfigMismatch, StoreCorruption
from .message import RecordIndex

log = logging.getLogger(__name__)

CQ_ENTRY = struct.Struct(">qiq")
CQ_ENTRY_BYTES = CQ_ENTRY.size  # 20
_FILE_NAME = re.compile(r"^\d{20}$")

Entry = tuple[int, int, int]  # (commit log offset, size, tagsCode)
_QUEUE_KEY = operator.itemgetter(0, 1)  # RecordIndex -> (topic, queue_id)
_PHYS = operator.itemgetter(3)
_SIZE = operator.itemgetter(4)
_TAGS = operator.itemgetter(5)


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, entries_per_file: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.per_file = entries_per_file
        self.file_bytes = entries_per_file * CQ_ENTRY_BYTES
        self._fds: dict[int, int] = {}  # file index -> fd
        self._unsynced: set[int] = set()
        self.min_offset = 0
        self.max_offset = 0
        self._load()

    # -- load ----------------------------------------------------------------------------
    def _load(self) -> None:
        if not self.directory.exists():
            return
        names = sorted(p.name for p in self.directory.iterdir() if _FILE_NAME.match(p.name))
        for name in names:
            start = int(name)
            if start % self.file_bytes:
                raise StoreConfigMismatch(
                    f"consume queue file {self.directory / name} starts at byte {start}, not a "
                    f"multiple of {self.file_bytes} (entries per file changed?)"
                )
            self._fds[start // self.file_bytes] = os.open(self.directory / name, os.O_RDWR)
        if not self._fds:
            return
        indexes = sorted(self._fds)
        first, last = indexes[0], indexes[-1]
        size = os.fstat(self._fds[last]).st_size
        whole = min(size // CQ_ENTRY_BYTES, self.per_file)
        if size != whole * CQ_ENTRY_BYTES:
            log.warning(
                "consume queue %s/%d: cutting %d bytes of a partial entry",
                self.topic, self.queue_id, size - whole * CQ_ENTRY_BYTES,
            )  # fmt: skip
            os.ftruncate(self._fds[last], whole * CQ_ENTRY_BYTES)
        self.min_offset = first * self.per_file
        self.max_offset = last * self.per_file + whole
        # Leading zero entries happen when a queue started mid-file (slave reset to a later offset).
        if self.max_offset > self.min_offset and not self._valid(self.min_offset):
            self.min_offset = self._first_index(self.min_offset, self.max_offset, self._valid)
        # Trailing zero entries: preallocated or torn.
        if self.max_offset > self.min_offset and not self._valid(self.max_offset - 1):
            cut = self._first_index(self.min_offset, self.max_offset, lambda i: not self._valid(i))
            log.warning(
                "consume queue %s/%d: cutting %d zero entries at the tail",
                self.topic, self.queue_id, self.max_offset - cut,
            )  # fmt: skip
            self.truncate(cut)

    def _valid(self, index: int) -> bool:
        return self.entry(index)[1] > 0

    @staticmethod
    def _first_index(low: int, high: int, pred: Callable[[int], bool]) -> int:
        """First i in [low, high) with pred(i), pred monotone False..True; high if none."""
        while low < high:
            mid = (low + high) // 2
            if pred(mid):
                high = mid
            else:
                low = mid + 1
        return low

    # -- access --------------------------------------------------------------------------
    def _fd(self, file_index: int, create: bool) -> int:
        fd = self._fds.get(file_index)
        if fd is None:
            if not create:
                raise StoreCorruption(file_index, f"consume queue {self.topic}/{self.queue_id} "
                                      f"has no file {file_index}")  # fmt: skip
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{file_index * self.file_bytes:020d}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fsync_dir(self.directory)
            self._fds[file_index] = fd
        return fd

    def entry(self, index: int) -> Entry:
        fd = self._fd(index // self.per_file, create=False)
        data = os.pread(fd, CQ_ENTRY_BYTES, (index % self.per_file) * CQ_ENTRY_BYTES)
        if len(data) < CQ_ENTRY_BYTES:
            return (0, 0, 0)
        off, size, tags = CQ_ENTRY.unpack(data)
        return (off, size, tags)

    def read(self, index: int, max_count: int) -> list[Entry]:
        """Up to max_count entries from `index` (fewer at a file end or the queue end)."""
        index = max(index, self.min_offset)
        count = min(max_count, self.max_offset - index)
        if count <= 0:
            return []
        within = index % self.per_file
        count = min(count, self.per_file - within)
        fd = self._fd(index // self.per_file, create=False)
        data = os.pread(fd, count * CQ_ENTRY_BYTES, within * CQ_ENTRY_BYTES)
        return list(CQ_ENTRY.iter_unpack(data[: len(data) - len(data) % CQ_ENTRY_BYTES]))

    def last_entry(self) -> Entry | None:
        return self.entry(self.max_offset - 1) if self.max_offset > self.min_offset else None

    def count_ending_at_or_before(self, physical_offset: int) -> int:
        """Queue offset of the first entry whose record ends after `physical_offset`."""
        return self._first_index(
            self.min_offset,
            self.max_offset,
            lambda i: sum(self.entry(i)[:2]) > physical_offset,
        )

    # -- writes --------------------------------------------------------------------------
    def append(self, first_index: int, data: bytes | bytearray) -> None:
        """Write consecutive entries starting at queue offset `first_index` (== max_offset,
        or anything when the queue is empty)."""
        if self.is_empty:
            self.min_offset = self.max_offset = first_index
        if first_index != self.max_offset:
            raise StoreCorruption(
                first_index,
                f"consume queue {self.topic}/{self.queue_id} expects queue offset "
                f"{self.max_offset}, got {first_index}",
            )
        view = memoryview(data)
        index = first_index
        while view:
            within = index % self.per_file
            n = min(len(view) // CQ_ENTRY_BYTES, self.per_file - within)
            file_index = index // self.per_file
            fd = self._fd(file_index, create=True)
            write_all(fd, view[: n * CQ_ENTRY_BYTES], within * CQ_ENTRY_BYTES)
            self._unsynced.add(file_index)
            index += n
            self.max_offset = index
            view = view[n * CQ_ENTRY_BYTES :]

    @property
    def is_empty(self) -> bool:
        return self.max_offset <= self.min_offset

    def truncate(self, index: int) -> int:
        """Drop entries with queue offset >= index; returns how many were dropped."""
        index = max(index, self.min_offset)
        if index >= self.max_offset:
            return 0
        dropped = self.max_offset - index
        keep_file = index // self.per_file
        for file_index in [i for i in self._fds if i > keep_file]:
            os.close(self._fds.pop(file_index))
            self._unsynced.discard(file_index)
            (self.directory / f"{file_index * self.file_bytes:020d}").unlink(missing_ok=True)
        fd_keep = self._fds.get(keep_file)
        if fd_keep is not None:
            # An emptied file is kept: its name still tells where the queue starts.
            os.ftruncate(fd_keep, (index - keep_file * self.per_file) * CQ_ENTRY_BYTES)
            self._unsynced.add(keep_file)
        self.max_offset = index
        return dropped

    def sync(self) -> None:
        for file_index in list(self._unsynced):
            fd = self._fds.get(file_index)
            if fd is not None:
                os.fdatasync(fd)
        self._unsynced.clear()

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class ConsumeQueueSet:
    """All consume queues of a store, keyed by (topic, queueId)."""

    def __init__(self, directory: Path, entries_per_file: int) -> None:
        self.directory = directory
        self.entries_per_file = entries_per_file
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queue_counts: dict[str, int] = {}  # topic -> highest queue id + 1
        directory.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(directory.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.is_dir() and queue_dir.name.isdigit():
                    self._open(topic_dir.name, int(queue_dir.name))

    def _open(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(self.directory / topic / str(queue_id), topic, queue_id,
                          self.entries_per_file)  # fmt: skip
        self.queues[(topic, queue_id)] = cq
        self._queue_counts[topic] = max(self._queue_counts.get(topic, 0), queue_id + 1)
        return cq

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def get_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = self.queues.get((topic, queue_id))
        if cq is None:
            if not _indexable((topic, queue_id)):
                raise StoreCorruption(-1, f"topic {topic!r} / queue {queue_id} cannot be stored")
            cq = self._open(topic, queue_id)
        return cq

    def next_queue_offset(self, key: tuple[str, int]) -> int:
        cq = self.queues.get(key)
        return cq.max_offset if cq is not None else 0

    def queue_count(self, topic: str) -> int:
        """Highest queue id seen + 1 (0 for an unknown topic)."""
        return self._queue_counts.get(topic, 0)

    def first_mismatch(self, index: Iterable[RecordIndex]) -> RecordIndex | None:
        """The first record whose queue offset does not continue its queue (None if all do)."""
        expected: dict[tuple[str, int], int] = {}
        unindexable: set[tuple[str, int]] = set()
        for rec in index:
            key = (rec.topic, rec.queue_id)
            want = expected.get(key)
            if want is None:
                if key in unindexable:
                    continue
                cq = self.queues.get(key)
                if cq is None and not _indexable(key):  # once per queue and call
                    unindexable.add(key)  # `dispatch` skips and reports it
                    continue
                # An empty queue accepts any start (a slave reset to a later offset).
                want = rec.queue_offset if cq is None or cq.is_empty else cq.max_offset
            if rec.queue_offset != want:
                return rec
            expected[key] = want + 1
        return None

    def dispatch(self, index: Iterable[RecordIndex]) -> list[RecordIndex]:
        """Append the entries of records (in log order): one write per queue per call.

        Returns the records no consume queue can hold (a topic that breaks the
        topic rule, a negative queue id; only a store written before that rule
        was enforced has them). They stay in the commit log, so replicas remain
        byte-identical, but no queue indexes them: callers report them loudly.
        """
        records = index if isinstance(index, list) else list(index)
        if not records:
            return []
        keys = set(map(_QUEUE_KEY, records))
        queues = self.queues
        bad_keys = {k for k in keys if k not in queues and not _indexable(k)}
        skipped: list[RecordIndex] = []
        if bad_keys:
            skipped = [r for r in records if _QUEUE_KEY(r) in bad_keys]
            records = [r for r in records if _QUEUE_KEY(r) not in bad_keys]
            keys -= bad_keys
            if not records:
                return skipped
        if len(keys) == 1:  # the usual replicated batch: one queue, entries packed in C loops
            topic, queue_id = keys.pop()
            self.append_run(
                topic,
                queue_id,
                records[0].queue_offset,
                list(map(_PHYS, records)),
                list(map(_SIZE, records)),
                list(map(_TAGS, records)),
            )
            return skipped
        groups: dict[tuple[str, int], tuple[int, list[bytes]]] = {}
        pack = CQ_ENTRY.pack
        for topic, queue_id, queue_offset, physical_offset, size, tags_code in records:
            key = (topic, queue_id)
            group = groups.get(key)
            if group is None:
                group = groups[key] = (queue_offset, [])
            group[1].append(pack(physical_offset, size, tags_code))
        for (topic, queue_id), (first, entries) in groups.items():
            self.get_or_create(topic, queue_id).append(first, b"".join(entries))
        return skipped

    def append_run(
        self,
        topic: str,
        queue_id: int,
        first_queue_offset: int,
        physical_offsets: Sequence[int],
        sizes: Sequence[int],
        tags_codes: Sequence[int] | None,
    ) -> None:
        """`dispatch` of consecutive records of one queue (entries packed in one C loop)."""
        if not physical_offsets:
            return
        codes = repeat(0) if tags_codes is None else tags_codes
        data = b"".join(map(CQ_ENTRY.pack, physical_offsets, sizes, codes))
        self.get_or_create(topic, queue_id).append(first_queue_offset, data)

    def truncate_physical(self, physical_offset: int) -> int:
        """Drop entries of records that end after `physical_offset`; returns entries dropped."""
        dropped = 0
        for cq in self.queues.values():
            last = cq.last_entry()
            if last is not None and last[0] + last[1] > physical_offset:
                dropped += cq.truncate(cq.count_ending_at_or_before(physical_offset))
        return dropped

    def max_record_end(self) -> int:
        """Largest end offset of any indexed record (0 if none)."""
        best = 0
        for cq in self.queues.values():
            last = cq.last_entry()
            if last is not None:
                best = max(best, last[0] + last[1])
        return best

    def sync(self) -> None:
        for cq in self.queues.values():
            cq.sync()

    def destroy(self) -> None:
        """Remove every consume queue (full rebuild)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, exist_ok=True)
        fsync_dir(self.directory.parent)
        self._queue_counts.clear()

    def close(self) -> None:
        for cq in self.queues.values():
            cq.close()
        self.queues.clear()


def _indexable(key: tuple[str, int]) -> bool:
    """A consume queue can hold this (topic, queue id): the name is a safe directory."""
    return key[1] >= 0 and is_valid_topic(key[0])


def describe_unindexed(records: Sequence[RecordIndex], limit: int = 5) -> str:
    """One log line's worth about records `dispatch` could not index."""
    shown = ", ".join(
        f"{r.topic[:40]!r}/{r.queue_id} at {r.physical_offset}" for r in records[:limit]
    )
    more = f" and {len(records) - limit} more" if len(records) > limit else ""
    return (
        f"{len(records)} record(s) kept in the commit log but not indexed (topic breaks the "
        f"topic rule; consumers cannot read them): {shown}{more}"
    )
