"""`local up --engine rocketmq` with ACL 2.0 on: the stock brokers' users follow the controllers'.

The supervisor runs `StockUsersSync.run` beside its children when the brokers' ACL 2.0 is on
(`rocketmq_engine.acl_enabled`). Every `interval_s` it reads the cluster's users-snapshot with
the group's broker credential (the one read that carries SecretKeys; docs/security.md), and
syncs a broker (brokergroup_remoting.stock_users.sync_broker) when the snapshot's usersVersion
is newer than the broker's last successful sync or the broker is a new process (a restart, on a
new address). A failed sync (a broker still starting, a refusal) is retried at the next tick;
the admin requests are signed with the group's broker pair, a Super user on every stock broker
of the group (innerClientAuthenticationCredentials).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from brokergroup_controller.client import ControllerClient
from brokergroup_controller.errors import ControllerError
from brokergroup_remoting.net import RemotingClient
from brokergroup_remoting.stock_users import (
    StockUser,
    StockUsersError,
    from_snapshot,
    sync_broker,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerProcess:
    """One running stock broker: its remoting address and pid (a new pid is a new process)."""

    address: str
    pid: int


@dataclass
class StockUsersSync:
    controller: ControllerClient
    """Signed with the group's broker credential (users-snapshot)."""
    cluster: str
    broker_key_file: Path
    """The group's broker pair (a Super user of each stock broker)."""
    brokers: Callable[[], Sequence[BrokerProcess]]
    interval_s: float = 1.0
    tls: ssl.SSLContext | None = None
    """Under local.tls: reach the brokers' remoting ports over TLS, verified against the local
    CA (an enforcing broker refuses plaintext; permissive keeps the users' SecretKeys off the
    wire in clear too)."""
    _synced: dict[BrokerProcess, int] = field(default_factory=dict)
    _version: int = -1
    _desired: list[StockUser] = field(default_factory=list)

    async def tick(self) -> None:
        snapshot = await self.controller.users_snapshot(self.cluster, self._version)
        if snapshot.get("changed"):
            self._desired = from_snapshot(snapshot.get("users", ()))
            self._version = int(snapshot["usersVersion"])
        if self._version < 0:
            return
        keys = json.loads(self.broker_key_file.read_text())
        live = set(self.brokers())
        for gone in set(self._synced) - live:
            del self._synced[gone]
        for broker in sorted(live, key=lambda b: b.address):
            if self._synced.get(broker) == self._version:
                continue
            try:
                client = await RemotingClient.connect(
                    broker.address, name="stock-users-sync", tls=self.tls
                )
            except (OSError, TimeoutError) as exc:
                log.debug("stock broker %s not reachable yet: %s", broker.address, exc)
                continue
            try:
                result = await sync_broker(
                    client.invoke, str(keys["accessKey"]), str(keys["secretKey"]), self._desired
                )
            except (StockUsersError, OSError, TimeoutError, ValueError) as exc:
                log.warning("users of stock broker %s not synced yet: %s", broker.address, exc)
                continue
            finally:
                await client.close()
            self._synced[broker] = self._version
            if result.applied:
                log.info(
                    "stock broker %s now has usersVersion %d: %s",
                    broker.address,
                    self._version,
                    ", ".join(result.applied),
                )

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.tick()
            except (ControllerError, OSError, TimeoutError, KeyError, ValueError) as exc:
                log.warning("stock brokers' users sync: %s", exc)
            except Exception:
                log.exception("stock brokers' users sync failed; retrying")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.interval_s)
