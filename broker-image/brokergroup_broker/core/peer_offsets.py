"""Consumer offsets from peers (seed RIP-32): a new master takes newer offsets from
every live peer before going online; a slave copies the master's every second
(RocketMQ's SlaveSynchronize), so a new master never rolls them back. The topic and
subscription-group tables ride along (`PeerMetadata`, peer_metadata.py): the same steps,
the same peers, the same credential."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    CONSUMER_OFFSET_SYNC_MS,
)
from brokergroup_broker.core.peer_http import PeerHttp, peer_json
from brokergroup_broker.core.peer_metadata import PeerMetadata
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetSnapshot, ConsumerOffsetStore
from brokergroup_controller.api import ReplicaInfo

log = logging.getLogger(__name__)


class PeerOffsets:
    def __init__(
        self,
        *,
        broker_id: int,
        session: PeerHttp,
        offsets: ConsumerOffsetStore,
        role: RoleCore,
        metadata: PeerMetadata | None = None,
    ) -> None:
        self._broker_id = broker_id
        self._session = session
        self._offsets = offsets
        self._role = role
        self._metadata = metadata
        #: Also asked of the same live peers before going online: their retention floors
        #: (core/retention_service.py), so a new master never serves what the old deleted.
        self.floor_pre_online: Callable[[list[str]], Awaitable[None]] | None = None

    async def pre_online(self, info: ReplicaInfo) -> None:
        """RIP-32 pre-online: before taking writes, merge newer consumer
        offsets from every live peer (an acting master may have moved them), and newer
        topic and subscription-group tables."""
        if self._metadata is not None:
            await self._metadata.pre_online(info)
        peers = [
            b.address
            for b in info.brokers
            if b.alive and b.broker_id != self._broker_id and b.address
        ]
        if not peers:
            return
        # The peers' retention floors are asked at the same time (one round trip, not two).
        floors = (
            self.floor_pre_online(peers) if self.floor_pre_online is not None else asyncio.sleep(0)
        )
        snapshots, _ = await asyncio.gather(
            asyncio.gather(*(self._fetch(a) for a in peers)), floors
        )
        for snapshot in snapshots:
            if snapshot is not None and self._offsets.merge_newer(snapshot):
                log.info(
                    "took newer consumer offsets (version %s) before going online", snapshot.version
                )

    async def slave_sync_loop(self) -> None:
        """Slaves copy the master's consumer offsets (newer versions only)."""
        while True:
            await asyncio.sleep(CONSUMER_OFFSET_SYNC_MS / 1000)
            state = self._role.state
            if state.role is roles.Role.SLAVE and state.master_address:
                snapshot = await self._fetch(state.master_address)
                if snapshot is not None:
                    self._offsets.merge_newer(snapshot)
                if self._metadata is not None:
                    await self._metadata.sync_once()

    async def _fetch(self, client_address: str) -> ConsumerOffsetSnapshot | None:
        body = await peer_json(self._session, client_address, "/v1/consumer-offsets")
        if body is None:
            return None
        try:
            return ConsumerOffsetSnapshot.from_json(body)
        except ValueError as exc:
            log.debug("consumer offsets from %s: %s", client_address, exc)
            return None
