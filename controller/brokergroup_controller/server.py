"""The controller's HTTP API on every node (DESIGN.md §2.3, §2.4; docs/architecture.md).

Theory of operation
-------------------
Every node serves the same API. A request is handled in this order, so a
rejected request never changes anything:

1. `POST` needs `Authorization: Bearer <token>` (401, compared in constant time).
2. The body or query is parsed and type-checked (400 naming the field).
3. A follower forwards the request verbatim to the leader's API address (the
   leader's `--peers` host with the API port) and relays the answer; if it
   cannot, it answers 503 NOT_LEADER with the leader it knows. A forwarded
   request is never forwarded again.
4. The leader decides with its liveness view (`liveness.Liveness`, local,
   not replicated), proposes an event through Raft, and answers with the
   applied result; rule rejections are 409 with the `ErrorCode`.

A background task ticks liveness every `livenessTickMs`; a master that just
became inactive gets a controller-triggered election at once, retried with
backoff (the schedule is in `Liveness`). Reports that make a master inactive
(`/v1/brokers/inactive`, a heartbeat saying the store cannot take writes)
run that tick inline, so the caller sees the election's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from brokergroup_controller import api
from brokergroup_controller.config import (
    DEFAULT_API_PORT,
    DEFAULT_RAFT_PORT,
    ControllerConfig,
    config_from_sources,
    load_config,
    read_token_file,
)
from brokergroup_controller.election import ElectionRequest, ElectionTrigger, decide_election
from brokergroup_controller.errors import ControllerError, ErrorCode, http_status
from brokergroup_controller.liveness import Liveness, WatchedSet
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.request_parsing import (
    BadRequest,
    int_field,
    parse_alter,
    parse_apply,
    parse_clean,
    parse_elect,
    parse_heartbeat,
    parse_inactive,
    parse_none,
    parse_register,
    parse_watch,
    query_key,
)
from brokergroup_controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokerSet,
    CleanBrokerData,
    ControllerState,
    Event,
    RegisterBroker,
)

log = logging.getLogger(__name__)

FORWARDED_HEADER = "X-Brokergroup-Forwarded-By"
LEADER_HEADER = "X-Brokergroup-Leader"

# ---------------------------------------------------------------- metrics


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        prefix = "brokergroup_controller"
        self.requests = Counter(
            f"{prefix}_requests", "API requests", ["endpoint", "code"], registry=r
        )
        self.latency = Histogram(
            f"{prefix}_request_seconds",
            "API latency",
            ["endpoint"],
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.forwarded = Counter(
            f"{prefix}_forwarded", "requests forwarded to the leader", registry=r
        )
        self.elections = Counter(
            f"{prefix}_elections", "election attempts", ["trigger", "code"], registry=r
        )
        self.term = Gauge(f"{prefix}_raft_term", "Raft term", registry=r)
        self.commit_index = Gauge(f"{prefix}_raft_commit_index", "Raft commit index", registry=r)
        self.last_applied = Gauge(f"{prefix}_raft_last_applied", "Raft last applied", registry=r)
        self.is_leader = Gauge(f"{prefix}_raft_is_leader", "1 on the Raft leader", registry=r)
        self.broker_sets = Gauge(f"{prefix}_broker_sets", "broker sets in the state", registry=r)
        self.alive_brokers = Gauge(
            f"{prefix}_alive_brokers", "alive brokers in the leader's view", registry=r
        )


# ---------------------------------------------------------------- responses


def _json(status: int, body: dict[str, Any], leader_api: str | None = None) -> web.Response:
    headers = {LEADER_HEADER: leader_api} if leader_api else None
    return web.json_response(body, status=status, headers=headers)


def _error_body(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code.value, "message": message, **details}


class _Reply(Exception):
    """Short-circuit a handler with a finished response (errors mostly)."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body.get("message", ""))
        self.status = status
        self.body = body


def _reject(code: ErrorCode, message: str, **details: Any) -> _Reply:
    return _Reply(http_status(code), _error_body(code, message, **details))


# ---------------------------------------------------------------- the service


Handler = Callable[[web.Request, dict[str, Any]], Awaitable[dict[str, Any]]]


class ControllerService:
    """The leader's request handling plus forwarding; one per node."""

    def __init__(
        self,
        config: ControllerConfig,
        node: ControllerRaftNode,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.config = config
        self.node = node
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self.liveness = Liveness(
            default_timeout_ms=config.heartbeat_timeout_ms,
            connection_close_grace_ms=config.connection_close_grace_ms,
            election_retry_initial_ms=config.election_retry_initial_ms,
            election_retry_max_ms=config.election_retry_max_ms,
        )
        self.metrics = _Metrics()
        self._session: ClientSession | None = None
        self._changed: asyncio.Condition | None = None
        self._was_leader = False
        self._heartbeat_transports: dict[tuple[str, str, int], asyncio.BaseTransport] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._tick_now: asyncio.Event | None = None

    # -- lifecycle

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._changed = asyncio.Condition()
        self._tick_now = asyncio.Event()
        self._session = ClientSession(
            timeout=ClientTimeout(total=self.config.forward_timeout_ms / 1000)
        )
        self.node.add_listener(loop, self._on_node_changed)
        self._spawn(self._liveness_loop())
        self._on_node_changed()

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _on_node_changed(self) -> None:
        """Runs on the loop after Raft ticks that applied entries or changed leadership."""
        status = self.node.status()
        if status.is_leader and not self._was_leader:
            log.info("became Raft leader at term %d: brokers get one timeout of grace", status.term)
            self.liveness.become_leader(self.clock_ms())
            self._heartbeat_transports.clear()
        elif not status.is_leader and self._was_leader:
            log.info("lost Raft leadership (leader now %s)", status.leader)
            self.liveness.step_down()
            self._heartbeat_transports.clear()
        self._was_leader = status.is_leader
        if self._changed is not None:
            self._spawn(self._notify_watchers())

    async def _notify_watchers(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # -- leader address

    def leader_api(self) -> str | None:
        leader = self.node.status().leader
        return None if leader is None else self.config.api_address_of(leader)

    def is_leader(self) -> bool:
        return self.node.status().is_leader

    async def wait_leader_current(self) -> None:
        """A new leader first applies every earlier entry, so it never serves stale reads."""
        deadline = time.monotonic() + self.config.commit_timeout_ms / 1000
        while True:
            status = self.node.status()
            if not status.is_leader or status.caught_up:
                return
            if time.monotonic() >= deadline:
                raise _reject(
                    ErrorCode.NOT_LEADER,
                    "this node just became leader and has not applied the log yet; retry",
                )
            await asyncio.sleep(0.005)

    # -- request plumbing

    def check_token(self, request: web.Request) -> None:
        if self.config.insecure_no_auth:
            return
        expected = self.config.token or ""
        header = request.headers.get("Authorization", "")
        scheme, _, provided = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            provided.strip().encode(), expected.strip().encode()
        ):
            raise _reject(
                ErrorCode.UNAUTHORIZED,
                "missing or wrong bearer token: send 'Authorization: Bearer <token>' "
                "with the controller's token",
            )

    async def forward(self, request: web.Request, body: bytes) -> web.Response:
        """Relay the request to the leader; 503 NOT_LEADER if that is impossible."""
        status = self.node.status()
        leader_api = self.leader_api()
        if request.headers.get(FORWARDED_HEADER) or leader_api is None or status.is_leader:
            raise _reject(
                ErrorCode.NOT_LEADER,
                "this node is not the Raft leader and cannot forward"
                + (f"; the leader is {leader_api}" if leader_api else "; no leader is known yet"),
                leader=leader_api,
            )
        assert self._session is not None
        headers = {FORWARDED_HEADER: self.config.self_address, "Content-Type": "application/json"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        timeout_s = self.config.forward_timeout_ms / 1000
        if request.path == "/v1/watch":
            timeout_s += (
                min(
                    int_field(request.query, "timeoutMs", text=True),
                    self.config.watch_max_timeout_ms,
                )
                / 1000
            )
        url = f"http://{leader_api}{request.path_qs}"
        self.metrics.forwarded.inc()
        try:
            async with self._session.request(
                request.method,
                url,
                data=body if request.method == "POST" else None,
                headers=headers,
                timeout=ClientTimeout(total=timeout_s),
            ) as upstream:
                payload = await upstream.read()
                return web.Response(
                    status=upstream.status,
                    body=payload,
                    content_type="application/json",
                    headers={LEADER_HEADER: leader_api},
                )
        except (ClientError, TimeoutError) as exc:
            raise _reject(
                ErrorCode.NOT_LEADER,
                f"forwarding to the leader {leader_api} failed ({type(exc).__name__}); "
                "retry, or try the leader directly",
                leader=leader_api,
            ) from exc

    # -- state helpers (leader)

    def _snapshot(self, cluster: str, name: str) -> BrokerSet | None:
        return self.node.read(lambda s: s.snapshot(cluster, name))

    def _require_set(self, cluster: str, name: str) -> BrokerSet:
        broker_set = self._snapshot(cluster, name)
        if broker_set is None:
            raise _reject(
                ErrorCode.BROKER_SET_NOT_FOUND,
                f"no broker set {cluster}/{name}: brokers must apply for a BrokerId first",
            )
        return broker_set

    def _require_registered(self, cluster: str, name: str, broker_id: int) -> BrokerSet:
        broker_set = self._snapshot(cluster, name)
        if broker_set is None or broker_id not in broker_set.brokers:
            raise _reject(
                ErrorCode.NEED_TO_BE_REGISTERED,
                f"broker {cluster}/{name}:{broker_id} has no BrokerId assigned; "
                "run GetNextBrokerId/ApplyBrokerId first",
            )
        return broker_set

    def replica_info(self, broker_set: BrokerSet) -> api.ReplicaInfo:
        now = self.clock_ms()
        key = broker_set.key
        master = broker_set.master_broker_id
        master_alive = master is not None and self.liveness.is_alive((*key, master), now)
        brokers = []
        for broker_id, record in sorted(broker_set.brokers.items()):
            view = self.liveness.view((*key, broker_id), now)
            brokers.append(
                api.BrokerLiveness(
                    broker_id=broker_id,
                    address=record.address,
                    alive=view.alive,
                    epoch=view.epoch,
                    max_offset=view.max_offset,
                    confirm_offset=view.confirm_offset,
                    election_priority=view.election_priority,
                    last_heartbeat_age_ms=view.last_heartbeat_age_ms,
                )
            )
        return api.ReplicaInfo(
            cluster_name=broker_set.cluster_name,
            broker_name=broker_set.broker_name,
            master_broker_id=master,
            master_address=None if master is None else broker_set.brokers[master].address,
            master_alive=master_alive,
            master_takeover_wait_ms=0
            if master is None
            else self.liveness.takeover_remaining_ms(key, now),
            master_epoch=broker_set.master_epoch,
            sync_state_set=frozenset(broker_set.sync_state_set),
            sync_state_set_epoch=broker_set.sync_state_set_epoch,
            next_broker_id=broker_set.next_broker_id,
            brokers=tuple(brokers),
        )

    def _info_body(self, cluster: str, name: str) -> dict[str, Any]:
        broker_set = self._require_set(cluster, name)
        return {"code": ErrorCode.SUCCESS.value, **self.replica_info(broker_set).to_json()}

    async def _propose(self, event: Event) -> dict[str, Any]:
        try:
            result = await self.node.propose(event, self.config.commit_timeout_ms / 1000)
        except ControllerError as exc:
            raise _reject(exc.code, exc.message, leader=self.leader_api()) from exc
        if not result.ok:
            raise _reject(result.code, result.message, **result.details)
        return result.details

    # -- endpoints (leader side; input already validated)

    async def next_broker_id(self, request: web.Request, q: dict[str, Any]) -> dict[str, Any]:
        cluster, name = q["clusterName"], q["brokerName"]
        return {"nextBrokerId": self.node.read(lambda s: s.next_broker_id(cluster, name))}

    async def apply_broker_id(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
        details = await self._propose(
            ApplyBrokerId(
                b["clusterName"], b["brokerName"], b["brokerId"], b["registerCode"], b["address"]
            )
        )
        return {"brokerId": details["brokerId"], "nextBrokerId": details["nextBrokerId"]}

    async def register_broker(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name, broker_id, address = (
            b["clusterName"],
            b["brokerName"],
            b["brokerId"],
            b["address"],
        )
        broker_set = self._require_registered(cluster, name, broker_id)
        if broker_set.brokers[broker_id].address != address:
            # Only an address change is worth a Raft commit (persistent-broker-id seed §5.1).
            await self._propose(RegisterBroker(cluster, name, broker_id, address))
        self.liveness.touch((cluster, name, broker_id), address, self.clock_ms())
        return self._info_body(cluster, name)

    async def heartbeat(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
        hb: api.BrokerHeartbeat = b["heartbeat"]
        key = (hb.cluster_name, hb.broker_name, hb.broker_id)
        broker_set = self._require_registered(hb.cluster_name, hb.broker_name, hb.broker_id)
        now = self.clock_ms()
        was_alive = self.liveness.is_alive(key, now)
        self.liveness.heartbeat(hb, now)
        if not request.headers.get(FORWARDED_HEADER) and request.transport is not None:
            self._heartbeat_transports[key] = request.transport
        if (
            was_alive
            and not self.liveness.is_alive(key, now)
            and broker_set.master_broker_id == hb.broker_id
        ):
            # The master says its store cannot take writes: fail over before answering.
            await self.run_liveness_tick()
        return self._info_body(hb.cluster_name, hb.broker_name)

    async def report_inactive(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name, broker_id = b["clusterName"], b["brokerName"], b["brokerId"]
        self._require_set(cluster, name)
        self._require_registered(cluster, name, broker_id)
        self.liveness.report_inactive(
            (cluster, name, broker_id), b["reason"], self.clock_ms(), process_gone=b["processGone"]
        )
        log.info(
            "broker %s/%s:%d reported inactive%s: %s",
            cluster, name, broker_id, " (process gone)" if b["processGone"] else "", b["reason"],
        )  # fmt: skip
        await self.run_liveness_tick()  # a dead master is replaced before we answer
        return self._info_body(cluster, name)

    async def alter_sync_state_set(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
        cluster, name = b["clusterName"], b["brokerName"]
        event = AlterSyncStateSet(
            cluster,
            name,
            master_broker_id=b["masterBrokerId"],
            master_epoch=b["masterEpoch"],
            sync_state_set=frozenset(b["syncStateSet"]),
            sync_state_set_epoch=b["syncStateSetEpoch"],
        )
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
        details = await self._propose(event)
        return {
            "syncStateSet": details["syncStateSet"],
            "syncStateSetEpoch": details["syncStateSetEpoch"],
        }

    async def elect_master(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
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
        await self._elect(broker_set, request_)
        return self._info_body(cluster, name)

    async def _elect(self, broker_set: BrokerSet, request: ElectionRequest) -> None:
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
        try:
            await self._propose(decision.event)
        except _Reply as reply:
            self.metrics.elections.labels(request.trigger.value, reply.body["code"]).inc()
            raise
        self.metrics.elections.labels(request.trigger.value, ErrorCode.SUCCESS.value).inc()
        log.info("%s (masterEpoch was %d)", decision.message, broker_set.master_epoch)
        after = self._snapshot(*broker_set.key)
        if after is not None and after.master_epoch > broker_set.master_epoch:
            old = broker_set.master_broker_id
            wait = self.liveness.record_takeover(
                broker_set.key,
                None if old == after.master_broker_id else old,
                self.clock_ms(),
                new_master_in_sync_state_set=after.master_broker_id in broker_set.sync_state_set,
            )
            if wait > 0 and after.master_broker_id is not None:
                log.info(
                    "master %s of %s/%s may hold its lease for %d ms more: broker %d holds its "
                    "acknowledgements until then",
                    old, *broker_set.key, wait, after.master_broker_id,
                )  # fmt: skip

    async def clean_broker_data(self, request: web.Request, b: dict[str, Any]) -> dict[str, Any]:
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
        details = await self._propose(CleanBrokerData(cluster, name, broker_ids=event_ids))
        for broker_id in details["removed"]:
            self.liveness.forget((cluster, name, broker_id))
        return {"removed": details["removed"]}

    async def get_replica_info(self, request: web.Request, q: dict[str, Any]) -> dict[str, Any]:
        return self._info_body(q["clusterName"], q["brokerName"])

    async def groups(self, request: web.Request, q: dict[str, Any]) -> dict[str, Any]:
        sets = self.node.read(lambda s: [s.snapshot(c, n) for (c, n) in sorted(s.broker_sets)])
        return {"groups": [self.replica_info(bs).to_json() for bs in sets if bs is not None]}

    async def watch(self, request: web.Request, q: dict[str, Any]) -> dict[str, Any]:
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

    def raft_body(self) -> dict[str, Any]:
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

    # -- liveness loop (leader)

    async def _liveness_loop(self) -> None:
        assert self._tick_now is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._tick_now.wait(), self.config.liveness_tick_ms / 1000)
            self._tick_now.clear()
            try:
                await self.run_liveness_tick()
            except Exception:
                log.exception("liveness tick failed")

    async def run_liveness_tick(self) -> None:
        """Elect for every set whose master just became inactive (or whose retry is due)."""
        if not self.node.status().is_leader:
            return
        now = self.clock_ms()
        for key, transport in list(self._heartbeat_transports.items()):
            if transport.is_closing():
                self.liveness.connection_closed(key, now)
                del self._heartbeat_transports[key]

        def watched(state: ControllerState) -> dict[tuple[str, str], WatchedSet]:
            return {
                key: WatchedSet(bs.master_broker_id, frozenset(bs.brokers))
                for key, bs in state.broker_sets.items()
                if bs.master_broker_id is not None or bs.master_epoch > 0
            }

        due = self.liveness.tick(now, self.node.read(watched))
        if due:
            await asyncio.gather(*(self._controller_election(key) for key in due))

    async def _controller_election(self, key: tuple[str, str]) -> None:
        succeeded = False
        try:
            broker_set = self._snapshot(*key)
            if broker_set is None:
                succeeded = True
                return
            master = broker_set.master_broker_id
            if master is not None:
                reason = self.liveness.inactive_reason((*key, master), self.clock_ms())
                log.warning(
                    "master %s/%s:%d is inactive (%s): electing at once", *key, master, reason
                )
            await self._elect(
                broker_set,
                ElectionRequest(
                    trigger=ElectionTrigger.CONTROLLER,
                    enable_elect_unclean_master=self.config.enable_elect_unclean_master,
                ),
            )
            succeeded = True
        except _Reply as reply:
            # MASTER_STILL_EXIST: the master came back; that ends the retries too.
            succeeded = reply.body.get("code") == ErrorCode.MASTER_STILL_EXIST.value
            if not succeeded:
                log.info("controller election for %s/%s: %s", *key, reply.body.get("message"))
        except Exception:
            log.exception("controller election for %s/%s failed", *key)
        finally:
            self.liveness.election_attempted(key, self.clock_ms(), succeeded=succeeded)

    def kick_liveness(self) -> None:
        if self._tick_now is not None:
            self._tick_now.set()


# ---------------------------------------------------------------- endpoint table


@dataclass(frozen=True)
class _Endpoint:
    name: str
    method: str
    path: str
    parse: Callable[[Mapping[str, Any]], dict[str, Any]]
    handler: Callable[[ControllerService], Handler]


_ENDPOINTS = (
    _Endpoint("next_broker_id", "GET", "/v1/next-broker-id", query_key, lambda s: s.next_broker_id),
    _Endpoint(
        "apply_broker_id", "POST", "/v1/brokers/apply-id", parse_apply, lambda s: s.apply_broker_id
    ),
    _Endpoint(
        "register", "POST", "/v1/brokers/register", parse_register, lambda s: s.register_broker
    ),
    _Endpoint("heartbeat", "POST", "/v1/brokers/heartbeat", parse_heartbeat, lambda s: s.heartbeat),
    _Endpoint(
        "inactive", "POST", "/v1/brokers/inactive", parse_inactive, lambda s: s.report_inactive
    ),
    _Endpoint(
        "alter_sync_state_set",
        "POST",
        "/v1/sync-state-set/alter",
        parse_alter,
        lambda s: s.alter_sync_state_set,
    ),
    _Endpoint("elect_master", "POST", "/v1/elect-master", parse_elect, lambda s: s.elect_master),
    _Endpoint("clean", "POST", "/v1/brokers/clean", parse_clean, lambda s: s.clean_broker_data),
    _Endpoint("replica_info", "GET", "/v1/replica-info", query_key, lambda s: s.get_replica_info),
    _Endpoint("groups", "GET", "/v1/groups", parse_none, lambda s: s.groups),
    _Endpoint("watch", "GET", "/v1/watch", parse_watch, lambda s: s.watch),
)


def _route(
    service: ControllerService, endpoint: _Endpoint
) -> Callable[[web.Request], Awaitable[web.Response]]:
    handler = endpoint.handler(service)

    async def route(request: web.Request) -> web.Response:
        started = time.perf_counter()
        leader_api = service.leader_api()
        try:
            body = b""
            if endpoint.method == "POST":
                service.check_token(request)
                body = await request.read()
                try:
                    data = json.loads(body) if body else None
                except ValueError as exc:
                    raise BadRequest(f"request body is not valid JSON: {exc}") from None
                if not isinstance(data, dict):
                    raise BadRequest("request body must be a JSON object")
            else:
                data = dict(request.query)
            parsed = endpoint.parse(data)
            await service.wait_leader_current()
            if not service.is_leader():
                response = await service.forward(request, body)
            else:
                result = await handler(request, parsed)
                result.setdefault("code", ErrorCode.SUCCESS.value)
                response = _json(200, result, leader_api)
        except BadRequest as exc:
            response = _json(400, _error_body(ErrorCode.BAD_REQUEST, str(exc)), leader_api)
        except _Reply as reply:
            response = _json(reply.status, reply.body, leader_api)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            response = _json(
                500,
                _error_body(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"),
                leader_api,
            )
        code = _response_code(response)
        service.metrics.requests.labels(endpoint.name, code).inc()
        service.metrics.latency.labels(endpoint.name).observe(time.perf_counter() - started)
        return response

    return route


def _response_code(response: web.Response) -> str:
    if response.status == 200:
        return ErrorCode.SUCCESS.value
    try:
        body = json.loads(response.body) if isinstance(response.body, bytes) else {}
        return str(body.get("code", response.status))
    except ValueError:
        return str(response.status)


def create_app(
    config: ControllerConfig, node: ControllerRaftNode, *, clock_ms: Callable[[], int] | None = None
) -> web.Application:
    """The aiohttp app of one node; `node` must be started by the caller."""
    service = ControllerService(config, node, clock_ms=clock_ms)
    app = web.Application(client_max_size=1 << 20)
    app[SERVICE_KEY] = service
    for endpoint in _ENDPOINTS:
        app.router.add_route(endpoint.method, endpoint.path, _route(service, endpoint))

    async def raft(request: web.Request) -> web.Response:
        return _json(200, service.raft_body(), service.leader_api())

    async def metrics(request: web.Request) -> web.Response:
        status = node.status()
        m = service.metrics
        m.term.set(status.term)
        m.commit_index.set(status.commit_index)
        m.last_applied.set(status.last_applied)
        m.is_leader.set(1 if status.is_leader else 0)
        m.broker_sets.set(node.read(lambda s: len(s.broker_sets)))
        if status.is_leader:
            now = service.clock_ms()
            m.alive_brokers.set(
                sum(
                    1
                    for bs in node.read(lambda s: list(s.broker_sets.values()))
                    for b in bs.brokers
                    if service.liveness.is_alive((*bs.key, b), now)
                )
            )
        return web.Response(
            body=generate_latest(m.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(request: web.Request) -> web.Response:
        return _json(200, {"code": ErrorCode.SUCCESS.value, "status": "alive"})

    async def readyz(request: web.Request) -> web.Response:
        status = node.status()
        if status.caught_up:
            return _json(200, {"code": ErrorCode.SUCCESS.value, "status": "ready"})
        reason = (
            "no Raft leader known"
            if status.leader is None
            else f"applied {status.last_applied} of {status.leader_commit_index}"
        )
        return _json(503, _error_body(ErrorCode.NOT_LEADER, f"not ready: {reason}"))

    app.router.add_get("/v1/raft", raft)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

    async def on_startup(app: web.Application) -> None:
        await service.start()

    async def on_cleanup(app: web.Application) -> None:
        await service.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


SERVICE_KEY = web.AppKey("service", ControllerService)

# ---------------------------------------------------------------- process entry


async def serve(config: ControllerConfig, *, stop: asyncio.Event | None = None) -> None:
    """Run one node until `stop` is set (or SIGTERM/SIGINT)."""
    node = ControllerRaftNode(config.raft_settings())
    node.start()
    app = create_app(config, node)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, config.bind_address, config.api_port, reuse_address=True)
    await site.start()
    log.info(
        "controller node %d (%s) serving API on %s:%d, data in %s",
        config.node_id,
        config.self_address,
        config.bind_address,
        config.api_port,
        config.data_dir,
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
        await asyncio.to_thread(node.stop)


__all__ = [
    "DEFAULT_API_PORT",
    "DEFAULT_RAFT_PORT",
    "ControllerConfig",
    "config_from_sources",
    "create_app",
    "load_config",
    "read_token_file",
    "serve",
]
