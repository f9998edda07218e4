"""The broker's remoting port: `RemotingFront`'s handlers on `brokergroup_remoting.net`, which
checks every request's AccessKey/SecretKey signature before a handler decodes anything."""

from __future__ import annotations

import asyncio
import logging

from brokergroup_broker.remoting_front.front import RemotingFront
from brokergroup_remoting.net import RemotingServer, ServerAuth
from brokergroup_remoting.tls import ServerTls

log = logging.getLogger(__name__)

#: RocketMQ's broker listenPort; here the default is the client port + 3 (see cli_broker).
ROCKETMQ_LISTEN_PORT = 10911


class RemotingFrontServer:
    def __init__(
        self, front: RemotingFront, auth: ServerAuth | None, *, tls: ServerTls | None = None
    ) -> None:
        """`tls`: the port's TLS mode and certificate (`--remoting-tls-mode`)."""
        self.front = front
        self._server = RemotingServer(
            front.handlers, auth=auth, dispatch=front.dispatch, name="broker-remoting", tls=tls
        )
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        return self._server.port

    async def start(self, host: str, port: int) -> None:
        await self._server.start(host, port)

    async def close(self) -> None:
        await self._server.close()
        await self.front.close()

    def master_lost(self, reason: str) -> None:
        """Close every client connection: this broker stopped being the master, and a client
        that reached it through a stable master address must reconnect to the new one."""
        connections = list(self._server.connections)
        if connections:
            log.info("remoting: closing %d client connections: %s", len(connections), reason)
        for conn in connections:
            task = asyncio.ensure_future(conn.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
