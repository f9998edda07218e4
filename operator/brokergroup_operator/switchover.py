"""Switchover: the operator's only election-related call, an admin
ElectMaster. A user's request names the broker to take over; a roll or a
scale-down asks the controller to switch over (`ControllerClient.switchover`)
among the brokers whose pods the operator holds ready, and the controller picks
the target with its election ranking (electionPriority honoured): the operator
owns pod readiness, the controller owns who is master (STYLE §8).

Three callers: a user's request (the switchover annotation, set by
`brokergroup kube switchover`), a scale-down that removes the master's pod,
and a rolling update that restarts it. Whatever the answer, it is the pass's
one disruptive step: a refusal is re-planned from fresh facts, and an
election that got no answer may still be committed, so the next pass reads
the controller before doing anything else.
"""

from __future__ import annotations

from enum import StrEnum

from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_operator import metrics
from brokergroup_operator.model import SWITCHOVER_ANNOTATION, GroupView
from brokergroup_operator.planner import Switchover, check_switchover
from brokergroup_operator.runtime import PostEvent, Runtime
from brokergroup_operator.spec import GroupContext


class SwitchoverOutcome(StrEnum):
    ELECTED = "elected"
    REFUSED = "refused by the controller"
    UNKNOWN = "outcome unknown"


async def switchover(
    rt: Runtime,
    ctx: GroupContext,
    controller: ControllerClient,
    step: Switchover,
    post: PostEvent,
    *,
    cause: str,
) -> SwitchoverOutcome:
    """One admin ElectMaster; wakes the group's next pass unless refused."""
    try:
        if step.to_broker_id is None:
            info = await controller.switchover(
                ctx.namespace, ctx.name, eligible_broker_ids=step.eligible_broker_ids
            )
        else:
            info = await controller.elect_master(
                ctx.namespace, ctx.name, designated_broker_id=step.to_broker_id
            )
    except ControllerUnavailable as exc:
        post(
            "Warning",
            "SwitchoverOutcomeUnknown",
            f"{step.from_broker_id} → {step.target}: no answer ({exc}); "
            "the next pass reads the controller before any other step",
        )
        rt.memory((ctx.namespace, ctx.name)).wake.set()
        return SwitchoverOutcome.UNKNOWN
    except ControllerError as exc:
        post("Warning", "SwitchoverFailed", f"{step.from_broker_id} → {step.target}: {exc}")
        return SwitchoverOutcome.REFUSED
    metrics.SWITCHOVERS.labels(cause).inc()
    post(
        "Normal",
        "Switchover",
        f"{step.reason}: master {step.from_broker_id} → {info.master_broker_id} "
        f"at epoch {info.master_epoch}",
    )
    rt.memory((ctx.namespace, ctx.name)).wake.set()
    return SwitchoverOutcome.ELECTED


async def user_switchover(
    rt: Runtime,
    ctx: GroupContext,
    controller: ControllerClient,
    view: GroupView,
    wanted: str,
    post: PostEvent,
) -> bool:
    """Honour the switchover annotation once (and remove it, refused or not).
    True when an ElectMaster was sent (the pass's one disruptive step)."""
    done: bool = False
    if not wanted.isdigit():
        post(
            "Warning", "SwitchoverRefused", f"{SWITCHOVER_ANNOTATION}={wanted!r} is not a BrokerId"
        )
    else:
        target = int(wanted)
        refusal = check_switchover(view, target)
        if refusal is not None:
            post("Warning", "SwitchoverRefused", refusal)
        elif view.master_broker_id is not None:
            step = Switchover(view.master_broker_id, target, "requested by the user")
            await switchover(rt, ctx, controller, step, post, cause="user")
            done = True
        else:
            post("Warning", "SwitchoverRefused", "no master to switch over from")
    await rt.kube.patch_group_annotations(ctx.namespace, ctx.name, {SWITCHOVER_ANNOTATION: None})
    return done
