"""Roll, scale-down and switchover planners (pure; Strimzi KafkaRoller style).

Each planner takes the facts of one pass (pods, the controller's view, the
spec) and returns the single next step; the handler performs it and the next
pass plans again from fresh facts. One step per pass keeps every decision
re-checked against the world as it is after the previous step.

Rolling update (DESIGN.md §5):
1. Nothing while a pod is missing or being deleted. A pod that is not ready
   and runs an outdated revision is stuck (a bad image, config or template
   left it crash-looping or Pending; reverting the spec cannot reach it
   under OnDelete): it is restarted onto the current revision first, as
   Strimzi's KafkaRoller force-restarts pods that are not ready. That cannot
   cost an acknowledged write: it is done only when the controller does not
   count its broker in the SyncStateSet (a group of one has no other copy
   to protect and restarts its pod anyway).
1a. Otherwise nothing while a pod is not ready, or while an updated slave is
   not back in the SyncStateSet (one at a time).
2. Outdated slaves first: out-of-sync ones (restarting them cannot shrink
   the SyncStateSet), then highest ordinal. A slave in the SyncStateSet is
   restarted only if the set without it still has minInSyncReplicas members.
3. Only the master outdated: ask the controller to switch over (admin
   ElectMaster with `switchover`), passing the brokers whose pods are ready as
   the eligible ones. The controller picks the target among its live in-sync
   replicas with its election ranking (electionPriority included): the
   operator owns pod readiness and roll order, never the ranking (STYLE §8).
   The plan waits instead while no ready pod holds a live in-sync slave in the
   controller's view (a precondition, not a choice).
4. The old master, now a slave, is restarted by rule 2.
A one-replica group has no switchover target: its pod is restarted directly
(the unavailability is unavoidable and the plan says so).

Scale down (DESIGN.md §5, issue 17 item 1): one ordinal at a time, the
highest first (the StatefulSet removes ordinals from the top).
1. Nothing while a pod of an earlier step is still going, or while no live
   master keeps the SyncStateSet up to date.
2. If the master's pod is among the pods leaving, switch over first, the
   ready pods that stay being the eligible ones (the controller picks).
3. Remove the next ordinal only when the replicas that stay hold at least
   minInSyncReplicas members of the SyncStateSet (alive, their pods ready):
   otherwise the removed replica could be the only in-sync copy besides the
   master, and the writes it acknowledged would rest on one disk. The Wait
   names the members and the minimum, and the status condition repeats it.
Ids of removed brokers are cleaned from the controller once their pods are
gone. Their volumes stay unless spec.storage.deleteClaimOnScaleDown says
otherwise (workload.py).

The handler re-reads the controller just before a disruptive step and plans
again from the fresh view (`confirm_step`): the step goes ahead only if the
masterEpoch did not move and the fresh plan is the same step, as KafkaRoller
re-checks a broker before each restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from brokergroup_operator.labels import broker_ids_by_pod
from brokergroup_operator.model import GroupView, PodFacts, pod_ordinal


@dataclass(frozen=True)
class Wait:
    reason: str


@dataclass(frozen=True)
class RestartPod:
    pod: str
    broker_id: int | None
    reason: str


@dataclass(frozen=True)
class Switchover:
    """Move the master off `from_broker_id` (an admin ElectMaster).

    `to_broker_id`: the target a user designated. None: the controller picks the best
    of `eligible_broker_ids` (the brokers whose pods the operator holds ready and
    staying) with its own election ranking; the operator never ranks."""

    from_broker_id: int
    to_broker_id: int | None
    reason: str
    eligible_broker_ids: frozenset[int] = frozenset()

    @property
    def target(self) -> str:
        """The target in words, for Events."""
        if self.to_broker_id is not None:
            return str(self.to_broker_id)
        return f"the controller's pick of {sorted(self.eligible_broker_ids)}"


@dataclass(frozen=True)
class ScaleTo:
    replicas: int
    reason: str


@dataclass(frozen=True)
class CleanBrokerIds:
    broker_ids: tuple[int, ...]
    reason: str


@dataclass(frozen=True)
class Done:
    pass


RollStep = Wait | RestartPod | Switchover | Done

STUCK_POD = "stuck: not ready on an outdated revision and not in the SyncStateSet"
STUCK_SINGLE_REPLICA = "stuck: the only pod is not ready on an outdated revision"
ScaleStep = Wait | Switchover | ScaleTo | CleanBrokerIds | Done


def would_drop_below_min(sync_state_set: frozenset[int], broker_id: int, min_in_sync: int) -> bool:
    """Would taking this broker out shrink the SyncStateSet below the minimum?"""
    if broker_id not in sync_state_set:
        return False
    return len(sync_state_set - {broker_id}) < min_in_sync


def switchover_step(
    view: GroupView, ids: Mapping[str, int], pods: Sequence[PodFacts], reason: str
) -> Switchover | None:
    """A switchover off the live master among the brokers on `pods` that are ready and
    not being deleted (what only the operator knows), or None while none of them is a
    live in-sync slave in the controller's view (nothing the controller could pick).
    The choice among them is the controller's (election.switchover_targets)."""
    master = view.live_master
    assert master is not None, "a switchover needs a live master"
    eligible = frozenset(
        ids[p.name] for p in pods if p.ready and not p.deleting and p.name in ids
    ) - {master}
    if not any(check_switchover(view, broker_id) is None for broker_id in eligible):
        return None
    return Switchover(master, None, reason, eligible)


def plan_roll(
    pods: Sequence[PodFacts],
    view: GroupView,
    *,
    replicas: int,
    update_revision: str,
    min_in_sync_replicas: int,
    paused: bool = False,
    known_broker_ids: Mapping[str, int] | None = None,
) -> RollStep:
    """`known_broker_ids`: pod name → BrokerId remembered in status (a stuck pod
    may have no address the controller knows)."""
    outdated = [p for p in pods if p.revision != update_revision]
    if not outdated and len(pods) >= replicas:
        return Done()
    if paused:
        return Wait("rollout paused (spec.rollout.paused)")
    if len(pods) < replicas:
        return Wait(f"{replicas - len(pods)} pod(s) not created yet")
    for pod in sorted(pods, key=lambda p: p.ordinal):
        if pod.deleting:
            return Wait(f"pod {pod.name} is being deleted")
    stuck = _stuck_pod_step(pods, view, update_revision, known_broker_ids or {}, replicas)
    if stuck is not None:
        return stuck
    for pod in sorted(pods, key=lambda p: p.ordinal):
        if not pod.ready:
            return Wait(f"pod {pod.name} is not ready")
    if not outdated:
        return Done()
    ids = broker_ids_by_pod(pods, view)
    master = view.live_master
    if len(pods) == 1 and replicas == 1:
        only = pods[0]
        return RestartPod(only.name, ids.get(only.name), "single replica: no switchover target")
    if master is None:
        return Wait("no live master: waiting for the controller to elect one")
    sss = view.sync_state_set
    for pod in pods:
        broker_id = ids.get(pod.name)
        if broker_id is None:
            return Wait(f"pod {pod.name} has not registered its broker yet")
        if pod.revision == update_revision and broker_id != master and broker_id not in sss:
            return Wait(f"broker {broker_id} ({pod.name}) is not back in the SyncStateSet yet")
    slaves = [p for p in outdated if ids[p.name] != master]
    slaves.sort(key=lambda p: (ids[p.name] in sss, -p.ordinal))
    for pod in slaves:
        broker_id = ids[pod.name]
        if would_drop_below_min(sss, broker_id, min_in_sync_replicas):
            continue
        return RestartPod(pod.name, broker_id, "outdated slave")
    if slaves:
        return Wait(
            f"restarting any outdated slave would shrink the SyncStateSet {sorted(sss)} "
            f"below minInSyncReplicas {min_in_sync_replicas}"
        )
    step = switchover_step(view, ids, pods, "rolling update: master last")
    if step is None:
        return Wait(f"master {master} is outdated but no live in-sync slave can take over")
    return step


def _stuck_pod_step(
    pods: Sequence[PodFacts],
    view: GroupView,
    update_revision: str,
    known_broker_ids: Mapping[str, int],
    replicas: int,
) -> RestartPod | Wait | None:
    """Restart the lowest stuck pod (not ready, outdated) whose broker the
    controller does not count in the SyncStateSet; Wait while it still does."""
    ids = {**known_broker_ids, **broker_ids_by_pod(pods, view)}
    held: Wait | None = None
    for pod in sorted(pods, key=lambda p: p.ordinal):
        if pod.ready or pod.revision == update_revision:
            continue
        broker_id = ids.get(pod.name)
        if len(pods) == 1 and replicas == 1:
            return RestartPod(pod.name, broker_id, STUCK_SINGLE_REPLICA)
        if broker_id is None or broker_id not in view.sync_state_set:
            return RestartPod(pod.name, broker_id, STUCK_POD)
        held = held or Wait(
            f"pod {pod.name} is not ready on an outdated revision, but broker {broker_id} "
            f"is still in the SyncStateSet {sorted(view.sync_state_set)}: waiting for "
            "the controller to drop it before restarting the pod"
        )
    return held


def plan_scale(
    pods: Sequence[PodFacts],
    view: GroupView,
    *,
    desired_replicas: int,
    current_replicas: int,
    known_broker_ids: Mapping[str, int],
    min_in_sync_replicas: int = 1,
) -> ScaleStep:
    """`known_broker_ids`: pod name → BrokerId remembered in status (pods may be gone)."""
    if desired_replicas > current_replicas:
        return ScaleTo(desired_replicas, "scale up")
    live_ids = broker_ids_by_pod(pods, view)
    remembered = {**known_broker_ids, **live_ids}
    if desired_replicas < current_replicas:
        return _scale_down_step(
            pods,
            view,
            desired_replicas=desired_replicas,
            current_replicas=current_replicas,
            ids=remembered,
            min_in_sync_replicas=min_in_sync_replicas,
        )
    gone = sorted(
        bid
        for name, bid in known_broker_ids.items()
        if pod_ordinal(name) >= desired_replicas
        and all(p.name != name for p in pods)
        and not _alive(view, bid)
        and view.broker(bid) is not None
    )
    if gone:
        return CleanBrokerIds(tuple(gone), "scaled down: pods removed")
    return Done()


def _scale_down_step(
    pods: Sequence[PodFacts],
    view: GroupView,
    *,
    desired_replicas: int,
    current_replicas: int,
    ids: Mapping[str, int],
    min_in_sync_replicas: int,
) -> ScaleStep:
    going = sorted(p.name for p in pods if p.ordinal >= current_replicas)
    if going:
        return Wait(f"pod(s) {going} removed by the previous scale-down step are still going")
    master = view.live_master
    if master is None:
        return Wait("scale down waits for a live master (no one keeps the SyncStateSet current)")
    master_pods = [name for name, bid in ids.items() if bid == master]
    if any(pod_ordinal(name) >= desired_replicas for name in master_pods):
        staying_at_end = [p for p in pods if p.ordinal < desired_replicas]
        live_ids = broker_ids_by_pod(pods, view)
        step = switchover_step(
            view, live_ids, staying_at_end, "scale down: the master's pod is removed"
        )
        if step is None:
            return Wait(
                f"master {master} is on a pod being removed and no in-sync slave "
                f"among the remaining {desired_replicas} pod(s) can take over"
            )
        return step
    leaving = current_replicas - 1
    leaving_pod = next((p.name for p in pods if p.ordinal == leaving), None)
    leaving_id = ids.get(leaving_pod) if leaving_pod is not None else None
    held = staying_in_sync(pods, view, ids, below_ordinal=leaving)
    what = f"pod ordinal {leaving}" + (f" (broker {leaving_id})" if leaving_id is not None else "")
    if len(held) < min_in_sync_replicas:
        return Wait(
            f"scale down waits to remove {what}: the staying replicas hold "
            f"{sorted(held)} of the SyncStateSet {sorted(view.sync_state_set)}, "
            f"fewer than minInSyncReplicas {min_in_sync_replicas}"
        )
    return ScaleTo(leaving, f"scale down: removing {what}")


def staying_in_sync(
    pods: Sequence[PodFacts], view: GroupView, ids: Mapping[str, int], *, below_ordinal: int
) -> frozenset[int]:
    """SyncStateSet members on pods that stay (ordinal below the cut), alive in the
    controller's view, their pods ready and not being deleted."""
    return frozenset(
        ids[p.name]
        for p in pods
        if p.ordinal < below_ordinal
        and p.ready
        and not p.deleting
        and p.name in ids
        and ids[p.name] in view.sync_state_set
        and _alive(view, ids[p.name])
    )


def confirm_step(
    planned: GroupView, fresh: GroupView | None, step: RestartPod | ScaleTo, replanned: object
) -> str | None:
    """Why a disruptive step planned on `planned` must not go ahead now that the
    controller was re-read as `fresh` (and the same facts planned `replanned`
    with it), or None to go ahead."""
    if fresh is None:
        return "the controller could not be re-read before the step"
    if fresh.master_epoch != planned.master_epoch:
        return (
            f"masterEpoch moved from {planned.master_epoch} to {fresh.master_epoch} "
            "since the step was planned"
        )
    if replanned != step:
        return f"the controller's view changed since planning: the next step is now {replanned}"
    return None


def _alive(view: GroupView, broker_id: int) -> bool:
    row = view.broker(broker_id)
    return row is not None and row.alive


def check_switchover(view: GroupView, to_broker_id: int) -> str | None:
    """Why a user-requested switchover to this broker is refused, or None."""
    row = view.broker(to_broker_id)
    if row is None:
        return f"broker {to_broker_id} is not registered with the controller"
    if to_broker_id == view.live_master:
        return f"broker {to_broker_id} is already the master"
    if not row.alive:
        return f"broker {to_broker_id} is not alive"
    if to_broker_id not in view.sync_state_set:
        return (
            f"broker {to_broker_id} is not in the SyncStateSet {sorted(view.sync_state_set)}: "
            "it may miss acknowledged messages"
        )
    return None
