"""The takeover wait as replicated state (DESIGN.md §3.3 "Fencing", issue 17
item 3): the leader decides how long a new master must hold its
acknowledgements, the ElectMaster event carries that decision, `apply`
stores it in the broker set, and every node answers `masterTakeoverWaitMs`
from the stored record with the pure `remaining_ms`, never from a record the
request path may have skipped (a commit that timed out but applied later).
"""

from __future__ import annotations

from brokergroup_controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    ControllerState,
    ElectMaster,
    event_from_dict,
)
from brokergroup_controller.takeover import Takeover, combine_waits, remaining_ms

C, B = "DefaultCluster", "broker-a"


def group_with_master_1() -> ControllerState:
    state = ControllerState()
    for broker_id in (1, 2):
        state.apply(ApplyBrokerId(C, B, broker_id, f"rc{broker_id}", f"10.0.0.{broker_id}:1"))
    assert state.apply(ElectMaster(C, B, 1, 0, 0)).ok
    assert state.apply(AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 1)).ok
    return state


def test_apply_stores_the_leaders_takeover_decision_with_the_new_epoch() -> None:
    state = group_with_master_1()
    event = ElectMaster(
        C, B, 2, 1, 2, "master 1 inactive",
        takeover_old_master_broker_id=1, takeover_wait_ms=1500, decided_at_ms=1_700_000_000_000,
    )  # fmt: skip
    assert state.apply(event).ok
    broker_set = state.get(C, B)
    assert broker_set is not None
    assert broker_set.takeover == Takeover(
        master_epoch=2, old_master_broker_id=1, wait_ms=1500, decided_at_ms=1_700_000_000_000
    )
    assert event_from_dict(event.to_dict()) == event
    assert ControllerState.from_dict(state.to_dict()).to_dict() == state.to_dict()


def test_a_rejected_election_leaves_the_takeover_unchanged() -> None:
    state = group_with_master_1()
    before = state.to_dict()
    stale = ElectMaster(C, B, 2, 0, 0, takeover_old_master_broker_id=1, takeover_wait_ms=9)
    assert not state.apply(stale).ok
    assert state.to_dict() == before


def test_an_event_from_an_older_log_has_no_takeover_record() -> None:
    """Events written before the field existed decode with `None`: unknown, not zero."""
    state = group_with_master_1()
    raw = ElectMaster(C, B, 2, 1, 2).to_dict()
    for name in ("takeover_old_master_broker_id", "takeover_wait_ms", "decided_at_ms"):
        raw.pop(name)
    assert state.apply(event_from_dict(raw)).ok
    broker_set = state.get(C, B)
    assert broker_set is not None and broker_set.takeover is None


def test_remaining_counts_from_when_this_node_first_saw_the_record() -> None:
    t = Takeover(master_epoch=2, old_master_broker_id=1, wait_ms=1500, decided_at_ms=0)
    answers = [
        remaining_ms(t, seen_ago_ms=s, decided_ago_wall_ms=s, forget_after_ms=60_000)
        for s in (0, 500, 1500, 4000)
    ]
    assert answers == [1500, 1000, 0, 0]


def test_a_node_that_saw_the_record_late_answers_more_never_less() -> None:
    """A follower applying late, or a new leader after a restart, counts from
    its own first sight: its answer is at least the true remaining time."""
    t = Takeover(master_epoch=2, old_master_broker_id=1, wait_ms=1500, decided_at_ms=0)
    assert remaining_ms(t, seen_ago_ms=0, decided_ago_wall_ms=800, forget_after_ms=60_000) == 1500


def test_a_record_long_past_by_the_wall_clock_is_forgotten() -> None:
    """A restart replays old elections: one decided minutes ago holds nobody."""
    t = Takeover(master_epoch=2, old_master_broker_id=1, wait_ms=1500, decided_at_ms=0)
    assert remaining_ms(t, seen_ago_ms=0, decided_ago_wall_ms=61_501, forget_after_ms=60_000) == 0
    assert (
        remaining_ms(t, seen_ago_ms=0, decided_ago_wall_ms=61_499, forget_after_ms=60_000) == 1500
    )


def test_a_certain_end_of_the_old_master_waives_the_rest() -> None:
    t = Takeover(master_epoch=2, old_master_broker_id=1, wait_ms=1500, decided_at_ms=0)
    assert (
        remaining_ms(
            t, seen_ago_ms=0, decided_ago_wall_ms=0, forget_after_ms=60_000, old_master_gone=True
        )
        == 0
    )


def test_a_second_election_keeps_waiting_for_the_first_lease() -> None:
    """1 replaced by 2 (wait 1400 left), 2 dies for certain: 3 still waits 1400, for 1."""
    assert combine_waits(1, 1400, 2, 0) == (1, 1400)
    assert combine_waits(1, 100, 2, 900) == (2, 900)
    assert combine_waits(None, 0, 1, 700) == (1, 700)
    assert combine_waits(1, 300, None, 0) == (1, 300)
