"""The write side of the message store (DESIGN.md §3.1): master appends
(`put_run`, the produce path; `put_messages`, any topics), replicated
appends on a slave (whole records only, a partial tail held back), and
durability (fdatasync, group commit's `sync_log`, the periodic `flush`).
Validates before writing; a failed fsync is fatal. A mixin of `MessageStore`."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .config import FlushDiskType
from .consume_queue import describe_unindexed
from .errors import (
    PartialTailPresent,
    ReplicationDataCorrupt,
    StoreCorruption,
    StoreError,
    StoreOffsetMismatch,
)
from .message import AppendResult, MessageInput, RecordIndex
from .message_encode import EncodedRun, encode_batch, encode_run
from .message_scan import scan_records
from .store_state import StoreState

if TYPE_CHECKING:
    from .store import MessageStore

log = logging.getLogger(__name__)


class StoreWrites(StoreState):
    # -- writes ---------------------------------------------------------------------------
    def put_messages(
        self: MessageStore,
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
        self: MessageStore,
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
        self: MessageStore,
        offset: int,
        data: bytes | bytearray | memoryview,
        index: list[RecordIndex],
    ) -> None:
        queues = self.queues

        def dispatch() -> None:
            unindexed = queues.dispatch(index)
            if unindexed:
                self.records_unindexed += len(unindexed)
                log.error("store %s: %s", self.root, describe_unindexed(unindexed))

        self._write_dispatch_locked(offset, data, dispatch)

    def _write_dispatch_locked(
        self: MessageStore,
        offset: int,
        data: bytes | bytearray | memoryview,
        dispatch: Callable[[], None],
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
        self: MessageStore, offset: int, data: bytes | memoryview, *, flush: bool | None = None
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

    def _sync_to(self: MessageStore, end: int) -> None:
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

    def sync_log(self: MessageStore) -> int:
        """fdatasync the commit log up to its current max offset; returns flushed_offset.
        Concurrent callers share one fdatasync (the group commit thread calls this)."""
        with self._lock:
            self._check_open()
            end = self.commitlog.max_offset
        self._sync_to(end)
        return self._flushed

    def needs_sync(self: MessageStore, end: int) -> bool:
        """True if bytes below min(end, max_offset) are not yet durable."""
        with self._lock:
            return min(end, self.commitlog.max_offset) > self._flushed

    def flush(self: MessageStore) -> int:
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
