"""Group commit off the event loop (RocketMQ's ``CommitLog.GroupCommitService``).

Theory of operation
-------------------
On SYNC_FLUSH a writer on an asyncio loop must not call fdatasync itself: one
fdatasync takes 0.2-2 ms, during which the loop neither reads requests, nor
streams to slaves, nor processes acks. Instead the writer appends without
syncing (``put_messages(..., flush=False)`` / ``append_replicated(...,
flush=False)``, which keeps append order because it runs on the loop) and
calls ``request(end)``. One thread, this service, fdatasyncs the commit log up
to its max offset whenever some requested end is not yet flushed, then calls
``on_flushed(flushed_offset)`` from that thread (the owner hops to its loop
with ``call_soon_threadsafe``). Every writer that appended while a sync was
running is covered by the next single fdatasync: under load one sync serves
many batches, so the sync rate stays near the disk's and the batch per sync
grows with the load.

Durability is unchanged: nobody acknowledges on the strength of a write
alone. The master counts its own replica at ``store.flushed_offset`` (commit
rule, DESIGN.md §3.3) and the slave acks ``min(flushed_offset, max_offset)``,
both of which only move after an fdatasync returned.

Errors: a failed fdatasync makes the store unwritable (``MessageStore``
records it); the service reports it through ``on_error`` and waits for the
next request instead of retrying in a loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable

from .errors import StoreError
from .store import MessageStore

log = logging.getLogger(__name__)


class GroupCommitService:
    """One fdatasync thread for one store. ``start()``, ``request(end)``, ``stop()``."""

    def __init__(
        self,
        store: MessageStore,
        *,
        on_flushed: Callable[[int], None],
        on_error: Callable[[StoreError], None] | None = None,
        name: str = "group-commit",
    ) -> None:
        self._store = store
        self._on_flushed = on_flushed
        self._on_error = on_error
        # The thread sleeps in a read of this eventfd: a writer wakes it with one
        # write(2) and never waits for a lock the thread may hold (a Condition made
        # the event loop block, and hand the GIL back and forth, on every batch).
        self._wakeup = os.eventfd(0, os.EFD_CLOEXEC)
        self._requested = -1
        self._request_lock = threading.Lock()
        self._idle = False
        self._stopping = False
        # The flushed offset last given to on_flushed. Compared by inequality, not
        # order: a truncation moves it down, and what is synced after that is news.
        self._reported = store.flushed_offset
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, end: int) -> None:
        """Ask for [.., end) to become durable; returns at once, never blocks. Thread-safe.

        `_requested` is stored before `_idle` is read here, and the thread sets
        `_idle` before it re-reads `_requested`, so either this call sees the thread
        idle and writes the eventfd, or the thread sees the new request.

        A request at or below an earlier one still wakes an idle thread: after the
        log was truncated, bytes below the earlier request are new and unsynced
        (the thread re-checks `needs_sync`, so a wake with nothing to do is cheap)."""
        if end > self._requested:
            with self._request_lock:  # several writer threads: keep _requested monotonic
                if end > self._requested:
                    self._requested = end
        if self._idle and not self._stopping:
            self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # closed after stop(): nothing to wake
            os.eventfd_write(self._wakeup, 1)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish the sync in progress (if any) and end the thread; bounded."""
        self._stopping = True
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if not self._thread.is_alive() and self._wakeup >= 0:
            fd, self._wakeup = self._wakeup, -1
            os.close(fd)

    def _sleep_unless(self, ready: Callable[[], bool]) -> None:
        """Block until woken, unless `ready()` (or stop) already holds once idle is set."""
        self._idle = True
        try:
            if not self._stopping and not ready():
                os.eventfd_read(self._wakeup)  # resets the counter; spurious wakes are fine
        finally:
            self._idle = False

    def _wait_for_request_after(self, failed_at: int) -> None:
        """After a failure: sleep until a new request (or stop)."""
        while not self._stopping and self._requested <= failed_at:
            self._sleep_unless(lambda: self._requested > failed_at)

    def _run(self) -> None:
        store = self._store
        while True:
            if self._stopping:
                return
            if not store.needs_sync(self._requested):
                # What was asked may be durable without this thread: the broker's flush
                # timer (store.flush) synced it. Report it all the same, or an owner that
                # acknowledges on `on_flushed` (a slave's acks) waits for an unrelated event.
                self._report(store.flushed_offset)
                self._sleep_unless(lambda: store.needs_sync(self._requested))
                continue
            failed_at = self._requested
            try:
                flushed = store.sync_log()
            except StoreError as exc:
                log.error("group commit: fdatasync failed: %s", exc)
                if self._on_error is not None:
                    self._on_error(exc)
                self._wait_for_request_after(failed_at)  # do not spin on a broken disk
                continue
            except Exception:  # a bug: log it, keep the thread (the owner sees no progress)
                log.exception("group commit: unexpected error")
                self._wait_for_request_after(failed_at)
                continue
            self._report(flushed)

    def _report(self, flushed: int) -> None:
        if flushed == self._reported:
            return
        self._reported = flushed
        try:
            self._on_flushed(flushed)
        except Exception:
            log.exception("group commit: on_flushed(%d) failed", flushed)
