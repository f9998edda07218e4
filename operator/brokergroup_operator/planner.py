"""Roll, scale-down and switchover planners (pure; Strimzi KafkaRoller style).

Each planner takes the facts of one pass (pods, the controller's view, the
spec) and returns the single next step; the handler performs it and the next
pass plans again from fresh facts. One step per pass keeps every decision
re-checked against the world as it is after the previous step.

Rolling update (DESIGN.md §5):
1. Nothing while a pod is missing, being deleted or not ready, or while an
   updated slave is not back in the SyncStateSet (one at a time).
2. Outdated slaves first: out-of-sync ones (restarting them cannot shrink
   the SyncStateSet), then highest ordinal. A slave in the SyncStateSet is
   restarted only if the set without it still has minInSyncReplicas members.
3. Only the master outdated: ask the controller to switch over to the most
   up-to-date live in-sync slave (admin ElectMaster). The operator never
   picks a master the controller would not: the target is in the set.
4. The old master, now a slave, is restarted by rule 2.
A one-replica group has no switchover target: its pod is restarted directly
(the unavailability is unavoidable and the plan says so).

Scale down: the StatefulSet removes the highest ordinals; if the master's
pod is among them, switch over to an in-sync slave that stays first. Ids
of removed brokers are cleaned from the controller once their pods are gone.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    from_broker_id: int
    to_broker_id: int
    reason: str


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
ScaleStep = Wait | Switchover | ScaleTo | CleanBrokerIds | Done


def would_drop_below_min(sync_state_set: frozenset[int], broker_id: int, min_in_sync: int) -> bool:
    """Would taking this broker out shrink the SyncStateSet below the minimum?"""
    if broker_id not in sync_state_set:
        return False
    return len(sync_state_set - {broker_id}) < min_in_sync


def switchover_target(
    view: GroupView,
    ids: dict[str, int],
    pods: Sequence[PodFacts],
    *,
    exclude_pods: frozenset[str] = frozenset(),
) -> int | None:
    """The live, ready, in-sync slave with the most data (then lowest id)."""
    ready = {p.name for p in pods if p.ready and not p.deleting and p.name not in exclude_pods}
    candidates = [
        row
        for row in view.brokers
        if row.alive
        and row.broker_id != view.master_broker_id
        and row.broker_id in view.sync_state_set
        and any(ids.get(name) == row.broker_id for name in ready)
    ]
    if not candidates:
        return None
    best = min(candidates, key=lambda r: (-r.epoch, -r.max_offset, r.broker_id))
    return best.broker_id


def plan_roll(
    pods: Sequence[PodFacts],
    view: GroupView,
    *,
    replicas: int,
    update_revision: str,
    min_in_sync_replicas: int,
    paused: bool = False,
) -> RollStep:
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
    target = switchover_target(view, ids, pods)
    if target is None:
        return Wait(f"master {master} is outdated but no live in-sync slave can take over")
    return Switchover(master, target, "rolling update: master last")


def plan_scale(
    pods: Sequence[PodFacts],
    view: GroupView,
    *,
    desired_replicas: int,
    current_replicas: int,
    known_broker_ids: dict[str, int],
) -> ScaleStep:
    """`known_broker_ids`: pod name → BrokerId remembered in status (pods may be gone)."""
    if desired_replicas > current_replicas:
        return ScaleTo(desired_replicas, "scale up")
    live_ids = broker_ids_by_pod(pods, view)
    remembered = {**known_broker_ids, **live_ids}
    if desired_replicas < current_replicas:
        master = view.master_broker_id
        leaving = {name for name in remembered if pod_ordinal(name) >= desired_replicas}
        master_pods = [name for name, bid in remembered.items() if bid == master]
        if master is not None and any(name in leaving for name in master_pods):
            staying = [p for p in pods if p.ordinal < desired_replicas]
            target = switchover_target(view, live_ids, staying)
            if target is None:
                return Wait(
                    f"master {master} is on a pod being removed and no in-sync slave "
                    f"among the remaining {desired_replicas} pod(s) can take over"
                )
            return Switchover(master, target, "scale down: the master's pod is removed")
        return ScaleTo(desired_replicas, "scale down")
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
