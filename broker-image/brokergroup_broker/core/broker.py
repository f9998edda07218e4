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

Components (each owns its state; wired once in `_wire`, after registration):

- `RoleCore` (role_core): role, masterEpoch, register state, whether writes are
  taken; pure.
- `ControllerSession` (controller_session): heartbeats, watch, elections, the
  newest controller answer; renews the `MasterLease`.
- `RoleTransitions` (role_transitions): carries the role core's decisions out.
- `ReplicationLink` (replication): HA master/slave, SyncStateSet, confirmOffset,
  the produces waiting for the commit rule, the takeover hold.
- `ProducePath` (produce): the one produce/pull path every front end calls.
- `PeerOffsets` (peer_offsets) with `PeerMetadata` (peer_metadata), `StoreFaults`
  (store_faults).
- `BrokerMetadata` (metadata/): the topic and subscription-group tables, opened with the
  store, replicated like the consumer offsets.

Produce path (one): `ProducePath.start_send_batch` — checks (role, lease, store,
admission) → `store.put_run` (the wire batch goes straight into the record
encoder; `send_messages` wraps `ProduceMessage`s into the same batch),
*before the first await* (keeps a connection's pipelined batches in order,
protocol/handler.py; on SYNC_FLUSH without an fdatasync: the store's
`GroupCommitService` thread syncs for every batch appended meanwhile, and the
commit rule counts this replica only up to `flushed_offset`) →
`ReplicationLink.wait_for_ack` → the waiter's callback (a future's for
`send_messages`, the server's reply for the fast path), which the HA ack
callback, the group commit's "flushed" callback or the ticker fires.

Clocks: `mono_ms` (monotonic) for leases, timeouts and HA progress;
`wall_ms` only for stored timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.core import metrics
from brokergroup_broker.core import register_state as rs
from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker_settings import (
    STOP_TASK_TIMEOUT_S,
    BrokerSettings,
    ha_config_of,
    mono_ms,
    remoting_auth_of,
    store_config_of,
    wall_ms,
)
from brokergroup_broker.core.commit_rule import AckOutcome
from brokergroup_broker.core.config import BrokerConfig, BrokerConfigError
from brokergroup_broker.core.controller_link import (
    ControllerLink,
    ControllerRefused,
    ControllerUnavailable,
)
from brokergroup_broker.core.controller_session import ControllerSession
from brokergroup_broker.core.http_status import StatusServer, bearer_header
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.peer_http import PeerHttp
from brokergroup_broker.core.peer_metadata import PeerMetadata
from brokergroup_broker.core.peer_offsets import PeerOffsets
from brokergroup_broker.core.produce import ProducePath
from brokergroup_broker.core.registration import register
from brokergroup_broker.core.remoting_keys import client_port_auth
from brokergroup_broker.core.replication import ReplicationLink
from brokergroup_broker.core.retention_service import RetentionService, retention_floor_of
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.core.role_transitions import RoleTransitions
from brokergroup_broker.core.store_faults import StoreFaults
from brokergroup_broker.core.users import DEFAULT_REFRESH_INTERVAL_S, BrokerUsers, with_users
from brokergroup_broker.grpc_front import GrpcFrontServer, GrpcSettings, MessagingService
from brokergroup_broker.grpc_front.consumption import PopConsumption, orderly_of
from brokergroup_broker.grpc_front.server import SignatureCheck
from brokergroup_broker.grpc_front.users import UserAuthorization
from brokergroup_broker.metadata import BrokerMetadata
from brokergroup_broker.pop.service import PopService
from brokergroup_broker.protocol.server import BrokerProtocolServer, ServerConfig
from brokergroup_broker.remoting_front import (
    FrontSettings,
    NameServerLink,
    Registration,
    RemotingFront,
    RemotingFrontServer,
)
from brokergroup_broker.schedule.admission import ScheduledSends
from brokergroup_broker.schedule.rules import SCHEDULE_TOPIC, ScheduleRules, parse_delay_levels
from brokergroup_broker.schedule.service import ScheduleService
from brokergroup_broker.store import FlushDiskType, LoopGroupCommit, MessageStore
from brokergroup_broker.store.consumer_offsets import ConsumerOffsetSnapshot
from brokergroup_broker.store.errors import StoreError
from brokergroup_broker.store.identity import IdentityFiles
from brokergroup_broker.transaction.rules import TransactionRules
from brokergroup_broker.transaction.service import TransactionService
from brokergroup_controller.api import BrokerHeartbeat
from brokergroup_remoting.tls import run_reloader

log = logging.getLogger(__name__)

#: Environment switch for the periodic flush off the event loop (off by default until
#: the chaos evidence for it is in: docs/performance.md "The periodic flush").
FLUSH_OFF_LOOP_ENV = "BROKERGROUP_FLUSH_OFF_LOOP"


def flush_off_loop_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """BROKERGROUP_FLUSH_OFF_LOOP: 1/true on, 0/false/unset off; anything else refused."""
    value = environ.get(FLUSH_OFF_LOOP_ENV, "").strip().lower()
    if value in ("", "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise BrokerConfigError(f"{FLUSH_OFF_LOOP_ENV} must be 1, true, 0 or false, not {value!r}")


def schedule_rules_of(config: BrokerConfig) -> ScheduleRules:
    """Scheduled and timer messages' settings (docs/scheduled-messages.md)."""
    return ScheduleRules(
        delay_levels_ms=parse_delay_levels(config.message_delay_level),
        timer_max_delay_ms=config.timer_max_delay_sec * 1000,
        timer_max_pending=config.timer_max_pending,
    )


def transaction_rules_of(config: BrokerConfig) -> TransactionRules:
    """Transactional messages' settings (docs/transactions.md)."""
    return TransactionRules(
        timeout_ms=config.transaction_time_out,
        check_interval_ms=config.transaction_check_interval,
        check_max=config.transaction_check_max,
    )


@dataclass(frozen=True)
class BrokerParts:
    """The components of a registered broker, wired once (`Broker._wire`)."""

    broker_id: int
    store: MessageStore
    session: ControllerSession
    replication: ReplicationLink
    transitions: RoleTransitions
    produce: ProducePath
    peers: PeerOffsets
    schedule: ScheduleService
    pop: PopService


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
        self.users = BrokerUsers()
        self.role = RoleCore()
        self.lease = MasterLease(config.master_lease_ms)
        self.faults = StoreFaults()
        self._ha_config = dataclasses.replace(
            ha_config_of(config),
            secret=settings.ha_secret,
            source_host=settings.own_host,
            tls_server=settings.ha_tls_server,
            tls_client=settings.ha_tls_client,
            tls_server_name=settings.ha_tls_server_name,
        )
        self.store: MessageStore | None = None
        self.metadata: BrokerMetadata | None = None
        #: SYNC_FLUSH: fdatasyncs appended produces off the event loop (group commit).
        self._committer: LoopGroupCommit | None = None
        self.parts: BrokerParts | None = None
        self._stopping = asyncio.Event()
        #: A loop died: the process exits non-zero so a supervisor restarts it.
        self.failed = False
        self._tasks: list[asyncio.Task[None]] = []
        #: The periodic flush's fdatasyncs in a worker thread instead of on the loop
        #: (issue 38; docs/performance.md "The periodic flush"): BROKERGROUP_FLUSH_OFF_LOOP=1.
        self._flush_off_loop = flush_off_loop_from_env()
        #: The worker-thread half of a periodic flush still running.
        self._flush_in_thread: asyncio.Future[int] | None = None
        self._server: BrokerProtocolServer | None = None
        self._http: StatusServer | None = None
        self._remoting: RemotingFrontServer | None = None
        #: Half messages, END_TRANSACTION and check-back (made by `_wire`).
        self.transactions: TransactionService | None = None
        self._grpc: GrpcFrontServer | None = None
        self._namesrv_link: NameServerLink | None = None
        self._session: aiohttp.ClientSession | None = None
        #: The put/get counters every front end feeds (docs/metrics.md), and /metrics.
        self.stats = BrokerStats(wall_ms, cluster_name=settings.cluster_name)
        self.metrics = metrics.registry_of(
            metrics.BrokerCollector(
                self._metric_facts,
                lambda: self.stats,
                lambda: None if self.parts is None else self.parts.produce.commit_rounds,
            )
        )

    # ================================================================ lifecycle

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        s = self.settings
        self.store = store = MessageStore.open(s.data_dir, store_config_of(self.config))
        self.metadata = self._open_metadata(store)
        if store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._committer = LoopGroupCommit(
                store,
                loop=asyncio.get_running_loop(),
                on_flushed=lambda _offset: self._release(),
                on_error=lambda _exc: self._heartbeat_now(),
                name="broker-group-commit",
            )
            self._committer.start()
        # The group's broker credential: peers' /v1/consumer-offsets need it (http_status).
        self._session = aiohttp.ClientSession(headers=bearer_header(s.controller_token))
        peers = PeerHttp(self._session, s.http_tls_client, s.ha_tls_server_name)
        self._http = StatusServer(self, token=s.controller_token)
        try:
            await self._http.start(s.bind_address, s.http_port, tls=s.http_tls)
            machine = rs.RegisterMachine(s.cluster_name, s.broker_name)
            broker_id, info = await register(
                machine=machine,
                identity=IdentityFiles(s.data_dir),
                controller=self.controller,
                address=s.address,
                backoff_ms=self.config.controller_retry_backoff_ms,
                backoff_max_ms=self.config.controller_retry_backoff_max_ms,
                stopping=self._stopping,
                on_state=self.role.on_register_state,
            )
            self.role.on_register_state(machine.state)
            log.info(
                "broker %s/%s registered as BrokerId %d at %s",
                s.cluster_name,
                s.broker_name,
                broker_id,
                s.address,
            )
            parts = self._wire(broker_id, store, peers)
            retention = RetentionService(
                store=store, config=self.config, role=self.role, session=peers
            )
            parts.peers.floor_pre_online = retention.pre_online
            self._server = BrokerProtocolServer(
                parts.produce,
                ServerConfig(
                    handler_timeout_ms=self.config.slave_timeout_ms * 2 + 1000,
                    # Bytes bound a batch, not its count (maxSendBatchMessages only bounds
                    # the work per request): 4 MiB of bodies with their framing.
                    max_frame_bytes=8 << 20,
                ),
                auth=client_port_auth(
                    s.remoting_credentials,
                    s.remoting_client_credentials,
                    (s.cluster_name, s.broker_name),
                ),
                tls=s.client_tls,
            )
            await self._server.start(s.bind_address, s.client_port)
            if s.remoting_port is not None:
                await self._start_remoting(parts)
            parts.session.offer(info, None)
            for coro in (
                parts.session.heartbeat_loop(),
                parts.session.watch_loop(),
                parts.transitions.run(),
                parts.replication.sync_state_loop(),
                parts.replication.ticker_loop(),
                self._flush_loop(store),
                parts.peers.slave_sync_loop(),
                retention.run(),
                retention.follow_master_loop(),
                parts.schedule.run(),
                self._transaction_service().run(),
                parts.pop.run(),
                run_reloader(),
            ):
                self._spawn(coro)
            await self._stopping.wait()
        finally:
            await self._shutdown()

    def _open_metadata(self, store: MessageStore) -> BrokerMetadata:
        """The topic and subscription-group tables (config/topics.json, …). A store
        written before they existed has no topics file: its topics become configs now."""
        metadata = BrokerMetadata(self.settings.data_dir)
        if not metadata.had_topics_file:
            metadata.adopt_store_topics(self._store_topics(store), wall_ms())
        metadata.on_topics_changed(self._role_changed)
        return metadata

    def _write_queue_nums(self, topic: str) -> int | None:
        """The topic's writeQueueNums when it has a config (mqadmin updateTopic -w)."""
        config = None if self.metadata is None else self.metadata.topics.get(topic)
        return None if config is None else config.write_queue_nums

    def _store_topics(self, store: MessageStore) -> dict[str, int]:
        default = self.config.default_topic_queue_nums
        return {t: max(n, default) for t, n in store.queues.topics().items()}

    async def _start_remoting(self, parts: BrokerParts) -> None:
        """The RocketMQ remoting port over the same produce path, and its name server link."""
        s, config = self.settings, self.config
        assert s.remoting_port is not None
        front = RemotingFront(
            parts.produce,
            FrontSettings(
                cluster_name=s.cluster_name,
                broker_name=s.broker_name,
                store_host=s.store_host,
                auto_create_topic=config.auto_create_topic_enable,
                default_queue_nums=config.default_topic_queue_nums,
                enable_property_filter=config.enable_property_filter,
                max_message_size=parts.store.config.max_message_bytes,
                region_id=config.region_id,
                trace_on=config.trace_on,
                trace_topic=config.msg_trace_topic_name if config.trace_topic_enable else None,
                store_reply_message=config.store_reply_message_enable,
            ),
            on_new_topic=self._topics_changed,
            on_topic_deleted=self._topic_deleted,
            transactions=self._transaction_service(),
            metadata=self.metadata,
            disk_space=parts.store.disk_space,
            stats=self.stats,
            scheduling=ScheduledSends(
                parts.schedule.rules, timers_pending=parts.schedule.timers_pending
            ),
            pop=parts.pop,
        )
        if s.namesrv_addresses:
            self._namesrv_link = NameServerLink(
                s.namesrv_addresses,
                Registration(
                    cluster_name=s.cluster_name,
                    broker_name=s.broker_name,
                    broker_id=parts.broker_id,
                    broker_addr=f"{s.advertise_address}:{s.remoting_port}",
                    ha_server_addr=f"{s.advertise_address}:{s.ha_port}",
                    auto_create_topic=config.auto_create_topic_enable,
                    default_queue_nums=config.default_topic_queue_nums,
                ),
                front.topic_configs,
                s.remoting_credentials,
                register_interval_ms=config.register_name_server_period_ms,
                tls=s.namesrv_tls,
            )
        pairs_auth = remoting_auth_of(s)
        # The cluster's users beside the group's pairs (core/users.py), refreshed from the
        # controller over this broker's own link.
        auth = None if pairs_auth is None else with_users(pairs_auth, self.users)
        if pairs_auth is not None:
            self._spawn(
                self.users.refresh_forever(
                    self.controller, s.cluster_name, DEFAULT_REFRESH_INTERVAL_S
                )
            )
        self._remoting = RemotingFrontServer(front, auth, tls=s.remoting_tls)
        await self._remoting.start(s.bind_address, s.remoting_port)
        log.info("RocketMQ remoting port on %s:%d", s.bind_address, s.remoting_port)
        if s.grpc_port is not None:
            # The RocketMQ 5 SDKs' port, over the same topic table and produce path
            # (docs/grpc.md), under the remoting port's key pairs.
            service = MessagingService(
                parts.produce,
                front.declared,
                GrpcSettings(
                    broker_name=s.broker_name,
                    auto_create_topic=config.auto_create_topic_enable,
                    default_queue_nums=config.default_topic_queue_nums,
                    default_endpoint=(s.advertise_address, s.grpc_port),
                ),
                scheduling=ScheduledSends(
                    parts.schedule.rules, timers_pending=parts.schedule.timers_pending
                ),
                consumption=PopConsumption(parts.pop, orderly=orderly_of(front.metadata)),
                transactions=self._transaction_service(),
            )
            # The group's pairs and the cluster's users (signatures before any decode), then
            # a user's call authorized on its decoded request (grpc_front/users.py).
            check, users_check = None, None
            if auth is not None and pairs_auth is not None:
                check = SignatureCheck(
                    auth.secret_for, pairs_auth.unknown_key_reason or (lambda _k: None)
                )
                pair_secret = pairs_auth.secret_for
                users_check = UserAuthorization(self.users, lambda k: pair_secret(k) is not None)
            self._grpc = GrpcFrontServer(service, check, tls=s.grpc_tls, authorization=users_check)
            await self._grpc.start(s.bind_address, s.grpc_port)
            log.info("gRPC port on %s:%d", s.bind_address, s.grpc_port)
        if self._namesrv_link is not None:
            self._spawn(self._namesrv_link.run())

    def _transaction_service(self) -> TransactionService:
        assert self.transactions is not None, "made by _wire"
        return self.transactions

    def _master_lost(self, reason: str) -> None:
        if self._remoting is not None:
            self._remoting.master_lost(reason)
        if self._grpc is not None:
            self._grpc.master_lost(reason)

    def _topics_changed(self, topic: str) -> None:
        if self._namesrv_link is not None:
            self._namesrv_link.topics_changed(topic)

    def _topic_deleted(self, topic: str) -> None:
        if self._namesrv_link is not None:
            self._namesrv_link.topic_deleted(topic)

    def _role_changed(self) -> None:
        if self._namesrv_link is not None:
            self._namesrv_link.register_now()

    def _wire(self, broker_id: int, store: MessageStore, http: PeerHttp) -> BrokerParts:
        """Make the components of a registered broker and connect them, once."""
        s, config = self.settings, self.config
        self.role.broker_id = broker_id
        session = ControllerSession(
            broker_id=broker_id,
            controller=self.controller,
            config=config,
            role=self.role,
            lease=self.lease,
            heartbeat=self._heartbeat,
            spawn=self._spawn,
        )
        replication = ReplicationLink(
            broker_id=broker_id,
            config=config,
            ha_config=self._ha_config,
            ha_bind=(s.bind_address, s.ha_port),
            store=store,
            role=self.role,
            lease=self.lease,
            controller=self.controller,
            registered_host=session.registered_host,
        )
        if self.metadata is None:  # `run` opens it with the store; tests wire directly
            self.metadata = self._open_metadata(store)
        peers = PeerOffsets(
            broker_id=broker_id,
            session=http,
            offsets=store.consumer_offsets,
            role=self.role,
            metadata=PeerMetadata(
                broker_id=broker_id,
                session=http,
                metadata=self.metadata,
                role=self.role,
                store_topics=lambda: self._store_topics(store),
            ),
        )
        transitions = RoleTransitions(
            broker_id=broker_id,
            config=config,
            store=store,
            role=self.role,
            replication=replication,
            session=session,
            peers=peers,
            faults=self.faults,
            on_master_lost=self._master_lost,
            on_master_gained=self._role_changed,
            on_slave_gained=self._role_changed,
        )
        rules = schedule_rules_of(config)
        produce = ProducePath(
            settings=s,
            config=config,
            store=store,
            role=self.role,
            lease=self.lease,
            replication=replication,
            faults=self.faults,
            committer=self._committer,
            heartbeat_now=session.heartbeat_now,
            stats=self.stats,
            fixed_queue_counts={SCHEDULE_TOPIC: rules.max_level},
            configured_queues=self._write_queue_nums,
        )
        role = self.role
        self.transactions = TransactionService(
            store=store,
            produce=produce,
            rules=transaction_rules_of(config),
            master_term=lambda: (
                role.master_epoch if role.is_master and role.accepting_writes else None
            ),
            confirm_offset=replication.confirm_offset,
        )
        schedule = ScheduleService(
            store=store,
            produce=produce,
            rules=rules,
            master_term=lambda: (
                role.master_epoch if role.is_master and role.accepting_writes else None
            ),
            confirm_offset=replication.confirm_offset,
        )
        pop = PopService(
            store=store,
            produce=produce,
            cluster_name=s.cluster_name,
            broker_name=s.broker_name,
            master_term=lambda: (
                role.master_epoch if role.is_master and role.accepting_writes else None
            ),
            confirm_offset=replication.confirm_offset,
            max_in_flight_per_group=config.pop_max_in_flight_per_group,
            max_held_pops=config.max_pop_polling_size,
        )
        self.parts = BrokerParts(
            broker_id, store, session, replication, transitions, produce, peers, schedule, pop
        )
        return self.parts

    def _release(self) -> None:
        """The group commit made appends durable: the commit rule may release waiters."""
        if self.parts is not None:
            self.parts.replication.release()

    def _heartbeat_now(self) -> None:
        if self.parts is not None:
            self.parts.session.heartbeat_now()

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
        parts = self.parts
        log.info("broker %s stopping", self.role.broker_id)
        was_master = self.role.is_master
        if self._server is not None:
            # Open produces get the server's grace period to be acknowledged.
            await self._server.stop()
        if self._remoting is not None:
            await self._remoting.close()
        if self._grpc is not None:
            await self._grpc.close()
        if self._namesrv_link is not None:
            await self._namesrv_link.close()
        if parts is not None:
            parts.transitions.stop_writes(AckOutcome.NOT_MASTER)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=STOP_TASK_TIMEOUT_S)
        if parts is not None:
            # Before the controller hears we are gone: the slaves get the last
            # confirmOffset (a bounded drain, docs/ha.md "Hand-over") before any of
            # them can be elected, so the new master reads what we acknowledged.
            await parts.replication.stop()
        if was_master and parts is not None:
            # Tell the controller now rather than after heartbeatTimeoutMs: a
            # rolling restart of the master then fails over at once.
            with contextlib.suppress(ControllerUnavailable, ControllerRefused):
                await asyncio.wait_for(
                    # It acknowledges nothing any more (writes stopped above): as
                    # good as gone, so the new master need not wait out our lease.
                    self.controller.report_inactive(
                        parts.broker_id,
                        "broker shutting down",
                        process_gone=True,
                        incarnation=self.settings.incarnation,
                    ),
                    self.config.controller_request_timeout_ms / 1000,
                )
        if self._http is not None:
            await self._http.stop()
        if self._session is not None:
            await self._session.close()
        with contextlib.suppress(Exception):
            await self.controller.close()
        finishing, self._flush_in_thread = self._flush_in_thread, None
        if finishing is not None:
            with contextlib.suppress(Exception):
                await finishing  # a periodic flush's thread still syncing
        if self._committer is not None:
            await asyncio.to_thread(self._committer.stop)
        if self.store is not None:
            try:
                self.store.close()  # flushes log, queues, checkpoint, consumer offsets
            except (StoreError, OSError) as exc:
                log.error("final flush failed: %s", exc)
                self.store.close(flush=False)
        log.info("broker %s stopped", self.role.broker_id)

    async def _flush_loop(self, store: MessageStore) -> None:
        while True:
            await asyncio.sleep(self.config.flush_interval_ms / 1000)
            try:
                # Also persists consume queues, the checkpoint (confirmOffset)
                # and dirty consumer offsets.
                if not self._flush_off_loop:
                    store.flush()
                    continue
                # The fdatasyncs in a worker thread (store/durability.py): the loop keeps
                # serving meanwhile. Shielded, and awaited again before the store closes,
                # so a cancelled loop never leaves a sync running into close().
                finishing = asyncio.ensure_future(
                    asyncio.to_thread(store.finish_flush, store.begin_flush())
                )
                self._flush_in_thread = finishing
                await asyncio.shield(finishing)
                store.flush_consumer_offsets()
            except (StoreError, OSError) as exc:
                log.error("flush failed: %s", exc)
                self.faults.record(exc)

    # ================================================================ controller heartbeats

    def _heartbeat(self) -> BrokerHeartbeat:
        parts = self.parts
        assert parts is not None, "heartbeats start after registration"
        store = parts.store
        writable, error = self.faults.health(store)
        return BrokerHeartbeat(
            cluster_name=self.settings.cluster_name,
            broker_name=self.settings.broker_name,
            broker_id=parts.broker_id,
            address=self.settings.address,
            epoch=store.epoch_file.last_epoch(),
            max_offset=store.max_offset,
            confirm_offset=parts.replication.confirm_offset(),
            election_priority=self.config.election_priority,
            heartbeat_timeout_ms=self.config.heartbeat_timeout_ms,
            store_writable=writable,
            store_error=error,
            master_lease_ms=self.config.master_lease_ms,
            all_ack_in_sync_state_set=self.config.all_ack_in_sync_state_set,
            incarnation=self.settings.incarnation,
        )

    # ================================================================ HTTP status

    def status(self) -> dict[str, Any]:
        store = self.store
        parts = self.parts
        state = self.role.state
        is_master = state.role is roles.Role.MASTER
        writable, error = self.faults.health(store) if store is not None else (False, "not open")
        now = mono_ms()
        replication: dict[str, Any] = (
            parts.replication.status(now)
            if parts is not None
            else {
                "syncStateSet": [],
                "syncStateSetEpoch": None,
                "pendingSyncStateSet": None,
                "slaves": {},
            }
        )
        return {
            "brokerId": self.role.broker_id,
            "clusterName": self.settings.cluster_name,
            "brokerName": self.settings.broker_name,
            "address": self.settings.address,
            "role": state.role.value,
            "actingMaster": state.acting_master,
            "masterEpoch": state.master_epoch,
            "masterBrokerId": self.role.broker_id if is_master else state.master_broker_id,
            "masterAddress": self.settings.address if is_master else state.master_address,
            "maxOffset": None if store is None else store.max_offset,
            "minOffset": None if store is None else store.min_offset,
            "servedMinOffset": None if store is None else store.served_min_offset,
            "retentionFloor": None if store is None else retention_floor_of(store, is_master),
            "confirmOffset": parts.replication.confirm_offset()
            if parts is not None
            else (0 if store is None else min(store.confirm_offset, store.max_offset)),
            "epoch": None if store is None else store.epoch_file.last_epoch(),
            "syncStateSet": replication["syncStateSet"],
            "syncStateSetEpoch": replication["syncStateSetEpoch"],
            "pendingSyncStateSet": replication["pendingSyncStateSet"],
            "slaves": replication["slaves"],
            "fenced": self.role.fenced,
            "leaseRemainingMs": self.lease.remaining_ms(now) if is_master else None,
            "takeoverHoldRemainingMs": parts.replication.takeover_hold_remaining_ms(now)
            if is_master and parts is not None
            else None,
            "pendingAcks": 0 if parts is None else len(parts.replication.waiters),
            "registerState": self.role.register_state.value,
            "storeWritable": writable,
            "storeError": error,
            "schedule": None if parts is None else parts.schedule.status(),
            "transactions": None if self.transactions is None else self.transactions.status(),
            "pop": None if parts is None else parts.pop.status(),
            "groupCommit": None if self._committer is None else self._committer.counts().as_json(),
        }

    def metrics_text(self) -> bytes:
        return metrics.exposition(self.metrics)

    def _metric_facts(self) -> metrics.BrokerFacts | None:
        parts = self.parts
        if parts is None:
            return None
        state = self.role.state
        sync = parts.replication.sync if state.role is roles.Role.MASTER else None
        return metrics.gather(
            parts.store,
            cluster_name=self.settings.cluster_name,
            broker_name=self.settings.broker_name,
            broker_id=self.role.broker_id,
            role=state.role.value,
            master_epoch=state.master_epoch,
            confirm_offset=parts.replication.confirm_offset(),
            sync_state_set=None if sync is None else frozenset(sync.sync_state_set),
            slaves=(
                metrics.SlaveFacts(broker_id, p.ack_offset, p.connected)
                for broker_id, p in parts.replication.progress().items()
            ),
            group_commit=None if self._committer is None else self._committer.counts(),
        )

    def readiness(self) -> tuple[bool, list[str]]:
        """/readyz: role confirmed and the store's own verdict (`StoreFaults.health`,
        which heartbeats and produce admission read too: disk over diskFullRatio is
        decided there, once)."""
        problems: list[str] = []
        if not self.role.state.confirmed:
            problems.append(f"role not confirmed (register state {self.role.register_state})")
        store = self.store
        if store is None:
            problems.append("store not open")
        else:
            writable, error = self.faults.health(store)
            if not writable:
                problems.append(f"store not writable: {error}")
        return not problems, problems

    def metadata_snapshot(self) -> dict[str, Any]:
        """The topic and subscription-group tables a peer reads (GET /v1/metadata)."""
        metadata = self.metadata or BrokerMetadata(None)
        return metadata.snapshot()

    def consumer_offsets_snapshot(self) -> dict[str, Any]:
        store = self.store
        if store is None:
            return ConsumerOffsetSnapshot.from_json({}).to_json()
        return store.consumer_offsets.snapshot().to_json()
