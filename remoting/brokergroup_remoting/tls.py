"""TLS on a remoting port, with RocketMQ's three server modes (issue 36).

RocketMQ's `tls.server.mode` (`TlsSystemConfig`, `NettyRemotingServer.TlsModeHandler`):

- `disabled`: plaintext only; a TLS ClientHello is not understood and the connection closes;
- `permissive` (RocketMQ's default): the first byte decides, per connection: a TLS handshake
  record (0x16) gets a TLS session, anything else is read as plaintext remoting, so clients
  can move to TLS one by one;
- `enforcing`: TLS only; a plaintext first byte closes the connection before a byte of it
  is parsed.

A remoting frame starts with its 4-byte big-endian length, whose first byte is 0 for every
frame below 16 MiB (and RocketMQ's frames are bounded far below 0x16000000), so the one
byte tells the two apart as RocketMQ's handler does. The byte is peeked (MSG_PEEK), never
taken, so the TLS or plaintext reader sees the stream from its start.

`accept_as` is the decision (pure); `peek_first_byte` and `open_accepted` are the socket
work the transport (`net.RemotingServer`) does with it. The contexts are the standard
library's: `server_context` (optionally asking for a client certificate from `ca_file`:
mutual TLS for internal links), `client_context` (verifying the server against `ca_file`,
or trusting any server, as RocketMQ's client does by default with `tls.client.authServer`
false).

Renewal without a restart: every context these functions make is remembered (weakly) with
its files; `reload_changed` (run every second by `run_reloader` in each server process) loads
a context's certificate and key again when their files changed (mtime, size or inode: the
writers replace them by rename). OpenSSL copies a context's certificate into each session
when the session is made, so connections made afterwards present the new certificate and
established ones keep theirs: nothing is closed. A CA file that changed is added to the
verify store (the old CA stays trusted until the process restarts, which is what a CA
rollover needs). New files are tried in a throwaway context first: a key that does not match
its certificate, or a half-written file, is logged and the context keeps the old pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import socket
import ssl
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: How often `run_reloader` looks at the certificate files.
RELOAD_INTERVAL_S = 1.0

#: The first byte of a TLS record carrying a handshake (a ClientHello opens every session).
TLS_HANDSHAKE_RECORD = 0x16


class TlsMode(enum.StrEnum):
    """RocketMQ's `tls.server.mode` values."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


class Accept(enum.Enum):
    """What a server does with a new connection, by its first byte."""

    TLS = "tls"
    PLAIN = "plain"
    REFUSE = "refuse"


def accept_as(mode: TlsMode, first_byte: int) -> Accept:
    """How a port in `mode` serves a connection whose first byte is `first_byte`."""
    hello = first_byte == TLS_HANDSHAKE_RECORD
    if mode is TlsMode.DISABLED:
        return Accept.REFUSE if hello else Accept.PLAIN
    if hello:
        return Accept.TLS
    return Accept.PLAIN if mode is TlsMode.PERMISSIVE else Accept.REFUSE


@dataclass(frozen=True)
class ServerTls:
    """A remoting port's TLS: its mode and, unless disabled, its server context."""

    mode: TlsMode
    context: ssl.SSLContext | None = None
    handshake_timeout_s: float = 10.0
    """How long a new connection may take to send its first byte and finish its handshake
    (RocketMQ's sslHandshakeTimeout-like bound: a peer that opens and says nothing holds a
    connection slot this long at most)."""

    def __post_init__(self) -> None:
        if self.mode is not TlsMode.DISABLED and self.context is None:
            raise ValueError(f"TLS mode {self.mode} needs a server certificate")
        if self.handshake_timeout_s <= 0:
            raise ValueError("handshake_timeout_s must be > 0")


def server_context(
    cert_file: Path,
    key_file: Path,
    *,
    client_ca_file: Path | None = None,
    alpn: tuple[str, ...] = (),
) -> ssl.SSLContext:
    """A server's context (TLS 1.2 or newer); with `client_ca_file`, a client must present
    a certificate signed by that CA (mutual TLS); `alpn`: the protocols offered (gRPC: h2).
    Renewed from its files by `reload_changed`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    if alpn:
        context.set_alpn_protocols(list(alpn))
    _watch(context, cert_file, key_file, client_ca_file)
    return context


def client_context(
    ca_file: Path | None,
    *,
    cert_file: Path | None = None,
    key_file: Path | None = None,
) -> ssl.SSLContext:
    """A client's context: the server is verified against `ca_file` (host name included),
    or, with None, not verified at all (RocketMQ's client default; it still encrypts).
    `cert_file`/`key_file`: this client's certificate, for a server that asks for one."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.load_verify_locations(cafile=ca_file)
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    _watch(context, cert_file, key_file, ca_file)
    return context


#: A file's identity for change detection: (mtime_ns, size, inode), None when missing.
Stamp = tuple[int, int, int] | None


def file_stamp(path: Path | None) -> Stamp:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


@dataclass
class _Watched:
    context: weakref.ref[ssl.SSLContext]
    cert_file: Path | None
    key_file: Path | None
    ca_file: Path | None
    stamps: tuple[Stamp, Stamp, Stamp]


_WATCHED: list[_Watched] = []


def _watch(
    context: ssl.SSLContext, cert_file: Path | None, key_file: Path | None, ca_file: Path | None
) -> None:
    if cert_file is None and ca_file is None:
        return
    stamps = (file_stamp(cert_file), file_stamp(key_file), file_stamp(ca_file))
    _WATCHED[:] = [w for w in _WATCHED if w.context() is not None]
    _WATCHED.append(_Watched(weakref.ref(context), cert_file, key_file, ca_file, stamps))


def reload_changed() -> int:
    """Load again the files of every live context whose files changed (module doc); the
    number of contexts renewed. Never raises: a bad new file is logged, the old kept."""
    renewed = 0
    for watched in list(_WATCHED):
        context = watched.context()
        if context is None:
            _WATCHED.remove(watched)
            continue
        stamps = (
            file_stamp(watched.cert_file),
            file_stamp(watched.key_file),
            file_stamp(watched.ca_file),
        )
        if stamps == watched.stamps:
            continue
        try:
            if watched.cert_file is not None:
                trial = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                trial.load_cert_chain(watched.cert_file, watched.key_file)
                context.load_cert_chain(watched.cert_file, watched.key_file)
            if watched.ca_file is not None and stamps[2] != watched.stamps[2]:
                context.load_verify_locations(cafile=watched.ca_file)
        except (OSError, ssl.SSLError) as exc:
            log.warning("TLS: keeping the old certificate: cannot load %s: %s",
                        watched.cert_file, exc)  # fmt: skip
            watched.stamps = stamps  # logged once per change, tried again at the next one
            continue
        watched.stamps = stamps
        renewed += 1
        log.info("TLS: certificate %s loaded again (new connections present it)",
                 watched.cert_file or watched.ca_file)  # fmt: skip
    return renewed


async def run_reloader(interval_s: float = RELOAD_INTERVAL_S) -> None:
    """`reload_changed` every `interval_s`, in the loop that serves the contexts' sessions
    (OpenSSL contexts are not changed under a handshake of another thread)."""
    while True:
        await asyncio.sleep(interval_s)
        reload_changed()


async def peek_first_byte(sock: socket.socket, timeout_s: float) -> int | None:
    """The first byte the peer sent, left in the socket; None when it closed first.
    Raises TimeoutError when nothing came within `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _set_done, readable)
            try:
                await asyncio.wait_for(readable, max(deadline - loop.time(), 0.0))
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data[0] if data else None


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SniffingListener:
    """A listening socket that accepts its connections itself (so each one's first byte is
    peeked before any stream reads it), each handled in a task of its own: the one accept
    loop of every TLS port (the remoting transport, the broker's client port, the local
    master forwarder)."""

    def __init__(self) -> None:
        self._socket: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        #: Connections being handled (their first byte, their handshake, or more).
        self.accepting: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        assert self._socket is not None, "not listening"
        bound: int = self._socket.getsockname()[1]
        return bound

    def start(
        self,
        host: str,
        port: int,
        handle: Callable[[socket.socket], Coroutine[Any, Any, None]],
        on_error: Callable[[OSError], None],
    ) -> None:
        """Listen on host:port and hand every accepted socket to `handle`; an accept error
        (out of descriptors) is reported and retried."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.create_server((host.strip("[]"), port), family=family, backlog=1024)
        listening.setblocking(False)
        self._socket = listening
        self._acceptor = asyncio.create_task(self._accept(listening, handle, on_error))

    async def _accept(
        self,
        listening: socket.socket,
        handle: Callable[[socket.socket], Coroutine[Any, Any, None]],
        on_error: Callable[[OSError], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listening)
            except OSError as exc:
                on_error(exc)
                await asyncio.sleep(0.1)
                continue
            task = asyncio.create_task(handle(sock))
            self.accepting.add(task)
            task.add_done_callback(self.accepting.discard)

    async def close(self, *, cancel: Callable[[asyncio.Task[None]], bool] = lambda _: True) -> None:
        """Stop accepting and close the socket; cancel the connections `cancel` picks (all
        by default) that are still being handled."""
        acceptor, self._acceptor = self._acceptor, None
        if acceptor is not None:
            acceptor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await acceptor
        if self._socket is not None:
            self._socket.close()
        for task in list(self.accepting):
            if cancel(task):
                task.cancel()


async def sniff(sock: socket.socket, tls: ServerTls) -> Accept | None:
    """How to serve an accepted socket, by its first byte (None: it closed first). Raises
    TimeoutError when it sends nothing within the handshake timeout."""
    first = await peek_first_byte(sock, tls.handshake_timeout_s)
    return None if first is None else accept_as(tls.mode, first)


async def open_accepted(
    sock: socket.socket,
    *,
    context: ssl.SSLContext | None,
    limit: int,
    handshake_timeout_s: float,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over an accepted socket, with a server-side TLS session when `context` is
    given (the handshake done, or failed with ssl.SSLError/TimeoutError/ConnectionError)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    if context is None:
        transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
    else:
        transport, _ = await loop.connect_accepted_socket(
            lambda: protocol, sock, ssl=context, ssl_handshake_timeout=handshake_timeout_s
        )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def load_server_tls(
    mode: str,
    cert_file: str | Path | None,
    key_file: str | Path | None,
    *,
    client_ca_file: str | Path | None = None,
    alpn: tuple[str, ...] = (),
) -> ServerTls:
    """A port's TLS from its settings (`--remoting-tls-mode`, `--tls-cert-file`,
    `--tls-key-file`); ValueError names what is wrong, before the port opens."""
    try:
        tls_mode = TlsMode(mode)
    except ValueError:
        choices = ", ".join(m.value for m in TlsMode)
        raise ValueError(f"TLS mode {mode!r} is not one of {choices}") from None
    if tls_mode is TlsMode.DISABLED:
        return ServerTls(tls_mode)
    if not cert_file or not key_file:
        raise ValueError(f"TLS mode {tls_mode} needs a certificate and key file")
    try:
        context = server_context(
            Path(cert_file),
            Path(key_file),
            client_ca_file=None if client_ca_file is None else Path(client_ca_file),
            alpn=alpn,
        )
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS certificate {cert_file}: {exc}") from exc
    return ServerTls(tls_mode, context)
