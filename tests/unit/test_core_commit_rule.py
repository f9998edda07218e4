"""Commit rule (DESIGN.md §3.3; seed dledger-log-append pending-queue back-pressure).

How: `AckWaiters` is driven with explicit `ReplicationView` snapshots and
times; each test names the clause it covers. A hypothesis test compares the
queue against a naive reference (re-check every waiter from scratch).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.commit_rule import (
    AckOutcome,
    AckWaiters,
    CommitRuleConfig,
    ReplicationView,
)


def view(confirm: int, acks: dict[int, int] | None = None, in_sync: int = 3) -> ReplicationView:
    return ReplicationView(
        confirm_offset=confirm, member_acks=acks or {1: confirm}, in_sync_count=in_sync
    )


def test_all_ack_waits_for_confirm_offset() -> None:
    w = AckWaiters(CommitRuleConfig())
    assert w.add(1, 100, 0, view(50)) is None
    assert w.add(2, 200, 0, view(50)) is None
    assert w.progress(view(150), 10) == [(1, AckOutcome.ACKED)]
    assert w.progress(view(200), 20) == [(2, AckOutcome.ACKED)]
    assert len(w) == 0


def test_already_confirmed_is_acked_at_once() -> None:
    w = AckWaiters(CommitRuleConfig())
    assert w.add(1, 100, 0, view(100)) is AckOutcome.ACKED


def test_in_sync_replicas_counts_the_master_and_is_capped_by_the_set() -> None:
    w = AckWaiters(CommitRuleConfig(all_ack_in_sync_state_set=False, in_sync_replicas=2))
    acks = {1: 100, 2: 50, 3: 40}
    assert w.add(1, 100, 0, view(40, acks)) is None
    assert w.progress(view(40, {1: 100, 2: 100, 3: 40}), 1) == [(1, AckOutcome.ACKED)]
    # A set of one: inSyncReplicas 2 cannot be met, RocketMQ caps it at the set size.
    assert w.add(2, 200, 2, view(200, {1: 200}, in_sync=1)) is AckOutcome.ACKED


def test_too_few_in_sync_replicas_refused_before_append() -> None:
    w = AckWaiters(CommitRuleConfig(min_in_sync_replicas=2))
    assert w.admit(view(0, in_sync=1)) is AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH
    assert w.admit(view(0, in_sync=2)) is None


def test_slave_timeout() -> None:
    w = AckWaiters(CommitRuleConfig(slave_timeout_ms=3000))
    w.add(1, 100, 1000, view(0))
    w.add(2, 200, 2000, view(0))
    assert w.next_deadline_ms() == 4000
    assert w.progress(view(0), 3999) == []
    assert w.progress(view(0), 4000) == [(1, AckOutcome.SLAVE_TIMEOUT)]
    assert w.progress(view(200), 4001) == [(2, AckOutcome.ACKED)]


def test_bounded_pending_queue_means_system_busy() -> None:
    w = AckWaiters(CommitRuleConfig(max_pending_acks=2))
    w.add(1, 10, 0, view(0))
    w.add(2, 20, 0, view(0))
    assert w.admit(view(0)) is AckOutcome.SYSTEM_BUSY
    w.progress(view(10), 1)
    assert w.admit(view(10)) is None


def test_fail_all_on_role_change() -> None:
    w = AckWaiters(CommitRuleConfig())
    w.add(1, 10, 0, view(0))
    w.add(2, 20, 0, view(0))
    assert w.fail_all(AckOutcome.NOT_MASTER) == [
        (1, AckOutcome.NOT_MASTER),
        (2, AckOutcome.NOT_MASTER),
    ]
    assert len(w) == 0 and w.next_deadline_ms() is None


@settings(max_examples=200, deadline=None)
@given(
    all_ack=st.booleans(),
    need=st.integers(min_value=1, max_value=3),
    ops=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 40), st.lists(st.integers(0, 40), max_size=2)),
        max_size=40,
    ),
)
def test_matches_a_naive_reference(
    all_ack: bool, need: int, ops: list[tuple[int, int, list[int]]]
) -> None:
    config = CommitRuleConfig(all_ack_in_sync_state_set=all_ack, in_sync_replicas=need)
    w = AckWaiters(config)
    pending: dict[int, tuple[int, int]] = {}  # token -> (end, deadline)
    end = now = 0
    slave_acks: list[int] = []
    for token, (grow, dt, moves) in enumerate(ops):
        end += grow
        now += dt
        for i, move in enumerate(moves):  # slaves ack forward, never past the master
            if i < len(slave_acks):
                slave_acks[i] = min(end, max(slave_acks[i], move))
            else:
                slave_acks.append(min(end, move))
        acks = {1: end} | {i + 2: a for i, a in enumerate(slave_acks)}
        v = ReplicationView(min(acks.values()), acks, len(acks))

        def covered(e: int, acks: dict[int, int] = acks, v: ReplicationView = v) -> bool:
            if all_ack:
                return e <= v.confirm_offset
            return sum(a >= e for a in acks.values()) >= min(need, len(acks))

        released = dict(w.progress(v, now))
        expected: dict[int, AckOutcome] = {}
        for t, (e, deadline) in sorted(pending.items()):
            if covered(e):
                expected[t] = AckOutcome.ACKED
            elif deadline <= now:
                expected[t] = AckOutcome.SLAVE_TIMEOUT
            else:
                break  # FIFO: later waiters wait behind
        for t in expected:
            del pending[t]
        assert released == expected
        if w.add(token, end, now, v) is None:
            pending[token] = (end, now + config.slave_timeout_ms)
        else:
            assert not pending and covered(end)
