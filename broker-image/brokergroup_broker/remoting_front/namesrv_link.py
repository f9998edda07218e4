"""The broker's registration with the name servers (REGISTER_BROKER, as a stock broker sends).

Every `register_interval_ms` (RocketMQ's registerNameServerPeriod, 30 s), at once when a
topic appears and at once on a role change (`register_now`), the broker registers with every
name server: its remoting address, its persistent BrokerId and its topics. A name server
this broker could not reach, or whose connection closed (it restarted: its table is empty),
is registered with again after `retry_ms` (doubling up to the period) instead of at the next
period: a name server back from a restart otherwise routes clients without this broker for
up to 30 s, and one whose table holds the group's slaves but not its master hands a stock
producer a route with no brokerId 0 ("No route info of this topic" for every send; chaos
seed 3702 window 97, docs/reliability.md). The name server (controller/…/namesrv) maps the
registration to that BrokerId and names the controller's master brokerId 0 from the
replicated state, so the broker never needs to know its role here; a committed election is
in the next route without any broker registering again. One connection per name server is
kept open: the name server drops a registration when its connection closes, so a killed
broker leaves the routes at once. Requests are signed with the broker's key pair.

A registration only adds topics (the name server merges them, as RouteInfoManager does), so
a topic deleted on this broker (DELETE_TOPIC_IN_BROKER) is taken out of the routes with
DELETE_TOPIC_IN_NAMESRV naming this broker's group (`topic_deleted`); the name server lets
a broker pair delete only its own group's topics (controller/…/namesrv/access.py). Until
every name server has answered, the deletion is sent again with each registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from brokergroup_broker.remoting_front.wire import (
    AUTO_CREATE_TOPIC_KEY,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    topic_config,
)
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.body import crc32, json_body
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient

log = logging.getLogger(__name__)

#: TopicValidator.RMQ_SYS_SELF_TEST_TOPIC.
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
#: Deleted topics waiting for a name server's answer (past this, the oldest is dropped: a
#: name server that long unreachable has dropped this broker's registration anyway).
MAX_PENDING_DELETIONS = 1024


@dataclass(frozen=True)
class Registration:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    auto_create_topic: bool
    default_queue_nums: int


def register_body(
    reg: Registration,
    topics: Mapping[str, int | Mapping[str, object]],
    counter: int,
    now_ms: int,
) -> bytes:
    """RegisterBrokerBody (uncompressed JSON): topic configs and a DataVersion (pure). A
    topic is its TopicConfig JSON (the broker's topic table) or a queue count (read-write)."""
    table = {
        name: topic_config(name, value, PERM_READ | PERM_WRITE)
        if isinstance(value, int)
        else dict(value)
        for name, value in sorted(topics.items())
    }
    # The system topics a RocketMQ broker always registers (TopicConfigManager): a name
    # server refuses a first registration of one topic, and mqadmin lists these.
    table[SELF_TEST_TOPIC] = topic_config(SELF_TEST_TOPIC, 1, PERM_READ | PERM_WRITE)
    table[reg.cluster_name] = topic_config(reg.cluster_name, 1, PERM_INHERIT)
    table[reg.broker_name] = topic_config(reg.broker_name, 1, PERM_INHERIT)
    if reg.auto_create_topic:
        # A producer routes a topic the name server does not know by this one (TBW102).
        table[AUTO_CREATE_TOPIC_KEY] = topic_config(
            AUTO_CREATE_TOPIC_KEY, reg.default_queue_nums, PERM_READ | PERM_WRITE | PERM_INHERIT
        )
    body = {
        "topicConfigSerializeWrapper": {
            "topicConfigTable": table,
            "dataVersion": {"stateVersion": 0, "timestamp": now_ms, "counter": counter},
        },
        "filterServerList": [],
    }
    return json_body(body)


def register_fields(reg: Registration, body: bytes) -> dict[str, str]:
    return {
        "brokerName": reg.broker_name,
        "brokerAddr": reg.broker_addr,
        "clusterName": reg.cluster_name,
        "haServerAddr": reg.ha_server_addr,
        "brokerId": str(reg.broker_id),
        "enableActingMaster": "false",
        "compressed": "false",
        "bodyCrc32": str(crc32(body)),
    }


class NameServerLink:
    """Keeps this broker registered with every name server in `addresses`."""

    def __init__(
        self,
        addresses: tuple[str, ...],
        registration: Registration,
        topics: Callable[[], Mapping[str, int | Mapping[str, object]]],
        credentials: Credentials | None,
        *,
        register_interval_ms: int = 30_000,
        timeout_ms: int = 3_000,
        retry_ms: int = 500,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: reach the name servers over TLS with this context (`--tls-ca-file`)."""
        self._addresses = addresses
        self._tls = tls
        self._reg = registration
        self._topics = topics
        self._credentials = credentials
        self._interval_s = register_interval_ms / 1000
        self._timeout_s = timeout_ms / 1000
        self._retry_s = min(retry_ms / 1000, self._interval_s)
        self._wake = asyncio.Event()
        #: A full pass (every name server) is due before the period ends.
        self._full_pass_asked = True
        self._clients: dict[str, RemotingClient] = {}
        #: Name servers that answered a registration over their open connection.
        self._holding: set[str] = set()
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._counter = 0
        #: Deleted topic → name servers that have not yet answered its deletion.
        self._deletions: dict[str, set[str]] = {}

    def topic_deleted(self, topic: str) -> None:
        """Take `topic` out of every name server's routes of this group, now."""
        self._deletions.pop(topic, None)
        self._deletions[topic] = set(self._addresses)
        while len(self._deletions) > MAX_PENDING_DELETIONS:
            del self._deletions[next(iter(self._deletions))]
        self.register_now()

    def topics_changed(self, _topic: str = "") -> None:
        """Register again now (a new topic must be routable before its next send)."""
        self.register_now()

    def register_now(self) -> None:
        """Register with every name server now, not at the next period: a new topic, or a
        role change (a promoted master's topics learnt as a slave; RocketMQ's
        BrokerController.changeToMaster → registerBrokerAll)."""
        self._full_pass_asked = True
        self._wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_full = loop.time()
        retry_s = self._retry_s
        while True:
            self._wake.clear()
            now = loop.time()
            full = self._full_pass_asked or now >= next_full
            self._full_pass_asked = False
            targets = self._addresses if full else self._missing()
            if full:
                next_full = now + self._interval_s
            if targets:
                self._counter += 1
                body = register_body(
                    self._reg, self._topics(), self._counter, time.time_ns() // 1_000_000
                )
                await asyncio.gather(*(self._register(a, body) for a in targets))
            for topic, addresses in list(self._deletions.items()):
                for address in list(addresses):
                    if await self._delete(address, topic):
                        addresses.discard(address)
                if not addresses:
                    self._deletions.pop(topic, None)
            delay = next_full - loop.time()
            if self._missing():
                delay, retry_s = min(delay, retry_s), min(retry_s * 2, self._interval_s)
            else:
                retry_s = self._retry_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(delay, 0.0))

    def _missing(self) -> tuple[str, ...]:
        """Name servers that may not hold this broker's registration (unreached, or their
        connection closed since they answered)."""
        return tuple(a for a in self._addresses if a not in self._holding)

    async def _register(self, address: str, body: bytes) -> None:
        cmd = request(RequestCode.REGISTER_BROKER, 0, register_fields(self._reg, body), body)
        answer = await self._invoke(address, cmd)
        if answer is None:
            return
        # Any answer counts as reached: a refusal is not retried sooner than the period.
        client = self._clients.get(address)
        if client is not None and not client.closed:
            self._holding.add(address)
        if answer.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused the registration: %s", address, answer.remark)

    async def _delete(self, address: str, topic: str) -> bool:
        """DELETE_TOPIC_IN_NAMESRV for this group; True once the name server answered."""
        fields = {
            "topic": topic,
            "clusterName": self._reg.cluster_name,
            "brokerName": self._reg.broker_name,
        }
        answer = await self._invoke(
            address, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, 0, fields)
        )
        if answer is None:
            return False
        if answer.code != ResponseCode.SUCCESS:
            log.warning("name server %s refused deleting topic %s: %s", address, topic,
                        answer.remark)  # fmt: skip
        return True

    async def _invoke(self, address: str, cmd: RemotingCommand) -> RemotingCommand | None:
        """`cmd` to the name server at `address` (None: unreachable; reconnects next time)."""
        client = self._clients.get(address)
        try:
            if client is None or client.closed:
                client = await RemotingClient.connect(
                    address,
                    credentials=self._credentials,
                    connect_timeout_s=self._timeout_s,
                    name="namesrv-link",
                    tls=self._tls,
                )
                self._clients[address] = client
                self._watch(address, client)
            return await client.invoke(cmd, self._timeout_s)
        except (OSError, TimeoutError) as exc:
            log.info("name server %s unreachable: %s", address, exc)
            self._holding.discard(address)
            if client is not None:
                await client.close()
            self._clients.pop(address, None)
            return None

    def _watch(self, address: str, client: RemotingClient) -> None:
        """When `client`'s connection closes, register with `address` again soon."""

        async def closed() -> None:
            await client.connection.wait_closed()
            if self._clients.get(address, client) is client:  # not replaced by a newer one
                self._holding.discard(address)
                self._wake.set()

        previous = self._watchers.pop(address, None)
        if previous is not None:
            previous.cancel()
        self._watchers[address] = asyncio.create_task(closed(), name=f"namesrv-watch {address}")

    async def close(self) -> None:
        for task in self._watchers.values():
            task.cancel()
        await asyncio.gather(*self._watchers.values(), return_exceptions=True)
        self._watchers.clear()
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
