"""Client library: one pipelined connection, a producer, a consumer.

Layers:
- `BrokerConnection`: one TCP connection to one broker. Requests are
  pipelined (many in flight, bounded by `max_in_flight`), matched to
  responses by request id by a single reader task; a refused request raises
  `BrokerError` with the broker's code.
- `MasterDiscovery`: where the master and the readable replicas are. Either
  the controller (`ControllerDiscovery`, `/v1/replica-info`) or fixed
  addresses (`StaticDiscovery`, e.g. the Kubernetes Service selecting
  `role=master`, which follows the master by itself).
- `Producer` / `Consumer`: retry by the error's meaning (docs/protocol.md,
  "What a client does"), with bounded attempts, a bounded total time and
  exponential backoff with jitter.

Retry policy of `Producer`, and why:
- NOT_MASTER, FENCED, STORE_NOT_WRITABLE, READ_ONLY, connection errors and
  timeouts: the master moved or is moving. Drop the connection, try the
  broker's `master_address` hint at once if it gave one, else ask discovery
  again after a backoff. A failover takes about a second (DESIGN.md §9), so
  the default budget (20 s) spans several.
- SYSTEM_BUSY: same broker, after a backoff.
- IN_SYNC_REPLICAS_NOT_ENOUGH and SLAVE_TIMEOUT: the group cannot commit
  now. Retried only `isr_retry_max_attempts` times so a caller learns of
  the lost redundancy instead of hanging; SLAVE_TIMEOUT and timeouts may
  have appended, so a retry can duplicate (at-least-once, like RocketMQ).
- Anything else (TOPIC_NOT_FOUND, TOPIC_INVALID, BAD_REQUEST, SYSTEM_ERROR,
  NO_PERMISSION): raised at once; retrying cannot help.
- `AuthenticationError` (the broker refused the key pair, or the controller refused
  the discovery credential): raised at once, never retried or renamed: the same
  credential is refused again, and the user must learn why now, not after the budget.

Every connection starts with the key-pair handshake (`protocol.auth`, docs/protocol.md
"Authentication") inside `connect_timeout_ms`, before the first frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import secrets
import socket
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from brokergroup_broker.protocol import auth
from brokergroup_broker.protocol.auth import AuthenticationError
from brokergroup_broker.protocol.codec import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    encode_request,
)
from brokergroup_broker.protocol.discovery import (
    ControllerDiscovery,
    MasterDiscovery,
    StaticDiscovery,
    parse_address,
)
from brokergroup_broker.protocol.messages import (
    BrokerError,
    CommitConsumerOffsetRequest,
    CommitResult,
    ConsumerOffsetResult,
    ErrorResponse,
    OffsetsResult,
    ProduceMessage,
    PullMessagesRequest,
    PullResult,
    QueryConsumerOffsetRequest,
    QueryOffsetsRequest,
    QueueCountResult,
    Request,
    Response,
    ResponseCode,
    SendMessagesRequest,
    SendResult,
    TopicQueueCountRequest,
)
from brokergroup_broker.protocol.response_codec import decode_response
from brokergroup_controller.backoff import BackoffPolicy
from brokergroup_remoting.net import Credentials

__all__ = [
    "AuthenticationError",
    "BrokerConnection",
    "BrokerConnectionError",
    "BrokerUnavailableError",
    "ClientConfig",
    "ControllerDiscovery",
    "MasterDiscovery",
    "NoMasterError",
    "StaticDiscovery",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R", bound=Response)


@dataclass(frozen=True)
class ClientConfig:
    #: TCP connect timeout to one broker.
    connect_timeout_ms: int = 3_000
    #: Longest wait for one response (RocketMQ's sendMsgTimeout is 3 s). A
    #: broker answers or fails every produce within slaveTimeoutMs (3 s by
    #: default), so slaveTimeoutMs + 1 s cuts only a dead or paused (SIGSTOP,
    #: partitioned) broker — and that wait is the client's share of a
    #: partition failover (DESIGN.md §9: p99 ≤ 5 s). Raise it together with
    #: slaveTimeoutMs.
    request_timeout_ms: int = 4_000
    #: Requests in flight on one connection (pipelining depth).
    max_in_flight: int = 128
    #: Largest frame sent or accepted.
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    read_chunk_bytes: int = 256 * 1024
    #: Transport buffer above which a send waits for drain.
    write_buffer_high_water_bytes: int = 4 * 1024 * 1024
    #: Attempts of one operation, first one included.
    retry_max_attempts: int = 40
    #: Total time one operation may spend retrying.
    retry_deadline_ms: int = 20_000
    #: First backoff; doubles per retry up to `retry_max_backoff_ms`. Small,
    #: because failover is ~1 s and every 100 ms waited adds to it.
    retry_initial_backoff_ms: int = 25
    retry_max_backoff_ms: int = 500
    #: Attempts for IN_SYNC_REPLICAS_NOT_ENOUGH / SLAVE_TIMEOUT (bounded so
    #: lost redundancy surfaces to the caller).
    isr_retry_max_attempts: int = 3
    #: Bound on one discovery (controller) round trip.
    discovery_timeout_ms: int = 3_000
    #: Producers long-poll the controller for master changes and, when it
    #: names a new master, abandon requests in flight to the old one at once
    #: (a partitioned master would otherwise hold them for request_timeout_ms).
    follow_master_changes: bool = True
    #: Length of one such long-poll (the controller caps it).
    master_watch_ms: int = 30_000
    #: TLS to the brokers' client ports (`brokergroup_remoting.tls.client_context`: the
    #: broker verified against a CA, or only encrypted); None: plaintext.
    tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    #: HTTPS to the controllers' API for discovery (`ControllerClient(tls=...)`); None: HTTP.
    controller_tls: ssl.SSLContext | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_in_flight < 1 or self.retry_max_attempts < 1:
            raise ValueError("max_in_flight and retry_max_attempts must be >= 1")
        if self.retry_initial_backoff_ms > self.retry_max_backoff_ms:
            raise ValueError("retry_initial_backoff_ms must be <= retry_max_backoff_ms")
        if min(self.connect_timeout_ms, self.request_timeout_ms, self.discovery_timeout_ms) < 1:
            raise ValueError("timeouts must be >= 1 ms")


class BrokerConnectionError(ConnectionError):
    """The connection to a broker failed, closed or timed out; whether an
    in-flight request took effect is unknown."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(f"broker {address}: {reason}")
        self.address = address
        self.reason = reason


class NoMasterError(Exception):
    """Discovery knows no master (or no live replica, for reads) right now."""


class BrokerUnavailableError(Exception):
    """An operation ran out of its retry budget without reaching a broker
    that could serve it; `__cause__` is the last failure."""


# --------------------------------------------------------------------------
# One connection.


class BrokerConnection:
    """A pipelined connection to one broker. Create with `connect`."""

    def __init__(
        self,
        address: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        config: ClientConfig,
    ) -> None:
        self.address = address
        self._reader = reader
        self._writer = writer
        self._config = config
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._ids = itertools.count(1)
        self._failure: BrokerConnectionError | None = None
        self._reader_task = asyncio.create_task(self._read_loop(), name=f"broker-conn {address}")

    @classmethod
    async def connect(
        cls,
        address: str,
        config: ClientConfig | None = None,
        *,
        credentials: Credentials | None = None,
    ) -> BrokerConnection:
        """Connect and authenticate with `credentials` (the group's client or broker pair;
        None: no credential, which only a broker with an open port accepts).
        `AuthenticationError` if the broker refuses the pair or cannot prove it."""
        config = config or ClientConfig()
        host, port = parse_address(address)
        writer: asyncio.StreamWriter | None = None
        try:
            async with asyncio.timeout(config.connect_timeout_ms / 1000):
                if config.tls is None:
                    reader, writer = await asyncio.open_connection(
                        host, port, limit=config.read_chunk_bytes
                    )
                else:
                    reader, writer = await _open_tls(host, port, config.tls, config)
                await _handshake(address, reader, writer, credentials)
        except TimeoutError as exc:
            _close_quietly(writer)
            raise BrokerConnectionError(
                address,
                f"connect or authentication timed out after {config.connect_timeout_ms} ms",
            ) from exc
        except asyncio.IncompleteReadError as exc:
            _close_quietly(writer)
            raise BrokerConnectionError(
                address, "the broker closed the connection during the authentication handshake"
            ) from exc
        except ssl.SSLError as exc:
            _close_quietly(writer)
            raise BrokerConnectionError(address, f"TLS handshake failed: {exc}") from exc
        except OSError as exc:
            _close_quietly(writer)
            raise BrokerConnectionError(address, f"connect failed: {exc}") from exc
        except AuthenticationError:
            _close_quietly(writer)
            raise
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(address, reader, writer, config)

    @property
    def closed(self) -> bool:
        return self._failure is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def close(self) -> None:
        self._fail(BrokerConnectionError(self.address, "connection closed by the client"))
        self._reader_task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader_task
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._writer.wait_closed(), 1.0)

    def _fail(self, error: BrokerConnectionError) -> None:
        if self._failure is None:
            self._failure = error
            self._writer.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(self._config.max_frame_bytes)
        reason = "connection closed by the broker"
        try:
            while True:
                data = await self._reader.read(self._config.read_chunk_bytes)
                if not data:
                    break
                decoder.feed(data)
                for frame in decoder.frames():
                    response = decode_response(frame)
                    fut = self._pending.pop(frame.request_id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(response)
        except ProtocolError as exc:
            reason = f"protocol error from the broker: {exc}"
            log.warning("broker %s: %s", self.address, reason)
        except OSError as exc:
            reason = f"connection lost: {exc}"
        finally:
            self._fail(BrokerConnectionError(self.address, reason))

    async def request(self, request: Request) -> Response:
        """Send `request`, await its response; `BrokerError` if refused."""
        if self._failure is not None:
            raise self._failure
        timeout_s = self._config.request_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s), self._slots:
                request_id = next(self._ids)
                if request_id >= 0x7FFFFFFF:  # stay in the signed int field
                    self._ids = itertools.count(1)
                    request_id = next(self._ids)
                data = encode_request(request_id, request)
                if len(data) > self._config.max_frame_bytes:
                    raise LocalProtocolError(
                        f"frame of {len(data)} bytes over max_frame_bytes "
                        f"{self._config.max_frame_bytes}: send smaller batches"
                    )
                if self._failure is not None:
                    raise self._failure
                fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
                self._pending[request_id] = fut
                try:
                    self._writer.write(data)
                    transport = self._writer.transport
                    if (
                        transport.get_write_buffer_size()
                        > self._config.write_buffer_high_water_bytes
                    ):
                        await self._writer.drain()
                    response = await fut
                finally:
                    self._pending.pop(request_id, None)
        except TimeoutError as exc:
            # A broker that does not answer in time is treated like a lost
            # connection (paused or partitioned): close so every caller
            # moves on to discovery instead of queueing behind it.
            error = BrokerConnectionError(
                self.address,
                f"no response in {self._config.request_timeout_ms} ms (request_timeout_ms)",
            )
            self._fail(error)
            raise error from exc
        except OSError as exc:
            if isinstance(exc, BrokerConnectionError):
                raise
            error = BrokerConnectionError(self.address, f"write failed: {exc}")
            self._fail(error)
            raise error from exc
        if isinstance(response, ErrorResponse):
            raise response.to_error()
        return response

    async def _typed(self, request: Request, kind: type[R]) -> R:
        response = await self.request(request)
        if not isinstance(response, kind):
            raise RemoteProtocolError(
                f"broker {self.address} answered {type(request).__name__} "
                f"with {type(response).__name__}"
            )
        return response

    async def send(
        self, topic: str, messages: Sequence[ProduceMessage], queue_id: int | None = None
    ) -> SendResult:
        result = await self._typed(
            SendMessagesRequest(topic, queue_id, tuple(messages)), SendResult
        )
        if len(result.messages) != len(messages):
            raise RemoteProtocolError(
                f"broker {self.address} acknowledged {len(result.messages)} of "
                f"{len(messages)} messages"
            )
        return result

    async def pull(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        return await self._typed(
            PullMessagesRequest(topic, queue_id, queue_offset, max_count), PullResult
        )

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        r = await self._typed(QueryOffsetsRequest(topic, queue_id), OffsetsResult)
        return r.min_queue_offset, r.max_queue_offset

    async def topic_queue_count(self, topic: str) -> int:
        r = await self._typed(TopicQueueCountRequest(topic), QueueCountResult)
        return r.queue_count

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        await self._typed(CommitConsumerOffsetRequest(group, topic, queue_id, offset), CommitResult)

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        r = await self._typed(
            QueryConsumerOffsetRequest(group, topic, queue_id), ConsumerOffsetResult
        )
        return r.offset


async def _open_tls(
    host: str, port: int, context: ssl.SSLContext, config: ClientConfig
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A TLS session to a broker's client port: its clear challenge is read and dropped
    (the port speaks first; server.py's module doc), then TLS, inside which the
    handshake starts over."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _, _, _, target = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, target)
        clear = b""
        while len(clear) < auth.CHALLENGE_BYTES:
            chunk = await loop.sock_recv(sock, auth.CHALLENGE_BYTES - len(clear))
            if not chunk:
                raise asyncio.IncompleteReadError(clear, auth.CHALLENGE_BYTES)
            clear += chunk
        return await asyncio.open_connection(
            sock=sock, ssl=context, server_hostname=host, limit=config.read_chunk_bytes
        )
    except BaseException:
        sock.close()
        raise


def _close_quietly(writer: asyncio.StreamWriter | None) -> None:
    if writer is not None:
        writer.close()


async def _handshake(
    address: str,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    credentials: Credentials | None,
) -> None:
    """The client side of `protocol.auth`: read the challenge, send the HELLO, read the
    answer. Returns when authenticated (or the port is open and we hold no pair)."""
    challenge = await reader.readexactly(auth.CHALLENGE_BYTES)
    client_nonce = secrets.token_bytes(auth.NONCE_BYTES)
    try:
        writer.write(auth.hello(credentials, challenge, client_nonce))
    except auth.HandshakeError as exc:
        raise AuthenticationError(address, str(exc)) from None
    status = (await reader.readexactly(1))[0]
    if status == auth.AuthStatus.AUTHENTICATED:
        proof = await reader.readexactly(auth.SERVER_PROOF_BYTES)
        if credentials is None:
            raise AuthenticationError(address, "the broker claims a pair this client never sent")
        try:
            auth.check_server_proof(credentials, challenge, client_nonce, proof)
        except auth.HandshakeError as exc:
            raise AuthenticationError(address, str(exc)) from None
        return
    if status == auth.AuthStatus.OPEN:
        if credentials is not None:
            raise AuthenticationError(
                address,
                "the broker does not authenticate its client port (--insecure-no-client-auth), "
                "so it cannot prove it holds the group's pair: not sending to it",
            )
        return
    if status == auth.AuthStatus.REFUSED:
        try:
            length = auth.reason_length(await reader.readexactly(2))
        except auth.HandshakeError as exc:
            raise AuthenticationError(address, str(exc)) from None
        reason = (await reader.readexactly(length)).decode(errors="replace")
        raise AuthenticationError(address, reason)
    raise AuthenticationError(address, f"unknown handshake status {status} from the broker")


# --------------------------------------------------------------------------
# Retry budget.

CONNECTION_ERRORS = (BrokerConnectionError, NoMasterError, OSError)
#: The master moved or is moving: re-discover.
REDISCOVER = frozenset(
    {
        ResponseCode.NOT_MASTER,
        ResponseCode.FENCED,
        ResponseCode.STORE_NOT_WRITABLE,
        ResponseCode.READ_ONLY,
    }
)
#: Cannot commit now: bounded by isr_retry_max_attempts.
ISR = frozenset({ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH, ResponseCode.SLAVE_TIMEOUT})


class RetryBudget:
    """Counts attempts and time for one operation; says how long to wait
    before the next attempt or raises the final error."""

    def __init__(self, config: ClientConfig, what: str) -> None:
        self._config = config
        self._what = what
        self._start = time.monotonic()
        self._attempts = 1
        self._isr_attempts = 0
        # Jitter: no herd (each delay is uniform in [half, all] of the backoff).
        self._backoff = BackoffPolicy(
            initial_ms=config.retry_initial_backoff_ms,
            max_ms=config.retry_max_backoff_ms,
            jitter=0.5,
        )
        self._backoff_ms = self._backoff.initial_ms
        self.retries = 0

    def next_delay(self, error: BaseException, *, immediate: bool = False) -> float:
        cfg = self._config
        if isinstance(error, BrokerError) and error.code in ISR:
            self._isr_attempts += 1
            if self._isr_attempts >= cfg.isr_retry_max_attempts:
                raise error
        elapsed_s = time.monotonic() - self._start
        if self._attempts >= cfg.retry_max_attempts or elapsed_s >= cfg.retry_deadline_ms / 1000:
            if isinstance(error, BrokerError):
                raise error
            raise BrokerUnavailableError(
                f"{self._what}: gave up after {self._attempts} attempts in "
                f"{elapsed_s:.1f} s (retry_max_attempts={cfg.retry_max_attempts}, "
                f"retry_deadline_ms={cfg.retry_deadline_ms}): {error}"
            ) from error
        self._attempts += 1
        self.retries += 1
        if immediate:
            return 0.0
        delay = self._backoff.jittered_ms(self._backoff_ms, random.random()) / 1000
        self._backoff_ms = self._backoff.next_ms(self._backoff_ms)
        remaining = cfg.retry_deadline_ms / 1000 - elapsed_s
        return max(0.0, min(delay, remaining))


# --------------------------------------------------------------------------
# Producer.


# --------------------------------------------------------------------------
# Consumer.
