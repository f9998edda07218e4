"""Every rule of DESIGN.md §2.2, one test (or table) per rule, on the pure
`ControllerState` and `decide_election`. Rejections are checked to leave the
state unchanged (STYLE.md §2)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from brokergroup_controller.election import (
    ElectionRequest,
    ElectionTrigger,
    ReplicaHeartbeat,
    decide_election,
)
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.state import (
    RECENT_REQUESTS_BOUND,
    AlterSyncStateSet,
    ApplyBrokerId,
    BrokersCleaned,
    CleanBrokerData,
    ControllerState,
    ElectMaster,
    Event,
    MasterElected,
    RegisterBroker,
    SyncStateSetAltered,
    event_from_dict,
)

C, B = "DefaultCluster", "broker-a"


def apply_id(state: ControllerState, broker_id: int, code: str | None = None) -> ErrorCode:
    event = ApplyBrokerId(C, B, broker_id, code or f"code-{broker_id}", f"10.0.0.{broker_id}:10911")
    return state.apply(event).code


def hb(broker_id: int, epoch: int = 1, max_offset: int = 0, priority: int = 0) -> ReplicaHeartbeat:
    return ReplicaHeartbeat(
        broker_id, epoch=epoch, max_offset=max_offset, election_priority=priority
    )


def elect(state: ControllerState, alive: dict[int, ReplicaHeartbeat], **kw: object) -> ErrorCode:
    broker_set = state.snapshot(C, B)
    assert broker_set is not None
    decision = decide_election(broker_set, alive, ElectionRequest(**kw))  # type: ignore[arg-type]
    if decision.event is None:
        return decision.code
    return state.apply(decision.event).code


def assert_rejected_unchanged(state: ControllerState, event: Event, code: ErrorCode) -> None:
    before = copy.deepcopy(state.to_dict())
    result = state.apply(event)
    assert result.code is code, result
    assert result.message  # a person can act on it
    assert state.to_dict() == before


def group_with_master(n: int = 3) -> ControllerState:
    """Brokers 1..n registered, broker 1 master at epoch 1, SyncStateSet {1..n} at epoch 2."""
    state = ControllerState()
    for broker_id in range(1, n + 1):
        assert apply_id(state, broker_id) is ErrorCode.SUCCESS
    assert elect(state, {1: hb(1)}, trigger=ElectionTrigger.BROKER, requester_broker_id=1) is (
        ErrorCode.SUCCESS
    )
    alter = AlterSyncStateSet(C, B, 1, 1, frozenset(range(1, n + 1)), 1)
    assert state.apply(alter).ok
    return state


# -- GetNextBrokerId / ApplyBrokerId (persistent-broker-id seed, steps 1–4)


def test_next_broker_id_is_1_for_unknown_set_and_advances() -> None:
    state = ControllerState()
    assert state.next_broker_id(C, B) == 1
    assert apply_id(state, 1) is ErrorCode.SUCCESS
    assert state.next_broker_id(C, B) == 2


def test_unknown_set_accepts_only_id_1() -> None:
    state = ControllerState()
    result = state.apply(ApplyBrokerId(C, B, 2, "x", "a:1"))
    assert result.code is ErrorCode.BROKER_ID_INVALID
    assert result.next_broker_id == 1
    assert state.get(C, B) is None


def test_apply_unassigned_id_in_known_set() -> None:
    state = ControllerState()
    apply_id(state, 1)
    assert apply_id(state, 5) is ErrorCode.SUCCESS
    assert state.next_broker_id(C, B) == 6


def test_apply_same_register_code_is_idempotent() -> None:
    """Crash after ApplyBrokerId succeeded: the broker retries from its temp file."""
    state = ControllerState()
    apply_id(state, 1, "abc")
    result = state.apply(ApplyBrokerId(C, B, 1, "abc", "10.9.9.9:10911"))
    assert result.ok
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.brokers[1].address == "10.9.9.9:10911"


def test_apply_held_id_with_other_register_code_is_rejected_with_next_id() -> None:
    state = ControllerState()
    apply_id(state, 1, "abc")
    event = ApplyBrokerId(C, B, 1, "other", "a:1")
    assert_rejected_unchanged(state, event, ErrorCode.BROKER_ID_INVALID)
    assert state.apply(event).next_broker_id == 2


def test_apply_id_below_1_is_rejected() -> None:
    state = ControllerState()
    apply_id(state, 1)
    assert_rejected_unchanged(
        state, ApplyBrokerId(C, B, 0, "z", "a:1"), ErrorCode.BROKER_ID_INVALID
    )


# -- RegisterBroker (seed step 5)


def test_register_requires_assigned_id() -> None:
    state = ControllerState()
    assert_rejected_unchanged(
        state, RegisterBroker(C, B, 1, "a:1"), ErrorCode.NEED_TO_BE_REGISTERED
    )
    apply_id(state, 1)
    assert_rejected_unchanged(
        state, RegisterBroker(C, B, 2, "a:1"), ErrorCode.NEED_TO_BE_REGISTERED
    )


def test_register_updates_changed_address_and_keeps_id() -> None:
    state = ControllerState()
    apply_id(state, 1)
    assert state.apply(RegisterBroker(C, B, 1, "10.1.1.1:10911")).ok
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert broker_set.brokers[1].address == "10.1.1.1:10911"
    assert broker_set.brokers[1].register_code == "code-1"


# -- AlterSyncStateSet


@pytest.mark.parametrize(
    ("master", "master_epoch", "new_set", "set_epoch", "code"),
    [
        (2, 1, {1, 2}, 2, ErrorCode.INVALID_MASTER),
        (1, 0, {1, 2}, 2, ErrorCode.FENCED_MASTER_EPOCH),
        (1, 2, {1, 2}, 2, ErrorCode.FENCED_MASTER_EPOCH),
        (1, 1, {1, 2}, 1, ErrorCode.FENCED_SYNC_STATE_SET_EPOCH),
        (1, 1, {1, 2}, 3, ErrorCode.FENCED_SYNC_STATE_SET_EPOCH),
        (1, 1, {1, 9}, 2, ErrorCode.INVALID_SYNC_STATE_SET),
        (1, 1, {2, 3}, 2, ErrorCode.INVALID_SYNC_STATE_SET),
    ],
)
def test_alter_sync_state_set_rejections(
    master: int, master_epoch: int, new_set: set[int], set_epoch: int, code: ErrorCode
) -> None:
    state = group_with_master()
    event = AlterSyncStateSet(C, B, master, master_epoch, frozenset(new_set), set_epoch)
    assert_rejected_unchanged(state, event, code)


def test_alter_sync_state_set_success_bumps_set_epoch_only() -> None:
    state = group_with_master()
    result = state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1, 3}), 2))
    assert result.ok
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert broker_set.sync_state_set == {1, 3}
    assert (broker_set.master_epoch, broker_set.sync_state_set_epoch) == (1, 3)


def test_alter_on_unknown_set() -> None:
    assert_rejected_unchanged(
        ControllerState(),
        AlterSyncStateSet(C, B, 1, 1, frozenset({1}), 0),
        ErrorCode.BROKER_SET_NOT_FOUND,
    )


# -- ElectMaster


def test_first_election_requester_wins() -> None:
    state = ControllerState()
    apply_id(state, 1)
    apply_id(state, 2)
    code = elect(state, {1: hb(1), 2: hb(2)}, trigger=ElectionTrigger.BROKER, requester_broker_id=2)
    assert code is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert (broker_set.master_broker_id, broker_set.master_epoch) == (2, 1)
    assert broker_set.sync_state_set == {2}


def test_first_election_needs_a_requester() -> None:
    state = ControllerState()
    apply_id(state, 1)
    assert elect(state, {1: hb(1)}, trigger=ElectionTrigger.CONTROLLER) is (
        ErrorCode.MASTER_NOT_AVAILABLE
    )


def test_live_master_is_kept() -> None:
    state = group_with_master()
    before = state.to_dict()
    code = elect(state, {1: hb(1), 2: hb(2)}, trigger=ElectionTrigger.BROKER, requester_broker_id=2)
    assert code is ErrorCode.MASTER_STILL_EXIST
    assert state.to_dict() == before


def test_a_live_master_renews_its_epoch_only_for_itself() -> None:
    """§3.2: a master restarted at an unchanged epoch asks to be re-elected."""
    state = group_with_master()
    alive = {1: hb(1), 2: hb(2)}
    before = state.to_dict()
    # Re-designating the live master for someone else's sake stays refused.
    for requester in (None, 2):
        code = elect(
            state, alive, trigger=ElectionTrigger.ADMIN, designated_broker_id=1,
            requester_broker_id=requester,
        )  # fmt: skip
        assert code is ErrorCode.MASTER_STILL_EXIST
        assert state.to_dict() == before
    code = elect(
        state, alive, trigger=ElectionTrigger.ADMIN, designated_broker_id=1, requester_broker_id=1
    )
    assert code is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert (broker_set.master_broker_id, broker_set.master_epoch) == (1, 2)
    assert broker_set.sync_state_set == {1}


def test_admin_designated_replaces_live_master() -> None:
    state = group_with_master()
    alive = {1: hb(1), 2: hb(2), 3: hb(3)}
    assert elect(state, alive, trigger=ElectionTrigger.ADMIN, designated_broker_id=3) is (
        ErrorCode.SUCCESS
    )
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert (broker_set.master_broker_id, broker_set.master_epoch) == (3, 2)
    assert broker_set.sync_state_set == {3}


def test_refusals_say_why_replicas_are_not_alive() -> None:
    """A first master refused as not alive, or no eligible replica, names the liveness
    verdict: the kind e2e tier saw "broker orders:2 is not alive" for 4 minutes while
    the real cause (disk over diskFullRatio) sat in the heartbeat."""
    state = ControllerState()
    for broker_id in (1, 2):
        assert apply_id(state, broker_id) is ErrorCode.SUCCESS
    broker_set = state.snapshot(C, B)
    assert broker_set is not None
    full = "store cannot take writes: disk usage 95.2% of /data is above diskFullRatio 95.0%"
    request = ElectionRequest(trigger=ElectionTrigger.BROKER, requester_broker_id=2)
    decision = decide_election(broker_set, {}, request, inactive={2: full})
    assert (decision.code, decision.message) == (
        ErrorCode.BROKER_NOT_ALIVE, f"broker {B}:2 is not alive: {full}"
    )  # fmt: skip
    assert decide_election(broker_set, {}, request).message == f"broker {B}:2 is not alive"

    state = group_with_master()
    broker_set = state.snapshot(C, B)
    assert broker_set is not None
    decision = decide_election(
        broker_set,
        {},
        ElectionRequest(trigger=ElectionTrigger.BROKER, requester_broker_id=2),
        inactive={3: "heartbeat timed out", 1: "pod deleted", 2: full},
    )
    assert (decision.code, decision.message) == (
        ErrorCode.MASTER_NOT_AVAILABLE,
        f"no eligible replica for {B}: SyncStateSet [1, 2, 3], alive []; not alive: "
        f"1 (pod deleted), 2 ({full}), 3 (heartbeat timed out)",
    )


def test_designated_must_be_in_sync_state_set_and_alive() -> None:
    state = group_with_master()
    state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 2))
    alive = {1: hb(1), 2: hb(2), 3: hb(3)}
    assert elect(state, alive, trigger=ElectionTrigger.ADMIN, designated_broker_id=3) is (
        ErrorCode.ELECT_TARGET_NOT_ELIGIBLE
    )
    assert elect(state, {1: hb(1)}, trigger=ElectionTrigger.ADMIN, designated_broker_id=2) is (
        ErrorCode.ELECT_TARGET_NOT_ELIGIBLE
    )
    assert elect(state, alive, trigger=ElectionTrigger.ADMIN, designated_broker_id=7) is (
        ErrorCode.ELECT_TARGET_NOT_ELIGIBLE
    )


def test_candidates_are_sync_state_set_intersect_alive() -> None:
    state = group_with_master()
    state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1, 3}), 2))
    # 2 has the longest log but is not in the SyncStateSet: 3 must win.
    alive = {2: hb(2, max_offset=900), 3: hb(3, max_offset=100)}
    assert elect(state, alive, trigger=ElectionTrigger.CONTROLLER) is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.master_broker_id == 3


def test_unclean_election_considers_all_alive_replicas() -> None:
    state = group_with_master()
    state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1}), 2))
    alive = {2: hb(2, max_offset=10), 3: hb(3, max_offset=20)}
    assert elect(state, alive, trigger=ElectionTrigger.CONTROLLER) is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.master_broker_id is None
    assert (
        elect(state, alive, trigger=ElectionTrigger.BROKER, enable_elect_unclean_master=True)
        is ErrorCode.SUCCESS
    )
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.master_broker_id == 3


@pytest.mark.parametrize(
    ("heartbeats", "winner"),
    [
        ([hb(2, epoch=3, max_offset=1), hb(3, epoch=2, max_offset=99)], 2),  # epoch first
        ([hb(2, max_offset=50), hb(3, max_offset=60)], 3),  # then maxOffset
        ([hb(2, priority=5), hb(3, priority=1)], 3),  # then electionPriority (low wins)
        ([hb(3), hb(2)], 2),  # then brokerId
    ],
)
def test_ranking(heartbeats: list[ReplicaHeartbeat], winner: int) -> None:
    state = group_with_master()
    alive = {h.broker_id: h for h in heartbeats}
    assert elect(state, alive, trigger=ElectionTrigger.CONTROLLER) is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.master_broker_id == winner


def test_no_candidate_controller_trigger_records_no_master() -> None:
    state = group_with_master()
    assert elect(state, {}, trigger=ElectionTrigger.CONTROLLER) is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert (broker_set.master_broker_id, broker_set.master_epoch) == (None, 2)
    assert broker_set.sync_state_set == {1, 2, 3}  # kept: the first member back is electable
    # Repeating it changes nothing: there is no master left to fence.
    assert elect(state, {}, trigger=ElectionTrigger.CONTROLLER) is ErrorCode.MASTER_NOT_AVAILABLE
    # A returning SyncStateSet member asks and wins.
    code = elect(state, {2: hb(2)}, trigger=ElectionTrigger.BROKER, requester_broker_id=2)
    assert code is ErrorCode.SUCCESS
    broker_set = state.get(C, B)
    assert broker_set is not None and (broker_set.master_broker_id, broker_set.master_epoch) == (
        2,
        3,
    )


def test_no_candidate_broker_request_is_refused() -> None:
    state = group_with_master()
    state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1}), 2))
    before = state.to_dict()
    code = elect(state, {2: hb(2)}, trigger=ElectionTrigger.BROKER, requester_broker_id=2)
    assert code is ErrorCode.MASTER_NOT_AVAILABLE
    assert state.to_dict() == before


def test_election_based_on_stale_epochs_loses_the_race() -> None:
    """Two leaders decided on the same epochs: only the first commit wins."""
    state = group_with_master()
    broker_set = state.snapshot(C, B)
    assert broker_set is not None
    first = decide_election(broker_set, {2: hb(2)}, ElectionRequest(ElectionTrigger.CONTROLLER))
    second = decide_election(broker_set, {3: hb(3)}, ElectionRequest(ElectionTrigger.CONTROLLER))
    assert first.event is not None and second.event is not None
    assert state.apply(first.event).ok
    assert_rejected_unchanged(state, second.event, ErrorCode.FENCED_MASTER_EPOCH)


def test_elect_event_for_unregistered_broker_is_rejected() -> None:
    state = group_with_master()
    event = ElectMaster(C, B, 9, based_on_master_epoch=1, based_on_sync_state_set_epoch=2)
    assert_rejected_unchanged(state, event, ErrorCode.NEED_TO_BE_REGISTERED)


# -- CleanBrokerData


def test_clean_removes_ids_and_fences_a_removed_master() -> None:
    state = group_with_master()
    assert state.apply(CleanBrokerData(C, B, frozenset({1, 3}))).ok
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert set(broker_set.brokers) == {2}
    assert broker_set.master_broker_id is None and broker_set.master_epoch == 2
    assert broker_set.sync_state_set == {2} and broker_set.sync_state_set_epoch == 3


def test_clean_unknown_ids_is_rejected() -> None:
    state = group_with_master()
    assert_rejected_unchanged(
        state, CleanBrokerData(C, B, frozenset({7})), ErrorCode.NEED_TO_BE_REGISTERED
    )


def test_clean_whole_set_keeps_epochs_as_a_floor() -> None:
    state = group_with_master()
    assert state.apply(CleanBrokerData(C, B, None)).ok
    assert state.get(C, B) is None
    assert state.next_broker_id(C, B) == 1
    apply_id(state, 1)
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert broker_set.master_epoch == 3  # above anything the wiped set used
    assert broker_set.sync_state_set_epoch == 4
    # The re-created set elects its first master like a new one, above the floor.
    assert elect(state, {1: hb(1)}, trigger=ElectionTrigger.BROKER, requester_broker_id=1) is (
        ErrorCode.SUCCESS
    )
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert (broker_set.master_broker_id, broker_set.master_epoch) == (1, 4)
    assert (broker_set.sync_state_set, broker_set.sync_state_set_epoch) == ({1}, 5)


def test_recreated_set_elects_its_first_master() -> None:
    """Issue 22: create, clean the whole set (the operator's finalizer), re-create, elect."""
    state = group_with_master()
    assert state.apply(CleanBrokerData(C, B, None)).ok
    for broker_id in (1, 2, 3):
        assert apply_id(state, broker_id, f"new-{broker_id}") is ErrorCode.SUCCESS
    alive = {2: hb(2, epoch=0), 3: hb(3, epoch=0)}
    assert elect(state, alive, trigger=ElectionTrigger.CONTROLLER) is (
        ErrorCode.MASTER_NOT_AVAILABLE  # nobody asked yet: as for a new set
    )
    assert elect(state, alive, trigger=ElectionTrigger.BROKER, requester_broker_id=2) is (
        ErrorCode.SUCCESS
    )
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert (broker_set.master_broker_id, broker_set.master_epoch) == (2, 4)
    # Once it has had a master, the re-created set follows the SyncStateSet rules.
    assert elect(state, alive, trigger=ElectionTrigger.BROKER, requester_broker_id=3) is (
        ErrorCode.MASTER_STILL_EXIST
    )


def test_partial_clean_is_not_a_first_election() -> None:
    """Cleaning the master alone keeps the SyncStateSet rules: the survivors are
    not new, and an out-of-sync one must not win as a "first" master."""
    state = group_with_master()
    assert state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1}), 2)).ok
    assert state.apply(CleanBrokerData(C, B, frozenset({1}))).ok
    alive = {2: hb(2), 3: hb(3)}
    assert elect(state, alive, trigger=ElectionTrigger.BROKER, requester_broker_id=2) is (
        ErrorCode.MASTER_NOT_AVAILABLE
    )


# -- persistence


def test_state_and_events_round_trip_through_dicts() -> None:
    state = group_with_master()
    state.apply(CleanBrokerData(C, "gone", None))  # rejected, harmless
    state.apply(ApplyBrokerId(C, "broker-b", 1, "q", "x:1"))
    state.apply(CleanBrokerData(C, "broker-b", None))
    assert ControllerState.from_dict(state.to_dict()).to_dict() == state.to_dict()
    events: list[Event] = [
        ApplyBrokerId(C, B, 1, "c", "a:1"),
        RegisterBroker(C, B, 1, "a:2"),
        AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 2),
        ElectMaster(C, B, None, 3, 4, "why"),
        CleanBrokerData(C, B, frozenset({2})),
        CleanBrokerData(C, B, None),
    ]
    for event in events:
        assert event_from_dict(event.to_dict()) == event


def test_has_had_master_survives_a_dump_and_old_dumps_keep_the_old_rule() -> None:
    state = group_with_master()
    assert state.apply(CleanBrokerData(C, B, None)).ok
    assert apply_id(state, 1) is ErrorCode.SUCCESS  # re-created at epoch floor 3, no master yet
    dump = state.to_dict()
    assert dump["brokerSets"][0]["hasHadMaster"] is False
    loaded = ControllerState.from_dict(dump)
    assert elect(loaded, {1: hb(1)}, trigger=ElectionTrigger.BROKER, requester_broker_id=1) is (
        ErrorCode.SUCCESS
    )
    # A dump written before the field existed: a set past masterEpoch 0 had a master.
    for raw, had in (({"masterBrokerId": None, "masterEpoch": 0}, False),
                     ({"masterBrokerId": None, "masterEpoch": 3}, True),
                     ({"masterBrokerId": 1, "masterEpoch": 1}, True)):  # fmt: skip
        old = {k: v for k, v in dump["brokerSets"][0].items() if k != "hasHadMaster"}
        broker_set = ControllerState.from_dict({"brokerSets": [{**old, **raw}]}).get(C, B)
        assert broker_set is not None and broker_set.has_had_master is had


@pytest.mark.parametrize(
    "raw",
    [{}, {"type": "Nope"}, {"type": "ApplyBrokerId", "cluster_name": C}],
)
def test_malformed_event_dicts_raise_value_error(raw: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        event_from_dict(raw)


def test_a_replica_only_graced_by_a_new_leader_is_never_elected() -> None:
    """Issue 7 item 9: during a new controller leader's grace, a SyncStateSet member
    that has not heartbeated to it yet may already be dead: never a candidate."""
    state = group_with_master()
    broker_set = state.snapshot(C, B)
    assert broker_set is not None
    # Master 1 reported dead; 2 is alive only by grace (zero progress), 3 heard.
    alive = {2: ReplicaHeartbeat(2), 3: hb(3)}
    controller = ElectionRequest(trigger=ElectionTrigger.CONTROLLER)
    decision = decide_election(broker_set, alive, controller, frozenset({2}))
    assert decision.event is not None and decision.event.new_master_broker_id == 3
    # Only graced members left: wait for them to prove themselves (retried).
    decision = decide_election(broker_set, {2: ReplicaHeartbeat(2)}, controller, frozenset({2}))
    assert decision.code is ErrorCode.MASTER_NOT_AVAILABLE and decision.event is None
    assert "heartbeated" in decision.message
    # A graced live master is still kept.
    graced_master = decide_election(
        broker_set, {1: ReplicaHeartbeat(1), 3: hb(3)}, controller, frozenset({1})
    )
    assert graced_master.code is ErrorCode.MASTER_STILL_EXIST


# -- request ids (issue 17 item 2): a retry gets the first answer


def test_a_repeated_alter_gets_the_first_answer_and_changes_nothing() -> None:
    state = group_with_master()
    alter = AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 2, request_id="r-1")
    first = state.apply(alter)
    assert first.outcome == SyncStateSetAltered(frozenset({1, 2}), 3)
    before = copy.deepcopy(state.to_dict())
    again = state.apply(alter)  # without the id this is FENCED_SYNC_STATE_SET_EPOCH
    assert again == first
    assert state.to_dict() == before
    stale = AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 2)
    assert_rejected_unchanged(state, stale, ErrorCode.FENCED_SYNC_STATE_SET_EPOCH)


def test_a_repeated_switchover_gets_the_first_answer() -> None:
    state = group_with_master()
    snapshot = state.snapshot(C, B)
    assert snapshot is not None
    request = ElectionRequest(ElectionTrigger.ADMIN, designated_broker_id=2)
    decision = decide_election(snapshot, {1: hb(1), 2: hb(2)}, request)
    assert decision.event is not None
    first = state.apply(replace(decision.event, request_id="switch-1"))
    assert isinstance(first.outcome, MasterElected) and first.outcome.master_broker_id == 2
    before = copy.deepcopy(state.to_dict())
    # The retry is decided again on the state the first commit left (or on the
    # old snapshot, if it raced the first commit): either way the first answer.
    after = state.snapshot(C, B)
    assert after is not None
    redo = decide_election(after, {1: hb(1), 2: hb(2)}, request)
    assert redo.code is ErrorCode.MASTER_STILL_EXIST  # why the state must answer first
    assert state.answer_of(("ElectMaster", C, B, "switch-1")) == first
    assert state.apply(replace(decision.event, request_id="switch-1")) == first
    assert state.to_dict() == before


def test_a_repeated_whole_set_clean_and_a_repeated_refusal_get_the_first_answer() -> None:
    state = group_with_master()
    clean = CleanBrokerData(C, B, None, request_id="wipe")
    first = state.apply(clean)
    assert first.outcome == BrokersCleaned((1, 2, 3))
    assert state.apply(clean) == first  # not BROKER_SET_NOT_FOUND
    refused = ApplyBrokerId(C, B, 2, "rc", "a:1", request_id="too-early")
    assert state.apply(refused).code is ErrorCode.BROKER_ID_INVALID
    assert apply_id(state, 1) is ErrorCode.SUCCESS
    assert state.apply(refused).code is ErrorCode.BROKER_ID_INVALID  # id 2 is free now
    assert apply_id(state, 2) is ErrorCode.SUCCESS


def test_request_ids_are_scoped_by_event_type_and_broker_set() -> None:
    state = group_with_master()
    assert state.apply(ApplyBrokerId(C, "other", 1, "rc", "o:1", request_id="same")).ok
    register = RegisterBroker(C, B, 1, "moved:1", request_id="same")
    assert state.apply(register).ok
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.brokers[1].address == "moved:1"


def test_recent_request_ids_are_bounded_oldest_forgotten_first() -> None:
    state = ControllerState()
    assert apply_id(state, 1) is ErrorCode.SUCCESS
    for i in range(RECENT_REQUESTS_BOUND + 2):
        assert state.apply(RegisterBroker(C, B, 1, f"h:{i}", request_id=f"id-{i}")).ok
    remembered = [key[3] for key in state.recent_requests]
    assert remembered == [f"id-{i}" for i in range(2, RECENT_REQUESTS_BOUND + 2)]
    # A forgotten id is a new request again (here harmless: the address moves back).
    assert state.apply(RegisterBroker(C, B, 1, "h:0", request_id="id-0")).ok
    assert [key[3] for key in state.recent_requests][-1] == "id-0"
    assert len(state.recent_requests) == RECENT_REQUESTS_BOUND


def test_request_ids_survive_a_dump_and_old_dumps_have_none() -> None:
    state = group_with_master()
    alter = AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 2, request_id="r-1")
    first = state.apply(alter)
    refused = state.apply(ApplyBrokerId(C, B, 7, "rc", "a:7", request_id="r-2"))
    dump = state.to_dict()
    loaded = ControllerState.from_dict(json.loads(json.dumps(dump)))
    assert loaded.to_dict() == dump
    assert loaded.apply(alter) == first
    assert loaded.apply(ApplyBrokerId(C, B, 7, "rc", "a:7", request_id="r-2")) == refused
    old = {k: v for k, v in dump.items() if k != "recentRequests"}
    assert not ControllerState.from_dict(old).recent_requests
    assert event_from_dict(alter.to_dict()) == alter
    assert "request_id" not in AlterSyncStateSet(C, B, 1, 1, frozenset({1}), 2).to_dict()
