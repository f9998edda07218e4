"""Role decisions (DESIGN.md §3.4 "role changes only for a strictly higher
masterEpoch", "fenced until the role is confirmed"; §3.6 / seed RIP-32 acting
master).

How: `decide` over a current `RoleState` and a controller `GroupView`;
a scripted failover transcript, then a hypothesis run over random answer
sequences checking that epochs never go back and a master role is only
ever taken at a strictly higher epoch.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.role import (
    BecomeMaster,
    BecomeSlave,
    Fence,
    GroupView,
    RequestElection,
    Role,
    RoleState,
    SetActingMaster,
    SyncStateSetChanged,
    apply,
    confirms_master,
    decide,
)

ME = 2


def group(
    master: int | None,
    epoch: int,
    *,
    sss: frozenset[int] = frozenset({1, 2}),
    set_epoch: int = 1,
    alive: frozenset[int] = frozenset({1, 2, 3}),
    address: str | None = None,
) -> GroupView:
    if master is not None and address is None:
        address = f"127.0.0.{master}:10911"
    return GroupView(master, address, epoch, sss, set_epoch, alive)


def run(state: RoleState, view: GroupView) -> tuple[RoleState, list[object]]:
    decisions = decide(state, view, ME)
    for d in decisions:
        state = apply(state, d)
    return state, list(decisions)


def test_starts_fenced() -> None:
    assert RoleState().role is Role.FENCED and not RoleState().confirmed


def test_scripted_failover_transcript() -> None:
    s = RoleState()
    s, d = run(s, group(None, 0, alive=frozenset({1, 2})))
    assert d == [RequestElection()]  # 1 is the smallest alive: it acts, not us
    s, d = run(s, group(1, 1))
    assert d == [BecomeSlave(1, 1, "127.0.0.1:10911")] and s.role is Role.SLAVE
    s, d = run(s, group(1, 1))
    assert d == []
    s, d = run(s, group(None, 1, alive=frozenset({2, 3})))  # master 1 died
    assert d == [RequestElection(), SetActingMaster(True)] and s.acting_master
    s, d = run(s, group(ME, 2, sss=frozenset({ME}), set_epoch=2))
    assert d == [BecomeMaster(2, frozenset({ME}), 2), SetActingMaster(False)]
    assert s.role is Role.MASTER and not s.acting_master
    s, d = run(s, group(ME, 2, sss=frozenset({ME, 3}), set_epoch=3))
    assert d == [SyncStateSetChanged(frozenset({ME, 3}), 3)]
    s, d = run(s, group(3, 3))  # we were replaced
    assert d == [BecomeSlave(3, 3, "127.0.0.3:10911")] and s.role is Role.SLAVE


def test_stale_epoch_is_ignored() -> None:
    s = RoleState(Role.SLAVE, 5, 1, "127.0.0.1:10911")
    assert decide(s, group(ME, 4), ME) == []


def test_same_epoch_never_changes_the_role() -> None:
    s = RoleState(Role.SLAVE, 5, 1, "127.0.0.1:10911")
    assert decide(s, group(ME, 5), ME) == []


def test_slave_follows_its_master_to_a_new_address_at_the_same_epoch() -> None:
    s = RoleState(Role.SLAVE, 5, 1, "127.0.0.1:10911")
    assert decide(s, group(1, 5, address="127.0.0.9:10911"), ME) == [
        BecomeSlave(5, 1, "127.0.0.9:10911")
    ]


def test_higher_epoch_without_master_fences_a_master() -> None:
    s = RoleState(Role.MASTER, 5)
    d = decide(s, group(None, 6, alive=frozenset({1, ME})), ME)
    assert isinstance(d[0], Fence) and d[1] == RequestElection()
    assert apply(s, d[0]).role is Role.FENCED


def test_paused_master_fenced_by_a_stale_answer_follows_the_new_master() -> None:
    """Issue 37, `brokergroup chaos --seed 3703` window 2 (pause-master): the master
    (here ME) is SIGSTOPped; broker 3 is elected at masterEpoch 2. On SIGCONT the first
    answer it reads is the one a long-poll watch took from a controller that had lost
    leadership: epoch 2, master 3 recorded but not alive in that node's stale liveness
    view. It fences at epoch 2 (right: it must not write at an epoch the controller
    moved past). Every later answer, from the leader, names master 3 alive at the same
    epoch 2: the broker must follow it as a slave. Before the fix it stayed FENCED until
    the next election (49 s in the run), so the SyncStateSet never became full again."""
    s = RoleState(Role.MASTER, 1, sync_state_set_epoch=3)
    stale = GroupView(3, "127.0.1.112:10911", 2, frozenset({3, 1}), 4, frozenset(), False)
    s, d = run(s, stale)
    assert s.role is Role.FENCED and s.master_epoch == 2
    assert isinstance(d[0], Fence) and d[1:] == [RequestElection()]
    leader = GroupView(3, "127.0.1.112:10911", 2, frozenset({3}), 5, frozenset({1, 2, 3}))
    s, d = run(s, leader)
    assert d == [BecomeSlave(2, 3, "127.0.1.112:10911")]
    assert (s.role, s.master_epoch, s.master_broker_id) == (Role.SLAVE, 2, 3)
    s, d = run(s, leader)
    assert d == [] and s.role is Role.SLAVE  # and it stays there


def test_fenced_broker_takes_the_master_role_the_controller_gave_it_at_that_epoch() -> None:
    """The same stale answer when the controller elected *this* master again at epoch 2
    (a designated election, e.g. after a restart at the same epoch): it fences at 2
    (the answer says the master is not alive), then the leader's answers name it
    master, alive, at epoch 2 — it becomes master at 2 (it never wrote under epoch 2;
    the driver begins it at the log end)."""
    s = RoleState(Role.MASTER, 1)
    s, d = run(s, GroupView(ME, "127.0.0.2:10911", 2, frozenset({ME}), 2, frozenset(), False))
    assert s.role is Role.FENCED and s.master_epoch == 2
    s, d = run(s, group(ME, 2, sss=frozenset({ME}), set_epoch=2))
    assert d == [BecomeMaster(2, frozenset({ME}), 2)] and s.role is Role.MASTER


def test_fenced_after_a_failed_move_retries_on_the_next_answer_at_the_same_epoch() -> None:
    """A slave whose same-epoch move (master restarted elsewhere) failed is fenced at
    that epoch by the driver (`RoleCore.fence`); the next answer retries the move."""
    s = RoleState(Role.FENCED, 5)
    assert decide(s, group(1, 5, address="127.0.0.9:10911"), ME) == [
        BecomeSlave(5, 1, "127.0.0.9:10911")
    ]


def test_master_not_alive_at_same_epoch_keeps_role_but_loses_lease_renewal() -> None:
    s = RoleState(Role.MASTER, 5)
    view = group(None, 5, alive=frozenset({1, 3}))
    assert decide(s, view, ME) == [RequestElection()]
    assert not confirms_master(s, view, ME)
    assert confirms_master(s, group(ME, 5), ME)
    assert not confirms_master(s, group(ME, 6), ME)


def test_restarted_master_resumes_at_the_controllers_epoch() -> None:
    assert decide(RoleState(), group(ME, 4), ME) == [BecomeMaster(4, frozenset({1, 2}), 1)]


def test_acting_master_disabled() -> None:
    s = RoleState(Role.SLAVE, 1, 1, "a")
    assert decide(
        s, group(None, 1, alive=frozenset({ME})), ME, enable_slave_acting_master=False
    ) == [RequestElection()]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(1, 3)),
            st.integers(0, 6),
            st.frozensets(st.integers(1, 3)),
        ),
        max_size=30,
    )
)
def test_epochs_never_go_back_and_roles_change_only_on_higher_epochs(
    answers: list[tuple[int | None, int, frozenset[int]]],
) -> None:
    s = RoleState()
    for master, epoch, alive in answers:
        before = s
        s, decisions = run(s, group(master, epoch, alive=alive))
        assert s.master_epoch >= before.master_epoch
        if s.role != before.role and s.master_epoch == before.master_epoch:
            # At the same epoch only a fenced broker takes a role: the one the
            # controller's answer names (issue 37: fenced by a stale answer).
            assert before.role is Role.FENCED and master is not None
            assert s.role is (Role.MASTER if master == ME else Role.SLAVE)
        if epoch >= max(1, before.master_epoch) and master is not None:
            # Liveness: an answer naming a live master at an epoch not older than
            # ours leaves no broker fenced (issue 37: one stayed out 49 s).
            assert s.role is not Role.FENCED
        if epoch < before.master_epoch:
            assert decisions == [] and s == before  # stale answers change nothing
        elif s.acting_master:
            assert s.role is not Role.MASTER and master is None and min(alive) == ME
        assert sum(isinstance(d, (BecomeMaster, BecomeSlave, Fence)) for d in decisions) <= 1
