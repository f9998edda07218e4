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
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp

from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    _STOP_TASK_TIMEOUT_S,
    BrokerSettings,
    group_view_of,
    ha_config_of,
    mono_ms,
    store_config_of,
)
from brokergroup_broker.core.commit_rule import (
    AckOutcome,
    AckWaiters,
    CommitRuleConfig,
)
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import (
    ControllerLink,
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.core.http_status import StatusServer
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.produce import RequestHandling
from brokergroup_broker.core.registration import register
from brokergroup_broker.core.replication_wiring import ReplicationWiring
from brokergroup_broker.core.role_transitions import RoleTransitions
from brokergroup_broker.core.sync_state import (
    SyncStateSetManager,
)
from brokergroup_broker.ha import HAMasterService, HASlaveService
from brokergroup_broker.protocol.server import BrokerProtocolServer, ServerConfig
from brokergroup_broker.store import (
    FlushDiskType,
    GroupCommitService,
    MessageStore,
)
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetSnapshot
from brokergroup_broker.store.errors import (
    StoreError,
)
from brokergroup_broker.store.identity import IdentityFiles
from brokergroup_controller.api import BrokerHeartbeat, ReplicaInfo

log = logging.getLogger(__name__)


class Broker(RoleTransitions, ReplicationWiring, RequestHandling):
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
        # Set when a SyncStateSet member drops or a slave catches up: decide now, not next tick.
        self._sync_state_wake = asyncio.Event()
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
                        self.broker_id,
                        "broker shutting down",
                        process_gone=True,
                        incarnation=self.settings.incarnation,
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
            incarnation=self.settings.incarnation,
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

    # ================================================================ SyncStateSet

    # ================================================================ housekeeping loops

    # ================================================================ RequestHandler

    def _store(self) -> MessageStore:
        assert self.store is not None, "store not open"
        return self.store

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
