"""`GroupCommitService` (store/group_commit.py; DESIGN.md §3.1 SYNC_FLUSH): appends
with `flush=False` are not durable (flushed_offset stays put) until the group commit
thread synced them; one request covers every append before it; `on_flushed`
reports an offset covering the request; a failed fdatasync is reported once and
does not spin; stop() ends the thread. Real files in tmp_path, fdatasync stubbed
only for the failure case.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from brokergroup_broker.store import (
    GroupCommitService,
    MessageInput,
    MessageStore,
    StoreConfig,
    StoreError,
)

HOST = ("127.0.0.1", 10911)


def batch(n: int) -> list[MessageInput]:
    return [MessageInput("T", 0, b"x" * 100) for _ in range(n)]


def test_unsynced_append_is_not_flushed_until_the_service_syncs(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, StoreConfig(commit_log_segment_bytes=1 << 20))
    flushed: list[int] = []
    done = threading.Event()

    def on_flushed(offset: int) -> None:
        flushed.append(offset)
        done.set()

    service = GroupCommitService(store, on_flushed=on_flushed)
    try:
        first = store.put_messages(batch(5), HOST, 1, flush=False)
        second = store.put_messages(batch(5), HOST, 1, flush=False)
        assert store.flushed_offset == 0 < second.end_offset  # written, not durable
        assert store.needs_sync(first.end_offset)
        service.start()
        service.request(first.end_offset)
        assert done.wait(5)
        # One sync covered both appends (it syncs to the max offset, not the request).
        assert flushed[0] >= second.end_offset == store.flushed_offset
        assert not store.needs_sync(second.end_offset)
    finally:
        service.stop()
        store.close()


def test_failed_fdatasync_is_reported_and_does_not_spin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(tmp_path, StoreConfig(commit_log_segment_bytes=1 << 20))
    calls = 0

    def broken(fd: int) -> None:
        nonlocal calls
        calls += 1
        raise OSError(errno.EIO, "injected")

    errors: list[StoreError] = []
    reported = threading.Event()

    def on_error(exc: StoreError) -> None:
        errors.append(exc)
        reported.set()

    service = GroupCommitService(store, on_flushed=lambda _o: None, on_error=on_error)
    try:
        res = store.put_messages(batch(2), HOST, 1, flush=False)
        monkeypatch.setattr(os, "fdatasync", broken)
        service.start()
        service.request(res.end_offset)
        assert reported.wait(5)
        threading.Event().wait(0.2)
        assert calls == 1 and len(errors) == 1  # waits for a new request, no retry loop
        assert store.flushed_offset == 0
        assert not store.writable()[0]
    finally:
        service.stop()
        monkeypatch.undo()
        store.close(flush=False)


def test_a_request_below_an_earlier_one_after_a_truncation_is_synced(tmp_path: Path) -> None:
    # A broker's committer lives as long as the process: a log cut back (a slave
    # truncating to the master's epochs, then master again) is appended anew at
    # offsets below what was requested before. Those requests used to return
    # without waking the idle thread: nothing synced them (the commit rule then
    # waited for the 500 ms flush timer, seen as 0.5 s stalls in chaos runs).
    store = MessageStore.open(tmp_path, StoreConfig(commit_log_segment_bytes=1 << 20))
    flushed: list[int] = []
    done = threading.Event()

    def on_flushed(offset: int) -> None:
        flushed.append(offset)
        done.set()

    service = GroupCommitService(store, on_flushed=on_flushed)
    service.start()
    try:
        first = store.put_messages(batch(10), HOST, 1, flush=False)
        service.request(first.end_offset)
        assert done.wait(5) and store.flushed_offset == first.end_offset
        store.truncate(first.messages[5].physical_offset)
        done.clear()
        again = store.put_messages(batch(3), HOST, 1, flush=False)
        assert again.end_offset < first.end_offset  # below the earlier request
        assert store.needs_sync(again.end_offset)
        service.request(again.end_offset)
        assert done.wait(5), "the append after the truncation was never synced"
        assert store.flushed_offset == again.end_offset and not store.needs_sync(again.end_offset)
    finally:
        service.stop()
        store.close()


def test_a_request_already_synced_by_the_flush_timer_is_still_reported(tmp_path: Path) -> None:
    # The broker's flush timer (store.flush every flushIntervalMs) also syncs the
    # log. A request it had already covered found nothing to sync and was never
    # reported: a slave, which acks on on_flushed, sent that ack only with the
    # master's next HA heartbeat (0.5 s stalls of every producer in chaos runs).
    store = MessageStore.open(tmp_path, StoreConfig(commit_log_segment_bytes=1 << 20))
    flushed: list[int] = []
    done = threading.Event()

    def on_flushed(offset: int) -> None:
        flushed.append(offset)
        done.set()

    service = GroupCommitService(store, on_flushed=on_flushed)
    service.start()
    try:
        appended = store.put_messages(batch(4), HOST, 1, flush=False)
        store.flush()  # the timer got there first
        assert not store.needs_sync(appended.end_offset)
        service.request(appended.end_offset)
        assert done.wait(5), "a request the flush timer had synced was never reported"
        assert flushed[-1] >= appended.end_offset
    finally:
        service.stop()
        store.close()
