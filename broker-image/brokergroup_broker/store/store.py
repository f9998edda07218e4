"""`MessageStore`: the broker's store facade (DESIGN.md §3.1; docs/architecture.md).

A facade with no logic of its own: every call goes to the one component that owns
the state it touches, wired once in `opening.open_store`:

    CommitLog      segment files, raw bytes (commitlog.py)
    ConsumeQueueSet  per-queue 20-byte index (consume_queue.py)
    Recovery       scan from the checkpoint, cut a torn tail, re-index (recovery.py)
    EpochFile, IdentityFiles, StoreCheckpoint, ConsumerOffsetStore   metadata files
    Appender       the log's tail: appends, replicated appends, dispatch (appender.py)
    Durability     flushed_offset: fdatasync, group commit, periodic flush (durability.py)
    Reader         ranges for sendfile, pulls, queue offsets (reader.py)
    Arrivals       held pulls, woken when their queue's records become readable (arrivals.py)
    Truncation     cut to a point, cut a partial tail, reset (truncation.py)
    StoreHealth    closed, fatal and space errors, disk usage (health.py)
    StoreRetention delete the oldest segment, trim queues and epochs, retention.log,
                   the served floor (retention.py; decisions: retention_policy.py)

Directory layout under `root` (RocketMQ's names where RocketMQ has the file):

    commitlog/<20-digit start offset>          commit log segments (commitlog.py)
    consumequeue/<topic>/<queueId>/<20 digits> consume queues (consume_queue.py)
    storeCheckpoint                            recoverOffset, confirmOffset (checkpoint.py)
    retention.log, retention.log.1             one JSON line per deleted segment (retention.py)
    minOffsetFloor                             the served floor (retention.py)
    epochFileCheckpoint, epochFileCheckpoint.bak   epoch entries (epoch_file.py)
    .broker.meta.temp, .broker.meta            identity (identity.py)
    config/consumerOffset.json                 consumer offsets (consumer_offsets.py)
    lock                                       flock: one process per store

Offsets: `min_offset <= last_record_end <= max_offset`, `flushed_offset <= max_offset`.
`max_offset` is the end of the bytes written; on a slave the log may end inside
a record (`last_record_end < max_offset`) until the rest arrives. Every record
before `last_record_end` is in its consume queue.

Durability ("never serve a byte that is not durable per the flush policy"):
- SYNC_FLUSH: put_messages / append_replicated return after an fdatasync
  covering their bytes (concurrent callers share one fdatasync: group commit).
  Consumers are served only records ending at or before `flushed_offset`.
- ASYNC_FLUSH: bytes become durable at the owner's `flush()` (every
  flush_interval_ms); consumers are served written records, bounded as always
  by the caller's `max_physical_offset` (confirmOffset).
- In both modes the owner calls `flush()` every flush_interval_ms: it also
  fsyncs consume queues and writes the checkpoint, which bounds recovery.
- `read_range` / `read_bytes` (HA replication) may return bytes the master has
  written but not yet fsynced, as RocketMQ does; the commit rule (§3.3) counts
  the master's own `flushed_offset`, not its `max_offset`.

Threads: every method may be called from any thread (locks.py: the write lock
and the flush lock, in that order never reversed). Errors: health.py.
"""

from __future__ import annotations

from pathlib import Path

from .arrivals import Arrivals
from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueueSet
from .consumer_offsets import ConsumerOffsetStore
from .durability import FlushTicket
from .epoch_file import EpochFile
from .identity import IdentityFiles
from .opening import StoreParts, close_store, open_store
from .recovery import RecoveryReport
from .retention import StoreRetention


class MessageStore:
    """Open with `MessageStore.open(root, config)`; see the module docstring."""

    def __init__(self, parts: StoreParts) -> None:
        self._parts = parts
        self.root: Path = parts.root
        self.config: StoreConfig = parts.config
        self.commitlog: CommitLog = parts.commitlog
        self.queues: ConsumeQueueSet = parts.queues
        self.arrivals: Arrivals = parts.queues.arrivals
        self.checkpoint: StoreCheckpoint = parts.checkpoint
        self.epoch_file: EpochFile = parts.epoch_file
        self.consumer_offsets: ConsumerOffsetStore = parts.consumer_offsets
        self.identity: IdentityFiles = parts.identity
        self.recovery: RecoveryReport = parts.recovery
        self.retention: StoreRetention = parts.retention
        self._appender = parts.appender
        self._durability = parts.durability
        self._reader = parts.reader
        self._truncation = parts.truncation
        self._health = parts.health
        # The public surface, bound once: each name is one component's method.
        self.put_messages = self._appender.put_messages
        self.put_run = self._appender.put_run
        self.append_replicated = self._appender.append_replicated
        self.sync_log = self._durability.sync_log
        self.needs_sync = self._durability.needs_sync
        self.read_range = self._reader.read_range
        self.hold_range = self._reader.hold_range
        self.read_bytes = self._reader.read_bytes
        self.get_messages = self._reader.get_messages
        self.get_records = self._reader.get_records
        self.scan_records = self._reader.scan_records
        self.queue_offset_range = self._reader.queue_offset_range
        self.queue_count = self._reader.queue_count
        self.truncate = self._truncation.truncate
        self.truncate_partial_tail = self._truncation.truncate_partial_tail
        self.reset = self._truncation.reset
        self.writable = self._health.writable
        self.disk_usage_ratio = self._health.disk_usage_ratio
        self.disk_space = self._health.disk_space

    @classmethod
    def open(cls, root: Path, config: StoreConfig | None = None) -> MessageStore:
        """Open (creating if needed) and recover the store at `root`."""
        return cls(open_store(Path(root), config or StoreConfig()))

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless flush=False, which tests use to simulate a crash) and release files."""
        close_store(self._parts, flush=flush)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def flush(self) -> int:
        """fdatasync the log, then consume queues, then write the checkpoint; returns
        flushed_offset. Call every flush_interval_ms in both flush modes."""
        return self._durability.flush(self._appender.record_end_checked())

    def begin_flush(self) -> FlushTicket:
        """`flush` in two halves: this one on the event loop (no fdatasync), then
        `finish_flush(ticket)` in a worker thread, then `flush_consumer_offsets()` on the
        loop (durability.py)."""
        return self._durability.begin_flush(self._appender.record_end_checked())

    def finish_flush(self, ticket: FlushTicket) -> int:
        """The fdatasyncs and the checkpoint of `begin_flush`'s ticket; any thread."""
        return self._durability.finish_flush(ticket)

    def flush_consumer_offsets(self) -> None:
        """Persist the consumer offsets if they changed (the last part of `flush`)."""
        if self.consumer_offsets.dirty:
            self.consumer_offsets.persist()

    # -- offsets --------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def served_min_offset(self) -> int:
        """The lowest commit log offset consumers are served (retention's floor included)."""
        return self.retention.served_min_offset

    @property
    def max_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def flushed_offset(self) -> int:
        return self._durability.flushed_offset

    @property
    def last_record_end(self) -> int:
        """End of the last whole record (== max_offset except on a slave mid-record)."""
        return self._appender.last_record_end

    @property
    def records_unindexed(self) -> int:
        """Records kept in the log but indexed by no queue (recovery's plus replication's)."""
        return self._appender.records_unindexed

    @property
    def confirm_offset(self) -> int:
        return self.checkpoint.confirm_offset

    def set_confirm_offset(self, offset: int) -> None:
        """Remember confirmOffset (persisted at the next flush()); wake the pulls held on
        queues whose records it made readable (arrivals.py)."""
        self.checkpoint.confirm_offset = offset
        self.arrivals.advance(min(offset, self._reader.serve_end()))

    def flushed_moved(self) -> None:
        """The durable end moved (a group commit finished): on SYNC_FLUSH that is what
        makes records below confirmOffset readable, so wake the pulls held on them. Runs
        on the event loop (the pulls' wake-ups are loop callbacks)."""
        self.arrivals.advance(min(self.checkpoint.confirm_offset, self._reader.serve_end()))
