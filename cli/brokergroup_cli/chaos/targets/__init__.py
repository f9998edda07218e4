"""Chaos targets (`brokergroup chaos --target`): the interface in `base`, one module per
target. `make_target` builds one by name."""

from __future__ import annotations

from pathlib import Path

from brokergroup_cli.chaos.targets.base import (
    ClientEndpoint,
    Node,
    NodeKind,
    ReplicaStore,
    Target,
    TargetError,
)

TARGETS = ("local", "local-rocketmq", "rocketmq")
#: The workloads: the project's own clients (`local` only) and the stock RocketMQ client.
WORKLOADS = ("own", "stock")
#: A stock broker's JVM start on a loaded two-core machine.
_ROCKETMQ_UP_SETTINGS = ("local.upWaitTimeoutMs=240000",)


def default_workload(target: str) -> str:
    """`own` for `local` (today's default run), `stock` for the targets only it can drive."""
    return "own" if target == "local" else "stock"


def check_choice(target: str, workload: str) -> str | None:
    """Why this target/workload pair cannot run, or None."""
    if target not in TARGETS:
        return f"unknown target {target!r}; known: {', '.join(TARGETS)}"
    if workload not in WORKLOADS:
        return f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}"
    if workload == "own" and target != "local":
        return f"target {target} runs stock RocketMQ brokers: only the stock workload reaches them"
    return None


def make_target(
    target: str,
    root: Path,
    *,
    lane: int,
    settings: tuple[str, ...] = (),
    broker_disk_bytes: int | None = None,
) -> Target:
    """A target by name, not started (`up()`)."""
    from brokergroup_cli.chaos.runtime import Addresses
    from brokergroup_cli.chaos.targets.local import LocalTarget
    from brokergroup_cli.chaos.targets.rocketmq import RocketMQTarget

    if target == "local":
        return LocalTarget(
            root, Addresses(lane), settings=settings, broker_disk_bytes=broker_disk_bytes
        )
    if target == "local-rocketmq":
        return LocalTarget(
            root, Addresses(lane), settings=(*_ROCKETMQ_UP_SETTINGS, *settings),
            broker_disk_bytes=broker_disk_bytes, engine="rocketmq", up_timeout_s=300.0,
        )  # fmt: skip
    if target == "rocketmq":
        return RocketMQTarget(root, lane=lane, settings=settings)
    raise ValueError(check_choice(target, "stock"))


__all__ = [
    "TARGETS",
    "WORKLOADS",
    "ClientEndpoint",
    "Node",
    "NodeKind",
    "ReplicaStore",
    "Target",
    "TargetError",
    "check_choice",
    "default_workload",
    "make_target",
]
