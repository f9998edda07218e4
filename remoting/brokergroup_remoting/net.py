"""The one asyncio transport for RocketMQ's remoting protocol (every remoting port and peer).

The codec (`frame`, `command`, `acl`) is sans-I/O; this module is the thin shell around it,
shared by the broker's remoting port, the name server and the controller's remoting port
(servers) and by whatever calls them (clients, the controller notifying brokers), so there is
one socket loop, one place that checks signatures and one place that bounds a connection.

A `Connection` is symmetric, as RocketMQ's NettyRemotingAbstract is: either side may send
requests (each gets a fresh opaque and waits for the response carrying it) and answer the
peer's requests through `handlers`. On a server, every request is checked before dispatch:
its AccessKey/SecretKey signature (`ServerAuth`; refused with NO_PERMISSION before the
handler sees the request, so nothing the request names is looked up), then its code (unknown
→ REQUEST_CODE_NOT_SUPPORTED with a remark). Handlers of one connection run concurrently, so
a long-polling PULL_MESSAGE does not hold up the requests behind it; at most
`max_in_flight` per connection (more → SYSTEM_BUSY, as RocketMQ's rejected thread pool
answers). A handler's exception becomes SYSTEM_ERROR with its text; the connection and the
others go on. A frame that breaks the protocol or a limit closes that connection only: the
byte stream cannot be trusted after it, and there is no opaque to answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
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
from brokergroup_remoting.frame import FrameDecoder, encode

log = logging.getLogger(__name__)

Handler = Callable[[RemotingCommand, "Connection"], Awaitable[RemotingCommand | None]]
"""Answers one request: the response (built with `response_to`), or None for no answer."""

_READ_CHUNK = 256 * 1024
#: Handlers running at once on one connection before new requests get SYSTEM_BUSY.
DEFAULT_MAX_IN_FLIGHT = 256


@dataclass(frozen=True)
class ServerAuth:
    """How a server checks requests: `secret_for(accessKey)` gives the SecretKey or None.

    `exempt_codes` are answered unsigned (keep it empty unless a code must serve peers
    without keys, and say why where it is set). `authorize(accessKey, request)`, when set,
    runs once the signature verified and the code is one the server serves: it returns why
    that key may not make that request (answered NO_PERMISSION), or None. It sees the
    header's (signed) fields only, never the body. `unknown_key_reason(accessKey)`, when
    set, may say why an AccessKey `secret_for` does not know is not served here (added to
    the NO_PERMISSION remark; it must name no secret).
    """

    secret_for: Callable[[str], str | None]
    exempt_codes: frozenset[int] = frozenset()
    authorize: Callable[[str, RemotingCommand], str | None] | None = None
    unknown_key_reason: Callable[[str], str | None] | None = None


@dataclass(frozen=True)
class Credentials:
    """A client's key pair; every request it sends is signed as AclClientRPCHook does."""

    access_key: str
    secret_key: str

    def __repr__(self) -> str:  # never log the secret
        return f"Credentials(access_key={self.access_key!r})"


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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        name: str = "remoting",
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._handlers = handlers
        self._auth = auth
        self._credentials = credentials
        self._decoder = FrameDecoder(limits)
        self._max_in_flight = max_in_flight
        self._name = name
        # Frames written in one turn of the loop go out in one write(2) (`_flush`): the
        # group commit answers every send it covers in the same turn.
        self._outbox: list[bytes] = []
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = asyncio.Event()
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.access_key: str | None = None
        """The AccessKey of the last request that passed the signature check."""

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    @property
    def transport(self) -> asyncio.BaseTransport:
        """The socket's transport (a server watches it close, e.g. for a peer's liveness)."""
        return self._writer.transport

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def invoke(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send request `cmd` (its opaque is replaced) and wait for its response."""
        opaque = next(self._opaques)
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
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
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
        self._finish()

    async def run(self) -> None:
        """Read and dispatch until EOF, a protocol error or `close()`."""
        try:
            while True:
                data = await self._reader.read(_READ_CHUNK)
                if not data:
                    if not self._decoder.at_frame_boundary:
                        log.warning("%s: %s closed inside a frame", self._name, self.peer)
                    return
                self._decoder.feed(data)
                for cmd in self._decoder.commands():
                    self._dispatch(cmd)
        except RemoteProtocolError as exc:
            log.warning("%s: closing %s: %s", self._name, self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("%s: %s: %s", self._name, self.peer, exc)
        finally:
            await self.close()

    def _outgoing(self, cmd: RemotingCommand, opaque: int) -> RemotingCommand:
        if self._credentials is not None:
            cmd = sign(cmd, self._credentials.access_key, self._credentials.secret_key)
        return dataclasses.replace(cmd, opaque=opaque)

    async def _write(self, cmd: RemotingCommand) -> None:
        if self.closed or self._writer.is_closing():
            raise ConnectionClosed(f"{self._name}: connection to {self.peer} is closed")
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outbox.append(encode(cmd))
        await self._writer.drain()  # backpressure: waits while the transport is over its mark

    def _flush(self) -> None:
        frames, self._outbox = self._outbox, []
        if not frames or self._writer.is_closing():
            return
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
                self._spawn(self._write(refusal))
            return
        self._spawn(self._handle(self._handlers[cmd.code], cmd))

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
                log.info("%s: refused code %d from %s: %s", self._name, cmd.code, self.peer, remark)
                return response_to(cmd, ResponseCode.NO_PERMISSION, remark)
            self.access_key = signer = check.access_key
        if cmd.code not in self._handlers:
            return response_to(
                cmd,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f"request code {cmd.code} not supported",
            )
        if self._auth is not None and self._auth.authorize is not None and signer is not None:
            reason = self._auth.authorize(signer, cmd)
            if reason is not None:
                log.info("%s: refused code %d from %s: %s", self._name, cmd.code, self.peer, reason)
                return response_to(cmd, ResponseCode.NO_PERMISSION, reason)
        if len(self._tasks) >= self._max_in_flight:
            return response_to(
                cmd, ResponseCode.SYSTEM_BUSY, f"over {self._max_in_flight} requests in flight"
            )
        return None

    async def _handle(self, handler: Handler, cmd: RemotingCommand) -> None:
        try:
            answer = await handler(cmd, self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("%s: code %d from %s failed", self._name, cmd.code, self.peer)
            answer = response_to(cmd, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if answer is None or cmd.is_oneway:
            return
        with contextlib.suppress(ConnectionClosed, ConnectionError):
            await self._write(answer)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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


class RemotingServer:
    """A listening remoting port: one `Connection` per accepted peer."""

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        *,
        auth: ServerAuth | None,
        limits: RemotingLimits = DEFAULT_LIMITS,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        name: str = "remoting",
    ) -> None:
        self._handlers = handlers
        self._auth = auth
        self._limits = limits
        self._max_in_flight = max_in_flight
        self._name = name
        self._server: asyncio.Server | None = None
        self.connections: set[Connection] = set()

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError(f"{self._name} is not listening")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port, limit=_READ_CHUNK)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            await conn.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(
            reader,
            writer,
            handlers=self._handlers,
            auth=self._auth,
            limits=self._limits,
            max_in_flight=self._max_in_flight,
            name=self._name,
        )
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)


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
    ) -> RemotingClient:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host.strip("[]"), int(port), limit=_READ_CHUNK),
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
