"""Chaos targets (`brokergroup chaos --target`): the interface in `base`, one module per
target. `make_target` builds one by name."""

from __future__ import annotations

from brokergroup_cli.chaos.targets.base import (
    ClientEndpoint,
    Node,
    NodeKind,
    ReplicaStore,
    Target,
    TargetError,
)

TARGETS = ("local", "local-rocketmq", "rocketmq")

__all__ = [
    "TARGETS",
    "ClientEndpoint",
    "Node",
    "NodeKind",
    "ReplicaStore",
    "Target",
    "TargetError",
]
