"""TLS on a remoting port (brokergroup_remoting.tls, net.RemotingServer(tls=...)) on real
loopback sockets, with certificates made by brokergroup_remoting.certificates.

RocketMQ's three server modes: under `permissive` a plaintext and a TLS client are both
served on one port; under `enforcing` a plaintext client is closed before a byte of its
frame is parsed; under `disabled` a TLS client gets no session. A client that verifies
refuses a server certificate from another CA and an expired one; a port that asks for a
client certificate (mutual TLS) refuses a client without one; a peer that opens and says
nothing gives its connection slot back after the handshake timeout.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from brokergroup_remoting import RemotingCommand
from brokergroup_remoting.certificates import not_after
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.net import (
    Connection,
    Credentials,
    RemotingClient,
    RemotingServer,
    ServerAuth,
)
from brokergroup_remoting.tls import (
    TLS_HANDSHAKE_RECORD,
    Accept,
    ServerTls,
    TlsMode,
    accept_as,
    client_context,
    server_context,
)
from tests.unit.tls_material import Material, make_material

ECHO = 9001
KEYS = {"rocketmq2": "12345678"}
GOOD = Credentials("rocketmq2", "12345678")
NOW = datetime.datetime.now(datetime.UTC)


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return make_material(tmp_path_factory.mktemp("tls"), NOW)


class Echo:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def echo(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self.seen.append(cmd.fields()["text"])
        return response_to(cmd, fields={"text": cmd.fields()["text"]})


@dataclass
class Served:
    server: RemotingServer
    echo: Echo

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"


@pytest.fixture
async def serve() -> AsyncIterator[object]:
    servers: list[RemotingServer] = []

    async def start(tls: ServerTls | None) -> Served:
        echo = Echo()
        server = RemotingServer({ECHO: echo.echo}, auth=ServerAuth(KEYS.get), name="t", tls=tls)
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return Served(server, echo)

    yield start
    for server in servers:
        await server.close()


async def _echo(address: str, text: str, **kw: object) -> str:
    client = await RemotingClient.connect(address, credentials=GOOD, **kw)  # type: ignore[arg-type]
    try:
        answer = await client.invoke(request(ECHO, 0, {"text": text}), timeout_s=5)
        return answer.fields()["text"]
    finally:
        await client.close()


def test_the_first_byte_decides_as_rocketmqs_tls_mode_handler() -> None:
    for first in range(256):
        hello = first == TLS_HANDSHAKE_RECORD
        assert accept_as(TlsMode.DISABLED, first) is (Accept.REFUSE if hello else Accept.PLAIN)
        assert accept_as(TlsMode.PERMISSIVE, first) is (Accept.TLS if hello else Accept.PLAIN)
        assert accept_as(TlsMode.ENFORCING, first) is (Accept.TLS if hello else Accept.REFUSE)


def test_a_tls_mode_without_a_certificate_is_refused_at_configuration() -> None:
    with pytest.raises(ValueError, match="needs a server certificate"):
        ServerTls(TlsMode.ENFORCING)
    assert ServerTls(TlsMode.DISABLED).context is None


def test_certificates_carry_their_names_and_expiry(material: Material) -> None:
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(material.cert_file.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert not_after(material.cert_file.read_bytes()) > NOW + datetime.timedelta(days=364)
    assert material.key_file.stat().st_mode & 0o077 == 0


async def test_permissive_serves_plaintext_and_tls_clients_on_one_port(
    serve: object, material: Material
) -> None:
    tls = ServerTls(TlsMode.PERMISSIVE, server_context(material.cert_file, material.key_file))
    served = await serve(tls)  # type: ignore[operator]
    verified = client_context(material.ca_file)
    assert await _echo(served.address, "plain") == "plain"
    assert await _echo(served.address, "sealed", tls=verified) == "sealed"
    assert await _echo(served.address, "unverified", tls=client_context(None)) == "unverified"
    assert served.echo.seen == ["plain", "sealed", "unverified"]


async def test_enforcing_closes_a_plaintext_client_before_parsing_its_frame(
    serve: object, material: Material
) -> None:
    tls = ServerTls(TlsMode.ENFORCING, server_context(material.cert_file, material.key_file))
    served = await serve(tls)  # type: ignore[operator]
    with pytest.raises((ConnectionError, TimeoutError)):
        await _echo(served.address, "plain")
    assert await _echo(served.address, "sealed", tls=client_context(material.ca_file)) == "sealed"
    assert served.echo.seen == ["sealed"]
    assert served.server.guard.connections == 0


async def test_disabled_gives_a_tls_client_no_session(serve: object, material: Material) -> None:
    served = await serve(ServerTls(TlsMode.DISABLED))  # type: ignore[operator]
    with pytest.raises((ssl.SSLError, ConnectionError, TimeoutError)):
        await _echo(served.address, "sealed", tls=client_context(material.ca_file))
    assert await _echo(served.address, "plain") == "plain"
    assert served.echo.seen == ["plain"]


@pytest.mark.parametrize("server_cert", ["other", "expired"])
async def test_a_verifying_client_refuses_another_cas_or_an_expired_certificate(
    serve: object, material: Material, server_cert: str
) -> None:
    cert, key = {
        "other": (material.other_cert_file, material.other_key_file),
        "expired": (material.expired_cert_file, material.expired_key_file),
    }[server_cert]
    served = await serve(ServerTls(TlsMode.ENFORCING, server_context(cert, key)))  # type: ignore[operator]
    with pytest.raises(ssl.SSLCertVerificationError):
        await _echo(served.address, "sealed", tls=client_context(material.ca_file))
    assert served.echo.seen == []


async def test_mutual_tls_refuses_a_client_without_a_certificate_of_the_ca(
    serve: object, material: Material
) -> None:
    context = server_context(material.cert_file, material.key_file, client_ca_file=material.ca_file)
    served = await serve(ServerTls(TlsMode.ENFORCING, context))  # type: ignore[operator]
    own = client_context(material.ca_file, cert_file=material.cert_file, key_file=material.key_file)
    impostor = client_context(
        material.ca_file, cert_file=material.other_cert_file, key_file=material.other_key_file
    )
    assert await _echo(served.address, "member", tls=own) == "member"
    for refused in (client_context(material.ca_file), impostor):
        # TLS 1.3: the client's handshake ends before the server checks its certificate,
        # so the refusal shows on the first read.
        with pytest.raises((ssl.SSLError, ConnectionError, TimeoutError)):
            await _echo(served.address, "outsider", tls=refused)
    assert served.echo.seen == ["member"]


async def test_a_silent_peer_gives_its_slot_back_after_the_handshake_timeout(
    serve: object, material: Material
) -> None:
    context = server_context(material.cert_file, material.key_file)
    served = await serve(ServerTls(TlsMode.ENFORCING, context, handshake_timeout_s=0.2))  # type: ignore[operator]
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    try:
        assert await asyncio.wait_for(reader.read(1), 5) == b""  # closed by the server
    finally:
        writer.close()
    for _ in range(100):
        if served.server.guard.connections == 0:
            break
        await asyncio.sleep(0.01)
    assert served.server.guard.connections == 0
