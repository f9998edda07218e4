"""The shared remoting transport (brokergroup_remoting.net) on real loopback sockets.

What every remoting port relies on: the signature is checked before a handler runs, unknown
codes and failing handlers are answered without harm, a long-polling handler does not hold
up its connection, a broken frame closes only its own connection, and either side may send
requests.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest

from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.listener import ListenerLimits
from brokergroup_remoting.net import (
    Connection,
    ConnectionClosed,
    Credentials,
    RemotingClient,
    RemotingServer,
    ServerAuth,
)

KEYS = {"rocketmq2": "12345678"}
GOOD = Credentials("rocketmq2", "12345678")
ECHO = 9001
SLOW = 9002
BOOM = 9003
ASK_BACK = 9004


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[int, str, str | None]] = []
        self.release = asyncio.Event()

    async def echo(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.seen.append((cmd.code, cmd.fields().get("text", ""), conn.access_key))
        return response_to(cmd, fields={"text": cmd.fields()["text"]}, body=cmd.body)

    async def slow(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.seen.append((cmd.code, "slow", conn.access_key))
        await self.release.wait()
        return response_to(cmd, remark="released")

    async def boom(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        raise ValueError("no such queue 7")

    async def ask_back(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # The server asks the client something before it answers (as a controller notifies
        # a broker, or a broker checks a producer's transaction).
        answer = await conn.invoke(request(ECHO, 0, {"text": "from-server"}), timeout_s=5)
        return response_to(cmd, remark=answer.fields()["text"])


@pytest.fixture
async def served() -> AsyncIterator[tuple[RemotingServer, Recorder]]:
    rec = Recorder()
    handlers = {ECHO: rec.echo, SLOW: rec.slow, BOOM: rec.boom, ASK_BACK: rec.ask_back}
    server = RemotingServer(
        handlers, auth=ServerAuth(KEYS.get), listener=ListenerLimits(max_in_flight=4), name="test"
    )
    await server.start("127.0.0.1", 0)
    try:
        yield server, rec
    finally:
        rec.release.set()
        await server.close()


async def _client(
    server: RemotingServer, creds: Credentials | None = GOOD, **kw: object
) -> RemotingClient:
    return await RemotingClient.connect(f"127.0.0.1:{server.port}", credentials=creds, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("serialize_type", list(SerializeType))
async def test_signed_request_is_answered_in_its_own_serialization(
    served: tuple[RemotingServer, Recorder], serialize_type: SerializeType
) -> None:
    server, rec = served
    client = await _client(server)
    try:
        answer = await client.invoke(
            request(ECHO, 0, {"text": "héllo"}, b"\x00body", serialize_type=serialize_type)
        )
    finally:
        await client.close()
    assert (answer.code, answer.fields()["text"], answer.body) == (0, "héllo", b"\x00body")
    assert answer.serialize_type is serialize_type
    assert rec.seen == [(ECHO, "héllo", "rocketmq2")]


@pytest.mark.parametrize(
    ("creds", "remark"),
    [
        (None, "the request carries no AccessKey"),
        (Credentials("someone", "12345678"), "the AccessKey is not known"),
        (Credentials("rocketmq2", "wrong"), "the Signature does not match the request"),
    ],
)
async def test_unsigned_or_badly_signed_requests_never_reach_a_handler(
    served: tuple[RemotingServer, Recorder], creds: Credentials | None, remark: str
) -> None:
    server, rec = served
    client = await _client(server, creds)
    try:
        answers = [
            await client.invoke(request(code, 0, {"text": "x"})) for code in (ECHO, BOOM, 4242)
        ]
    finally:
        await client.close()
    assert [(a.code, a.remark) for a in answers] == [(ResponseCode.NO_PERMISSION, remark)] * 3
    assert rec.seen == []


async def test_unknown_code_and_failing_handler_are_answered_and_the_connection_goes_on(
    served: tuple[RemotingServer, Recorder],
) -> None:
    server, rec = served
    client = await _client(server)
    try:
        unknown = await client.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"text": "t"}))
        failed = await client.invoke(request(BOOM, 0, {"text": "t"}))
        after = await client.invoke(request(ECHO, 0, {"text": "still here"}))
    finally:
        await client.close()
    assert (unknown.code, unknown.remark) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        f"request code {int(RequestCode.GET_ROUTEINFO_BY_TOPIC)} not supported",
    )
    assert (failed.code, failed.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "ValueError: no such queue 7",
    )
    assert after.fields()["text"] == "still here"
    assert rec.seen == [(ECHO, "still here", "rocketmq2")]


async def test_a_waiting_handler_does_not_hold_up_its_connection(
    served: tuple[RemotingServer, Recorder],
) -> None:
    server, rec = served
    client = await _client(server)
    order: list[str] = []

    async def call(code: int, text: str) -> None:
        answer = await client.invoke(request(code, 0, {"text": text}), timeout_s=10)
        order.append(answer.remark or answer.fields()["text"])

    try:
        slow = asyncio.create_task(call(SLOW, "slow"))
        await call(ECHO, "fast")
        rec.release.set()
        await slow
    finally:
        await client.close()
    assert order == ["fast", "released"]


async def test_requests_over_the_in_flight_bound_are_answered_busy(
    served: tuple[RemotingServer, Recorder],
) -> None:
    server, rec = served
    client = await _client(server)
    try:
        waiting = [asyncio.create_task(client.invoke(request(SLOW, 0, {}), 10)) for _ in range(4)]
        while len(rec.seen) < 4:
            await asyncio.sleep(0.01)
        busy = await client.invoke(request(ECHO, 0, {"text": "fifth"}))
        rec.release.set()
        released = [a.remark for a in await asyncio.gather(*waiting)]
    finally:
        await client.close()
    assert (busy.code, busy.remark) == (ResponseCode.SYSTEM_BUSY, "over 4 requests in flight")
    assert released == ["released"] * 4


async def test_a_broken_frame_closes_only_its_own_connection(
    served: tuple[RemotingServer, Recorder],
) -> None:
    server, rec = served
    good = await _client(server)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        # A frame whose serialize type is neither JSON nor ROCKETMQ.
        writer.write(struct.pack(">ii", 8, (7 << 24) | 4) + b"abcd")
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, nothing answered
        answer = await good.invoke(request(ECHO, 0, {"text": "unharmed"}))
    finally:
        writer.close()
        await good.close()
    assert answer.fields()["text"] == "unharmed"
    assert rec.seen == [(ECHO, "unharmed", "rocketmq2")]


async def test_the_server_may_ask_the_client(served: tuple[RemotingServer, Recorder]) -> None:
    server, _ = served
    asked: list[str] = []

    async def client_echo(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        asked.append(cmd.fields()["text"])
        return response_to(cmd, fields={"text": "from-client"})

    client = await _client(server, handlers={ECHO: client_echo})
    try:
        answer = await client.invoke(request(ASK_BACK, 0, {}))
    finally:
        await client.close()
    assert (asked, answer.remark) == (["from-server"], "from-client")


async def test_oneway_gets_no_answer_and_a_closed_peer_fails_waiting_calls(
    served: tuple[RemotingServer, Recorder],
) -> None:
    server, rec = served
    client = await _client(server)
    await client.invoke_oneway(request(ECHO, 0, {"text": "oneway"}))
    waiting = asyncio.create_task(client.invoke(request(SLOW, 0, {}), 10))
    while len(rec.seen) < 2:
        await asyncio.sleep(0.01)
    await server.close()
    with pytest.raises(ConnectionClosed):
        await waiting
    await client.close()
    assert rec.seen == [(ECHO, "oneway", "rocketmq2"), (SLOW, "slow", "rocketmq2")]


async def test_answers_given_in_one_turn_each_reach_their_request() -> None:
    # Answers released together go out in one write: each must still carry its own opaque.
    release = asyncio.Event()

    async def numbered(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        await release.wait()
        return response_to(cmd, fields={"n": cmd.fields()["n"]}, body=cmd.body * 1000)

    server = RemotingServer({ECHO: numbered}, auth=None, name="test")
    await server.start("127.0.0.1", 0)
    client = await _client(server, creds=None)
    try:
        calls = [
            asyncio.create_task(client.invoke(request(ECHO, 0, {"n": str(i)}, str(i).encode()), 10))
            for i in range(32)
        ]
        await asyncio.sleep(0.1)  # let every request reach its handler (not a timing assert)
        release.set()
        answers = await asyncio.gather(*calls)
    finally:
        await client.close()
        await server.close()
    assert [(a.fields()["n"], a.body) for a in answers] == [
        (str(i), str(i).encode() * 1000) for i in range(32)
    ]


async def test_an_answer_given_just_before_the_server_closes_still_arrives() -> None:
    # The handler starts the close before it returns (as the broker does once it is no
    # longer the master): the close runs before the answer's write would, and must send it.
    closing: list[asyncio.Future[None]] = []

    async def last_word(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        closing.append(asyncio.ensure_future(conn.close()))
        return response_to(cmd, remark="not the master any more")

    server = RemotingServer({ECHO: last_word}, auth=None, name="test")
    await server.start("127.0.0.1", 0)
    client = await _client(server, creds=None)
    try:
        answer = await client.invoke(request(ECHO, 0, {}), timeout_s=10)
    finally:
        await client.close()
        await server.close()
    assert answer.remark == "not the master any more"
