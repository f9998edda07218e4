"""The controller API's request handlers on the leader (DESIGN.md §2.2–§2.4):
input is already validated and authenticated (`app`), the deterministic
rules come from `state`/`election`, liveness from `liveness`. A mixin of
`ControllerService`, which holds the state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from brokergroup_controller import api
from brokergroup_controller.election import ElectionRequest, ElectionTrigger, decide_election
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.http_support import FORWARDED_HEADER, _reject, _Reply
from brokergroup_controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerSet,
    CleanBrokerData,
    ControllerState,
    ElectMaster,
    RegisterBroker,
    request_key_of,
)
from brokergroup_controller.takeover import combine_waits

if TYPE_CHECKING:
    from brokergroup_controller.server import ControllerService

log = logging.getLogger(__name__)


class Endpoints:
    async def next_broker_id(
        self: ControllerService, request: web.Request | None, q: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = q["clusterName"], q["brokerName"]
        return {"nextBrokerId": self.node.read(lambda s: s.next_broker_id(cluster, name))}

    async def apply_broker_id(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        event = ApplyBrokerId(
            b["clusterName"],
            b["brokerName"],
            b["brokerId"],
            b["registerCode"],
            b["address"],
            request_id=b["requestId"],
        )
        details = await self._once(event.request_key, lambda: self._propose(event))
        return {"brokerId": details["brokerId"], "nextBrokerId": details["nextBrokerId"]}

    async def register_broker(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name, broker_id, address = (
            b["clusterName"],
            b["brokerName"],
            b["brokerId"],
            b["address"],
        )
        event = RegisterBroker(cluster, name, broker_id, address, request_id=b["requestId"])

        async def register() -> dict[str, Any]:
            broker_set = self._require_registered(cluster, name, broker_id)
            if broker_set.brokers[broker_id].address == address:
                return {}  # only an address change is worth a commit (persistent-broker-id §5.1)
            return await self._propose(event)

        await self._once(event.request_key, register)
        self.liveness.touch((cluster, name, broker_id), address, self.clock_ms())
        return self._info_body(cluster, name)

    async def heartbeat(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        forwarded = request is None or request.headers.get(FORWARDED_HEADER)
        transport = None if forwarded or request is None else request.transport
        return await self.accept_heartbeat(b["heartbeat"], transport)

    async def accept_heartbeat(
        self: ControllerService, hb: api.BrokerHeartbeat, transport: asyncio.BaseTransport | None
    ) -> dict[str, Any]:
        """A heartbeat from either front end; `transport` is the broker's own connection
        (its close makes the broker inactive), None when the heartbeat was relayed."""
        key = (hb.cluster_name, hb.broker_name, hb.broker_id)
        broker_set = self._require_registered(hb.cluster_name, hb.broker_name, hb.broker_id)
        now = self.clock_ms()
        was_alive = self.liveness.is_alive(key, now)
        self.liveness.heartbeat(hb, now)
        if transport is not None:
            self._heartbeat_transports[key] = transport
        if (
            was_alive
            and not self.liveness.is_alive(key, now)
            and broker_set.master_broker_id == hb.broker_id
        ):
            # The master says its store cannot take writes: fail over before answering.
            await self.run_liveness_tick()
        return self._info_body(hb.cluster_name, hb.broker_name)

    async def report_inactive(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name, broker_id = b["clusterName"], b["brokerName"], b["brokerId"]
        self._require_set(cluster, name)
        self._require_registered(cluster, name, broker_id)
        accepted = self.liveness.report_inactive(
            (cluster, name, broker_id),
            b["reason"],
            self.clock_ms(),
            process_gone=b["processGone"],
            incarnation=b["incarnation"],
            symptom_only=b["symptomOnly"],
        )
        if not accepted:
            log.info(
                "ignored a stale report on broker %s/%s:%d (incarnation %s, not the one "
                "heartbeating): %s", cluster, name, broker_id, b["incarnation"], b["reason"],
            )  # fmt: skip
            return {**self._info_body(cluster, name), "reportIgnored": True}
        log.info(
            "broker %s/%s:%d reported inactive%s%s: %s",
            cluster, name, broker_id, " (process gone)" if b["processGone"] else "",
            " (a symptom: heartbeats decide)" if b["symptomOnly"] else "", b["reason"],
        )  # fmt: skip
        await self.run_liveness_tick()  # a dead master is replaced before we answer
        return {**self._info_body(cluster, name), "reportIgnored": False}

    async def alter_sync_state_set(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
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
        details = await self._once(event.request_key, lambda: self._alter(event))
        return {
            "syncStateSet": details["syncStateSet"],
            "syncStateSetEpoch": details["syncStateSetEpoch"],
        }

    async def _alter(self: ControllerService, event: AlterSyncStateSet) -> dict[str, Any]:
        cluster, name = event.key
        broker_set = self._require_set(cluster, name)
        # Deterministic rules first (same verdict apply would give), then liveness.
        dry = ControllerState()
        dry.broker_sets[broker_set.key] = broker_set
        verdict = dry.apply(event)
        if not verdict.ok:
            raise _reject(verdict.code, verdict.message, **verdict.details)
        now = self.clock_ms()
        master_key = (cluster, name, event.master_broker_id)
        self.liveness.touch(master_key, broker_set.brokers[event.master_broker_id].address, now)
        dead = sorted(
            m for m in event.sync_state_set if not self.liveness.is_alive((cluster, name, m), now)
        )
        if dead:
            raise _reject(
                ErrorCode.BROKER_NOT_ALIVE,
                f"SyncStateSet members {dead} of {name} are not alive in the controller's view; "
                "shrink them out instead",
            )
        return await self._propose(event)

    async def elect_master(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        await self._once(
            request_key_of(ElectMaster.TYPE, cluster, name, b["requestId"]),
            lambda: self._requested_election(b),
        )
        return self._info_body(cluster, name)

    async def _requested_election(self: ControllerService, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        trigger: ElectionTrigger = b["trigger"]
        requester: int | None = b["brokerId"]
        broker_set = self._require_set(cluster, name)
        if trigger is ElectionTrigger.BROKER and requester in broker_set.brokers:
            assert requester is not None
            address = broker_set.brokers[requester].address
            self.liveness.touch((cluster, name, requester), address, self.clock_ms())
        request_ = ElectionRequest(
            trigger=trigger,
            requester_broker_id=requester,
            designated_broker_id=b["designatedBrokerId"],
            enable_elect_unclean_master=self.config.enable_elect_unclean_master,
        )
        return await self._elect(broker_set, request_, b["requestId"])

    async def _elect(
        self: ControllerService,
        broker_set: BrokerSet,
        request: ElectionRequest,
        request_id: str = "",
    ) -> dict[str, Any]:
        now = self.clock_ms()
        alive = self.liveness.alive_replicas(broker_set.key, broker_set.brokers, now)
        unheard = self.liveness.unheard(broker_set.key, broker_set.brokers, now)
        decision = decide_election(broker_set, alive, request, unheard)
        if not decision.ok or decision.event is None:
            self.metrics.elections.labels(request.trigger.value, decision.code.value).inc()
            details: dict[str, Any] = {}
            if decision.code is ErrorCode.MASTER_STILL_EXIST:
                details["replicaInfo"] = self.replica_info(broker_set).to_json()
            raise _reject(decision.code, decision.message, **details)
        event = self._with_takeover(broker_set, decision.event, now)
        try:
            details = await self._propose(replace(event, request_id=request_id))
        except _Reply as reply:
            self.metrics.elections.labels(request.trigger.value, reply.body["code"]).inc()
            raise
        self.metrics.elections.labels(request.trigger.value, ErrorCode.SUCCESS.value).inc()
        log.info("%s (masterEpoch was %d)", decision.message, broker_set.master_epoch)
        if event.takeover_wait_ms and event.new_master_broker_id is not None:
            log.info(
                "master %s of %s/%s may hold its lease for %d ms more: broker %d holds its "
                "acknowledgements until then",
                event.takeover_old_master_broker_id, *broker_set.key, event.takeover_wait_ms,
                event.new_master_broker_id,
            )  # fmt: skip
        return details

    def _with_takeover(
        self: ControllerService, broker_set: BrokerSet, event: ElectMaster, now: int
    ) -> ElectMaster:
        """The leader's takeover decision, carried by the event so that `apply`
        stores it even if this request gives up on the commit (takeover.py)."""
        old = broker_set.master_broker_id
        new = event.new_master_broker_id
        replaced = None if old == new else old  # a restarted master renews its own epoch
        old_wait = (
            0
            if replaced is None
            else self.liveness.takeover_wait_ms(
                (*broker_set.key, replaced),
                now,
                new_master_in_sync_state_set=new in broker_set.sync_state_set,
            )
        )
        previous_old, previous_left = self.takeover_remaining(broker_set, now) or (None, 0)
        whose, wait = combine_waits(previous_old, previous_left, replaced, old_wait)
        decided_at = self.wall_clock_ms()
        # This node saw the decision now: its answers count from here.
        self._takeover_seen[broker_set.key] = ((broker_set.master_epoch + 1, decided_at), now)
        return replace(
            event,
            takeover_old_master_broker_id=whose,
            takeover_wait_ms=wait,
            decided_at_ms=decided_at,
        )

    async def clean_broker_data(
        self: ControllerService, request: web.Request | None, b: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        request_key = request_key_of(CleanBrokerData.TYPE, cluster, name, b["requestId"])
        details = await self._once(request_key, lambda: self._clean(b))
        return {"removed": details["removed"]}

    async def _clean(self: ControllerService, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        broker_set = self._require_set(cluster, name)
        ids = set(broker_set.brokers) if b["brokerIds"] is None else set(b["brokerIds"])
        now = self.clock_ms()
        alive = sorted(i for i in ids if self.liveness.is_alive((cluster, name, i), now))
        if alive and not b["force"]:
            raise _reject(
                ErrorCode.BROKER_STILL_ALIVE,
                f"brokers {alive} of {name} are still alive; stop them first or pass force",
            )
        event_ids = None if b["brokerIds"] is None else frozenset(ids)
        details = await self._propose(
            CleanBrokerData(cluster, name, broker_ids=event_ids, request_id=b["requestId"])
        )
        for broker_id in details["removed"]:
            self.liveness.forget((cluster, name, broker_id))
        return details

    async def get_replica_info(
        self: ControllerService, request: web.Request | None, q: dict[str, Any]
    ) -> dict[str, Any]:
        return self._info_body(q["clusterName"], q["brokerName"])

    async def groups(
        self: ControllerService, request: web.Request | None, q: dict[str, Any]
    ) -> dict[str, Any]:
        sets = self.node.read(lambda s: [s.snapshot(c, n) for (c, n) in sorted(s.broker_sets)])
        return {"groups": [self.replica_info(bs).to_json() for bs in sets if bs is not None]}

    async def watch(
        self: ControllerService, request: web.Request | None, q: dict[str, Any]
    ) -> dict[str, Any]:
        cluster, name = q["clusterName"], q["brokerName"]
        timeout_s = min(q["timeoutMs"], self.config.watch_max_timeout_ms) / 1000
        deadline = asyncio.get_running_loop().time() + timeout_s
        assert self._changed is not None
        async with self._changed:
            while True:
                broker_set = self._require_set(cluster, name)
                if (
                    broker_set.master_epoch > q["masterEpoch"]
                    or broker_set.sync_state_set_epoch > q["syncStateSetEpoch"]
                ):
                    break
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), remaining)
        return {"code": ErrorCode.SUCCESS.value, **self.replica_info(broker_set).to_json()}

    def raft_body(self: ControllerService) -> dict[str, Any]:
        status = self.node.status()
        return {
            "code": ErrorCode.SUCCESS.value,
            "nodeId": self.config.node_id,
            "self": status.self_address,
            "leader": status.leader,
            "leaderApi": self.leader_api(),
            "term": status.term,
            "commitIndex": status.commit_index,
            "lastApplied": status.last_applied,
            "leaderCommitIndex": status.leader_commit_index,
            "isLeader": status.is_leader,
            "hasQuorum": status.has_quorum,
            "ready": status.caught_up,
            "logEntries": status.log_entries,
            "members": [
                {
                    "address": member,
                    "api": self.config.api_address_of(member),
                    "self": member == status.self_address,
                    "connected": member == status.self_address or member in status.connected,
                    "leader": member == status.leader,
                }
                for member in status.members
            ],
        }
