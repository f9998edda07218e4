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

The master: on the loop while the disk is fast
----------------------------------------------
The hand-off costs more than it saves on a fast disk. Each sync the thread
makes, it must take the GIL back when fdatasync returns (the loop holds it
while it runs Python), wake the loop through ``call_soon_threadsafe``, and
its lock and GIL waits make the loop wait in turn: under the stock client's
16 single sends the master's thread waited for the GIL a third of its time
and the loop ~9 % of its own (docs/performance.md). ``LoopGroupCommit``, the
master's, fdatasyncs on the loop instead: once per loop pass that appended,
after that pass's HA sends were woken (the slaves' round runs beside the
fdatasync), covering every append of the pass. ``SyncPlacement`` (pure)
sends a sync to a ``GroupCommitService`` thread instead when it would cover
more than ``loop_max_bytes`` (batches: the loop has work of its own to
overlap the fdatasync with, and the hand-off is a small part of it), and
every sync for ``thread_s`` once most of the recent syncs on the loop took
longer than ``slow_s`` (a slow disk would stall everything else on the loop
for the whole sync), then tries the loop again. ``counts()`` says where the
syncs ran (/v1/status ``groupCommit``, /metrics). Durability is the same either way:
the same ``sync_log`` under the store's flush lock, and ``on_flushed`` only
after it returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

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
        self.syncs = 0
        """fdatasyncs this thread made."""

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
        fd = self._wakeup
        if fd < 0:
            return  # closed by stop(): nothing to wake (a second stop() comes here)
        with contextlib.suppress(OSError):  # closed meanwhile: nothing to wake
            os.eventfd_write(fd, 1)

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
            self.syncs += 1
            self._report(flushed)

    def _report(self, flushed: int) -> None:
        if flushed == self._reported:
            return
        self._reported = flushed
        try:
            self._on_flushed(flushed)
        except Exception:
            log.exception("group commit: on_flushed(%d) failed", flushed)


@dataclass
class SyncPlacement:
    """Where the master's next group-commit fdatasync runs (pure: times and sizes in, a
    decision out).

    On the loop by default; in the thread for a sync covering more than `loop_max_bytes`;
    once more than half of the last `window` syncs on the loop took longer than `slow_s`,
    in the thread until `thread_s` later, and then on the loop again with the window
    emptied (a disk that is still slow sends it back after `window` // 2 + 1 slow syncs).
    A majority, not one sync: a fresh segment's first fdatasync, or one preempted on a
    busy machine, is slow once, and one 2.8 ms sync in a benchmark's first second sent
    every sync of its measured window to the thread (docs/performance.md)."""

    slow_s: float = 0.002
    thread_s: float = 30.0
    loop_max_bytes: int = 64 << 10
    window: int = 16
    moves_to_thread: int = field(default=0, init=False)
    """How often the syncs moved to the thread (for /metrics and /v1/status)."""
    _thread_until_s: float = field(default=float("-inf"), init=False)
    _recent: deque[bool] = field(init=False)  # the last `window` loop syncs: slow or not
    _slow: int = field(default=0, init=False)  # how many of `_recent` are slow

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=self.window)

    def on_loop(self, now_s: float, unsynced_bytes: int = 0) -> bool:
        """True: sync on the loop. `unsynced_bytes`: what the sync would cover; over
        `loop_max_bytes` (batches) the loop has enough work of its own to overlap the
        thread's fdatasync with, and the hand-off is a small part of it."""
        return unsynced_bytes <= self.loop_max_bytes and now_s >= self._thread_until_s

    def observe(self, duration_s: float, now_s: float) -> bool:
        """An fdatasync on the loop took `duration_s` and ended at `now_s`; True when
        this one moved the syncs to the thread."""
        if len(self._recent) == self.window:
            self._slow -= self._recent[0]
        slow = duration_s > self.slow_s
        self._recent.append(slow)
        self._slow += slow
        if self._slow * 2 <= self.window:
            return False
        self._thread_until_s = now_s + self.thread_s
        self._recent.clear()
        self._slow = 0
        self.moves_to_thread += 1
        return True


@dataclass(frozen=True)
class GroupCommitCounts:
    """The master's fdatasyncs by where they ran, and how often they moved to the thread."""

    loop_syncs: int
    thread_syncs: int
    moves_to_thread: int

    def as_json(self) -> dict[str, int]:
        return {
            "loopSyncs": self.loop_syncs,
            "threadSyncs": self.thread_syncs,
            "movesToThread": self.moves_to_thread,
        }


class LoopGroupCommit:
    """The master's group commit: ``start()``, ``request(end)`` and ``stop()`` as
    ``GroupCommitService``, but ``request`` is called on `loop` and `on_flushed` /
    `on_error` run there too. See the module's "The master" for why and when."""

    def __init__(
        self,
        store: MessageStore,
        *,
        loop: asyncio.AbstractEventLoop,
        on_flushed: Callable[[int], None],
        on_error: Callable[[StoreError], None] | None = None,
        name: str = "group-commit",
        placement: SyncPlacement | None = None,
        clock_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._loop = loop
        self._on_flushed = on_flushed
        self._on_error = on_error
        self.placement = placement if placement is not None else SyncPlacement()
        self._clock_s = clock_s
        self._requested = -1
        self._due = False  # a sync is scheduled for this loop pass
        self._failed_at: int | None = None
        self._stopped = False
        self._reported = store.flushed_offset
        self.syncs_on_loop = 0
        """fdatasyncs made on the loop (the thread's are not counted here)."""

        def on_loop(callback: Callable[..., None], *args: object) -> None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(callback, *args)

        self._thread = GroupCommitService(
            store,
            on_flushed=lambda offset: on_loop(on_flushed, offset),
            on_error=None if on_error is None else lambda exc: on_loop(on_error, exc),
            name=name,
        )

    def start(self) -> None:
        self._thread.start()

    def request(self, end: int, wake: Callable[[], None] | None = None) -> None:
        """Ask for [.., end) to become durable; on the loop, returns at once. `wake`: what
        sends these bytes to the slaves (the commit rule's `wait_for_ack`), called here in
        the order that overlaps them with the sync: after the thread was asked (its
        fdatasync starts at once), before a sync on the loop is scheduled (it runs after
        the HA senders `wake` woke)."""
        in_thread = not self._stopped and not self.placement.on_loop(
            self._clock_s(), end - self._store.flushed_offset
        )
        if in_thread:
            self._thread.request(end)
        if wake is not None:
            wake()
        if self._stopped or in_thread:
            return
        # As the thread's: the highest end asked (`needs_sync` compares it with the log's
        # end, so after a truncation the bytes below it are still found unsynced).
        self._requested = max(self._requested, end)
        if not self._due:
            self._due = True
            # call_soon: after the HA senders this append woke, and after every append
            # of this pass, so one fdatasync covers them while the slaves receive.
            self._loop.call_soon(self._sync)

    def _sync(self) -> None:
        self._due = False
        store = self._store
        if self._stopped:
            return
        if self._failed_at is not None and self._requested <= self._failed_at:
            return  # as the thread: no retry on a broken disk until a new request
        if not store.needs_sync(self._requested):
            self._report(store.flushed_offset)  # synced by someone else (the flush timer)
            return
        failed_at = self._requested
        started = self._clock_s()
        try:
            flushed = store.sync_log()
        except StoreError as exc:
            self._failed_at = failed_at
            log.error("group commit: fdatasync failed: %s", exc)
            if self._on_error is not None:
                self._on_error(exc)
            return
        self._failed_at = None
        self.syncs_on_loop += 1
        now = self._clock_s()
        placement = self.placement
        if placement.observe(now - started, now):
            log.info(
                "group commit: more than half of the last %d fdatasyncs on the event loop took "
                "over %.1f ms (this one %.1f ms): syncing in a thread for %.0f s",
                placement.window,
                placement.slow_s * 1000,
                (now - started) * 1000,
                placement.thread_s,
            )
        self._report(flushed)

    def _report(self, flushed: int) -> None:
        if flushed == self._reported:
            return
        self._reported = flushed
        self._on_flushed(flushed)

    def counts(self) -> GroupCommitCounts:
        return GroupCommitCounts(
            self.syncs_on_loop, self._thread.syncs, self.placement.moves_to_thread
        )

    def stop(self, timeout_s: float = 5.0) -> None:
        """No sync starts on the loop after this; the thread's is finished (bounded)."""
        self._stopped = True
        self._thread.stop(timeout_s)
