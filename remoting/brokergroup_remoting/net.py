"""The one asyncio transport for RocketMQ's remoting protocol (every remoting port and peer).

The codec (`frame`, `command`, `acl`, `fields`) is sans-I/O; this module is the thin shell
around it, shared by the broker's remoting port, the name server and the controller's
remoting port (servers) and by whatever calls them (clients, the controller notifying
brokers), so there is one socket loop, one place that checks signatures, one place that
answers refusals and one place that bounds a peer.

A `Connection` is symmetric, as RocketMQ's NettyRemotingAbstract is: either side may send
requests (each gets a fresh opaque and waits for the response carrying it) and answer the
peer's requests through `handlers`. On a server, every request is checked before dispatch:
its AccessKey/SecretKey signature (`ServerAuth`; refused with NO_PERMISSION before the
handler sees the request, so nothing the request names is looked up), then its code (unknown
→ REQUEST_CODE_NOT_SUPPORTED with a remark). Handlers of one connection run concurrently, so
a long-polling PULL_MESSAGE does not hold up the requests behind it; at most
`max_in_flight` per connection (more → SYSTEM_BUSY, as RocketMQ's rejected thread pool
answers).

A handler answers by returning a response, or refuses by raising `RequestRefused(code,
remark)` (RocketMQ's AbortProcessException) or `BadField` (a header it cannot read:
SYSTEM_ERROR, or the server's `bad_field_code`); a server's `translate` maps its core's own
errors to refusals. Anything else is a defect: logged once with the request code (never the
body) and answered SYSTEM_ERROR; the connection and the others go on. A frame that breaks
the protocol or a limit closes that connection only: the byte stream cannot be trusted after
it, and there is no opaque to answer.

Bounds (`ListenerLimits`, docs/security.md "Limits"): connections per port and per source;
until its first signed request a connection gets small frame bounds and a share of one
per-port byte budget, and is closed after `max_refusals_before_auth` refused requests; a connection whose unsent answers pass `max_unsent_bytes` is not read
until the peer takes them; one idle for `idle_timeout_s` is closed; refusals are logged at
most `log_lines_per_minute` times a minute, with client-chosen text made printable.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from brokergroup_remoting.acl import SignatureFault, sign, verify
from brokergroup_remoting.codes import ResponseCode
from brokergroup_remoting.command import (
    DEFAULT_LIMITS,
    FLAG_ONEWAY,
    RemotingCommand,
    RemotingLimits,
    response_to,
)
from brokergroup_remoting.errors import RemoteProtocolError
from brokergroup_remoting.fields import BadField, RequestRefused, quoted
from brokergroup_remoting.frame import FrameDecoder, encode
from brokergroup_remoting.listener import (
    DEFAULT_LISTENER_LIMITS,
    ListenerGuard,
    ListenerLimits,
    LogBudget,
)
from brokergroup_remoting.tls import (
    Accept,
    ServerTls,
    SniffingListener,
    TlsMode,
    open_accepted,
    sniff,
)

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, "Connection"], Awaitable[RemotingCommand | None]]
"""Answers one request: the response (built with `response_to`), or None for no answer; or
raises `RequestRefused`."""

Translate = Callable[[Exception], RequestRefused | None]
"""A front end's own errors as refusals (None: not one of its errors, a defect)."""

_READ_CHUNK = 256 * 1024
#: How long a close waits for the peer to take the answers already given.
_CLOSE_FLUSH_S = 2.0
#: A refusal's remark quotes at most this much of an exception's text.
_REMARK_CHARS = 512


@dataclass(frozen=True)
class ServerAuth:
    """How a server checks requests: `secret_for(accessKey)` gives the SecretKey or None.

    `exempt_codes` are answered unsigned (keep it empty unless a code must serve peers
    without keys, and say why where it is set). `authorize(accessKey, request)`, when set,
    runs once the signature verified and the code is one the server serves: it returns why
    that key may not make that request (answered NO_PERMISSION), or None. It sees the
    header's (signed) fields only, never the body. `unknown_key_reason(accessKey)`, when
    set, may say why an AccessKey `secret_for` does not know is not served here (added to
    the NO_PERMISSION remark; it must name no secret). `authorize_from`, when set, replaces
    `authorize` and also gets the peer's host (a user's sourceIps, RocketMQ's remark "from
    <ip>"; brokergroup_broker.core.users); it runs after the signature verified, so what it
    reads of the request (a heartbeat's body) was signed.
    """

    secret_for: Callable[[str], str | None]
    exempt_codes: frozenset[int] = frozenset()
    authorize: Callable[[str, RemotingCommand], str | None] | None = None
    unknown_key_reason: Callable[[str], str | None] | None = None
    authorize_from: Callable[[str, RemotingCommand, str | None], str | None] | None = None


@dataclass(frozen=True)
class Credentials:
    """A client's key pair; every request it sends is signed as AclClientRPCHook does."""

    access_key: str
    secret_key: str

    def __repr__(self) -> str:  # never log the secret
        return f"Credentials(access_key={self.access_key!r})"


@dataclass(frozen=True)
class Dispatch:
    """How a server turns what its handlers raise into answers (one per front end)."""

    bad_field_code: int = ResponseCode.SYSTEM_ERROR
    translate: Translate | None = None


class ConnectionClosed(ConnectionError):
    """The connection closed before the response arrived."""


class Connection:
    """One open remoting connection, on either side."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        handlers: Mapping[int, Handler],
        auth: ServerAuth | None = None,
        credentials: Credentials | None = None,
        limits: RemotingLimits = DEFAULT_LIMITS,
        listener: ListenerLimits = DEFAULT_LISTENER_LIMITS,
        guard: ListenerGuard | None = None,
        dispatch: Dispatch = Dispatch(),
        log_budget: LogBudget | None = None,
        name: str = "remoting",
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handlers = handlers
        self._auth = auth
        self._credentials = credentials
        self._limits = limits
        self._listener = listener
        self._guard = guard
        self._dispatch_policy = dispatch
        self._log_budget = log_budget or LogBudget(listener.log_lines_per_minute)
        # A server reads small frames until the peer has signed one request.
        self._authenticated = auth is None
        self._refused_before_auth = 0
        self._decoder = FrameDecoder(limits if auth is None else listener.pre_auth_limits)
        self._name = name
        self._loop = asyncio.get_running_loop()
        self.last_activity = self._loop.time()
        """Loop time of the last read or write (the idle timeout's reading)."""
        # Frames written in one turn of the loop go out in one write(2) (`_flush`): the
        # group commit answers every send it covers in the same turn.
        self._outbox: list[bytes] = []
        self._outbox_bytes = 0
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        self._on_close: list[Callable[[], None]] = []
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.access_key: str | None = None
        """The AccessKey of the last request that passed the signature check."""

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def transport(self) -> asyncio.BaseTransport:
        """The socket's transport."""
        return self._writer.transport

    @property
    def in_flight(self) -> int:
        """Requests of this connection being handled now."""
        return len(self._tasks)

    def on_close(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when the connection closes (at once if it has)."""
        if self.closed:
            self._loop.call_soon(callback)
        else:
            self._on_close.append(callback)

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send request `cmd` (its opaque is replaced) and wait for its response."""
        opaque = next(self._opaques)
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = future
        try:
            await self._write(self._outgoing(cmd, opaque))
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(opaque, None)

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send request `cmd` with the oneway flag; nothing comes back."""
        out = self._outgoing(cmd, next(self._opaques))
        await self._write(dataclasses.replace(out, flag=out.flag | FLAG_ONEWAY))

    async def close(self) -> None:
        if not self._writer.is_closing():
            if self._outbox:  # answers already given go out before the close
                self._flush()
            self._writer.close()
        try:
            # A peer that reads nothing would hold the flush (and this close) forever.
            await asyncio.wait_for(self._writer.wait_closed(), _CLOSE_FLUSH_S)
        except TimeoutError:
            self._writer.transport.abort()
        except Exception:
            log.debug("%s: closing %s", self._name, self.peer, exc_info=True)
        self._finish()

    async def run(self) -> None:
        """Read and dispatch until EOF, a protocol error, a limit or `close()`."""
        try:
            while True:
                await self._wait_for_peer_to_read()
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    if not self._decoder.at_frame_boundary:
                        self._log(logging.WARNING, "%s closed inside a frame", self.peer)
                    return
                self.last_activity = self._loop.time()
                self._decoder.feed(data)
                for cmd in self._decoder.commands():
                    self._dispatch(cmd)
                    if self._refused_before_auth >= self._listener.max_refusals_before_auth:
                        self._log(
                            logging.WARNING,
                            "closing %s: %d requests refused and none signed",
                            self.peer,
                            self._refused_before_auth,
                        )
                        return
                if not self._authenticated and self._guard is not None:
                    held = self._decoder.buffered_bytes
                    if not self._guard.hold_pre_auth(id(self), held):
                        self._log(
                            logging.WARNING,
                            "closing %s: %d bytes buffered before any signed request, over "
                            "the port's pre-authentication budget of %d bytes",
                            self.peer,
                            held,
                            self._listener.pre_auth_budget_bytes,
                        )
                        return
        except RemoteProtocolError as exc:
            self._log(logging.WARNING, "closing %s: %s", self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("%s: %s: %s", self._name, self.peer, exc)
        finally:
            await self.close()

    async def _wait_for_peer_to_read(self) -> None:
        """Stop reading while the answers the peer has not taken are over the bound."""
        transport = self._writer.transport
        bound = self._listener.max_unsent_bytes
        if self._outbox_bytes + transport.get_write_buffer_size() <= bound:
            return
        self._flush()
        if transport.get_write_buffer_size() > bound:
            # The transport paused writing at its high-water mark: drain() returns below the
            # low one (a peer that never reads is closed by the idle timeout meanwhile).
            await self._writer.drain()

    def _log(self, level: int, msg: str, *args: object) -> None:
        allowed, held = self._log_budget.allow(self._loop.time())
        if not allowed:
            return
        if held:
            msg += " (%d similar lines held back)"
            args = (*args, held)
        log.log(level, "%s: " + msg, self._name, *args)

    def _outgoing(self, cmd: RemotingCommand, opaque: int) -> RemotingCommand:
        if self._credentials is not None:
            cmd = sign(cmd, self._credentials.access_key, self._credentials.secret_key)
        return dataclasses.replace(cmd, opaque=opaque)

    async def _write(self, cmd: RemotingCommand) -> None:
        self._send(cmd)
        await self._writer.drain()  # a request waits while the transport is over its mark

    def _send(self, cmd: RemotingCommand) -> None:
        if self.closed or self._writer.is_closing():
            raise ConnectionClosed(f"{self._name}: connection to {self.peer} is closed")
        if not self._outbox:
            self._loop.call_soon(self._flush)
        frame = encode(cmd)
        self._outbox.append(frame)
        self._outbox_bytes += len(frame)

    def _answer(self, cmd: RemotingCommand) -> None:
        """Queue an answer without waiting: the reader stops while answers queue."""
        with contextlib.suppress(ConnectionClosed):
            self._send(cmd)

    def _flush(self) -> None:
        frames, self._outbox = self._outbox, []
        self._outbox_bytes = 0
        if not frames or self._writer.is_closing():
            return
        self.last_activity = self._loop.time()
        self._writer.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            future = self._pending.pop(cmd.opaque, None)
            if future is not None and not future.done():
                future.set_result(cmd)
            else:
                log.debug("%s: %s answered unknown opaque %d", self._name, self.peer, cmd.opaque)
            return
        refusal = self._refusal(cmd)
        if refusal is not None:
            if not cmd.is_oneway:
                self._answer(refusal)
            return
        task = asyncio.ensure_future(self._handle(self._handlers[cmd.code], cmd))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _refusal(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """The answer to a request that must not reach its handler, or None."""
        signer: str | None = None
        if self._auth is not None and cmd.code not in self._auth.exempt_codes:
            check = verify(cmd, self._auth.secret_for)
            if not check.ok:
                assert check.fault is not None
                remark = check.fault.value
                explain = self._auth.unknown_key_reason
                if check.fault is SignatureFault.UNKNOWN_ACCESS_KEY and explain is not None:
                    assert check.access_key is not None
                    reason = explain(check.access_key)
                    remark = remark if reason is None else f"{remark}: {reason}"
                self._log(logging.INFO, "refused code %d from %s: %s", cmd.code, self.peer,
                          quoted(remark, 200))  # fmt: skip
                if not self._authenticated:
                    self._refused_before_auth += 1
                return response_to(cmd, ResponseCode.NO_PERMISSION, remark)
            self.access_key = signer = check.access_key
            if not self._authenticated:
                self._authenticated = True
                self._decoder.limits = self._limits
                if self._guard is not None:
                    self._guard.authenticated(id(self))
        if cmd.code not in self._handlers:
            return response_to(
                cmd,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {cmd.code} not supported",
            )
        if self._auth is not None and signer is not None:
            reason = None
            if self._auth.authorize_from is not None:
                reason = self._auth.authorize_from(signer, cmd, self.peer.rsplit(":", 1)[0])
            elif self._auth.authorize is not None:
                reason = self._auth.authorize(signer, cmd)
            if reason is not None:
                self._log(logging.INFO, "refused code %d from %s: %s", cmd.code, self.peer,
                          quoted(reason, 200))  # fmt: skip
                return response_to(cmd, ResponseCode.NO_PERMISSION, reason)
        if len(self._tasks) >= self._listener.max_in_flight:
            return response_to(
                cmd,
                ResponseCode.SYSTEM_BUSY,
                f"over {self._listener.max_in_flight} requests in flight",
            )
        return None

    async def _handle(self, handler: Handler, cmd: RemotingCommand) -> None:
        try:
            answer = await handler(cmd, self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            answer = self._refused(cmd, exc)
        if answer is None or cmd.is_oneway:
            return
        self._answer(answer)

    def _refused(self, cmd: RemotingCommand, exc: Exception) -> RemotingCommand:
        """The one answer to whatever a handler raised."""
        refused = exc if isinstance(exc, RequestRefused) else None
        if refused is None and self._dispatch_policy.translate is not None:
            refused = self._dispatch_policy.translate(exc)
        if refused is not None:
            code = refused.code
            if isinstance(refused, BadField):
                code = self._dispatch_policy.bad_field_code
            log.debug("%s: code %d from %s refused: %s", self._name, cmd.code, self.peer,
                      quoted(refused.remark, 200))  # fmt: skip
            return response_to(cmd, code, refused.remark)
        allowed, held = self._log_budget.allow(self._loop.time())
        if allowed:
            log.error("%s: code %d from %s failed (%d similar lines held back)", self._name,
                      cmd.code, self.peer, held, exc_info=exc)  # fmt: skip
        text = f"{type(exc).__name__}: {exc}"
        return response_to(cmd, ResponseCode.SYSTEM_ERROR, text[:_REMARK_CHARS])

    def _finish(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionClosed(f"{self._name}: {self.peer} closed"))
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("%s: on-close callback for %s failed", self._name, self.peer)


class BudgetedLog(logging.Filter):
    """A logger's filter that lets `per_minute` records through a minute and drops the
    stack trace of the ones about a peer's bad input: for an HTTP server's own logger
    (aiohttp logs every malformed request with its traceback at ERROR, which a client
    could otherwise turn into a flood of log lines)."""

    def __init__(self, per_minute: int = DEFAULT_LISTENER_LIMITS.log_lines_per_minute) -> None:
        super().__init__()
        self._budget = LogBudget(per_minute)

    def filter(self, record: logging.LogRecord) -> bool:
        allowed, held = self._budget.allow(time.monotonic())
        if not allowed:
            return False
        record.exc_info = None
        record.exc_text = None
        if held:
            record.msg = f"{record.msg} ({held} similar lines held back)"
        return True


def budgeted_logger(name: str) -> logging.Logger:
    """`name`'s logger with a `BudgetedLog` filter (added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, BudgetedLog) for f in logger.filters):
        logger.addFilter(BudgetedLog())
    return logger


class RemotingServer:
    """A listening remoting port: one `Connection` per accepted peer, within its limits."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        *,
        auth: ServerAuth | None,
        limits: RemotingLimits = DEFAULT_LIMITS,
        listener: ListenerLimits = DEFAULT_LISTENER_LIMITS,
        dispatch: Dispatch = Dispatch(),
        name: str = "remoting",
        tls: ServerTls | None = None,
    ) -> None:
        """`tls`: the port's TLS mode and certificate (None: plaintext, as mode disabled)."""
        self._handlers = handlers
        self._auth = auth
        self._tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self._limits = limits
        self._listener = listener
        self._dispatch = dispatch
        self._name = name
        self._guard = ListenerGuard(listener)
        self._log_budget = LogBudget(listener.log_lines_per_minute)
        self._server: asyncio.Server | None = None
        self._sniffing: SniffingListener | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[Connection] = set()

    @property
    def port(self) -> int:
        if self._sniffing is not None:
            return self._sniffing.port
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"{self._name} is not listening")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def guard(self) -> ListenerGuard:
        return self._guard

    async def start(self, host: str, port: int) -> None:
        if self._tls is None:
            self._server = await asyncio.start_server(self._accept, host, port, limit=_READ_CHUNK)
        else:
            # Each connection's first byte is peeked before any stream reads it (tls.py),
            # so this port accepts its sockets itself.
            tls = self._tls
            self._sniffing = SniffingListener()
            self._sniffing.start(
                host,
                port,
                lambda sock: self._accept_socket(sock, tls),
                lambda exc: self._warn("accept failed: %s", exc),
            )
        self._sweeper = asyncio.create_task(self._sweep_idle())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._sniffing is not None:
            await self._sniffing.close()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _sweep_idle(self) -> None:
        idle = self._listener.idle_timeout_s
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle / 4, 15.0))
            now = loop.time()
            for conn in list(self.connections):
                if conn.in_flight == 0 and now - conn.last_activity > idle:
                    log.info("%s: closing %s: idle for over %.0f s", self._name, conn.peer, idle)
                    await conn.close()

    def _warn(self, msg: str, *args: object) -> None:
        allowed, held = self._log_budget.allow(asyncio.get_running_loop().time())
        if allowed:
            log.warning("%s: " + msg + " (%d similar lines held back)", self._name, *args, held)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        refused = self._guard.admit(source)
        if refused is not None:
            self._warn("closing a connection from %s at once: %s", source, refused)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        await self._serve(source, reader, writer)

    async def _accept_socket(self, sock: socket.socket, tls: ServerTls) -> None:
        """A connection to a TLS port: admitted, then TLS or plaintext by its first byte."""
        try:
            peer = sock.getpeername()
        except OSError:
            sock.close()
            return
        source = str(peer[0])
        refused = self._guard.admit(source)
        if refused is not None:
            self._warn("closing a connection from %s at once: %s", source, refused)
            sock.close()
            return
        streams = None
        try:
            how = await sniff(sock, tls)
            if how is None:
                return
            if how is Accept.REFUSE:
                self._warn(
                    "closing a connection from %s: %s under TLS mode %s",
                    source,
                    "plaintext" if tls.mode is TlsMode.ENFORCING else "a TLS handshake",
                    tls.mode,
                )
                return
            streams = await open_accepted(
                sock,
                context=tls.context if how is Accept.TLS else None,
                limit=_READ_CHUNK,
                handshake_timeout_s=tls.handshake_timeout_s,
            )
        except (TimeoutError, ssl.SSLError, OSError) as exc:
            self._warn("closing a connection from %s: no TLS session: %s", source, exc)
        finally:
            if streams is None:
                sock.close()
                self._guard.release(source, id(sock))
        if streams is not None:
            await self._serve(source, *streams)

    async def _serve(
        self,
        source: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Serve one admitted connection until it closes."""
        conn = Connection(
            reader,
            writer,
            handlers=self._handlers,
            auth=self._auth,
            limits=self._limits,
            listener=self._listener,
            guard=self._guard,
            dispatch=self._dispatch,
            log_budget=self._log_budget,
            name=self._name,
        )
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            self._guard.release(source, id(conn))


class RemotingClient:
    """A connection we opened; `handlers` answer the requests the server sends us."""

    def __init__(self, conn: Connection, reader_task: asyncio.Task[None]) -> None:
        self._conn = conn
        self._reader_task = reader_task

    @classmethod
    async def connect(
        cls,
        address: str,
        *,
        credentials: Credentials | None = None,
        limits: RemotingLimits = DEFAULT_LIMITS,
        handlers: Mapping[int, Handler] | None = None,
        connect_timeout_s: float = 3.0,
        name: str = "remoting-client",
        tls: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> RemotingClient:
        """`tls`: open a TLS session with this context (tls.client_context); the server's
        certificate is checked against `server_hostname` (default: the address's host) when
        the context verifies host names."""
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        secure: dict[str, object] = {}
        if tls is not None:
            secure = {"ssl": tls, "server_hostname": server_hostname or host}
            secure["ssl_handshake_timeout"] = connect_timeout_s
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, int(port), limit=_READ_CHUNK, **secure),  # type: ignore[arg-type]
            connect_timeout_s,
        )
        conn = Connection(
            reader,
            writer,
            handlers=handlers or {},
            credentials=credentials,
            limits=limits,
            name=name,
        )
        return cls(conn, asyncio.create_task(conn.run()))

    @property
    def closed(self) -> bool:
        return self._conn.closed

    @property
    def connection(self) -> Connection:
        return self._conn

    async def invoke(self, cmd: RemotingCommand, timeout_s: float = 3.0) -> RemotingCommand:
        return await self._conn.invoke(cmd, timeout_s)

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        await self._conn.invoke_oneway(cmd)

    async def close(self) -> None:
        await self._conn.close()
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader_task
