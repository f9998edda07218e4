"""The controller API's request handlers on the leader (DESIGN.md §2.2–§2.4):
input is already validated and authenticated (`app`), the deterministic
rules come from `state`/`election`, liveness from `liveness`.

The handlers hold no state: they reach the node's service core through
`LeaderService`, the few things a handler needs (the Raft node, liveness,
the request-id table, the takeover record). `server.ControllerService`
implements it and builds one `Endpoints` over itself, so this module never
imports the server (no import circle, issue 18 item 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, Protocol

from aiohttp import web

from brokergroup_controller import api
from brokergroup_controller.config import ControllerConfig
from brokergroup_controller.election import ElectionRequest, ElectionTrigger, decide_election
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.http_support import FORWARDED_HEADER, _Metrics, _reject, _Reply
from brokergroup_controller.liveness import Liveness
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerSet,
    CleanBrokerData,
    ControllerState,
    ElectMaster,
    Event,
    RegisterBroker,
    RequestKey,
    request_key_of,
)

log = logging.getLogger(__name__)


class LeaderService(Protocol):
    """What the handlers need of the node's service (server.ControllerService)."""

    config: ControllerConfig
    node: ControllerRaftNode
    liveness: Liveness
    metrics: _Metrics
    clock_ms: Callable[[], int]

    def require_set(self, cluster: str, name: str) -> BrokerSet: ...

    def require_registered(self, cluster: str, name: str, broker_id: int) -> BrokerSet: ...

    def replica_info(self, broker_set: BrokerSet) -> api.ReplicaInfo: ...

    def info_body(self, cluster: str, name: str) -> dict[str, Any]: ...

    async def propose(self, event: Event) -> dict[str, Any]: ...

    async def once(
        self,
        request_key: RequestKey | None,
        decide_and_propose: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
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


class Endpoints:
    def __init__(self, service: LeaderService) -> None:
        self.service = service

    async def next_broker_id(
        self, request: web.Request | None, q: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = q["clusterName"], q["brokerName"]
        return {"nextBrokerId": self.service.node.read(lambda s: s.next_broker_id(cluster, name))}

    async def apply_broker_id(
        self, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        event = ApplyBrokerId(
            b["clusterName"],
            b["brokerName"],
            b["brokerId"],
            b["registerCode"],
            b["address"],
            request_id=b["requestId"],
        )
        details = await self.service.once(event.request_key, lambda: self.service.propose(event))
        return {"brokerId": details["brokerId"], "nextBrokerId": details["nextBrokerId"]}

    async def register_broker(
        self, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name, broker_id, address = (
            b["clusterName"],
            b["brokerName"],
            b["brokerId"],
            b["address"],
        )
        event = RegisterBroker(cluster, name, broker_id, address, request_id=b["requestId"])

        async def register() -> dict[str, Any]:
            broker_set = self.service.require_registered(cluster, name, broker_id)
            if broker_set.brokers[broker_id].address == address:
                return {}  # only an address change is worth a commit (persistent-broker-id §5.1)
            return await self.service.propose(event)

        await self.service.once(event.request_key, register)
        self.service.liveness.touch((cluster, name, broker_id), address, self.service.clock_ms())
        return self.service.info_body(cluster, name)

    async def heartbeat(self, request: web.Request | None, b: dict[str, Any]) -> dict[str, Any]:
        forwarded = request is None or request.headers.get(FORWARDED_HEADER)
        transport = None if forwarded or request is None else request.transport
        return await self.accept_heartbeat(b["heartbeat"], transport)

    async def accept_heartbeat(
        self, hb: api.BrokerHeartbeat, transport: asyncio.BaseTransport | None
    ) -> dict[str, Any]:
        """A heartbeat from either front end; `transport` is the broker's own connection
        (its close makes the broker inactive), None when the heartbeat was relayed."""
        key = (hb.cluster_name, hb.broker_name, hb.broker_id)
        broker_set = self.service.require_registered(hb.cluster_name, hb.broker_name, hb.broker_id)
        now = self.service.clock_ms()
        was_alive = self.service.liveness.is_alive(key, now)
        self.service.liveness.heartbeat(hb, now)
        if transport is not None:
            self.service.track_connection(key, transport)
        if (
            was_alive
            and not self.service.liveness.is_alive(key, now)
            and broker_set.master_broker_id == hb.broker_id
        ):
            # The master says its store cannot take writes: fail over before answering.
            await self.service.run_liveness_tick()
        return self.service.info_body(hb.cluster_name, hb.broker_name)

    async def report_inactive(
        self, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name, broker_id = b["clusterName"], b["brokerName"], b["brokerId"]
        self.service.require_set(cluster, name)
        self.service.require_registered(cluster, name, broker_id)
        accepted = self.service.liveness.report_inactive(
            (cluster, name, broker_id),
            b["reason"],
            self.service.clock_ms(),
            process_gone=b["processGone"],
            incarnation=b["incarnation"],
            symptom_only=b["symptomOnly"],
        )
        if not accepted:
            log.info(
                "ignored a stale report on broker %s/%s:%d (incarnation %s, not the one "
                "heartbeating): %s", cluster, name, broker_id, b["incarnation"], b["reason"],
            )  # fmt: skip
            return {**self.service.info_body(cluster, name), "reportIgnored": True}
        log.info(
            "broker %s/%s:%d reported inactive%s%s: %s",
            cluster, name, broker_id, " (process gone)" if b["processGone"] else "",
            " (a symptom: heartbeats decide)" if b["symptomOnly"] else "", b["reason"],
        )  # fmt: skip
        await self.service.run_liveness_tick()  # a dead master is replaced before we answer
        return {**self.service.info_body(cluster, name), "reportIgnored": False}

    async def alter_sync_state_set(
        self, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        event = AlterSyncStateSet(
            cluster,
            name,
            master_broker_id=b["masterBrokerId"],
            master_epoch=b["masterEpoch"],
            sync_state_set=frozenset(b["syncStateSet"]),
            sync_state_set_epoch=b["syncStateSetEpoch"],
            request_id=b["requestId"],
        )
        details = await self.service.once(event.request_key, lambda: self._alter(event))
        return {
            "syncStateSet": details["syncStateSet"],
            "syncStateSetEpoch": details["syncStateSetEpoch"],
        }

    async def _alter(self, event: AlterSyncStateSet) -> dict[str, Any]:
        cluster, name = event.key
        broker_set = self.service.require_set(cluster, name)
        # Deterministic rules first (same verdict apply would give), then liveness.
        dry = ControllerState()
        dry.broker_sets[broker_set.key] = broker_set
        verdict = dry.apply(event)
        if not verdict.ok:
            raise _reject(verdict.code, verdict.message, **verdict.details)
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
            raise _reject(
                ErrorCode.BROKER_NOT_ALIVE,
                f"SyncStateSet members {dead} of {name} are not alive in the controller's view; "
                "shrink them out instead",
            )
        return await self.service.propose(event)

    async def elect_master(self, request: web.Request | None, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        await self.service.once(
            request_key_of(ElectMaster.TYPE, cluster, name, b["requestId"]),
            lambda: self._requested_election(b),
        )
        return self.service.info_body(cluster, name)

    async def _requested_election(self, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        trigger: ElectionTrigger = b["trigger"]
        requester: int | None = b["brokerId"]
        broker_set = self.service.require_set(cluster, name)
        if trigger is ElectionTrigger.BROKER and requester in broker_set.brokers:
            assert requester is not None
            address = broker_set.brokers[requester].address
            self.service.liveness.touch(
                (cluster, name, requester), address, self.service.clock_ms()
            )
        request_ = ElectionRequest(
            trigger=trigger,
            requester_broker_id=requester,
            designated_broker_id=b["designatedBrokerId"],
            enable_elect_unclean_master=self.service.config.enable_elect_unclean_master,
            switchover=b["switchover"],
            eligible_broker_ids=b["eligibleBrokerIds"],
        )
        return await self.elect(broker_set, request_, b["requestId"])

    async def elect(
        self,
        broker_set: BrokerSet,
        request: ElectionRequest,
        request_id: str = "",
    ) -> dict[str, Any]:
        now = self.service.clock_ms()
        alive = self.service.liveness.alive_replicas(broker_set.key, broker_set.brokers, now)
        unheard = self.service.liveness.unheard(broker_set.key, broker_set.brokers, now)
        inactive = self.service.liveness.inactive_reasons(broker_set.key, broker_set.brokers, now)
        decision = decide_election(broker_set, alive, request, unheard, inactive)
        if not decision.ok or decision.event is None:
            self.service.metrics.elections.labels(request.trigger.value, decision.code.value).inc()
            details: dict[str, Any] = {}
            if decision.code is ErrorCode.MASTER_STILL_EXIST:
                details["replicaInfo"] = self.service.replica_info(broker_set).to_json()
            raise _reject(decision.code, decision.message, **details)
        event = self.service.with_takeover(broker_set, decision.event, now)
        try:
            details = await self.service.propose(replace(event, request_id=request_id))
        except _Reply as reply:
            self.service.metrics.elections.labels(request.trigger.value, reply.body["code"]).inc()
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
        return details

    async def clean_broker_data(
        self, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        request_key = request_key_of(CleanBrokerData.TYPE, cluster, name, b["requestId"])
        details = await self.service.once(request_key, lambda: self._clean(b))
        return {"removed": details["removed"]}

    async def _clean(self, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        broker_set = self.service.require_set(cluster, name)
        ids = set(broker_set.brokers) if b["brokerIds"] is None else set(b["brokerIds"])
        now = self.service.clock_ms()
        alive = sorted(i for i in ids if self.service.liveness.is_alive((cluster, name, i), now))
        if alive and not b["force"]:
            raise _reject(
                ErrorCode.BROKER_STILL_ALIVE,
                f"brokers {alive} of {name} are still alive; stop them first or pass force",
            )
        event_ids = None if b["brokerIds"] is None else frozenset(ids)
        details = await self.service.propose(
            CleanBrokerData(cluster, name, broker_ids=event_ids, request_id=b["requestId"])
        )
        for broker_id in details["removed"]:
            self.service.liveness.forget((cluster, name, broker_id))
        return details

    async def get_replica_info(
        self, request: web.Request | None, q: dict[str, Any]
    ) -> dict[str, Any]:
        return self.service.info_body(q["clusterName"], q["brokerName"])

    async def groups(self, request: web.Request | None, q: dict[str, Any]) -> dict[str, Any]:
        sets = self.service.node.read(
            lambda s: [s.snapshot(c, n) for (c, n) in sorted(s.broker_sets)]
        )
        return {
            "groups": [self.service.replica_info(bs).to_json() for bs in sets if bs is not None]
        }

    async def watch(self, request: web.Request | None, q: dict[str, Any]) -> dict[str, Any]:
        cluster, name = q["clusterName"], q["brokerName"]
        timeout_s = min(q["timeoutMs"], self.service.config.watch_max_timeout_ms) / 1000
        deadline = asyncio.get_running_loop().time() + timeout_s
        changed = self.service.state_changed()
        async with changed:
            while True:
                broker_set = self.service.require_set(cluster, name)
                if (
                    broker_set.master_epoch > q["masterEpoch"]
                    or broker_set.sync_state_set_epoch > q["syncStateSetEpoch"]
                ):
                    break
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), remaining)
        return {"code": ErrorCode.SUCCESS.value, **self.service.replica_info(broker_set).to_json()}
