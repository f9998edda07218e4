"""TLS on the broker's gRPC port, in RocketMQ's three modes (issue 36 item 1).

grpcio's server cannot look at a connection's first byte: a port is either secure or not.
RocketMQ's proxy serves one gRPC port in `tls.server.mode` disabled / permissive / enforcing
(its `ProxyAndTlsProtocolNegotiator` sniffs the first bytes), so this port does the same in
front of grpcio:

- the public port (client port + 4) is a `SniffingListener`: each accepted connection's
  first byte is peeked, as on the remoting ports; a TLS ClientHello (0x16) gets a TLS session
  ended here (ALPN `h2`, which every gRPC client asks for), plaintext HTTP/2 (its preface
  starts with `P`) is served as it is under permissive and closed unread under enforcing;
- both then reach grpcio's plaintext server on a Unix socket in a private directory (0700,
  made for this process), one byte pipe per connection. Nothing else can reach that socket,
  so the enforcing port has no plaintext back door, and there is one grpcio server (one
  interceptor chain, one `master_lost` cycle) whatever the mode.

Rejected: two ports (a TLS one and a plaintext one) leaves every SDK endpoint setting to
the user and doubles the stable addresses; grpcio's own `ssl_server_credentials` cannot
serve permissive. The cost is one more copy of each byte in this process. The peer address
the service sees is the Unix socket's, so a message's bornHost is not filled in under TLS
(the proxy fills it from the TCP peer).

A new connection's first byte and handshake are bounded by the port's handshake timeout and
the number of connections not yet piping by `max_pending` (a ClientHello flood fills that
and new connections are closed at once, the ones being served keep going).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import ssl
import tempfile
from pathlib import Path

from brokergroup_remoting.tls import Accept, ServerTls, SniffingListener, TlsMode, sniff

log = logging.getLogger(__name__)

#: Bytes per read of a pipe.
PIPE_CHUNK_BYTES = 256 << 10
#: Connections allowed before their first byte / handshake is done (module doc).
MAX_PENDING_CONNECTIONS = 1024


def private_socket_path() -> Path:
    """A Unix socket path in a new 0700 directory (short: a socket path has 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="bg-grpc-")) / "grpc.sock"


class GrpcTlsFront:
    """The public gRPC port under TLS permissive or enforcing (module doc)."""

    def __init__(
        self,
        tls: ServerTls,
        backend: Path,
        *,
        max_pending: int = MAX_PENDING_CONNECTIONS,
    ) -> None:
        if tls.mode is TlsMode.DISABLED:
            raise ValueError("GrpcTlsFront serves TLS modes only (disabled: grpcio binds the port)")
        self._tls = tls
        self._backend = backend
        self._max_pending = max_pending
        self._listener = SniffingListener()
        self._pending = 0
        #: Counters read by tests and logs.
        self.refused_plaintext = 0
        self.refused_busy = 0
        self.failed_handshakes = 0
        self.served = 0

    @property
    def port(self) -> int:
        return self._listener.port

    def start(self, host: str, port: int) -> None:
        self._listener.start(
            host, port, self._serve, lambda exc: log.warning("gRPC TLS accept failed: %s", exc)
        )

    async def close(self) -> None:
        await self._listener.close()
        directory = self._backend.parent
        if directory.name.startswith("bg-grpc-"):
            shutil.rmtree(directory, ignore_errors=True)

    async def _serve(self, sock: socket.socket) -> None:
        if self._pending >= self._max_pending:
            self.refused_busy += 1
            sock.close()
            return
        self._pending += 1
        try:
            opened = await self._open(sock)
        finally:
            self._pending -= 1
        if opened is None:
            sock.close()
            return
        self.served += 1
        reader, writer = opened
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self._backend))
        except OSError as exc:
            log.warning("gRPC TLS: backend %s not reachable: %s", self._backend, exc)
            writer.close()
            return
        await _pipe_both(reader, writer, up_reader, up_writer)

    async def _open(
        self, sock: socket.socket
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        tls = self._tls
        loop = asyncio.get_running_loop()
        try:
            how = await sniff(sock, tls)
            if how is None:
                return None
            if how is Accept.REFUSE:
                self.refused_plaintext += 1
                log.info("gRPC: closing a plaintext connection (TLS %s)", tls.mode)
                return None
            reader = asyncio.StreamReader(limit=PIPE_CHUNK_BYTES, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            sealed = how is Accept.TLS
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                sock,
                ssl=tls.context if sealed else None,
                ssl_handshake_timeout=tls.handshake_timeout_s if sealed else None,
            )
            return reader, asyncio.StreamWriter(transport, protocol, reader, loop)
        except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError
            self.failed_handshakes += 1
            log.info("gRPC: closing a connection: no TLS session: %s", exc)
            return None


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until either side ends; then close both (a grpcio server that stops
    on master_lost ends the client's connection too)."""
    tasks = [
        asyncio.ensure_future(_copy(reader, up_writer)),
        asyncio.ensure_future(_copy(up_reader, writer)),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        for w in (writer, up_writer):
            w.close()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while data := await source.read(PIPE_CHUNK_BYTES):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
