"""Roll and scale-down planners (DESIGN.md §5 Rolling update / Scale down;
STYLE §8: status in, ordered plan out, tested without a cluster).

Step properties over random groups: the live master's pod is never
restarted (except a one-replica group); nothing restarts while a pod is
missing, deleting or not ready; a restart never shrinks the SyncStateSet
below minInSyncReplicas; a switchover targets a live in-sync slave. A
simulated rolling update (restart = broker leaves the set and rejoins on
the next tick; switchover = the controller's ElectMaster) always finishes
with slaves first and the old master last. Scale-down never removes the
master's pod without a switchover and cleans only ids of gone, dead brokers."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_operator.labels import broker_ids_by_pod
from brokergroup_operator.model import CLIENT_PORT, BrokerRow, GroupView, PodFacts
from brokergroup_operator.planner import (
    CleanBrokerIds,
    Done,
    RestartPod,
    ScaleTo,
    Switchover,
    Wait,
    check_switchover,
    plan_roll,
    plan_scale,
    would_drop_below_min,
)
from tests.unit.operator_worlds import NEW, OLD, healthy_groups, with_revision, worlds


@settings(max_examples=400)
@given(worlds(), st.integers(1, 4))
def test_roll_step_is_always_safe(world: tuple, min_in_sync: int) -> None:
    pods, view = world
    replicas = len(pods)
    step = plan_roll(
        pods, view, replicas=replicas, update_revision=NEW, min_in_sync_replicas=min_in_sync
    )
    ids = broker_ids_by_pod(pods, view)
    if isinstance(step, RestartPod):
        assert all(p.ready and not p.deleting for p in pods)
        pod = next(p for p in pods if p.name == step.pod)
        assert pod.revision == OLD
        if replicas > 1:
            assert ids.get(pod.name) != view.live_master
            assert not would_drop_below_min(view.sync_state_set, ids[pod.name], min_in_sync)
    elif isinstance(step, Switchover):
        assert step.from_broker_id == view.live_master
        assert check_switchover(view, step.to_broker_id) is None
        # Every slave is already updated; only the master is left.
        outdated = {ids.get(p.name) for p in pods if p.revision == OLD}
        assert outdated == {view.live_master}
    elif isinstance(step, Done):
        assert all(p.revision == NEW for p in pods)


def _simulate_roll(pods: list[PodFacts], view: GroupView, min_in_sync: int) -> list[str]:
    """Drive the planner to the end; return the transcript of actions."""
    transcript: list[str] = []
    rejoin: list[int] = []
    for _ in range(100):
        if rejoin:  # a restarted broker catches up and the master re-adds it
            view = replace(view, sync_state_set=view.sync_state_set | {rejoin.pop()})
        step = plan_roll(
            pods, view, replicas=len(pods), update_revision=NEW, min_in_sync_replicas=min_in_sync
        )
        if isinstance(step, Done):
            return transcript
        if isinstance(step, RestartPod):
            bid = step.broker_id
            assert bid is not None
            before = len(view.sync_state_set)
            view = replace(view, sync_state_set=view.sync_state_set - {bid})
            assert len(view.sync_state_set) >= min(min_in_sync, before)
            pods = [replace(p, revision=NEW) if p.name == step.pod else p for p in pods]
            rejoin.append(bid)
            transcript.append(f"restart {bid}" + (" (master)" if bid == view.live_master else ""))
        elif isinstance(step, Switchover):
            view = replace(
                view,
                master_broker_id=step.to_broker_id,
                master_epoch=view.master_epoch + 1,
                sync_state_set=frozenset({step.to_broker_id}),
            )
            rejoin.extend(sorted({r.broker_id for r in view.brokers} - {step.to_broker_id}))
            transcript.append(f"switchover {step.from_broker_id}->{step.to_broker_id}")
        else:
            assert isinstance(step, Wait)
            if not rejoin:
                raise AssertionError(f"roll stuck: {step.reason} after {transcript}")
    raise AssertionError(f"roll did not finish: {transcript}")


@settings(max_examples=200)
@given(healthy_groups(), st.integers(1, 3))
def test_simulated_roll_finishes_slaves_first_master_last(group: tuple, min_in_sync: int) -> None:
    pods, view = group
    pods = with_revision(pods, OLD)
    min_in_sync = min(min_in_sync, len(pods) - 1)
    old_master = view.live_master
    transcript = _simulate_roll(pods, view, min_in_sync)
    n = len(pods)
    assert len([t for t in transcript if t.startswith("restart")]) == n
    switch = [i for i, t in enumerate(transcript) if t.startswith("switchover")]
    assert len(switch) == 1
    assert transcript[switch[0]].startswith(f"switchover {old_master}->")
    # Every slave restarted before the switchover, the old master right after it.
    assert all(
        t.startswith("restart") and t != f"restart {old_master}" for t in transcript[: switch[0]]
    )
    assert transcript[switch[0] + 1 :] == [f"restart {old_master}"]


def test_roll_concrete_order() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True, 100) for i in range(3))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True, revision=OLD) for i in range(3)]
    view = GroupView(1, True, None, 1, frozenset({1, 2, 3}), 1, rows)
    assert _simulate_roll(pods, view, 2) == [
        "restart 3",
        "restart 2",
        "switchover 1->2",
        "restart 1",
    ]


def test_roll_waits_for_the_restarted_slave_to_rejoin() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True) for i in range(3))
    pods = [
        PodFacts("bg-0", 0, "u0", "10.0.0.0", True, revision=OLD),
        PodFacts("bg-1", 1, "u1", "10.0.0.1", True, revision=OLD),
        PodFacts("bg-2", 2, "u2", "10.0.0.2", True, revision=NEW),
    ]
    view = GroupView(1, True, None, 1, frozenset({1, 2}), 2, rows)
    step = plan_roll(pods, view, replicas=3, update_revision=NEW, min_in_sync_replicas=1)
    assert step == Wait("broker 3 (bg-2) is not back in the SyncStateSet yet")


def test_roll_refuses_to_shrink_below_min_in_sync() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True) for i in range(2))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True, revision=OLD) for i in range(2)]
    view = GroupView(1, True, None, 1, frozenset({1, 2}), 1, rows)
    step = plan_roll(pods, view, replicas=2, update_revision=NEW, min_in_sync_replicas=2)
    assert isinstance(step, Wait) and "minInSyncReplicas 2" in step.reason


def test_paused_roll_waits() -> None:
    pods = [PodFacts("bg-0", 0, "u0", "10.0.0.0", True, revision=OLD)]
    view = GroupView(
        1, True, None, 1, frozenset({1}), 1, (BrokerRow(1, f"10.0.0.0:{CLIENT_PORT}", True),)
    )
    step = plan_roll(
        pods, view, replicas=1, update_revision=NEW, min_in_sync_replicas=1, paused=True
    )
    assert step == Wait("rollout paused (spec.rollout.paused)")
    step = plan_roll(pods, view, replicas=1, update_revision=NEW, min_in_sync_replicas=1)
    assert step == RestartPod("bg-0", 1, "single replica: no switchover target")


@settings(max_examples=300)
@given(healthy_groups(min_pods=2, max_pods=5), st.integers(1, 5), st.integers(1, 5))
def test_scale_never_drops_the_master_pod(group: tuple, desired: int, current: int) -> None:
    pods, view = group
    pods = pods[:current] if current <= len(pods) else pods
    current = len(pods)
    step = plan_scale(
        pods, view, desired_replicas=desired, current_replicas=current, known_broker_ids={}
    )
    ids = broker_ids_by_pod(pods, view)
    master_pod = next((p for p in pods if ids.get(p.name) == view.live_master), None)
    if isinstance(step, ScaleTo) and step.replicas < current and master_pod is not None:
        assert master_pod.ordinal < step.replicas
    if isinstance(step, Switchover):
        assert master_pod is not None and master_pod.ordinal >= desired
        target_pod = next(p for p in pods if ids.get(p.name) == step.to_broker_id)
        assert target_pod.ordinal < desired
        assert check_switchover(view, step.to_broker_id) is None
    if desired > current:
        assert step == ScaleTo(desired, "scale up")


def test_scale_down_story_switchover_then_scale_then_clean() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True, 10) for i in range(5))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True) for i in range(5)]
    view = GroupView(5, True, None, 1, frozenset({1, 2, 5}), 1, rows)
    known = {f"bg-{i}": i + 1 for i in range(5)}
    step = plan_scale(pods, view, desired_replicas=3, current_replicas=5, known_broker_ids=known)
    assert step == Switchover(5, 1, "scale down: the master's pod is removed")
    view = replace(view, master_broker_id=1, sync_state_set=frozenset({1, 2}))
    step = plan_scale(pods, view, desired_replicas=3, current_replicas=5, known_broker_ids=known)
    assert step == ScaleTo(3, "scale down")
    # Pods bg-3/bg-4 are gone but their brokers still look alive: no clean yet.
    step = plan_scale(
        pods[:3], view, desired_replicas=3, current_replicas=3, known_broker_ids=known
    )
    assert step == Done()
    dead = tuple(replace(r, alive=r.broker_id <= 3) for r in rows)
    view = replace(view, brokers=dead)
    step = plan_scale(
        pods[:3], view, desired_replicas=3, current_replicas=3, known_broker_ids=known
    )
    assert step == CleanBrokerIds((4, 5), "scaled down: pods removed")
    view = replace(view, brokers=dead[:3])
    assert (
        plan_scale(pods[:3], view, desired_replicas=3, current_replicas=3, known_broker_ids=known)
        == Done()
    )


def test_scale_down_waits_without_an_in_sync_target() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True) for i in range(3))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True) for i in range(3)]
    view = GroupView(3, True, None, 1, frozenset({3}), 1, rows)
    step = plan_scale(pods, view, desired_replicas=1, current_replicas=3, known_broker_ids={})
    assert isinstance(step, Wait) and "no in-sync slave" in step.reason


def test_check_switchover_reasons() -> None:
    rows = (BrokerRow(1, "a:1", True), BrokerRow(2, "b:1", True), BrokerRow(3, "c:1", False))
    view = GroupView(1, True, None, 1, frozenset({1, 2}), 1, rows)
    assert check_switchover(view, 2) is None
    assert check_switchover(view, 1) == "broker 1 is already the master"
    assert check_switchover(view, 3) == "broker 3 is not alive"
    assert check_switchover(view, 9) == "broker 9 is not registered with the controller"
    view = replace(view, brokers=(*rows[:2], BrokerRow(3, "c:1", True)))
    assert check_switchover(view, 3) == (
        "broker 3 is not in the SyncStateSet [1, 2]: it may miss acknowledged messages"
    )
