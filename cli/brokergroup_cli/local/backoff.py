"""Restart backoff of supervised children (pure; time comes in as now_ms).

Like a kubelet's CrashLoopBackOff: the first restart after a child ran for a
while is quick; each further exit that follows a short run doubles the
delay, up to a bound. A child that ran `reset_after_ms` or longer counts as
healthy again, so one kill in a long session always restarts quickly.
The supervisor never gives up: the delay is bounded, the number of restarts
is not (a rescheduled pod is retried forever too). The delays are the shared
policy's (brokergroup_controller.backoff), without jitter.
"""

from __future__ import annotations

from dataclasses import dataclass

from brokergroup_controller.backoff import BackoffPolicy


@dataclass(frozen=True)
class RestartPolicy:
    initial_delay_ms: int
    max_delay_ms: int
    multiplier: float = 2.0
    reset_after_ms: int = 30_000

    def __post_init__(self) -> None:
        assert 0 < self.initial_delay_ms <= self.max_delay_ms, self
        assert self.multiplier >= 1.0, self
        assert self.reset_after_ms > 0, self


@dataclass(frozen=True)
class RestartHistory:
    consecutive_failures: int = 0
    """Exits since the child last ran for `reset_after_ms`."""
    restarts: int = 0
    """Every restart so far (shown in the status view)."""


@dataclass(frozen=True)
class RestartDecision:
    delay_ms: int
    restart_at_ms: int
    history: RestartHistory


def delay_for(policy: RestartPolicy, failures: int) -> int:
    """Delay before restart number `failures` (1-based) of a crash loop."""
    return BackoffPolicy(
        initial_ms=policy.initial_delay_ms,
        max_ms=policy.max_delay_ms,
        multiplier=policy.multiplier,
    ).delay_ms(failures)


def on_exit(
    policy: RestartPolicy, history: RestartHistory, started_at_ms: int, now_ms: int
) -> RestartDecision:
    """A child that started at `started_at_ms` exited at `now_ms`: when to restart it."""
    ran_ms = max(0, now_ms - started_at_ms)
    failures = 1 if ran_ms >= policy.reset_after_ms else history.consecutive_failures + 1
    delay_ms = delay_for(policy, failures)
    return RestartDecision(
        delay_ms=delay_ms,
        restart_at_ms=now_ms + delay_ms,
        history=RestartHistory(consecutive_failures=failures, restarts=history.restarts + 1),
    )
