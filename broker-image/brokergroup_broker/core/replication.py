"""The replication link of a broker (DESIGN.md §3.2–§3.3): the one owner of the HA
services (master or slave), the SyncStateSet manager, confirmOffset, the takeover
hold and the produces waiting for the commit rule.

As master it turns slave acks and disconnects into the commit rule's view and
releases acknowledgements (lease and takeover hold respected), runs the
SyncStateSet loop and its AlterSyncStateSet calls with "maybe committed"
outcomes, and the ticker that times waiters out or fences them when the lease
lapses. As slave it runs the HA slave and takes confirmOffset from the master.
Role transitions start and stop it; the produce path hands it appends to wait on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    STOP_TASK_TIMEOUT_S,
    TICK_MS,
    ha_address_of,
    mono_ms,
)
from brokergroup_broker.core.commit_rule import (
    AckOutcome,
    AckWaiters,
    CommitRuleConfig,
    ReplicationView,
)
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import (
    ControllerLink,
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.core.sync_state import (
    ALTER_OUTCOME_UNKNOWN_CODES,
    AlterProposal,
    ReplicaProgress,
    SyncStateSetManager,
)
from brokergroup_broker.ha import HAConfig, HAMasterService, HASlaveService
from brokergroup_broker.store import FlushDiskType, MessageStore

log = logging.getLogger(__name__)


class ReplicationLink:
    def __init__(
        self,
        *,
        broker_id: int,
        config: BrokerConfig,
        ha_config: HAConfig,
        ha_bind: tuple[str, int],
        store: MessageStore,
        role: RoleCore,
        lease: MasterLease,
        controller: ControllerLink,
        registered_host: Callable[[int], str | None],
        clock_ms: Callable[[], int] = mono_ms,
    ) -> None:
        """`clock_ms`: monotonic milliseconds, for every time-dependent decision (the
        takeover hold, lease checks, waiter timeouts, caught-up times); tests pass a fake."""
        self._broker_id = broker_id
        self._clock_ms = clock_ms
        self._config = config
        self._ha_config = ha_config
        self._ha_bind = ha_bind
        self._store = store
        self._role = role
        self._lease = lease
        self._controller = controller
        self._registered_host = registered_host
        self.waiters = AckWaiters(
            CommitRuleConfig(
                all_ack_in_sync_state_set=config.all_ack_in_sync_state_set,
                in_sync_replicas=config.in_sync_replicas,
                min_in_sync_replicas=config.min_in_sync_replicas,
                slave_timeout_ms=config.slave_timeout_ms,
                max_pending_acks=config.max_pending_acks,
            )
        )
        self._futures: dict[int, Callable[[AckOutcome], None]] = {}
        self._tokens = itertools.count(1)
        self.sync: SyncStateSetManager | None = None
        self._ha_master: HAMasterService | None = None
        self._ha_slave: HASlaveService | None = None
        self._ha_slave_task: asyncio.Task[None] | None = None
        # master: SyncStateSet confirmOffset; slave: from the master
        self._confirm_offset = min(store.confirm_offset, store.max_offset)
        # A new master holds its acknowledgements until the replaced master's
        # lease has surely run out (DESIGN.md §3.3 "Fencing"); the controller says how long.
        self._takeover_hold_until_ms = 0
        # Set when a SyncStateSet member drops or a slave catches up: decide now, not next tick.
        self._sync_state_wake = asyncio.Event()

    # -- confirmOffset and the commit rule's view -----------------------------------------
    def confirm_offset(self) -> int:
        return min(self._confirm_offset, self._store.max_offset)

    def progress(self) -> dict[int, ReplicaProgress]:
        if self._ha_master is None:
            return {}
        # Async learners replicate but never join the SyncStateSet.
        return {
            broker_id: ReplicaProgress(max(0, p.ack_offset), p.last_caught_up_ms, p.connected)
            for broker_id, p in self._ha_master.slaves().items()
            if not p.is_async_learner
        }

    def _master_own_offset(self) -> int:
        """The master's own "ack": what it holds durably per the flush policy."""
        store = self._store
        if store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            return min(store.flushed_offset, store.last_record_end)
        return store.last_record_end

    def view(self) -> ReplicationView:
        """The commit rule's view now: a pure read (confirmOffset moves only through
        `advance_confirm_offset`)."""
        sync = self.sync
        if sync is None:
            return ReplicationView(self._confirm_offset, {}, 0)
        progress = self.progress()
        own = self._master_own_offset()
        acks = sync.member_acks(own, progress)
        return ReplicationView(sync.confirm_offset_of(acks), acks, sync.settled_set_size())

    def advance_confirm_offset(self) -> ReplicationView:
        """`view()`, then adopt its confirmOffset as the master's: the store's (which
        wakes held pulls on its arrivals) and the HA master's (sent to the slaves)."""
        view = self.view()
        confirm = view.confirm_offset
        if confirm != self._confirm_offset:  # never moves without a SyncStateSet
            self._confirm_offset = confirm
            self._store.set_confirm_offset(confirm)
            if self._ha_master is not None:
                self._ha_master.set_confirm_offset(confirm)
        return view

    # -- produces waiting for the commit rule ---------------------------------------------
    def admit(self) -> tuple[AckOutcome | None, ReplicationView]:
        """Refusal of a new produce before it appends (SyncStateSet too small, too many
        waiting), with the view it was decided on."""
        view = self.advance_confirm_offset()
        return self.waiters.admit(view), view

    def wait_for_ack(
        self,
        end_offset: int,
        now_ms: int,
        on_outcome: Callable[[AckOutcome], None],
        view: ReplicationView | None = None,
    ) -> None:
        """An append ending at `end_offset`: wake the HA senders, then call `on_outcome`
        once the commit rule decides (maybe now). `view`: the one `admit` returned, if
        nothing awaited since (an append without fdatasync leaves it unchanged)."""
        if self._ha_master is not None:
            self._ha_master.notify_appended()
        token = next(self._tokens)
        view = self.advance_confirm_offset() if view is None else view
        # The fencing `release` applies holds an acknowledgement the rule grants at once too.
        now = self._clock_ms()
        may_ack_now = now >= self._takeover_hold_until_ms and self._lease.valid(now)
        outcome = self.waiters.add(token, end_offset, now_ms, view, may_ack_now=may_ack_now)
        if outcome is not None:
            on_outcome(outcome)
            return
        self._futures[token] = on_outcome
        self.release(view)

    def release(self, view: ReplicationView | None = None) -> None:
        if self.sync is None or not self._role.accepting_writes:
            return
        now = self._clock_ms()
        if now < self._takeover_hold_until_ms:
            return  # the replaced master may still acknowledge: the ticker releases later
        view = self.advance_confirm_offset() if view is None else view
        if not self._lease.valid(now):
            return  # hold: the ticker fences them, or a renewed lease releases them
        self._resolve(self.waiters.progress(view, now))

    def fail_all(self, outcome: AckOutcome) -> None:
        self._resolve(self.waiters.fail_all(outcome))

    def writes_stopped(self) -> None:
        """The role took its last write: the HA master sends a moved confirmOffset at
        once instead of waiting for a batch to carry it (none will come)."""
        if self._ha_master is not None:
            self._ha_master.writes_stopped()

    def _resolve(self, released: Sequence[tuple[int, AckOutcome]]) -> None:
        for token, outcome in released:
            on_outcome = self._futures.pop(token, None)
            if on_outcome is not None:
                on_outcome(outcome)

    def refusal_text(self, outcome: AckOutcome, view: ReplicationView) -> str:
        sync = self.sync
        members = sorted(sync.effective_set()) if sync is not None else []
        config = self._config
        match outcome:
            case AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH:
                return (
                    f"SyncStateSet {members} has {view.in_sync_count} in-sync replicas, "
                    f"minInSyncReplicas is {config.min_in_sync_replicas}"
                )
            case AckOutcome.SLAVE_TIMEOUT:
                return (
                    f"not acknowledged by SyncStateSet {members} within slaveTimeoutMs "
                    f"{config.slave_timeout_ms} (confirmOffset {view.confirm_offset}); "
                    "the message may still be stored"
                )
            case AckOutcome.SYSTEM_BUSY:
                return (
                    f"{len(self.waiters)} produces wait for replication (maxPendingAcks "
                    f"{config.max_pending_acks}); retry later"
                )
            case AckOutcome.FENCED:
                return (
                    f"master {self._broker_id} lost its lease (masterLeaseMs "
                    f"{config.master_lease_ms}) before replication finished"
                )
            case _:
                return f"broker {self._broker_id} is no longer master"

    # -- HA callbacks ---------------------------------------------------------------------
    def _on_slave_ack(self, broker_id: int, ack_offset: int) -> None:
        self.release()
        sync = self.sync
        if (
            sync is not None
            and broker_id not in sync.sync_state_set
            and ack_offset >= self._confirm_offset
        ):
            self._sync_state_wake.set()  # caught up: expand without waiting for the tick

    def _on_slave_disconnect(self, broker_id: int) -> None:
        log.info("slave %d disconnected", broker_id)
        self.release()
        sync = self.sync
        if sync is not None and broker_id in sync.sync_state_set:
            self._sync_state_wake.set()  # with allAck, every write waits for this shrink

    def _on_master_confirm_offset(self, offset: int) -> None:
        confirm = min(offset, self._store.max_offset)
        if confirm > self._confirm_offset:
            self._confirm_offset = confirm
            self._store.set_confirm_offset(confirm)

    # -- starting and stopping as master or slave -----------------------------------------
    async def start_master(
        self, decision: roles.BecomeMaster, epoch_start: int, takeover_wait_ms: int
    ) -> None:
        """Run the HA master for `decision`'s epoch (the epoch file already begins it)."""
        store = self._store
        now = self._clock_ms()
        self._confirm_offset = min(self._confirm_offset, store.max_offset)
        self.sync = SyncStateSetManager(
            master_broker_id=self._broker_id,
            master_epoch=decision.master_epoch,
            epoch_start_offset=epoch_start,
            sync_state_set=decision.sync_state_set,
            sync_state_set_epoch=decision.sync_state_set_epoch,
            confirm_offset_floor=self._confirm_offset,
            master_since_ms=now,
            ha_max_time_slave_not_catch_up_ms=self._config.ha_max_time_slave_not_catch_up_ms,
        )
        master = HAMasterService(
            store,
            self._ha_config,
            master_epoch=decision.master_epoch,
            on_slave_ack=self._on_slave_ack,
            on_slave_disconnect=self._on_slave_disconnect,
            now_ms=self._clock_ms,
            registered_host=self._registered_host,
        )
        self._takeover_hold_until_ms = now + takeover_wait_ms
        if takeover_wait_ms > 0:
            log.warning(
                "the replaced master may hold its lease for %d ms more: holding "
                "acknowledgements until then (writes are taken and replicated meanwhile)",
                takeover_wait_ms,
            )
        await master.start(*self._ha_bind)
        self._ha_master = master
        # DESIGN.md §3.3: confirmOffset is the SyncStateSet's, from the first read on,
        # not from the first produce or slave ack. An election leaves the set {us}
        # (only we can be elected next), so it covers our whole (durable) log: at
        # least what the old master acknowledged, as we were in its set. The floor
        # (what the old master last told us) may be a commit round behind it.
        self.advance_confirm_offset()
        # Headers carry confirmOffset only on change: seed it, or slaves (and an
        # acting master among them) would serve nothing until the next write.
        master.set_confirm_offset(self._confirm_offset)
        self.release()

    def start_slave(self, decision: roles.BecomeSlave) -> None:
        # The handshake may truncate below what we confirmed before (an
        # unclean election): serve reads only from the new master's word.
        self._confirm_offset = 0
        slave = HASlaveService(
            self._store,
            self._ha_config,
            broker_id=self._broker_id,
            on_confirm_offset=self._on_master_confirm_offset,
        )
        self._ha_slave = slave
        self._ha_slave_task = asyncio.create_task(slave.run(ha_address_of(decision.master_address)))

    async def stop(self) -> None:
        master, self._ha_master = self._ha_master, None
        self.sync = None
        if master is not None:
            await master.stop()
        slave, self._ha_slave = self._ha_slave, None
        task, self._ha_slave_task = self._ha_slave_task, None
        if slave is not None:
            await slave.stop()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, STOP_TASK_TIMEOUT_S)
        self._store.arrivals.wake_all()  # a role change: held pulls answer as the new role says

    # -- the controller's view ------------------------------------------------------------
    def on_controller_view(self, group: roles.GroupView, takeover_wait_ms: int) -> None:
        """A controller answer at this master's epoch: adopt its SyncStateSet, and let
        it end the takeover hold early (the old master is certainly gone); never extend."""
        if self.sync is None:
            return
        self.sync.on_controller_view(group.sync_state_set, group.sync_state_set_epoch)
        now = self._clock_ms()
        if self._takeover_hold_until_ms > now + takeover_wait_ms:
            self._takeover_hold_until_ms = now + takeover_wait_ms
            self.release()

    def takeover_hold_remaining_ms(self, now_ms: int) -> int:
        return max(0, self._takeover_hold_until_ms - now_ms)

    # -- loops ----------------------------------------------------------------------------
    async def sync_state_loop(self) -> None:
        interval_s = self._config.sync_state_set_check_interval_ms / 1000
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sync_state_wake.wait(), interval_s)
            self._sync_state_wake.clear()
            sync = self.sync
            if sync is None or not self._role.is_master:
                continue
            proposal = sync.decide(self._clock_ms(), self._master_own_offset(), self.progress())
            if proposal is not None:
                await self._alter(sync, proposal)

    async def _alter(self, sync: SyncStateSetManager, proposal: AlterProposal) -> None:
        log.info("proposing %s", proposal.describe())
        try:
            new_set, new_epoch = await asyncio.wait_for(
                self._controller.alter_sync_state_set(
                    sync.master_broker_id,
                    sync.master_epoch,
                    proposal.new_set,
                    proposal.based_on_sync_state_set_epoch,
                ),
                self._config.controller_request_timeout_ms / 1000,
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
            self._role.adopt_sync_state_set_epoch(new_epoch)
            log.info("SyncStateSet is now %s (syncStateSetEpoch %d)", sorted(new_set), new_epoch)
            self.release()

    async def ticker_loop(self) -> None:
        """Releases timed-out waiters; fences them when the lease lapses."""
        while True:
            await asyncio.sleep(TICK_MS / 1000)
            if len(self.waiters) == 0:
                continue
            if not self._lease.valid(self._clock_ms()):
                self.fail_all(AckOutcome.FENCED)
            else:
                self.release()  # acks that arrived without a callback, and timeouts

    # -- status ---------------------------------------------------------------------------
    def status(self, now_ms: int) -> dict[str, Any]:
        sync = self.sync
        return {
            "syncStateSet": sorted(sync.sync_state_set) if sync is not None else [],
            "syncStateSetEpoch": sync.sync_state_set_epoch if sync is not None else None,
            "pendingSyncStateSet": sorted(sync.pending.new_set)
            if sync is not None and sync.pending is not None
            else None,
            "slaves": {
                str(k): {
                    "ackOffset": p.ack_offset,
                    "connected": p.connected,
                    "lastCaughtUpAgoMs": now_ms - p.last_caught_up_ms,
                }
                for k, p in self.progress().items()
            },
        }
