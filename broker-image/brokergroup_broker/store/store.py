"""`MessageStore`: the broker's store facade (DESIGN.md §3.1; docs/architecture.md).

Directory layout under `root` (RocketMQ's names where RocketMQ has the file):

    commitlog/<20-digit start offset>          commit log segments (commitlog.py)
    consumequeue/<topic>/<queueId>/<20 digits> consume queues (consume_queue.py)
    storeCheckpoint                            recoverOffset, confirmOffset (checkpoint.py)
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

Threads: every method may be called from any thread. Writers hold `_lock`
while encoding and writing; fdatasync runs under `_flush_lock` only, so a
batch can be written while the previous one is being synced. Lock order is
always `_flush_lock` then `_lock`. Truncation takes both, so no fd is closed
while being synced; a FileRange's fd stays valid until its segment is
truncated away.

Errors: a failed write is rolled back and reported by `writable()`; ENOSPC
clears itself once space is back, any other I/O error (notably a failed
fdatasync, after which the page cache can no longer be trusted) sticks until
the store is reopened.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import resource
import threading
import time
from pathlib import Path

from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueSet
from .consumer_offsets import ConsumerOffsetStore
from .epoch_file import EpochFile
from .errors import (
    StoreBusy,
    StoreClosed,
    StoreError,
    StoreIOError,
    StoreLocked,
    StoreNotWritable,
)
from .identity import IdentityFiles
from .recovery import RecoveryReport, recover
from .store_reads import StoreReads
from .store_truncation import StoreTruncation
from .store_writes import StoreWrites

log = logging.getLogger(__name__)

_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE)
#: How long a statvfs answer (disk usage ratio) is reused. writable() runs twice per
#: produce; one statvfs per call was ~2% of the master's CPU under load. A write
#: that fills the disk faster than this still fails cleanly (ENOSPC -> _space_error).
_DISK_USAGE_TTL_S = 0.1


def _queue_file_budget(configured: int) -> int:
    """Consume-queue files to keep open: the configured bound, but never more than half
    the process's descriptor limit (the log, sockets and metadata need the rest)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft // 2))


class MessageStore(StoreWrites, StoreReads, StoreTruncation):
    """Open with `MessageStore.open(root, config)`; see the module docstring."""

    def __init__(
        self,
        root: Path,
        config: StoreConfig,
        *,
        lock_fd: int,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        checkpoint: StoreCheckpoint,
        epoch_file: EpochFile,
        consumer_offsets: ConsumerOffsetStore,
        identity: IdentityFiles,
        recovery: RecoveryReport,
    ) -> None:
        self.root = root
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.checkpoint = checkpoint
        self.epoch_file = epoch_file
        self.consumer_offsets = consumer_offsets
        self.identity = identity
        self.recovery = recovery
        self._lock_fd = lock_fd
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._closed = False
        end = commitlog.max_offset
        self._last_record_end = end
        self._pending = b""  # bytes [last_record_end, max_offset): a record still arriving
        self._flushed = end
        self._saved_checkpoint = (checkpoint.recover_offset, checkpoint.confirm_offset)
        self._fatal_error: str | None = None
        #: Records kept in the log but indexed by no queue (a topic that breaks the
        #: topic rule, from before it was enforced): recovery's count plus replication's.
        self.records_unindexed = recovery.records_unindexed
        self._space_error: tuple[str, int] | None = None  # (reason, bytes that did not fit)
        self._disk_usage: tuple[float, float] | None = None  # (monotonic s, ratio)

    # -- open / close ---------------------------------------------------------------------
    @classmethod
    def open(cls, root: Path, config: StoreConfig | None = None) -> MessageStore:
        """Open (creating if needed) and recover the store at `root`."""
        config = config or StoreConfig()
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(lock_fd)
            raise StoreLocked(str(root)) from exc
        try:
            epoch_file = EpochFile(root)
            checkpoint = StoreCheckpoint.load(root)
            commitlog = CommitLog(root / "commitlog", config.commit_log_segment_bytes)
            queues = ConsumeQueueSet(
                root / "consumequeue",
                config.consume_queue_entries_per_file,
                max_open_files=_queue_file_budget(config.max_open_queue_files),
                max_topics=config.max_topics,
            )
            report = recover(
                commitlog,
                queues,
                checkpoint_offset=checkpoint.recover_offset
                if checkpoint.loaded_from_disk
                else None,
                verify_crc=config.verify_crc_on_recover,
                max_record_bytes=config.max_message_bytes,
            )
            # Step 5: the recovered state is durable before anything is served.
            commitlog.sync_range(report.scan_from, report.end)
            queues.sync()
            checkpoint.recover_offset = report.end
            if checkpoint.confirm_offset > report.end:
                log.warning(
                    "confirmOffset %d is beyond the recovered log end %d; clamping",
                    checkpoint.confirm_offset, report.end,
                )  # fmt: skip
                checkpoint.confirm_offset = report.end
            checkpoint.save()
            last = epoch_file.last_entry()
            if last is not None and last.start_offset > report.end:
                log.warning(
                    "epoch entries start beyond the recovered log end %d; dropping them: %s",
                    report.end, [e for e in epoch_file.entries() if e.start_offset > report.end],
                )  # fmt: skip
                epoch_file.truncate_suffix(report.end + 1)
            log.info(
                "store %s recovered: log [%d, %d), scanned from %d, %d records re-indexed",
                root, commitlog.min_offset, report.end, report.scan_from,
                report.records_dispatched,
            )  # fmt: skip
            return cls(
                root,
                config,
                lock_fd=lock_fd,
                commitlog=commitlog,
                queues=queues,
                checkpoint=checkpoint,
                epoch_file=epoch_file,
                consumer_offsets=ConsumerOffsetStore(root),
                identity=IdentityFiles(root),
                recovery=report,
            )
        except BaseException:
            os.close(lock_fd)
            raise

    def close(self, *, flush: bool = True) -> None:
        """Flush (unless flush=False, which tests use to simulate a crash) and release files."""
        if self._closed:
            return
        if flush and self._fatal_error is None:
            self.flush()
        with self._flush_lock, self._lock:
            self._closed = True
            self.commitlog.close()
            self.queues.close()
            os.close(self._lock_fd)

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(str(self.root))

    # -- offsets --------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.commitlog.min_offset

    @property
    def max_offset(self) -> int:
        return self.commitlog.max_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def last_record_end(self) -> int:
        """End of the last whole record (== max_offset except on a slave mid-record)."""
        return self._last_record_end

    @property
    def confirm_offset(self) -> int:
        return self.checkpoint.confirm_offset

    def set_confirm_offset(self, offset: int) -> None:
        """Remember confirmOffset; persisted at the next flush()."""
        self.checkpoint.confirm_offset = offset

    def _serve_end(self) -> int:
        if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            return min(self._flushed, self._last_record_end)
        return self._last_record_end

    # -- health ---------------------------------------------------------------------------
    def disk_usage_ratio(self) -> float:
        now = time.monotonic()
        cached = self._disk_usage
        if cached is not None and now - cached[0] < _DISK_USAGE_TTL_S:
            return cached[1]
        st = os.statvfs(self.root)
        ratio = 0.0 if st.f_blocks == 0 else (st.f_blocks - st.f_bavail) / st.f_blocks
        self._disk_usage = (now, ratio)
        return ratio

    def writable(self) -> tuple[bool, str | None]:
        if self._closed:
            return False, "store is closed"
        if self._fatal_error is not None:
            return False, self._fatal_error
        ratio = self.disk_usage_ratio()
        if ratio > self.config.disk_full_ratio:
            return False, (
                f"disk usage {ratio:.1%} of {self.root} is above diskFullRatio "
                f"{self.config.disk_full_ratio:.1%}"
            )
        if self._space_error is not None:
            reason, needed = self._space_error
            st = os.statvfs(self.root)
            if st.f_bavail * st.f_frsize < 2 * needed + (1 << 20):
                return False, reason
            log.info("store %s: space is available again; accepting writes", self.root)
            self._space_error = None
        return True, None

    def _check_writable(self) -> None:
        ok, reason = self.writable()
        if not ok:
            raise StoreNotWritable(reason or "unknown")

    def _io_failed(self, what: str, exc: OSError, size: int, *, fsync: bool = False) -> StoreError:
        reason = f"{what} failed: {exc.strerror or exc} (errno {exc.errno})"
        if fsync:
            # After a failed fsync the kernel may have dropped the dirty pages and a
            # retry would "succeed" without them: whatever the errno (ENOSPC, EDQUOT,
            # EIO), the unflushed tail is lost. Stop for good: the controller fails
            # this broker over and a restart recovers from what is on disk.
            self._fatal_error = (
                f"{reason}; unflushed data may be lost, so this store takes no more writes: "
                "restart the broker to recover from disk"
            )
            log.error("store %s: %s", self.root, self._fatal_error)
            return StoreIOError(self._fatal_error)
        if exc.errno in _RESOURCE_ERRNOS:
            # Out of descriptors: this request fails, the disk is fine (no failover).
            log.warning("store %s: %s (a resource limit, not a disk fault)", self.root, reason)
            return StoreBusy(reason)
        if exc.errno in _SPACE_ERRNOS:
            self._space_error = (reason, size)
        else:
            self._fatal_error = reason + "; reopen the store after fixing the disk"
        log.error("store %s: %s", self.root, reason)
        return StoreIOError(reason)
