"""Topic and subscription-group tables from peers (docs/reliability.md "Metadata across
failover"), over the same path and credential as the consumer offsets (peer_offsets.py):
each broker serves its tables at GET /v1/metadata on its HTTP port, to the group's broker
credential only (http_status.py).

- A slave reads its master's tables every CONSUMER_OFFSET_SYNC_MS and takes each whose
  DataVersion differs (RocketMQ's SlaveSynchronize.syncTopicConfig /
  syncSubscriptionGroupConfig), written durably before they are installed.
- A broker about to become master reads every live peer's tables first and takes the newer
  ones (RIP-32's pre-online step, as for consumer offsets), then adopts the topics its
  store holds without a config (a topic whose config had not reached this replica when
  the old master died), so the new master serves and registers every topic it has.

A peer's document is checked whole before anything of it is taken (metadata/tables.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    CONSUMER_OFFSET_SYNC_MS,
)
from brokergroup_broker.core.peer_http import PeerHttp, peer_json
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.metadata import BrokerMetadata, MetadataError
from brokergroup_broker.metadata.store import Tables
from brokergroup_controller.api import ReplicaInfo

log = logging.getLogger(__name__)

METADATA_PATH = "/v1/metadata"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class PeerMetadata:
    def __init__(
        self,
        *,
        broker_id: int,
        session: PeerHttp,
        metadata: BrokerMetadata,
        role: RoleCore,
        store_topics: Callable[[], Mapping[str, int]],
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._broker_id = broker_id
        self._session = session
        self._metadata = metadata
        self._role = role
        self._store_topics = store_topics
        self._wall_ms = wall_ms

    async def pre_online(self, info: ReplicaInfo) -> None:
        """Before taking writes: take live peers' newer tables, then adopt store topics."""
        peers = [
            b.address
            for b in info.brokers
            if b.alive and b.broker_id != self._broker_id and b.address
        ]
        tables = await asyncio.gather(*(self._fetch(a) for a in peers))
        try:
            for address, found in zip(peers, tables, strict=True):
                if found is not None and self._metadata.merge_newer(*found):
                    log.info("took newer topic/group tables from %s before going online", address)
            adopted = self._metadata.adopt_store_topics(self._store_topics(), self._wall_ms())
        except MetadataError as exc:
            # Going online without them loses no record; the tables are retried as a slave
            # or by the next master. Said loudly.
            log.error("metadata before going online: %s", exc)
            return
        if adopted:
            log.info("adopted %d stored topics without a config: %s", len(adopted),
                     ", ".join(adopted[:20]))  # fmt: skip

    async def sync_once(self) -> bool:
        """A slave takes its master's tables where they differ; True if any changed."""
        state = self._role.state
        if state.role is not roles.Role.SLAVE or not state.master_address:
            return False
        found = await self._fetch(state.master_address)
        if found is None:
            return False
        try:
            return self._metadata.sync_from_master(*found)
        except MetadataError as exc:
            log.error("metadata from the master: %s", exc)
            return False

    async def slave_sync_loop(self) -> None:
        while True:
            await asyncio.sleep(CONSUMER_OFFSET_SYNC_MS / 1000)
            await self.sync_once()

    async def _fetch(self, client_address: str) -> Tables | None:
        body = await peer_json(self._session, client_address, METADATA_PATH)
        if body is None:
            return None
        try:
            return self._metadata.parse_snapshot(body)
        except ValueError as exc:  # BadMetadata: a peer's bad document is not taken
            log.debug("metadata from %s: %s", client_address, exc)
            return None
