"""Replication wiring of a master (DESIGN.md §3.3): slave acks and disconnects
into the commit rule's view, releasing acknowledgements (lease and takeover
hold respected), the SyncStateSet loop and its AlterSyncStateSet calls with
"maybe committed" outcomes, and the housekeeping loops (ticker, flush,
consumer offsets). A mixin of `Broker`: the state lives there."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiohttp

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    _CONSUMER_OFFSET_SYNC_MS,
    _PEER_HTTP_TIMEOUT_S,
    _TICK_MS,
    http_address_of,
    mono_ms,
)
from brokergroup_broker.core.broker_state import BrokerState
from brokergroup_broker.core.commit_rule import (
    AckOutcome,
    ReplicationView,
)
from brokergroup_broker.core.controller_link import (
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.core.sync_state import (
    ALTER_OUTCOME_UNKNOWN_CODES,
    AlterProposal,
    ReplicaProgress,
    SyncStateSetManager,
)
from brokergroup_broker.store import (
    FlushDiskType,
)
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetSnapshot
from brokergroup_broker.store.errors import (
    StoreError,
)

if TYPE_CHECKING:
    from brokergroup_broker.core.broker import Broker

log = logging.getLogger(__name__)


class ReplicationWiring(BrokerState):
    def _progress(self: Broker) -> dict[int, ReplicaProgress]:
        if self.ha_master is None:
            return {}
        # Async learners replicate but never join the SyncStateSet.
        return {
            broker_id: ReplicaProgress(max(0, p.ack_offset), p.last_caught_up_ms, p.connected)
            for broker_id, p in self.ha_master.slaves().items()
            if not p.is_async_learner
        }

    def _master_own_offset(self: Broker) -> int:
        """The master's own "ack": what it holds durably per the flush policy."""
        store = self._store()
        if store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            return min(store.flushed_offset, store.last_record_end)
        return store.last_record_end

    def _view(self: Broker) -> ReplicationView:
        sync, store = self.sync, self._store()
        if sync is None:
            return ReplicationView(self._confirm_offset, {}, 0)
        progress = self._progress()
        own = self._master_own_offset()
        acks = sync.member_acks(own, progress)
        confirm = sync.confirm_offset(own, progress)
        if confirm != self._confirm_offset:
            self._confirm_offset = confirm
            store.set_confirm_offset(confirm)
            if self.ha_master is not None:
                self.ha_master.set_confirm_offset(confirm)
        return ReplicationView(confirm, acks, sync.settled_set_size())

    def _on_slave_ack(self: Broker, broker_id: int, ack_offset: int) -> None:
        self._release()
        sync = self.sync
        if (
            sync is not None
            and broker_id not in sync.sync_state_set
            and ack_offset >= self._confirm_offset
        ):
            self._sync_state_wake.set()  # caught up: expand without waiting for the tick

    def _on_slave_disconnect(self: Broker, broker_id: int) -> None:
        log.info("slave %d disconnected", broker_id)
        self._release()
        sync = self.sync
        if sync is not None and broker_id in sync.sync_state_set:
            self._sync_state_wake.set()  # with allAck, every write waits for this shrink

    def _on_master_confirm_offset(self: Broker, offset: int) -> None:
        store = self.store
        if store is None:
            return
        confirm = min(offset, store.max_offset)
        if confirm > self._confirm_offset:
            self._confirm_offset = confirm
            store.set_confirm_offset(confirm)

    def _shorten_takeover_hold(self: Broker, wait_ms: int) -> None:
        """A later answer may end the hold early (the controller learned the
        old master is certainly gone); it never extends it."""
        now = mono_ms()
        if self._takeover_hold_until_ms > now + wait_ms:
            self._takeover_hold_until_ms = now + wait_ms
            self._release()

    def _release(self: Broker) -> None:
        if self.sync is None or not self._accepting_writes:
            return
        now = mono_ms()
        if now < self._takeover_hold_until_ms:
            return  # the replaced master may still acknowledge: the ticker releases later
        view = self._view()
        if not self.lease.valid(now):
            return  # hold: the ticker fences them, or a renewed lease releases them
        self._resolve(self.waiters.progress(view, now))

    def _resolve(self: Broker, released: Sequence[tuple[int, AckOutcome]]) -> None:
        for token, outcome in released:
            on_outcome = self._futures.pop(token, None)
            if on_outcome is not None:
                on_outcome(outcome)

    async def _sync_state_loop(self: Broker) -> None:
        interval_s = self.config.sync_state_set_check_interval_ms / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sync_state_wake.wait(), interval_s)
            self._sync_state_wake.clear()
            sync = self.sync
            if sync is None or self.role.role is not roles.Role.MASTER or self.store is None:
                continue
            proposal = sync.decide(mono_ms(), self._master_own_offset(), self._progress())
            if proposal is not None:
                await self._alter(sync, proposal)

    async def _alter(self: Broker, sync: SyncStateSetManager, proposal: AlterProposal) -> None:
        log.info("proposing %s", proposal.describe())
        try:
            new_set, new_epoch = await asyncio.wait_for(
                self.controller.alter_sync_state_set(
                    sync.master_broker_id,
                    sync.master_epoch,
                    proposal.new_set,
                    proposal.based_on_sync_state_set_epoch,
                ),
                self.config.controller_request_timeout_ms / 1000,
            )
        except ControllerRefused as exc:
            if exc.code in ALTER_OUTCOME_UNKNOWN_CODES:
                log.warning(
                    "AlterSyncStateSet %s: outcome unknown (%s); counting its members until "
                    "the controller's syncStateSetEpoch moves",
                    sorted(proposal.new_set), exc,
                )  # fmt: skip
            else:
                log.info("AlterSyncStateSet %s refused: %s", sorted(proposal.new_set), exc)
            sync.on_alter_rejected(proposal, exc.code)
            return
        except (ControllerUnavailable, TimeoutError) as exc:
            log.warning(
                "AlterSyncStateSet %s: no answer (%s); counting its members until the "
                "controller's syncStateSetEpoch moves",
                sorted(proposal.new_set), exc or type(exc).__name__,
            )  # fmt: skip
            sync.on_alter_unknown(proposal)
            return
        sync.on_alter_accepted(proposal, new_set, new_epoch)
        if sync is self.sync:
            self.role = roles.RoleState(
                self.role.role,
                self.role.master_epoch,
                self.role.master_broker_id,
                self.role.master_address,
                max(self.role.sync_state_set_epoch, new_epoch),
                self.role.acting_master,
            )
            log.info("SyncStateSet is now %s (syncStateSetEpoch %d)", sorted(new_set), new_epoch)
            self._release()

    async def _ticker_loop(self: Broker) -> None:
        while True:
            await asyncio.sleep(_TICK_MS / 1000)
            if len(self.waiters) == 0:
                continue
            now = mono_ms()
            if not self.lease.valid(now):
                self._resolve(self.waiters.fail_all(AckOutcome.FENCED))
            else:
                self._release()  # acks that arrived without a callback, and timeouts

    async def _flush_loop(self: Broker) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            try:
                # Also persists consume queues, the checkpoint (confirmOffset)
                # and dirty consumer offsets.
                self._store().flush()
            except (StoreError, OSError) as exc:
                log.error("flush failed: %s", exc)
                self._last_store_error = f"{type(exc).__name__}: {exc}"

    async def _consumer_offset_sync_loop(self: Broker) -> None:
        """Slaves copy the master's consumer offsets (newer versions only)."""
        while True:
            await asyncio.sleep(_CONSUMER_OFFSET_SYNC_MS / 1000)
            if self.role.role is roles.Role.SLAVE and self.role.master_address:
                snapshot = await self._fetch_consumer_offsets(self.role.master_address)
                if snapshot is not None:
                    self._store().consumer_offsets.merge_newer(snapshot)

    async def _fetch_consumer_offsets(
        self: Broker, client_address: str
    ) -> ConsumerOffsetSnapshot | None:
        if self._session is None:
            return None
        url = f"http://{http_address_of(client_address)}/v1/consumer-offsets"
        try:
            async with self._session.get(
                url, timeout=aiohttp.ClientTimeout(total=_PEER_HTTP_TIMEOUT_S)
            ) as response:
                if response.status != 200:
                    return None
                return ConsumerOffsetSnapshot.from_json(await response.json())
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.debug("consumer offsets from %s: %s", client_address, exc)
            return None
