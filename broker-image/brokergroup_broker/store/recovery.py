"""Recovery on open (DESIGN.md §3.1): find the end of the valid log and rebuild the index.

Order (written once, here):
1. Start at the checkpoint's recoverOffset (a record boundary whose bytes and
   consume queue entries were fsynced), or at the first segment if there is
   no usable checkpoint.
2. Drop consume queue entries of records ending after the start; they are
   re-dispatched from the scan.
3. Scan records segment by segment (mmap, windows of `_WINDOW_BYTES`) with
   `scan_records`, verifying structure, position and body CRC, dispatching
   each window's records. A queue offset that does not continue its consume
   queue (a lost or stale consume queue) restarts the whole scan from the
   first segment with empty consume queues (a full rebuild).
4. The scan stops at the first torn, corrupt or zero-filled record: every
   byte after it (later segments included) is cut, with a log line saying
   how many bytes and why.
5. fdatasync what was scanned, then the consume queues, then write the
   checkpoint at the recovered end: the recovered state is durable before
   anything is served.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueueSet, describe_unindexed
from .epoch_file import EpochFile
from .message import RecordIndex
from .message_scan import ScanStop, scan_records

log = logging.getLogger(__name__)

_WINDOW_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class RecoveryReport:
    scan_from: int
    end: int
    truncated_bytes: int
    stop: ScanStop
    detail: str
    records_dispatched: int
    records_unindexed: int
    """Records kept in the log that no consume queue can hold (bad topic): reported."""
    consume_queue_entries_dropped: int
    full_rebuild: bool


class _QueueMismatch(Exception):
    pass


def scan_log(
    commitlog: CommitLog,
    start: int,
    *,
    verify_crc: bool,
    max_record_bytes: int,
    on_records: Callable[[list[RecordIndex]], None],
) -> tuple[int, ScanStop, str]:
    """Scan the segment files from `start`; returns (valid end, why it stopped, detail)."""
    seg_bytes = commitlog.segment_bytes
    window = max(_WINDOW_BYTES, 2 * max_record_bytes + 16)
    pos = start
    while True:
        seg = commitlog.segment_for(pos)
        if seg is None:
            return pos, ScanStop.END, ""
        is_last = seg is commitlog.segments[-1]
        within = pos - seg.start
        if within >= seg.size:
            if not is_last:
                return (
                    pos,
                    ScanStop.PARTIAL,
                    (
                        f"segment {seg.path.name} ends at {seg.end} without a blank record but "
                        "later segments exist"
                    ),
                )
            return pos, ScanStop.END, ""
        with mmap.mmap(seg.fd, seg.size, access=mmap.ACCESS_READ) as mm:
            view = memoryview(mm)
            try:
                while True:
                    hi = min(seg.size, within + window)
                    res = scan_records(
                        view[within:hi], seg.start + within, seg_bytes,
                        verify_crc=verify_crc, max_record_bytes=max_record_bytes,
                    )  # fmt: skip
                    if res.records:
                        on_records(res.records)
                    if res.stop is ScanStop.PARTIAL and hi < seg.size and res.end > pos:
                        pos = res.end
                        within = pos - seg.start
                        continue
                    break
            finally:
                view.release()
        pos = res.end
        if res.stop is not ScanStop.END:
            return pos, res.stop, res.detail
        if pos - seg.start == seg_bytes and not is_last:
            continue  # segment finished with its blank; go on with the next one
        if not is_last:
            return (
                pos,
                ScanStop.PARTIAL,
                (
                    f"segment {seg.path.name} ends at {pos} without a blank record but later "
                    "segments exist"
                ),
            )
        return pos, ScanStop.END, ""


def recover(
    commitlog: CommitLog,
    queues: ConsumeQueueSet,
    *,
    checkpoint_offset: int | None,
    verify_crc: bool,
    max_record_bytes: int,
) -> RecoveryReport:
    """Steps 1-4 of the module docstring (the caller does step 5)."""
    low, high = commitlog.min_offset, commitlog.max_offset
    if checkpoint_offset is not None and low <= checkpoint_offset <= high:
        start = checkpoint_offset
    else:
        if commitlog.segments and checkpoint_offset is not None:
            log.warning(
                "checkpoint recoverOffset %d is outside the log [%d, %d]; scanning everything",
                checkpoint_offset, low, high,
            )  # fmt: skip
        start = low
    full_rebuild = False
    if _index_lags(commitlog, queues, start):
        log.warning("consume queues end before the checkpoint %d (deleted?); rebuilding all", start)
        queues.destroy()
        start = low
        full_rebuild = True
    while True:
        dropped = queues.truncate_physical(start)
        count = 0
        unindexed = 0

        def dispatch(records: list[RecordIndex]) -> None:
            nonlocal count, unindexed
            bad = queues.first_mismatch(records)
            if bad is not None:
                raise _QueueMismatch(
                    f"record at {bad.physical_offset} has queue offset {bad.queue_offset} for "
                    f"{bad.topic}/{bad.queue_id}, consume queue ends at "
                    f"{queues.next_queue_offset((bad.topic, bad.queue_id))}"
                )
            skipped = queues.dispatch(records)
            if skipped:
                unindexed += len(skipped)
                log.error("recovery: %s", describe_unindexed(skipped))
            count += len(records) - len(skipped)

        try:
            end, stop, detail = scan_log(
                commitlog, start, verify_crc=verify_crc, max_record_bytes=max_record_bytes,
                on_records=dispatch,
            )  # fmt: skip
        except _QueueMismatch as exc:
            if full_rebuild:
                raise
            log.warning("consume queues disagree with the commit log (%s); rebuilding all", exc)
            queues.destroy()
            start = low
            full_rebuild = True
            continue
        break
    truncated = high - end
    if truncated:
        zeros_only = stop is ScanStop.ZEROS and _all_zero(commitlog, end, high)
        level = logging.INFO if zeros_only else logging.WARNING
        log.log(
            level,
            "recovery: cutting %d bytes of the commit log after offset %d (log ended at %d): %s%s",
            truncated, end, high, stop.value, f" ({detail})" if detail else "",
        )  # fmt: skip
        commitlog.truncate(end)
        dropped += queues.truncate_physical(end)
    return RecoveryReport(
        scan_from=start,
        end=end,
        truncated_bytes=truncated,
        stop=stop,
        detail=detail,
        records_dispatched=count,
        records_unindexed=unindexed,
        consume_queue_entries_dropped=dropped,
        full_rebuild=full_rebuild,
    )


def _index_lags(commitlog: CommitLog, queues: ConsumeQueueSet, start: int) -> bool:
    """True if a whole record before `start` is missing from every consume queue.

    Records before the checkpoint are indexed, so between the largest indexed record end
    and `start` only a blank can lie; a message there means the index was lost (e.g. the
    consumequeue directory was deleted to force a rebuild, as RocketMQ allows).
    """
    begin = max(queues.max_record_end(), commitlog.min_offset)
    if begin >= start:
        return False
    probe = commitlog.read(begin, commitlog.segment_bytes, start)
    res = scan_records(probe, begin, commitlog.segment_bytes, verify_crc=False)
    return bool(res.records)


def _all_zero(commitlog: CommitLog, start: int, end: int) -> bool:
    pos = start
    while pos < end:
        seg = commitlog.segment_for(pos)
        if seg is None:
            return True
        chunk = os.pread(seg.fd, min(end - pos, seg.end - pos, 1 << 20), pos - seg.start)
        if not chunk or chunk.count(0) != len(chunk):
            return not chunk
        pos += len(chunk)
    return True


def recover_store(
    root: Path,
    config: StoreConfig,
    commitlog: CommitLog,
    queues: ConsumeQueueSet,
    checkpoint: StoreCheckpoint,
    epoch_file: EpochFile,
    *,
    min_offset_floor: int = 0,
) -> RecoveryReport:
    """Steps 1-5 of the module docstring, and the metadata made to agree with the
    recovered log (confirmOffset clamped, epoch entries past the end dropped), and with
    its start: a crash in the middle of a retention deletion (retention.py) may have
    left consume queue entries and epoch entries before the log's minimum; both are
    trimmed to it here, and the queues to the served floor `min_offset_floor`."""
    report = recover(
        commitlog,
        queues,
        checkpoint_offset=checkpoint.recover_offset if checkpoint.loaded_from_disk else None,
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
    # Retention (crash between the unlink and these steps, or a floor learned as slave).
    trimmed = queues.set_min_physical(max(commitlog.min_offset, min_offset_floor))
    if trimmed:
        log.info("recovery: %d consume queue entries before the served minimum left", trimmed)
    epoch_file.truncate_prefix(commitlog.min_offset)
    log.info(
        "store %s recovered: log [%d, %d), scanned from %d, %d records re-indexed",
        root, commitlog.min_offset, report.end, report.scan_from, report.records_dispatched,
    )  # fmt: skip
    return report
