"""Scale and rolling update: at most one disruptive step per pass.

The pure planners (planner.plan_scale, planner.plan_roll) say what to do
next from the pods and the controller's view; this module carries out the
one step they choose. A pod deletion or a StatefulSet shrink is taken only
after re-reading the controller: masterEpoch unchanged and the same plan
from the fresh view (planner.confirm_step, Strimzi KafkaRoller's re-check).
A step that needs the master moved first is a switchover (switchover.py).

Scale comes before roll: a pass that scales (or switches over for a
scale-down, or skips a refused step) does not also roll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_operator import metrics
from brokergroup_operator.model import GroupView, PodFacts
from brokergroup_operator.planner import (
    CleanBrokerIds,
    RestartPod,
    RollStep,
    ScaleStep,
    ScaleTo,
    Switchover,
    Wait,
    confirm_step,
    plan_roll,
    plan_scale,
)
from brokergroup_operator.runtime import GroupMemory, PostEvent, Runtime, read_view
from brokergroup_operator.spec import GroupContext
from brokergroup_operator.switchover import switchover

log = logging.getLogger("brokergroup_operator")


@dataclass(frozen=True)
class StepResult:
    replicas: int
    """The StatefulSet's replicas to apply (a scale step changes them)."""
    waiting: str | None
    """Why the planners wait, for the status (None: nothing to wait for)."""


async def take_step(
    rt: Runtime,
    ctx: GroupContext,
    controller: ControllerClient,
    mem: GroupMemory,
    view: GroupView | None,
    pods: tuple[PodFacts, ...],
    sts: Mapping[str, Any] | None,
    known_broker_ids: Mapping[str, int],
    post: PostEvent,
    *,
    acted: bool,
) -> StepResult:
    """One scale or roll step unless the pass `acted` already (a user's switchover)."""
    if not sts:
        return StepResult(ctx.replicas, None)
    current = int((sts.get("spec") or {}).get("replicas", 0))
    replicas, waiting = current, None
    if view is None or acted:
        return StepResult(replicas, waiting)

    def scale_plan(v: GroupView) -> ScaleStep:
        return plan_scale(
            pods,
            v,
            desired_replicas=ctx.replicas,
            current_replicas=current,
            known_broker_ids=known_broker_ids,
            min_in_sync_replicas=ctx.min_in_sync_replicas,
        )

    step = scale_plan(view)
    if isinstance(step, ScaleTo) and step.replicas < current:
        refusal = await _confirm(controller, ctx, view, step, scale_plan)
        if refusal is not None:
            post("Normal", "StepSkipped", f"scale-down step skipped: {refusal}")
            acted = True
            mem.wake.set()  # plan again at once from the fresh facts
            step = Wait(refusal)
    if isinstance(step, ScaleTo):
        replicas = step.replicas
        post("Normal", "Scaling", f"{step.reason}: {current} → {step.replicas}")
    elif isinstance(step, Switchover):
        await switchover(rt, ctx, controller, step, post, cause="scale-down")
        acted = True
    elif isinstance(step, CleanBrokerIds):
        try:
            removed = await controller.clean_broker_data(
                ctx.namespace, ctx.name, step.broker_ids, force=False
            )
        except (ControllerError, ControllerUnavailable) as exc:
            # e.g. BROKER_STILL_ALIVE: the next pass plans again from fresh facts.
            post("Warning", "BrokerIdsNotCleaned", f"{list(step.broker_ids)}: {exc}")
        else:
            post("Normal", "BrokerIdsCleaned", f"{step.reason}: removed {removed}")
    elif isinstance(step, Wait):
        waiting = step.reason

    update_revision = str((sts.get("status") or {}).get("updateRevision") or "")
    if acted or not update_revision or replicas != current:
        return StepResult(replicas, waiting)
    return StepResult(
        replicas,
        await _roll(
            rt, ctx, controller, mem, view, pods, current, update_revision, known_broker_ids, post
        )
        or waiting,
    )


async def _roll(
    rt: Runtime,
    ctx: GroupContext,
    controller: ControllerClient,
    mem: GroupMemory,
    view: GroupView,
    pods: tuple[PodFacts, ...],
    replicas: int,
    update_revision: str,
    known_broker_ids: Mapping[str, int],
    post: PostEvent,
) -> str | None:
    """One rolling-update step; why the roll waits, or None."""

    def roll_plan(v: GroupView) -> RollStep:
        return plan_roll(
            pods,
            v,
            replicas=replicas,
            update_revision=update_revision,
            min_in_sync_replicas=ctx.min_in_sync_replicas,
            paused=bool((ctx.spec.get("rollout") or {}).get("paused", False)),
            known_broker_ids=known_broker_ids,
        )

    roll = roll_plan(view)
    if isinstance(roll, RestartPod):
        pod = next(p for p in pods if p.name == roll.pod)
        refusal = await _confirm(controller, ctx, view, roll, roll_plan)
        if refusal is not None:
            what = f"restart of {roll.pod} (broker {roll.broker_id})"
            post("Normal", "StepSkipped", f"{what} skipped: {refusal}")
            mem.wake.set()  # plan again at once from the fresh facts
            return refusal
        post(
            "Normal",
            "RollingUpdate",
            f"restarting {roll.pod} (broker {roll.broker_id}): {roll.reason}",
        )
        await rt.kube.delete_pod(ctx.namespace, pod.name, pod.uid)
        metrics.POD_RESTARTS.inc()
    elif isinstance(roll, Switchover):
        post(
            "Normal",
            "RollingUpdate",
            f"switching the master over {roll.from_broker_id} → {roll.target} before restarting it",
        )
        await switchover(rt, ctx, controller, roll, post, cause="rolling-update")
    elif isinstance(roll, Wait):
        return roll.reason
    return None


async def _confirm(
    controller: ControllerClient,
    ctx: GroupContext,
    planned: GroupView,
    step: RestartPod | ScaleTo,
    replan: Callable[[GroupView], object],
) -> str | None:
    """Re-read the controller just before a disruptive step (KafkaRoller's
    re-check): why not to take it, or None."""
    try:
        fresh = await read_view(controller, ctx)
    except (ControllerUnavailable, ControllerError) as exc:
        log.warning("re-read before a step of %s/%s failed: %s", ctx.namespace, ctx.name, exc)
        fresh = None
    return confirm_step(planned, fresh, step, None if fresh is None else replan(fresh))
