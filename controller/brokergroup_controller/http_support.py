"""HTTP plumbing of the controller's app: reply helpers (a `ControllerError` as its JSON
answer), the headers of forwarding, and the Prometheus metrics the service counts."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from brokergroup_controller.api import ReplicaInfo
from brokergroup_controller.errors import ControllerError, ErrorCode, http_status

log = logging.getLogger(__name__)


FORWARDED_HEADER = "X-Brokergroup-Forwarded-By"


LEADER_HEADER = "X-Brokergroup-Leader"


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


def _json(status: int, body: dict[str, Any], leader_api: str | None = None) -> web.Response:
    headers = {LEADER_HEADER: leader_api} if leader_api else None
    return web.json_response(body, status=status, headers=headers)


def _error_body(code: ErrorCode, message: str, **details: Any) -> dict[str, Any]:
    return {"code": code.value, "message": message, **details}


def _refusal(exc: ControllerError, leader_api: str | None = None) -> web.Response:
    """A service refusal as the HTTP API answers it: the code's status, and a body of the
    code, message and details (a ReplicaInfo detail in its JSON form)."""
    details = {
        name: value.to_json() if isinstance(value, ReplicaInfo) else value
        for name, value in exc.details.items()
    }
    return _json(http_status(exc.code), _error_body(exc.code, exc.message, **details), leader_api)
