"""The status writer: the end of every pass writes the group's status and its
Events, and the per-group gauges.

status.build_status decides (pure: the facts in, the status and the Events
out); this module gathers the facts, posts the Events, sets the gauges and
patches the status subresource only when something in it changed. A group
that cannot run as specified (no secrets, an invalid spec) is reported here
too: Ready=False with the reason, one Event per new reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brokergroup_operator import metrics
from brokergroup_operator.conditions import READY
from brokergroup_operator.containers import engine_container
from brokergroup_operator.model import GroupView, PodFacts
from brokergroup_operator.runtime import GroupMemory, PostEvent, Runtime, now_iso, now_ms
from brokergroup_operator.spec import GroupContext
from brokergroup_operator.status import StatusInput, build_status


def why_blocked(rt: Runtime, ctx: GroupContext) -> tuple[str, str] | None:
    """(reason, message) when the group cannot run as specified, else None."""
    if rt.secrets_problem is not None:
        return ("SecretMissing", f"{rt.secrets_problem}. Broker pods cannot start")
    try:
        ctx.validate()
        # What the pods would run: refusals of combinations (a group without spec.tls
        # under an HTTPS-only controller API, engine rocketmq's enforcing limits).
        engine_container(ctx)
    except ValueError as exc:  # SpecError, RocketMQSpecError
        return ("InvalidSpec", str(exc))
    return None


async def write_blocked(
    rt: Runtime,
    ctx: GroupContext,
    body: Mapping[str, Any],
    pods: tuple[PodFacts, ...],
    sts: Mapping[str, Any] | None,
    previous: dict[str, Any],
    blocked: tuple[str, str],
    post: PostEvent,
) -> None:
    status, _events = build_status(
        _status_input(ctx, body, sts, pods, previous, view=None, blocked=blocked)
    )
    before = {c.get("type"): c for c in previous.get("conditions") or []}.get(READY) or {}
    if (before.get("reason"), before.get("message")) != blocked:
        post("Warning", *blocked)
    if _status_changed(previous, status):
        await rt.kube.patch_group_status(ctx.namespace, ctx.name, status)


async def write_status(
    rt: Runtime,
    ctx: GroupContext,
    body: Mapping[str, Any],
    mem: GroupMemory,
    pods: tuple[PodFacts, ...],
    sts: Mapping[str, Any] | None,
    previous: dict[str, Any],
    view: GroupView | None,
    waiting: str | None,
    post: PostEvent,
    *,
    storage: tuple[str, str, str] | None = None,
) -> None:
    """`storage`: the StorageResized condition (resize.grow_volumes; None keeps the
    previous one)."""
    key = (ctx.namespace, ctx.name)
    status, events = build_status(
        _status_input(
            ctx,
            body,
            sts,
            pods,
            previous,
            view=view,
            master_lost_at_ms=mem.master_lost_at_ms,
            plan_reason=waiting,
            storage=storage,
        )
    )
    if view is not None and view.live_master is not None:
        metrics.MASTER_EPOCH.labels(*key).set(view.master_epoch)
        metrics.SYNC_STATE_SET_SIZE.labels(*key).set(len(view.sync_state_set))
    failover = status.get("lastFailover") or {}
    if failover.get("durationMs") is not None:
        metrics.LAST_FAILOVER_MS.labels(*key).set(failover["durationMs"])
    for event in events:
        post(event.type, event.reason, event.message)
    if _status_changed(previous, status):
        await rt.kube.patch_group_status(ctx.namespace, ctx.name, status)


def _status_input(
    ctx: GroupContext,
    body: Mapping[str, Any],
    sts: Mapping[str, Any] | None,
    pods: tuple[PodFacts, ...],
    previous: dict[str, Any],
    **facts: Any,
) -> StatusInput:
    sts_status = (sts or {}).get("status") or {}
    return StatusInput(
        group=ctx.name,
        generation=int((body.get("metadata") or {}).get("generation") or 0),
        replicas=ctx.replicas,
        min_in_sync_replicas=ctx.min_in_sync_replicas,
        update_revision=str(sts_status.get("updateRevision") or ""),
        current_revision=str(sts_status.get("currentRevision") or ""),
        pods=pods,
        previous=previous,
        now_iso=now_iso(),
        now_ms=now_ms(),
        **facts,
    )


def _status_changed(previous: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    return any(previous.get(k) != v for k, v in status.items())
