"""The byte link under one HA connection: the bare socket, or mutual TLS over it.

HA replication is an internal link (issue 36, docs/security.md "TLS"): when the broker holds a
certificate and the CA (`--tls-cert-file`, `--tls-key-file`, `--tls-ca-file`), the master asks
every slave for a certificate chaining to the CA (`ssl.CERT_REQUIRED`) and the slave verifies
the master's against it, host name included; the HA secret's challenge (ha/auth.py) and every
frame then run inside the session. Without TLS the link is the socket itself and the master
sends commit-log bytes with sendfile; under TLS they are read (pread) and encrypted.

`TlsLink` drives an `ssl.SSLObject` over two memory BIOs on the non-blocking socket the HA
services already use (`loop.sock_recv`/`sock_sendall`), so the services keep their one socket
and their timeouts. One task reads and one writes at a time (the services' rule); the
outgoing BIO is flushed under a lock, so records leave in the order they were made.
A TCP end of stream without TLS's close_notify reads as the end of the stream, as on the bare
socket: HA frames carry their lengths, so a cut frame is still seen as one.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl

#: Bytes read from the socket per call while TLS wants more.
_READ_BYTES = 256 * 1024


class PlainLink:
    """The bare socket (no TLS)."""

    sendfile_ok = True

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    async def sendall(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def recv(self, max_bytes: int) -> bytes:
        return await asyncio.get_running_loop().sock_recv(self.sock, max_bytes)


class TlsLink:
    """A TLS session over a connected non-blocking socket; `handshake` before use.
    `ssl.SSLError` (a certificate refused, not TLS) surfaces from `handshake`."""

    sendfile_ok = False

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
    ) -> None:
        self.sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        self._flushing = asyncio.Lock()

    async def handshake(self) -> None:
        while True:
            try:
                self._ssl.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if not await self._fill():
                    raise ConnectionResetError("the peer closed during the TLS handshake") from None
        await self._flush()

    async def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = self._ssl.write(view)
            view = view[written:]
        await self._flush()

    async def recv(self, max_bytes: int) -> bytes:
        """Up to `max_bytes` of plaintext; b"" at the end of the stream."""
        while True:
            try:
                return self._ssl.read(max_bytes)
            except ssl.SSLWantReadError:
                if self._outgoing.pending:  # a post-handshake message wants an answer
                    await self._flush()  # (else never wait on the writer's flush)
                if not await self._fill():
                    return b""
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""

    async def send_range(self, header: bytes, fd: int, position: int, count: int) -> None:
        """A transfer header and `count` bytes of `fd` from `position`, encrypted (what
        sendfile does on a bare socket)."""
        data = os.pread(fd, count, position)  # page cache: the batch was just written
        if len(data) != count:
            raise OSError(f"short read of the commit log: {len(data)} of {count} bytes")
        await self.sendall(header + data)

    async def _fill(self) -> bool:
        data = await asyncio.get_running_loop().sock_recv(self.sock, _READ_BYTES)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        async with self._flushing:
            data = self._outgoing.read()
            if data:
                await asyncio.get_running_loop().sock_sendall(self.sock, data)


Link = PlainLink | TlsLink
