"""Role transitions of a broker (DESIGN.md §3.2, §3.4): the controller's answers,
through the role core's pure rules (`role_core`, `role`), carried out on the store
and the replication link — become master (new epoch at the log end, HA master,
takeover hold), become slave (truncate a partial tail, follow the master), fence,
ask for an election. One transition at a time: `run` takes the newest answer,
carries its decisions out in order, then takes the next."""

from __future__ import annotations

import logging
from collections.abc import Callable

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import group_view_of
from brokergroup_broker.core.commit_rule import AckOutcome
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_session import ControllerSession
from brokergroup_broker.core.peer_offsets import PeerOffsets
from brokergroup_broker.core.replication import ReplicationLink
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.core.store_faults import StoreFaults
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.errors import StoreError
from brokergroup_controller.api import ReplicaInfo

log = logging.getLogger(__name__)


class RoleTransitions:
    def __init__(
        self,
        *,
        broker_id: int,
        config: BrokerConfig,
        store: MessageStore,
        role: RoleCore,
        replication: ReplicationLink,
        session: ControllerSession,
        peers: PeerOffsets,
        faults: StoreFaults,
        on_master_lost: Callable[[str], None] = lambda _reason: None,
        on_master_gained: Callable[[], None] = lambda: None,
        on_slave_gained: Callable[[], None] = lambda: None,
    ) -> None:
        self._broker_id = broker_id
        self._config = config
        self._store = store
        self._role = role
        self._replication = replication
        self._session = session
        self._peers = peers
        self._faults = faults
        self._on_master_lost = on_master_lost
        self._on_master_gained = on_master_gained
        self._on_slave_gained = on_slave_gained

    async def run(self) -> None:
        while True:
            await self.apply_info(await self._session.next_info())

    async def apply_info(self, info: ReplicaInfo) -> None:
        group = group_view_of(info)
        decisions = self._role.decide(
            group, enable_slave_acting_master=self._config.enable_slave_acting_master
        )
        for decision in decisions:
            if isinstance(decision, roles.BecomeMaster) and self._restarted_at_same_epoch(decision):
                # DESIGN.md §3.2: on becoming master the epoch file must describe the
                # current log end. A restart may have cut an unflushed tail that slaves
                # still hold under this epoch, and slaves cut only to an epoch's *end*:
                # so take a new masterEpoch, which begins at today's log end and ends
                # the old epoch there. Stay fenced until it arrives.
                log.warning(
                    "broker %d restarted as master of masterEpoch %d (log end %d): asking "
                    "the controller for a new masterEpoch so slaves truncate to this log end",
                    self._broker_id,
                    decision.master_epoch,
                    self._store.max_offset,
                )
                self._role.fence()
                self._session.request_election(designate=True)
                return
            try:
                await self._carry_out(decision, info)
            except (StoreError, OSError, RuntimeError) as exc:
                # Stay fenced at the old epoch, so the next answer retries the
                # transition. A store that cannot take the role also reports
                # itself unwritable, so the controller elects someone else; a
                # socket problem (HA port still in use) is only retried.
                log.error("cannot carry out %s: %s", decision, exc)
                if isinstance(exc, StoreError):
                    self._faults.record(exc)
                self.stop_writes(AckOutcome.NOT_MASTER)
                await self._replication.stop()
                self._role.fence()
                return
            self._role.carried_out(decision)
            if isinstance(decision, roles.BecomeMaster):
                self._session.heartbeat_now()  # renew the lease now, not in ≤ one interval
                # Register with the name servers now (RocketMQ's changeToMaster): topics this
                # broker learnt as a slave are routable at once, not after the next period.
                self._on_master_gained()
                log.info(
                    "broker %d is MASTER at masterEpoch %d, SyncStateSet %s",
                    self._broker_id,
                    decision.master_epoch,
                    sorted(decision.sync_state_set),
                )
            elif isinstance(decision, roles.BecomeSlave):
                log.info(
                    "broker %d is SLAVE of %d (%s) at masterEpoch %d",
                    self._broker_id,
                    decision.master_broker_id,
                    decision.master_address,
                    decision.master_epoch,
                )
                self._on_slave_gained()
        if self._role.is_master and group.master_epoch == self._role.master_epoch:
            self._replication.on_controller_view(group, info.master_takeover_wait_ms)
        self._role.mark_running()

    async def _carry_out(self, decision: roles.Decision, info: ReplicaInfo) -> None:
        match decision:
            case roles.BecomeMaster():
                await self._become_master(decision, info)
            case roles.BecomeSlave():
                await self._become_slave(decision)
            case roles.Fence(_, reason):
                log.warning("fenced: %s", reason)
                self.stop_writes(AckOutcome.NOT_MASTER)
                await self._replication.stop()
            case roles.SyncStateSetChanged():
                pass  # adopted after the loop via on_controller_view
            case roles.RequestElection():
                self._session.request_election()
            case roles.SetActingMaster(acting):
                log.info("acting master (read-only, RIP-32): %s", acting)

    def stop_writes(self, outcome: AckOutcome) -> None:
        """Take no more writes; every produce still waiting fails with `outcome`. A master
        that stops also drops its RocketMQ client connections (`on_master_lost`)."""
        was_master = self._role.is_master
        self._role.stop_writes()
        self._replication.writes_stopped()
        if was_master:
            self._on_master_lost(f"broker {self._broker_id} is no longer the master")
        self._replication.fail_all(outcome)

    async def _become_master(self, decision: roles.BecomeMaster, info: ReplicaInfo) -> None:
        store = self._store
        self.stop_writes(AckOutcome.NOT_MASTER)
        await self._replication.stop()
        store.truncate_partial_tail()
        last_epoch = store.epoch_file.last_epoch()
        if decision.master_epoch > last_epoch:
            store.epoch_file.begin_epoch(decision.master_epoch, store.max_offset)
        elif decision.master_epoch < last_epoch:
            raise StoreError(
                f"controller names broker {self._broker_id} master at masterEpoch "
                f"{decision.master_epoch}, but its epoch file already holds epoch {last_epoch}: "
                "the controller's data is older than this store"
            )
        # (An unchanged epoch never gets here: `apply_info` asks for a new one.)
        found = store.epoch_file.find(decision.master_epoch)
        epoch_start = found[0].start_offset if found is not None else store.max_offset
        await self._peers.pre_online(info)
        await self._replication.start_master(decision, epoch_start, info.master_takeover_wait_ms)

    async def _become_slave(self, decision: roles.BecomeSlave) -> None:
        self.stop_writes(AckOutcome.NOT_MASTER)
        await self._replication.stop()
        self._store.truncate_partial_tail()
        self._replication.start_slave(decision)

    def _restarted_at_same_epoch(self, decision: roles.BecomeMaster) -> bool:
        """A BecomeMaster for the epoch this store already wrote under: only after a
        process restart (a running broker changes role only for a higher epoch)."""
        epoch_file = self._store.epoch_file
        return epoch_file.last_entry() is not None and decision.master_epoch == (
            epoch_file.last_epoch()
        )
