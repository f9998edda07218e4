"""Role transitions of a broker (DESIGN.md §3.2, §3.4): the controller's answers,
through the pure role rules (`core/role.py`), carried out on the store and HA —
become master (new epoch at the log end, HA master, takeover hold), become
slave (truncate a partial tail, follow the master), fence, ask for an
election. A mixin of `Broker`: the state lives there."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    _STOP_TASK_TIMEOUT_S,
    group_view_of,
    ha_address_of,
    mono_ms,
)
from brokergroup_broker.core.broker_state import BrokerState
from brokergroup_broker.core.commit_rule import (
    AckOutcome,
)
from brokergroup_broker.core.controller_link import (
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.core.sync_state import (
    SyncStateSetManager,
)
from brokergroup_broker.ha import HAMasterService, HASlaveService
from brokergroup_broker.store.errors import (
    StoreError,
)
from brokergroup_controller.api import ReplicaInfo

if TYPE_CHECKING:
    from brokergroup_broker.core.broker import Broker

log = logging.getLogger(__name__)


class RoleTransitions(BrokerState):
    async def _role_loop(self: Broker) -> None:
        while True:
            await self._info_event.wait()
            self._info_event.clear()
            info = self._latest_info
            if info is not None:
                await self._apply_info(info)

    async def _apply_info(self: Broker, info: ReplicaInfo) -> None:
        assert self.broker_id is not None
        group = group_view_of(info)
        decisions = roles.decide(
            self.role,
            group,
            self.broker_id,
            enable_slave_acting_master=self.config.enable_slave_acting_master,
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
                    self.broker_id,
                    decision.master_epoch,
                    self._store().max_offset,
                )
                self.role = roles.RoleState(roles.Role.FENCED, self.role.master_epoch)
                self._request_election(designate=True)
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
                    self._last_store_error = f"{type(exc).__name__}: {exc}"
                self._stop_writes(AckOutcome.NOT_MASTER)
                await self._stop_ha()
                self.role = roles.RoleState(roles.Role.FENCED, self.role.master_epoch)
                return
            self.role = roles.apply(self.role, decision)
            if isinstance(decision, roles.BecomeMaster):
                self._accepting_writes = True
                self._heartbeat_now.set()  # renew the lease now, not in ≤ one interval
                log.info(
                    "broker %d is MASTER at masterEpoch %d, SyncStateSet %s",
                    self.broker_id,
                    decision.master_epoch,
                    sorted(decision.sync_state_set),
                )
            elif isinstance(decision, roles.BecomeSlave):
                log.info(
                    "broker %d is SLAVE of %d (%s) at masterEpoch %d",
                    self.broker_id,
                    decision.master_broker_id,
                    decision.master_address,
                    decision.master_epoch,
                )
        if (
            self.sync is not None
            and self.role.role is roles.Role.MASTER
            and group.master_epoch == self.role.master_epoch
        ):
            self.sync.on_controller_view(group.sync_state_set, group.sync_state_set_epoch)
            self._shorten_takeover_hold(info.master_takeover_wait_ms)
        if self.register_state is rs.RegisterState.REGISTERED and self.role.confirmed:
            self.register_state = rs.RegisterState.RUNNING

    async def _carry_out(self: Broker, decision: roles.Decision, info: ReplicaInfo) -> None:
        match decision:
            case roles.BecomeMaster():
                await self._become_master(decision, info)
            case roles.BecomeSlave():
                await self._become_slave(decision)
            case roles.Fence(_, reason):
                log.warning("fenced: %s", reason)
                self._stop_writes(AckOutcome.NOT_MASTER)
                await self._stop_ha()
            case roles.SyncStateSetChanged():
                pass  # adopted after the loop via on_controller_view
            case roles.RequestElection():
                self._request_election()
            case roles.SetActingMaster(acting):
                log.info("acting master (read-only, RIP-32): %s", acting)

    def _stop_writes(self: Broker, outcome: AckOutcome) -> None:
        self._accepting_writes = False
        self._resolve(self.waiters.fail_all(outcome))

    async def _stop_ha(self: Broker) -> None:
        master, self.ha_master = self.ha_master, None
        self.sync = None
        if master is not None:
            await master.stop()
        slave, self.ha_slave = self.ha_slave, None
        task, self._ha_slave_task = self._ha_slave_task, None
        if slave is not None:
            await slave.stop()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, _STOP_TASK_TIMEOUT_S)

    async def _become_master(self: Broker, decision: roles.BecomeMaster, info: ReplicaInfo) -> None:
        assert self.broker_id is not None
        store = self._store()
        self._stop_writes(AckOutcome.NOT_MASTER)
        await self._stop_ha()
        store.truncate_partial_tail()
        last_epoch = store.epoch_file.last_epoch()
        if decision.master_epoch > last_epoch:
            store.epoch_file.begin_epoch(decision.master_epoch, store.max_offset)
        elif decision.master_epoch < last_epoch:
            raise StoreError(
                f"controller names broker {self.broker_id} master at masterEpoch "
                f"{decision.master_epoch}, but its epoch file already holds epoch {last_epoch}: "
                "the controller's data is older than this store"
            )
        # (An unchanged epoch never gets here: `_apply_info` asks for a new one.)
        found = store.epoch_file.find(decision.master_epoch)
        epoch_start = found[0].start_offset if found is not None else store.max_offset
        await self._pre_online_consumer_offsets(info)
        now = mono_ms()
        self._confirm_offset = min(self._confirm_offset, store.max_offset)
        self.sync = SyncStateSetManager(
            master_broker_id=self.broker_id,
            master_epoch=decision.master_epoch,
            epoch_start_offset=epoch_start,
            sync_state_set=decision.sync_state_set,
            sync_state_set_epoch=decision.sync_state_set_epoch,
            confirm_offset_floor=self._confirm_offset,
            master_since_ms=now,
            ha_max_time_slave_not_catch_up_ms=self.config.ha_max_time_slave_not_catch_up_ms,
        )
        master = HAMasterService(
            store,
            self._ha_config,
            master_epoch=decision.master_epoch,
            on_slave_ack=self._on_slave_ack,
            on_slave_disconnect=self._on_slave_disconnect,
            now_ms=mono_ms,
            registered_host=self._registered_host,
        )
        self._takeover_hold_until_ms = now + info.master_takeover_wait_ms
        if info.master_takeover_wait_ms > 0:
            log.warning(
                "the replaced master may hold its lease for %d ms more: holding "
                "acknowledgements until then (writes are taken and replicated meanwhile)",
                info.master_takeover_wait_ms,
            )
        await master.start(self.settings.bind_address, self.settings.ha_port)
        # Headers carry confirmOffset only on change: seed it, or slaves (and an
        # acting master among them) would serve nothing until the next write.
        master.set_confirm_offset(self._confirm_offset)
        self.ha_master = master
        self._release()

    async def _become_slave(self: Broker, decision: roles.BecomeSlave) -> None:
        assert self.broker_id is not None
        store = self._store()
        self._stop_writes(AckOutcome.NOT_MASTER)
        await self._stop_ha()
        store.truncate_partial_tail()
        # The handshake may truncate below what we confirmed before (an
        # unclean election): serve reads only from the new master's word.
        self._confirm_offset = 0
        slave = HASlaveService(
            store,
            self._ha_config,
            broker_id=self.broker_id,
            on_confirm_offset=self._on_master_confirm_offset,
        )
        self.ha_slave = slave
        self._ha_slave_task = asyncio.create_task(slave.run(ha_address_of(decision.master_address)))

    def _registered_host(self: Broker, broker_id: int) -> str | None:
        """Host the controller registered for `broker_id`, from its latest answer."""
        info = self._latest_info
        for b in info.brokers if info is not None else ():
            if b.broker_id == broker_id:
                return b.address.rsplit(":", 1)[0]
        return None

    def _restarted_at_same_epoch(self: Broker, decision: roles.BecomeMaster) -> bool:
        """A BecomeMaster for the epoch this store already wrote under: only after a
        process restart (a running broker changes role only for a higher epoch)."""
        epoch_file = self._store().epoch_file
        return epoch_file.last_entry() is not None and decision.master_epoch == (
            epoch_file.last_epoch()
        )

    def _request_election(self: Broker, *, designate: bool = False) -> None:
        now = mono_ms()
        if now - self._last_election_request_ms < self.config.heartbeat_interval_ms:
            return  # at most one request per heartbeat interval
        self._last_election_request_ms = now
        self._spawn(self._elect(designate=designate))

    async def _elect(self: Broker, *, designate: bool = False) -> None:
        assert self.broker_id is not None
        try:
            info = await asyncio.wait_for(
                self.controller.elect_master(self.broker_id, designate=designate),
                self.config.controller_request_timeout_ms / 1000,
            )
        except (ControllerUnavailable, TimeoutError) as exc:
            log.debug("election request failed: %s", exc)
            return
        except ControllerRefused as exc:
            log.info("election request refused: %s", exc)
            return
        self._offer_info(info, None)

    async def _pre_online_consumer_offsets(self: Broker, info: ReplicaInfo) -> None:
        """RIP-32 pre-online: before taking writes, merge newer consumer
        offsets from every live peer (an acting master may have moved them)."""
        peers = [
            b.address
            for b in info.brokers
            if b.alive and b.broker_id != self.broker_id and b.address
        ]
        if not peers:
            return
        snapshots = await asyncio.gather(*(self._fetch_consumer_offsets(a) for a in peers))
        offsets = self._store().consumer_offsets
        for snapshot in snapshots:
            if snapshot is not None and offsets.merge_newer(snapshot):
                log.info(
                    "took newer consumer offsets (version %s) before going online", snapshot.version
                )
