"""Broker address allocation of the local runtime (DESIGN.md §4: a restarted
broker comes back on a new loopback address, like a rescheduled pod).

Checks the pure `allocate_host`: start of the plan, next-unused after the
cursor, never an address of a live process, wrap-around, exhaustion; and a
hypothesis property against a naive reference over random restart
sequences.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_cli.local.addresses import (
    AddressPool,
    AddressPoolExhausted,
    allocate_host,
)

POOL = AddressPool.of("127.0.0.10", "127.0.0.254")


def test_first_allocations_follow_the_plan_from_127_0_0_10() -> None:
    cursor = None
    hosts: list[str] = []
    for _ in range(3):
        allocation = allocate_host(POOL, cursor, set(hosts))
        hosts.append(allocation.host)
        cursor = allocation.cursor
    assert hosts == ["127.0.0.10", "127.0.0.11", "127.0.0.12"]


def test_restart_takes_the_next_unused_address_not_its_old_one() -> None:
    # slots on .10 .11 .12, cursor at .12; slot 1 (.11) dies and restarts.
    live = {"127.0.0.10", "127.0.0.12"}
    allocation = allocate_host(POOL, POOL.index_of("127.0.0.12"), live)
    assert allocation.host == "127.0.0.13"


def test_never_hands_out_an_address_of_a_live_process() -> None:
    live = {"127.0.0.13", "127.0.0.14"}
    allocation = allocate_host(POOL, POOL.index_of("127.0.0.12"), live)
    assert allocation.host == "127.0.0.15"


def test_wraps_around_to_the_start_of_the_range() -> None:
    allocation = allocate_host(POOL, POOL.index_of("127.0.0.254"), {"127.0.0.10"})
    assert allocation.host == "127.0.0.11"


def test_exhausted_pool_is_an_error_naming_the_range() -> None:
    pool = AddressPool.of("127.0.0.10", "127.0.0.12")
    with pytest.raises(AddressPoolExhausted, match=r"127\.0\.0\.10-127\.0\.0\.12"):
        allocate_host(pool, None, {"127.0.0.10", "127.0.0.11", "127.0.0.12"})


def test_pool_index_round_trip_and_outside_addresses() -> None:
    assert POOL.size == 245
    assert POOL.host(POOL.index_of("127.0.0.77") or 0) == "127.0.0.77"
    assert POOL.index_of("127.0.0.9") is None
    assert POOL.index_of("127.0.2.1") is None
    assert POOL.index_of("not-an-ip") is None


def _naive(pool_size: int, cursor: int | None, busy: set[int]) -> int:
    """Reference: walk forward one by one from the cursor."""
    i = -1 if cursor is None else cursor
    for _ in range(pool_size):
        i = (i + 1) % pool_size
        if i not in busy:
            return i
    raise AssertionError("exhausted")


@settings(max_examples=200)
@given(
    pool_size=st.integers(min_value=4, max_value=20),
    slots=st.integers(min_value=1, max_value=2),
    restarts=st.lists(st.integers(min_value=0, max_value=1), max_size=60),
)
def test_random_restart_sequences_match_the_reference(
    pool_size: int, slots: int, restarts: list[int]
) -> None:
    pool = AddressPool.of("127.0.0.10", f"127.0.0.{10 + pool_size - 1}")
    cursor: int | None = None
    hosts: list[str] = []
    for _ in range(slots):
        a = allocate_host(pool, cursor, set(hosts))
        hosts.append(a.host)
        cursor = a.cursor
    assert len(set(hosts)) == slots
    for victim in restarts:
        slot = victim % slots
        others = {h for i, h in enumerate(hosts) if i != slot}
        # The supervisor also avoids the restarting broker's own old address.
        avoid = others | {hosts[slot]}
        busy = {pool.index_of(h) for h in avoid}
        expected = _naive(pool.size, cursor, {b for b in busy if b is not None})
        a = allocate_host(pool, cursor, avoid)
        assert a.cursor == expected
        assert a.host not in others  # never an address of a live process
        assert a.host != hosts[slot]  # a restart always moves
        hosts[slot] = a.host
        cursor = a.cursor
