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
- Anything else (TOPIC_NOT_FOUND, TOPIC_INVALID, BAD_REQUEST, SYSTEM_ERROR): raised at
  once; retrying cannot help.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from brokergroup_broker.protocol.codec import (
    DEFAULT_MAX_FRAME_BYTES,
    FrameDecoder,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    decode_response,
    encode_request,
)
from brokergroup_broker.protocol.discovery import (
    ControllerDiscovery,
    MasterDiscovery,
    StaticDiscovery,
    make_discovery,
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
    PulledMessage,
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

__all__ = [
    "BrokerConnection",
    "BrokerConnectionError",
    "BrokerUnavailableError",
    "ClientConfig",
    "Consumer",
    "ControllerDiscovery",
    "MasterDiscovery",
    "NoMasterError",
    "Producer",
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
    async def connect(cls, address: str, config: ClientConfig | None = None) -> BrokerConnection:
        config = config or ClientConfig()
        host, port = parse_address(address)
        try:
            async with asyncio.timeout(config.connect_timeout_ms / 1000):
                reader, writer = await asyncio.open_connection(
                    host, port, limit=config.read_chunk_bytes
                )
        except TimeoutError as exc:
            raise BrokerConnectionError(
                address, f"connect timed out after {config.connect_timeout_ms} ms"
            ) from exc
        except OSError as exc:
            raise BrokerConnectionError(address, f"connect failed: {exc}") from exc
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


# --------------------------------------------------------------------------
# Retry budget.

_CONNECTION_ERRORS = (BrokerConnectionError, NoMasterError, OSError)
#: The master moved or is moving: re-discover.
_REDISCOVER = frozenset(
    {
        ResponseCode.NOT_MASTER,
        ResponseCode.FENCED,
        ResponseCode.STORE_NOT_WRITABLE,
        ResponseCode.READ_ONLY,
    }
)
#: Cannot commit now: bounded by isr_retry_max_attempts.
_ISR = frozenset({ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH, ResponseCode.SLAVE_TIMEOUT})


class _RetryBudget:
    """Counts attempts and time for one operation; says how long to wait
    before the next attempt or raises the final error."""

    def __init__(self, config: ClientConfig, what: str) -> None:
        self._config = config
        self._what = what
        self._start = time.monotonic()
        self._attempts = 1
        self._isr_attempts = 0
        self._backoff_s = config.retry_initial_backoff_ms / 1000
        self.retries = 0

    def next_delay(self, error: BaseException, *, immediate: bool = False) -> float:
        cfg = self._config
        if isinstance(error, BrokerError) and error.code in _ISR:
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
        delay = self._backoff_s * random.uniform(0.5, 1.0)  # jitter: no herd
        self._backoff_s = min(self._backoff_s * 2, cfg.retry_max_backoff_ms / 1000)
        remaining = cfg.retry_deadline_ms / 1000 - elapsed_s
        return max(0.0, min(delay, remaining))


# --------------------------------------------------------------------------
# Producer.


class Producer:
    """Sends to the master of one broker group, following failovers.

    Safe to use from many tasks at once: they share one pipelined
    connection, so concurrent `send_batch` calls are how to go fast.
    """

    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        *,
        controller_addresses: str | Sequence[str] = (),
        token: str | None = None,
        static_address: str | None = None,
        config: ClientConfig | None = None,
        discovery: MasterDiscovery | None = None,
    ) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self._config = config or ClientConfig()
        self._discovery = discovery or make_discovery(
            cluster_name,
            broker_name,
            controller_addresses=controller_addresses,
            token=token,
            static_address=static_address,
            discovery_timeout_ms=self._config.discovery_timeout_ms,
        )
        self._conn: BrokerConnection | None = None
        self._hint: str | None = None
        self._lock = asyncio.Lock()
        self._connect_seq = 0
        self._connect_error: NoMasterError | BrokerConnectionError | None = None
        self._closing: set[asyncio.Task[None]] = set()
        self._watch_task: asyncio.Task[None] | None = None
        # The live master the controller's watch last named (None: unknown).
        self._watched_master: str | None = None
        #: Attempts beyond the first, over the producer's life (for reports).
        self.retries = 0
        #: Times the controller's watch moved this producer to a new master.
        self.master_changes_followed = 0
        #: Connections opened to a master (1 + re-discoveries that succeeded).
        self.connections_opened = 0

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def master_address(self) -> str | None:
        """The broker currently sent to, if connected."""
        conn = self._conn
        return None if conn is None or conn.closed else conn.address

    async def send(self, message: ProduceMessage, queue_id: int | None = None) -> SendResult:
        return await self.send_batch([message], queue_id)

    async def send_batch(
        self, messages: Sequence[ProduceMessage], queue_id: int | None = None
    ) -> SendResult:
        """Send messages of one topic in one frame; returns once all are
        committed, or raises `BrokerError` / `BrokerUnavailableError`."""
        if not messages:
            raise ValueError("send_batch needs at least one message")
        topic = messages[0].topic
        if any(m.topic != topic for m in messages):
            raise ValueError("all messages of a batch must have the same topic")
        self._start_following_master()
        budget = _RetryBudget(self._config, f"send to {self.cluster_name}/{self.broker_name}")
        try:
            while True:
                conn: BrokerConnection | None = None
                try:
                    conn = await self._connection()
                    return await conn.send(topic, messages, queue_id)
                except BrokerError as exc:
                    if exc.code in _REDISCOVER:
                        self._drop(conn, exc.master_address)
                        delay = budget.next_delay(exc, immediate=self._hint is not None)
                    elif exc.code == ResponseCode.SYSTEM_BUSY or exc.code in _ISR:
                        delay = budget.next_delay(exc)
                    else:
                        raise
                except _CONNECTION_ERRORS as exc:
                    self._drop(conn, None)
                    # A hint means the watch already named the new master: go now.
                    delay = budget.next_delay(exc, immediate=self._hint is not None)
                await asyncio.sleep(delay)
        finally:
            self.retries += budget.retries

    async def _connection(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        seen = self._connect_seq
        async with self._lock:  # one (re)connect for all waiting senders
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            if self._connect_seq != seen and self._connect_error is not None:
                # Another sender just failed to find or reach the master
                # while we waited: share its answer instead of repeating a
                # discovery that may take discovery_timeout_ms each time.
                raise self._connect_error
            try:
                address, self._hint = self._hint, None
                if address is None:
                    address = await self._discovery.master_address()
                if address is None:
                    raise NoMasterError(
                        f"no master for {self.cluster_name}/{self.broker_name} right now"
                    )
                self._conn = await BrokerConnection.connect(address, self._config)
            except (NoMasterError, BrokerConnectionError) as exc:
                self._connect_seq += 1
                self._connect_error = exc
                raise
            self._connect_seq += 1
            self._connect_error = None
            self.connections_opened += 1
            if self.connections_opened > 1:
                log.info("producer now sends to master %s", address)
            return self._conn

    def _start_following_master(self) -> None:
        if self._watch_task is not None or not self._config.follow_master_changes:
            return
        if getattr(self._discovery, "next_master_change", None) is None:
            return  # static addresses (a Kubernetes Service follows the master itself)
        self._watch_task = asyncio.create_task(
            self._follow_master(), name=f"master watch {self.cluster_name}/{self.broker_name}"
        )

    async def _follow_master(self) -> None:
        """Move to the controller's new master the moment it is elected:
        closing the old connection fails its in-flight requests, which the
        senders retry on the new master at once (unknown outcome: at least once)."""
        watch = self._discovery.next_master_change  # type: ignore[attr-defined]
        known = 0
        backoff_s = 0.1
        while True:
            info = await watch(known, self._config.master_watch_ms)
            if info is None:
                self._watched_master = None  # no authority now: brokers' hints count again
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 2.0)
                continue
            backoff_s = 0.1
            if info.master_epoch <= known:
                continue
            address = info.live_master_address
            self._watched_master = address
            conn = self._conn
            if known and address and conn is not None and conn.address != address:
                log.info(
                    "controller elected %s at masterEpoch %d: leaving %s (%d requests in flight)",
                    address, info.master_epoch, conn.address, conn.in_flight,
                )  # fmt: skip
                self.master_changes_followed += 1
                self._drop(conn, address)
            known = info.master_epoch

    def _drop(self, conn: BrokerConnection | None, hint: str | None) -> None:
        if hint and self._watched_master and hint != self._watched_master:
            # A broker's hint is its own view, which lags the controller's: a
            # new master not yet confirmed still names the old one.
            hint = self._watched_master
        if hint:
            self._hint = hint
        if conn is not None and self._conn is conn:
            self._conn = None
            task = asyncio.create_task(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._watch_task
            self._watch_task = None
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        if self._closing:
            await asyncio.wait(list(self._closing), timeout=2.0)
        await self._discovery.close()


# --------------------------------------------------------------------------
# Consumer.

#: Read errors worth trying another replica for.
_READ_RETRY = frozenset(
    {
        ResponseCode.NOT_MASTER,
        ResponseCode.FENCED,
        ResponseCode.READ_ONLY,
        ResponseCode.STORE_NOT_WRITABLE,
        ResponseCode.SYSTEM_BUSY,
    }
)


class Consumer:
    """Pulls by queue offset from the master, or from any live replica when
    the master is gone (slave reads / acting master, DESIGN.md §3.6), and
    commits consumer offsets for `group`.

    Reads stay on the replica that last served them until it fails; every
    replica serves only up to confirmOffset, so switching never shows a
    message that a failover could take back.
    """

    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        *,
        group: str | None = None,
        controller_addresses: str | Sequence[str] = (),
        token: str | None = None,
        static_address: str | Sequence[str] | None = None,
        config: ClientConfig | None = None,
        discovery: MasterDiscovery | None = None,
        poll_interval_ms: int = 50,
    ) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.group = group
        self._config = config or ClientConfig()
        self._discovery = discovery or make_discovery(
            cluster_name,
            broker_name,
            controller_addresses=controller_addresses,
            token=token,
            static_address=static_address,
            discovery_timeout_ms=self._config.discovery_timeout_ms,
        )
        self._poll_interval_s = poll_interval_ms / 1000
        self._conn: BrokerConnection | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def read_address(self) -> str | None:
        conn = self._conn
        return None if conn is None or conn.closed else conn.address

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
        await self._discovery.close()

    async def queue_count(self, topic: str) -> int:
        try:
            return await self._call(lambda c: c.topic_queue_count(topic), "queue count")
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_FOUND:
                return 0
            raise

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        return await self._call(lambda c: c.query_offsets(topic, queue_id), "query offsets")

    async def pull(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int = 32
    ) -> PullResult:
        return await self._call(lambda c: c.pull(topic, queue_id, queue_offset, max_count), "pull")

    async def committed_offset(self, topic: str, queue_id: int) -> int:
        group = self._require_group()
        return await self._call(
            lambda c: c.query_consumer_offset(group, topic, queue_id), "query consumer offset"
        )

    async def commit(self, topic: str, queue_id: int, offset: int) -> None:
        group = self._require_group()
        await self._call(
            lambda c: c.commit_consumer_offset(group, topic, queue_id, offset), "commit offset"
        )

    def _require_group(self) -> str:
        if self.group is None:
            raise ValueError("this consumer has no group")
        return self.group

    async def messages(
        self,
        topic: str,
        *,
        from_beginning: bool = False,
        max_messages: int | None = None,
        idle_timeout_ms: int = 3_000,
        pull_batch: int = 32,
    ) -> AsyncIterator[PulledMessage]:
        """Every queue of `topic`, round robin, until `max_messages` or no
        new message for `idle_timeout_ms`. Starts at the committed offset of
        the group, else at the queue's min (`from_beginning`) or max offset;
        commits after each non-empty pull when there is a group."""
        offsets: dict[int, int] = {}
        delivered = 0
        last_progress = time.monotonic()
        queue_count = await self.queue_count(topic)
        while True:
            for queue_id in range(queue_count):
                if queue_id not in offsets:
                    offsets[queue_id] = await self._start_offset(topic, queue_id, from_beginning)
            got = 0
            for queue_id in range(queue_count):
                limit = pull_batch
                if max_messages is not None:
                    limit = min(limit, max_messages - delivered)
                result = await self.pull(topic, queue_id, offsets[queue_id], limit)
                for message in result.messages:
                    yield message
                delivered += len(result.messages)
                got += len(result.messages)
                if result.next_queue_offset != offsets[queue_id]:
                    offsets[queue_id] = result.next_queue_offset
                    await self._commit_quietly(topic, queue_id, result.next_queue_offset)
                if max_messages is not None and delivered >= max_messages:
                    return
            if got:
                last_progress = time.monotonic()
                continue
            if (time.monotonic() - last_progress) * 1000 >= idle_timeout_ms:
                return
            await asyncio.sleep(self._poll_interval_s)
            queue_count = max(queue_count, await self.queue_count(topic))

    async def _start_offset(self, topic: str, queue_id: int, from_beginning: bool) -> int:
        if self.group is not None and not from_beginning:
            committed = await self.committed_offset(topic, queue_id)
            if committed >= 0:
                return committed
        low, high = await self.query_offsets(topic, queue_id)
        return low if from_beginning else high

    async def _commit_quietly(self, topic: str, queue_id: int, offset: int) -> None:
        # A failed commit only means re-delivery after a restart
        # (at-least-once); it must not stop consumption.
        if self.group is None:
            return
        try:
            await self.commit(topic, queue_id, offset)
        except (BrokerError, BrokerUnavailableError) as exc:
            log.warning("commit of %s/%d@%d failed: %s", topic, queue_id, offset, exc)

    async def _call(self, op: Callable[[BrokerConnection], Awaitable[T]], what: str) -> T:
        budget = _RetryBudget(self._config, f"{what} on {self.cluster_name}/{self.broker_name}")
        excluded: set[str] = set()
        while True:
            conn: BrokerConnection | None = None
            try:
                conn = await self._read_connection(excluded)
                return await op(conn)
            except BrokerError as exc:
                if exc.code not in _READ_RETRY:
                    raise
                error: BaseException = exc
            except _CONNECTION_ERRORS as exc:
                error = exc
            if conn is not None:
                excluded.add(conn.address)
                if self._conn is conn:
                    self._conn = None
                    await conn.close()
            await asyncio.sleep(budget.next_delay(error))

    async def _read_connection(self, excluded: set[str]) -> BrokerConnection:
        conn = self._conn
        if conn is not None and not conn.closed and conn.address not in excluded:
            return conn
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed and conn.address not in excluded:
                return conn
            candidates = await self._discovery.read_addresses()
            fresh = [a for a in candidates if a not in excluded]
            if not fresh:
                excluded.clear()  # every replica failed once: start a new round
                fresh = candidates
            if not fresh:
                raise NoMasterError(
                    f"no live replica of {self.cluster_name}/{self.broker_name} known"
                )
            last: BrokerConnectionError | None = None
            for address in fresh:
                try:
                    self._conn = await BrokerConnection.connect(address, self._config)
                    return self._conn
                except BrokerConnectionError as exc:
                    excluded.add(address)
                    last = exc
            assert last is not None
            raise last
