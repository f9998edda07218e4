"""The local runtime's stable gRPC endpoint (local/master_endpoint.py, `remoting=False`): a
gRPC server speaks first (its HTTP/2 SETTINGS frame), possibly before the forwarder has
joined the client's connection to the master's; those bytes must reach the client, or its
channel waits for the SETTINGS until its deadline (seen with the Python SDK as
DEADLINE_EXCEEDED / "connection attempt timed out before receiving SETTINGS frame")."""

from __future__ import annotations

import asyncio

from brokergroup_cli.local.master_endpoint import MasterForwarder

HOST = "127.0.0.1"
BOUND_S = 10.0
GREETING = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty HTTP/2 SETTINGS frame


async def test_what_the_master_sends_first_reaches_every_client() -> None:
    async def speak_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(GREETING)
        await writer.drain()
        line = await reader.readline()
        writer.write(b"echo:" + line)
        await writer.drain()
        writer.close()

    master = await asyncio.start_server(speak_first, HOST, 0)
    forwarder = MasterForwarder(name="grpc", hold_ms=int(BOUND_S * 1000), remoting=False)
    await forwarder.start(HOST, 0)
    forwarder.set_target(f"{HOST}:{master.sockets[0].getsockname()[1]}")
    try:
        answers = []
        for i in range(20):
            reader, writer = await asyncio.open_connection(HOST, forwarder.port)
            greeting = await asyncio.wait_for(reader.readexactly(len(GREETING)), BOUND_S)
            writer.write(f"call-{i}\n".encode())
            await writer.drain()
            answers.append((greeting, await asyncio.wait_for(reader.readline(), BOUND_S)))
            writer.close()
        assert answers == [(GREETING, f"echo:call-{i}\n".encode()) for i in range(20)]
    finally:
        await forwarder.close()
        master.close()
        await master.wait_closed()
