"""The controller's aiohttp application and process entry: the HTTP API, one front end over
the service (`server.ControllerService`, `endpoints.Endpoints`; docs/architecture.md).

The endpoint table maps path → parser (`request_parsing`: JSON body or query → the typed
request) → answer (the `Endpoints` call, its typed answer as the API's JSON). The route
wrapper authenticates before the body is read (api_auth.py), parses, checks the caller's
role and group (the service's `authorize`), forwards to the leader from a follower, calls
the service on the leader, and turns a `ControllerError` into its status and JSON body
(`http_support._refusal`); it counts metrics. Health and metrics pages are open (no
credential); `serve` runs `brokergroup controller`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from brokergroup_controller import api
from brokergroup_controller import requests as rq
from brokergroup_controller.api_auth import ApiAuth
from brokergroup_controller.config import (
    ControllerConfig,
)
from brokergroup_controller.endpoints import Endpoints
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.http_support import (
    FORWARDED_HEADER,
    LEADER_HEADER,
    error_body,
    json_answer,
    refusal_answer,
)
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
    parse_next_broker_id,
    parse_none,
    parse_register,
    parse_watch,
    query_key,
)
from brokergroup_controller.requests import Caller
from brokergroup_controller.rocketmq_front import ControllerRemoting, start_remoting_front
from brokergroup_controller.server import ControllerService
from brokergroup_controller.users_endpoints import (
    delete_user,
    get_user,
    list_users,
    parse_delete_user,
    parse_list_users,
    parse_put_user,
    parse_user,
    parse_users_snapshot,
    put_user,
    users_snapshot,
)
from brokergroup_remoting.net import budgeted_logger
from brokergroup_remoting.tls import run_reloader

if TYPE_CHECKING:
    from brokergroup_controller.namesrv.server import NameServer

log = logging.getLogger(__name__)


def _info_json(info: api.ReplicaInfo) -> dict[str, Any]:
    return {"code": ErrorCode.SUCCESS.value, **info.to_json()}


# The answers as JSON (the key order is the API's: "code" first where the answer is a
# ReplicaInfo, else added last by the route).


async def _next_broker_id(e: Endpoints, r: rq.GetNextBrokerId, c: Caller) -> dict[str, Any]:
    return {"nextBrokerId": await e.next_broker_id(r, c)}


async def _apply_broker_id(e: Endpoints, r: rq.ApplyBrokerId, c: Caller) -> dict[str, Any]:
    applied = await e.apply_broker_id(r, c)
    return {"brokerId": applied.broker_id, "nextBrokerId": applied.next_broker_id}


async def _register(e: Endpoints, r: rq.RegisterBroker, c: Caller) -> dict[str, Any]:
    return _info_json(await e.register_broker(r, c))


async def _heartbeat(e: Endpoints, r: rq.Heartbeat, c: Caller) -> dict[str, Any]:
    return _info_json(await e.heartbeat(r, c))


async def _inactive(e: Endpoints, r: rq.ReportInactive, c: Caller) -> dict[str, Any]:
    report = await e.report_inactive(r, c)
    return {**_info_json(report.replica_info), "reportIgnored": report.ignored}


async def _alter(e: Endpoints, r: rq.AlterSyncStateSet, c: Caller) -> dict[str, Any]:
    altered = await e.alter_sync_state_set(r, c)
    return {"syncStateSet": sorted(altered.members), "syncStateSetEpoch": altered.epoch}


async def _elect(e: Endpoints, r: rq.ElectMaster, c: Caller) -> dict[str, Any]:
    return _info_json(await e.elect_master(r, c))


async def _clean(e: Endpoints, r: rq.CleanBrokerData, c: Caller) -> dict[str, Any]:
    return {"removed": list(await e.clean_broker_data(r, c))}


async def _replica_info(e: Endpoints, r: rq.GetReplicaInfo, c: Caller) -> dict[str, Any]:
    return _info_json(await e.get_replica_info(r, c))


async def _groups(e: Endpoints, r: rq.ListGroups, c: Caller) -> dict[str, Any]:
    return {"groups": [info.to_json() for info in await e.groups(r, c)]}


async def _watch(e: Endpoints, r: rq.Watch, c: Caller) -> dict[str, Any]:
    return _info_json(await e.watch(r, c))


@dataclass(frozen=True)
class _Endpoint:
    name: str
    method: str
    path: str
    parse: Callable[[Mapping[str, Any]], rq.ServiceRequest]
    """JSON body or query → the typed request (BadRequest naming the field)."""
    answer: Callable[[Endpoints, Any, Caller], Awaitable[dict[str, Any]]]
    """The service call, its answer as JSON."""


_USER_PATH = "/v1/clusters/{cluster}/users/{accessKey}"

_ENDPOINTS = (
    _Endpoint("next_broker_id", "GET", "/v1/next-broker-id", parse_next_broker_id, _next_broker_id),
    _Endpoint("apply_broker_id", "POST", "/v1/brokers/apply-id", parse_apply, _apply_broker_id),
    _Endpoint("register", "POST", "/v1/brokers/register", parse_register, _register),
    _Endpoint("heartbeat", "POST", "/v1/brokers/heartbeat", parse_heartbeat, _heartbeat),
    _Endpoint("inactive", "POST", "/v1/brokers/inactive", parse_inactive, _inactive),
    _Endpoint("alter_sync_state_set", "POST", "/v1/sync-state-set/alter", parse_alter, _alter),
    _Endpoint("elect_master", "POST", "/v1/elect-master", parse_elect, _elect),
    _Endpoint("clean", "POST", "/v1/brokers/clean", parse_clean, _clean),
    _Endpoint("replica_info", "GET", "/v1/replica-info", query_key, _replica_info),
    _Endpoint("groups", "GET", "/v1/groups", parse_none, _groups),
    _Endpoint("watch", "GET", "/v1/watch", parse_watch, _watch),
    # Users with rights (users_endpoints.py; docs/security.md "Users with rights").
    _Endpoint("list_users", "GET", "/v1/clusters/{cluster}/users", parse_list_users, list_users),
    _Endpoint("put_user", "PUT", _USER_PATH, parse_put_user, put_user),
    _Endpoint("get_user", "GET", _USER_PATH, parse_user, get_user),
    _Endpoint("delete_user", "DELETE", _USER_PATH, parse_delete_user, delete_user),
    _Endpoint(
        "users_snapshot",
        "GET",
        "/v1/clusters/{cluster}/users-snapshot",
        parse_users_snapshot,
        users_snapshot,
    ),
)


class _HttpFront:
    """The HTTP API's edge state of one node: authentication and forwarding to the leader."""

    def __init__(self, service: ControllerService) -> None:
        self.service = service
        self.auth = ApiAuth(service.config.credential_keys(), service.config.raft_password)
        self._session: ClientSession | None = None
        self._scheme = "http"

    async def start(self) -> None:
        config = self.service.config
        # Forwarding is an internal link: HTTPS with this node's certificate (mutual TLS)
        # when the API is HTTPS.
        tls = config.forward_tls()
        self._scheme = "http" if tls is None else "https"
        self._session = ClientSession(
            timeout=ClientTimeout(total=config.forward_timeout_ms / 1000),
            connector=TCPConnector(ssl=True if tls is None else tls),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(self, request: web.Request, body: bytes) -> web.Response:
        """Relay the request to the leader; 503 NOT_LEADER if that is impossible."""
        service, config = self.service, self.service.config
        status = service.node.status()
        leader_api = service.leader_api()
        if request.headers.get(FORWARDED_HEADER) or leader_api is None or status.is_leader:
            raise ControllerError(
                ErrorCode.NOT_LEADER,
                "this node is not the Raft leader and cannot forward"
                + (f"; the leader is {leader_api}" if leader_api else "; no leader is known yet"),
                leader=leader_api,
            )
        assert self._session is not None
        headers = {FORWARDED_HEADER: config.self_address, "Content-Type": "application/json"}
        if "Authorization" in request.headers:
            headers["Authorization"] = request.headers["Authorization"]
        headers.update(self.auth.forwarding_headers(request))
        timeout_s = config.forward_timeout_ms / 1000
        if request.path == "/v1/watch":
            timeout_s += (
                min(int_field(request.query, "timeoutMs", text=True), config.watch_max_timeout_ms)
                / 1000
            )
        url = f"{self._scheme}://{leader_api}{request.path_qs}"
        service.metrics.forwarded.inc()
        try:
            async with self._session.request(
                request.method,
                url,
                data=body if request.method in ("POST", "PUT") else None,
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
            raise ControllerError(
                ErrorCode.NOT_LEADER,
                f"forwarding to the leader {leader_api} failed ({type(exc).__name__}); "
                "retry, or try the leader directly",
                leader=leader_api,
            ) from exc


def raft_body(service: ControllerService) -> dict[str, Any]:
    """GET /v1/raft: this node's view of the Raft group."""
    status = service.node.status()
    return {
        "code": ErrorCode.SUCCESS.value,
        "nodeId": service.config.node_id,
        "self": status.self_address,
        "leader": status.leader,
        "leaderApi": service.leader_api(),
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
                "api": service.config.api_address_of(member),
                "self": member == status.self_address,
                "connected": member == status.self_address or member in status.connected,
                "leader": member == status.leader,
            }
            for member in status.members
        ],
    }


def _route(
    front: _HttpFront, endpoint: _Endpoint
) -> Callable[[web.Request], Awaitable[web.Response]]:
    service = front.service

    async def route(request: web.Request) -> web.Response:
        started = time.perf_counter()
        leader_api = service.leader_api()
        try:
            body = b""
            front.auth.authenticate(request)
            if endpoint.method in ("POST", "PUT"):
                body = await request.read()
                try:
                    data = json.loads(body) if body else None
                except ValueError as exc:
                    raise BadRequest(f"request body is not valid JSON: {exc}") from None
                if not isinstance(data, dict):
                    raise BadRequest("request body must be a JSON object")
            else:
                data = dict(request.query)
            data = {**data, **request.match_info}  # path parameters win over the body's
            parsed = endpoint.parse(data)
            caller = front.auth.caller(request)
            service.endpoints.authorize(caller.roles_only(), parsed)  # before forwarding
            await service.wait_leader_current()
            if not service.is_leader():
                response = await front.forward(request, body)
            else:
                result = await endpoint.answer(service.endpoints, parsed, caller)
                result.setdefault("code", ErrorCode.SUCCESS.value)
                response = json_answer(200, result, leader_api)
        except ControllerError as exc:  # BadRequest too: 400
            response = refusal_answer(exc, leader_api)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.path)
            response = json_answer(
                500,
                error_body(ErrorCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}"),
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
    front = _HttpFront(service)
    app = web.Application(client_max_size=1 << 20)
    app[SERVICE_KEY] = service
    for endpoint in _ENDPOINTS:
        app.router.add_route(endpoint.method, endpoint.path, _route(front, endpoint))

    async def raft(request: web.Request) -> web.Response:
        try:
            front.auth.authenticate(request)
        except ControllerError as exc:
            return refusal_answer(exc, service.leader_api())
        return json_answer(200, raft_body(service), service.leader_api())

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
        return json_answer(200, {"code": ErrorCode.SUCCESS.value, "status": "alive"})

    async def readyz(request: web.Request) -> web.Response:
        status = node.status()
        if status.caught_up:
            return json_answer(200, {"code": ErrorCode.SUCCESS.value, "status": "ready"})
        reason = (
            "no Raft leader known"
            if status.leader is None
            else f"applied {status.last_applied} of {status.leader_commit_index}"
        )
        return json_answer(503, error_body(ErrorCode.NOT_LEADER, f"not ready: {reason}"))

    app.router.add_get("/v1/raft", raft)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)

    async def on_startup(app: web.Application) -> None:
        await front.start()
        await service.start()

    async def on_cleanup(app: web.Application) -> None:
        await service.close()
        await front.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


SERVICE_KEY = web.AppKey("service", ControllerService)


async def _start_name_server(
    config: ControllerConfig, node: ControllerRaftNode
) -> NameServer | None:
    """The RocketMQ name server role (port 9876) beside the HTTP API."""
    from brokergroup_controller.namesrv.serve import start_name_server

    return await start_name_server(config, node)


async def serve(config: ControllerConfig, *, stop: asyncio.Event | None = None) -> None:
    """Run one node until `stop` is set (or SIGTERM/SIGINT)."""
    node = ControllerRaftNode(config.raft_settings())
    node.start()
    app = create_app(config, node)
    runner = web.AppRunner(
        app, access_log=None, logger=budgeted_logger("brokergroup_controller.http")
    )
    await runner.setup()
    api_tls = config.api_server_tls()
    site = web.TCPSite(
        runner, config.bind_address, config.api_port, reuse_address=True, ssl_context=api_tls
    )
    await site.start()
    log.info(
        "controller node %d (%s) serving API on %s:%d (%s), data in %s",
        config.node_id,
        config.self_address,
        config.bind_address,
        config.api_port,
        "HTTP" if api_tls is None else "HTTPS",
        config.data_dir,
    )
    remoting = await _start_remoting(config, app[SERVICE_KEY])
    name_server = await _start_name_server(config, node)
    # Renewed certificate files are loaded without a restart (tls.py reload_changed).
    reloader = asyncio.create_task(run_reloader())
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        reloader.cancel()
        if remoting is not None:
            await remoting.close()
        if name_server is not None:
            await name_server.close()
        await runner.cleanup()
        await asyncio.to_thread(node.stop)


async def _start_remoting(
    config: ControllerConfig, service: ControllerService
) -> ControllerRemoting | None:
    """The RocketMQ remoting front end (rocketmq_front), if this node opens it."""
    return await start_remoting_front(config, service)
