"""HA replication across retention (ha/master.py, ha/master_stream.py, ha/slave.py over
store/retention.py; docs/retention.md): real stores, a real HAMasterService and
HASlaveService on loopback (the harness of test_ha_replication.py).

- A slave that was away while its master's retention deleted the bytes it needs next
  (the master's epoch file trimmed with its log) resynchronises from the master's min
  offset instead of stopping: its log ends up byte-identical to the master's, from the
  same min, with the master's epoch entries.
- A slave streaming while the master deletes its oldest segments goes on following, and
  the master sends from its own duplicate of a segment's fd (`hold_range`), so a delete
  under a running sendfile is safe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.store.retention_policy import DeleteReason
from tests.unit.conftest import eventually
from tests.unit.test_ha_replication import (
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
