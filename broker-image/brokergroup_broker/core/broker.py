"""The broker process: ReplicasManager + RequestHandler (DESIGN.md §3, seed
controller-mode-design "ReplicasManager").

Theory of operation
-------------------
One asyncio loop owns everything; the pure machines decide, this module
acts. Start-up order:

1. open the store (recovery), start the HTTP side port (/healthz answers
   from the first second; /readyz stays 503 until the role is confirmed);
2. run the register-state machine (`registration.register`) to a BrokerId;
3. start the client protocol server (requests are refused FENCED until
   the role is confirmed) and the loops:

   - heartbeat: every heartbeatIntervalMs, epoch/maxOffset/confirmOffset/
     electionPriority/storeWritable; an answer renews the master lease (if
     it names us master at our epoch) and is offered to the role loop;
   - watch: a long-poll on the controller for fast pushes of new epochs;
   - role: takes the newest controller answer, asks `role.decide`, carries
     the decisions out one at a time (never two transitions at once);
   - sync-state (master): `SyncStateSetManager.decide` every
     syncStateSetCheckIntervalMs, AlterSyncStateSet for its proposal;
   - ticker: releases timed-out produce waiters, fences waiters when the
     lease lapses;
   - flush: `store.flush()` every flushIntervalMs (ASYNC_FLUSH durability,
     consume queue + checkpoint persistence), consumer offsets;
   - consumer-offset sync (slave): pull the master's offsets (RocketMQ's
     SlaveSynchronize) so a new master does not roll them back.

Role transitions (no process restart, §3.2/§3.4):
- become master: stop taking writes, stop the HA slave, truncate a partial
  tail, begin the new epoch in the epoch file at maxPhyOffset, take newer
  consumer offsets from live peers (RIP-32 pre-online), start the HA master
  service on client port + 1, then accept writes;
- become slave: stop taking writes (pending produces fail NOT_MASTER), stop
  the HA master, truncate a partial tail, run the HA slave against the
  master's client port + 1 (the HA handshake truncates to the common epoch);
- fence: stop taking writes and stop the HA master.

Produce path (one): `start_send_batch` — checks (role, lease, store,
admission) → `store.put_run` (the wire batch goes straight into the record
encoder; `send_messages` wraps `ProduceMessage`s into the same batch),
*before the first await* (keeps a connection's pipelined batches in order,
protocol/handler.py; on SYNC_FLUSH without an fdatasync: the store's
`GroupCommitService` thread syncs for every batch appended meanwhile, and the
commit rule counts this replica only up to `flushed_offset`) → `AckWaiters.add`
→ the waiter's callback (a future's for `send_messages`, the server's reply
for the fast path), which the HA ack callback, the group commit's "flushed"
callback or the ticker fires.

Clocks: `mono_ms` (monotonic) for leases, timeouts and HA progress;
`wall_ms` only for stored timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core import role as roles
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
from brokergroup_broker.core.http_status import StatusServer
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.registration import register
from brokergroup_broker.core.sync_state import (
    AlterProposal,
    ReplicaProgress,
    SyncStateSetManager,
)
from brokergroup_broker.ha import HAConfig, HAMasterService, HASlaveService
from brokergroup_broker.protocol.messages import (
    NO_CONSUMER_OFFSET,
    BrokerError,
    ErrorResponse,
    ProduceMessage,
    PulledMessage,
    PullResult,
    RequestCode,
    Response,
    ResponseCode,
    SendBatch,
    SendResult,
    SendRunResult,
    SentMessage,
)
from brokergroup_broker.protocol.server import BrokerProtocolServer, ServerConfig
from brokergroup_broker.store import (
    FlushDiskType,
    GroupCommitService,
    MessageStore,
    StoreConfig,
)
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetSnapshot
from brokergroup_broker.store.errors import (
    MessageInvalid,
    StoreBusy,
    StoreError,
    StoreNotWritable,
    TopicNotStorable,
)
from brokergroup_broker.store.identity import IdentityFiles
from brokergroup_broker.topics import topic_error
from brokergroup_controller.api import BrokerHeartbeat, ReplicaInfo

log = logging.getLogger(__name__)

# Bounded waits of the I/O shell that are not worth a config field.
_TICK_MS = 50
_PEER_HTTP_TIMEOUT_S = 0.5
_STOP_TASK_TIMEOUT_S = 3.0
_CONSUMER_OFFSET_SYNC_MS = 1000

_OUTCOME_CODES: dict[AckOutcome, ResponseCode] = {
    AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
    AckOutcome.SLAVE_TIMEOUT: ResponseCode.SLAVE_TIMEOUT,
    AckOutcome.SYSTEM_BUSY: ResponseCode.SYSTEM_BUSY,
    AckOutcome.FENCED: ResponseCode.FENCED,
    AckOutcome.NOT_MASTER: ResponseCode.NOT_MASTER,
}


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class BrokerSettings:
    """Command-line identity and addresses (docs/architecture.md, Commands)."""

    cluster_name: str
    broker_name: str
    data_dir: Path
    controller_addresses: tuple[str, ...]
    controller_token: str | None
    bind_address: str
    advertise_address: str
    client_port: int = 10911
    ha_secret: bytes | None = field(default=None, repr=False)
    """The group's HA secret (`--ha-secret-file`); None only with `--insecure-no-ha-auth`."""

    @property
    def own_host(self) -> str:
        """The address this broker's outgoing HA connections leave from."""
        if self.bind_address in ("0.0.0.0", "::", ""):
            return self.advertise_address
        return self.bind_address

    @property
    def address(self) -> str:
        """What the controller records: advertiseHost:clientPort."""
        return f"{self.advertise_address}:{self.client_port}"

    @property
    def ha_port(self) -> int:
        return self.client_port + 1

    @property
    def http_port(self) -> int:
        return self.client_port + 2


def ha_address_of(client_address: str) -> tuple[str, int]:
    host, _, port = client_address.rpartition(":")
    return host, int(port) + 1


def http_address_of(client_address: str) -> str:
    host, _, port = client_address.rpartition(":")
    return f"{host}:{int(port) + 2}"


def store_config_of(config: BrokerConfig) -> StoreConfig:
    return StoreConfig(
        commit_log_segment_bytes=config.mapped_file_size_commit_log,
        flush_disk_type=FlushDiskType(config.flush_disk_type),
        flush_interval_ms=config.flush_interval_ms,
        disk_full_ratio=config.disk_full_ratio,
        default_queue_count=config.default_topic_queue_nums,
        max_topics=config.max_topics,
        max_open_queue_files=config.max_open_queue_files,
    )


def ha_config_of(config: BrokerConfig) -> HAConfig:
    # The HA heartbeat refreshes an idle slave's lastCaughtUpTimeMs; keep it
    # well inside the shrink window and the read timeout above two of them.
    heartbeat_ms = max(10, min(500, config.ha_max_time_slave_not_catch_up_ms // 4))
    return HAConfig(
        heartbeat_interval_ms=heartbeat_ms,
        read_timeout_ms=max(3000, heartbeat_ms * 3),
        ha_max_time_slave_not_catch_up_ms=config.ha_max_time_slave_not_catch_up_ms,
    )


def group_view_of(info: ReplicaInfo) -> roles.GroupView:
    return roles.GroupView(
        master_broker_id=info.master_broker_id,
        master_address=info.master_address,
        master_alive=info.master_alive,
        master_epoch=info.master_epoch,
        sync_state_set=frozenset(info.sync_state_set),
        sync_state_set_epoch=info.sync_state_set_epoch,
        alive_broker_ids=frozenset(b.broker_id for b in info.brokers if b.alive),
    )


class Broker:
    """One broker process. `run()` until `request_stop()`."""

    def __init__(
        self,
        settings: BrokerSettings,
        config: BrokerConfig,
        controller: ControllerLink,
    ) -> None:
        self.settings = settings
        self.config = config
        self.controller = controller
        self.broker_id: int | None = None
        self.register_state = rs.RegisterState.INITIAL
        self.role = roles.RoleState()
        self.lease = MasterLease(config.master_lease_ms)
        # A new master holds its acknowledgements until the replaced master's
        # lease has surely run out (DESIGN.md §3.3 "Fencing"); the controller says how long.
        self._takeover_hold_until_ms = 0
        self.waiters = AckWaiters(
            CommitRuleConfig(
                all_ack_in_sync_state_set=config.all_ack_in_sync_state_set,
                in_sync_replicas=config.in_sync_replicas,
                min_in_sync_replicas=config.min_in_sync_replicas,
                slave_timeout_ms=config.slave_timeout_ms,
                max_pending_acks=config.max_pending_acks,
            )
        )
        self.store: MessageStore | None = None
        #: SYNC_FLUSH: fdatasyncs appended produces off the event loop (group commit).
        self._committer: GroupCommitService | None = None
        self.sync: SyncStateSetManager | None = None
        self.ha_master: HAMasterService | None = None
        self.ha_slave: HASlaveService | None = None
        self._ha_slave_task: asyncio.Task[None] | None = None
        self._ha_config = dataclasses.replace(
            ha_config_of(config), secret=settings.ha_secret, source_host=settings.own_host
        )
        self._accepting_writes = False
        self._confirm_offset = 0  # master: SyncStateSet confirmOffset; slave: from the master
        self._futures: dict[int, Callable[[AckOutcome], None]] = {}
        self._tokens = itertools.count(1)
        self._queue_cursor: dict[str, int] = {}
        self._latest_info: ReplicaInfo | None = None
        self._info_event = asyncio.Event()
        self._heartbeat_now = asyncio.Event()
        self._stopping = asyncio.Event()
        #: A loop died: the process exits non-zero so a supervisor restarts it.
        self.failed = False
        self._tasks: list[asyncio.Task[None]] = []
        self._last_election_request_ms = -(10**9)
        self._last_store_error: str | None = None
        self._server: BrokerProtocolServer | None = None
        self._http: StatusServer | None = None
        self._session: aiohttp.ClientSession | None = None

    # ================================================================ lifecycle

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        s = self.settings
        self.store = MessageStore.open(s.data_dir, store_config_of(self.config))
        self._confirm_offset = min(self.store.confirm_offset, self.store.max_offset)
        if self.store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            loop = asyncio.get_running_loop()

            def flushed(_offset: int) -> None:  # group commit thread
                with contextlib.suppress(RuntimeError):  # loop already closed
                    loop.call_soon_threadsafe(self._release)

            def failed(_exc: StoreError) -> None:  # group commit thread
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._heartbeat_now.set)

            self._committer = GroupCommitService(
                self.store, on_flushed=flushed, on_error=failed, name="broker-group-commit"
            )
            self._committer.start()
        self._session = aiohttp.ClientSession()
        self._http = StatusServer(self)
        try:
            await self._http.start(s.bind_address, s.http_port)
            machine = rs.RegisterMachine(s.cluster_name, s.broker_name)
            self.broker_id, info = await register(
                machine=machine,
                identity=IdentityFiles(s.data_dir),
                controller=self.controller,
                address=s.address,
                backoff_ms=self.config.controller_retry_backoff_ms,
                backoff_max_ms=self.config.controller_retry_backoff_max_ms,
                stopping=self._stopping,
                on_state=self._on_register_state,
            )
            self._on_register_state(machine.state)
            log.info(
                "broker %s/%s registered as BrokerId %d at %s",
                s.cluster_name,
                s.broker_name,
                self.broker_id,
                s.address,
            )
            self._server = BrokerProtocolServer(
                self,
                ServerConfig(
                    handler_timeout_ms=self.config.slave_timeout_ms * 2 + 1000,
                    max_frame_bytes=max(8 << 20, self.config.max_send_batch_messages * 4096),
                ),
            )
            await self._server.start(s.bind_address, s.client_port)
            self._offer_info(info, None)
            for coro in (
                self._heartbeat_loop(),
                self._watch_loop(),
                self._role_loop(),
                self._sync_state_loop(),
                self._ticker_loop(),
                self._flush_loop(),
                self._consumer_offset_sync_loop(),
            ):
                self._spawn(coro)
            await self._stopping.wait()
        finally:
            await self._shutdown()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(self._guard(coro))
        self._tasks.append(task)

    async def _guard(self, coro: Awaitable[None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception:
            # A loop dying silently would leave the broker half-alive: stop
            # the process instead; the supervisor/Kubernetes restarts it.
            log.exception("a broker loop failed; stopping the broker")
            self.failed = True
            self._stopping.set()

    async def _shutdown(self) -> None:
        log.info("broker %s stopping", self.broker_id)
        was_master = self.role.role is roles.Role.MASTER
        if self._server is not None:
            # Open produces get the server's grace period to be acknowledged.
            await self._server.stop()
        self._stop_writes(AckOutcome.NOT_MASTER)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=_STOP_TASK_TIMEOUT_S)
        if was_master and self.broker_id is not None:
            # Tell the controller now rather than after heartbeatTimeoutMs: a
            # rolling restart of the master then fails over at once.
            with contextlib.suppress(ControllerUnavailable, ControllerRefused):
                await asyncio.wait_for(
                    # It acknowledges nothing any more (writes stopped above): as
                    # good as gone, so the new master need not wait out our lease.
                    self.controller.report_inactive(
                        self.broker_id, "broker shutting down", process_gone=True
                    ),
                    self.config.controller_request_timeout_ms / 1000,
                )
        await self._stop_ha()
        if self._http is not None:
            await self._http.stop()
        if self._session is not None:
            await self._session.close()
        with contextlib.suppress(Exception):
            await self.controller.close()
        if self._committer is not None:
            await asyncio.to_thread(self._committer.stop)
        if self.store is not None:
            try:
                self.store.close()  # flushes log, queues, checkpoint, consumer offsets
            except (StoreError, OSError) as exc:
                log.error("final flush failed: %s", exc)
                self.store.close(flush=False)
        log.info("broker %s stopped", self.broker_id)

    def _on_register_state(self, state: rs.RegisterState) -> None:
        self.register_state = state

    # ================================================================ controller answers

    def _offer_info(self, info: ReplicaInfo, heartbeat_sent_ms: int | None) -> None:
        """A controller answer. Renew the lease at once (only heartbeats
        prove the leader counted us alive at ≥ their send time); hand the
        rest to the role loop, newest epoch first."""
        group = group_view_of(info)
        if (
            heartbeat_sent_ms is not None
            and self.broker_id is not None
            and roles.confirms_master(self.role, group, self.broker_id)
        ):
            self.lease.renew(heartbeat_sent_ms)
        latest = self._latest_info
        if latest is None or info.master_epoch >= latest.master_epoch:
            self._latest_info = info
            self._info_event.set()

    async def _heartbeat_loop(self) -> None:
        interval_s = self.config.heartbeat_interval_ms / 1000
        while True:
            sent = mono_ms()
            try:
                info = await asyncio.wait_for(
                    self.controller.heartbeat(self._heartbeat()),
                    self.config.controller_request_timeout_ms / 1000,
                )
            except (ControllerUnavailable, ControllerRefused, TimeoutError) as exc:
                log.debug("heartbeat failed: %s", exc)
            else:
                self._offer_info(info, sent)
            self._heartbeat_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval_s)

    def _heartbeat(self) -> BrokerHeartbeat:
        store = self._store()
        writable, error = self._store_health()
        assert self.broker_id is not None
        return BrokerHeartbeat(
            cluster_name=self.settings.cluster_name,
            broker_name=self.settings.broker_name,
            broker_id=self.broker_id,
            address=self.settings.address,
            epoch=store.epoch_file.last_epoch(),
            max_offset=store.max_offset,
            confirm_offset=self.confirm_offset(),
            election_priority=self.config.election_priority,
            heartbeat_timeout_ms=self.config.heartbeat_timeout_ms,
            store_writable=writable,
            store_error=error,
            master_lease_ms=self.config.master_lease_ms,
            all_ack_in_sync_state_set=self.config.all_ack_in_sync_state_set,
        )

    def _store_health(self) -> tuple[bool, str | None]:
        store = self._store()
        try:
            writable, reason = store.writable()
        except StoreError as exc:
            writable, reason = False, str(exc)
        if writable and self._last_store_error is not None:
            writable, reason = False, self._last_store_error
        return writable, reason

    async def _watch_loop(self) -> None:
        backoff_ms = self.config.controller_retry_backoff_ms
        while True:
            latest = self._latest_info
            master_epoch = self.role.master_epoch if latest is None else latest.master_epoch
            set_epoch = 0 if latest is None else latest.sync_state_set_epoch
            try:
                info = await asyncio.wait_for(
                    self.controller.watch(master_epoch, set_epoch, self.config.watch_timeout_ms),
                    self.config.watch_timeout_ms / 1000 + 2,
                )
            except (ControllerUnavailable, ControllerRefused, TimeoutError) as exc:
                log.debug("watch failed: %s", exc)
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms = min(self.config.controller_retry_backoff_max_ms, backoff_ms * 2)
                continue
            backoff_ms = self.config.controller_retry_backoff_ms
            self._offer_info(info, None)

    # ================================================================ role

    async def _role_loop(self) -> None:
        while True:
            await self._info_event.wait()
            self._info_event.clear()
            info = self._latest_info
            if info is not None:
                await self._apply_info(info)

    async def _apply_info(self, info: ReplicaInfo) -> None:
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

    async def _carry_out(self, decision: roles.Decision, info: ReplicaInfo) -> None:
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

    def _stop_writes(self, outcome: AckOutcome) -> None:
        self._accepting_writes = False
        self._resolve(self.waiters.fail_all(outcome))

    async def _stop_ha(self) -> None:
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

    async def _become_master(self, decision: roles.BecomeMaster, info: ReplicaInfo) -> None:
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

    async def _become_slave(self, decision: roles.BecomeSlave) -> None:
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

    def _registered_host(self, broker_id: int) -> str | None:
        """Host the controller registered for `broker_id`, from its latest answer."""
        info = self._latest_info
        for b in info.brokers if info is not None else ():
            if b.broker_id == broker_id:
                return b.address.rsplit(":", 1)[0]
        return None

    def _restarted_at_same_epoch(self, decision: roles.BecomeMaster) -> bool:
        """A BecomeMaster for the epoch this store already wrote under: only after a
        process restart (a running broker changes role only for a higher epoch)."""
        epoch_file = self._store().epoch_file
        return epoch_file.last_entry() is not None and decision.master_epoch == (
            epoch_file.last_epoch()
        )

    def _request_election(self, *, designate: bool = False) -> None:
        now = mono_ms()
        if now - self._last_election_request_ms < self.config.heartbeat_interval_ms:
            return  # at most one request per heartbeat interval
        self._last_election_request_ms = now
        self._spawn(self._elect(designate=designate))

    async def _elect(self, *, designate: bool = False) -> None:
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

    # ================================================================ SyncStateSet

    def _progress(self) -> dict[int, ReplicaProgress]:
        if self.ha_master is None:
            return {}
        # Async learners replicate but never join the SyncStateSet.
        return {
            broker_id: ReplicaProgress(max(0, p.ack_offset), p.last_caught_up_ms, p.connected)
            for broker_id, p in self.ha_master.slaves().items()
            if not p.is_async_learner
        }

    def _master_own_offset(self) -> int:
        """The master's own "ack": what it holds durably per the flush policy."""
        store = self._store()
        if store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            return min(store.flushed_offset, store.last_record_end)
        return store.last_record_end

    def _view(self) -> ReplicationView:
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

    def _on_slave_ack(self, broker_id: int, ack_offset: int) -> None:
        self._release()

    def _on_slave_disconnect(self, broker_id: int) -> None:
        log.info("slave %d disconnected", broker_id)
        self._release()

    def _on_master_confirm_offset(self, offset: int) -> None:
        store = self.store
        if store is None:
            return
        confirm = min(offset, store.max_offset)
        if confirm > self._confirm_offset:
            self._confirm_offset = confirm
            store.set_confirm_offset(confirm)

    def _shorten_takeover_hold(self, wait_ms: int) -> None:
        """A later answer may end the hold early (the controller learned the
        old master is certainly gone); it never extends it."""
        now = mono_ms()
        if self._takeover_hold_until_ms > now + wait_ms:
            self._takeover_hold_until_ms = now + wait_ms
            self._release()

    def _release(self) -> None:
        if self.sync is None or not self._accepting_writes:
            return
        now = mono_ms()
        if now < self._takeover_hold_until_ms:
            return  # the replaced master may still acknowledge: the ticker releases later
        view = self._view()
        if not self.lease.valid(now):
            return  # hold: the ticker fences them, or a renewed lease releases them
        self._resolve(self.waiters.progress(view, now))

    def _resolve(self, released: Sequence[tuple[int, AckOutcome]]) -> None:
        for token, outcome in released:
            on_outcome = self._futures.pop(token, None)
            if on_outcome is not None:
                on_outcome(outcome)

    async def _sync_state_loop(self) -> None:
        interval_s = self.config.sync_state_set_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            sync = self.sync
            if sync is None or self.role.role is not roles.Role.MASTER or self.store is None:
                continue
            proposal = sync.decide(mono_ms(), self._master_own_offset(), self._progress())
            if proposal is not None:
                await self._alter(sync, proposal)

    async def _alter(self, sync: SyncStateSetManager, proposal: AlterProposal) -> None:
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
            if exc.code in _OUTCOME_UNKNOWN_CODES:
                log.warning(
                    "AlterSyncStateSet %s: outcome unknown (%s); counting its members until "
                    "the controller's syncStateSetEpoch moves",
                    sorted(proposal.new_set), exc,
                )  # fmt: skip
                sync.on_alter_unknown(proposal)
            else:
                log.info("AlterSyncStateSet %s refused: %s", sorted(proposal.new_set), exc)
                sync.on_alter_refused(proposal)
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

    # ================================================================ housekeeping loops

    async def _ticker_loop(self) -> None:
        while True:
            await asyncio.sleep(_TICK_MS / 1000)
            if len(self.waiters) == 0:
                continue
            now = mono_ms()
            if not self.lease.valid(now):
                self._resolve(self.waiters.fail_all(AckOutcome.FENCED))
            else:
                self._release()  # acks that arrived without a callback, and timeouts

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            try:
                # Also persists consume queues, the checkpoint (confirmOffset)
                # and dirty consumer offsets.
                self._store().flush()
            except (StoreError, OSError) as exc:
                log.error("flush failed: %s", exc)
                self._last_store_error = f"{type(exc).__name__}: {exc}"

    async def _consumer_offset_sync_loop(self) -> None:
        """Slaves copy the master's consumer offsets (newer versions only)."""
        while True:
            await asyncio.sleep(_CONSUMER_OFFSET_SYNC_MS / 1000)
            if self.role.role is roles.Role.SLAVE and self.role.master_address:
                snapshot = await self._fetch_consumer_offsets(self.role.master_address)
                if snapshot is not None:
                    self._store().consumer_offsets.merge_newer(snapshot)

    async def _fetch_consumer_offsets(self, client_address: str) -> ConsumerOffsetSnapshot | None:
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

    async def _pre_online_consumer_offsets(self, info: ReplicaInfo) -> None:
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

    # ================================================================ RequestHandler

    def _store(self) -> MessageStore:
        assert self.store is not None, "store not open"
        return self.store

    def _master_hint(self) -> str | None:
        return self.role.master_address

    def _require_master_for_write(self) -> None:
        if self.role.acting_master:
            raise BrokerError(
                ResponseCode.READ_ONLY,
                f"broker {self.broker_id} is acting master (read-only, RIP-32): the group has "
                "no master; writes resume once the controller elects one",
            )
        if self.role.role is roles.Role.SLAVE:
            raise BrokerError(
                ResponseCode.NOT_MASTER,
                f"broker {self.broker_id} is a slave at masterEpoch {self.role.master_epoch}",
                master_address=self._master_hint(),
            )
        if self.role.role is not roles.Role.MASTER or not self._accepting_writes:
            raise BrokerError(
                ResponseCode.FENCED,
                f"broker {self.broker_id} has no confirmed role yet "
                f"(role {self.role.role}, masterEpoch {self.role.master_epoch})",
            )

    def _require_readable(self) -> None:
        if self.role.role is roles.Role.FENCED and not self.role.acting_master:
            raise BrokerError(
                ResponseCode.FENCED,
                f"broker {self.broker_id} is fenced: its role is not confirmed "
                f"(masterEpoch {self.role.master_epoch})",
            )

    def _require_master_reads(self) -> None:
        """Offset queries and consumer offsets: the master or an acting master."""
        self._require_readable()
        if self.role.role is roles.Role.SLAVE and not self.role.acting_master:
            raise BrokerError(
                ResponseCode.NOT_MASTER,
                f"broker {self.broker_id} is a slave; ask the master",
                master_address=self._master_hint(),
            )

    def confirm_offset(self) -> int:
        store = self.store
        if store is None:
            return 0
        return min(self._confirm_offset, store.max_offset)

    def _check_send(self, count: int) -> int:
        """The checks before a produce appends (role, size, lease, store, admission);
        raises BrokerError; returns now (mono ms)."""
        self._require_master_for_write()
        if count < 1:
            raise BrokerError(ResponseCode.BAD_REQUEST, "a produce needs at least one message")
        if count > self.config.max_send_batch_messages:
            raise BrokerError(
                ResponseCode.BAD_REQUEST,
                f"{count} messages in one batch; maxSendBatchMessages is "
                f"{self.config.max_send_batch_messages}",
            )
        now = mono_ms()
        if not self.lease.valid(now):
            raise BrokerError(
                ResponseCode.FENCED,
                f"master {self.broker_id} at masterEpoch {self.role.master_epoch} has had no "
                f"controller heartbeat answer for masterLeaseMs {self.config.master_lease_ms}: "
                "not acknowledging writes until the controller confirms it",
            )
        writable, reason = self._store_health()
        if not writable:
            raise BrokerError(
                ResponseCode.STORE_NOT_WRITABLE,
                f"broker {self.broker_id} store is not writable: {reason}",
            )
        view = self._view()
        refusal = self.waiters.admit(view)
        if refusal is not None:
            raise BrokerError(_OUTCOME_CODES[refusal], self._refusal_text(refusal, view))
        return now

    def _appended(
        self, end_offset: int, now: int, on_outcome: Callable[[AckOutcome], None]
    ) -> None:
        """After an append ending at `end_offset`: wake the group commit thread and the
        HA senders, then call `on_outcome` once the commit rule decides (maybe now)."""
        committer = self._committer
        if committer is not None:
            committer.request(end_offset)
        if self.ha_master is not None:
            self.ha_master.notify_appended()
        token = next(self._tokens)
        outcome = self.waiters.add(token, end_offset, now, self._view())
        if outcome is not None:
            on_outcome(outcome)
            return
        self._futures[token] = on_outcome
        self._release()

    def _outcome_error(self, outcome: AckOutcome) -> BrokerError:
        return BrokerError(
            _OUTCOME_CODES[outcome],
            self._refusal_text(outcome, self._view()),
            master_address=self._master_hint(),
        )

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None:
        """The produce fast path (protocol server, `SendBatch` from the wire): the same
        checks, order and commit rule as `send_messages`, without per-message objects.
        Appends synchronously (so a connection's batches keep their order); `reply` is
        called once, now or when the commit rule decides. Raises BrokerError to refuse
        before anything is appended."""
        _require_valid_topic(batch.topic)
        now = self._check_send(len(batch))
        store = self._store()
        chosen = self._choose_queue(batch.topic, batch.queue_id)
        host = (self.settings.advertise_address, self.settings.client_port)
        born = wall_ms()
        committer = self._committer
        try:
            run = store.put_run(
                batch.topic,
                chosen,
                batch.bodies,
                batch.store_properties(),
                store_host=host,
                born_host=host,
                now_ms=born,
                flush=False if committer is not None else None,
            )
        except TopicNotStorable as exc:
            raise BrokerError(ResponseCode.TOPIC_INVALID, str(exc)) from exc
        except MessageInvalid as exc:
            raise BrokerError(ResponseCode.BAD_REQUEST, str(exc)) from exc
        except StoreBusy as exc:
            raise BrokerError(ResponseCode.SYSTEM_BUSY, str(exc)) from exc
        except StoreNotWritable as exc:
            self._heartbeat_now.set()
            raise BrokerError(ResponseCode.STORE_NOT_WRITABLE, str(exc)) from exc
        result = SendRunResult(
            chosen, run.first_queue_offset, run.physical_offsets, self.role.master_epoch
        )

        def on_outcome(outcome: AckOutcome) -> None:
            if outcome is AckOutcome.ACKED:
                reply(result)
                return
            err = self._outcome_error(outcome)
            reply(
                ErrorResponse(RequestCode.SEND_MESSAGES, err.code, err.message, err.master_address)
            )

        self._appended(run.end_offset, now, on_outcome)

    async def send_messages(
        self, topic: str, queue_id: int | None, messages: Sequence[ProduceMessage]
    ) -> SendResult:
        """`ProduceMessage`s through the one produce path (`start_send_batch`)."""
        for name in {m.topic for m in messages if m.topic} - {topic}:
            raise BrokerError(
                ResponseCode.BAD_REQUEST,
                f"a send request is for one topic: {topic!r}, not also {name!r}",
            )
        extras = [
            (m.key, m.tags, m.properties) if m.properties or m.key is not None or m.tags is not None
            else None
            for m in messages
        ]  # fmt: skip
        batch = SendBatch(
            topic, queue_id, [m.body for m in messages], extras if any(extras) else None
        )
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def reply(response: Response) -> None:
            if not future.done():
                future.set_result(response)

        self.start_send_batch(batch, reply)
        response = await future
        if isinstance(response, ErrorResponse):
            raise response.to_error()
        assert isinstance(response, SendRunResult)
        return SendResult(
            messages=tuple(
                SentMessage(response.queue_id, response.first_queue_offset + i, phys)
                for i, phys in enumerate(response.physical_offsets)
            ),
            master_epoch=response.master_epoch,
        )

    def _refusal_text(self, outcome: AckOutcome, view: ReplicationView) -> str:
        sync = self.sync
        members = sorted(sync.effective_set()) if sync is not None else []
        match outcome:
            case AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH:
                return (
                    f"SyncStateSet {members} has {view.in_sync_count} in-sync replicas, "
                    f"minInSyncReplicas is {self.config.min_in_sync_replicas}"
                )
            case AckOutcome.SLAVE_TIMEOUT:
                return (
                    f"not acknowledged by SyncStateSet {members} within slaveTimeoutMs "
                    f"{self.config.slave_timeout_ms} (confirmOffset {view.confirm_offset}); "
                    "the message may still be stored"
                )
            case AckOutcome.SYSTEM_BUSY:
                return (
                    f"{len(self.waiters)} produces wait for replication (maxPendingAcks "
                    f"{self.config.max_pending_acks}); retry later"
                )
            case AckOutcome.FENCED:
                return (
                    f"master {self.broker_id} lost its lease (masterLeaseMs "
                    f"{self.config.master_lease_ms}) before replication finished"
                )
            case _:
                return f"broker {self.broker_id} is no longer master"

    def _choose_queue(self, topic: str, queue_id: int | None) -> int:
        count = self._store().queue_count(topic) or self.config.default_topic_queue_nums
        if queue_id is not None and queue_id >= 0:
            if queue_id >= count:
                raise BrokerError(
                    ResponseCode.BAD_REQUEST,
                    f"topic {topic} has {count} queues; queue {queue_id} does not exist",
                )
            return queue_id
        cursor = self._queue_cursor.get(topic, 0)
        self._queue_cursor[topic] = cursor + 1
        return cursor % count

    async def pull_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        _require_valid_topic(topic)
        self._require_readable()
        store = self._store()
        confirm = self.confirm_offset()
        low, high = store.queue_offset_range(topic, queue_id, confirm)
        if queue_offset < low:
            return PullResult((), low, low, high)
        limit = max(1, min(max_count, self.config.max_pull_messages))
        stored = store.get_messages(topic, queue_id, queue_offset, limit, confirm)
        pulled = tuple(
            PulledMessage(
                topic=m.topic,
                queue_id=m.queue_id,
                queue_offset=m.queue_offset,
                physical_offset=m.physical_offset,
                body=bytes(m.body),
                properties=dict(m.properties),
                born_timestamp_ms=m.born_timestamp_ms,
                store_timestamp_ms=m.store_timestamp_ms,
                body_crc=m.body_crc,
                flag=m.flag,
            )
            for m in stored
        )
        next_offset = pulled[-1].queue_offset + 1 if pulled else queue_offset
        return PullResult(pulled, next_offset, low, high)

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        _require_valid_topic(topic)
        self._require_master_reads()
        # Max is what a consumer can read: records up to confirmOffset.
        return self._store().queue_offset_range(topic, queue_id, self.confirm_offset())

    async def topic_queue_count(self, topic: str) -> int:
        _require_valid_topic(topic)
        self._require_readable()
        count = self._store().queue_count(topic)
        if count == 0:
            raise BrokerError(ResponseCode.TOPIC_NOT_FOUND, f"topic {topic} has no queues here")
        return count

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        _require_valid_topic(topic)
        self._require_master_reads()  # the master, or an acting master (RIP-32)
        self._store().consumer_offsets.commit(group, topic, queue_id, offset, wall_ms())

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        _require_valid_topic(topic)
        self._require_master_reads()
        found = self._store().consumer_offsets.get(group, topic, queue_id)
        return NO_CONSUMER_OFFSET if found is None else found

    # ================================================================ HTTP status

    def status(self) -> dict[str, Any]:
        store = self.store
        sync = self.sync
        writable, error = self._store_health() if store is not None else (False, "not open")
        now = mono_ms()
        return {
            "brokerId": self.broker_id,
            "clusterName": self.settings.cluster_name,
            "brokerName": self.settings.broker_name,
            "address": self.settings.address,
            "role": self.role.role.value,
            "actingMaster": self.role.acting_master,
            "masterEpoch": self.role.master_epoch,
            "masterBrokerId": self.broker_id
            if self.role.role is roles.Role.MASTER
            else self.role.master_broker_id,
            "masterAddress": self.settings.address
            if self.role.role is roles.Role.MASTER
            else self.role.master_address,
            "maxOffset": None if store is None else store.max_offset,
            "minOffset": None if store is None else store.min_offset,
            "confirmOffset": self.confirm_offset(),
            "epoch": None if store is None else store.epoch_file.last_epoch(),
            "syncStateSet": sorted(sync.sync_state_set) if sync is not None else [],
            "syncStateSetEpoch": sync.sync_state_set_epoch if sync is not None else None,
            "pendingSyncStateSet": sorted(sync.pending.new_set)
            if sync is not None and sync.pending is not None
            else None,
            "slaves": {
                str(k): {
                    "ackOffset": p.ack_offset,
                    "connected": p.connected,
                    "lastCaughtUpAgoMs": now - p.last_caught_up_ms,
                }
                for k, p in self._progress().items()
            },
            "fenced": not self.role.confirmed and not self.role.acting_master,
            "leaseRemainingMs": self.lease.remaining_ms(now)
            if self.role.role is roles.Role.MASTER
            else None,
            "takeoverHoldRemainingMs": max(0, self._takeover_hold_until_ms - now)
            if self.role.role is roles.Role.MASTER
            else None,
            "pendingAcks": len(self.waiters),
            "registerState": self.register_state.value,
            "storeWritable": writable,
            "storeError": error,
        }

    def readiness(self) -> tuple[bool, list[str]]:
        problems: list[str] = []
        if not self.role.confirmed:
            problems.append(f"role not confirmed (register state {self.register_state})")
        store = self.store
        if store is None:
            problems.append("store not open")
        else:
            writable, error = self._store_health()
            if not writable:
                problems.append(f"store not writable: {error}")
            try:
                ratio = store.disk_usage_ratio()
            except OSError as exc:
                problems.append(f"disk usage unknown: {exc}")
            else:
                if ratio >= self.config.disk_full_ratio:
                    problems.append(
                        f"disk {ratio:.1%} used, diskFullRatio {self.config.disk_full_ratio:.0%}"
                    )
        return not problems, problems

    def consumer_offsets_snapshot(self) -> dict[str, Any]:
        store = self.store
        if store is None:
            return ConsumerOffsetSnapshot.from_json({}).to_json()
        return store.consumer_offsets.snapshot().to_json()


#: Controller answers after which an AlterSyncStateSet may still have been applied.
_OUTCOME_UNKNOWN_CODES = frozenset({"COMMIT_TIMEOUT", "NOT_LEADER", "UNAVAILABLE"})


def _require_valid_topic(topic: str) -> None:
    """Every request that names a topic checks it first (DESIGN.md §3.4b)."""
    error = topic_error(topic)
    if error is not None:
        raise BrokerError(ResponseCode.TOPIC_INVALID, error)
