"""Durability of the store (DESIGN.md §3.1 "never serve a byte that was not durable"):
the one owner of `flushed_offset`. fdatasync of the commit log (group commit: one
fdatasync serves every writer waiting), the periodic `flush` (log, consume queues,
checkpoint, consumer offsets) and the page-cache hint behind the flushed end.
A failed fdatasync is fatal for the data it covered (`StoreHealth.io_failed`).

The periodic flush in two halves (issue 38 item 2): `flush` does it all in the caller,
which on a broker is the event loop; each of its fdatasyncs (the log, one per dirty
consume-queue file, the checkpoint's temp file and directory) stalls every connection,
HA stream and ack of the broker (measured 8-40 ms per flush on a busy shared disk).
`begin_flush` (the loop's share, no fdatasync: duplicates the descriptors of the dirty
consume-queue files and marks them clean, under the write lock) and `finish_flush` (a
worker thread: the log's group-commit sync, those fdatasyncs on the duplicates, then the
checkpoint under the flush lock) do the same work with the waits off the loop. The
checkpoint claims no more than before: recoverOffset is at most the record end read in
`begin_flush` and the flushed end, and every consume-queue entry of a record below it was
written before `begin_flush` marked its file, so it is among the files synced before the
checkpoint is written. A file dirtied after `begin_flush` stays marked for the next one.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueSet
from .consumer_offsets import ConsumerOffsetStore
from .health import StoreHealth
from .locks import StoreLocks


@dataclass
class FlushTicket:
    """What `begin_flush` captured for `finish_flush` (which closes `queue_fds`)."""

    recover_offset: int
    log_end: int
    queue_fds: list[int] = field(default_factory=list)


class Durability:
    def __init__(
        self,
        config: StoreConfig,
        locks: StoreLocks,
        health: StoreHealth,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        checkpoint: StoreCheckpoint,
        consumer_offsets: ConsumerOffsetStore,
    ) -> None:
        self._config = config
        self._locks = locks
        self._health = health
        self._commitlog = commitlog
        self._queues = queues
        self._checkpoint = checkpoint
        self._consumer_offsets = consumer_offsets
        self._flushed = commitlog.max_offset
        self._saved_checkpoint = (checkpoint.recover_offset, checkpoint.confirm_offset)

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    def sync_after_append(self, end: int, flush: bool | None) -> None:
        """After an append ending at `end`: fdatasync if asked, by default on SYNC_FLUSH."""
        if flush if flush is not None else self._config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.sync_to(end)

    def sync_to(self, end: int) -> None:
        """Make [.., end) durable; one fdatasync serves every writer waiting (group commit)."""
        locks = self._locks
        with locks.flush:
            if self._flushed >= end:
                return
            with locks.write:
                self._health.check_open()
                target = self._commitlog.max_offset
                captured = self._commitlog.capture_unsynced()
            try:
                for _, fd, _ in captured:
                    os.fdatasync(fd)
            except OSError as exc:
                raise self._health.io_failed(
                    "fdatasync of the commit log", exc, 0, fsync=True
                ) from exc
            with locks.write:
                self._commitlog.mark_synced(captured)
            self._flushed = max(self._flushed, target)
            window = self._config.page_cache_window_bytes
            if window:
                # Under the flush lock: truncation (which closes fds) cannot run meanwhile.
                with contextlib.suppress(OSError):  # only a hint
                    self._commitlog.drop_cache_below(self._flushed - window)

    def sync_log(self) -> int:
        """fdatasync the commit log up to its current max offset; returns flushed_offset.
        Concurrent callers share one fdatasync (the group commit thread calls this)."""
        with self._locks.write:
            self._health.check_open()
            end = self._commitlog.max_offset
        self.sync_to(end)
        return self._flushed

    def needs_sync(self, end: int) -> bool:
        """True if bytes below min(end, max_offset) are not yet durable."""
        with self._locks.write:
            return min(end, self._commitlog.max_offset) > self._flushed

    def flush(self, recover_offset: int) -> int:
        """fdatasync the log, then consume queues, then write the checkpoint (recoverOffset
        at most `recover_offset`, the last whole record end read before the sync);
        returns flushed_offset. Call every flush_interval_ms in both flush modes."""
        self.sync_to(self._commitlog.max_offset)
        with self._locks.flush:
            with self._locks.write:
                try:
                    # Under the write lock: a concurrent dispatch must not slip between
                    # sync and clear.
                    self._queues.sync()
                except OSError as exc:
                    raise self._health.io_failed(
                        "fdatasync of the consume queues", exc, 0, fsync=True
                    ) from exc
            self._checkpoint.recover_offset = min(recover_offset, self._flushed)
            state = (self._checkpoint.recover_offset, self._checkpoint.confirm_offset)
            if state != self._saved_checkpoint:
                self._save_checkpoint()
            if self._consumer_offsets.dirty:
                self._consumer_offsets.persist()
        return self._flushed

    def begin_flush(self, recover_offset: int) -> FlushTicket:
        """The event loop's share of a periodic flush (no fdatasync): duplicates of the
        dirty consume-queue files' descriptors, which are marked clean; `finish_flush`
        (any thread) syncs them. `recover_offset`: the last whole record end, read before."""
        with self._locks.write:
            self._health.check_open()
            return FlushTicket(
                recover_offset, self._commitlog.max_offset, self._queues.capture_unsynced()
            )

    def finish_flush(self, ticket: FlushTicket) -> int:
        """The waiting share of a periodic flush, off the event loop: the log up to the
        ticket's end, the captured consume-queue files, then the checkpoint; returns
        flushed_offset. Consumer offsets are left to the caller's `flush` (their table
        changes on the loop)."""
        fds = ticket.queue_fds
        try:
            self.sync_to(ticket.log_end)
            try:
                while fds:
                    os.fdatasync(fds[-1])
                    os.close(fds.pop())
            except OSError as exc:
                raise self._health.io_failed(
                    "fdatasync of the consume queues", exc, 0, fsync=True
                ) from exc
            with self._locks.flush:
                self._health.check_open()
                self._checkpoint.recover_offset = min(ticket.recover_offset, self._flushed)
                state = (self._checkpoint.recover_offset, self._checkpoint.confirm_offset)
                if state != self._saved_checkpoint:
                    self._save_checkpoint()
            return self._flushed
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- truncation (callers hold both locks) ---------------------------------------------
    def cut_to(self, offset: int) -> None:
        """The log was cut to `offset`: nothing above it is durable any more."""
        self._flushed = min(self._flushed, offset)

    def after_truncate(self, offset: int, record_end: int) -> None:
        """The log and queues were cut to `offset` (last whole record ends at `record_end`):
        lower the flushed end and the checkpoint, persist queues and checkpoint."""
        self.cut_to(offset)
        checkpoint = self._checkpoint
        if checkpoint.confirm_offset > offset:
            checkpoint.confirm_offset = offset
        checkpoint.recover_offset = min(checkpoint.recover_offset, record_end)
        self._queues.sync()
        self._save_checkpoint()

    def after_reset(self, offset: int) -> None:
        """The log was dropped and starts empty at `offset`."""
        self._flushed = offset
        checkpoint = self._checkpoint
        checkpoint.recover_offset = offset
        checkpoint.confirm_offset = min(checkpoint.confirm_offset, offset)
        self._save_checkpoint()

    def _save_checkpoint(self) -> None:
        self._checkpoint.save()
        self._saved_checkpoint = (self._checkpoint.recover_offset, self._checkpoint.confirm_offset)
