"""The forwarder answers what its master left unanswered (cli/brokergroup_cli/local/
in_flight.py, master_endpoint.py).

Pure: `FrameScanner` reads frame headers in any split, skipping bodies; `InFlight` pairs
requests and responses by opaque, answers the rest SYSTEM_ERROR, and answers nothing after
a cut response or an unreadable stream. With real loopback sockets: a RocketMQ-speaking
stand-in master that holds one request (a long-polling pull) and dies, or is replaced; the
client reads, before its connection's EOF, the held request's SYSTEM_ERROR with its opaque
(the stock client then fails the pull at once instead of waiting out its 30 s timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brokergroup_cli.local.in_flight import MASTER_GONE, FrameScanner, InFlight
from brokergroup_cli.local.master_endpoint import MasterForwarder
from brokergroup_remoting import RemotingCommand, ResponseCode
from brokergroup_remoting.codes import SerializeType
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.frame import FrameDecoder, encode
from brokergroup_remoting.tls import ServerTls, TlsMode, client_context, server_context
from tests.unit.tls_material import make_material

HOST = "127.0.0.1"
BOUND_S = 10
PULL, HEARTBEAT, UPDATE_OFFSET = 11, 34, 15
#: The stand-in master never answers this code (a pull held until it dies).
HELD = PULL


def frames(data: bytes) -> list[RemotingCommand]:
    decoder = FrameDecoder()
    decoder.feed(data)
    return list(decoder.commands())


def test_the_scanner_reads_headers_in_any_split_and_skips_bodies() -> None:
    sent = [
        request(PULL, 7, {"topic": "T", "queueId": "1"}, b"x" * 300),
        request(HEARTBEAT, 8, None, b"{}", serialize_type=SerializeType.ROCKETMQ),
        request(UPDATE_OFFSET, 9, {"offset": "5"}, oneway=True),
    ]
    stream = b"".join(encode(cmd) for cmd in sent)
    for split in (1, 3, 8, 50, len(stream)):
        scanner = FrameScanner()
        seen = []
        for at in range(0, len(stream), split):
            seen += scanner.feed(stream[at : at + split])
        assert seen == [(c.opaque, c.flag, c.serialize_type) for c in sent], split
        assert scanner.at_boundary and not scanner.broken


def test_unanswered_requests_get_system_error_in_order_oneways_and_answered_ones_none() -> None:
    held, answered = request(PULL, 2, {"topic": "T"}), request(HEARTBEAT, 1, None)
    binary = request(PULL, 4, {"topic": "T"}, serialize_type=SerializeType.ROCKETMQ)
    in_flight = InFlight()
    for cmd in (answered, held, request(UPDATE_OFFSET, 3, {"o": "1"}, oneway=True), binary):
        in_flight.from_client(encode(cmd))
    in_flight.from_master(encode(response_to(answered)))
    in_flight.from_master(encode(request(40, 99, None)))  # a broker's request to the client
    got = frames(in_flight.answers())
    assert [(c.opaque, c.code, c.is_response, c.remark, c.serialize_type) for c in got] == [
        (2, ResponseCode.SYSTEM_ERROR, True, MASTER_GONE, SerializeType.JSON),
        (4, ResponseCode.SYSTEM_ERROR, True, MASTER_GONE, SerializeType.ROCKETMQ),
    ]


def test_nothing_is_answered_after_a_cut_response_or_an_unreadable_stream() -> None:
    cut = InFlight()
    cut.from_client(encode(request(PULL, 1, {"topic": "T"})))
    cut.from_client(encode(request(PULL, 2, {"topic": "T"})))
    cut.from_master(encode(response_to(request(PULL, 1, None), body=b"m" * 100))[:-10])
    assert cut.answers() == b""  # an answer now would be read as the cut frame's rest
    for garbage in (
        b"\x00\x00\x00\x08\x07" + b"\x00" * 7,  # serialize type 7
        b"\x00\x00\x00\x07\x00\x00\x00\x03{x}",  # not JSON
        b"\x00\x00\x00\x06\x00\x00\x00\x02[]",  # JSON, not an object
        b"\x00\x00\x00\x08\x00\x00\x00\x09",  # a header longer than its frame
    ):
        in_flight = InFlight()
        in_flight.from_client(encode(request(PULL, 1, {"topic": "T"})))
        assert in_flight.answers()  # the pull is waiting ...
        in_flight.from_client(garbage)
        assert in_flight.answers() == b"", garbage  # ... but what follows is unreadable


class Master:
    """A stand-in master speaking RocketMQ frames: answers every request SUCCESS but the
    HELD one (a long-polling pull), which it holds until it stops."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.connections: list[asyncio.StreamWriter] = []
        self.held = asyncio.Event()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, HOST, 0)
        return f"{HOST}:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            decoder.feed(data)
            for cmd in decoder.commands():
                if cmd.code == HELD:
                    self.held.set()
                elif not cmd.is_oneway:
                    writer.write(encode(response_to(cmd)))

    def kill(self) -> None:
        """Like a SIGKILL: the listener and every connection go at once."""
        assert self.server is not None
        self.server.close()
        for writer in self.connections:
            writer.transport.abort()


@pytest.fixture
async def forwarder() -> AsyncIterator[MasterForwarder]:
    fwd = MasterForwarder(name="test", hold_ms=BOUND_S * 1000)
    await fwd.start(HOST, 0)
    yield fwd
    await fwd.close()


async def read_to_eof(reader: asyncio.StreamReader) -> list[RemotingCommand]:
    return frames(await asyncio.wait_for(reader.read(), BOUND_S))


async def send_and_hold(
    forwarder: MasterForwarder, master: Master
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client whose heartbeat is answered and whose pull the master holds."""
    reader, writer = await asyncio.open_connection(HOST, forwarder.port)
    writer.write(encode(request(HEARTBEAT, 1, None, b"{}")))
    writer.write(encode(request(UPDATE_OFFSET, 2, {"offset": "5"}, oneway=True)))
    writer.write(encode(request(PULL, 3, {"topic": "T", "queueId": "0"})))
    await writer.drain()
    await asyncio.wait_for(master.held.wait(), BOUND_S)
    return reader, writer


async def test_a_pull_held_by_a_master_that_dies_is_answered_before_the_close(
    forwarder: MasterForwarder,
) -> None:
    master = Master()
    forwarder.set_target(await master.start())
    reader, writer = await send_and_hold(forwarder, master)
    master.kill()
    got = await read_to_eof(reader)
    writer.close()
    assert [(c.opaque, c.code, c.remark) for c in got] == [
        (1, ResponseCode.SUCCESS, None),
        (3, ResponseCode.SYSTEM_ERROR, MASTER_GONE),
    ]


async def test_a_pull_held_by_a_replaced_master_is_answered_before_the_cut(
    forwarder: MasterForwarder,
) -> None:
    old, new = Master(), Master()
    forwarder.set_target(await old.start())
    reader, writer = await send_and_hold(forwarder, old)
    forwarder.set_target(await new.start())
    got = await read_to_eof(reader)
    writer.close()
    assert [(c.opaque, c.code, c.remark) for c in got] == [
        (1, ResponseCode.SUCCESS, None),
        (3, ResponseCode.SYSTEM_ERROR, MASTER_GONE),
    ]
    old.kill()
    new.kill()


async def test_a_tls_client_of_an_enforcing_address_gets_its_answers_in_the_clear_of_its_session(
    tmp_path: Path,
) -> None:
    """Under TLS the forwarder ends the client's session itself, so it still reads the
    frames: a held pull is answered SYSTEM_ERROR when the master dies, inside the TLS
    session; a plaintext client of an enforcing address is closed with nothing read."""
    material = make_material(tmp_path, datetime.datetime.now(datetime.UTC))
    tls = ServerTls(TlsMode.ENFORCING, server_context(material.cert_file, material.key_file))
    forwarder = MasterForwarder(name="test", hold_ms=BOUND_S * 1000, tls=tls)
    await forwarder.start(HOST, 0)
    master = Master()
    try:
        forwarder.set_target(await master.start())
        plain_reader, plain_writer = await asyncio.open_connection(HOST, forwarder.port)
        plain_writer.write(encode(request(HEARTBEAT, 1, None, b"{}")))
        with contextlib.suppress(ConnectionResetError):  # closed unread: EOF or a reset
            assert await asyncio.wait_for(plain_reader.read(), BOUND_S) == b""
        plain_writer.close()
        assert not master.connections  # the plaintext client never reached the master
        reader, writer = await asyncio.open_connection(
            HOST, forwarder.port, ssl=client_context(material.ca_file), server_hostname=HOST
        )
        writer.write(encode(request(HEARTBEAT, 1, None, b"{}")))
        writer.write(encode(request(PULL, 3, {"topic": "T", "queueId": "0"})))
        await writer.drain()
        await asyncio.wait_for(master.held.wait(), BOUND_S)
        master.kill()
        got = await read_to_eof(reader)
        writer.close()
    finally:
        await forwarder.close()
    assert [(c.opaque, c.code, c.remark) for c in got] == [
        (1, ResponseCode.SUCCESS, None),
        (3, ResponseCode.SYSTEM_ERROR, MASTER_GONE),
    ]
