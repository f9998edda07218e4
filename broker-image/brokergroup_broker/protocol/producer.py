"""`Producer`: sends to the master of one broker group and follows failovers
(docs/protocol.md "Retries" and "Following the master")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TypeVar

from brokergroup_broker.protocol.client import (
    CONNECTION_ERRORS,
    ISR,
    REDISCOVER,
    AuthenticationError,
    BrokerConnection,
    BrokerConnectionError,
    ClientConfig,
    NoMasterError,
    RetryBudget,
)
from brokergroup_broker.protocol.discovery import MasterDiscovery, make_discovery
from brokergroup_broker.protocol.messages import (
    BrokerError,
    ProduceMessage,
    ResponseCode,
    SendResult,
)
from brokergroup_controller.backoff import BackoffPolicy
from brokergroup_remoting.net import Credentials

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        credentials: Credentials | None = None,
        static_address: str | None = None,
        config: ClientConfig | None = None,
        discovery: MasterDiscovery | None = None,
    ) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self._config = config or ClientConfig()
        #: The key pair every broker connection proves (`protocol.auth`).
        self._credentials = credentials
        self._discovery = discovery or make_discovery(
            cluster_name,
            broker_name,
            controller_addresses=controller_addresses,
            token=token,
            static_address=static_address,
            discovery_timeout_ms=self._config.discovery_timeout_ms,
            controller_tls=self._config.controller_tls,
        )
        self._conn: BrokerConnection | None = None
        self._hint: str | None = None
        self._lock = asyncio.Lock()
        self._connect_seq = 0
        self._connect_error: NoMasterError | BrokerConnectionError | AuthenticationError | None = (
            None
        )
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
        budget = RetryBudget(self._config, f"send to {self.cluster_name}/{self.broker_name}")
        try:
            while True:
                conn: BrokerConnection | None = None
                try:
                    conn = await self._connection()
                    return await conn.send(topic, messages, queue_id)
                except BrokerError as exc:
                    if exc.code in REDISCOVER:
                        self._drop(conn, exc.master_address)
                        delay = budget.next_delay(exc, immediate=self._hint is not None)
                    elif exc.code == ResponseCode.SYSTEM_BUSY or exc.code in ISR:
                        delay = budget.next_delay(exc)
                    else:
                        raise
                except CONNECTION_ERRORS as exc:
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
                self._conn = await BrokerConnection.connect(
                    address, self._config, credentials=self._credentials
                )
            except (NoMasterError, BrokerConnectionError, AuthenticationError) as exc:
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
        backoff = BackoffPolicy(initial_ms=100, max_ms=2_000)
        backoff_ms = backoff.initial_ms
        while True:
            info = await watch(known, self._config.master_watch_ms)
            if info is None:
                self._watched_master = None  # no authority now: brokers' hints count again
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = backoff.next_ms(backoff_ms)
                continue
            backoff_ms = backoff.initial_ms
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
