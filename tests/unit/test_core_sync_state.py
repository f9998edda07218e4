"""SyncStateSet maintenance decisions (DESIGN.md §3.3; seed
controller-mode-design "Shrink/Expand SyncStateSet").

How: `SyncStateSetManager` is fed hand-made HA progress and explicit times;
tables cover each shrink/expand clause, hypothesis checks the safety
property against a naive reference: confirmOffset never exceeds the ack of
any member of either the old or the proposed set, and never decreases.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.sync_state import (
    ReplicaProgress,
    ShrinkReason,
    SyncStateSetManager,
)

MAX_NOT_CATCH_UP = 5000


def manager(
    sync_state_set: frozenset[int] = frozenset({1, 2, 3}),
    *,
    epoch_start: int = 0,
    floor: int = 0,
    since_ms: int = 0,
) -> SyncStateSetManager:
    return SyncStateSetManager(
        master_broker_id=1,
        master_epoch=3,
        epoch_start_offset=epoch_start,
        sync_state_set=sync_state_set,
        sync_state_set_epoch=7,
        confirm_offset_floor=floor,
        master_since_ms=since_ms,
        ha_max_time_slave_not_catch_up_ms=MAX_NOT_CATCH_UP,
    )


def up(ack: int, caught_up_ms: int = 0, connected: bool = True) -> ReplicaProgress:
    return ReplicaProgress(ack_offset=ack, last_caught_up_ms=caught_up_ms, connected=connected)


def test_confirm_offset_is_min_ack_with_the_masters_own_max() -> None:
    m = manager()
    assert m.confirm_offset(1000, {2: up(800), 3: up(900)}) == 800
    assert m.confirm_offset(700, {2: up(800), 3: up(900)}) == 800  # never decreases


def test_member_never_heard_from_counts_zero() -> None:
    m = manager()
    assert m.confirm_offset(1000, {2: up(800)}) == 0


def test_shrink_a_disconnected_member_at_once() -> None:
    m = manager()
    proposal = m.decide(10, 1000, {2: up(1000, 10), 3: up(500, 5, connected=False)})
    assert proposal is not None
    assert proposal.new_set == {1, 2}
    assert proposal.shrunk == ((3, ShrinkReason.DISCONNECTED),)
    assert proposal.based_on_sync_state_set_epoch == 7


def test_shrink_a_member_not_caught_up_for_too_long() -> None:
    m = manager()
    progress = {2: up(1000, 6000), 3: up(500, 1000)}
    assert m.decide(6000, 1000, progress) is None  # 5000 ms: not yet older than the limit
    proposal = m.decide(6001, 1000, progress)
    assert proposal is not None and proposal.shrunk == ((3, ShrinkReason.NOT_CAUGHT_UP),)


def test_a_new_master_gives_its_old_set_one_window_to_reconnect() -> None:
    m = manager(since_ms=10_000)
    assert m.decide(10_000 + MAX_NOT_CATCH_UP, 0, {2: up(0, 0)}) is None
    proposal = m.decide(10_001 + MAX_NOT_CATCH_UP, 0, {2: up(0, 0)})
    assert proposal is not None
    assert dict(proposal.shrunk) == {2: ShrinkReason.NOT_CAUGHT_UP, 3: ShrinkReason.NEVER_CONNECTED}


def test_expand_needs_ack_at_confirm_offset_and_epoch_start() -> None:
    m = manager(frozenset({1, 2}), epoch_start=600)
    progress = {2: up(800, 0), 3: up(500, 0)}
    assert m.decide(1, 1000, progress) is None  # 3 below confirm (800) and epoch start
    progress[3] = up(800, 0)
    proposal = m.decide(2, 1000, progress)
    assert proposal is not None and proposal.new_set == {1, 2, 3}
    assert proposal.expanded == {3}


def test_expand_refused_below_the_epoch_start_even_if_at_confirm() -> None:
    m = manager(frozenset({1}), epoch_start=600)
    assert m.decide(1, 500, {3: up(500)}) is None  # confirm = 500, but epoch began at 600


def test_disconnected_non_member_is_not_expanded() -> None:
    m = manager(frozenset({1}))
    assert m.decide(1, 0, {2: up(0, connected=False)}) is None


def test_at_most_one_alter_pending_and_union_while_pending() -> None:
    m = manager(frozenset({1, 2}))
    proposal = m.decide(1, 1000, {2: up(1000, 1), 3: up(1000, 1)})
    assert proposal is not None and proposal.new_set == {1, 2, 3}
    assert m.decide(2, 1000, {2: up(1000, 1, connected=False), 3: up(1000, 1)}) is None
    assert m.effective_set() == {1, 2, 3}
    m.on_alter_accepted(proposal, frozenset({1, 2, 3}), 8)
    assert m.pending is None and m.sync_state_set == {1, 2, 3} and m.sync_state_set_epoch == 8


def test_shrink_pending_still_waits_on_the_shrunk_member() -> None:
    m = manager()
    proposal = m.decide(1, 1000, {2: up(1000, 1), 3: up(400, 0, connected=False)})
    assert proposal is not None and proposal.new_set == {1, 2}
    assert m.confirm_offset(1000, {2: up(1000), 3: up(400, connected=False)}) == 400
    assert m.settled_set_size() == 2
    m.on_alter_accepted(proposal, proposal.new_set, 8)
    assert m.confirm_offset(1000, {2: up(1000)}) == 1000


def test_failed_alter_is_forgotten_and_stale_answers_ignored() -> None:
    m = manager(frozenset({1, 2}))
    first = m.decide(1, 10, {3: up(10)})
    assert first is not None
    m.on_alter_failed(first)
    assert m.pending is None and m.sync_state_set_epoch == 7
    second = m.decide(2, 10, {2: up(10, 2), 3: up(10)})
    assert second is not None
    m.on_alter_failed(first)  # a late answer to the first proposal
    assert m.pending is second


def test_newer_controller_view_settles_a_pending_proposal() -> None:
    m = manager(frozenset({1, 2}))
    proposal = m.decide(1, 10, {2: up(10, 1), 3: up(10)})
    assert proposal is not None
    m.on_controller_view(frozenset({1, 2}), 7)  # same epoch: nothing
    assert m.pending is proposal
    m.on_controller_view(frozenset({1, 2, 3}), 8)
    assert m.pending is None and m.sync_state_set == {1, 2, 3}
    m.on_controller_view(frozenset({1}), 6)  # older: ignored
    assert m.sync_state_set == {1, 2, 3}


def test_master_is_always_in_its_own_set() -> None:
    m = manager(frozenset({2, 3}))
    assert 1 in m.sync_state_set


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=1000),  # time step
            st.integers(min_value=0, max_value=50),  # master appends
            st.dictionaries(
                st.integers(min_value=2, max_value=5),
                st.tuples(st.integers(min_value=0, max_value=60), st.booleans()),
            ),
            st.sampled_from(["none", "accept", "fail"]),
        ),
        max_size=40,
    )
)
def test_confirm_offset_never_exceeds_any_member_of_old_or_proposed_set(
    steps: list[tuple[int, int, dict[int, tuple[int, bool]], str]],
) -> None:
    m = manager(frozenset({1, 2}))
    now = 0
    master_max = 0
    acks: dict[int, int] = {}
    caught: dict[int, int] = {}
    links: dict[int, bool] = {}
    last_confirm = 0
    for dt, appended, slave_moves, answer in steps:
        now += dt
        master_max += appended
        for broker_id, (lag, connected) in slave_moves.items():
            acks[broker_id] = max(acks.get(broker_id, 0), max(0, master_max - lag))
            caught[broker_id] = now if lag == 0 else caught.get(broker_id, 0)
            links[broker_id] = connected
        # The HA service reports every slave it knows, every time.
        progress = {b: up(acks[b], caught[b], links[b]) for b in acks}
        proposal = m.decide(now, master_max, progress)
        confirm = m.confirm_offset(master_max, progress)
        assert confirm >= last_confirm
        last_confirm = confirm
        everyone = m.sync_state_set | (m.pending.new_set if m.pending else frozenset())
        for member in everyone - {1}:
            seen = progress.get(member)
            # Safety: what is confirmed is on every member a next master may come from.
            if confirm > 0:
                assert seen is not None and seen.ack_offset >= confirm
        assert confirm <= master_max
        if proposal is not None and answer == "accept":
            m.on_alter_accepted(proposal, proposal.new_set, m.sync_state_set_epoch + 1)
        elif proposal is not None and answer == "fail":
            m.on_alter_failed(proposal)
