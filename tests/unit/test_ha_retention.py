"""HA replication across retention (ha/master.py, ha/master_stream.py, ha/slave.py over
store/retention.py; docs/retention.md): real stores, a real HAMasterService and
HASlaveService on loopback (the harness of test_ha_replication.py).

- A slave that was away while its master's retention deleted the bytes it needs next
  (the master's epoch file trimmed with its log) resynchronises from the master's min
  offset instead of stopping: its log ends up byte-identical to the master's, from the
  same min, with the master's epoch entries.
- A slave streaming while the master deletes its oldest segments goes on following.
- A slave whose stream falls below the master's new min while connected (a raw slave that
  stops reading; its receive buffer and the master's send buffer to it a few KiB each, so
  the master stops a few batches in): every byte it still gets is the deleted
  segments' own (the master sends from its own duplicate of the segment's fd,
  `hold_range`), then the master closes the link instead of sending from a deleted
  segment, and a slave connecting next resyncs from the min.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.ha import (
    NEED_DATA,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveHandshake,
    Transfer,
)
from brokergroup_broker.store.retention_policy import DeleteReason
from tests.unit.conftest import eventually
from tests.unit.test_ha_replication import (
    CONFIG,
    SEGMENT_BYTES,
    _closer,
    commit_log_bytes,
    epochs,
    open_store,
    produce,
    start_master,
    start_slave,
)


@pytest.fixture
async def cleanup() -> AsyncIterator[list[Callable[[], Awaitable[Any]]]]:
    """Async closers run in reverse order, even when the test fails."""
    closers: list[Callable[[], Awaitable[Any]]] = []
    yield closers
    for closer in reversed(closers):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(closer(), 30)


def delete_below(store: Any, offset: int) -> None:
    while store.commitlog.segments[1].start <= offset:
        assert store.retention.delete_oldest(store.min_offset, DeleteReason.FORCED, 1) is not None


async def test_a_slave_behind_the_masters_deleted_segments_resyncs_from_its_min(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    m_store = open_store(tmp_path / "m")
    cleanup.append(_closer(m_store))
    m_store.epoch_file.append(1, 0)
    produce(m_store, 40, "one")
    master = await start_master(m_store, epoch=1)
    cleanup.append(master.service.stop)
    s_store = open_store(tmp_path / "s")
    cleanup.append(_closer(s_store))
    slave = start_slave(s_store, 2, master)
    await eventually(lambda: s_store.max_offset == m_store.max_offset, "slave catches up")
    await slave.stop()
    behind = s_store.max_offset

    # While the slave is away: a new epoch, more segments, and retention past the slave's end.
    await master.service.stop()
    two_start = m_store.max_offset
    m_store.epoch_file.append(2, two_start)
    produce(m_store, 200, "two")
    delete_below(m_store, behind + SEGMENT_BYTES)
    assert m_store.min_offset > behind
    assert epochs(m_store) == [(2, two_start)]  # epoch 1 ended before the new min
    master = await start_master(m_store, epoch=2)
    cleanup.append(master.service.stop)

    slave = start_slave(s_store, 2, master)
    cleanup.append(slave.stop)
    await eventually(lambda: s_store.max_offset == m_store.max_offset, "slave resyncs")
    assert s_store.min_offset == m_store.min_offset
    assert commit_log_bytes(s_store) == commit_log_bytes(m_store)
    assert epochs(s_store) == epochs(m_store) == [(2, two_start)]
    for q in range(4):
        assert s_store.queue_offset_range("ha-test", q) == m_store.queue_offset_range("ha-test", q)


async def test_a_streaming_slave_keeps_following_while_the_master_deletes(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    m_store = open_store(tmp_path / "m")
    cleanup.append(_closer(m_store))
    m_store.epoch_file.append(1, 0)
    master = await start_master(m_store, epoch=1)
    cleanup.append(master.service.stop)
    s_store = open_store(tmp_path / "s")
    cleanup.append(_closer(s_store))
    slave = start_slave(s_store, 2, master)
    cleanup.append(slave.stop)
    for round_ in range(6):
        produce(m_store, 60, f"r{round_}")
        master.service.notify_appended()
        if len(m_store.commitlog.segments) > 2:
            delete_below(m_store, m_store.commitlog.segments[-2].start)
        await eventually(lambda: s_store.max_offset == m_store.max_offset, "slave follows")
    assert m_store.min_offset > 0 and s_store.min_offset == 0  # each replica its own retention
    tail = {name: data for name, data in commit_log_bytes(s_store).items()}
    assert {n: tail[n] for n in commit_log_bytes(m_store)} == commit_log_bytes(m_store)


async def test_a_connected_slave_below_the_new_min_is_closed_and_then_resyncs(
    tmp_path: Path,
    cleanup: list[Callable[[], Awaitable[Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    m_store = open_store(tmp_path / "m")
    cleanup.append(_closer(m_store))
    m_store.epoch_file.append(1, 0)
    produce(m_store, 6000, "big")
    original = m_store.read_bytes(0, m_store.max_offset)
    while len(original) < m_store.max_offset:
        original += m_store.read_bytes(len(original), m_store.max_offset)
    # The link must close for the deleted bytes alone: no read or write timeout may fire
    # however slowly this test runs (a loaded machine, fsyncs of the deletions).
    never = 10 * 60 * 1000
    config = dataclasses.replace(CONFIG, read_timeout_ms=never, write_timeout_ms=never)
    master = await start_master(m_store, epoch=1, config=config)
    cleanup.append(master.service.stop)

    loop = asyncio.get_running_loop()
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a slave that stops reading
    raw.setblocking(False)
    await loop.sock_connect(raw, master.service.bound_address)

    async def close_raw() -> None:
        raw.close()

    cleanup.append(close_raw)
    decoder = MasterFrameDecoder()

    async def next_frame() -> Any:
        while (event := decoder.next_event()) is NEED_DATA:
            data = await asyncio.wait_for(loop.sock_recv(raw, 65536), 30)
            if not data:
                return None  # the master closed the link
            decoder.receive_data(data)
        return event

    await loop.sock_sendall(raw, SlaveHandshake(slave_broker_id=2).encode())
    assert isinstance(await next_frame(), MasterHandshake)
    conn = master.service._by_broker
    # Linux grows an unlocked send buffer up to tcp_wmem's max (4 MiB), more than this whole
    # log: fixed at a few KiB, the master's sendfile blocks a few batches in, so what it
    # has sent no longer depends on how long this test takes to look.
    conn[2].sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    await loop.sock_sendall(raw, SlaveAck(max_offset=0).encode())
    await eventually(lambda: 2 in conn and conn[2].next_offset > 0, "the stream starts")
    half = m_store.commitlog.segments[len(m_store.commitlog.segments) // 2].start
    delete_below(m_store, half)
    new_min = m_store.min_offset
    assert conn[2].next_offset < new_min, "the stream outran the test's receive window"

    frames = []
    while (frame := await next_frame()) is not None:
        assert isinstance(frame, Transfer)
        frames.append(frame)
    # Closed for the deleted bytes (not for the acks it never sent: read_timeout_ms 5 s).
    assert any("which retention deleted" in r.getMessage() for r in caplog.records)
    data = [f for f in frames if f.body]
    assert data and all(f.offset < new_min for f in data)
    for f in data:  # the deleted segments' own bytes, sent after their unlink
        assert f.body == original[f.offset : f.offset + len(f.body)]

    s_store = open_store(tmp_path / "s")
    cleanup.append(_closer(s_store))
    slave = start_slave(s_store, 3, master)
    cleanup.append(slave.stop)
    await eventually(lambda: s_store.max_offset == m_store.max_offset, "a new slave resyncs")
    assert s_store.min_offset == m_store.min_offset == new_min
    assert commit_log_bytes(s_store) == commit_log_bytes(m_store)
