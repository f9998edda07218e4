"""One misbehaving peer cannot make a remoting port hold memory, tasks or log lines without
bound (issue 31 item 1; docs/security.md "Limits"), on real loopback sockets.

Each attack is the one that took a name server down: unsigned frames from a peer that never
reads its answers (every refusal queued, reading never paused), big frames before any
signature, many connections each holding a partial frame, idle connections, and a log line
per refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from brokergroup_remoting import RemotingCommand, ResponseCode
from brokergroup_remoting.acl import sign
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.frame import FrameDecoder, encode
from brokergroup_remoting.listener import ListenerGuard, ListenerLimits, LogBudget
from brokergroup_remoting.net import (
    Connection,
    Credentials,
    RemotingClient,
    RemotingServer,
    ServerAuth,
    budgeted_logger,
)
from tests.unit.conftest import closed_by_server

KEYS = {"ak": "sk"}
GOOD = Credentials("ak", "sk")
ECHO = 9001
BOOM = 9003


async def echo(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
    return response_to(cmd, remark="echo", body=cmd.body)


async def boom(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
    raise KeyError("queue 7 of a table that should have had it")


ServerFactory = Callable[[ListenerLimits], Awaitable[RemotingServer]]


@pytest.fixture
async def start() -> AsyncIterator[ServerFactory]:
    servers: list[RemotingServer] = []

    async def make(limits: ListenerLimits) -> RemotingServer:
        server = RemotingServer(
            {ECHO: echo, BOOM: boom}, auth=ServerAuth(KEYS.get), listener=limits, name="t"
        )
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield make
    for server in servers:
        await server.close()


async def raw_connection(
    port: int, *, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:  # a peer that takes little from the wire
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


def unsigned_frames(count: int) -> bytes:
    return encode(request(ECHO, 1, {"x": "y"})) * count


def signed_frames(count: int) -> bytes:
    return encode(sign(request(ECHO, 1, {"x": "y"}, b"b" * 64), "ak", "sk")) * count


async def test_unsigned_requests_get_a_few_answers_then_the_connection_is_closed(
    start: ServerFactory,
) -> None:
    server = await start(ListenerLimits(max_refusals_before_auth=5, log_lines_per_minute=5))
    reader, writer = await raw_connection(server.port)
    writer.write(unsigned_frames(2_000))
    await writer.drain()
    answers = FrameDecoder()
    with contextlib.suppress(ConnectionError):
        async with asyncio.timeout(10):
            while data := await reader.read(65536):
                answers.feed(data)
    codes = [cmd.code for cmd in answers.commands()]
    assert codes == [ResponseCode.NO_PERMISSION] * 5  # then closed: not 2,000 answers
    writer.transport.abort()


async def test_a_peer_that_never_reads_stops_being_read_and_holds_bounded_memory(
    start: ServerFactory,
) -> None:
    bound = 64 * 1024
    server = await start(ListenerLimits(max_unsent_bytes=bound, log_lines_per_minute=5))
    _reader, writer = await raw_connection(server.port, rcvbuf=4096)
    batch = signed_frames(2_000)
    sent = 0
    try:
        for _ in range(200):  # up to 400,000 signed requests, each answered with 64 bytes
            writer.write(batch)
            try:
                await asyncio.wait_for(writer.drain(), 3.0)
            except TimeoutError:
                break  # the server stopped reading us
            sent += 2_000
        else:
            pytest.fail(f"the server read all {sent} frames of a peer that reads nothing")
        (conn,) = server.connections
        unsent = conn.transport.get_write_buffer_size()  # type: ignore[attr-defined]
        # What the server holds for us: the bound plus the answers to one read's frames.
        one_read = 256 * 1024 // len(signed_frames(1))
        answer = len(encode(response_to(request(ECHO, 1), remark="echo", body=b"b" * 64)))
        assert unsent <= bound + 2 * one_read * answer, (unsent, sent)
    finally:
        writer.transport.abort()  # our own unsent frames would hold a close


async def test_a_big_frame_before_any_signature_closes_the_connection_at_its_header(
    start: ServerFactory,
) -> None:
    server = await start(ListenerLimits())
    reader, writer = await raw_connection(server.port)
    # 5 MiB promised, 8 bytes sent: refused from the length alone, nothing buffered.
    writer.write(struct.pack(">ii", 5 * 1024 * 1024, 100))
    await writer.drain()
    assert await closed_by_server(reader)
    writer.close()
    # After a signed request the same connection may send a large frame.
    client = await RemotingClient.connect(f"127.0.0.1:{server.port}", credentials=GOOD)
    try:
        small = await client.invoke(request(ECHO, 0, {}), 5.0)
        big = await client.invoke(request(ECHO, 0, {}, b"b" * (6 * 1024 * 1024)), 10.0)
    finally:
        await client.close()
    assert small.code == big.code == ResponseCode.SUCCESS
    assert len(big.body) == 6 * 1024 * 1024


async def test_partial_frames_before_any_signature_share_one_budget(
    start: ServerFactory,
) -> None:
    budget = 1024 * 1024
    server = await start(ListenerLimits(pre_auth_budget_bytes=budget))
    header = struct.pack(">ii", 4 * 1024 * 1024, 100)
    part = header + b"\0" * (600 * 1024)
    first = await raw_connection(server.port)
    first[1].write(part)
    await first[1].drain()
    await asyncio.sleep(0.2)  # let the server read it (the test does not depend on timing:
    second = await raw_connection(server.port)  # whichever comes second is the one refused)
    second[1].write(part)
    await second[1].drain()
    assert await closed_by_server(second[0])
    assert server.guard.pre_auth_bytes <= budget
    first[1].close()
    second[1].close()


async def test_connections_per_source_are_capped_at_accept(start: ServerFactory) -> None:
    server = await start(ListenerLimits(max_connections_per_source=3))
    held = [await RemotingClient.connect(f"127.0.0.1:{server.port}") for _ in range(3)]
    reader, writer = await raw_connection(server.port)
    assert await closed_by_server(reader)
    writer.close()
    for client in held:  # the first three still work, and a freed slot is reused
        assert not client.closed
    await held[0].close()
    for _ in range(100):
        if server.guard.connections == 2:
            break
        await asyncio.sleep(0.05)
    again = await RemotingClient.connect(f"127.0.0.1:{server.port}", credentials=GOOD)
    answer = await again.invoke(request(ECHO, 0, {}), 5.0)
    assert answer.code == ResponseCode.SUCCESS
    for client in [*held[1:], again]:
        await client.close()


async def test_an_idle_connection_is_closed(start: ServerFactory) -> None:
    server = await start(ListenerLimits(idle_timeout_s=0.4))
    reader, writer = await raw_connection(server.port)
    assert await closed_by_server(reader, within_s=30)
    writer.close()


async def test_refusals_are_logged_within_the_budget(
    start: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="brokergroup_remoting.net")
    server = await start(ListenerLimits(log_lines_per_minute=10))
    answers = []
    for _ in range(20):  # 20 connections without a key, 20 refusals each
        client = await RemotingClient.connect(f"127.0.0.1:{server.port}")
        try:
            answers += await asyncio.gather(
                *(client.invoke(request(ECHO, 0, {}), 10) for _ in range(20))
            )
        finally:
            await client.close()
    assert [a.code for a in answers] == [ResponseCode.NO_PERMISSION] * 400
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert 1 <= len(refusals) <= 10


async def test_a_failing_handler_is_answered_and_logged_once_without_its_body(
    start: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = await start(ListenerLimits())
    client = await RemotingClient.connect(f"127.0.0.1:{server.port}", credentials=GOOD)
    try:
        answer = await client.invoke(request(BOOM, 0, {}, b"SECRET-BODY"), 5)
    finally:
        await client.close()
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark is not None and "KeyError" in answer.remark
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1
    assert f"code {BOOM}" in failures[0].getMessage()
    assert all("SECRET-BODY" not in r.getMessage() for r in caplog.records)


async def test_on_close_runs_once_also_when_registered_late(start: ServerFactory) -> None:
    server = await start(ListenerLimits())
    client = await RemotingClient.connect(f"127.0.0.1:{server.port}", credentials=GOOD)
    calls: list[str] = []
    client.connection.on_close(lambda: calls.append("early"))
    await client.close()
    client.connection.on_close(lambda: calls.append("late"))
    await asyncio.sleep(0)
    assert calls == ["early", "late"]


def test_listener_guard_counts_sources_and_the_budget() -> None:
    guard = ListenerGuard(
        ListenerLimits(max_connections=3, max_connections_per_source=2, pre_auth_budget_bytes=100)
    )
    assert guard.admit("a") is None and guard.admit("a") is None
    assert guard.admit("a") == "over 2 connections from a"
    assert guard.admit("b") is None
    assert guard.admit("c") == "over 3 connections on this port"
    assert guard.hold_pre_auth(1, 60) and not guard.hold_pre_auth(2, 60)
    assert guard.hold_pre_auth(1, 90)  # a connection may grow into what it alone holds
    assert guard.hold_pre_auth(1, 10) and guard.hold_pre_auth(2, 60)
    guard.authenticated(1)
    guard.release("a", 2)
    assert guard.pre_auth_bytes == 0 and guard.connections == 2
    assert guard.admit("a") is None


def test_log_budget_counts_what_it_held_back() -> None:
    budget = LogBudget(per_minute=2)
    assert budget.allow(0.0) == (True, 0)
    assert budget.allow(1.0) == (True, 0)
    assert budget.allow(2.0) == (False, 0)
    assert budget.allow(3.0) == (False, 0)
    assert budget.allow(61.0) == (True, 2)


async def test_malformed_http_requests_are_logged_within_the_budget_without_tracebacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp logs each malformed request with its stack trace at ERROR on the server's
    logger; the HTTP ports give it a budgeted one (what the broker and controller pass)."""
    from aiohttp import web

    caplog.set_level(logging.DEBUG)
    app = web.Application()
    runner = web.AppRunner(app, access_log=None, logger=budgeted_logger("test.http.budget"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        for _ in range(100):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /\x00\x01 HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            with contextlib.suppress(ConnectionError):
                await asyncio.wait_for(reader.read(4096), 5)
            writer.close()
    finally:
        await runner.cleanup()
    records = [r for r in caplog.records if r.name == "test.http.budget"]
    assert 1 <= len(records) <= 60
    assert all(r.exc_info is None for r in records)
