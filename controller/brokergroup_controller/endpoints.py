"""The controller service's request handlers on the leader (DESIGN.md §2.2–§2.4, §12 "One
request layer"): one method per typed request (`requests`), answering with the API's types
(`api.ReplicaInfo`, ...) or raising `ControllerError`, the one refusal type. The front ends
(the HTTP API in `app`, the RocketMQ controller port in `rocketmq_front`) decode their wire
form into the typed request, authenticate the caller into a `requests.Caller`, and encode
the answer or refusal at their own edge; nothing here knows JSON, HTTP or remoting.

Each handler first authorizes the caller (`authorize`: access.decide with the leader's
registered addresses), then decides with the deterministic rules of `state`/`election` and
the leader's liveness, and proposes through Raft.

The handlers hold no state: they reach the node's service core through `LeaderService`,
the few things a handler needs (the Raft node, liveness, the request-id table, the takeover
record). `server.ControllerService` implements it and builds one `Endpoints` over itself,
so this module never imports the server (no import circle, issue 18 item 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Protocol, TypeVar

from brokergroup_controller import api
from brokergroup_controller import requests as rq
from brokergroup_controller.access import AccessRequest, decide
from brokergroup_controller.config import ControllerConfig
from brokergroup_controller.credentials import Role
from brokergroup_controller.election import ElectionRequest, ElectionTrigger, decide_election
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.liveness import Liveness
from brokergroup_controller.metrics import Metrics
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerIdApplied,
    BrokerRegistered,
    BrokersCleaned,
    BrokerSet,
    CleanBrokerData,
    ControllerState,
    ElectMaster,
    Event,
    MasterElected,
    Outcome,
    RegisterBroker,
    RequestKey,
    SyncStateSetAltered,
    request_key_of,
)

log = logging.getLogger(__name__)

OutcomeT = TypeVar("OutcomeT", bound=Outcome)


class LeaderService(Protocol):
    """What the handlers need of the node's service (server.ControllerService)."""

    config: ControllerConfig
    node: ControllerRaftNode
    liveness: Liveness
    metrics: Metrics
    clock_ms: Callable[[], int]

    def snapshot(self, cluster: str, name: str) -> BrokerSet | None: ...

    def require_set(self, cluster: str, name: str) -> BrokerSet: ...

    def require_registered(self, cluster: str, name: str, broker_id: int) -> BrokerSet: ...

    def replica_info(self, broker_set: BrokerSet) -> api.ReplicaInfo: ...

    async def propose(self, event: Event, expect: type[OutcomeT]) -> OutcomeT:
        """Commit `event`; its outcome (of type `expect`), or its refusal raised."""
        ...

    async def once(
        self,
        request_key: RequestKey | None,
        expect: type[OutcomeT],
        decide_and_propose: Callable[[], Awaitable[OutcomeT]],
    ) -> OutcomeT:
        """Run a mutating request unless its request id was answered (then that answer)."""
        ...

    def with_takeover(self, broker_set: BrokerSet, event: ElectMaster, now: int) -> ElectMaster:
        """The election event with the leader's takeover decision (takeover.py)."""
        ...

    def track_connection(self, key: tuple[str, str, int], transport: asyncio.BaseTransport) -> None:
        """A broker's heartbeat connection: its close makes the broker inactive."""
        ...

    async def run_liveness_tick(self) -> None: ...

    def state_changed(self) -> asyncio.Condition:
        """Notified whenever the replicated state changes (watchers wait on it)."""
        ...

    def is_leader(self) -> bool:
        """This node is the Raft leader now (liveness lives only on the leader)."""
        ...


class Endpoints:
    def __init__(self, service: LeaderService) -> None:
        self.service = service

    # -- access

    def authorize(self, caller: rq.Caller, request: rq.ServiceRequest | AccessRequest) -> None:
        """FORBIDDEN with the reason unless access.decide lets `caller` do this. With
        `caller.address_rules`, also the address rules against the group's registered
        brokers (read only when one applies: a broker credential, or a heartbeat)."""
        principal = caller.principal
        if principal is None:
            return
        access = request if isinstance(request, AccessRequest) else AccessRequest.of(request)
        registered: Mapping[int, str] | None = None  # None: role rules only
        if caller.address_rules:
            needs_addresses = principal.role is Role.BROKER or access.endpoint == "heartbeat"
            registered = self._registered_addresses(access.group) if needs_addresses else {}
        verdict = decide(principal, access, caller.origin_host, registered)
        if not verdict.allowed:
            raise ControllerError(ErrorCode.FORBIDDEN, verdict.reason)

    def _registered_addresses(self, group: tuple[str, str] | None) -> dict[int, str]:
        """BrokerId → registered address of the group (for the address rules)."""
        broker_set = None if group is None else self.service.snapshot(*group)
        if broker_set is None:
            return {}
        return {broker_id: record.address for broker_id, record in broker_set.brokers.items()}

    def _info(self, cluster: str, name: str) -> api.ReplicaInfo:
        return self.service.replica_info(self.service.require_set(cluster, name))

    # -- identity and registration

    async def next_broker_id(self, request: rq.GetNextBrokerId, caller: rq.Caller) -> int:
        self.authorize(caller, request)
        cluster, name = request.cluster_name, request.broker_name
        return self.service.node.read(lambda s: s.next_broker_id(cluster, name))

    async def apply_broker_id(
        self, request: rq.ApplyBrokerId, caller: rq.Caller
    ) -> api.AppliedBrokerId:
        self.authorize(caller, request)
        event = ApplyBrokerId(
            request.cluster_name,
            request.broker_name,
            request.broker_id,
            request.register_code,
            request.address,
            request.protocol.value,
            request_id=request.request_id,
        )
        applied = await self.service.once(
            event.request_key, BrokerIdApplied, lambda: self.service.propose(event, BrokerIdApplied)
        )
        return api.AppliedBrokerId(applied.broker_id, applied.next_broker_id)

    async def register_broker(
        self, request: rq.RegisterBroker, caller: rq.Caller
    ) -> api.ReplicaInfo:
        self.authorize(caller, request)
        cluster, name, broker_id, address = (
            request.cluster_name,
            request.broker_name,
            request.broker_id,
            request.address,
        )
        protocol = request.protocol
        event = RegisterBroker(
            cluster, name, broker_id, address, protocol.value, request_id=request.request_id
        )

        async def register() -> BrokerRegistered:
            broker_set = self.service.require_registered(cluster, name, broker_id)
            record = broker_set.brokers[broker_id]
            if record.address == address and record.protocol is protocol:
                # Only an address change is worth a commit (§5.1), or the first record of
                # the protocol (a broker applied before the record had it, or it changed).
                return BrokerRegistered()
            return await self.service.propose(event, BrokerRegistered)

        await self.service.once(event.request_key, BrokerRegistered, register)
        self.service.liveness.touch((cluster, name, broker_id), address, self.service.clock_ms())
        return self._info(cluster, name)

    # -- liveness

    async def heartbeat(self, request: rq.Heartbeat, caller: rq.Caller) -> api.ReplicaInfo:
        """A heartbeat from either front end; `caller.connection` is the broker's own
        connection (its close makes the broker inactive), None when it was relayed."""
        self.authorize(caller, request)
        hb = request.heartbeat
        key = (hb.cluster_name, hb.broker_name, hb.broker_id)
        broker_set = self.service.require_registered(hb.cluster_name, hb.broker_name, hb.broker_id)
        now = self.service.clock_ms()
        was_alive = self.service.liveness.is_alive(key, now)
        self.service.liveness.heartbeat(hb, now)
        if caller.connection is not None:
            self.service.track_connection(key, caller.connection)
        if (
            was_alive
            and not self.service.liveness.is_alive(key, now)
            and broker_set.master_broker_id == hb.broker_id
        ):
            # The master says its store cannot take writes: fail over before answering.
            await self.service.run_liveness_tick()
        return self._info(hb.cluster_name, hb.broker_name)

    async def report_inactive(
        self, request: rq.ReportInactive, caller: rq.Caller
    ) -> api.InactiveReportAnswer:
        self.authorize(caller, request)
        r = request
        cluster, name, broker_id = r.cluster_name, r.broker_name, r.broker_id
        self.service.require_set(cluster, name)
        self.service.require_registered(cluster, name, broker_id)
        accepted = self.service.liveness.report_inactive(
            (cluster, name, broker_id),
            r.reason,
            self.service.clock_ms(),
            process_gone=r.process_gone,
            incarnation=r.incarnation,
            symptom_only=r.symptom_only,
        )
        if not accepted:
            log.info(
                "ignored a stale report on broker %s/%s:%d (incarnation %s, not the one "
                "heartbeating): %s", cluster, name, broker_id, r.incarnation, r.reason,
            )  # fmt: skip
            return api.InactiveReportAnswer(self._info(cluster, name), ignored=True)
        log.info(
            "broker %s/%s:%d reported inactive%s%s: %s",
            cluster, name, broker_id, " (process gone)" if r.process_gone else "",
            " (a symptom: heartbeats decide)" if r.symptom_only else "", r.reason,
        )  # fmt: skip
        await self.service.run_liveness_tick()  # a dead master is replaced before we answer
        return api.InactiveReportAnswer(self._info(cluster, name), ignored=False)

    # -- SyncStateSet and elections

    async def alter_sync_state_set(
        self, request: rq.AlterSyncStateSet, caller: rq.Caller
    ) -> api.SyncStateSet:
        self.authorize(caller, request)
        event = AlterSyncStateSet(
            request.cluster_name,
            request.broker_name,
            master_broker_id=request.master_broker_id,
            master_epoch=request.master_epoch,
            sync_state_set=request.sync_state_set,
            sync_state_set_epoch=request.sync_state_set_epoch,
            request_id=request.request_id,
        )
        altered = await self.service.once(
            event.request_key, SyncStateSetAltered, lambda: self._alter(event)
        )
        return api.SyncStateSet(altered.sync_state_set, altered.sync_state_set_epoch)

    async def _alter(self, event: AlterSyncStateSet) -> SyncStateSetAltered:
        cluster, name = event.key
        broker_set = self.service.require_set(cluster, name)
        # Deterministic rules first (same verdict apply would give), then liveness.
        dry = ControllerState()
        dry.broker_sets[broker_set.key] = broker_set
        verdict = dry.apply(event)
        if not verdict.ok:
            raise ControllerError(verdict.code, verdict.message)
        now = self.service.clock_ms()
        master_key = (cluster, name, event.master_broker_id)
        self.service.liveness.touch(
            master_key, broker_set.brokers[event.master_broker_id].address, now
        )
        dead = sorted(
            m
            for m in event.sync_state_set
            if not self.service.liveness.is_alive((cluster, name, m), now)
        )
        if dead:
            raise ControllerError(
                ErrorCode.BROKER_NOT_ALIVE,
                f"SyncStateSet members {dead} of {name} are not alive in the controller's view; "
                "shrink them out instead",
            )
        return await self.service.propose(event, SyncStateSetAltered)

    async def elect_master(self, request: rq.ElectMaster, caller: rq.Caller) -> api.ReplicaInfo:
        self.authorize(caller, request)
        cluster, name = request.cluster_name, request.broker_name
        await self.service.once(
            request_key_of(ElectMaster.TYPE, cluster, name, request.request_id),
            MasterElected,
            lambda: self._requested_election(request),
        )
        return self._info(cluster, name)

    async def _requested_election(self, request: rq.ElectMaster) -> MasterElected:
        cluster, name = request.cluster_name, request.broker_name
        requester = request.broker_id
        broker_set = self.service.require_set(cluster, name)
        if request.trigger is ElectionTrigger.BROKER and requester in broker_set.brokers:
            assert requester is not None
            address = broker_set.brokers[requester].address
            self.service.liveness.touch(
                (cluster, name, requester), address, self.service.clock_ms()
            )
        election = ElectionRequest(
            trigger=request.trigger,
            requester_broker_id=requester,
            designated_broker_id=request.designated_broker_id,
            enable_elect_unclean_master=self.service.config.enable_elect_unclean_master,
            switchover=request.switchover,
            eligible_broker_ids=request.eligible_broker_ids,
        )
        return await self.elect(broker_set, election, request.request_id)

    async def elect(
        self,
        broker_set: BrokerSet,
        request: ElectionRequest,
        request_id: str = "",
    ) -> MasterElected:
        now = self.service.clock_ms()
        alive = self.service.liveness.alive_replicas(broker_set.key, broker_set.brokers, now)
        unheard = self.service.liveness.unheard(broker_set.key, broker_set.brokers, now)
        inactive = self.service.liveness.inactive_reasons(broker_set.key, broker_set.brokers, now)
        decision = decide_election(broker_set, alive, request, unheard, inactive)
        if not decision.ok or decision.event is None:
            self.service.metrics.elections.labels(request.trigger.value, decision.code.value).inc()
            if decision.code is ErrorCode.MASTER_STILL_EXIST:
                raise ControllerError(
                    decision.code,
                    decision.message,
                    replicaInfo=self.service.replica_info(broker_set),
                )
            raise ControllerError(decision.code, decision.message)
        event = self.service.with_takeover(broker_set, decision.event, now)
        try:
            elected = await self.service.propose(
                replace(event, request_id=request_id), MasterElected
            )
        except ControllerError as refusal:
            self.service.metrics.elections.labels(request.trigger.value, refusal.code.value).inc()
            raise
        self.service.metrics.elections.labels(request.trigger.value, ErrorCode.SUCCESS.value).inc()
        log.info("%s (masterEpoch was %d)", decision.message, broker_set.master_epoch)
        if event.takeover_wait_ms and event.new_master_broker_id is not None:
            log.info(
                "master %s of %s/%s may hold its lease for %d ms more: broker %d holds its "
                "acknowledgements until then",
                event.takeover_old_master_broker_id, *broker_set.key, event.takeover_wait_ms,
                event.new_master_broker_id,
            )  # fmt: skip
        return elected

    # -- admin

    async def clean_broker_data(
        self, request: rq.CleanBrokerData, caller: rq.Caller
    ) -> tuple[int, ...]:
        """The BrokerIds removed."""
        self.authorize(caller, request)
        request_key = request_key_of(
            CleanBrokerData.TYPE, request.cluster_name, request.broker_name, request.request_id
        )
        cleaned = await self.service.once(request_key, BrokersCleaned, lambda: self._clean(request))
        return cleaned.removed

    async def _clean(self, request: rq.CleanBrokerData) -> BrokersCleaned:
        cluster, name = request.cluster_name, request.broker_name
        broker_set = self.service.require_set(cluster, name)
        ids = set(broker_set.brokers) if request.broker_ids is None else set(request.broker_ids)
        now = self.service.clock_ms()
        alive = sorted(i for i in ids if self.service.liveness.is_alive((cluster, name, i), now))
        if alive and not request.force:
            raise ControllerError(
                ErrorCode.BROKER_STILL_ALIVE,
                f"brokers {alive} of {name} are still alive; stop them first or pass force",
            )
        cleaned = await self.service.propose(
            CleanBrokerData(
                cluster, name, broker_ids=request.broker_ids, request_id=request.request_id
            ),
            BrokersCleaned,
        )
        for broker_id in cleaned.removed:
            self.service.liveness.forget((cluster, name, broker_id))
        return cleaned

    # -- reads

    async def get_replica_info(
        self, request: rq.GetReplicaInfo, caller: rq.Caller
    ) -> api.ReplicaInfo:
        self.authorize(caller, request)
        return self._info(request.cluster_name, request.broker_name)

    async def groups(
        self, request: rq.ListGroups, caller: rq.Caller
    ) -> tuple[api.ReplicaInfo, ...]:
        self.authorize(caller, request)
        sets = self.service.node.read(
            lambda s: [s.snapshot(c, n) for (c, n) in sorted(s.broker_sets)]
        )
        return tuple(self.service.replica_info(bs) for bs in sets if bs is not None)

    async def watch(self, request: rq.Watch, caller: rq.Caller) -> api.ReplicaInfo:
        self.authorize(caller, request)
        cluster, name = request.cluster_name, request.broker_name
        timeout_s = min(request.timeout_ms, self.service.config.watch_max_timeout_ms) / 1000
        deadline = asyncio.get_running_loop().time() + timeout_s
        changed = self.service.state_changed()
        async with changed:
            while True:
                broker_set = self.service.require_set(cluster, name)
                if (
                    broker_set.master_epoch > request.master_epoch
                    or broker_set.sync_state_set_epoch > request.sync_state_set_epoch
                ):
                    break
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        if not self.service.is_leader():
            # The watch began while this node led and outlived its leadership: a
            # follower's liveness is stale (every broker reads dead), and an answer
            # built on it once fenced a resumed master that then sat out 49 s
            # (issue 37). The client asks again, at the leader.
            raise ControllerError(
                ErrorCode.NOT_LEADER,
                f"this node lost leadership during the watch of {cluster}/{name}; ask the leader",
            )
        return self.service.replica_info(broker_set)
