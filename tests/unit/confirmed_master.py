"""A broker that is already master, for the unit tests of what a master answers.

`confirmed_master` wires a real `Broker` (store, produce path, replication) as broker 1,
registered and confirmed master of SyncStateSet {1} with a valid lease, the way
RoleTransitions leaves it, but with no controller behind it (its address is a dead
port) and no slaves. The tests then put their own front (remoting port, client port,
verdicts) over `parts`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker import Broker, BrokerParts
from brokergroup_broker.core.broker_settings import BrokerSettings, mono_ms, store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import ControllerLink
from brokergroup_broker.core.peer_http import PeerHttp
from brokergroup_broker.store import MessageStore
from brokergroup_controller.client import ControllerClient


@dataclass
class ConfirmedMaster:
    broker: Broker
    store: MessageStore
    parts: BrokerParts
    settings: BrokerSettings


@asynccontextmanager
async def confirmed_master(
    tmp_path: Path,
    config: BrokerConfig | None = None,
    *,
    stats: BrokerStats | None = None,
    **settings: Any,
) -> AsyncIterator[ConfirmedMaster]:
    """Broker 1 of `C`/`broker-a` under `tmp_path`, master of {1}, counting on `stats`
    when given; `settings` are extra BrokerSettings fields (client_port -1: the HA master
    listens on any free port)."""
    config = config or BrokerConfig()
    broker_settings = BrokerSettings("C", "broker-a", tmp_path, ("127.0.0.1:1",), None,
                                     "127.0.0.1", "127.0.0.1", **{"client_port": -1, **settings})  # fmt: skip
    controller = ControllerLink(ControllerClient(["127.0.0.1:1"]), "C", "broker-a")
    broker = Broker(broker_settings, config, controller)
    if stats is not None:
        broker.stats = stats
    broker.store = store = MessageStore.open(tmp_path / "store", store_config_of(config))
    try:
        async with aiohttp.ClientSession() as http:
            parts = broker._wire(1, store, PeerHttp(http))
            become_master = roles.BecomeMaster(1, frozenset({1}), 1)
            store.epoch_file.begin_epoch(1, store.max_offset)  # as RoleTransitions does
            await parts.replication.start_master(become_master, store.max_offset, 0)
            broker.role.carried_out(become_master)
            broker.lease.renew(mono_ms())
            try:
                yield ConfirmedMaster(broker, store, parts, broker_settings)
            finally:
                await parts.replication.stop()
    finally:
        store.close()
        await controller.close()
