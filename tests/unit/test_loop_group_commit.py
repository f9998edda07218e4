"""The master's group commit on its event loop (`LoopGroupCommit`, `SyncPlacement`;
store/group_commit.py "The master"): one fdatasync per loop pass covers every append
of the pass and runs after what the pass had already scheduled (the HA senders); it is
reported on the loop; a slow sync sends the next ones to the thread and the loop is tried
again later; failures, truncations and the flush timer behave as the thread's. Real
files in tmp_path, a real asyncio loop; fdatasync is wrapped to see where it ran.
"""

from __future__ import annotations

import asyncio
import errno
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
    LoopGroupCommit,
    MessageInput,
    MessageStore,
    StoreConfig,
    StoreError,
    SyncPlacement,
)

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
            if i == 0:  # the first wakes the HA senders (they send up to the log's end)
                loop.call_soon(rec.mark("ha"))
            service.request(ends[-1])
        assert store.flushed_offset == 0 and rec.events == []  # nothing synced inside the pass
        await passes()
        me = threading.get_ident()
        assert rec.events == [("ha", me), ("fdatasync", me)]
        assert flushed == [(ends[-1], me)] and store.flushed_offset == ends[-1]
        assert service.syncs_on_loop == 1


async def test_a_slow_sync_sends_the_next_ones_to_the_thread_until_the_loop_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder(monkeypatch)
    now = [100.0]
    # Every sync takes 0.01 s of this clock, over slow_s: the first one decides.
    placement = SyncPlacement(slow_s=0.005, thread_s=30.0)

    def clock() -> float:
        now[0] += 0.01
        return now[0]

    me = threading.get_ident()
    with running(tmp_path, placement=placement, clock_s=clock) as (store, service, flushed):
        first = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
        service.request(first)
        await passes()
        assert rec.syncs() == [me] and flushed == [(first, me)]
        assert not placement.on_loop(now[0])

        second = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
        service.request(second)
        for _ in range(500):  # the thread syncs; its report hops to the loop
            await asyncio.sleep(0.01)
            if len(flushed) == 2:
                break
        assert [offset for offset, _ in flushed] == [first, second]
        assert flushed[1][1] == me  # reported on the loop
        assert len(rec.syncs()) == 2 and rec.syncs()[1] != me  # synced in the thread
        assert service.syncs_on_loop == 1

        now[0] += 30.0  # thread_s later: the loop again
        third = store.put_messages(batch(2), HOST, 1, flush=False).end_offset
        service.request(third)
        await passes()
        assert rec.syncs()[2] == me and service.syncs_on_loop == 2
        assert flushed[-1] == (third, me)


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
    st.lists(st.tuples(st.floats(0, 0.01), st.floats(0, 100)), max_size=30),  # (took, gap)
    st.floats(0, 100),
    st.integers(0, 1 << 20),
)
def test_sync_placement_is_the_thread_within_thread_s_of_the_last_slow_sync_or_for_much_data(
    observations: list[tuple[float, float]], later: float, unsynced: int
) -> None:
    placement = SyncPlacement(slow_s=0.002, thread_s=30.0, loop_max_bytes=64 << 10)
    now = 0.0
    last_slow: float | None = None

    def expected(at: float, size: int) -> bool:
        return size <= 64 << 10 and (last_slow is None or at >= last_slow + 30.0)

    for duration, gap in observations:
        now += gap
        placement.observe(duration, now)
        if duration > 0.002:
            last_slow = now
        assert placement.on_loop(now) == expected(now, 0)
        assert placement.on_loop(now, unsynced) == expected(now, unsynced)
    now += later
    assert placement.on_loop(now, unsynced) == expected(now, unsynced)
