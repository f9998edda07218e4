"""The one retry backoff policy (brokergroup_controller.backoff; pure, no clock).

Checks: the doubling sequence every loop used before it (20 ms → 100 ms for the
controller client, 200 ms → 2 s for the broker's controller retries), and with
hypothesis: a delay stays within [initial, cap] and never shrinks as failures
accumulate, a running delay grows the same way, and jitter shortens a delay by at
most its fraction (never lengthens it).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_controller.backoff import BackoffPolicy


def test_doubling_up_to_the_cap() -> None:
    policy = BackoffPolicy(initial_ms=20, max_ms=100)
    assert [policy.delay_ms(n) for n in range(1, 7)] == [20, 40, 80, 100, 100, 100]
    running = [policy.initial_ms]
    for _ in range(5):
        running.append(policy.next_ms(running[-1]))
    assert running == [20, 40, 80, 100, 100, 100]


def test_huge_failure_counts_do_not_overflow() -> None:
    assert BackoffPolicy(initial_ms=200, max_ms=2_000).delay_ms(100_000) == 2_000


def test_jitter_bounds() -> None:
    policy = BackoffPolicy(initial_ms=25, max_ms=500, jitter=0.5)
    assert policy.jittered_ms(400, 1.0) == 400
    assert policy.jittered_ms(400, 0.0) == 200
    assert BackoffPolicy(initial_ms=25, max_ms=500).jittered_ms(400, 0.0) == 400


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_ms": -1, "max_ms": 10},
        {"initial_ms": 20, "max_ms": 10},
        {"initial_ms": 1, "max_ms": 10, "multiplier": 0.5},
        {"initial_ms": 1, "max_ms": 10, "jitter": 1.0},
    ],
)
def test_a_policy_that_cannot_hold_its_invariants_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(AssertionError):
        BackoffPolicy(**kwargs)  # type: ignore[arg-type]


policies = st.builds(
    lambda initial, extra, multiplier, jitter: BackoffPolicy(
        initial_ms=initial, max_ms=initial + extra, multiplier=multiplier, jitter=jitter
    ),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=100_000),
    st.floats(min_value=1.0, max_value=10.0),
    st.floats(min_value=0.0, max_value=0.99),
)


@given(policy=policies, failures=st.integers(min_value=1, max_value=200))
def test_delays_stay_within_initial_and_cap_and_grow(policy: BackoffPolicy, failures: int) -> None:
    delay = policy.delay_ms(failures)
    assert policy.initial_ms <= delay <= policy.max_ms
    assert policy.delay_ms(failures + 1) >= delay
    if policy.multiplier >= 2.0 and delay < policy.max_ms:
        assert policy.delay_ms(failures + 1) >= min(policy.max_ms, 2 * delay)


@given(policy=policies, steps=st.integers(min_value=1, max_value=60))
def test_a_running_delay_stays_within_initial_and_cap_and_grows(
    policy: BackoffPolicy, steps: int
) -> None:
    delay = policy.initial_ms
    for _ in range(steps):
        following = policy.next_ms(delay)
        assert policy.initial_ms <= following <= policy.max_ms
        assert following >= delay
        delay = following


@given(
    policy=policies,
    failures=st.integers(min_value=1, max_value=60),
    draw=st.floats(min_value=0.0, max_value=1.0),
)
def test_jitter_only_shortens_and_by_at_most_its_fraction(
    policy: BackoffPolicy, failures: int, draw: float
) -> None:
    delay = policy.delay_ms(failures)
    jittered = policy.jittered_ms(delay, draw)
    assert delay * (1.0 - policy.jitter) - 1e-9 <= jittered <= delay
    assert jittered >= policy.initial_ms * (1.0 - policy.jitter) - 1e-9
