"""The controller's switchover decision (issue 32 item 3, DESIGN.md §2.2 ElectMaster,
§5 Rolling update): one owner for "who takes over from the master".

`election.switchover_targets` and `decide_election` with `switchover`: the live master
is moved to the best other replica, where "best" is the ranking elections use
(epoch desc, maxOffset desc, electionPriority asc, brokerId asc). Checked against a
naive reference on random sets (hypothesis): the target is never the master, always a
live SyncStateSet member heard by this leader and within the caller's eligible ids,
and it is exactly the replica a controller-triggered election would pick if the master
died then. Concrete cases: electionPriority decides between equal logs, unclean
election never widens a switchover, and refusals (no live master, no candidate) carry
no event. The request's parsing: a switchover names no target.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_controller.election import (
    ElectionRequest,
    ElectionTrigger,
    ReplicaHeartbeat,
    decide_election,
    switchover_targets,
)
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.request_parsing import BadRequest, parse_elect
from brokergroup_controller.state import BrokerRecord, BrokerSet

C, B = "c", "broker-a"
SWITCHOVER = ElectionRequest(trigger=ElectionTrigger.ADMIN, switchover=True)


def broker_set(ids: range | list[int], master: int | None, sss: set[int]) -> BrokerSet:
    return BrokerSet(
        C,
        B,
        next_broker_id=max(ids) + 1,
        brokers={i: BrokerRecord(f"10.0.0.{i}:10911", f"code-{i}") for i in ids},
        master_broker_id=master,
        master_epoch=3,
        sync_state_set=set(sss),
        sync_state_set_epoch=5,
        has_had_master=True,
    )


def hb(
    broker_id: int, epoch: int = 3, max_offset: int = 100, priority: int = 0
) -> ReplicaHeartbeat:
    return ReplicaHeartbeat(broker_id, epoch, max_offset, 0, priority)


def winner(decision: object) -> int | None:
    event = getattr(decision, "event", None)
    return None if event is None else event.new_master_broker_id


# ---------------------------------------------------------------- concrete cases


def test_election_priority_decides_between_equal_logs() -> None:
    """The operator's old ranking (epoch, maxOffset, brokerId) ignored electionPriority:
    it would have switched to 2."""
    bs = broker_set(range(1, 4), 1, {1, 2, 3})
    alive = {1: hb(1), 2: hb(2, priority=5), 3: hb(3, priority=1)}
    assert [h.broker_id for h in switchover_targets(bs, alive)] == [3, 2]
    decision = decide_election(bs, alive, SWITCHOVER)
    assert decision.ok and winner(decision) == 3
    assert decision.event is not None
    assert decision.event.based_on_master_epoch == 3
    assert decision.event.based_on_sync_state_set_epoch == 5


def test_the_newest_longest_log_wins_before_priority() -> None:
    bs = broker_set(range(1, 4), 1, {1, 2, 3})
    alive = {1: hb(1), 2: hb(2, max_offset=200, priority=9), 3: hb(3, priority=0)}
    assert winner(decide_election(bs, alive, SWITCHOVER)) == 2
    alive[3] = hb(3, epoch=4, max_offset=50, priority=0)
    assert winner(decide_election(bs, alive, SWITCHOVER)) == 3


def test_only_eligible_live_heard_in_sync_slaves() -> None:
    bs = broker_set(range(1, 6), 1, {1, 2, 3, 4})
    # 5 is out of sync with the longest log; 4 is alive only by grace; 2 not eligible.
    alive = {1: hb(1), 2: hb(2, max_offset=300), 3: hb(3), 4: hb(4, max_offset=400),
             5: hb(5, max_offset=900)}  # fmt: skip
    request = ElectionRequest(
        trigger=ElectionTrigger.ADMIN,
        switchover=True,
        eligible_broker_ids=frozenset({2, 3, 4, 5}) - {2},
        enable_elect_unclean_master=True,  # never widens a switchover
    )
    assert [h.broker_id for h in switchover_targets(bs, alive, {4}, {3, 4, 5})] == [3]
    assert winner(decide_election(bs, alive, request, frozenset({4}))) == 3


def test_no_candidate_is_refused_with_the_reason_and_no_event() -> None:
    bs = broker_set(range(1, 4), 1, {1, 2})
    alive = {1: hb(1), 2: hb(2), 3: hb(3)}
    request = ElectionRequest(
        trigger=ElectionTrigger.ADMIN, switchover=True, eligible_broker_ids=frozenset({3})
    )
    decision = decide_election(bs, alive, request)
    assert decision.code is ErrorCode.ELECT_TARGET_NOT_ELIGIBLE and decision.event is None
    assert "SyncStateSet [1, 2]" in decision.message and "eligible [3]" in decision.message


@pytest.mark.parametrize("master", [None, 1])
def test_without_a_live_master_a_switchover_is_refused(master: int | None) -> None:
    bs = broker_set(range(1, 4), master, {1, 2, 3})
    decision = decide_election(bs, {2: hb(2), 3: hb(3)}, SWITCHOVER)
    assert decision.code is ErrorCode.MASTER_NOT_AVAILABLE and decision.event is None


def test_parse_elect_switchover_names_no_target() -> None:
    key = {"clusterName": C, "brokerName": B}
    parsed = parse_elect({**key, "switchover": True, "eligibleBrokerIds": [2, 3]})
    assert parsed.switchover and parsed.trigger is ElectionTrigger.ADMIN
    assert parsed.eligible_broker_ids == frozenset({2, 3})
    assert parse_elect({**key, "brokerId": 2}).switchover is False
    for bad in (
        {"switchover": True, "designatedBrokerId": 2},
        {"switchover": True, "brokerId": 2},
        {"switchover": True, "trigger": "broker"},
        {"designatedBrokerId": 2, "eligibleBrokerIds": [2]},
        {"switchover": True, "eligibleBrokerIds": [0]},
    ):
        with pytest.raises(BadRequest):
            parse_elect({**key, **bad})


# ---------------------------------------------------------------- against a naive reference


@st.composite
def situations(
    draw: st.DrawFn,
) -> tuple[BrokerSet, dict[int, ReplicaHeartbeat], set[int], set[int] | None]:
    n = draw(st.integers(1, 6))
    ids = list(range(1, n + 1))
    master = draw(st.sampled_from(ids))
    sss = {master} | set(draw(st.lists(st.sampled_from(ids), max_size=n)))
    alive_ids = draw(st.lists(st.sampled_from(ids), unique=True, max_size=n))
    alive = {
        b: hb(b, draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(0, 2)))
        for b in alive_ids
    }
    unheard = set(draw(st.lists(st.sampled_from(ids), max_size=2)))
    eligible = draw(st.none() | st.sets(st.sampled_from(ids)))
    return broker_set(ids, master, sss), alive, unheard, eligible


@settings(max_examples=400)
@given(situations())
def test_switchover_matches_the_reference_and_the_election_ranking(
    situation: tuple[BrokerSet, dict[int, ReplicaHeartbeat], set[int], set[int] | None],
) -> None:
    bs, alive, unheard, eligible = situation
    master = bs.master_broker_id
    # Naive reference: filter, then the best by the election's ranking written out.
    pool = [
        h
        for b, h in alive.items()
        if b in bs.sync_state_set and b != master and b not in unheard
        and (eligible is None or b in eligible)
    ]  # fmt: skip
    expected = sorted(
        pool, key=lambda h: (-h.epoch, -h.max_offset, h.election_priority, h.broker_id)
    )
    assert switchover_targets(bs, alive, unheard, eligible) == expected

    request = ElectionRequest(
        trigger=ElectionTrigger.ADMIN,
        switchover=True,
        eligible_broker_ids=None if eligible is None else frozenset(eligible),
    )
    decision = decide_election(bs, alive, request, frozenset(unheard))
    if master not in alive:
        assert decision.code is ErrorCode.MASTER_NOT_AVAILABLE and decision.event is None
        return
    if not expected:
        assert decision.code is ErrorCode.ELECT_TARGET_NOT_ELIGIBLE and decision.event is None
        return
    assert decision.ok and winner(decision) == expected[0].broker_id != master
    if eligible is None:
        # The replica a controller-triggered election picks once the master is gone.
        gone = {b: h for b, h in alive.items() if b != master}
        elected = decide_election(
            bs, gone, ElectionRequest(trigger=ElectionTrigger.CONTROLLER), frozenset(unheard)
        )
        assert winner(elected) == winner(decision)
