"""HA replication end to end on loopback (DESIGN.md §3.2/§3.3; seed controller-mode-design).

How: real MessageStores in tmp_path (small segments so batches cross segment
files), one HAMasterService and HASlaveServices on 127.0.0.1 with kernel-chosen
ports, produce with ``store.put_messages`` directly. Every wait polls a
condition under a generous deadline; nothing asserts on timing. The master's
clock is a fake (``Clock``) so caught-up times are exact values.

Checks: slaves' commit logs become byte-identical to the master's (segment
files compared); epoch changes are recorded at the master's offsets and no
replicated batch spans two epochs; a slave holding an unreplicated tail from
its own stale epoch is truncated at handshake and converges; a master that no
longer holds a slave's next offset makes it resync from its min; acks,
lastCaughtUpTimeMs, confirmOffset and disconnects are reported as the seed says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.ha import (
    NEED_DATA,
    HAConfig,
    HAMasterService,
    HASlaveService,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveHandshake,
    Transfer,
    TruncationReason,
)
from brokergroup_broker.store import (
    FlushDiskType,
    MessageInput,
    MessageStore,
    StoreConfig,
)
from tests.unit.conftest import Clock, eventually

SEGMENT_BYTES = 8192
STORE_HOST = ("127.0.0.1", 10911)
DEADLINE_S = 30.0

# Small batches so a few hundred records make many batches and cross epochs/segments.
CONFIG = HAConfig(
    transfer_batch_bytes=1500,
    heartbeat_interval_ms=100,
    read_timeout_ms=5000,
    write_timeout_ms=5000,
    connect_timeout_ms=2000,
    reconnect_backoff_min_ms=20,
    reconnect_backoff_max_ms=200,
)


def open_store(path: Path, flush: FlushDiskType = FlushDiskType.ASYNC_FLUSH) -> MessageStore:
    return MessageStore.open(
        path, StoreConfig(commit_log_segment_bytes=SEGMENT_BYTES, flush_disk_type=flush)
    )


def produce(store: MessageStore, count: int, tag: str, now_ms: int = 1_700_000_000_000) -> None:
    """``count`` records over 4 queues, in batches of up to 7, bodies of varying size."""
    batch: list[MessageInput] = []
    for i in range(count):
        body = f"{tag}-{i}-".encode() * (1 + i % 13)
        batch.append(MessageInput(topic="ha-test", queue_id=i % 4, body=body))
        if len(batch) == 7:
            store.put_messages(batch, STORE_HOST, now_ms)
            batch = []
    if batch:
        store.put_messages(batch, STORE_HOST, now_ms)


def commit_log_bytes(store: MessageStore) -> dict[str, bytes]:
    directory = store.root / "commitlog"
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name.isdigit()}


def epochs(store: MessageStore) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in store.epoch_file.entries()]


@dataclass
class MasterHarness:
    store: MessageStore
    service: HAMasterService
    clock: Clock[int]
    acks: list[tuple[int, int]] = field(default_factory=list)
    disconnects: list[int] = field(default_factory=list)


@dataclass
class SlaveHarness:
    broker_id: int
    store: MessageStore
    service: HASlaveService
    task: asyncio.Task[None]
    confirms: list[int] = field(default_factory=list)

    async def stop(self) -> None:
        await self.service.stop()
        await asyncio.wait_for(self.task, DEADLINE_S)


async def start_master(
    store: MessageStore, epoch: int, port: int = 0, config: HAConfig = CONFIG
) -> MasterHarness:
    clock = Clock(1_000)
    acks: list[tuple[int, int]] = []
    disconnects: list[int] = []
    service = HAMasterService(
        store,
        config,
        master_epoch=epoch,
        on_slave_ack=lambda broker_id, offset: acks.append((broker_id, offset)),
        on_slave_disconnect=disconnects.append,
        now_ms=clock,
    )
    await service.start("127.0.0.1", port)
    return MasterHarness(store, service, clock, acks, disconnects)


def start_slave(
    store: MessageStore, broker_id: int, master: MasterHarness, config: HAConfig = CONFIG
) -> SlaveHarness:
    confirms: list[int] = []
    service = HASlaveService(store, config, broker_id=broker_id, on_confirm_offset=confirms.append)
    task = asyncio.create_task(service.run(master.service.bound_address))
    return SlaveHarness(broker_id, store, service, task, confirms)


@pytest.fixture
async def cleanup() -> AsyncIterator[list[Callable[[], Awaitable[Any]]]]:
    """Async closers run in reverse order, even when the test fails."""
    closers: list[Callable[[], Awaitable[Any]]] = []
    yield closers
    for closer in reversed(closers):
        with contextlib.suppress(Exception):
            await asyncio.wait_for(closer(), DEADLINE_S)


def _writer_closer(writer: asyncio.StreamWriter) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        writer.close()

    return close


def _closer(store: MessageStore) -> Callable[[], Awaitable[None]]:
    async def close() -> None:
        store.close()

    return close


# ------------------------------------------------------------------------------- tests


async def test_two_slaves_become_byte_identical(
    tmp_path: Path,
    cleanup: list[Callable[[], Awaitable[Any]]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DESIGN §3.2 transfer: produced records reach both slaves byte for byte, segment
    files included (blank tails and rolls as on the master), sent with os.sendfile."""
    sendfile_bytes: list[int] = []
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        sent = real_sendfile(out_fd, in_fd, offset, count)
        sendfile_bytes.append(sent)
        return sent

    monkeypatch.setattr(os, "sendfile", counting_sendfile)
    master_store = open_store(tmp_path / "m", FlushDiskType.SYNC_FLUSH)
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 150, "before")  # history the slaves copy on connect
    master = await start_master(master_store, epoch=1)
    cleanup.append(master.service.stop)
    slaves = []
    for broker_id in (2, 3):
        store = open_store(tmp_path / f"s{broker_id}", FlushDiskType.SYNC_FLUSH)
        cleanup.append(_closer(store))
        slave = start_slave(store, broker_id, master)
        cleanup.append(slave.stop)
        slaves.append(slave)

    for round_ in range(5):  # live traffic while they follow
        produce(master_store, 60, f"live{round_}")
        master.service.notify_appended()
        await asyncio.sleep(0.005)

    target = master_store.max_offset
    assert target > 3 * SEGMENT_BYTES
    await eventually(
        lambda: all(s.store.max_offset == target for s in slaves), "slaves reach master max"
    )
    expected = commit_log_bytes(master_store)
    assert len(expected) >= 4
    for slave in slaves:
        assert commit_log_bytes(slave.store) == expected
        assert epochs(slave.store) == [(1, 0)]
        # The slave indexed what it received: consume queues match the master's.
        for queue_id in range(4):
            assert slave.store.queue_offset_range("ha-test", queue_id) == (
                master_store.queue_offset_range("ha-test", queue_id)
            )
    # Acks reach the callback and the per-slave progress.
    await eventually(
        lambda: all(master.service.slaves()[s.broker_id].ack_offset == target for s in slaves),
        "acks at master max",
    )
    # Every body byte went file -> socket in the kernel (both slaves got the whole log).
    assert sum(sendfile_bytes) == 2 * target
    for slave in slaves:
        acked = [offset for broker_id, offset in master.acks if broker_id == slave.broker_id]
        assert acked == sorted(acked), "acks never go back"
        assert slave.service.last_truncation is not None
        assert slave.service.last_truncation.reason is TruncationReason.EMPTY_LOCAL


async def test_epoch_changes_recorded_and_no_batch_spans_two_epochs(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """Seed: 'a batch of logs sent at a time is in the same epoch'; 'when the Slave
    receives logs, if it finds a change in epoch from the header, it records it'."""
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 40, "e1")
    master_store.epoch_file.append(3, master_store.max_offset)
    produce(master_store, 45, "e3")
    master_store.epoch_file.append(4, master_store.max_offset)
    produce(master_store, 10, "e4")
    master = await start_master(master_store, epoch=4)
    cleanup.append(master.service.stop)

    slave_store = open_store(tmp_path / "s2")
    cleanup.append(_closer(slave_store))
    batches: list[tuple[int, int, int]] = []  # (offset, length, slave's last epoch at write)
    real_append = slave_store.append_replicated

    def spy(offset: int, data: bytes | memoryview, **kw: Any) -> int:
        batches.append((offset, len(data), slave_store.epoch_file.last_epoch()))
        return real_append(offset, data, **kw)

    slave_store.append_replicated = spy  # type: ignore[method-assign]
    slave = start_slave(slave_store, 2, master)
    cleanup.append(slave.stop)

    await eventually(lambda: slave_store.max_offset == master_store.max_offset, "first catch-up")
    # An epoch change while the slave is connected: this node re-elected in epoch 5.
    await master.service.stop()
    master_store.epoch_file.append(5, master_store.max_offset)
    produce(master_store, 30, "e5")
    master2 = await start_master(master_store, epoch=5)
    cleanup.append(master2.service.stop)
    await slave.stop()
    slave2 = start_slave(slave_store, 2, master2)
    cleanup.append(slave2.stop)

    await eventually(lambda: slave_store.max_offset == master_store.max_offset, "second catch-up")
    assert epochs(slave_store) == epochs(master_store)
    assert commit_log_bytes(slave_store) == commit_log_bytes(master_store)

    bounds = epochs(master_store)
    assert len(batches) > 10
    for offset, length, epoch in batches:
        # The epoch whose range holds the batch's first byte...
        index = max(i for i, (_, start) in enumerate(bounds) if start <= offset)
        end = bounds[index + 1][1] if index + 1 < len(bounds) else master_store.max_offset
        # ...holds its last byte too, and is the epoch recorded before the write.
        assert offset + length <= end, (offset, length, bounds)
        assert epoch == bounds[index][0]
        assert length <= CONFIG.transfer_batch_bytes


async def test_divergent_tail_in_stale_epoch_is_truncated_then_converges(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """DESIGN §3.2 truncation at handshake: the old master S wrote a tail in epoch 1 that
    never reached M; M became master in epoch 2. S cuts exactly that tail and converges."""
    s_store = open_store(tmp_path / "s")
    m_store = open_store(tmp_path / "m")
    cleanup.append(_closer(s_store))
    cleanup.append(_closer(m_store))

    # Epoch 1: S is master, M replicates R1.
    s_store.epoch_file.append(1, 0)
    produce(s_store, 70, "r1")
    old_master = await start_master(s_store, epoch=1)
    follower = start_slave(m_store, 7, old_master)
    await eventually(lambda: m_store.max_offset == s_store.max_offset, "M copies R1")
    shared_end = s_store.max_offset
    await follower.stop()
    await old_master.service.stop()

    # S keeps writing in epoch 1 (never replicated, never acknowledged).
    produce(s_store, 25, "r2-stale")
    stale_end = s_store.max_offset
    assert stale_end > shared_end

    # M is elected for epoch 2: cut a partial tail, record the epoch, write R3.
    m_store.truncate_partial_tail()
    m_store.epoch_file.append(2, m_store.max_offset)
    produce(m_store, 50, "r3")
    new_master = await start_master(m_store, epoch=2)
    cleanup.append(new_master.service.stop)

    slave = start_slave(s_store, 1, new_master)
    cleanup.append(slave.stop)
    fresh_store = open_store(tmp_path / "fresh")
    cleanup.append(_closer(fresh_store))
    fresh = start_slave(fresh_store, 3, new_master)
    cleanup.append(fresh.stop)

    await eventually(
        lambda: s_store.max_offset == fresh_store.max_offset == m_store.max_offset,
        "S and a fresh replica converge on M",
    )
    point = slave.service.last_truncation
    assert point is not None
    assert (point.offset, point.matched_epoch, point.full_resync) == (shared_end, 1, False)
    assert commit_log_bytes(s_store) == commit_log_bytes(m_store)
    assert commit_log_bytes(fresh_store) == commit_log_bytes(m_store)
    assert epochs(s_store) == epochs(m_store) == [(1, 0), (2, shared_end)]
    assert epochs(fresh_store) == epochs(m_store)
    # The stale records are gone from S's consume queues too: same queue ranges as M.
    for queue_id in range(4):
        assert s_store.queue_offset_range("ha-test", queue_id) == m_store.queue_offset_range(
            "ha-test", queue_id
        )


async def test_master_without_the_requested_offset_makes_slave_resync_from_its_min(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """docs/ha.md first-ack rule: a request below the master's min offset (history
    deleted) restarts the slave's log at the master's min (full resync, logged)."""
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.reset(2 * SEGMENT_BYTES)  # the master's log starts at its third segment
    master_store.epoch_file.append(1, 0)
    produce(master_store, 60, "late")
    assert master_store.min_offset == 2 * SEGMENT_BYTES

    slave_store = open_store(tmp_path / "s")
    cleanup.append(_closer(slave_store))
    slave_store.epoch_file.append(1, 0)
    produce(slave_store, 3, "old")  # same epoch, but far behind the master's min offset

    master = await start_master(master_store, epoch=1)
    cleanup.append(master.service.stop)
    slave = start_slave(slave_store, 2, master)
    cleanup.append(slave.stop)
    await eventually(lambda: slave_store.max_offset == master_store.max_offset, "slave resyncs")
    assert slave_store.min_offset == master_store.min_offset
    assert commit_log_bytes(slave_store) == commit_log_bytes(master_store)
    assert epochs(slave_store) == [(1, 0)]


async def test_ack_and_caught_up_tracking_confirm_offset_and_disconnect(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """Seed 'Shrink SyncStateSet': lastCaughtUpTimeMs = lastTransferTimeMs once an ack
    reaches lastMasterMaxOffset; DESIGN §3.3: slaves report min(confirmOffset, own max);
    a closed connection is reported and kept as disconnected progress."""
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    master = await start_master(master_store, epoch=1)
    cleanup.append(master.service.stop)
    slaves = []
    for broker_id in (2, 3):
        store = open_store(tmp_path / f"s{broker_id}")
        cleanup.append(_closer(store))
        slave = start_slave(store, broker_id, master)
        cleanup.append(slave.stop)
        slaves.append(slave)

    await eventually(lambda: set(master.service.slaves()) == {2, 3}, "both slaves handshake")
    master.clock.now = 2_000
    produce(master_store, 30, "a")
    master.service.notify_appended()
    target = master_store.max_offset
    await eventually(
        lambda: all(p.ack_offset == target for p in master.service.slaves().values()),
        "acks reach the master max",
    )
    for progress in master.service.slaves().values():
        # Every send happened at clock 2000 (or at 1000 for an idle heartbeat before).
        assert progress.connected and progress.last_caught_up_ms in (1_000, 2_000)
    await eventually(
        lambda: all(p.last_caught_up_ms == 2_000 for p in master.service.slaves().values()),
        "caught up as of the 2000 sends/heartbeats",
    )

    # Idle link: heartbeats are transfers too, so caught-up time follows the clock.
    master.clock.now = 9_000
    await eventually(
        lambda: all(p.last_caught_up_ms == 9_000 for p in master.service.slaves().values()),
        "idle heartbeats refresh lastCaughtUpTimeMs",
    )

    # confirmOffset travels in headers; slaves report min(confirm, own max).
    master.service.set_confirm_offset(target // 2)
    await eventually(
        lambda: all(s.confirms and s.confirms[-1] == target // 2 for s in slaves),
        "slaves report the confirm offset",
    )
    master.service.set_confirm_offset(target)
    await eventually(
        lambda: all(s.confirms[-1] == target for s in slaves), "confirm offset moves up"
    )

    # A stopped slave: disconnect reported, its caught-up time no longer moves.
    await slaves[1].stop()
    await eventually(lambda: master.disconnects == [3], "disconnect reported")
    progress3 = master.service.slaves()[3]
    assert not progress3.connected and progress3.ack_offset == target
    master.clock.now = 20_000
    produce(master_store, 10, "b")
    master.service.notify_appended()
    await eventually(
        lambda: master.service.slaves()[2].last_caught_up_ms == 20_000, "slave 2 keeps up"
    )
    assert master.service.slaves()[3].last_caught_up_ms == progress3.last_caught_up_ms
    assert master.service.slaves()[3].ack_offset == target


async def test_slave_reconnects_after_master_restart(
    tmp_path: Path,
    cleanup: list[Callable[[], Awaitable[Any]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Slave: 'reconnect with bounded backoff until stop()' -- a master that goes away
    and comes back on the same address is followed without restarting the slave."""
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 20, "x")
    master = await start_master(master_store, epoch=1)
    port = master.service.bound_address[1]
    slave_store = open_store(tmp_path / "s")
    cleanup.append(_closer(slave_store))
    slave = start_slave(slave_store, 2, master)
    cleanup.append(slave.stop)
    await eventually(lambda: slave_store.max_offset == master_store.max_offset, "first sync")
    sessions = slave.service.sessions

    caplog.set_level(logging.INFO, logger="brokergroup_broker.ha.slave")
    await master.service.stop()
    produce(master_store, 20, "y")
    await eventually(  # the slave retries against the closed port meanwhile
        lambda: any(
            "connection to master" in r.getMessage() and "failed" in r.getMessage()
            for r in caplog.records
        ),
        "a refused reconnect",
    )
    master2 = await start_master(master_store, epoch=1, port=port)
    cleanup.append(master2.service.stop)
    await eventually(lambda: slave_store.max_offset == master_store.max_offset, "resumed")
    assert slave.service.sessions > sessions
    assert commit_log_bytes(slave_store) == commit_log_bytes(master_store)

    await slave.stop()
    assert slave.task.done() and not slave.service.connected


async def test_master_closes_only_the_connection_that_breaks_the_protocol(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """STYLE §3 'the peer broke it': garbage, or a request beyond the master's max (no
    truncation), closes that connection; a well-behaved slave keeps replicating."""
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 10, "z")
    master = await start_master(master_store, epoch=1)
    cleanup.append(master.service.stop)
    host, port = master.service.bound_address

    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"\x00\x00\x00\x09garbage!")
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""  # closed by the master
    writer.close()

    reader, writer = await asyncio.open_connection(host, port)
    writer.write(SlaveHandshake(slave_broker_id=9).encode())
    decoder = MasterFrameDecoder()
    decoder.receive_data(await asyncio.wait_for(reader.readexactly(20 + 12), DEADLINE_S))
    handshake = decoder.next_event()
    assert isinstance(handshake, MasterHandshake)
    assert handshake.max_phy_offset == master_store.max_offset
    writer.write(SlaveAck(max_offset=handshake.max_phy_offset + 1).encode())
    assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
    writer.close()
    await eventually(lambda: master.disconnects == [9], "bad slave reported as gone")

    slave_store = open_store(tmp_path / "s")
    cleanup.append(_closer(slave_store))
    slave = start_slave(slave_store, 2, master)
    cleanup.append(slave.stop)
    await eventually(lambda: slave_store.max_offset == master_store.max_offset, "good slave")


async def test_master_refuses_to_start_without_its_epoch_entry(tmp_path: Path) -> None:
    """DESIGN §3.2 'On becoming master: append (newEpoch, maxPhyOffset), then accept'."""
    store = open_store(tmp_path / "m")
    try:
        store.epoch_file.append(1, 0)
        service = HAMasterService(
            store,
            CONFIG,
            master_epoch=2,
            on_slave_ack=lambda _b, _o: None,
            on_slave_disconnect=lambda _b: None,
            now_ms=Clock(1_000),
        )
        with pytest.raises(RuntimeError, match="last epoch is 1"):
            await service.start("127.0.0.1", 0)
    finally:
        store.close()


async def test_slave_reconnects_after_a_master_breaks_the_protocol(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """A transfer before the handshake is a protocol error: the slave drops the
    connection and retries (bounded backoff) without touching its store."""
    attempts: list[int] = []

    async def bad_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        attempts.append(1)
        await reader.readexactly(16)
        writer.write(Transfer(offset=0, epoch=1, epoch_start_offset=0, confirm_offset=0).encode())
        await writer.drain()
        with contextlib.suppress(ConnectionError):
            await reader.read()
        writer.close()

    server = await asyncio.start_server(bad_master, "127.0.0.1", 0)
    cleanup.append(server.wait_closed)
    cleanup.append(_sync_closer(server.close))
    store = open_store(tmp_path / "s")
    cleanup.append(_closer(store))
    service = HASlaveService(store, CONFIG, broker_id=2, on_confirm_offset=lambda _c: None)
    task = asyncio.create_task(service.run(server.sockets[0].getsockname()[:2]))
    await eventually(lambda: len(attempts) >= 3, "slave retries")
    await service.stop()
    await asyncio.wait_for(task, DEADLINE_S)
    assert store.max_offset == 0 and service.sessions == 0


def _sync_closer(close: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def run() -> None:
        close()

    return run


async def test_stop_before_run_started_still_stops(tmp_path: Path) -> None:
    """Bounded waits: a slave task created and stopped at once must end, not reconnect
    forever (stop() wins even before run() got to execute)."""
    store = open_store(tmp_path / "s")
    try:
        service = HASlaveService(store, CONFIG, broker_id=2, on_confirm_offset=lambda _c: None)
        task = asyncio.create_task(service.run(("127.0.0.1", 9)))
        await service.stop()
        await asyncio.wait_for(task, DEADLINE_S)
        assert service.sessions == 0
    finally:
        store.close()


@pytest.mark.looptime
async def test_a_moved_confirm_offset_rides_on_the_next_batch_or_follows_alone(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """A commit round is one frame and one ack per slave: a confirmOffset that moved while
    the link was idle waits `confirm_publish_delay_ms` for a batch to carry it (under load
    the next one does) and only then goes alone in an empty transfer. Seen from a raw
    slave, frame by frame."""
    config = HAConfig(
        heartbeat_interval_ms=4000,
        confirm_publish_delay_ms=2000,
        read_timeout_ms=10_000,
        write_timeout_ms=5000,
    )
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 5, "a")
    service = (await start_master(master_store, epoch=1, config=config)).service
    cleanup.append(service.stop)
    reader, writer = await asyncio.open_connection(*service.bound_address)
    cleanup.append(_writer_closer(writer))
    decoder = MasterFrameDecoder()

    async def next_frame() -> Any:
        while (event := decoder.next_event()) is NEED_DATA:
            data = await asyncio.wait_for(reader.read(65536), DEADLINE_S)
            assert data, "the master closed the link"
            decoder.receive_data(data)
        return event

    writer.write(SlaveHandshake(slave_broker_id=2).encode())
    handshake = await next_frame()
    assert isinstance(handshake, MasterHandshake)
    start = master_store.max_offset
    writer.write(SlaveAck(max_offset=start).encode())
    # A new session hears the current confirm offset at once.
    first = await next_frame()
    assert (first.offset, first.body, first.confirm_offset) == (start, b"", 0)

    service.set_confirm_offset(start)
    await asyncio.sleep(0.05)  # an old master sent an empty transfer here
    produce(master_store, 3, "b")
    service.notify_appended()
    batch = await next_frame()
    assert (batch.offset, batch.confirm_offset) == (start, start)
    assert batch.body == master_store.read_bytes(start, master_store.max_offset - start)

    # Idle: the moved offset goes alone, after the delay.
    end = master_store.max_offset
    writer.write(SlaveAck(max_offset=end).encode())
    service.set_confirm_offset(end)
    alone = await next_frame()
    assert (alone.offset, alone.body, alone.confirm_offset) == (end, b"", end)


def test_confirm_publish_delay_is_checked_against_the_heartbeat() -> None:
    for delay in (-1, 500, 600):
        with pytest.raises(ValueError, match="confirm_publish_delay_ms"):
            HAConfig(heartbeat_interval_ms=500, confirm_publish_delay_ms=delay)
    assert HAConfig(heartbeat_interval_ms=500, confirm_publish_delay_ms=0)


async def test_stop_hands_the_last_confirm_offset_to_the_slaves_first(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """DESIGN §3.3, issue 32 item 8: a master stopped while a moved confirmOffset still
    waits `confirm_publish_delay_ms` for a batch (a SIGTERM right after the last ack)
    sends it before the streams close, so the slave an election promotes next serves
    all it acknowledged. The delay here outlasts the test: only the stop can send it.
    The old stop cancelled the streams and the slaves kept the offset before."""
    config = HAConfig(
        heartbeat_interval_ms=4000,
        confirm_publish_delay_ms=3000,
        read_timeout_ms=10_000,
        write_timeout_ms=5000,
        reconnect_backoff_min_ms=20,
        reconnect_backoff_max_ms=200,
    )
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 40, "a")
    master = await start_master(master_store, epoch=1, config=config)
    cleanup.append(master.service.stop)
    slaves = []
    for broker_id in (2, 3):
        store = open_store(tmp_path / f"s{broker_id}")
        cleanup.append(_closer(store))
        slave = start_slave(store, broker_id, master, config)
        cleanup.append(slave.stop)
        slaves.append(slave)
    acked_before = master_store.max_offset
    master.service.set_confirm_offset(acked_before)  # the first frame of a session carries it
    await eventually(
        lambda: all(s.confirms[-1:] == [acked_before] for s in slaves), "slaves at confirm"
    )
    produce(master_store, 5, "last")
    master.service.notify_appended()
    end = master_store.max_offset
    await eventually(
        lambda: all(master.service.slaves()[s.broker_id].ack_offset == end for s in slaves),
        "both slaves acked the last batch",
    )
    master.service.set_confirm_offset(end)  # the commit rule acknowledges the last batch

    await master.service.stop()

    for slave in slaves:
        assert slave.confirms[-1] == end, (slave.broker_id, slave.confirms)
    assert all(not p.connected for p in master.service.slaves().values())


async def test_a_confirm_offset_held_back_goes_at_once_when_writes_stop(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """A master whose role stopped taking writes (a SIGTERM, a fence) sends a moved
    confirmOffset at once: no batch will come to carry it, and the controller may elect
    a slave before the delay ends. The delay here outlasts the test's deadline."""
    config = HAConfig(
        heartbeat_interval_ms=60_000,
        confirm_publish_delay_ms=59_000,
        read_timeout_ms=120_000,
        write_timeout_ms=5000,
        ha_max_time_slave_not_catch_up_ms=120_000,
    )
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 5, "a")
    service = (await start_master(master_store, epoch=1, config=config)).service
    cleanup.append(service.stop)
    reader, writer = await asyncio.open_connection(*service.bound_address)
    cleanup.append(_writer_closer(writer))
    decoder = MasterFrameDecoder()

    async def next_frame() -> Any:
        while (event := decoder.next_event()) is NEED_DATA:
            data = await asyncio.wait_for(reader.read(65536), DEADLINE_S)
            assert data, "the master closed the link"
            decoder.receive_data(data)
        return event

    writer.write(SlaveHandshake(slave_broker_id=2).encode())
    assert isinstance(await next_frame(), MasterHandshake)
    end = master_store.max_offset
    writer.write(SlaveAck(max_offset=end).encode())
    first = await next_frame()
    assert (first.offset, first.confirm_offset) == (end, 0)

    service.set_confirm_offset(end)  # held back for a batch to carry it
    service.writes_stopped()
    alone = await next_frame()
    assert (alone.offset, alone.body, alone.confirm_offset) == (end, b"", end)


async def test_stop_drain_is_bounded_by_a_slave_that_never_closes(
    tmp_path: Path, cleanup: list[Callable[[], Awaitable[Any]]]
) -> None:
    """HAConfig.stop_drain_timeout_ms bounds the drain: a slave that reads the last
    confirmOffset but never closes its side (a stuck process) is cut, and stop returns.
    The raw slave sees the last frame, then the master's end of stream."""
    config = HAConfig(
        heartbeat_interval_ms=4000,
        confirm_publish_delay_ms=3000,
        read_timeout_ms=10_000,
        write_timeout_ms=5000,
        stop_drain_timeout_ms=200,
    )
    master_store = open_store(tmp_path / "m")
    cleanup.append(_closer(master_store))
    master_store.epoch_file.append(1, 0)
    produce(master_store, 5, "a")
    service = (await start_master(master_store, epoch=1, config=config)).service
    cleanup.append(service.stop)
    reader, writer = await asyncio.open_connection(*service.bound_address)
    cleanup.append(_writer_closer(writer))
    decoder = MasterFrameDecoder()

    async def next_frame() -> Any:
        while (event := decoder.next_event()) is NEED_DATA:
            data = await asyncio.wait_for(reader.read(65536), DEADLINE_S)
            if not data:
                return None  # the master's end of stream
            decoder.receive_data(data)
        return event

    writer.write(SlaveHandshake(slave_broker_id=2).encode())
    assert isinstance(await next_frame(), MasterHandshake)
    end = master_store.max_offset
    writer.write(SlaveAck(max_offset=end).encode())
    assert (await next_frame()).confirm_offset == 0
    service.set_confirm_offset(end)

    await asyncio.wait_for(service.stop(), DEADLINE_S)

    last = await next_frame()
    assert (last.offset, last.body, last.confirm_offset) == (end, b"", end)
    assert await next_frame() is None
    assert not service.slaves()[2].connected
