"""The client port's key-pair handshake on real loopback sockets (DESIGN.md §11,
docs/protocol.md "Authentication", brokergroup_broker.protocol.auth).

A `BrokerProtocolServer` holding a group's broker and client pairs (as a broker started with
`--remoting-key-file`/`--remoting-client-key-file` does) faces: both good pairs, a wrong
SecretKey, an unknown AccessKey, another group's pair, no credential, an oversized and a
slow HELLO, and request frames sent before any handshake. Every refusal must reach the
client with its reason, close the connection, and leave the handler untouched: the
`RecordingHandler` counts calls and the codec's decoders are wrapped to prove no command
was decoded before authentication. The client side is checked against a fake broker that
cannot prove the pair and against an open port. Finally the producer, the consumer and
`brokergroup produce`/`consume` raise the refusal at once (no retry, no "no master"
renaming), including a controller that refuses the discovery credential.
Servers bind 127.0.2.x, port 0.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import secrets
import socket
import struct
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker import cli
from brokergroup_broker.core.remoting_keys import client_port_auth
from brokergroup_broker.protocol import auth, commands, server
from brokergroup_broker.protocol.client import (
    AuthenticationError,
    BrokerConnection,
    ClientConfig,
    ControllerDiscovery,
)
from brokergroup_broker.protocol.codec import encode_request
from brokergroup_broker.protocol.consumer import Consumer
from brokergroup_broker.protocol.messages import (
    NO_CONSUMER_OFFSET,
    ProduceMessage,
    PullResult,
    QueryOffsetsRequest,
    SendMessagesRequest,
    SendResult,
    SentMessage,
)
from brokergroup_broker.protocol.producer import Producer
from brokergroup_broker.protocol.server import BrokerProtocolServer, ServerConfig
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_remoting.net import Credentials

HOST = "127.0.2.7"
ROOT = "test-root-" + "r" * 32
GROUP = ("C", "broker-a")
FAST = ClientConfig(
    retry_initial_backoff_ms=1,
    retry_max_backoff_ms=20,
    retry_deadline_ms=3_000,
    request_timeout_ms=3_000,
    connect_timeout_ms=2_000,
)


def pair(role: Role, broker_name: str = "broker-a") -> Credentials:
    derived = derive_rocketmq_pair(ROOT, role, "C", broker_name)
    return Credentials(derived.access_key, derived.secret_key)


BROKER_PAIR = pair(Role.BROKER)
CLIENT_PAIR = pair(Role.CLIENT)


class RecordingHandler:
    """A RequestHandler that records every call (a refused peer must cause none)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.offsets: dict[tuple[str, str, int], int] = {}

    async def send_messages(
        self, topic: str, queue_id: int | None, messages: Sequence[ProduceMessage]
    ) -> SendResult:
        self.calls.append("send")
        return SendResult(tuple(SentMessage(0, i, i * 100) for i in range(len(messages))), 1)

    async def pull_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        self.calls.append("pull")
        return PullResult((), queue_offset, 0, 0)

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        self.calls.append("query_offsets")
        return 0, 0

    async def topic_queue_count(self, topic: str) -> int:
        self.calls.append("queue_count")
        return 1

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        self.calls.append("commit")
        self.offsets[(group, topic, queue_id)] = offset

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        self.calls.append("query_consumer_offset")
        return self.offsets.get((group, topic, queue_id), NO_CONSUMER_OFFSET)


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Request codes the server decoded (wraps both decoders the server uses)."""
    seen: list[int] = []
    for name in ("decode_request", "decode_send_batch"):
        original = getattr(server, name)

        def wrapped(frame: Any, _original: Any = original) -> Any:
            seen.append(frame.code)
            return _original(frame)

        monkeypatch.setattr(server, name, wrapped)
    return seen


class Broker:
    def __init__(self, handler: RecordingHandler, srv: BrokerProtocolServer) -> None:
        self.handler = handler
        self.server = srv

    @property
    def address(self) -> str:
        return f"{HOST}:{self.server.port}"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    handler = RecordingHandler()
    srv = BrokerProtocolServer(
        handler,
        ServerConfig(auth_timeout_ms=300),
        auth=client_port_auth(BROKER_PAIR, CLIENT_PAIR, GROUP),
    )
    await srv.start(HOST, 0)
    yield Broker(handler, srv)
    await srv.stop()


async def _refusal(address: str, credentials: Credentials | None) -> str:
    with pytest.raises(AuthenticationError) as info:
        await BrokerConnection.connect(address, FAST, credentials=credentials)
    return info.value.reason


# ------------------------------------------------------------------ who is let in


@pytest.mark.parametrize("credentials", [CLIENT_PAIR, BROKER_PAIR], ids=["client", "broker"])
async def test_the_groups_pairs_are_accepted_and_every_operation_runs(
    broker: Broker, credentials: Credentials
) -> None:
    conn = await BrokerConnection.connect(broker.address, FAST, credentials=credentials)
    try:
        await conn.send("T", [ProduceMessage("T", b"x")])
        await conn.pull("T", 0, 0, 1)
        await conn.commit_consumer_offset("g", "T", 0, 5)
        assert await conn.query_consumer_offset("g", "T", 0) == 5
    finally:
        await conn.close()
    assert broker.handler.calls == ["send", "pull", "commit", "query_consumer_offset"]


@pytest.mark.parametrize(
    ("credentials", "reason"),
    [
        (
            Credentials(CLIENT_PAIR.access_key, "not-the-secret-key"),
            "the proof does not match the SecretKey of AccessKey " + CLIENT_PAIR.access_key,
        ),
        (Credentials("someone-else", "whatever-secret"), "the AccessKey is not known"),
        (
            pair(Role.CLIENT, "broker-b"),
            "the AccessKey is not known: it is the client pair of group (C, broker-b); this "
            "broker serves group (C, broker-a)",
        ),
        (None, "no credential: this broker's client port needs the group's client key pair"),
    ],
    ids=["wrong-secret", "unknown-key", "other-group", "none"],
)
async def test_a_refused_credential_is_told_why_and_nothing_is_decoded(
    broker: Broker, decoded: list[int], credentials: Credentials | None, reason: str
) -> None:
    assert reason in await _refusal(broker.address, credentials)
    assert broker.handler.calls == [] and decoded == []
    if credentials is not None:
        assert credentials.secret_key not in reason


# ------------------------------------------------------------------ raw peers


def _connect_raw(address: str) -> tuple[socket.socket, bytes]:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock, _read_exactly(sock, auth.CHALLENGE_BYTES)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _read_refusal(sock: socket.socket) -> tuple[str, bool]:
    """(reason, whether the broker then closed the connection)."""
    assert _read_exactly(sock, 1) == bytes([auth.AuthStatus.REFUSED])
    (length,) = struct.unpack(">h", _read_exactly(sock, 2))
    reason = _read_exactly(sock, length).decode()
    sock.settimeout(5)
    try:
        closed = sock.recv(1) == b""
    except ConnectionResetError:
        closed = True
    return reason, closed


async def test_an_oversized_hello_is_refused_after_its_length(
    broker: Broker, decoded: list[int]
) -> None:
    def exchange() -> tuple[str, bool]:
        sock, challenge = _connect_raw(broker.address)
        with sock:
            assert challenge.startswith(b"BGH1")
            sock.sendall(struct.pack(">h", auth.MAX_ACCESS_KEY_BYTES + 1) + b"k" * 4096)
            return _read_refusal(sock)

    reason, closed = await asyncio.to_thread(exchange)
    assert "not a HELLO: AccessKey length 256 outside [0, 255]" in reason and closed
    assert broker.handler.calls == [] and decoded == []


async def test_a_slow_hello_is_refused_after_auth_timeout_ms(
    broker: Broker, decoded: list[int]
) -> None:
    def exchange() -> tuple[str, bool]:
        sock, _ = _connect_raw(broker.address)
        with sock:
            sock.sendall(struct.pack(">h", 20) + b"partial")  # and then nothing
            return _read_refusal(sock)

    reason, closed = await asyncio.to_thread(exchange)
    assert "no complete HELLO in 300 ms (auth_timeout_ms)" in reason and closed
    assert broker.handler.calls == [] and decoded == []


async def test_request_frames_before_the_handshake_are_never_decoded(
    broker: Broker, decoded: list[int]
) -> None:
    """An old client (or an attacker) opens with requests: the first bytes are read as a
    HELLO (a frame's length starts with 0x0000: an empty AccessKey) and refused."""
    frames = encode_request(1, SendMessagesRequest("T", None, (ProduceMessage("T", b"x" * 80),)))
    frames += encode_request(2, QueryOffsetsRequest("T", 0)) * 4

    def exchange() -> tuple[str, bool]:
        sock, _ = _connect_raw(broker.address)
        with sock:
            sock.sendall(frames)
            return _read_refusal(sock)

    reason, closed = await asyncio.to_thread(exchange)
    assert reason.startswith("no credential") and closed
    assert broker.handler.calls == [] and decoded == []


# ------------------------------------------------------------------ the client's side


async def test_a_client_refuses_a_broker_that_cannot_prove_the_pair() -> None:
    """A fake broker that says AUTHENTICATED without knowing the SecretKey."""
    hellos: list[bytes] = []

    async def fake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"BGH1" + secrets.token_bytes(32))
        (n,) = struct.unpack(">h", await reader.readexactly(2))
        hellos.append(await reader.readexactly(n + auth.CLIENT_PROOF_BYTES))
        writer.write(bytes([auth.AuthStatus.AUTHENTICATED]) + secrets.token_bytes(32))
        await writer.drain()
        await reader.read()  # until the client leaves
        writer.close()

    fake_server = await asyncio.start_server(fake, HOST, 0)
    address = f"{HOST}:{fake_server.sockets[0].getsockname()[1]}"
    try:
        reason = await _refusal(address, CLIENT_PAIR)
    finally:
        fake_server.close()
        await fake_server.wait_closed()
    assert "the broker's proof does not match the key pair" in reason
    assert hellos and hellos[0].startswith(CLIENT_PAIR.access_key.encode())


async def test_a_client_with_a_pair_refuses_an_open_port() -> None:
    srv = BrokerProtocolServer(RecordingHandler())  # no auth: --insecure-no-client-auth
    await srv.start(HOST, 0)
    try:
        reason = await _refusal(f"{HOST}:{srv.port}", CLIENT_PAIR)
        assert "does not authenticate its client port (--insecure-no-client-auth)" in reason
        conn = await BrokerConnection.connect(f"{HOST}:{srv.port}", FAST)  # no pair: served
        await conn.close()
    finally:
        await srv.stop()


# ------------------------------------------------------------------ refusals are final


async def test_producer_and_consumer_raise_the_refusal_at_once(broker: Broker) -> None:
    wrong = Credentials(CLIENT_PAIR.access_key, "not-the-secret-key")
    async with Producer("C", "broker-a", static_address=broker.address, credentials=wrong,
                        config=FAST) as producer:  # fmt: skip
        with pytest.raises(AuthenticationError, match="does not match the SecretKey"):
            await producer.send(ProduceMessage("T", b"x"))
        assert producer.retries == 0
    async with Consumer("C", "broker-a", group="g", static_address=broker.address,
                        credentials=wrong, config=FAST) as consumer:  # fmt: skip
        with pytest.raises(AuthenticationError, match="does not match the SecretKey"):
            await consumer.commit("T", 0, 7)
    assert broker.handler.calls == []


class RefusingController:
    """The controller client's answer to a wrong discovery credential."""

    def __init__(self) -> None:
        self.calls = 0

    async def replica_info(self, cluster_name: str, broker_name: str) -> Any:
        self.calls += 1
        raise ControllerError(ErrorCode.UNAUTHORIZED, "the credential is not valid")

    async def watch(self, *args: Any) -> Any:
        raise ControllerError(ErrorCode.UNAUTHORIZED, "the credential is not valid")

    async def close(self) -> None:
        return None


async def test_a_controller_refusing_the_discovery_credential_is_not_no_master() -> None:
    """Before: each refusal was 'unknown now', retried for the whole budget and reported as
    'no master for C/broker-a right now'."""
    controller = RefusingController()
    discovery = ControllerDiscovery("C", "broker-a", ["127.0.2.9:1"], client=controller)
    async with Producer("C", "broker-a", discovery=discovery, config=FAST) as producer:
        with pytest.raises(AuthenticationError, match="UNAUTHORIZED: the credential is not"):
            await producer.send(ProduceMessage("T", b"x"))
        assert producer.retries == 0 and controller.calls == 1


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def _key_file(path: Path, credentials: Credentials) -> Path:
    path.write_text(
        json.dumps({"accessKey": credentials.access_key, "secretKey": credentials.secret_key})
    )
    return path


async def test_produce_and_consume_commands_take_a_key_file_and_report_a_refusal(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BROKERGROUP_LOCAL_DIR", str(tmp_path / "no-runtime"))
    good = _key_file(tmp_path / "good.json", CLIENT_PAIR)
    bad = _key_file(tmp_path / "bad.json", Credentials(CLIENT_PAIR.access_key, "wrong-secret"))
    common = ["--broker-address", broker.address, "--retry-deadline-ms", "2000"]
    produce = ["produce", "--topic", "T", "--count", "20", "--batch", "2", "--json", *common]

    summary = await commands.produce(_parse([*produce, "--key-file", str(good)]))
    assert (summary["acked"], summary["failed"], summary["refused"]) == (20, 0, None)

    summary = await commands.produce(_parse([*produce, "--key-file", str(bad), "--in-flight", "1"]))
    assert "does not match the SecretKey" in summary["refused"]
    # Stopped at the first refusal: one batch failed, the other 9 were never sent.
    assert (summary["sent"], summary["failed"], summary["errors"]) == (2, 2, {"UNAUTHENTICATED": 2})

    monkeypatch.setenv("BROKERGROUP_KEY_FILE", str(bad))
    consume = ["consume", "--topic", "T", "--group", "g", "--idle-timeout-ms", "100", *common]
    count, error = await commands.consume(_parse(consume), io.StringIO())
    assert count == 0 and error is not None
    assert error.startswith("UNAUTHENTICATED") and "does not match the SecretKey" in error
    monkeypatch.delenv("BROKERGROUP_KEY_FILE")

    summary = await commands.produce(_parse(produce))  # no key file, no runtime
    assert summary["refused"] is not None and "no credential" in summary["refused"]
    assert broker.handler.calls.count("send") == 10


def test_cmd_produce_prints_the_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BROKERGROUP_LOCAL_DIR", str(tmp_path / "no-runtime"))

    async def scenario() -> int:
        srv = BrokerProtocolServer(
            RecordingHandler(), auth=client_port_auth(BROKER_PAIR, CLIENT_PAIR, GROUP)
        )
        await srv.start(HOST, 0)
        try:
            args = _parse(["produce", "--topic", "T", "--count", "3",
                           "--broker-address", f"{HOST}:{srv.port}"])  # fmt: skip
            return await asyncio.to_thread(commands.cmd_produce, args)
        finally:
            await srv.stop()

    assert asyncio.run(scenario()) == 1
    err = capsys.readouterr().err
    assert "refused: " in err and "no credential" in err


async def test_stop_closes_a_connection_still_in_its_handshake() -> None:
    srv = BrokerProtocolServer(
        RecordingHandler(),
        ServerConfig(auth_timeout_ms=60_000),
        auth=client_port_auth(BROKER_PAIR, CLIENT_PAIR, GROUP),
    )
    await srv.start(HOST, 0)
    reader, writer = await asyncio.open_connection(HOST, srv.port)
    assert (await reader.readexactly(auth.CHALLENGE_BYTES)).startswith(b"BGH1")
    assert srv.connection_count == 1  # waiting for a HELLO that never comes
    await srv.stop()
    assert await reader.read() == b""  # closed by the broker, no answer
    assert srv.connection_count == 0
    writer.close()
