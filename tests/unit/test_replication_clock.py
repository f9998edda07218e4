"""ReplicationLink decides by the clock it is given (issue 32 item 5; DESIGN.md §1, §3.3).

How: a real SYNC_FLUSH store and ReplicationLink as a master of the SyncStateSet {us}
with a fake `Clock` passed as `clock_ms`; nothing sleeps. An append not yet flushed is
not the master's own "ack", so it waits; the flush makes the commit rule hold. Checks:
the takeover hold (the replaced master's lease may still run) keeps that
acknowledgement back until the fake clock passes it, a lapsed lease holds it too, and
`view()` stays a pure read meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import cast

import pytest

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

BROKER_ID = 2
LEASE_MS = 10_000
TAKEOVER_WAIT_MS = 1_000
STORE_HOST = ("127.0.0.1", 10911)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore.open(tmp_path / "s", StoreConfig(flush_disk_type=FlushDiskType.SYNC_FLUSH))
    yield s
    s.close()


@pytest.fixture
async def master(
    store: MessageStore,
) -> AsyncIterator[tuple[ReplicationLink, Clock[int], MasterLease]]:
    clock = Clock(1_000_000)
    lease = MasterLease(LEASE_MS)
    lease.renew(clock())
    role = RoleCore()
    decision = roles.BecomeMaster(
        master_epoch=2, sync_state_set=frozenset({BROKER_ID}), sync_state_set_epoch=4
    )
    link = ReplicationLink(
        broker_id=BROKER_ID,
        config=BrokerConfig(),
        ha_config=HAConfig(),
        ha_bind=("127.0.0.1", 0),
        store=store,
        role=role,
        lease=lease,
        controller=cast(ControllerLink, None),  # nothing here asks the controller
        registered_host=lambda _broker_id: None,
        clock_ms=clock,
    )
    store.epoch_file.begin_epoch(2, store.max_offset)
    await link.start_master(
        decision, epoch_start=store.max_offset, takeover_wait_ms=TAKEOVER_WAIT_MS
    )
    role.carried_out(decision)
    yield link, clock, lease
    await link.stop()


def append(store: MessageStore) -> int:
    """A produce's append: not flushed yet (the group commit thread's work)."""
    store.put_messages([MessageInput(topic="t", queue_id=0, body=b"m")], STORE_HOST, 0, flush=False)
    return store.max_offset


async def test_the_takeover_hold_ends_by_the_given_clock(
    store: MessageStore, master: tuple[ReplicationLink, Clock[int], MasterLease]
) -> None:
    link, clock, _ = master
    assert link.takeover_hold_remaining_ms(clock()) == TAKEOVER_WAIT_MS
    outcomes: list[AckOutcome] = []
    end = append(store)
    link.wait_for_ack(end, clock(), outcomes.append)
    assert outcomes == []
    store.flush()
    assert link.view().confirm_offset == end  # the commit rule holds now
    assert link.confirm_offset() < end  # view() moved nothing
    link.release()
    assert outcomes == []  # the hold has not ended
    clock.advance(TAKEOVER_WAIT_MS - 1)
    link.release()
    assert outcomes == []
    clock.advance(1)
    link.release()
    assert outcomes == [AckOutcome.ACKED]
    assert link.confirm_offset() == end


async def test_a_lapsed_lease_by_the_given_clock_holds_acknowledgements(
    store: MessageStore, master: tuple[ReplicationLink, Clock[int], MasterLease]
) -> None:
    link, clock, lease = master
    clock.advance(LEASE_MS)  # past the hold, and the lease (renewed at the start) lapses
    outcomes: list[AckOutcome] = []
    link.wait_for_ack(append(store), clock(), outcomes.append)
    store.flush()
    link.release()
    assert outcomes == []
    lease.renew(clock())
    link.release()
    assert outcomes == [AckOutcome.ACKED]


async def test_an_append_covered_at_once_is_held_by_the_takeover_hold_too(
    store: MessageStore, master: tuple[ReplicationLink, Clock[int], MasterLease]
) -> None:
    """The commit rule may hold the moment an append lands (here: flushed with it, the
    SyncStateSet is {us}); the replaced master may still hold its lease, so the
    acknowledgement still waits for the hold (DESIGN.md §3.3 "Fencing")."""
    link, clock, _ = master
    outcomes: list[AckOutcome] = []
    store.put_messages([MessageInput(topic="t", queue_id=0, body=b"m")], STORE_HOST, 0, flush=True)
    link.wait_for_ack(store.max_offset, clock(), outcomes.append)
    assert outcomes == []  # covered, but inside the hold
    clock.advance(TAKEOVER_WAIT_MS)
    link.release()
    assert outcomes == [AckOutcome.ACKED]


async def test_an_append_covered_at_once_is_held_by_a_lapsed_lease_too(
    store: MessageStore, master: tuple[ReplicationLink, Clock[int], MasterLease]
) -> None:
    link, clock, lease = master
    clock.advance(LEASE_MS)
    outcomes: list[AckOutcome] = []
    store.put_messages([MessageInput(topic="t", queue_id=0, body=b"m")], STORE_HOST, 0, flush=True)
    link.wait_for_ack(store.max_offset, clock(), outcomes.append)
    assert outcomes == []
    lease.renew(clock())
    link.release()
    assert outcomes == [AckOutcome.ACKED]
