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

import collections
import errno
import itertools
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
from .arrivals import Arrivals
from .errors import StoreConfigMismatch, StoreCorruption, TopicLimitReached
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


class FdPool:
    """The consume-queue files a store keeps open, at most `max_open` at once.

    Thousands of topics mean thousands of queue files; keeping each open
    exhausts the process's descriptors (EMFILE) long before the disk is in
    trouble. Files are opened on demand and the least recently used is closed
    past the bound (closing loses nothing: fdatasync through a later
    descriptor flushes the file's dirty pages). An EMFILE on open closes half
    the pool and retries once.
    """

    def __init__(self, max_open: int) -> None:
        if max_open < 1:
            raise ValueError("max_open must be >= 1")
        self.max_open = max_open
        self._open: collections.OrderedDict[tuple[int, int], int] = collections.OrderedDict()
        self._owners = itertools.count()

    def new_owner(self) -> int:
        """A key prefix no other queue of this pool ever had (unlike id(), never reused)."""
        return next(self._owners)

    def __len__(self) -> int:
        return len(self._open)

    def cached(self, key: tuple[int, int]) -> int | None:
        """The open descriptor of `key` (marked recently used), or None: the hot path
        of every append, which must not build a path it will not open."""
        fd = self._open.get(key)
        if fd is not None:
            self._open.move_to_end(key)
        return fd

    def get(self, key: tuple[int, int], path: Path, flags: int) -> int:
        fd = self.cached(key)
        if fd is not None:
            return fd
        while len(self._open) >= self.max_open:
            self._close_oldest()
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE) or not self._open:
                raise
            for _ in range(max(1, len(self._open) // 2)):
                self._close_oldest()
            fd = os.open(path, flags, 0o644)
        self._open[key] = fd
        return fd

    def discard(self, key: tuple[int, int]) -> None:
        fd = self._open.pop(key, None)
        if fd is not None:
            os.close(fd)

    def _close_oldest(self) -> None:
        _, fd = self._open.popitem(last=False)
        os.close(fd)


class ConsumeQueue:
    def __init__(
        self,
        directory: Path,
        topic: str,
        queue_id: int,
        entries_per_file: int,
        fds: FdPool | None = None,
    ) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.per_file = entries_per_file
        self.file_bytes = entries_per_file * CQ_ENTRY_BYTES
        self._pool = fds if fds is not None else FdPool(64)
        self._owner = self._pool.new_owner()
        self._files: set[int] = set()  # indexes of the files that exist
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
            self._files.add(start // self.file_bytes)
        if not self._files:
            return
        indexes = sorted(self._files)
        first, last = indexes[0], indexes[-1]
        size = os.stat(self._path(last)).st_size
        whole = min(size // CQ_ENTRY_BYTES, self.per_file)
        if size != whole * CQ_ENTRY_BYTES:
            log.warning(
                "consume queue %s/%d: cutting %d bytes of a partial entry",
                self.topic, self.queue_id, size - whole * CQ_ENTRY_BYTES,
            )  # fmt: skip
            os.truncate(self._path(last), whole * CQ_ENTRY_BYTES)
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

    @staticmethod
    def _first_index_from_end(low: int, high: int, pred: Callable[[int], bool]) -> int:
        """`_first_index`, galloping back from `high` (1, 2, 4, ... entries) before it
        bisects what is left: where the answer lies d entries before the end it calls
        `pred` about 2·log2(d) times, not log2(high - low)."""
        step = 1
        while True:
            probe = high - step
            if probe <= low:
                return ConsumeQueue._first_index(low, high, pred)
            if not pred(probe):
                return ConsumeQueue._first_index(probe + 1, high, pred)
            high = probe
            step *= 2

    # -- access --------------------------------------------------------------------------
    def _path(self, file_index: int) -> Path:
        return self.directory / f"{file_index * self.file_bytes:020d}"

    def _fd(self, file_index: int, create: bool) -> int:
        key = (self._owner, file_index)
        fd = self._pool.cached(key)
        if fd is not None:
            return fd
        if file_index in self._files:
            return self._pool.get(key, self._path(file_index), os.O_RDWR)
        if not create:
            raise StoreCorruption(file_index, f"consume queue {self.topic}/{self.queue_id} "
                                  f"has no file {file_index}")  # fmt: skip
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = self._pool.get(key, self._path(file_index), os.O_RDWR | os.O_CREAT)
        fsync_dir(self.directory)
        self._files.add(file_index)
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
        """Queue offset of the first entry whose record ends after `physical_offset`.

        Searched from the end: every pull asks it of confirmOffset, which trails the queue's
        end by at most a commit round, so the answer is at or near max_offset (a bisection
        over the whole queue read ~20 entries, one pread each, per pull)."""
        return self._first_index_from_end(
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
        for file_index in sorted(i for i in self._files if i > keep_file):
            self._pool.discard((self._owner, file_index))
            self._files.discard(file_index)
            self._unsynced.discard(file_index)
            self._path(file_index).unlink(missing_ok=True)
        if keep_file in self._files:
            # An emptied file is kept: its name still tells where the queue starts.
            os.ftruncate(
                self._fd(keep_file, create=False),
                (index - keep_file * self.per_file) * CQ_ENTRY_BYTES,
            )
            self._unsynced.add(keep_file)
        self.max_offset = index
        return dropped

    def trim_below(self, physical_offset: int) -> int:
        """Retention: move `min_offset` to the first entry whose record starts at or after
        `physical_offset` (the commit log's new minimum) and delete the files wholly before
        it, the last file always kept (its name carries the queue's next offset); returns
        how many entries left the queue. A crash anywhere in here is repaired at open:
        recovery trims again from the commit log's minimum."""
        if self.is_empty or self.entry(self.min_offset)[0] >= physical_offset:
            return 0
        new_min = self._first_index(
            self.min_offset, self.max_offset, lambda i: self.entry(i)[0] >= physical_offset
        )
        dropped = new_min - self.min_offset
        self.min_offset = new_min
        keep_from = min(new_min // self.per_file, max(self._files))
        gone = sorted(i for i in self._files if i < keep_from)
        for file_index in gone:
            self._pool.discard((self._owner, file_index))
            self._files.discard(file_index)
            self._unsynced.discard(file_index)
            self._path(file_index).unlink(missing_ok=True)
        if gone:
            fsync_dir(self.directory)
        return dropped

    def sync(self) -> None:
        for file_index in sorted(self._unsynced):
            if file_index in self._files:
                os.fdatasync(self._fd(file_index, create=False))
            self._unsynced.discard(file_index)

    def capture_unsynced(self) -> list[int]:
        """Duplicated descriptors of the files `sync` would fdatasync, now marked clean:
        the caller fdatasyncs and closes them (off the event loop); a write after this
        marks its file again."""
        fds: list[int] = []
        try:
            for file_index in sorted(self._unsynced):
                if file_index in self._files:
                    fds.append(os.dup(self._fd(file_index, create=False)))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self._unsynced.clear()
        return fds

    def close(self) -> None:
        for file_index in self._files:
            self._pool.discard((self._owner, file_index))


class ConsumeQueueSet:
    """All consume queues of a store, keyed by (topic, queueId)."""

    def __init__(
        self,
        directory: Path,
        entries_per_file: int,
        *,
        max_open_files: int = 1024,
        max_topics: int | None = None,
    ) -> None:
        self.directory = directory
        self.entries_per_file = entries_per_file
        self.fds = FdPool(max_open_files)
        self.max_topics = max_topics
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._queue_counts: dict[str, int] = {}  # topic -> highest queue id + 1
        self.arrivals = Arrivals()  # held pulls, woken as records become readable
        #: Entries of records before this commit log offset are not served (retention:
        #: the log's minimum, or the master's the slave learned; `set_min_physical`).
        self.min_physical_offset = 0
        directory.mkdir(parents=True, exist_ok=True)
        for topic_dir in sorted(directory.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.is_dir() and queue_dir.name.isdigit():
                    self._open(topic_dir.name, int(queue_dir.name))

    def _open(self, topic: str, queue_id: int) -> ConsumeQueue:
        cq = ConsumeQueue(self.directory / topic / str(queue_id), topic, queue_id,
                          self.entries_per_file, self.fds)  # fmt: skip
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

    def check_topic_limit(self, topic: str) -> None:
        """Before a master appends: a new topic past `max_topics` is refused."""
        limit = self.max_topics
        if (
            limit is not None
            and topic not in self._queue_counts
            and len(self._queue_counts) >= limit
        ):
            raise TopicLimitReached(
                f"this store already holds {len(self._queue_counts)} topics (maxTopics {limit}); "
                f"topic {topic!r} is not created. Produce to an existing topic or raise maxTopics"
            )

    def next_queue_offset(self, key: tuple[str, int]) -> int:
        cq = self.queues.get(key)
        return cq.max_offset if cq is not None else 0

    def queue_count(self, topic: str) -> int:
        """Highest queue id seen + 1 (0 for an unknown topic)."""
        return self._queue_counts.get(topic, 0)

    def topics(self) -> dict[str, int]:
        """Every topic with its queue count (highest queue id seen + 1)."""
        return dict(self._queue_counts)

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
        head, tail = records[0], records[-1]
        start, last_end = head.physical_offset, tail.physical_offset + tail.size
        self._trim_dispatched(groups, start)
        self.arrivals.appended(groups, start, start + head.size, last_end)
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
        first, last = physical_offsets[0], physical_offsets[-1]
        self._trim_dispatched(((topic, queue_id),), first)
        self.arrivals.appended(((topic, queue_id),), first, first + sizes[0], last + sizes[-1])

    def set_min_physical(self, physical_offset: int) -> int:
        """Serve no entry of a record before `physical_offset` (retention, docs/retention.md):
        every queue's min moves past them, now and as later dispatches add such records
        (a slave catching up below it). Returns the entries that left their queues."""
        self.min_physical_offset = physical_offset
        return sum(cq.trim_below(physical_offset) for cq in self.queues.values())

    def _trim_dispatched(self, keys: Iterable[tuple[str, int]], first_physical: int) -> None:
        # Records below the served minimum arrived (a catching-up slave): not servable.
        if first_physical < self.min_physical_offset:
            for key in keys:
                cq = self.queues.get(key)
                if cq is not None:
                    cq.trim_below(self.min_physical_offset)

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

    def capture_unsynced(self) -> list[int]:
        """`ConsumeQueue.capture_unsynced` of every queue (see there)."""
        fds: list[int] = []
        try:
            for cq in self.queues.values():
                fds.extend(cq.capture_unsynced())
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        return fds

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
