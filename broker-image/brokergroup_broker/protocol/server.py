"""asyncio server of the client protocol: the I/O shell around `codec`.

Theory of operation. One task per connection reads chunks, feeds them to a
`FrameDecoder` and, per whole frame, decodes the request and starts one task
that awaits the `RequestHandler` and writes the response. Requests of one
connection therefore run concurrently (pipelining) and their responses go
out in completion order, matched by request id. Handler calls start in
arrival order (tasks are scheduled FIFO), which keeps a producer's batches
in order for a handler that appends before its first await.

Produce fast path: if the handler has `start_send_batch(batch, reply)`, a
SEND_MESSAGES frame is decoded into a `SendBatch` (no per-message objects) and
handed over synchronously from the reader, in arrival order, without a task or
an `asyncio.timeout`; the handler calls `reply` once with the response and a
timer answers SYSTEM_BUSY after handler_timeout_ms if it never does. The
in-flight slot is held until the answer, exactly as for the task path.

Bounds (all `ServerConfig` fields):
- in-flight requests per connection: when reached, the reader stops reading
  until one completes, so TCP pushes back on the client instead of this
  process queueing without limit;
- the write buffer: after a write, a response drains only when the
  transport holds more than `write_buffer_high_water_bytes`, so small
  responses never wait per message but a slow reader cannot grow memory;
- frame size, connections and the time one handler call may take.

Authentication (DESIGN.md §11, `auth`): every connection starts with the key-pair
handshake. The broker writes its challenge, reads a 2-byte AccessKey length and then
exactly that many bytes plus the fixed-size proof, all within `auth_timeout_ms`, and
answers AUTHENTICATED, OPEN (no `auth`: `--insecure-no-client-auth`) or REFUSED with
the reason, after which it closes. No `FrameDecoder` exists before the answer, so
nothing richer than that length is parsed for an unauthenticated peer.

TLS (`tls`, RocketMQ's three modes as on the remoting ports; docs/security.md "TLS"). This
port's server speaks first, so the first-byte sniff of `brokergroup_remoting.tls` is done on
the client's answer to the challenge: the broker writes its challenge in the clear on every
connection, then peeks at the client's first byte. A plaintext HELLO starts with its AccessKey
length, at most 255, so its first byte is 0; a TLS client reads and drops the clear challenge
and opens a TLS session (its ClientHello's first byte is 0x16), inside which the handshake
starts over with a fresh challenge. Permissive serves both; enforcing answers a plaintext HELLO
REFUSED with the reason (in the clear, the one thing it tells it) and closes. The clear
challenge is a public nonce: nothing that proves a key crosses the network outside TLS.

Errors: a framing error closes the connection (the stream is unusable); a
malformed body answers BAD_REQUEST to that request only; a `BrokerError`
becomes its code; anything else is a bug, logged with its traceback and
answered SYSTEM_ERROR so the client is not left waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from brokergroup_broker.ha import auth as ha_auth
from brokergroup_broker.protocol import auth
from brokergroup_broker.protocol.codec import (
    DEFAULT_MAX_FRAME_BYTES,
    Frame,
    FrameDecoder,
    ProtocolError,
    decode_request,
    decode_send_batch,
)
from brokergroup_broker.protocol.handler import RequestHandler
from brokergroup_broker.protocol.messages import (
    BrokerError,
    CommitConsumerOffsetRequest,
    CommitResult,
    ConsumerOffsetResult,
    ErrorResponse,
    OffsetsResult,
    PullMessagesRequest,
    QueryConsumerOffsetRequest,
    QueryOffsetsRequest,
    QueueCountResult,
    Request,
    RequestCode,
    Response,
    ResponseCode,
    SendBatch,
    SendMessagesRequest,
    TopicQueueCountRequest,
)
from brokergroup_broker.protocol.response_codec import encode_response
from brokergroup_controller.credentials import Role
from brokergroup_remoting.listener import ListenerGuard, ListenerLimits, LogBudget
from brokergroup_remoting.tls import (
    Accept,
    ServerTls,
    SniffingListener,
    TlsMode,
    open_accepted,
    sniff,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    #: Largest frame accepted; bigger is a protocol error that closes the
    #: connection. Must cover the largest batch producers send.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    #: Requests one connection may have in the handler at once. Higher lets
    #: one producer pipeline more batches (throughput); lower bounds memory
    #: per connection (in_flight × batch size).
    max_in_flight_per_connection: int = 128
    #: Concurrent connections; further ones are closed at once.
    max_connections: int = 1024
    #: Concurrent connections from one source address (the remoting ports' bound too,
    #: `brokergroup_remoting.listener`); further ones from it are closed at once.
    max_connections_per_source: int = 512
    #: A connection with nothing read and no request open for this long is closed
    #: (RocketMQ's 120 s idle timeout; the clients reconnect on their next request).
    idle_timeout_ms: int = 120_000
    #: Refusals and lost connections logged per minute; the rest are counted.
    log_lines_per_minute: int = 60
    #: Bytes read per `read()` call.
    read_chunk_bytes: int = 256 * 1024
    #: Transport buffer above which a response write waits for drain.
    write_buffer_high_water_bytes: int = 4 * 1024 * 1024
    #: Longest one handler call may take before the client gets SYSTEM_BUSY.
    #: Above the commit rule's slaveTimeoutMs so the core's own SLAVE_TIMEOUT
    #: normally answers first.
    handler_timeout_ms: int = 30_000
    #: Time `stop()` gives open requests to finish before cancelling them.
    stop_grace_ms: int = 2_000
    #: Longest a new connection may take to send its whole HELLO (docs/protocol.md
    #: "Authentication"); a slower one is refused and closed. Bounds what an
    #: unauthenticated peer can hold: one connection slot for this long.
    auth_timeout_ms: int = 5_000

    def __post_init__(self) -> None:
        if self.max_in_flight_per_connection < 1:
            raise ValueError("max_in_flight_per_connection must be >= 1")
        if self.max_frame_bytes < 1024:
            raise ValueError("max_frame_bytes must be >= 1024")
        if self.read_chunk_bytes < 1 or self.write_buffer_high_water_bytes < 1:
            raise ValueError("read_chunk_bytes and write_buffer_high_water_bytes must be >= 1")
        if self.handler_timeout_ms < 1 or self.max_connections < 1:
            raise ValueError("handler_timeout_ms and max_connections must be >= 1")
        if self.auth_timeout_ms < 1:
            raise ValueError("auth_timeout_ms must be >= 1")
        if self.max_connections_per_source < 1 or self.idle_timeout_ms < 1:
            raise ValueError("max_connections_per_source and idle_timeout_ms must be >= 1")

    def listener_limits(self) -> ListenerLimits:
        """The bounds this port shares with the remoting ports (one `ListenerGuard`)."""
        return ListenerLimits(
            max_connections=self.max_connections,
            max_connections_per_source=self.max_connections_per_source,
            max_in_flight=self.max_in_flight_per_connection,
            max_unsent_bytes=self.write_buffer_high_water_bytes,
            idle_timeout_s=self.idle_timeout_ms / 1000,
            log_lines_per_minute=self.log_lines_per_minute,
        )


class BrokerProtocolServer:
    """Serves the client protocol on one listening socket.

    `auth`: the key pairs connections must prove (`protocol.auth`); None serves every
    connection unauthenticated (OPEN: development and in-process tests only).
    `tls`: the port's TLS mode and certificate (None or disabled: plaintext only)."""

    def __init__(
        self,
        handler: RequestHandler,
        config: ServerConfig | None = None,
        *,
        auth: auth.ClientPortAuth | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self._handler = handler
        self._config = config or ServerConfig()
        self._auth = auth
        self._tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self._server: asyncio.Server | None = None
        self._sniffing: SniffingListener | None = None
        self._connections: dict[asyncio.Task[None], _Connection] = {}
        self._guard = ListenerGuard(self._config.listener_limits())
        self._log_budget = LogBudget(self._config.log_lines_per_minute)
        self._sweeper: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The bound port (useful after `start(host, 0)`)."""
        if self._sniffing is not None:
            return self._sniffing.port
        assert self._server is not None, "server not started"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self, bind_host: str, port: int) -> None:
        assert self._server is None and self._sniffing is None, "server already started"
        if self._tls is None:
            self._server = await asyncio.start_server(
                self._on_connection,
                bind_host,
                port,
                limit=self._config.read_chunk_bytes,
                reuse_address=True,
            )
        else:
            # The client's first byte is peeked before any stream reads it: this port
            # accepts its sockets itself (as the remoting ports do, brokergroup_remoting.tls).
            tls = self._tls
            self._sniffing = SniffingListener()
            self._sniffing.start(
                bind_host,
                port,
                lambda sock: self._on_socket(sock, tls),
                lambda exc: self._log("accept failed: %s", exc),
            )
        self._sweeper = asyncio.create_task(self._close_idle())

    async def _close_idle(self) -> None:
        idle = self._config.idle_timeout_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle / 4, 15.0))
            now = loop.time()
            for conn in list(self._connections.values()):
                if conn.idle_since(now) > idle:
                    self._log("closing %s: idle for over %.0f s", conn.peer, idle)
                    conn.close_idle()

    def _log(self, msg: str, *args: object) -> None:
        allowed, held = self._log_budget.allow(asyncio.get_running_loop().time())
        if allowed:
            if held:
                msg += " (%d similar lines held back)"
                args = (*args, held)
            log.warning(msg, *args)

    async def stop(self) -> None:
        """Stop accepting, let open requests finish (bounded), close all."""
        server, self._server = self._server, None
        sniffing, self._sniffing = self._sniffing, None
        if server is None and sniffing is None:
            return
        if self._sweeper is not None:
            self._sweeper.cancel()
        if server is not None:
            server.close()
        if sniffing is not None:
            # Those still in their first byte or TLS; served ones get the grace below.
            await sniffing.close(cancel=lambda task: task not in self._connections)
        tasks = list(self._connections)
        for task, conn in list(self._connections.items()):
            if not conn.draining:
                task.cancel()  # stops reading; open requests get the grace period
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self._config.stop_grace_ms / 1000)
            for task in pending:
                stuck = self._connections.get(task)
                if stuck is not None:
                    stuck.abort()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), self._config.stop_grace_ms / 1000)

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) else str(peer)
        refused = self._guard.admit(source)
        if refused is not None:
            self._log("refusing a connection from %s: %s", source, refused)
            writer.close()
            return
        await self._serve(task, source, reader, writer, None)

    async def _serve(
        self,
        task: asyncio.Task[None],
        source: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sent_challenge: bytes | None,
    ) -> None:
        conn = _Connection(
            self._handler, self._config, reader, writer, self._auth, self._log, sent_challenge
        )
        self._connections[task] = conn
        try:
            await conn.run()
        finally:
            self._connections.pop(task, None)
            self._guard.release(source, id(conn))

    async def _on_socket(self, sock: socket.socket, tls: ServerTls) -> None:
        """A connection to a TLS port: the clear challenge, then TLS or plaintext by the
        client's first byte (the module doc)."""
        task = asyncio.current_task()
        assert task is not None
        try:
            source = str(sock.getpeername()[0])
        except OSError:
            sock.close()
            return
        refused = self._guard.admit(source)
        if refused is not None:
            self._log("refusing a connection from %s: %s", source, refused)
            sock.close()
            return
        loop = asyncio.get_running_loop()
        challenge = ha_auth.challenge(secrets.token_bytes(auth.NONCE_BYTES))
        streams = None
        sealed = False
        try:
            await asyncio.wait_for(loop.sock_sendall(sock, challenge), tls.handshake_timeout_s)
            how = await sniff(sock, tls)
            if how is Accept.REFUSE:
                # Enforcing and a plaintext HELLO: tell the client why, in its own protocol.
                self._log("refused a plaintext client from %s: TLS %s", source, tls.mode)
                reason = (
                    "this broker's client port enforces TLS (tls mode enforcing): connect with "
                    "TLS (brokergroup produce/consume --tls, --ca-file)"
                )
                with contextlib.suppress(OSError):
                    await asyncio.wait_for(
                        loop.sock_sendall(sock, auth.refusal(reason)), tls.handshake_timeout_s
                    )
                    sock.shutdown(socket.SHUT_WR)
            elif how is not None:
                sealed = how is Accept.TLS
                streams = await open_accepted(
                    sock,
                    context=tls.context if sealed else None,
                    limit=self._config.read_chunk_bytes,
                    handshake_timeout_s=tls.handshake_timeout_s,
                )
        except (TimeoutError, ssl.SSLError, OSError) as exc:
            self._log("closing a connection from %s: no TLS session: %s", source, exc)
        finally:
            if streams is None:
                sock.close()
                self._guard.release(source, id(sock))
        if streams is not None:
            # In TLS the handshake starts over with a fresh challenge; in plaintext the
            # clear one stands.
            await self._serve(task, source, *streams, None if sealed else challenge)


class _Connection:
    def __init__(
        self,
        handler: RequestHandler,
        config: ServerConfig,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        port_auth: auth.ClientPortAuth | None = None,
        log_line: Callable[..., None] | None = None,
        sent_challenge: bytes | None = None,
    ) -> None:
        self._handler = handler
        #: The challenge already written on the socket (a TLS port's clear one), if any.
        self._sent_challenge = sent_challenge
        #: The port's budgeted warning log (a peer's refusals are its choice, not ours).
        self._log_line = log_line or log.warning
        self._config = config
        self._auth = port_auth
        #: The role the connection's pair proved (None: an OPEN port).
        self._role: Role | None = None
        self._reader = reader
        self._writer = writer
        self._peer = writer.get_extra_info("peername")
        self._loop = asyncio.get_running_loop()
        self._last_read = self._loop.time()
        self._slots = asyncio.Semaphore(config.max_in_flight_per_connection)
        self._requests: set[asyncio.Task[None]] = set()
        self._sends: set[_PendingSend] = set()  # fast-path produces awaiting their answer
        self._transport = writer.transport
        self._start_send: Callable[[SendBatch, Callable[[Response], None]], None] | None = getattr(
            handler, "start_send_batch", None
        )
        #: Reading has ended; only requests already taken are finishing.
        self.draining = False

    @property
    def peer(self) -> object:
        return self._peer

    def idle_since(self, now: float) -> float:
        """Seconds with nothing read and no request open (0 while one is)."""
        if self._requests or self._sends:
            return 0.0
        return now - self._last_read

    def close_idle(self) -> None:
        """Close an idle connection: nothing is open, so nothing is lost."""
        self._transport.close()

    def abort(self) -> None:
        """Drop the connection now: cancel open requests, reset the socket."""
        for task in list(self._requests):
            task.cancel()
        for pending in list(self._sends):
            pending.drop()
        self._transport.abort()

    async def run(self) -> None:
        sock = self._writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            authenticated = await self._authenticate()
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            log.debug("connection from %s lost during the handshake: %s", self._peer, exc)
            authenticated = False
        except asyncio.CancelledError:  # stop() while the peer has not finished its HELLO
            self.draining = True
            self._writer.close()
            raise
        if not authenticated:
            self.draining = True
            self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)
            return
        decoder = FrameDecoder(self._config.max_frame_bytes)
        try:
            high_water = self._config.write_buffer_high_water_bytes
            start_send = self._start_send
            while True:
                if self._transport.get_write_buffer_size() > high_water:
                    await self._writer.drain()  # fast-path answers are written from callbacks
                data = await self._reader.read(self._config.read_chunk_bytes)
                if not data:
                    break
                self._last_read = self._loop.time()
                decoder.feed(data)
                for frame in decoder.frames():
                    # Back-pressure: wait for a slot before taking the next
                    # frame; while waiting nothing more is read.
                    await self._slots.acquire()
                    if start_send is not None and frame.code == RequestCode.SEND_MESSAGES:
                        self._serve_send(start_send, frame)
                        continue
                    task = asyncio.create_task(self._serve(frame))
                    self._requests.add(task)
                    task.add_done_callback(self._requests.discard)
        except ProtocolError as exc:
            self._log_line("closing connection from %s: %s", self._peer, exc)
        except (ConnectionError, OSError) as exc:
            log.debug("connection from %s lost: %s", self._peer, exc)
        finally:
            self.draining = True
            try:
                # Let requests already in the handler finish (they may have
                # appended; the client may still read the answer if only its
                # write side closed), bounded by the handler timeout.
                waits: list[asyncio.Future[None]] = [*self._requests]
                waits += [p.finished for p in self._sends]
                if waits:
                    await asyncio.wait(waits, timeout=self._config.handler_timeout_ms / 1000)
            finally:  # also when cancelled while waiting: never leak the socket
                for task in list(self._requests):
                    task.cancel()
                for pending in list(self._sends):
                    pending.drop()
                self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)

    async def _authenticate(self) -> bool:
        """The handshake (`protocol.auth`): challenge, HELLO, answer. False: refused (the
        reason went to the client) or the peer went away; the caller closes."""
        challenge = self._sent_challenge
        if challenge is None:
            challenge = ha_auth.challenge(secrets.token_bytes(auth.NONCE_BYTES))
            self._writer.write(challenge)
        verdict: auth.Accepted | auth.Refused | None
        timeout_ms = self._config.auth_timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                length = auth.access_key_length(await self._reader.readexactly(2))
                if isinstance(length, auth.Refused):
                    verdict = length
                else:
                    rest = await self._reader.readexactly(length + auth.CLIENT_PROOF_BYTES)
                    if self._auth is None:
                        verdict = None
                    else:
                        verdict = self._auth.check(challenge, rest[:length], rest[length:])
        except TimeoutError:
            verdict = auth.Refused(
                f"no complete HELLO in {timeout_ms} ms (auth_timeout_ms): the client port "
                "starts with the authentication handshake (docs/protocol.md)"
            )
        if verdict is None:
            self._writer.write(auth.OPEN_ANSWER)
            return True
        if isinstance(verdict, auth.Accepted):
            self._role = verdict.role
            self._writer.write(verdict.answer)
            return True
        self._log_line("refused a client from %s: %s", self._peer, verdict.reason)
        self._writer.write(verdict.answer)
        await self._linger()
        return False

    async def _linger(self) -> None:
        """After a refusal: half-close and discard what the peer still sends, briefly and
        boundedly, so closing with unread bytes does not reset the connection before the
        peer has read the reason."""
        with contextlib.suppress(Exception):
            self._writer.write_eof()
            async with asyncio.timeout(1.0):
                discarded = 0
                while discarded < 1 << 20:
                    data = await self._reader.read(64 * 1024)
                    if not data:
                        break
                    discarded += len(data)

    def _serve_send(
        self, start_send: Callable[[SendBatch, Callable[[Response], None]], None], frame: Frame
    ) -> None:
        """Produce fast path: no task and no per-message objects. The handler appends
        now (so batches keep their arrival order) and calls back once with the answer;
        a timer answers SYSTEM_BUSY after handler_timeout_ms as `_respond` would."""
        pending = _PendingSend(self, frame)
        try:
            batch = decode_send_batch(frame)
        except ProtocolError as exc:
            pending.reply(ErrorResponse(frame.code, ResponseCode.BAD_REQUEST, str(exc)))
            return
        self._sends.add(pending)
        pending.timer = asyncio.get_running_loop().call_later(
            self._config.handler_timeout_ms / 1000, pending.timed_out
        )
        try:
            start_send(batch, pending.reply)
        except BrokerError as exc:
            pending.reply(ErrorResponse(frame.code, exc.code, exc.message, exc.master_address))
        except Exception as exc:
            log.exception("handler failed on a send from %s", self._peer)
            pending.reply(
                ErrorResponse(frame.code, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            )

    def _write_response(self, frame: Frame, response: Response) -> None:
        if self._transport.is_closing():
            return
        try:
            data = encode_response(frame.request_id, response)
        except ProtocolError as exc:  # the handler returned something unencodable
            log.error("cannot encode the answer to %s: %s", self._peer, exc)
            data = encode_response(
                frame.request_id,
                ErrorResponse(
                    frame.code, ResponseCode.SYSTEM_ERROR, f"cannot encode response: {exc}"
                ),
            )
        self._writer.write(data)

    async def _serve(self, frame: Frame) -> None:
        try:
            response = await self._respond(frame)
            if self._transport.is_closing():
                return
            self._write_response(frame, response)
            if self._transport.get_write_buffer_size() > self._config.write_buffer_high_water_bytes:
                await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            log.debug("connection from %s lost while answering: %s", self._peer, exc)
        finally:
            self._slots.release()

    async def _respond(self, frame: Frame) -> Response:
        refused = auth.refusal_for(self._role, frame.code)
        if refused is not None:
            return ErrorResponse(frame.code, ResponseCode.NO_PERMISSION, refused)
        try:
            request = decode_request(frame)
        except ProtocolError as exc:
            return ErrorResponse(frame.code, ResponseCode.BAD_REQUEST, str(exc))
        try:
            async with asyncio.timeout(self._config.handler_timeout_ms / 1000):
                return await self._call(request)
        except BrokerError as exc:
            return ErrorResponse(frame.code, exc.code, exc.message, exc.master_address)
        except TimeoutError:
            return ErrorResponse(
                frame.code,
                ResponseCode.SYSTEM_BUSY,
                f"handler did not answer in {self._config.handler_timeout_ms} ms "
                "(handler_timeout_ms); the request may or may not have taken effect",
            )
        except Exception as exc:
            log.exception("handler failed on %s from %s", type(request).__name__, self._peer)
            return ErrorResponse(
                frame.code, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
            )

    async def _call(self, request: Request) -> Response:
        h = self._handler
        if isinstance(request, SendMessagesRequest):
            return await h.send_messages(request.topic, request.queue_id, request.messages)
        if isinstance(request, PullMessagesRequest):
            return await h.pull_messages(
                request.topic, request.queue_id, request.queue_offset, request.max_count
            )
        if isinstance(request, QueryOffsetsRequest):
            low, high = await h.query_offsets(request.topic, request.queue_id)
            return OffsetsResult(low, high)
        if isinstance(request, TopicQueueCountRequest):
            return QueueCountResult(await h.topic_queue_count(request.topic))
        if isinstance(request, CommitConsumerOffsetRequest):
            await h.commit_consumer_offset(
                request.group, request.topic, request.queue_id, request.offset
            )
            return CommitResult()
        if isinstance(request, QueryConsumerOffsetRequest):
            offset = await h.query_consumer_offset(request.group, request.topic, request.queue_id)
            return ConsumerOffsetResult(offset)
        raise AssertionError(f"unhandled request type {type(request).__name__}")


class _PendingSend:
    """One fast-path produce between its append and its answer (exactly one)."""

    __slots__ = ("conn", "done", "finished", "frame", "timer")

    def __init__(self, conn: _Connection, frame: Frame) -> None:
        self.conn = conn
        self.frame = frame
        self.timer: asyncio.TimerHandle | None = None
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done = False

    def _finish(self) -> bool:
        if self.done:
            return False
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        self.conn._sends.discard(self)
        self.conn._slots.release()
        if not self.finished.done():
            self.finished.set_result(None)
        return True

    def reply(self, response: Response) -> None:
        """The handler's answer (later calls, e.g. after a timeout, are ignored)."""
        if not self._finish():
            return
        try:
            self.conn._write_response(self.frame, response)
        except (ConnectionError, OSError) as exc:
            log.debug("connection from %s lost while answering: %s", self.conn._peer, exc)
        except Exception:
            log.exception("answering a send from %s failed", self.conn._peer)

    def timed_out(self) -> None:
        ms = self.conn._config.handler_timeout_ms
        self.reply(
            ErrorResponse(
                self.frame.code,
                ResponseCode.SYSTEM_BUSY,
                f"handler did not answer in {ms} ms (handler_timeout_ms); the request may "
                "or may not have taken effect",
            )
        )

    def drop(self) -> None:
        """The connection is going away: no answer."""
        self._finish()
