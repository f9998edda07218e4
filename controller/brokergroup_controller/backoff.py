"""The one retry backoff policy (pure: no clock, no randomness of its own).

Every hand-written retry loop of the broker, the controller client and the CLI asks
this policy for its next delay instead of doubling a number itself: exponential
from `initial_ms`, times `multiplier` per failure, never above `max_ms`, and, where
many clients would otherwise retry in step, shortened by a bounded jitter.

Invariants (tests/unit/test_backoff.py checks them with hypothesis):
- `delay_ms(n)` and `next_ms(d)` stay within [initial_ms, max_ms] and never shrink
  as failures accumulate;
- `jittered_ms(d, draw)` lies within [d × (1 − jitter), d] for a draw in [0, 1].

The random draw comes in as an argument (the caller's `random.random()`), as time
does for the other pure cores (DESIGN.md §1): a test replays a sequence exactly.
It lives in the controller's client layer because the broker, the operator and the
CLI may all import that layer (pyproject.toml, import-linter contracts).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    initial_ms: int
    """The first delay, and the one a loop returns to after a success (0: retry at
    once, every time)."""
    max_ms: int
    """The cap: a delay never exceeds it, however many failures in a row."""
    multiplier: float = 2.0
    """Growth per failure (2: doubling)."""
    jitter: float = 0.0
    """Fraction a delay may be shortened by at random (0: none; 0.5: to as little as
    half), so clients failing together do not retry together."""

    def __post_init__(self) -> None:
        assert 0 <= self.initial_ms <= self.max_ms, self
        assert self.multiplier >= 1.0, self
        assert 0.0 <= self.jitter < 1.0, self

    def delay_ms(self, failures: int) -> int:
        """The delay after `failures` (1-based) failures in a row, before jitter."""
        assert failures >= 1, failures
        delay = float(self.initial_ms)
        for _ in range(failures - 1):
            delay *= self.multiplier
            if delay >= self.max_ms:
                return self.max_ms
        return min(int(delay), self.max_ms)

    def next_ms(self, delay_ms: int) -> int:
        """The delay after one more failure than the one that waited `delay_ms`."""
        return max(self.initial_ms, min(self.max_ms, int(delay_ms * self.multiplier)))

    def jittered_ms(self, delay_ms: float, draw: float) -> float:
        """`delay_ms` shortened by up to `jitter` of it: a `draw` (random, in [0, 1]) of
        0 shortens it most, 1 leaves it whole (`random.uniform(1 - jitter, 1)` × it)."""
        assert 0.0 <= draw <= 1.0, draw
        return delay_ms * ((1.0 - self.jitter) + self.jitter * draw)
