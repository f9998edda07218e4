"""Pipelined commit rounds: many appends wait at once, acknowledgements go out in order as
confirmOffset passes them, never before the commit rule holds, never under a lapsed lease
or the takeover hold, never after a fence (issue 38 item 2; DESIGN.md §3.3).

The master already pipelines its commit rounds: a produce appends synchronously and returns
to the loop (produce.py), the group commit thread fdatasyncs whatever has been appended
meanwhile, the HA senders stream it before it is durable, and `ReplicationLink` keeps every
unacknowledged append in `AckWaiters` (in append order) until confirmOffset passes it. So
round N+1 is appended, synced and replicated while round N waits for its acks. This file
checks the ordering and safety of that overlap on random interleavings.

How: hypothesis draws a sequence of steps against a real SYNC_FLUSH store and a real
`ReplicationLink` as master of the SyncStateSet {us} (so confirmOffset is what the store
has fdatasynced), with a fake clock: append (unflushed, as the produce fast path does),
fdatasync, release (a slave ack or a flushed callback), time passing (past the takeover
hold, the lease, slaveTimeoutMs), lease renewal, and the ticker's step (which fences every
waiter when the lease has lapsed). Every outcome is checked the moment it is given:
ACKED only for an end offset at or below what is durable, with the lease valid and the
takeover hold over, in append order with nothing earlier still waiting; each append
resolved once; nothing that was fenced acknowledged afterwards. At the end a renewed lease,
an fdatasync and a release acknowledge everything still waiting (nothing is stranded).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.commit_rule import AckOutcome
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import ControllerLink
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.replication import ReplicationLink
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.ha import HAConfig
from brokergroup_broker.store import FlushDiskType, MessageInput, MessageStore, StoreConfig
from tests.unit.conftest import Clock

BROKER_ID = 1
LEASE_MS = 1_500
TAKEOVER_WAIT_MS = 700
SLAVE_TIMEOUT_MS = 3_000
STORE_HOST = ("127.0.0.1", 10911)

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.just(("flush", 0)),
        st.just(("release", 0)),
        st.tuples(st.just("advance"), st.sampled_from([1, 50, 400, 800, 1_600, 3_100])),
        st.just(("renew", 0)),
        st.just(("tick", 0)),
    ),
    max_size=40,
)


class Checker:
    """Receives every outcome and checks it against the state at that instant."""

    def __init__(self, store: MessageStore, clock: Clock[int], lease: MasterLease) -> None:
        self.store = store
        self.clock = clock
        self.lease = lease
        self.hold_until_ms = clock() + TAKEOVER_WAIT_MS
        self.ends: dict[int, int] = {}  # append number -> end offset
        self.deadlines: dict[int, int] = {}
        self.outcomes: dict[int, AckOutcome] = {}
        self.acked_in_order: list[int] = []

    def callback(self, number: int, end: int) -> object:
        self.ends[number] = end
        self.deadlines[number] = self.clock() + SLAVE_TIMEOUT_MS

        def on_outcome(outcome: AckOutcome) -> None:
            assert number not in self.outcomes, f"append {number} resolved twice"
            self.outcomes[number] = outcome
            now = self.clock()
            if outcome is AckOutcome.ACKED:
                durable = min(self.store.flushed_offset, self.store.max_offset)
                assert end <= durable, f"append {number} acked at {end} > durable {durable}"
                assert self.lease.valid(now), f"append {number} acked under a lapsed lease"
                assert now >= self.hold_until_ms, f"append {number} acked inside the hold"
                earlier = [n for n in self.ends if n < number and n not in self.outcomes]
                assert not earlier, f"append {number} acked while {earlier} still wait"
                self.acked_in_order.append(number)
            elif outcome is AckOutcome.SLAVE_TIMEOUT:
                assert now >= self.deadlines[number]
            else:
                assert outcome is AckOutcome.FENCED, outcome
                assert not self.lease.valid(now)

        return on_outcome


async def run_steps(directory: Path, steps: list[tuple[str, int]]) -> dict[int, AckOutcome]:
    """Runs `steps`, checking every outcome; returns the outcomes before the final drain."""
    store = MessageStore.open(directory, StoreConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    clock = Clock(1_000_000)
    lease = MasterLease(LEASE_MS)
    lease.renew(clock())
    role = RoleCore()
    decision = roles.BecomeMaster(
        master_epoch=1, sync_state_set=frozenset({BROKER_ID}), sync_state_set_epoch=1
    )
    link = ReplicationLink(
        broker_id=BROKER_ID,
        config=BrokerConfig(master_lease_ms=LEASE_MS, slave_timeout_ms=SLAVE_TIMEOUT_MS),
        ha_config=HAConfig(),
        ha_bind=("127.0.0.1", 0),
        store=store,
        role=role,
        lease=lease,
        controller=cast(ControllerLink, None),  # nothing here asks the controller
        registered_host=lambda _broker_id: None,
        clock_ms=clock,
    )
    store.epoch_file.begin_epoch(1, store.max_offset)
    await link.start_master(
        decision, epoch_start=store.max_offset, takeover_wait_ms=TAKEOVER_WAIT_MS
    )
    role.carried_out(decision)
    checker = Checker(store, clock, lease)
    fenced: set[int] = set()
    try:
        number = 0
        for kind, arg in steps:
            if kind == "append":
                if not lease.valid(clock()):
                    continue  # the produce path refuses before appending (FENCED)
                for _ in range(arg):  # several appends in one loop turn: one round's worth
                    number += 1
                    store.put_messages(
                        [MessageInput(topic="t", queue_id=0, body=b"m" * number)],
                        STORE_HOST,
                        0,
                        flush=False,
                    )
                    end = store.max_offset
                    link.wait_for_ack(end, clock(), checker.callback(number, end))  # type: ignore[arg-type]
            elif kind == "flush":
                store.flush()
            elif kind == "release":
                link.release()
            elif kind == "advance":
                clock.advance(arg)
            elif kind == "renew":
                lease.renew(clock())
            else:  # the ticker's step
                if len(link.waiters) and not lease.valid(clock()):
                    waiting = {n for n in checker.ends if n not in checker.outcomes}
                    link.fail_all(AckOutcome.FENCED)
                    fenced |= waiting
                    assert all(checker.outcomes[n] is AckOutcome.FENCED for n in waiting)
                else:
                    link.release()
        for n in fenced:
            assert checker.outcomes[n] is AckOutcome.FENCED  # never acknowledged later
        before_drain = dict(checker.outcomes)
        # Nothing is stranded: a valid lease, the hold over, everything durable.
        clock.advance(TAKEOVER_WAIT_MS)
        lease.renew(clock())
        store.flush()
        link.release()
        assert set(checker.outcomes) == set(checker.ends)
        assert checker.acked_in_order == sorted(checker.acked_in_order)
        return before_drain
    finally:
        await link.stop()
        store.close()


@settings(max_examples=60, deadline=None)
@given(steps=STEPS)
def test_pipelined_acknowledgements_are_ordered_committed_and_fenced(
    steps: list[tuple[str, int]],
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run_steps(Path(directory) / "s", steps))


def test_a_later_round_appends_while_an_earlier_one_waits() -> None:
    """The overlap itself: three rounds appended before any is durable all wait at once,
    one fdatasync covers them, and one release answers them in append order."""
    steps = [("advance", 800), ("renew", 0), ("append", 3), ("release", 0)]
    steps += [("append", 2), ("flush", 0), ("append", 1), ("release", 0)]
    with tempfile.TemporaryDirectory() as directory:
        outcomes = asyncio.run(run_steps(Path(directory) / "s", steps))
    # 1-5 were durable at the release (in order); 6 was appended after the fdatasync.
    assert list(outcomes.items()) == [(n, AckOutcome.ACKED) for n in range(1, 6)]


def test_a_lapsed_lease_fences_every_waiting_round() -> None:
    """Rounds waiting when the lease lapses are fenced by the ticker, and a renewed
    lease afterwards acknowledges none of them (a new master may truncate them)."""
    steps = [("advance", 800), ("renew", 0), ("append", 2), ("advance", 1_600), ("flush", 0)]
    steps += [("release", 0), ("tick", 0), ("renew", 0), ("release", 0), ("append", 1)]
    with tempfile.TemporaryDirectory() as directory:
        outcomes = asyncio.run(run_steps(Path(directory) / "s", steps))
    assert outcomes == {1: AckOutcome.FENCED, 2: AckOutcome.FENCED}
