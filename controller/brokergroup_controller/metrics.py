"""The controller's Prometheus metrics (one registry per node, served at /metrics): the
service counts elections, the HTTP API requests, latency and forwards."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
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
