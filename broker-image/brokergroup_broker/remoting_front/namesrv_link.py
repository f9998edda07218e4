"""The broker's registration with the name servers (REGISTER_BROKER, as a stock broker sends).

Every `register_interval_ms` (RocketMQ's registerNameServerPeriod, 30 s), at once when a
topic appears and at once on a role change (`register_now`), the broker registers with every name server: its remoting address, its
persistent BrokerId and its topics. The name server (controller/…/namesrv) maps the
registration to that BrokerId and names the controller's master brokerId 0 from the
replicated state, so the broker never needs to know its role here; a committed election is
in the next route without any broker registering again. One connection per name server is
kept open: the name server drops a registration when its connection closes, so a killed
broker leaves the routes at once. Requests are signed with the broker's key pair.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.body import crc32, json_body
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient

log = logging.getLogger(__name__)

#: TopicValidator.RMQ_SYS_SELF_TEST_TOPIC.
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"


@dataclass(frozen=True)
class Registration:
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    auto_create_topic: bool
    default_queue_nums: int


def register_body(reg: Registration, topics: Mapping[str, int], counter: int, now_ms: int) -> bytes:
    """RegisterBrokerBody (uncompressed JSON): topic configs and a DataVersion (pure)."""
    table = {
        name: topic_config(name, queues, PERM_READ | PERM_WRITE)
        for name, queues in sorted(topics.items())
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
        topics: Callable[[], Mapping[str, int]],
        credentials: Credentials | None,
        *,
        register_interval_ms: int = 30_000,
        timeout_ms: int = 3_000,
    ) -> None:
        self._addresses = addresses
        self._reg = registration
        self._topics = topics
        self._credentials = credentials
        self._interval_s = register_interval_ms / 1000
        self._timeout_s = timeout_ms / 1000
        self._wake = asyncio.Event()
        self._clients: dict[str, RemotingClient] = {}
        self._counter = 0

    def topics_changed(self, _topic: str = "") -> None:
        """Register again now (a new topic must be routable before its next send)."""
        self.register_now()

    def register_now(self) -> None:
        """Register with every name server now, not at the next period: a new topic, or a
        role change (a promoted master's topics learnt as a slave; RocketMQ's
        BrokerController.changeToMaster → registerBrokerAll)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            self._counter += 1
            body = register_body(
                self._reg, self._topics(), self._counter, time.time_ns() // 1_000_000
            )
            await asyncio.gather(*(self._register(a, body) for a in self._addresses))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._interval_s)

    async def _register(self, address: str, body: bytes) -> None:
        client = self._clients.get(address)
        try:
            if client is None or client.closed:
                client = await RemotingClient.connect(
                    address,
                    credentials=self._credentials,
                    connect_timeout_s=self._timeout_s,
                    name="namesrv-link",
                )
                self._clients[address] = client
            cmd = request(RequestCode.REGISTER_BROKER, 0, register_fields(self._reg, body), body)
            answer = await client.invoke(cmd, self._timeout_s)
            if answer.code != ResponseCode.SUCCESS:
                log.warning("name server %s refused the registration: %s", address, answer.remark)
        except (OSError, TimeoutError) as exc:
            log.info("name server %s unreachable: %s", address, exc)
            if client is not None:
                await client.close()
            self._clients.pop(address, None)

    async def close(self) -> None:
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
