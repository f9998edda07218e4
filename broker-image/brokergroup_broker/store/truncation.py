"""Cutting the store's log (DESIGN.md §3.1–§3.2): truncation to an epoch boundary at
the HA handshake, a partial tail left by a torn append, a reset for a replica that
starts from the master's minimum offset. Takes both store locks (flush, then write),
so no fd is closed while being synced; the tail state belongs to the `Appender`,
the flushed end and the checkpoint to `Durability`."""

from __future__ import annotations

import logging
from pathlib import Path

from .appender import Appender
from .commitlog import CommitLog
from .consume_queue import ConsumeQueueSet
from .durability import Durability
from .errors import OffsetOutOfRange
from .health import StoreHealth
from .locks import StoreLocks
from .retention import MinOffsetFloor

log = logging.getLogger(__name__)


class Truncation:
    def __init__(
        self,
        root: Path,
        locks: StoreLocks,
        health: StoreHealth,
        commitlog: CommitLog,
        queues: ConsumeQueueSet,
        appender: Appender,
        durability: Durability,
        floor: MinOffsetFloor,
    ) -> None:
        self._root = root
        self._locks = locks
        self._health = health
        self._commitlog = commitlog
        self._queues = queues
        self._appender = appender
        self._durability = durability
        self._floor = floor

    def truncate(self, offset: int) -> None:
        """Cut the commit log and consume queues to end at `offset` (HA truncation point).

        The epoch file is the caller's (epoch_file.truncate_suffix), as is deciding the point.
        """
        with self._locks.flush, self._locks.write:
            self._health.check_open()
            low, high = self._commitlog.min_offset, self._commitlog.max_offset
            if not low <= offset <= high:
                raise OffsetOutOfRange("truncate", offset, low, high)
            if offset == high:
                return
            removed = self._commitlog.truncate(offset)
            dropped = self._queues.truncate_physical(offset)
            self._appender.after_cut()
            self._durability.after_truncate(offset, self._appender.last_record_end)
        self._queues.arrivals.wake_all()  # held pulls past the cut answer OFFSET_MOVED
        log.warning(
            "store %s truncated to %d: %d commit log bytes and %d consume queue entries removed",
            self._root, offset, removed, dropped,
        )  # fmt: skip

    def truncate_partial_tail(self) -> int:
        """Cut a record still arriving (slave) so the log ends at a whole record; returns the
        new max_offset. Call before writing as master (DESIGN.md §3.2)."""
        with self._locks.flush, self._locks.write:
            self._health.check_open()
            removed = self._appender.cut_partial_tail()
            if removed:
                at = self._appender.last_record_end
                self._durability.cut_to(at)
                log.warning(
                    "store %s: cut %d bytes of a partial record at %d", self._root, removed, at
                )
            return self._commitlog.max_offset

    def reset(self, offset: int) -> None:
        """Drop the whole log and index and start empty at `offset` (a segment boundary):
        the full resync when a slave shares no epoch with the master (DESIGN.md §3.2)."""
        with self._locks.flush, self._locks.write:
            self._health.check_open()
            log.warning(
                "store %s: dropping the whole log [%d, %d) to resync from %d",
                self._root, self._commitlog.min_offset, self._commitlog.max_offset, offset,
            )  # fmt: skip
            self._commitlog.reset(offset)
            self._queues.destroy()
            self._queues.set_min_physical(max(offset, self._floor.value))
            self._appender.reset_to(offset)
            self._durability.after_reset(offset)
        self._queues.arrivals.wake_all()
