"""The role-label follower: the pods' `role` labels follow the controller's
master, so the client Service (which selects `role=master`) follows a
failover within one pass.

It owns the group's last view of the controller and when the master was
lost (`GroupMemory.view`, `master_lost_at_ms`), and the wait between passes:
a long-poll on the controller's epochs, the group's wake event (pod events,
spec changes, a step that wants a re-plan) or the resync timer, whichever
comes first. The pure decision (which pod gets which label, demotions
first) is labels.label_patches.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping
from typing import Any

import kopf

from brokergroup_operator import metrics
from brokergroup_operator.labels import label_patches
from brokergroup_operator.model import LABEL_ROLE, GroupView, PodFacts
from brokergroup_operator.runtime import GroupMemory, Runtime, now_ms
from brokergroup_operator.spec import GroupContext


async def follow_roles(
    rt: Runtime, ctx: GroupContext, mem: GroupMemory, pods: tuple[PodFacts, ...], view: GroupView
) -> None:
    """Patch the labels the view asks for (demotions first) and remember the view.
    `pods` are updated in place, so the rest of the pass sees the new labels."""
    if view.live_master is None and mem.master_lost_at_ms is None:
        mem.master_lost_at_ms = now_ms()
    for pod, patch in label_patches(pods, view):
        await rt.kube.patch_pod_labels(ctx.namespace, pod.name, patch, pod.uid)
        metrics.LABEL_PATCHES.labels(patch.get(LABEL_ROLE) or "none").inc()
        pod.labels.update({k: v for k, v in patch.items() if v is not None})
        for k, v in patch.items():
            if v is None:
                pod.labels.pop(k, None)
    mem.view = view


def master_found(mem: GroupMemory, view: GroupView | None) -> None:
    """A live master ends the failover that `master_lost_at_ms` timed."""
    if view is not None and view.live_master is not None:
        mem.master_lost_at_ms = None


def master_pod_lost(mem: GroupMemory, broker_id: int) -> None:
    """The master's pod went: the failover's clock starts now (not at the next pass)."""
    view = mem.view
    if view is not None and view.live_master == broker_id:
        mem.master_lost_at_ms = mem.master_lost_at_ms or now_ms()


async def wait_for_change(
    rt: Runtime, body: Mapping[str, Any], mem: GroupMemory, stopped: kopf.DaemonStopped
) -> None:
    """Until the controller's epochs move past the last view, the group is woken,
    the daemon is stopped, or resync_s passes."""
    ctx = rt.context(body)
    view = mem.view
    waiters: list[Awaitable[Any]] = [mem.wake.wait(), stopped.wait(rt.settings.resync_s)]
    if view is not None:
        waiters.append(
            rt.controller(ctx.addresses).watch(
                ctx.namespace,
                ctx.name,
                view.master_epoch,
                view.sync_state_set_epoch,
                rt.settings.watch_timeout_ms,
            )
        )
    tasks = [asyncio.ensure_future(w) for w in waiters]
    try:
        await asyncio.wait(tasks, timeout=rt.settings.resync_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
