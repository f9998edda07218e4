"""The periodic flush in two halves (issue 38 item 2; DESIGN.md §3.1 recovery):
`begin_flush` on the event loop (no fdatasync), `finish_flush` in a worker thread.

How: a real SYNC_FLUSH store. Checks: the halves leave the same checkpoint as `flush`; a
consume-queue file written between the halves stays marked for the next flush (so nothing
is reported durable that was not synced); truncation between the halves keeps the
checkpoint at or below the cut; the duplicated descriptors are closed; a "crash" (close
without flush) after the halves reopens with every record and consume-queue entry; the
broker's switch parses its environment variable.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from brokergroup_broker.core.broker import flush_off_loop_from_env
from brokergroup_broker.core.config import BrokerConfigError
from brokergroup_broker.store import FlushDiskType, MessageInput, MessageStore, StoreConfig
from brokergroup_broker.store.checkpoint import StoreCheckpoint

HOST = ("127.0.0.1", 10911)


def open_store(path: Path) -> MessageStore:
    return MessageStore.open(path, StoreConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH))


def put(store: MessageStore, queue_id: int, count: int = 3) -> None:
    store.put_messages(
        [MessageInput(topic="t", queue_id=queue_id, body=b"b%d" % i) for i in range(count)],
        HOST,
        0,
        flush=False,
    )


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_halves_leave_the_checkpoint_flush_leaves(tmp_path: Path) -> None:
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    try:
        for store in (a, b):
            for q in range(4):
                put(store, q)
            store.set_confirm_offset(store.max_offset)
        a.flush()
        fds = open_fds()
        ticket = b.begin_flush()
        assert len(ticket.queue_fds) == 4  # one dirty file per queue
        done: list[int] = []
        worker = threading.Thread(target=lambda: done.append(b.finish_flush(ticket)))
        worker.start()
        worker.join()
        assert done == [b.max_offset] and b.flushed_offset == b.max_offset
        assert open_fds() == fds and ticket.queue_fds == []  # the duplicates closed
        saved_a = StoreCheckpoint.load(tmp_path / "a")
        saved_b = StoreCheckpoint.load(tmp_path / "b")
        assert (saved_b.recover_offset, saved_b.confirm_offset) == (
            saved_a.recover_offset,
            saved_a.confirm_offset,
        )
        assert saved_b.recover_offset == b.max_offset
        assert b.begin_flush().queue_fds == []  # nothing dirty any more
    finally:
        a.close()
        b.close()


def test_a_queue_written_between_the_halves_stays_marked(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        put(store, 0)
        ticket = store.begin_flush()
        put(store, 0)  # the same file, dirtied again after the capture
        put(store, 1)  # a new one
        store.finish_flush(ticket)
        again = store.begin_flush()
        assert len(again.queue_fds) == 2
        store.finish_flush(again)
    finally:
        store.close()


def test_truncation_between_the_halves_keeps_the_checkpoint_at_the_cut(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    try:
        put(store, 0)
        store.flush()
        cut = store.max_offset
        put(store, 0)
        ticket = store.begin_flush()  # recoverOffset read here: past the cut
        assert ticket.recover_offset > cut
        store.truncate(cut)
        store.finish_flush(ticket)
        saved = StoreCheckpoint.load(tmp_path / "s")
        assert saved.recover_offset <= cut
    finally:
        store.close()


def test_a_crash_after_the_halves_keeps_every_record_and_entry(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s")
    for q in range(3):
        put(store, q, count=5)
    store.set_confirm_offset(store.max_offset)
    store.finish_flush(store.begin_flush())
    end = store.max_offset
    store.close(flush=False)  # a crash: nothing more written
    reopened = open_store(tmp_path / "s")
    try:
        assert reopened.max_offset == end
        for q in range(3):
            got = reopened.get_messages("t", q, 0, 10, end)
            assert [bytes(m.body) for m in got] == [b"b%d" % i for i in range(5)]
    finally:
        reopened.close()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, False), ("", False), ("0", False), ("false", False), ("1", True), ("TRUE", True)],
)
def test_the_switch_reads_its_variable(value: str | None, expected: bool) -> None:
    environ = {} if value is None else {"BROKERGROUP_FLUSH_OFF_LOOP": value}
    assert flush_off_loop_from_env(environ) is expected


def test_the_switch_refuses_other_values() -> None:
    with pytest.raises(BrokerConfigError, match="BROKERGROUP_FLUSH_OFF_LOOP"):
        flush_off_loop_from_env({"BROKERGROUP_FLUSH_OFF_LOOP": "yes"})
