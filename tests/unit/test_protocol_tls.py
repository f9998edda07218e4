"""TLS on the broker's client protocol port (issue 36 item 1; protocol/server.py "TLS"), real
sockets on 127.0.0.1 (a name of the test certificate).

The port speaks first (its authentication challenge, in the clear); the client's answer's
first byte decides, as RocketMQ's TlsModeHandler does on the remoting ports: 0x16 opens a TLS
session in which the key-pair handshake starts over; a plaintext HELLO starts with 0.

- enforcing: a TLS client verifying the broker against the CA sends and pulls; a socket tap
  between them sees the clear challenge, then only TLS records: no body either way (the
  same tap on a plaintext connection sees both bodies); a plaintext client is refused with
  the reason, and the handler never sees a request;
- permissive: a plaintext and a TLS client both work, on one port;
- a client verifying against another CA, or a broker with an expired certificate, gets no
  session (BrokerConnectionError naming TLS);
- disabled: a TLS client gets no session, plaintext works as before.
"""

from __future__ import annotations

import datetime
import zlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from brokergroup_broker.core.remoting_keys import client_port_auth
from brokergroup_broker.protocol import auth
from brokergroup_broker.protocol.client import (
    AuthenticationError,
    BrokerConnection,
    BrokerConnectionError,
    ClientConfig,
)
from brokergroup_broker.protocol.messages import (
    ProduceMessage,
    PulledMessage,
    PullResult,
    SendResult,
    SentMessage,
)
from brokergroup_broker.protocol.server import BrokerProtocolServer, ServerConfig
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_remoting.net import Credentials
from brokergroup_remoting.tls import ServerTls, TlsMode, client_context, server_context
from tests.unit.socket_tap import SocketTap
from tests.unit.tls_material import Material, make_material

HOST = "127.0.0.1"  # a name of the test certificate
ROOT = "test-root-" + "t" * 32
GROUP = ("C", "broker-a")
BODY = b"CLIENT-PORT-BODY-IN-CLEAR " * 8


def _pair(role: Role) -> Credentials:
    derived = derive_rocketmq_pair(ROOT, role, *GROUP)
    return Credentials(derived.access_key, derived.secret_key)


CLIENT_PAIR = _pair(Role.CLIENT)


class MemoryHandler:
    """Keeps sent messages per queue and serves them to pulls (bodies go both ways)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.queue: list[bytes] = []

    async def send_messages(
        self, topic: str, queue_id: int | None, messages: Sequence[ProduceMessage]
    ) -> SendResult:
        self.calls.append("send")
        first = len(self.queue)
        self.queue += [m.body for m in messages]
        return SendResult(tuple(SentMessage(0, first + i, 0) for i in range(len(messages))), 1)

    async def pull_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        self.calls.append("pull")
        bodies = self.queue[queue_offset : queue_offset + max_count]
        pulled = tuple(
            PulledMessage(topic, 0, queue_offset + i, 0, body, body_crc=zlib.crc32(body))
            for i, body in enumerate(bodies)
        )
        return PullResult(pulled, queue_offset + len(pulled), 0, len(self.queue))

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        return 0, len(self.queue)

    async def topic_queue_count(self, topic: str) -> int:
        return 1

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        return None

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        return -1


@pytest.fixture
def material(tmp_path: Path) -> Material:
    return make_material(tmp_path, datetime.datetime.now(datetime.UTC))


class Port:
    def __init__(self) -> None:
        self.servers: list[BrokerProtocolServer] = []
        self.taps: list[SocketTap] = []

    async def start(
        self, mode: TlsMode, m: Material, *, expired: bool = False
    ) -> tuple[MemoryHandler, str]:
        handler = MemoryHandler()
        cert, key = (m.expired_cert_file, m.expired_key_file) if expired else (
            m.cert_file, m.key_file
        )  # fmt: skip
        tls = ServerTls(mode, None if mode is TlsMode.DISABLED else server_context(cert, key))
        srv = BrokerProtocolServer(
            handler, ServerConfig(auth_timeout_ms=2000),
            auth=client_port_auth(_pair(Role.BROKER), CLIENT_PAIR, GROUP), tls=tls,
        )  # fmt: skip
        await srv.start(HOST, 0)
        self.servers.append(srv)
        return handler, f"{HOST}:{srv.port}"

    async def tap(self, address: str) -> tuple[SocketTap, str]:
        host, port = address.rsplit(":", 1)
        tap = SocketTap((host, int(port)))
        bound = await tap.start()
        self.taps.append(tap)
        return tap, f"{bound[0]}:{bound[1]}"


@pytest.fixture
async def port() -> AsyncIterator[Port]:
    p = Port()
    yield p
    for tap in p.taps:
        await tap.close()
    for srv in p.servers:
        await srv.stop()


def _config(tls: object | None) -> ClientConfig:
    return ClientConfig(connect_timeout_ms=3000, request_timeout_ms=3000, tls=tls)  # type: ignore[arg-type]


async def _round_trip(address: str, config: ClientConfig) -> list[bytes]:
    conn = await BrokerConnection.connect(address, config, credentials=CLIENT_PAIR)
    try:
        await conn.send("T", [ProduceMessage("T", BODY + b"1"), ProduceMessage("T", BODY + b"2")])
        pulled = await conn.pull("T", 0, 0, 10)
    finally:
        await conn.close()
    return [m.body for m in pulled.messages]


async def test_enforcing_serves_tls_clients_and_no_body_crosses_in_clear(
    port: Port, material: Material
) -> None:
    handler, address = await port.start(TlsMode.ENFORCING, material)
    tap, through_tap = await port.tap(address)
    tls = _config(client_context(material.ca_file))
    assert await _round_trip(through_tap, tls) == [BODY + b"1", BODY + b"2"]
    assert handler.calls == ["send", "pull"]
    # The clear challenge, then the ClientHello; the answer is TLS records only.
    assert tap.to_client[: len(b"BGH1")] == b"BGH1"
    assert tap.to_server[:1] == b"\x16"
    assert tap.to_client[auth.CHALLENGE_BYTES : auth.CHALLENGE_BYTES + 1] == b"\x16"
    assert b"CLIENT-PORT-BODY" not in tap.seen
    assert CLIENT_PAIR.access_key.encode() not in tap.seen

    # A plaintext client of the enforcing port: refused with the reason, no request served.
    with pytest.raises(AuthenticationError, match="enforces TLS"):
        await BrokerConnection.connect(address, _config(None), credentials=CLIENT_PAIR)
    assert handler.calls == ["send", "pull"]


async def test_permissive_serves_plaintext_and_tls_on_one_port(
    port: Port, material: Material
) -> None:
    handler, address = await port.start(TlsMode.PERMISSIVE, material)
    tap, through_tap = await port.tap(address)
    assert await _round_trip(through_tap, _config(None)) == [BODY + b"1", BODY + b"2"]
    # The tap sees a plaintext connection's bodies both ways: it would catch them.
    assert tap.to_server.count(b"CLIENT-PORT-BODY") >= 2
    assert tap.to_client.count(b"CLIENT-PORT-BODY") >= 2
    pulled = await _round_trip(address, _config(client_context(material.ca_file)))
    assert pulled == [BODY + b"1", BODY + b"2", BODY + b"1", BODY + b"2"]
    assert handler.calls == ["send", "pull", "send", "pull"]


@pytest.mark.parametrize("case", ["client trusts another CA", "broker certificate expired"])
async def test_a_certificate_that_does_not_verify_gets_no_session(
    port: Port, material: Material, case: str
) -> None:
    expired = case == "broker certificate expired"
    handler, address = await port.start(TlsMode.ENFORCING, material, expired=expired)
    ca = material.ca_file if expired else material.other_ca_file
    with pytest.raises(BrokerConnectionError, match="TLS handshake failed"):
        await BrokerConnection.connect(
            address, _config(client_context(ca)), credentials=CLIENT_PAIR
        )
    assert handler.calls == []


async def test_disabled_refuses_tls_and_serves_plaintext(port: Port, material: Material) -> None:
    handler, address = await port.start(TlsMode.DISABLED, material)
    with pytest.raises(BrokerConnectionError):
        await BrokerConnection.connect(
            address, _config(client_context(material.ca_file)), credentials=CLIENT_PAIR
        )
    assert await _round_trip(address, _config(None)) == [BODY + b"1", BODY + b"2"]
    assert handler.calls == ["send", "pull"]
