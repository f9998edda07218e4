"""The local runtime's stable master address (cli/brokergroup_cli/local/master_endpoint.py).

With real loopback sockets: two stand-in "masters" that echo with their name; the forwarder
pipes a connection to its target, cuts every open connection when the target changes (so a
client reconnects to the same address and reaches the new master), holds a connection that
arrives while no master is known until one is, closes it when none comes within the hold,
and retries a master that refused the connect once the target moves. `target_of` (pure):
the controller's live master, on the engine's remoting port.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from brokergroup_cli.local.master_endpoint import MasterForwarder, RemotingPorts, target_of
from brokergroup_controller.api import ReplicaInfo
from tests.unit.conftest import eventually

HOST = "127.0.0.1"
#: Bound on waits for something that must happen (liveness, never a timing assert).
BOUND_S = 10


def info(master: str | None, alive: bool = True) -> ReplicaInfo:
    return ReplicaInfo(
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        master_broker_id=None if master is None else 1,
        master_address=master,
        master_epoch=2,
        sync_state_set=frozenset({1}),
        sync_state_set_epoch=3,
        master_alive=alive,
    )


def test_the_target_is_the_live_masters_remoting_port() -> None:
    ports = RemotingPorts(10914)
    assert target_of(info("127.0.0.12:10911"), ports) == "127.0.0.12:10914"
    assert target_of(info("127.0.0.12:10911", alive=False), ports) is None
    assert target_of(info(None), ports) is None


class Master:
    """A stand-in master: answers every line with its name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, HOST, 0)
        return f"{HOST}:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(self.name.encode() + b":" + line)
            await writer.drain()
        writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def forwarder() -> AsyncIterator[MasterForwarder]:
    fwd = MasterForwarder(name="test", hold_ms=BOUND_S * 1000)
    await fwd.start(HOST, 0)
    yield fwd
    await fwd.close()


async def holding(forwarder: MasterForwarder) -> None:
    """Until the forwarder has accepted a connection it holds (bounded)."""
    await eventually(
        lambda: bool(forwarder.held_connections),
        "the forwarder accepted the connection",
        deadline_s=BOUND_S,
    )


async def ask(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: bytes) -> bytes:
    writer.write(line + b"\n")
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), BOUND_S)


async def test_a_target_change_cuts_open_connections_and_new_ones_reach_the_new_master(
    forwarder: MasterForwarder,
) -> None:
    a, b = Master("a"), Master("b")
    forwarder.set_target(await a.start())
    b_address = await b.start()
    reader, writer = await asyncio.open_connection(HOST, forwarder.port)
    assert await ask(reader, writer, b"one") == b"a:one\n"
    forwarder.set_target(b_address)
    assert await asyncio.wait_for(reader.read(), BOUND_S) == b""  # cut: the client reconnects
    writer.close()
    reader, writer = await asyncio.open_connection(HOST, forwarder.port)
    assert await ask(reader, writer, b"two") == b"b:two\n"
    forwarder.set_target(b_address)  # the same master again: nothing is cut
    assert await ask(reader, writer, b"three") == b"b:three\n"
    writer.close()
    await a.stop()
    await b.stop()


async def test_a_connection_without_a_master_is_held_until_one_is_known(
    forwarder: MasterForwarder,
) -> None:
    a = Master("a")
    address = await a.start()
    reader, writer = await asyncio.open_connection(HOST, forwarder.port)
    writer.write(b"early\n")  # sent before any master is known: delivered once one is
    await writer.drain()
    await holding(forwarder)
    forwarder.set_target(address)
    assert await asyncio.wait_for(reader.readline(), BOUND_S) == b"a:early\n"
    writer.close()
    await a.stop()


async def test_no_master_within_the_hold_closes_the_connection() -> None:
    fwd = MasterForwarder(name="test", hold_ms=50)
    await fwd.start(HOST, 0)
    try:
        reader, writer = await asyncio.open_connection(HOST, fwd.port)
        assert await asyncio.wait_for(reader.read(), BOUND_S) == b""
        writer.close()
    finally:
        await fwd.close()


async def test_a_refusing_master_is_retried_once_the_target_moves(
    forwarder: MasterForwarder,
) -> None:
    dead = Master("dead")
    dead_address = await dead.start()
    await dead.stop()  # its port now refuses connections, like a killed broker's
    forwarder.set_target(dead_address)
    reader, writer = await asyncio.open_connection(HOST, forwarder.port)
    writer.write(b"hello\n")
    await writer.drain()
    await holding(forwarder)
    b = Master("b")
    forwarder.set_target(await b.start())
    assert await asyncio.wait_for(reader.readline(), BOUND_S) == b"b:hello\n"
    writer.close()
    await b.stop()
