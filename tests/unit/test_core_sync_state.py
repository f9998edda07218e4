"""SyncStateSet maintenance decisions (DESIGN.md §3.3; seed
controller-mode-design "Shrink/Expand SyncStateSet").

How: `SyncStateSetManager` is fed hand-made HA progress and explicit times;
tables cover each shrink/expand clause; a seeded simulation (hypothesis picks
the seeds) runs a master against a controller through a network that drops,
delays and duplicates AlterSyncStateSet answers and heartbeat views, and
checks after every step that no confirmed offset is missing from any member
of the controller's actual SyncStateSet (issue 7 item 4).
"""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.controller_link import ControllerRefused
from brokergroup_broker.core.replication import ReplicationLink
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


def test_a_silent_slave_shrunk_while_idle_is_not_added_back_by_its_old_ack() -> None:
    """A stopped slave (SIGSTOP, connection open) acked the log end before it stopped; with
    nothing written its ack stays at the confirm offset. It is shrunk once its last caught-up
    time is too old, and must not come back until it catches up again (the old rule
    re-added it at the next check: new_set {1, 2, 3} with 3 expanded)."""
    m = manager()
    progress = {2: up(1000, 9000), 3: up(1000, 1000)}
    proposal = m.decide(9000, 1000, progress)
    assert proposal is not None and proposal.shrunk == ((3, ShrinkReason.NOT_CAUGHT_UP),)
    m.on_alter_accepted(proposal, proposal.new_set, 8)
    progress[2] = up(1000, 9500)
    assert m.decide(9500, 1000, progress) is None
    progress[3] = up(1000, 9600)  # it reports again, caught up
    again = m.decide(9600, 1000, progress)
    assert again is not None and again.expanded == {3} and again.new_set == {1, 2, 3}


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


def test_refused_alter_is_forgotten_and_stale_answers_ignored() -> None:
    m = manager(frozenset({1, 2}))
    first = m.decide(1, 10, {3: up(10)})
    assert first is not None
    m.on_alter_refused(first)
    assert m.pending is None and m.sync_state_set_epoch == 7 and m.effective_set() == {1, 2}
    second = m.decide(2, 10, {2: up(10, 2), 3: up(10)})
    assert second is not None
    m.on_alter_refused(first)  # a late answer to the first proposal
    assert m.pending is second


def test_an_unknown_outcome_keeps_the_union_until_the_epoch_moves() -> None:
    """Issue 7 item 4: a lost answer to an expansion may mean it was applied."""
    m = manager(frozenset({1, 2}))
    expand = m.decide(1, 10, {2: up(10, 1), 3: up(10)})
    assert expand is not None and expand.new_set == {1, 2, 3}
    m.on_alter_unknown(expand)
    assert m.pending is None and m.effective_set() == {1, 2, 3}
    # 3 falls behind: it still counts, so nothing past its ack is confirmed.
    assert m.confirm_offset(50, {2: up(50, 2), 3: up(10)}) == 10
    assert m.settled_set_size() == 2
    m.on_controller_view(frozenset({1, 2}), 7)  # same epoch: not settled
    assert m.effective_set() == {1, 2, 3}
    m.on_controller_view(frozenset({1, 2}), 8)  # the epoch moved: settled
    assert m.effective_set() == {1, 2}


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


class _Simulation:
    """A master, three slaves and a controller that holds the real SyncStateSet.

    Requests and answers travel through a network that delays, drops and
    duplicates them at random (seeded; a duplicated request is a client's
    retry, which this controller does not recognise: the worst case of an
    id already forgotten); the master times requests out, and
    heartbeat views of the controller arrive late and out of order. The
    controller applies an AlterSyncStateSet only on a matching epoch (the CAS
    of DESIGN.md §2.2). After every step: every member of the controller's
    *actual* set holds every offset the master has confirmed — any of them
    may be the next master, so anything else is acknowledged loss.
    """

    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)
        self.m = manager(frozenset({1, 2}))
        self.ctrl_set, self.ctrl_epoch = frozenset({1, 2}), 7
        self.now = 0
        self.master_max = 0
        self.acks = {2: 0, 3: 0, 4: 0}
        self.caught = {2: 0, 3: 0, 4: 0}
        self.links = {2: True, 3: True, 4: True}
        self.requests: list[tuple[int, object]] = []  # (due time, proposal)
        self.answers: list[tuple[int, object, tuple[object, ...]]] = []
        self.outstanding: dict[int, tuple[object, int]] = {}  # id(proposal) -> (p, deadline)
        self.views: list[tuple[int, frozenset[int], int]] = []
        self.confirmed = 0

    def progress(self) -> dict[int, ReplicaProgress]:
        return {b: up(self.acks[b], self.caught[b], self.links[b]) for b in self.acks}

    def step(self) -> None:
        rng = self.rng
        self.now += rng.randint(1, 400)
        self.master_max += rng.randint(0, 30)
        for b in self.acks:
            if rng.random() < 0.7 and self.links[b]:
                self.acks[b] = max(self.acks[b], self.master_max - rng.choice([0, 0, 5, 40]))
                if self.acks[b] == self.master_max:
                    self.caught[b] = self.now
            if rng.random() < 0.05:
                self.links[b] = not self.links[b]
        proposal = self.m.decide(self.now, self.master_max, self.progress())
        if proposal is not None:
            self.requests.append((self.now + rng.randint(0, 3000), proposal))
            if rng.random() < 0.2:  # re-sent after a lost answer
                self.requests.append((self.now + rng.randint(0, 3000), proposal))
            self.outstanding[id(proposal)] = (proposal, self.now + 1000)
        for due, p in [r for r in self.requests if r[0] <= self.now]:
            self.requests.remove((due, p))
            self._controller_receives(p)
        for due, p, answer in [a for a in self.answers if a[0] <= self.now]:
            self.answers.remove((due, p, answer))
            self.outstanding.pop(id(p), None)
            if answer[0] == "accepted":
                self.m.on_alter_accepted(p, answer[1], answer[2])  # type: ignore[arg-type]
            else:
                self.m.on_alter_rejected(p, answer[1])  # type: ignore[arg-type]
        for key, (p, deadline) in list(self.outstanding.items()):
            if deadline <= self.now:  # the master's request timeout
                del self.outstanding[key]
                self.m.on_alter_unknown(p)  # type: ignore[arg-type]
        if rng.random() < 0.4:  # a heartbeat answer, possibly delayed
            self.views.append((self.now + rng.randint(0, 1500), self.ctrl_set, self.ctrl_epoch))
        for item in [v for v in self.views if v[0] <= self.now]:
            self.views.remove(item)
            self.m.on_controller_view(item[1], item[2])
        # The effective set and settled size are cached between changes: as computed afresh.
        sets = self.m._possible_sets()
        assert self.m.effective_set() == frozenset().union(*sets)
        assert self.m.settled_set_size() == len(frozenset.intersection(*sets))
        confirm = self.m.confirm_offset(self.master_max, self.progress())
        assert confirm >= self.confirmed
        self.confirmed = confirm
        for member in self.ctrl_set - {1}:
            assert self.acks[member] >= confirm, (
                f"confirmOffset {confirm} is acknowledged, but broker {member} of the "
                f"controller's SyncStateSet {sorted(self.ctrl_set)} (epoch {self.ctrl_epoch}) "
                f"holds only {self.acks[member]}"
            )

    def _controller_receives(self, p: object) -> None:
        rng = self.rng
        proposal = p  # AlterProposal
        if proposal.based_on_sync_state_set_epoch == self.ctrl_epoch:  # type: ignore[attr-defined]
            self.ctrl_set = proposal.new_set  # type: ignore[attr-defined]
            self.ctrl_epoch += 1
            answer: tuple[object, ...] = ("accepted", self.ctrl_set, self.ctrl_epoch)
        else:
            answer = ("refused", "FENCED_SYNC_STATE_SET_EPOCH")
        roll = rng.random()
        if roll < 0.3:
            return  # the answer is lost: the master's timeout decides
        copies = 2 if roll > 0.9 else 1  # duplicated answers
        for _ in range(copies):
            self.answers.append((self.now + rng.randint(0, 2500), p, answer))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_simulation_no_acknowledged_offset_is_missing_from_a_possible_next_master(
    seed: int,
) -> None:
    sim = _Simulation(seed)
    for _ in range(150):
        sim.step()


# -- FENCED_SYNC_STATE_SET_EPOCH on a proposal: outcome unknown (issue 17 item 2)


class _FencedController:
    """The controller's answer to a proposal whose base epoch has moved on."""

    async def alter_sync_state_set(self, *args: object) -> tuple[frozenset[int], int]:
        raise ControllerRefused(
            "FENCED_SYNC_STATE_SET_EPOCH", "syncStateSetEpoch 7 is stale: controller has 8"
        )


async def test_fenced_answer_to_a_proposal_keeps_the_union() -> None:
    """The retry of an applied AlterSyncStateSet hears FENCED (from a controller
    without request ids, or after its id was forgotten): it may have been
    applied, so its members keep counting until a view settles the epoch."""
    m = manager(frozenset({1, 2}))
    expand = m.decide(1, 10, {2: up(10, 1), 3: up(10)})
    assert expand is not None and expand.new_set == {1, 2, 3}
    link = SimpleNamespace(
        _controller=_FencedController(),
        _config=SimpleNamespace(controller_request_timeout_ms=1000),
    )
    await ReplicationLink._alter(link, m, expand)  # type: ignore[arg-type]
    assert m.pending is None and m.effective_set() == {1, 2, 3}
    assert m.confirm_offset(50, {2: up(50, 2), 3: up(10)}) == 10  # 3 still counts
    m.on_controller_view(frozenset({1, 2, 3}), 8)  # the read-back settles it
    assert m.effective_set() == {1, 2, 3} and m.in_doubt == ()


def test_which_refusals_leave_an_alter_in_doubt() -> None:
    for code, kept in (
        ("FENCED_SYNC_STATE_SET_EPOCH", True),
        ("COMMIT_TIMEOUT", True),
        ("NOT_LEADER", True),
        ("INVALID_SYNC_STATE_SET", False),
        ("BROKER_NOT_ALIVE", False),
        ("FENCED_MASTER_EPOCH", False),
    ):
        m = manager(frozenset({1, 2}))
        shrink = m.decide(MAX_NOT_CATCH_UP + 1, 10, {2: up(10, 0)})
        assert shrink is not None and shrink.new_set == {1}
        m.on_alter_rejected(shrink, code)
        assert m.pending is None
        assert (m.in_doubt == (shrink,)) is kept, code
        assert m.effective_set() == {1, 2}
