"""The client port's connection bounds are the remoting ports' (issue 31 item 1: one design
for both transports, `brokergroup_remoting.listener`): connections per source address are
capped at accept, and an idle connection is closed. Real loopback sockets on 127.0.2.8.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from brokergroup_broker.protocol import auth
from brokergroup_broker.protocol.server import BrokerProtocolServer, ServerConfig
from tests.unit.conftest import closed_by_server
from tests.unit.test_protocol_auth import RecordingHandler

HOST = "127.0.2.8"


@pytest.fixture
async def open_port() -> AsyncIterator[tuple[BrokerProtocolServer, RecordingHandler]]:
    handler = RecordingHandler()
    server = BrokerProtocolServer(
        handler, ServerConfig(max_connections_per_source=2, idle_timeout_ms=400)
    )
    await server.start(HOST, 0)
    try:
        yield server, handler
    finally:
        await server.stop()


async def handshaken(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection past the handshake of an open port (no credential needed)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    challenge = await reader.readexactly(auth.CHALLENGE_BYTES)
    writer.write(auth.hello(None, challenge, bytes(auth.NONCE_BYTES)))
    assert await reader.readexactly(1) == auth.OPEN_ANSWER
    return reader, writer


async def test_connections_per_source_are_capped_and_idle_ones_closed(
    open_port: tuple[BrokerProtocolServer, RecordingHandler],
) -> None:
    server, handler = open_port
    first = await handshaken(server.port)
    second = await handshaken(server.port)
    third = await asyncio.open_connection(HOST, server.port)
    # The third from the same address is closed at accept, before any challenge.
    assert await third[0].read(1) == b""
    # The first two passed the handshake (an open port answers OPEN) and are closed once
    # idle (0.4 s here, 120 s by default).
    assert await closed_by_server(first[0]) and await closed_by_server(second[0])
    assert handler.calls == []
    for _, writer in (first, second, third):
        writer.close()
    for _ in range(200):
        if server.connection_count == 0:
            break
        await asyncio.sleep(0.05)
    assert server.connection_count == 0
