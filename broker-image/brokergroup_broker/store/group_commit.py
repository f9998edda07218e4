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

import logging
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
        self._cond = threading.Condition()
        self._requested = -1
        self._request_lock = threading.Lock()
        self._idle = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self, end: int) -> None:
        """Ask for [.., end) to become durable; returns at once. Thread-safe.

        Takes the lock only to wake an idle thread: `_requested` is stored before
        `_idle` is read here, and the thread sets `_idle` before it re-reads
        `_requested` under the lock, so one of the two always sees the other."""
        if end <= self._requested:
            return
        with self._request_lock:  # several writer threads: keep _requested monotonic
            if end > self._requested:
                self._requested = end
        if self._idle:
            with self._cond:
                self._cond.notify()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish the sync in progress (if any) and end the thread; bounded."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        store = self._store
        while True:
            with self._cond:
                self._idle = True
                while not self._stopping and not store.needs_sync(self._requested):
                    self._cond.wait()
                self._idle = False
                if self._stopping:
                    return
                failed_at = self._requested
            try:
                flushed = store.sync_log()
            except StoreError as exc:
                log.error("group commit: fdatasync failed: %s", exc)
                if self._on_error is not None:
                    self._on_error(exc)
                with self._cond:
                    # Wait for a new request (or stop): do not spin on a broken disk.
                    while not self._stopping and self._requested <= failed_at:
                        self._cond.wait()
                continue
            except Exception:  # a bug: log it, keep the thread (the owner sees no progress)
                log.exception("group commit: unexpected error")
                with self._cond:
                    while not self._stopping and self._requested <= failed_at:
                        self._cond.wait()
                continue
            try:
                self._on_flushed(flushed)
            except Exception:
                log.exception("group commit: on_flushed(%d) failed", flushed)
