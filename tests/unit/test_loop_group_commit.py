"""The master's group commit on its event loop (`LoopGroupCommit`, `SyncPlacement`;
store/group_commit.py "The master"): one fdatasync per loop pass covers every append
of the pass and runs after what the pass had already scheduled (the HA senders); it is
reported on the loop; mostly slow syncs send the next ones to the thread and the loop is
tried again later (one slow sync does not); failures, truncations and the flush timer
behave as the thread's. Real files in tmp_path, a real asyncio loop; fdatasync is wrapped
to see where it ran.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.store import (
    GroupCommitCounts,
    LoopGroupCommit,
    MessageInput,
    MessageStore,
    StoreConfig,
    StoreError,
    SyncPlacement,
)
from tests.unit.conftest import eventually

HOST = ("127.0.0.1", 10911)
Flushed = list[tuple[int, int]]  # (offset reported, the thread it was reported on)


def batch(n: int) -> list[MessageInput]:
    return [MessageInput("T", 0, b"x" * 100) for _ in range(n)]


def open_store(root: Path) -> MessageStore:
    return MessageStore.open(root, StoreConfig(commit_log_segment_bytes=1 << 20))


class Recorder:
    """What happened, in order: fdatasyncs (with the thread they ran on) and markers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        self.events: list[tuple[str, int]] = []
        real = os.fdatasync

        def fdatasync(fd: int) -> None:
            self.events.append(("fdatasync", threading.get_ident()))
            if fail:
                raise OSError(errno.EIO, "injected")
            real(fd)

        monkeypatch.setattr(os, "fdatasync", fdatasync)

    def mark(self, name: str) -> Callable[[], None]:
        return lambda: self.events.append((name, threading.get_ident()))

    def syncs(self) -> list[int]:
        return [thread for name, thread in self.events if name == "fdatasync"]


def committer(
    store: MessageStore,
    loop: asyncio.AbstractEventLoop,
    flushed: list[tuple[int, int]],
    **kwargs: Any,
) -> LoopGroupCommit:
    service = LoopGroupCommit(
        store,
        loop=loop,
        on_flushed=lambda offset: flushed.append((offset, threading.get_ident())),
        **kwargs,
    )
    service.start()
    return service


@contextmanager
def running(root: Path, **kwargs: Any) -> Iterator[tuple[MessageStore, LoopGroupCommit, Flushed]]:
    """A started committer on a fresh store; stopped and closed after the test."""
    store = open_store(root)
    flushed: Flushed = []
    service = committer(store, asyncio.get_running_loop(), flushed, **kwargs)
    try:
        yield store, service, flushed
    finally:
        service.stop()
        store.close()


async def passes(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_one_fdatasync_per_loop_pass_after_what_the_pass_scheduled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder(monkeypatch)
    with running(tmp_path) as (store, service, flushed):
        loop = asyncio.get_running_loop()
        ends = []
        for i in range(5):  # five produces handled in one pass
            ends.append(store.put_messages(batch(3), HOST, 1, flush=False).end_offset)
            # The first wakes the HA senders (they send up to the log's end): a task step.
            wake = (lambda: loop.call_soon(rec.mark("ha"))) if i == 0 else None
            service.request(ends[-1], wake)
        assert store.flushed_offset == 0 and rec.events == []  # nothing synced inside the pass
        await passes()
        me = threading.get_ident()
        assert rec.events == [("ha", me), ("fdatasync", me)]
        assert flushed == [(ends[-1], me)] and store.flushed_offset == ends[-1]
        assert service.syncs_on_loop == 1


async def test_mostly_slow_syncs_send_the_next_ones_to_the_thread_until_the_loop_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder(monkeypatch)
    now = [100.0]
    # Every sync takes 0.01 s of this clock, over slow_s: the second of a window of 3 decides.
    placement = SyncPlacement(slow_s=0.005, thread_s=30.0, window=3)

    def clock() -> float:
        now[0] += 0.01
        return now[0]

    me = threading.get_ident()
    with running(tmp_path, placement=placement, clock_s=clock) as (store, service, flushed):
        ends = []
        for _ in range(2):
            ends.append(store.put_messages(batch(2), HOST, 1, flush=False).end_offset)
            service.request(ends[-1])
            await passes()
        assert rec.syncs() == [me, me] and flushed == [(end, me) for end in ends]
        assert not placement.on_loop(now[0])
        assert service.counts() == GroupCommitCounts(2, 0, 1)

        ends.append(store.put_messages(batch(2), HOST, 1, flush=False).end_offset)
        service.request(ends[-1])
        for _ in range(500):  # the thread syncs; its report hops to the loop
            await asyncio.sleep(0.01)
            if len(flushed) == 3:
                break
        assert [offset for offset, _ in flushed] == ends
        assert flushed[2][1] == me  # reported on the loop
        assert len(rec.syncs()) == 3 and rec.syncs()[2] != me  # synced in the thread
        assert service.counts() == GroupCommitCounts(2, 1, 1)

        now[0] += 30.0  # thread_s later: the loop again, with a fresh window
        ends.append(store.put_messages(batch(2), HOST, 1, flush=False).end_offset)
        service.request(ends[-1])
        await passes()
        assert rec.syncs()[3] == me and flushed[-1] == (ends[-1], me)
        assert placement.on_loop(now[0])  # one slow sync of a fresh window is not a majority
        assert service.counts() == GroupCommitCounts(3, 1, 1)


async def test_one_slow_sync_among_fast_ones_stays_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh segment's first fdatasync, or one preempted on a busy machine, is slow once:
    before, that one sync sent the next 30 s to the thread (a benchmark's whole window)."""
    rec = Recorder(monkeypatch)
    took = itertools.chain([0.003], itertools.repeat(0.0002))  # the first over slow_s (2 ms)
    now = [100.0]
    recorded = os.fdatasync

    def fdatasync(fd: int) -> None:  # each fdatasync takes `took` of the test's clock
        now[0] += next(took)
        recorded(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    me = threading.get_ident()
    with running(tmp_path, clock_s=lambda: now[0]) as (store, service, flushed):
        for _ in range(40):
            end = store.put_messages(batch(1), HOST, 1, flush=False).end_offset
            service.request(end)
            await passes()
            now[0] += 0.001
        assert rec.syncs() == [me] * 40 and flushed[-1] == (end, me)
        assert service.counts() == GroupCommitCounts(40, 0, 0)


async def test_the_ha_wake_up_is_called_once_on_every_path_and_after_asking_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wake` (the commit rule's wait_for_ack) is never lost, whichever path the sync
    takes; a sync in the thread is asked for first, so its fdatasync starts at once."""
    Recorder(monkeypatch)
    placement = SyncPlacement(loop_max_bytes=1000)
    woken: list[tuple[str, bool]] = []  # (path, was the thread already asked)
    with running(tmp_path, placement=placement) as (store, service, flushed):
        thread = service._thread  # what the thread was asked for, read at the wake-up

        def wake(path: str, end: int) -> Callable[[], None]:
            return lambda: woken.append((path, thread._requested >= end))

        small = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
        service.request(small, wake("loop", small))
        await passes()
        large = store.put_messages(batch(30), HOST, 1, flush=False).end_offset
        service.request(large, wake("thread", large))
        await eventually(lambda: bool(flushed) and flushed[-1][0] == large, "the thread's report")
        service.stop()
        service.request(large + 1, wake("stopped", large + 1))
    assert woken == [("loop", False), ("thread", True), ("stopped", False)]


async def test_a_sync_covering_more_than_loop_max_bytes_runs_in_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch load: the loop has its own work to overlap the thread's fdatasync with.
    rec = Recorder(monkeypatch)
    placement = SyncPlacement(loop_max_bytes=1000)
    me = threading.get_ident()
    with running(tmp_path, placement=placement) as (store, service, flushed):
        small = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
        assert small <= 1000
        service.request(small)
        await passes()
        assert rec.syncs() == [me]
        large = store.put_messages(batch(20), HOST, 1, flush=False).end_offset
        assert large - small > 1000
        service.request(large)
        for _ in range(500):
            await asyncio.sleep(0.01)
            if len(flushed) == 2:
                break
        assert flushed == [(small, me), (large, me)]
        assert len(rec.syncs()) == 2 and rec.syncs()[1] != me and service.syncs_on_loop == 1
        assert placement.on_loop(0.0)  # only that sync went to the thread


async def test_a_failed_fdatasync_is_reported_once_and_not_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    store = open_store(tmp_path)
    errors: list[StoreError] = []
    flushed: list[tuple[int, int]] = []
    appended = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
    rec = Recorder(monkeypatch, fail=True)
    service = committer(store, loop, flushed, on_error=errors.append)
    try:
        service.request(appended)
        await passes()
        service.request(appended)  # the same end again: no retry on a broken disk
        await passes()
        assert len(rec.syncs()) == 1 and len(errors) == 1 and flushed == []
        assert store.flushed_offset == 0 and not store.writable()[0]
    finally:
        service.stop()
        monkeypatch.undo()
        store.close(flush=False)


async def test_after_a_truncation_a_lower_request_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with running(tmp_path) as (store, service, flushed):
        first = store.put_messages(batch(10), HOST, 1, flush=False)
        service.request(first.end_offset)
        await passes()
        assert store.flushed_offset == first.end_offset
        store.truncate(first.messages[5].physical_offset)
        again = store.put_messages(batch(3), HOST, 1, flush=False)
        assert again.end_offset < first.end_offset
        service.request(again.end_offset)
        await passes()
        assert store.flushed_offset == again.end_offset
        assert flushed[-1][0] == again.end_offset


async def test_a_request_the_flush_timer_synced_is_still_reported(tmp_path: Path) -> None:
    with running(tmp_path) as (store, service, flushed):
        appended = store.put_messages(batch(4), HOST, 1, flush=False).end_offset
        store.flush()
        service.request(appended)
        await passes()
        assert [offset for offset, _ in flushed] == [appended]
        assert service.syncs_on_loop == 0


async def test_nothing_syncs_on_the_loop_after_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    store = open_store(tmp_path)
    rec = Recorder(monkeypatch)
    flushed: list[tuple[int, int]] = []
    service = committer(store, loop, flushed)
    appended = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
    service.request(appended)  # scheduled for the next pass
    service.stop()
    service.request(appended)
    await passes()
    assert rec.syncs() == [] and flushed == []
    store.close()


@given(
    st.lists(st.tuples(st.floats(0, 0.01), st.floats(0, 100)), max_size=60),  # (took, gap)
    st.floats(0, 100),
    st.integers(0, 1 << 20),
    st.integers(1, 8),
)
def test_sync_placement_is_the_thread_within_thread_s_of_a_slow_majority_or_for_much_data(
    observations: list[tuple[float, float]], later: float, unsynced: int, window: int
) -> None:
    placement = SyncPlacement(slow_s=0.002, thread_s=30.0, loop_max_bytes=64 << 10, window=window)
    now = 0.0
    recent: list[bool] = []  # the model: the last `window` syncs since the last move
    moved_at: float | None = None
    moves = 0

    def expected(at: float, size: int) -> bool:
        return size <= 64 << 10 and (moved_at is None or at >= moved_at + 30.0)

    for duration, gap in observations:
        now += gap
        recent = [*recent, duration > 0.002][-window:]
        majority = 2 * sum(recent) > window
        if majority:
            moved_at, recent, moves = now, [], moves + 1
        assert placement.observe(duration, now) == majority
        assert placement.on_loop(now) == expected(now, 0)
        assert placement.on_loop(now, unsynced) == expected(now, unsynced)
    now += later
    assert placement.on_loop(now, unsynced) == expected(now, unsynced)
    assert placement.moves_to_thread == moves
