"""The broker's running conversation with the controller (DESIGN.md §2.3, §3.3): the
one owner of the newest controller answer. Heartbeats every heartbeatIntervalMs (an
answer that names this broker master at its epoch renews the lease), a long-poll
watch for fast pushes of new epochs, and election requests (at most one per
heartbeat interval). Role transitions take the newest answer from `next_info`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from brokergroup_broker.core.broker_settings import group_view_of, mono_ms
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import (
    ControllerLink,
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_controller.api import BrokerHeartbeat, ReplicaInfo
from brokergroup_controller.backoff import BackoffPolicy

log = logging.getLogger(__name__)


class ControllerSession:
    def __init__(
        self,
        *,
        broker_id: int,
        controller: ControllerLink,
        config: BrokerConfig,
        role: RoleCore,
        lease: MasterLease,
        heartbeat: Callable[[], BrokerHeartbeat],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        clock_ms: Callable[[], int] = mono_ms,
    ) -> None:
        """`clock_ms`: monotonic milliseconds for heartbeat send times (what a lease
        renews from) and the election request rate; tests pass a fake."""
        self._broker_id = broker_id
        self._clock_ms = clock_ms
        self._controller = controller
        self._config = config
        self._role = role
        self._lease = lease
        self._heartbeat = heartbeat
        self._spawn = spawn
        self._latest_info: ReplicaInfo | None = None
        self._info_event = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        self._last_election_request_ms = -(10**9)

    @property
    def latest_info(self) -> ReplicaInfo | None:
        return self._latest_info

    def offer(self, info: ReplicaInfo, heartbeat_sent_ms: int | None) -> None:
        """A controller answer. Renew the lease at once (only heartbeats
        prove the leader counted us alive at ≥ their send time); hand the
        rest to the role loop, newest epoch first."""
        if heartbeat_sent_ms is not None and self._role.confirms_master(group_view_of(info)):
            self._lease.renew(heartbeat_sent_ms)
        latest = self._latest_info
        if latest is None or info.master_epoch >= latest.master_epoch:
            self._latest_info = info
            self._info_event.set()

    async def next_info(self) -> ReplicaInfo:
        """The newest answer not yet taken (waits for one)."""
        while True:
            await self._info_event.wait()
            self._info_event.clear()
            if self._latest_info is not None:
                return self._latest_info

    def heartbeat_now(self) -> None:
        """Send the next heartbeat at once (a new master renews its lease; a store fault
        reaches the controller)."""
        self._heartbeat_now.set()

    def registered_host(self, broker_id: int) -> str | None:
        """Host the controller registered for `broker_id`, from its latest answer."""
        info = self._latest_info
        for b in info.brokers if info is not None else ():
            if b.broker_id == broker_id:
                return b.address.rsplit(":", 1)[0]
        return None

    async def heartbeat_loop(self) -> None:
        interval_s = self._config.heartbeat_interval_ms / 1000
        while True:
            sent = self._clock_ms()
            try:
                info = await asyncio.wait_for(
                    self._controller.heartbeat(self._heartbeat()),
                    self._config.controller_request_timeout_ms / 1000,
                )
            except (ControllerUnavailable, ControllerRefused, TimeoutError) as exc:
                log.debug("heartbeat failed: %s", exc)
            else:
                self.offer(info, sent)
            self._heartbeat_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval_s)

    async def watch_loop(self) -> None:
        backoff = BackoffPolicy(
            initial_ms=self._config.controller_retry_backoff_ms,
            max_ms=self._config.controller_retry_backoff_max_ms,
        )
        backoff_ms = backoff.initial_ms
        while True:
            latest = self._latest_info
            master_epoch = self._role.master_epoch if latest is None else latest.master_epoch
            set_epoch = 0 if latest is None else latest.sync_state_set_epoch
            try:
                info = await asyncio.wait_for(
                    self._controller.watch(master_epoch, set_epoch, self._config.watch_timeout_ms),
                    self._config.watch_timeout_ms / 1000 + 2,
                )
            except (ControllerUnavailable, ControllerRefused, TimeoutError) as exc:
                log.debug("watch failed: %s", exc)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = backoff.next_ms(backoff_ms)
                continue
            backoff_ms = backoff.initial_ms
            self.offer(info, None)

    def request_election(self, *, designate: bool = False) -> None:
        now = self._clock_ms()
        if now - self._last_election_request_ms < self._config.heartbeat_interval_ms:
            return  # at most one request per heartbeat interval
        self._last_election_request_ms = now
        self._spawn(self._elect(designate=designate))

    async def _elect(self, *, designate: bool) -> None:
        try:
            info = await asyncio.wait_for(
                self._controller.elect_master(self._broker_id, designate=designate),
                self._config.controller_request_timeout_ms / 1000,
            )
        except (ControllerUnavailable, TimeoutError) as exc:
            log.debug("election request failed: %s", exc)
            return
        except ControllerRefused as exc:
            log.info("election request refused: %s", exc)
            return
        self.offer(info, None)
