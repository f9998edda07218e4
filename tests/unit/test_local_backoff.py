"""Restart backoff of the local runtime's supervisor (pure; time as now_ms).

Checks: quick first restart, doubling while a child crash-loops, the bound,
reset after a healthy run, and (hypothesis) that the delay never leaves
[initial, max] and the restart count only grows.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from brokergroup_cli.local.backoff import RestartHistory, RestartPolicy, delay_for, on_exit

POLICY = RestartPolicy(
    initial_delay_ms=200, max_delay_ms=3_000, multiplier=2.0, reset_after_ms=10_000
)


def test_first_exit_after_a_long_run_restarts_after_the_initial_delay() -> None:
    decision = on_exit(POLICY, RestartHistory(), started_at_ms=0, now_ms=60_000)
    assert decision.delay_ms == 200
    assert decision.restart_at_ms == 60_200
    assert decision.history == RestartHistory(consecutive_failures=1, restarts=1)


def test_crash_loop_doubles_up_to_the_bound() -> None:
    history = RestartHistory()
    delays = []
    now = 0
    for _ in range(7):
        decision = on_exit(POLICY, history, started_at_ms=now, now_ms=now + 50)
        delays.append(decision.delay_ms)
        history = decision.history
        now = decision.restart_at_ms
    assert delays == [200, 400, 800, 1600, 3000, 3000, 3000]
    assert history.restarts == 7


def test_a_healthy_run_resets_the_backoff_but_not_the_restart_count() -> None:
    history = RestartHistory(consecutive_failures=5, restarts=9)
    decision = on_exit(POLICY, history, started_at_ms=1_000, now_ms=11_000)
    assert decision.delay_ms == 200
    assert decision.history == RestartHistory(consecutive_failures=1, restarts=10)


def test_clock_going_backwards_counts_as_a_short_run() -> None:
    decision = on_exit(POLICY, RestartHistory(consecutive_failures=1), 5_000, 4_000)
    assert decision.delay_ms == 400


def test_huge_failure_counts_do_not_overflow() -> None:
    assert delay_for(POLICY, 10_000) == 3_000


@given(
    initial=st.integers(min_value=1, max_value=5_000),
    extra=st.integers(min_value=0, max_value=60_000),
    multiplier=st.floats(min_value=1.0, max_value=10.0),
    runs=st.lists(st.integers(min_value=0, max_value=100_000), max_size=40),
)
def test_delay_stays_bounded_and_restarts_only_grow(
    initial: int, extra: int, multiplier: float, runs: list[int]
) -> None:
    policy = RestartPolicy(initial, initial + extra, multiplier, reset_after_ms=30_000)
    history = RestartHistory()
    now = 0
    for ran in runs:
        decision = on_exit(policy, history, started_at_ms=now, now_ms=now + ran)
        assert policy.initial_delay_ms <= decision.delay_ms <= policy.max_delay_ms
        assert decision.history.restarts == history.restarts + 1
        assert decision.restart_at_ms == now + ran + decision.delay_ms
        history = decision.history
        now = decision.restart_at_ms
