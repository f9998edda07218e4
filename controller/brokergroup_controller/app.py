"""The controller's aiohttp application and process entry: the endpoint table
(path → parser → handler, docs/architecture.md), the route wrapper
(authentication before the body is read, validation, access rules, forwarding
to the leader, metrics), health and metrics pages (open, no credential), and `serve` for `brokergroup controller`."""

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

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from brokergroup_controller.config import (
    ControllerConfig,
)
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.http_support import (
    Handler,
    _error_body,
    _json,
    _Reply,
)
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.request_parsing import (
    BadRequest,
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
from brokergroup_controller.rocketmq_front import ControllerRemoting, start_remoting_front
from brokergroup_controller.server import ControllerService

if TYPE_CHECKING:
    from brokergroup_controller.namesrv.server import NameServer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Endpoint:
    name: str
    method: str
    path: str
    parse: Callable[[Mapping[str, Any]], dict[str, Any]]
    handler: Callable[[ControllerService], Handler]


_ENDPOINTS = (
    _Endpoint(
        "next_broker_id",
        "GET",
        "/v1/next-broker-id",
        query_key,
        lambda s: s.endpoints.next_broker_id,
    ),
    _Endpoint(
        "apply_broker_id",
        "POST",
        "/v1/brokers/apply-id",
        parse_apply,
        lambda s: s.endpoints.apply_broker_id,
    ),
    _Endpoint(
        "register",
        "POST",
        "/v1/brokers/register",
        parse_register,
        lambda s: s.endpoints.register_broker,
    ),
    _Endpoint(
        "heartbeat",
        "POST",
        "/v1/brokers/heartbeat",
        parse_heartbeat,
        lambda s: s.endpoints.heartbeat,
    ),
    _Endpoint(
        "inactive",
        "POST",
        "/v1/brokers/inactive",
        parse_inactive,
        lambda s: s.endpoints.report_inactive,
    ),
    _Endpoint(
        "alter_sync_state_set",
        "POST",
        "/v1/sync-state-set/alter",
        parse_alter,
        lambda s: s.endpoints.alter_sync_state_set,
    ),
    _Endpoint(
        "elect_master", "POST", "/v1/elect-master", parse_elect, lambda s: s.endpoints.elect_master
    ),
    _Endpoint(
        "clean", "POST", "/v1/brokers/clean", parse_clean, lambda s: s.endpoints.clean_broker_data
    ),
    _Endpoint(
        "replica_info", "GET", "/v1/replica-info", query_key, lambda s: s.endpoints.get_replica_info
    ),
    _Endpoint("groups", "GET", "/v1/groups", parse_none, lambda s: s.endpoints.groups),
    _Endpoint("watch", "GET", "/v1/watch", parse_watch, lambda s: s.endpoints.watch),
)


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
    service: ControllerService, endpoint: _Endpoint
) -> Callable[[web.Request], Awaitable[web.Response]]:
    handler = endpoint.handler(service)

    async def route(request: web.Request) -> web.Response:
        started = time.perf_counter()
        leader_api = service.leader_api()
        try:
            body = b""
            service.auth.authenticate(request)
            if endpoint.method == "POST":
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
            service.auth.authorize(request, endpoint.name, parsed, None)
            await service.wait_leader_current()
            if not service.is_leader():
                response = await service.forward(request, body)
            else:
                service.auth.authorize(
                    request, endpoint.name, parsed, lambda: service.registered_addresses(parsed)
                )
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
        try:
            service.auth.authenticate(request)
        except _Reply as reply:
            return _json(reply.status, reply.body, service.leader_api())
        return _json(200, raft_body(service), service.leader_api())

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
    remoting = await _start_remoting(config, app[SERVICE_KEY])
    name_server = await _start_name_server(config, node)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
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
