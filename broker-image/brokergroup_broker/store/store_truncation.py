"""Cutting the message store's log (DESIGN.md §3.1–§3.2): truncation to an
epoch boundary at the HA handshake, a partial tail left by a torn append, a
reset for a replica that starts from the master's minimum offset. A mixin of
`MessageStore`, which holds the state (declared in `StoreState`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .errors import (
    OffsetOutOfRange,
)
from .message_scan import scan_records

if TYPE_CHECKING:
    from .store import MessageStore

from .store_state import StoreState

log = logging.getLogger(__name__)


class StoreTruncation(StoreState):
    # -- truncation -----------------------------------------------------------------------
    def truncate(self: MessageStore, offset: int) -> None:
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

    def _rebuild_tail_state(self: MessageStore) -> None:
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

    def truncate_partial_tail(self: MessageStore) -> int:
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

    def reset(self: MessageStore, offset: int) -> None:
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
