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

import contextlib
import errno
import fcntl
import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import FlushDiskType, StoreConfig
from .consume_queue import ConsumeQueueSet, describe_unindexed
from .consumer_offsets import ConsumerOffsetStore
from .epoch_file import EpochFile
from .errors import (
    OffsetOutOfRange,
    PartialTailPresent,
    ReplicationDataCorrupt,
    StoreBusy,
    StoreClosed,
    StoreCorruption,
    StoreError,
    StoreIOError,
    StoreLocked,
    StoreNotWritable,
    StoreOffsetMismatch,
)
from .identity import IdentityFiles
from .message import AppendResult, FileRange, MessageInput, RecordIndex, StoredMessage
from .message_encode import EncodedRun, encode_batch, encode_run
from .message_scan import decode_record, scan_records
from .recovery import RecoveryReport, recover

log = logging.getLogger(__name__)

_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE)
#: How long a statvfs answer (disk usage ratio) is reused. writable() runs twice per
#: produce; one statvfs per call was ~2% of the master's CPU under load. A write
#: that fills the disk faster than this still fails cleanly (ENOSPC -> _space_error).
_DISK_USAGE_TTL_S = 0.1
_MAX_READ_SPAN_BYTES = 1 << 20


def _queue_file_budget(configured: int) -> int:
    """Consume-queue files to keep open: the configured bound, but never more than half
    the process's descriptor limit (the log, sockets and metadata need the rest)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft // 2))


class MessageStore:
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

    # -- writes ---------------------------------------------------------------------------
    def put_messages(
        self,
        batch: Sequence[MessageInput],
        store_host: tuple[str, int],
        now_ms: int,
        *,
        flush: bool | None = None,
    ) -> AppendResult:
        """Master append of a batch; one fdatasync per call on SYNC_FLUSH (group commit).

        All messages are validated first: an invalid one rejects the batch unchanged.
        `flush=False` skips the fdatasync: the caller makes the bytes durable later
        (`sync_log`, GroupCommitService) and must not acknowledge them before
        `flushed_offset` covers them.
        """
        self._check_writable()
        with self._lock:
            self._check_open()
            start = self.commitlog.max_offset
            if not batch:
                return AppendResult(start, start, [])
            if self._last_record_end != start:
                raise PartialTailPresent(start, self._last_record_end)
            for topic in {m.topic for m in batch}:
                self.queues.check_topic_limit(topic)
            enc = encode_batch(
                batch,
                start_offset=start,
                segment_bytes=self.commitlog.segment_bytes,
                store_host=store_host,
                store_timestamp_ms=now_ms,
                queue_offset_of=self.queues.next_queue_offset,
                max_message_bytes=self.config.max_message_bytes,
            )
            end = start + len(enc.data)
            self._write_locked(start, enc.data, enc.index)
            self._last_record_end = end
        if flush if flush is not None else self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._sync_to(end)
        return AppendResult(start, end, enc.messages)

    def put_run(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes | bytearray | memoryview],
        properties: Sequence[Mapping[str, str] | None] | None,
        *,
        store_host: tuple[str, int],
        born_host: tuple[str, int],
        now_ms: int,
        flag: int = 0,
        flush: bool | None = None,
    ) -> EncodedRun:
        """`put_messages` for a batch of one topic and queue (the produce hot path):
        born timestamp = store timestamp = `now_ms`, one born host. Same validation,
        durability and `flush` contract as `put_messages`; returns where each message
        went (`EncodedRun`: physical offsets, sizes, first queue offset)."""
        self._check_writable()
        with self._lock:
            self._check_open()
            start = self.commitlog.max_offset
            if self._last_record_end != start:
                raise PartialTailPresent(start, self._last_record_end)
            self.queues.check_topic_limit(topic)
            run = encode_run(
                topic,
                queue_id,
                bodies,
                properties,
                flag=flag,
                born_timestamp_ms=now_ms,
                born_host=born_host,
                start_offset=start,
                segment_bytes=self.commitlog.segment_bytes,
                store_host=store_host,
                store_timestamp_ms=now_ms,
                first_queue_offset=self.queues.next_queue_offset((topic, queue_id)),
                max_message_bytes=self.config.max_message_bytes,
            )
            end = run.end_offset
            if bodies:
                queues = self.queues

                def dispatch() -> None:
                    queues.append_run(
                        topic, queue_id, run.first_queue_offset, run.physical_offsets,
                        run.sizes, run.tags_codes,
                    )  # fmt: skip

                self._write_dispatch_locked(start, run.data, dispatch)
                self._last_record_end = end
        if bodies and (
            flush if flush is not None else self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        ):
            self._sync_to(end)
        return run

    def _write_locked(
        self, offset: int, data: bytes | bytearray | memoryview, index: list[RecordIndex]
    ) -> None:
        queues = self.queues

        def dispatch() -> None:
            unindexed = queues.dispatch(index)
            if unindexed:
                self.records_unindexed += len(unindexed)
                log.error("store %s: %s", self.root, describe_unindexed(unindexed))

        self._write_dispatch_locked(offset, data, dispatch)

    def _write_dispatch_locked(
        self, offset: int, data: bytes | bytearray | memoryview, dispatch: Callable[[], None]
    ) -> None:
        try:
            self.commitlog.write(offset, data)
        except OSError as exc:
            raise self._io_failed(f"writing {len(data)} bytes at {offset}", exc, len(data)) from exc
        try:
            dispatch()
        except Exception as exc:
            # Undo the log write so the log and its index stay consistent: a record
            # in the log that no queue indexes would fail every later append.
            if isinstance(exc, OSError):
                err: StoreError = self._io_failed(
                    f"writing consume queue entries for {offset}", exc, len(data)
                )
            else:
                log.exception("store %s: indexing the append at %d failed", self.root, offset)
                err = StoreCorruption(offset, f"indexing the append failed: {exc!r}")
            try:
                self.queues.truncate_physical(offset)
                self.commitlog.truncate(offset)
            except OSError as undo:
                # Log and index now disagree: refuse writes so the controller fails over.
                self._fatal_error = f"{err}; rolling the append back also failed: {undo}"
                log.error("store %s: %s", self.root, self._fatal_error)
            raise err from exc

    def append_replicated(
        self, offset: int, data: bytes | memoryview, *, flush: bool | None = None
    ) -> int:
        """Slave append of raw master bytes at exactly `max_offset`; returns the new max_offset.

        `data` may end mid-record and may hold blank records (the log rolls to the
        next segment exactly as the master's did). Complete records are validated
        (structure, position, CRC, queue offset continuity) and dispatched to the
        consume queues. Bytes from the first invalid record on are not written and
        ReplicationDataCorrupt is raised. `flush` defaults to True on SYNC_FLUSH, so
        an ack of the returned offset means those bytes are durable here.
        """
        self._check_writable()
        with self._lock:
            self._check_open()
            max_offset = self.commitlog.max_offset
            if offset != max_offset:
                raise StoreOffsetMismatch(offset, max_offset)
            if not data:
                return max_offset
            base = self._last_record_end
            buf: bytes | memoryview = self._pending + bytes(data) if self._pending else data
            res = scan_records(
                buf, base, self.commitlog.segment_bytes,
                verify_crc=True, max_record_bytes=self.config.max_message_bytes,
            )  # fmt: skip
            records = res.records
            bad: tuple[int, str] | None = None
            if res.stop.is_corrupt:
                bad = (res.end, f"{res.stop.value}: {res.detail}")
            mismatch = self.queues.first_mismatch(records)
            if mismatch is not None:
                records = [r for r in records if r.physical_offset < mismatch.physical_offset]
                bad = (
                    mismatch.physical_offset,
                    f"queue offset {mismatch.queue_offset} of {mismatch.topic}/"
                    f"{mismatch.queue_id} does not continue its consume queue (next is "
                    f"{self.queues.next_queue_offset((mismatch.topic, mismatch.queue_id))})",
                )
            if bad is None:
                write = memoryview(data)
                new_record_end = res.end
            else:
                write = memoryview(data)[: max(0, bad[0] - offset)]
                new_record_end = max(base, bad[0]) if bad[0] >= offset else base
                if bad[0] < offset:
                    records = []
            if write:
                self._write_locked(offset, write, records)
                self._last_record_end = new_record_end
                new_max = offset + len(write)
                self._pending = bytes(buf[new_record_end - base : new_max - base])
            end = self.commitlog.max_offset
        if write and (
            flush if flush is not None else self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        ):
            self._sync_to(end)
        if bad is not None:
            log.error("replicated data rejected at offset %d: %s", bad[0], bad[1])
            raise ReplicationDataCorrupt(bad[0], bad[1])
        return end

    def _sync_to(self, end: int) -> None:
        """Make [.., end) durable; one fdatasync serves every writer waiting (group commit)."""
        with self._flush_lock:
            if self._flushed >= end:
                return
            with self._lock:
                self._check_open()
                target = self.commitlog.max_offset
                captured = self.commitlog.capture_unsynced()
            try:
                for _, fd, _ in captured:
                    os.fdatasync(fd)
            except OSError as exc:
                raise self._io_failed("fdatasync of the commit log", exc, 0, fsync=True) from exc
            with self._lock:
                self.commitlog.mark_synced(captured)
            self._flushed = max(self._flushed, target)
            window = self.config.page_cache_window_bytes
            if window:
                # Under _flush_lock: truncation (which closes fds) cannot run meanwhile.
                with contextlib.suppress(OSError):  # only a hint
                    self.commitlog.drop_cache_below(self._flushed - window)

    def sync_log(self) -> int:
        """fdatasync the commit log up to its current max offset; returns flushed_offset.
        Concurrent callers share one fdatasync (the group commit thread calls this)."""
        with self._lock:
            self._check_open()
            end = self.commitlog.max_offset
        self._sync_to(end)
        return self._flushed

    def needs_sync(self, end: int) -> bool:
        """True if bytes below min(end, max_offset) are not yet durable."""
        with self._lock:
            return min(end, self.commitlog.max_offset) > self._flushed

    def flush(self) -> int:
        """fdatasync the log, then consume queues, then write the checkpoint; returns
        flushed_offset. Call every flush_interval_ms in both flush modes."""
        with self._lock:
            self._check_open()
            recover_offset = self._last_record_end
        self._sync_to(self.commitlog.max_offset)
        with self._flush_lock:
            with self._lock:
                try:
                    # Under _lock: a concurrent dispatch must not slip between sync and clear.
                    self.queues.sync()
                except OSError as exc:
                    raise self._io_failed(
                        "fdatasync of the consume queues", exc, 0, fsync=True
                    ) from exc
            self.checkpoint.recover_offset = min(recover_offset, self._flushed)
            state = (self.checkpoint.recover_offset, self.checkpoint.confirm_offset)
            if state != self._saved_checkpoint:
                self.checkpoint.save()
                self._saved_checkpoint = state
            if self.consumer_offsets.dirty:
                self.consumer_offsets.persist()
        return self._flushed

    # -- truncation -----------------------------------------------------------------------
    def truncate(self, offset: int) -> None:
        """Cut the commit log and consume queues to end at `offset` (HA truncation point).

        The epoch file is the caller's (epoch_file.truncate_suffix), as is deciding the point.
        """
        with self._flush_lock, self._lock:
            self._check_open()
            low, high = self.commitlog.min_offset, self.commitlog.max_offset
            if not low <= offset <= high:
                raise OffsetOutOfRange("truncate", offset, low, high)
            if offset == high:
                return
            removed = self.commitlog.truncate(offset)
            dropped = self.queues.truncate_physical(offset)
            self._rebuild_tail_state()
            self._flushed = min(self._flushed, offset)
            if self.checkpoint.confirm_offset > offset:
                self.checkpoint.confirm_offset = offset
            self.checkpoint.recover_offset = min(
                self.checkpoint.recover_offset, self._last_record_end
            )
            self.queues.sync()
            self.checkpoint.save()
            self._saved_checkpoint = (
                self.checkpoint.recover_offset,
                self.checkpoint.confirm_offset,
            )
        log.warning(
            "store %s truncated to %d: %d commit log bytes and %d consume queue entries removed",
            self.root, offset, removed, dropped,
        )  # fmt: skip

    def _rebuild_tail_state(self) -> None:
        """After cutting the log to max_offset, find the last whole record again."""
        end = self.commitlog.max_offset
        if self._last_record_end <= end:
            self._pending = self._pending[: end - self._last_record_end]
            return
        # Every whole record is in a consume queue, so the largest indexed record end is
        # the last boundary up to blanks; scan the short rest (blanks, a partial record).
        start = max(self.queues.max_record_end(), self.commitlog.min_offset)
        chunks = []
        pos = start
        while pos < end:
            chunk = self.commitlog.read(pos, end - pos, end)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        data = b"".join(chunks)
        res = scan_records(data, start, self.commitlog.segment_bytes, verify_crc=False)
        if res.stop.is_corrupt:
            log.error("after truncation the tail at %d does not parse: %s", res.end, res.detail)
        self._last_record_end = res.end
        self._pending = data[res.end - start :]

    def truncate_partial_tail(self) -> int:
        """Cut a record still arriving (slave) so the log ends at a whole record; returns the
        new max_offset. Call before writing as master (DESIGN.md §3.2)."""
        with self._flush_lock, self._lock:
            self._check_open()
            end = self.commitlog.max_offset
            if end > self._last_record_end:
                removed = self.commitlog.truncate(self._last_record_end)
                self._pending = b""
                self._flushed = min(self._flushed, self._last_record_end)
                log.warning(
                    "store %s: cut %d bytes of a partial record at %d",
                    self.root, removed, self._last_record_end,
                )  # fmt: skip
            return self.commitlog.max_offset

    def reset(self, offset: int) -> None:
        """Drop the whole log and index and start empty at `offset` (a segment boundary):
        the full resync when a slave shares no epoch with the master (DESIGN.md §3.2)."""
        with self._flush_lock, self._lock:
            self._check_open()
            log.warning(
                "store %s: dropping the whole log [%d, %d) to resync from %d",
                self.root, self.commitlog.min_offset, self.commitlog.max_offset, offset,
            )  # fmt: skip
            self.commitlog.reset(offset)
            self.queues.destroy()
            self._last_record_end = self._flushed = offset
            self._pending = b""
            self.checkpoint.recover_offset = offset
            self.checkpoint.confirm_offset = min(self.checkpoint.confirm_offset, offset)
            self.checkpoint.save()
            self._saved_checkpoint = (offset, self.checkpoint.confirm_offset)

    # -- reads ----------------------------------------------------------------------------
    def read_range(self, offset: int, max_bytes: int) -> FileRange | None:
        """Bytes from `offset` inside ONE segment, for os.sendfile; None when nothing is there."""
        with self._lock:
            self._check_open()
            return self.commitlog.file_range(offset, max_bytes, self.commitlog.max_offset)

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """The bytes `read_range` describes, copied."""
        with self._lock:
            self._check_open()
            return self.commitlog.read(offset, max_bytes, self.commitlog.max_offset)

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
        with self._lock:
            self._check_open()
            cq = self.queues.get(topic, queue_id)
            if cq is None or max_count <= 0:
                return []
            bound = min(max_physical_offset, self._serve_end())
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
            return self._read_records(entries[:usable])

    def _read_records(self, entries: list[tuple[int, int, int]]) -> list[StoredMessage]:
        out: list[StoredMessage] = []
        i = 0
        seg_bytes = self.commitlog.segment_bytes
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
            data = self.commitlog.read_exact(first, span_end - first)
            for off, size, _ in entries[i : j + 1]:
                msg = decode_record(data, off - first)
                if msg.physical_offset != off or msg.size != size:
                    raise StoreCorruption(
                        off, f"consume queue entry ({off}, {size}) points at record "
                        f"({msg.physical_offset}, {msg.size})",
                    )  # fmt: skip
                out.append(msg)
            i = j + 1
        return out

    def queue_offset_range(
        self, topic: str, queue_id: int, max_physical_offset: int | None = None
    ) -> tuple[int, int]:
        """(min, max) queue offsets; max is the next offset to be written, or, given
        `max_physical_offset`, the first whose record ends after it."""
        with self._lock:
            cq = self.queues.get(topic, queue_id)
            if cq is None:
                return (0, 0)
            if max_physical_offset is None:
                return (cq.min_offset, cq.max_offset)
            return (cq.min_offset, cq.count_ending_at_or_before(max_physical_offset))

    def queue_count(self, topic: str) -> int:
        """Queues of a known topic: at least default_queue_count; 0 for an unknown topic."""
        n = self.queues.queue_count(topic)
        return max(n, self.config.default_queue_count) if n else 0
