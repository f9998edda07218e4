"""TLS on the broker's gRPC port (grpc_front/tls_front.py, issue 36 item 1) on real loopback
sockets with a real grpcio server behind the front and grpcio clients.

Under `enforcing` a TLS channel verifying the port against the CA is served and a plaintext
channel is not (its connection is closed before grpcio sees a byte); under `permissive`
both are served on the same port; a client that trusts only another CA gets no session; a
ClientHello flood beyond the front's pending bound is closed at once while a legit TLS
client is still served. GrpcFrontServer(tls=...) puts grpcio on a private Unix socket: the
socket's directory is 0700 and goes away at close.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from brokergroup_broker.grpc_front.tls_front import GrpcTlsFront, private_socket_path
from brokergroup_remoting.tls import ServerTls, TlsMode, server_context
from tests.unit.tls_material import Material, make_material

NOW = datetime.datetime.now(datetime.UTC)
METHOD = "/test.Echo/Echo"


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return make_material(tmp_path_factory.mktemp("grpc-tls"), NOW)


def _echo_handler() -> grpc.GenericRpcHandler:
    async def echo(request: bytes, _context: Any) -> bytes:
        return b"echo:" + request

    handler = grpc.unary_unary_rpc_method_handler(
        echo, request_deserializer=None, response_serializer=None
    )
    return grpc.method_handlers_generic_handler("test.Echo", {"Echo": handler})


Served = tuple[GrpcTlsFront, int]


@pytest.fixture
async def serve(material: Material) -> AsyncIterator[Callable[..., Any]]:
    """Starts grpcio on a private Unix socket and a front in `mode` on 127.0.0.1."""
    started: list[tuple[grpc.aio.Server, GrpcTlsFront]] = []

    async def start(mode: TlsMode, **kw: Any) -> Served:
        backend = private_socket_path()
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_echo_handler(),))
        assert server.add_insecure_port(f"unix:{backend}") != 0
        await server.start()
        context = server_context(material.cert_file, material.key_file, alpn=("h2",))
        front = GrpcTlsFront(ServerTls(mode, context, handshake_timeout_s=1.0), backend, **kw)
        front.start("127.0.0.1", 0)
        started.append((server, front))
        return front, front.port

    yield start
    for server, front in started:
        await front.close()
        await server.stop(0)


async def _call(channel: grpc.aio.Channel) -> bytes:
    call = channel.unary_unary(METHOD)
    answer: bytes = await call(b"marker", timeout=5)
    return answer


async def _tls_call(port: int, ca_file: Path) -> bytes:
    credentials = grpc.ssl_channel_credentials(root_certificates=ca_file.read_bytes())
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        return await _call(channel)


async def _plain_call(port: int) -> bytes:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await _call(channel)


async def test_enforcing_serves_tls_and_closes_plaintext(
    serve: Callable[..., Any], material: Material
) -> None:
    front, port = await serve(TlsMode.ENFORCING)
    assert await _tls_call(port, material.ca_file) == b"echo:marker"
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _plain_call(port)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert front.refused_plaintext >= 1 and front.served >= 1


async def test_permissive_serves_both_on_one_port(
    serve: Callable[..., Any], material: Material
) -> None:
    front, port = await serve(TlsMode.PERMISSIVE)
    assert await _tls_call(port, material.ca_file) == b"echo:marker"
    assert await _plain_call(port) == b"echo:marker"
    assert front.refused_plaintext == 0


async def test_a_client_trusting_another_ca_gets_no_session(
    serve: Callable[..., Any], material: Material
) -> None:
    front, port = await serve(TlsMode.ENFORCING)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _tls_call(port, material.other_ca_file)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # The client gives up on the certificate before the front reads its alert: the front's
    # side of the failed handshake ends a moment later, on this loop (CI saw 0 here once).
    for _ in range(500):
        if front.failed_handshakes:
            break
        await asyncio.sleep(0.01)
    assert front.failed_handshakes >= 1 and front.served == 0


async def test_a_client_hello_flood_is_bounded_and_a_legit_client_served(
    serve: Callable[..., Any], material: Material
) -> None:
    front, port = await serve(TlsMode.ENFORCING, max_pending=8)
    loop = asyncio.get_running_loop()
    # Half ClientHellos: the record header of a handshake, then nothing.
    held = []
    for _ in range(40):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"\x16\x03\x01\x02\x00\x01")
        held.append(sock)
    try:
        for _ in range(50):
            if front.refused_busy:
                break
            await asyncio.sleep(0.05)
        assert front.refused_busy >= 1
        # Pending slots come back after the handshake timeout; a legit client then gets in.
        answer = None
        for _ in range(20):
            try:
                answer = await _tls_call(port, material.ca_file)
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.3)
        assert answer == b"echo:marker"
    finally:
        for sock in held:
            await loop.run_in_executor(None, sock.close)


def test_the_backend_socket_directory_is_private() -> None:
    path = private_socket_path()
    try:
        mode = stat.S_IMODE(os.stat(path.parent).st_mode)
        assert mode == 0o700, oct(mode)
        assert len(str(path)) < 100
    finally:
        path.parent.rmdir()
