"""`Consumer`: reads a broker group from its master or, without one, from the
live replicas (docs/protocol.md "Finding the master"; DESIGN.md §3.6)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

from brokergroup_broker.protocol.client import (
    CONNECTION_ERRORS,
    BrokerConnection,
    BrokerConnectionError,
    BrokerUnavailableError,
    ClientConfig,
    NoMasterError,
    RetryBudget,
)
from brokergroup_broker.protocol.discovery import MasterDiscovery, make_discovery
from brokergroup_broker.protocol.messages import (
    BrokerError,
    PulledMessage,
    PullResult,
    ResponseCode,
)
from brokergroup_remoting.net import Credentials

log = logging.getLogger(__name__)

T = TypeVar("T")


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
        credentials: Credentials | None = None,
        static_address: str | Sequence[str] | None = None,
        config: ClientConfig | None = None,
        discovery: MasterDiscovery | None = None,
        poll_interval_ms: int = 50,
    ) -> None:
        self.cluster_name = cluster_name
        self.broker_name = broker_name
        self.group = group
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
        budget = RetryBudget(self._config, f"{what} on {self.cluster_name}/{self.broker_name}")
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
            except CONNECTION_ERRORS as exc:
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
                    self._conn = await BrokerConnection.connect(
                        address, self._config, credentials=self._credentials
                    )
                    return self._conn
                except BrokerConnectionError as exc:
                    excluded.add(address)
                    last = exc
            assert last is not None
            raise last
