"""Retention in the broker (docs/retention.md): the thin shell that runs the pure policy
(`store.retention_policy`) every cleanResourceInterval and has the store carry out each
decision (`store.retention`), and the served floor a slave learns from its master.

Every replica applies retention to itself, by its own disk and its own segments' last
write times. What keeps a new master from serving what the old master deleted is the
floor: a slave copies its master's `retentionFloor` (the master's served min offset,
from its /v1/status) every second and serves nothing below it; a new master, before
taking writes, takes the highest floor its live peers report (`pre_online`). Both only
ever raise the floor, and it is persisted, so a restart keeps it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    CONSUMER_OFFSET_SYNC_MS,
    wall_ms,
)
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.peer_http import PeerHttp, peer_json
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.store import MessageStore, StoreError
from brokergroup_broker.store.retention import SegmentRemoved
from brokergroup_broker.store.retention_policy import RetentionSettings, decide_deletions

log = logging.getLogger(__name__)


def retention_settings_of(config: BrokerConfig) -> RetentionSettings:
    return RetentionSettings.of(
        file_reserved_time_hours=config.file_reserved_time,
        delete_when=config.delete_when,
        disk_max_used_space_ratio_percent=config.disk_max_used_space_ratio,
        disk_space_clean_forcibly_ratio_percent=config.disk_space_clean_forcibly_ratio,
        clean_file_forcibly_enable=config.clean_file_forcibly_enable,
    )


def local_hour(now_ms: int) -> int:
    """The local hour of day of `now_ms` (deleteWhen is local time, as RocketMQ's Calendar)."""
    return time.localtime(now_ms / 1000).tm_hour


class RetentionService:
    """`run()` the cadence; `run_once()` is one pass (tests call it with their clock)."""

    def __init__(
        self,
        *,
        store: MessageStore,
        config: BrokerConfig,
        role: RoleCore,
        session: PeerHttp | None,
        clock_ms: Callable[[], int] = wall_ms,
        hour_of: Callable[[int], int] = local_hour,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._settings = retention_settings_of(config)
        self._interval_s = config.clean_resource_interval / 1000
        self._between_s = config.delete_commit_log_files_interval / 1000
        self._role = role
        self._session = session
        self._clock_ms = clock_ms
        self._hour_of = hour_of
        self._sleep = sleep

    async def run(self) -> None:
        while True:
            await self._sleep(self._interval_s)
            try:
                await self.run_once()
            except (StoreError, OSError) as exc:
                # A failed deletion leaves the store as recovery would repair it; the next
                # run tries again. Writes keep their own verdict (StoreHealth).
                log.error("retention run failed: %s", exc)

    async def run_once(self) -> list[SegmentRemoved]:
        """Decide on fresh facts, then delete one segment at a time (off the event loop,
        deleteCommitLogFilesInterval apart), waking held pulls after each."""
        store = self._store
        now = self._clock_ms()
        facts, active = store.retention.segment_facts()
        space = await asyncio.to_thread(store.disk_space)
        decisions = decide_deletions(
            facts,
            active_start=active,
            now_ms=now,
            hour=self._hour_of(now),
            disk_used_ratio=space.used_ratio,
            disk_bytes=space.used + space.usable,
            settings=self._settings,
        )
        store.retention.last_run_ms = now
        removed: list[SegmentRemoved] = []
        for i, decision in enumerate(decisions):
            if i and self._between_s > 0:
                await self._sleep(self._between_s)
            done = await asyncio.to_thread(
                store.retention.delete_oldest,
                decision.segment.start,
                decision.reason,
                self._clock_ms(),
            )
            if done is None:  # the log changed under the decision: decide again next run
                break
            removed.append(done)
            store.arrivals.wake_all()  # held pulls below the new min answer OFFSET_MOVED
        return removed

    # -- the served floor ------------------------------------------------------------------
    def raise_floor(self, offset: int) -> None:
        if self._store.retention.raise_floor(offset):
            self._store.arrivals.wake_all()

    async def follow_master_loop(self) -> None:
        """Slaves copy the master's retentionFloor every CONSUMER_OFFSET_SYNC_MS."""
        while True:
            await self._sleep(CONSUMER_OFFSET_SYNC_MS / 1000)
            state = self._role.state
            if state.role is roles.Role.SLAVE and state.master_address:
                floor = await self._fetch_floor(state.master_address)
                if floor is not None:
                    self.raise_floor(floor)

    async def pre_online(self, peer_addresses: list[str]) -> None:
        """Before taking writes as master: the highest floor a live peer reports."""
        floors = await asyncio.gather(*(self._fetch_floor(a) for a in peer_addresses))
        known = [f for f in floors if f is not None]
        if known:
            self.raise_floor(max(known))

    async def _fetch_floor(self, client_address: str) -> int | None:
        if self._session is None:
            return None
        body: Any = await peer_json(self._session, client_address, "/v1/status")
        value = body.get("retentionFloor") if isinstance(body, dict) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def retention_floor_of(store: MessageStore, is_master: bool) -> int:
    """What /v1/status reports as `retentionFloor`: a master's served min offset; a
    slave's learned floor (its own deletions are its own, not the group's)."""
    retention = store.retention
    return retention.served_min_offset if is_master else retention.min_offset_floor
