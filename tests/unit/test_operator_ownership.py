"""Ownership and the bounded cleanup (issue 22 items 2 and 4), pure.

`owns`: a group that names no release belongs to whichever operator watches
its namespace; one that names a release only to that operator.
`cleanup_step`: the finalizer retries while there is work and time, and
releases after the timeout naming what it left behind; it never retries
for ever."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from brokergroup_operator.ownership import Release, Retry, cleanup_step, owns


def test_owns_by_namespace_or_by_release() -> None:
    spec_for = {"": {}, "a": {"controller": {"release": "mq/a"}}}
    assert [owns(me, spec_for[key]) for me in ("mq/a", "mq/b") for key in ("", "a")] == [
        True,
        True,
        True,
        False,
    ]


def test_cleanup_steps() -> None:
    common = {"timeout_s": 60.0}
    assert cleanup_step(pods_left=0, ids_cleaned=True, problem=None, elapsed_s=0, **common) == (
        Release()
    )
    assert cleanup_step(pods_left=2, ids_cleaned=False, problem=None, elapsed_s=5, **common) == (
        Retry("waiting for 2 broker pod(s) to go", 2.0)
    )
    assert cleanup_step(
        pods_left=2, ids_cleaned=False, problem="boom", elapsed_s=61, **common
    ) == Release(
        "gave up cleaning after 60s and released the finalizer; left behind: 2 broker pod(s) "
        "still terminating, the group's BrokerIds in the controller (clean them with "
        "`brokergroup admin clean-broker-data` once it is reachable); last error: boom"
    )


@given(
    st.integers(0, 5),
    st.booleans(),
    st.one_of(st.none(), st.text(max_size=5)),
    st.floats(0, 1e6),
    st.floats(0, 1e4),
)
def test_cleanup_ends_once_the_timeout_has_passed(
    pods: int, cleaned: bool, problem: str | None, elapsed: float, timeout: float
) -> None:
    step = cleanup_step(
        pods_left=pods, ids_cleaned=cleaned, problem=problem, elapsed_s=elapsed, timeout_s=timeout
    )
    if elapsed >= timeout or (pods == 0 and cleaned):
        assert isinstance(step, Release)
        assert (step.left_behind is None) == (pods == 0 and cleaned)
    else:
        assert isinstance(step, Retry)
