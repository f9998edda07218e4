"""Roll and scale-down planners (DESIGN.md §5 Rolling update / Scale down;
STYLE §8: status in, ordered plan out, tested without a cluster).

Step properties over random groups: the live master's pod is never
restarted (except a one-replica group); nothing restarts while a pod is
missing, deleting or not ready; a restart never shrinks the SyncStateSet
below minInSyncReplicas; a switchover leaves the target to the controller
(issue 32 item 3: the controller ranks, tests/unit/test_election_switchover.py)
and names as eligible only brokers on ready pods, at least one of them a live
in-sync slave. A simulated rolling update (restart = broker leaves the set and
rejoins on the next tick; switchover = the controller's ElectMaster, picking
any eligible live in-sync slave) always finishes with slaves first and the old
master last. Scale-down never removes the
master's pod without a switchover and cleans only ids of gone, dead brokers."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_operator.labels import broker_ids_by_pod
from brokergroup_operator.model import CLIENT_PORT, BrokerRow, GroupView, PodFacts
from brokergroup_operator.planner import (
    STUCK_POD,
    STUCK_SINGLE_REPLICA,
    CleanBrokerIds,
    Done,
    RestartPod,
    ScaleTo,
    Switchover,
    Wait,
    check_switchover,
    confirm_step,
    plan_roll,
    plan_scale,
    would_drop_below_min,
)
from tests.unit.operator_worlds import NEW, OLD, healthy_groups, with_revision, worlds


def _scale(
    pods: list[PodFacts], view: GroupView, desired: int, current: int, min_in_sync: int
) -> object:
    return plan_scale(
        pods,
        view,
        desired_replicas=desired,
        current_replicas=current,
        known_broker_ids={},
        min_in_sync_replicas=min_in_sync,
    )


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
        assert not any(p.deleting for p in pods)
        pod = next(p for p in pods if p.name == step.pod)
        assert pod.revision == OLD
        if not pod.ready:  # a stuck pod: never one the controller counts in the set
            assert step.reason in (STUCK_POD, STUCK_SINGLE_REPLICA)
            if replicas > 1:
                assert ids.get(pod.name) not in view.sync_state_set
        elif replicas > 1:
            assert all(p.ready for p in pods)
            assert ids.get(pod.name) != view.live_master
            assert not would_drop_below_min(view.sync_state_set, ids[pod.name], min_in_sync)
    elif isinstance(step, Switchover):
        assert step.from_broker_id == view.live_master
        assert step.to_broker_id is None  # the controller picks
        assert view.live_master not in step.eligible_broker_ids
        on_ready_pods = {ids.get(p.name) for p in pods if p.ready and not p.deleting}
        assert step.eligible_broker_ids <= on_ready_pods
        assert any(check_switchover(view, b) is None for b in step.eligible_broker_ids)
        # Every slave is already updated; only the master is left.
        outdated = {ids.get(p.name) for p in pods if p.revision == OLD}
        assert outdated == {view.live_master}
    elif isinstance(step, Done):
        assert all(p.revision == NEW for p in pods)


def _controller_pick(view: GroupView, step: Switchover, *, last: bool = False) -> int:
    """A model of the controller's switchover: some eligible live in-sync slave. Which
    one is its ranking's business (tested in test_election_switchover); the plans must
    finish whichever it picks, so the simulations take the lowest or the highest id."""
    if step.to_broker_id is not None:
        return step.to_broker_id
    able = sorted(b for b in step.eligible_broker_ids if check_switchover(view, b) is None)
    assert able, step
    return able[-1] if last else able[0]


def _elected(view: GroupView, broker_id: int) -> GroupView:
    """The controller's ElectMaster: a new epoch whose SyncStateSet is the new master."""
    return replace(
        view,
        master_broker_id=broker_id,
        master_epoch=view.master_epoch + 1,
        sync_state_set=frozenset({broker_id}),
    )


def _simulate_roll(
    pods: list[PodFacts], view: GroupView, min_in_sync: int, *, last: bool = False
) -> list[str]:
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
            target = _controller_pick(view, step, last=last)
            view = _elected(view, target)
            rejoin.extend(sorted({r.broker_id for r in view.brokers} - {target}))
            transcript.append(f"switchover {step.from_broker_id}->{target}")
        else:
            assert isinstance(step, Wait)
            if not rejoin:
                raise AssertionError(f"roll stuck: {step.reason} after {transcript}")
    raise AssertionError(f"roll did not finish: {transcript}")


@settings(max_examples=200)
@given(healthy_groups(), st.integers(1, 3), st.booleans())
def test_simulated_roll_finishes_slaves_first_master_last(
    group: tuple, min_in_sync: int, last: bool
) -> None:
    pods, view = group
    pods = with_revision(pods, OLD)
    min_in_sync = min(min_in_sync, len(pods) - 1)
    old_master = view.live_master
    transcript = _simulate_roll(pods, view, min_in_sync, last=last)
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


@settings(max_examples=400)
@given(worlds(min_pods=2, max_pods=5), st.integers(1, 5), st.integers(1, 5), st.integers(1, 3))
def test_scale_never_drops_the_master_pod(
    world: tuple, desired: int, current: int, min_in_sync: int
) -> None:
    """Over any world (dead masters, unready and deleting pods, stale rows): a
    scale-down step never removes the pod of the master the controller records,
    alive or not, and switches over only from a live master, naming as eligible
    only brokers on staying ready pods, one of them an in-sync, live slave."""
    pods, view = world
    pods = pods[:current] if current <= len(pods) else pods
    current = len(pods)
    step = _scale(pods, view, desired, current, min_in_sync)
    ids = broker_ids_by_pod(pods, view)
    master_pods = [p for p in pods if ids.get(p.name) == view.master_broker_id]
    if isinstance(step, ScaleTo) and step.replicas < current:
        assert view.master_broker_id is not None and view.live_master is not None
        assert [p.ordinal for p in master_pods if p.ordinal >= step.replicas] == []
    if isinstance(step, Switchover):
        assert step.from_broker_id == view.live_master
        assert [p.ordinal for p in master_pods if p.ordinal >= desired] != []
        assert step.to_broker_id is None  # the controller picks among the eligible
        for broker_id in step.eligible_broker_ids:
            assert any(
                ids.get(p.name) == broker_id and p.ordinal < desired and p.ready for p in pods
            )
        assert any(check_switchover(view, b) is None for b in step.eligible_broker_ids)
    if desired > current:
        assert step == ScaleTo(desired, "scale up")


@settings(max_examples=400)
@given(worlds(min_pods=2, max_pods=6), st.integers(1, 5), st.integers(1, 3))
def test_scale_down_step_keeps_min_in_sync_on_staying_replicas(
    world: tuple, desired: int, min_in_sync: int
) -> None:
    """Issue 17 item 1: no scale-down step leaves fewer than minInSyncReplicas
    live in-sync members on the replicas that stay, and it removes one ordinal."""
    pods, view = world
    current = len(pods)
    step = _scale(pods, view, desired, current, min_in_sync)
    if isinstance(step, ScaleTo) and step.replicas < current:
        assert step.replicas == current - 1
        ids = broker_ids_by_pod(pods, view)
        held = {
            ids[p.name]
            for p in pods
            if p.ordinal < step.replicas
            and p.ready
            and not p.deleting
            and p.name in ids
            and ids[p.name] in view.sync_state_set
            and any(r.broker_id == ids[p.name] and r.alive for r in view.brokers)
        }
        assert len(held) >= min_in_sync, (sorted(held), sorted(view.sync_state_set))


def _simulate_scale_down(
    pods: list[PodFacts], view: GroupView, desired: int, min_in_sync: int, catch_up: list[int]
) -> list[str]:
    """Drive scale-down to the end. A Wait lets one staying broker from `catch_up`
    join the SyncStateSet (the master re-adds a slave that caught up); a
    ScaleTo removes the top pod and its broker leaves the set; a switchover is
    the controller's ElectMaster (the new master's set is itself, then the
    others rejoin as they catch up)."""
    transcript: list[str] = []
    current = len(pods)
    pending = list(catch_up)
    for _ in range(200):
        step = _scale(pods, view, desired, current, min_in_sync)
        if isinstance(step, ScaleTo):
            assert step.replicas == current - 1
            removed = pods[-1]
            bid = broker_ids_by_pod(pods, view)[removed.name]
            staying = {broker_ids_by_pod(pods, view)[p.name] for p in pods[:-1]}
            assert len(view.sync_state_set & staying) >= min_in_sync
            pods = pods[:-1]
            current -= 1
            view = replace(view, sync_state_set=view.sync_state_set - {bid})
            transcript.append(f"remove {removed.name}")
        elif isinstance(step, Switchover):
            target = _controller_pick(view, step)
            view = _elected(view, target)
            transcript.append(f"switchover {step.from_broker_id}->{target}")
            pending = [b for b in sorted(r.broker_id for r in view.brokers) if b != target]
        elif isinstance(step, Wait):
            staying_ids = {broker_ids_by_pod(pods, view)[p.name] for p in pods}
            joinable = [b for b in pending if b in staying_ids and b not in view.sync_state_set]
            if not joinable:
                raise AssertionError(f"scale-down stuck: {step.reason} after {transcript}")
            view = replace(view, sync_state_set=view.sync_state_set | {joinable[0]})
            pending.remove(joinable[0])
            transcript.append(f"join {joinable[0]}")
        else:
            assert isinstance(step, Done)
            return transcript
    raise AssertionError(f"scale-down did not finish: {transcript}")


@settings(max_examples=200)
@given(healthy_groups(min_pods=2, max_pods=6), st.data())
def test_simulated_scale_down_finishes_one_ordinal_at_a_time(
    group: tuple, data: st.DataObject
) -> None:
    pods, view = group
    desired = data.draw(st.integers(1, len(pods) - 1))
    min_in_sync = data.draw(st.integers(1, desired))
    catch_up = data.draw(st.permutations(sorted(r.broker_id for r in view.brokers)))
    transcript = _simulate_scale_down(pods, view, desired, min_in_sync, list(catch_up))
    removals = [t for t in transcript if t.startswith("remove")]
    assert removals == [f"remove bg-{i}" for i in range(len(pods) - 1, desired - 1, -1)]


def test_scale_down_waits_for_the_staying_replicas_to_hold_min_in_sync() -> None:
    """Issue 17 item 1's fault: 3 → 2 while the only in-sync slave is on the top
    ordinal. Today's planner answered ScaleTo(2) at once."""
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True, 10) for i in range(3))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True) for i in range(3)]
    view = GroupView(1, True, None, 1, frozenset({1, 3}), 1, rows)
    step = _scale(pods, view, 2, 3, 2)
    assert step == Wait(
        "scale down waits to remove pod ordinal 2 (broker 3): the staying replicas hold "
        "[1] of the SyncStateSet [1, 3], fewer than minInSyncReplicas 2"
    )
    view = replace(view, sync_state_set=frozenset({1, 2, 3}))
    step = _scale(pods, view, 2, 3, 2)
    assert step == ScaleTo(2, "scale down: removing pod ordinal 2 (broker 3)")


def test_scale_down_waits_while_the_removed_pod_is_still_going() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True, 10) for i in range(5))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True) for i in range(5)]
    view = GroupView(1, True, None, 1, frozenset({1, 2, 3, 4, 5}), 1, rows)
    step = plan_scale(pods, view, desired_replicas=3, current_replicas=5, known_broker_ids={})
    assert step == ScaleTo(4, "scale down: removing pod ordinal 4 (broker 5)")
    going = [*pods[:4], replace(pods[4], deleting=True)]
    step = plan_scale(going, view, desired_replicas=3, current_replicas=4, known_broker_ids={})
    assert step == Wait("pod(s) ['bg-4'] removed by the previous scale-down step are still going")


def test_scale_down_story_switchover_then_scale_then_clean() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True, 10) for i in range(5))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True) for i in range(5)]
    view = GroupView(5, True, None, 1, frozenset({1, 2, 5}), 1, rows)
    known = {f"bg-{i}": i + 1 for i in range(5)}
    step = plan_scale(pods, view, desired_replicas=3, current_replicas=5, known_broker_ids=known)
    # The staying pods bg-0..bg-2 are eligible; the controller picks among them.
    assert step == Switchover(
        5, None, "scale down: the master's pod is removed", frozenset({1, 2, 3})
    )
    view = replace(view, master_broker_id=1, sync_state_set=frozenset({1, 2}))
    step = plan_scale(pods, view, desired_replicas=3, current_replicas=5, known_broker_ids=known)
    assert step == ScaleTo(4, "scale down: removing pod ordinal 4 (broker 5)")
    step = plan_scale(
        pods[:4], view, desired_replicas=3, current_replicas=4, known_broker_ids=known
    )
    assert step == ScaleTo(3, "scale down: removing pod ordinal 3 (broker 4)")
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


def _stuck_group(sss: frozenset[int]) -> tuple[list[PodFacts], GroupView]:
    """Issue 22 item 3: bg-2 was rolled onto a bad template (revision OLD now that
    the spec is reverted to NEW) and never became ready."""
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", i < 2, 10) for i in range(3))
    pods = [
        PodFacts("bg-0", 0, "u0", "10.0.0.0", True, revision=NEW),
        PodFacts("bg-1", 1, "u1", "10.0.0.1", True, revision=NEW),
        PodFacts("bg-2", 2, "u2", None, False, revision=OLD),
    ]
    return pods, GroupView(1, True, None, 1, sss, 1, rows)


def _plan_stuck(pods: list[PodFacts], view: GroupView) -> object:
    return plan_roll(
        pods,
        view,
        replicas=3,
        update_revision=NEW,
        min_in_sync_replicas=2,
        known_broker_ids={"bg-2": 3},
    )


def test_stuck_pod_on_an_outdated_revision_is_restarted() -> None:
    pods, view = _stuck_group(frozenset({1, 2}))
    step = _plan_stuck(pods, view)
    assert step == RestartPod("bg-2", 3, STUCK_POD)


def test_stuck_pod_still_in_the_sync_state_set_waits() -> None:
    pods, view = _stuck_group(frozenset({1, 2, 3}))
    step = _plan_stuck(pods, view)
    assert step == Wait(
        "pod bg-2 is not ready on an outdated revision, but broker 3 is still in the "
        "SyncStateSet [1, 2, 3]: waiting for the controller to drop it before restarting the pod"
    )


def test_stuck_pod_on_the_current_revision_waits_for_the_user() -> None:
    """A pod stuck on the current (bad) template is the spec's fault: only a new
    spec (then it is outdated) gets it restarted."""
    pods, view = _stuck_group(frozenset({1, 2}))
    pods = [pods[0], replace(pods[1], revision=OLD), replace(pods[2], revision=NEW)]
    step = plan_roll(pods, view, replicas=3, update_revision=NEW, min_in_sync_replicas=2)
    assert step == Wait("pod bg-2 is not ready")


def test_confirm_step_needs_an_unchanged_master_epoch_and_plan() -> None:
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True) for i in range(3))
    planned = GroupView(1, True, None, 4, frozenset({1, 2, 3}), 7, rows)
    step = RestartPod("bg-2", 3, "outdated slave")
    assert confirm_step(planned, replace(planned, sync_state_set_epoch=8), step, step) is None
    assert confirm_step(planned, None, step, step) == (
        "the controller could not be re-read before the step"
    )
    moved = replace(planned, master_broker_id=3, master_epoch=5)
    assert confirm_step(planned, moved, step, step) == (
        "masterEpoch moved from 4 to 5 since the step was planned"
    )
    later = Wait("broker 3 (bg-2) is not back in the SyncStateSet yet")
    assert confirm_step(planned, planned, step, later) == (
        f"the controller's view changed since planning: the next step is now {later}"
    )


def test_switchover_leaves_the_ranking_to_the_controller_and_keeps_pod_readiness() -> None:
    """Issue 32 item 3: the planner ranked targets itself ((-epoch, -maxOffset, brokerId),
    without electionPriority) and asked for broker 3 here. Now it names the brokers on
    ready, staying pods and the controller picks; a broker whose pod is not ready is
    never eligible, whatever its log (the controller cannot see pods)."""
    rows = (
        BrokerRow(1, f"10.0.0.0:{CLIENT_PORT}", True, 100, 2),
        BrokerRow(2, f"10.0.0.1:{CLIENT_PORT}", True, 100, 2),
        BrokerRow(3, f"10.0.0.2:{CLIENT_PORT}", True, 900, 2),
        BrokerRow(4, f"10.0.0.3:{CLIENT_PORT}", True, 950, 2),
        BrokerRow(5, f"10.0.0.4:{CLIENT_PORT}", True, 100, 2),
    )
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", True) for i in range(5)]
    pods[3] = replace(pods[3], ready=False)  # broker 4: the longest log, pod not ready
    view = GroupView(5, True, None, 2, frozenset({1, 2, 3, 4, 5}), 1, rows)
    step = plan_scale(pods, view, desired_replicas=4, current_replicas=5, known_broker_ids={})
    assert step == Switchover(
        5, None, "scale down: the master's pod is removed", frozenset({1, 2, 3})
    )
    assert step.target == "the controller's pick of [1, 2, 3]"


def test_switchover_waits_while_no_ready_pod_holds_an_in_sync_slave() -> None:
    """Broker 2 is the only in-sync slave, but its pod is not ready: nothing the
    operator would let the controller pick, so the plan waits (and says why)."""
    rows = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True) for i in range(3))
    pods = [PodFacts(f"bg-{i}", i, f"u{i}", f"10.0.0.{i}", i != 1) for i in range(3)]
    view = GroupView(3, True, None, 1, frozenset({2, 3}), 1, rows)
    step = plan_scale(pods, view, desired_replicas=2, current_replicas=3, known_broker_ids={})
    assert step == Wait(
        "master 3 is on a pod being removed and no in-sync slave among the remaining "
        "2 pod(s) can take over"
    )
