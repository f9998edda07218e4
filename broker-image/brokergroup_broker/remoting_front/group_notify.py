"""NOTIFY_CONSUMER_IDS_CHANGED: tell a consumer group's members that its membership changed,
so they rebalance now instead of at their next periodic rebalance (20 s).

RocketMQ's broker does this on every membership change of a clustering group
(ConsumerManager → DefaultConsumerIdsChangeListener → Broker2Client.notifyConsumerIdsChanged:
a oneway request with header `consumerGroup` to each member's channel); the client answers
with `rebalanceImmediately()`. A DefaultLitePullConsumer's start does not rebalance by itself
(the push consumer's does): without the notification it holds no queue for its first 20 s,
which is what made the stock lite consumer see nothing after a restart
(tests/integration/test_stock_client_local.py).

`GroupNotifier` keeps the live connections by the key `ConsumerGroups` stores (id of the
connection) and sends without waiting; a send that fails (the peer went away) is dropped,
as RocketMQ drops it. At most `MAX_PENDING` notifications are in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from brokergroup_remoting import RequestCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Connection

log = logging.getLogger(__name__)

#: Broker2Client's invokeOneway timeout is 10 ms; here a bound on sends in flight.
MAX_PENDING = 1024


class GroupNotifier:
    def __init__(self) -> None:
        self._connections: dict[int, Connection] = {}
        self._pending: set[asyncio.Task[None]] = set()

    def track(self, conn: Connection) -> int:
        """Remember `conn` under the key ConsumerGroups uses; returns the key."""
        self._connections[id(conn)] = conn
        return id(conn)

    def forget(self, key: int) -> None:
        self._connections.pop(key, None)

    def notify(self, group: str, connection_keys: Iterable[int]) -> None:
        """Send NOTIFY_CONSUMER_IDS_CHANGED for `group` to each of those connections."""
        for key in connection_keys:
            conn = self._connections.get(key)
            if conn is None or conn.closed or len(self._pending) >= MAX_PENDING:
                continue
            task = asyncio.ensure_future(self._send(conn, group))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    @staticmethod
    async def _send(conn: Connection, group: str) -> None:
        try:
            await conn.invoke_oneway(
                request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, 0, {"consumerGroup": group})
            )
        except (ConnectionError, OSError) as exc:
            log.debug("notify %s of group %s: %s", conn.peer, group, exc)

    async def close(self) -> None:
        for task in list(self._pending):
            task.cancel()
        self._connections.clear()
