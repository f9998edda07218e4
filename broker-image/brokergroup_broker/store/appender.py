"""The write side of the store (DESIGN.md §3.1), the one owner of the log's tail:
`last_record_end` (end of the last whole record) and the bytes of a record still
arriving on a slave. Master appends (`put_run`, the produce path; `put_messages`,
any topics), replicated appends on a slave (whole records only, a partial tail held
back), dispatch into the consume queues, and cutting the tail back (truncation).
Validates before writing; a failed write is rolled back (log and index agree)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueueSet, describe_unindexed
from .durability import Durability
from .errors import (
    PartialTailPresent,
    ReplicationDataCorrupt,
    StoreCorruption,
    StoreError,
    StoreOffsetMismatch,
)
from .health import StoreHealth
from .locks import StoreLocks
from .message import AppendResult, MessageInput, RecordIndex
from .message_encode import EncodedRun, encode_batch, encode_run
from .message_scan import scan_records

log = logging.getLogger(__name__)


class Appender:
    """Appends to the log and keeps its tail state; see the module docstring."""

    def __init__(
        self,
        root: Path,
        config: StoreConfig,
        locks: StoreLocks,
        health: StoreHealth,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        durability: Durability,
        *,
        records_unindexed: int,
    ) -> None:
        self._root = root
        self._config = config
        self._locks = locks
        self._health = health
        self._commitlog = commitlog
        self._queues = queues
        self._durability = durability
        self._last_record_end = commitlog.max_offset
        self._pending = b""  # bytes [last_record_end, max_offset): a record still arriving
        #: Records kept in the log but indexed by no queue (a topic that breaks the
        #: topic rule, from before it was enforced): recovery's count plus replication's.
        self.records_unindexed = records_unindexed

    @property
    def last_record_end(self) -> int:
        """End of the last whole record (== max_offset except on a slave mid-record)."""
        return self._last_record_end

    def record_end_checked(self) -> int:
        """`last_record_end` read under the write lock of an open store."""
        with self._locks.write:
            self._health.check_open()
            return self._last_record_end

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
        self._health.check_writable()
        with self._locks.write:
            self._health.check_open()
            start = self._commitlog.max_offset
            if not batch:
                return AppendResult(start, start, [])
            if self._last_record_end != start:
                raise PartialTailPresent(start, self._last_record_end)
            for topic in {m.topic for m in batch}:
                self._queues.check_topic_limit(topic)
            enc = encode_batch(
                batch,
                start_offset=start,
                segment_bytes=self._commitlog.segment_bytes,
                store_host=store_host,
                store_timestamp_ms=now_ms,
                queue_offset_of=self._queues.next_queue_offset,
                max_message_bytes=self._config.max_message_bytes,
            )
            end = start + len(enc.data)
            self._write_locked(start, enc.data, enc.index)
            self._last_record_end = end
        self._durability.sync_after_append(end, flush)
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
        born_timestamp_ms: int | None = None,
        sys_flag: int = 0,
        reconsume_times: int = 0,
    ) -> EncodedRun:
        """`put_messages` for a batch of one topic and queue (the produce hot path):
        store timestamp = `now_ms`, born timestamp the same unless given (a RocketMQ
        producer sends its own), one born host, flag and sysFlag. Same validation,
        durability and `flush` contract as `put_messages`; returns where each message
        went (`EncodedRun`: physical offsets, sizes, first queue offset)."""
        self._health.check_writable()
        with self._locks.write:
            self._health.check_open()
            start = self._commitlog.max_offset
            if self._last_record_end != start:
                raise PartialTailPresent(start, self._last_record_end)
            self._queues.check_topic_limit(topic)
            run = encode_run(
                topic,
                queue_id,
                bodies,
                properties,
                flag=flag,
                born_timestamp_ms=now_ms if born_timestamp_ms is None else born_timestamp_ms,
                born_host=born_host,
                start_offset=start,
                segment_bytes=self._commitlog.segment_bytes,
                store_host=store_host,
                store_timestamp_ms=now_ms,
                first_queue_offset=self._queues.next_queue_offset((topic, queue_id)),
                max_message_bytes=self._config.max_message_bytes,
                sys_flag=sys_flag,
                reconsume_times=reconsume_times,
            )
            end = run.end_offset
            if bodies:
                queues = self._queues

                def dispatch() -> None:
                    queues.append_run(
                        topic, queue_id, run.first_queue_offset, run.physical_offsets,
                        run.sizes, run.tags_codes,
                    )  # fmt: skip

                self._write_dispatch_locked(start, run.data, dispatch)
                self._last_record_end = end
        if bodies:
            self._durability.sync_after_append(end, flush)
        return run

    def _write_locked(
        self,
        offset: int,
        data: bytes | bytearray | memoryview,
        index: list[RecordIndex],
    ) -> None:
        queues = self._queues

        def dispatch() -> None:
            unindexed = queues.dispatch(index)
            if unindexed:
                self.records_unindexed += len(unindexed)
                log.error("store %s: %s", self._root, describe_unindexed(unindexed))

        self._write_dispatch_locked(offset, data, dispatch)

    def _write_dispatch_locked(
        self,
        offset: int,
        data: bytes | bytearray | memoryview,
        dispatch: Callable[[], None],
    ) -> None:
        try:
            self._commitlog.write(offset, data)
        except OSError as exc:
            raise self._health.io_failed(
                f"writing {len(data)} bytes at {offset}", exc, len(data)
            ) from exc
        try:
            dispatch()
        except Exception as exc:
            # Undo the log write so the log and its index stay consistent: a record
            # in the log that no queue indexes would fail every later append.
            if isinstance(exc, OSError):
                err: StoreError = self._health.io_failed(
                    f"writing consume queue entries for {offset}", exc, len(data)
                )
            else:
                log.exception("store %s: indexing the append at %d failed", self._root, offset)
                err = StoreCorruption(offset, f"indexing the append failed: {exc!r}")
            try:
                self._queues.truncate_physical(offset)
                self._commitlog.truncate(offset)
            except OSError as undo:
                # Log and index now disagree: refuse writes so the controller fails over.
                self._health.fail(f"{err}; rolling the append back also failed: {undo}")
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
        self._health.check_writable()
        with self._locks.write:
            self._health.check_open()
            max_offset = self._commitlog.max_offset
            if offset != max_offset:
                raise StoreOffsetMismatch(offset, max_offset)
            if not data:
                return max_offset
            base = self._last_record_end
            buf: bytes | memoryview = self._pending + bytes(data) if self._pending else data
            res = scan_records(
                buf, base, self._commitlog.segment_bytes,
                verify_crc=True, max_record_bytes=self._config.max_message_bytes,
            )  # fmt: skip
            records = res.records
            bad: tuple[int, str] | None = None
            if res.stop.is_corrupt:
                bad = (res.end, f"{res.stop.value}: {res.detail}")
            mismatch = self._queues.first_mismatch(records)
            if mismatch is not None:
                records = [r for r in records if r.physical_offset < mismatch.physical_offset]
                bad = (
                    mismatch.physical_offset,
                    f"queue offset {mismatch.queue_offset} of {mismatch.topic}/"
                    f"{mismatch.queue_id} does not continue its consume queue (next is "
                    f"{self._queues.next_queue_offset((mismatch.topic, mismatch.queue_id))})",
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
            end = self._commitlog.max_offset
        if write:
            self._durability.sync_after_append(end, flush)
        if bad is not None:
            log.error("replicated data rejected at offset %d: %s", bad[0], bad[1])
            raise ReplicationDataCorrupt(bad[0], bad[1])
        return end

    def after_cut(self) -> None:
        """The log was cut to its max_offset (caller holds both locks): find the last whole
        record again."""
        end = self._commitlog.max_offset
        if self._last_record_end <= end:
            self._pending = self._pending[: end - self._last_record_end]
            return
        # Every whole record is in a consume queue, so the largest indexed record end is
        # the last boundary up to blanks; scan the short rest (blanks, a partial record).
        start = max(self._queues.max_record_end(), self._commitlog.min_offset)
        chunks = []
        pos = start
        while pos < end:
            chunk = self._commitlog.read(pos, end - pos, end)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        data = b"".join(chunks)
        res = scan_records(data, start, self._commitlog.segment_bytes, verify_crc=False)
        if res.stop.is_corrupt:
            log.error("after truncation the tail at %d does not parse: %s", res.end, res.detail)
        self._last_record_end = res.end
        self._pending = data[res.end - start :]

    def cut_partial_tail(self) -> int:
        """Cut a record still arriving (caller holds both locks); returns the bytes cut."""
        end = self._commitlog.max_offset
        if end <= self._last_record_end:
            return 0
        removed = self._commitlog.truncate(self._last_record_end)
        self._pending = b""
        return removed

    def reset_to(self, offset: int) -> None:
        """The log was dropped and starts empty at `offset` (caller holds both locks)."""
        self._last_record_end = offset
        self._pending = b""
