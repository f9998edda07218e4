"""A new master's readable range from its first read on (DESIGN.md §3.3 "Commit rule
and SyncStateSet"; issue 32 item 8).

What: `ReplicationLink.start_master` puts confirmOffset -- the bound of every read,
`ReplicationLink.confirm_offset()` -- where the commit rule says, min ack over the
SyncStateSet with the master's own durable offset included, before the role takes
reads. An election leaves the set {new master} (the controller's ElectMaster, as
RocketMQ's), so the whole durable log is readable: it holds all the old master
acknowledged (the new master was in its set). The floor it starts from is only what
the old master last told it, which can be a commit round behind the old master's
acknowledgements (a graceful stop inside `confirm_publish_delay_ms`); the old code
served that floor until a produce or a slave ack happened to recompute it.

How: a real MessageStore in tmp_path whose log was written as a slave's (epoch 1)
with the floor the old master last sent, the epoch file begun at masterEpoch 2 as
`RoleTransitions._become_master` does, and a real `ReplicationLink` whose HA master
listens on 127.0.0.1 (kernel-chosen port). No slave connects; nothing waits on time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import pytest

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import ControllerLink
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.replication import ReplicationLink
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.ha import HAConfig
from brokergroup_broker.store import FlushDiskType, MessageInput, MessageStore, StoreConfig

STORE_HOST = ("127.0.0.1", 10911)
NOW_MS = 1_700_000_000_000
BROKER_ID = 2


def slave_log(
    path: Path, flush: FlushDiskType, opened: list[ReplicationLink | MessageStore]
) -> tuple[MessageStore, list[int]]:
    """30 messages written under epoch 1; returns the store and each message's end."""
    store = MessageStore.open(path, StoreConfig(flush_disk_type=flush))
    opened.append(store)
    store.epoch_file.append(1, 0)
    ends = []
    for i in range(30):
        store.put_messages(
            [MessageInput(topic="drain", queue_id=i % 4, body=f"m{i}".encode())],
            STORE_HOST,
            NOW_MS,
        )
        ends.append(store.max_offset)
    return store, ends


@pytest.fixture
async def opened() -> AsyncIterator[list[ReplicationLink | MessageStore]]:
    """Links and stores the test opened; stopped and closed in reverse order."""
    made: list[ReplicationLink | MessageStore] = []
    yield made
    for thing in reversed(made):
        if isinstance(thing, ReplicationLink):
            await thing.stop()
        else:
            thing.close()


async def become_master(
    store: MessageStore,
    opened: list[ReplicationLink | MessageStore],
    sync_state_set: frozenset[int],
) -> ReplicationLink:
    link = ReplicationLink(
        broker_id=BROKER_ID,
        config=BrokerConfig(),
        ha_config=HAConfig(),
        ha_bind=("127.0.0.1", 0),
        store=store,
        role=RoleCore(),
        lease=MasterLease(BrokerConfig().master_lease_ms),
        controller=cast(ControllerLink, None),  # start_master asks the controller nothing
        registered_host=lambda _broker_id: None,
    )
    opened.append(link)
    store.epoch_file.begin_epoch(2, store.max_offset)
    await link.start_master(
        roles.BecomeMaster(master_epoch=2, sync_state_set=sync_state_set, sync_state_set_epoch=4),
        epoch_start=store.max_offset,
        takeover_wait_ms=0,
    )
    return link


async def test_elected_master_reads_its_whole_log_not_the_old_masters_last_word(
    tmp_path: Path, opened: list[ReplicationLink | MessageStore]
) -> None:
    """§3.3 with the set an election leaves, {us}: confirmOffset = our own max. The old
    master acknowledged m29 but told us only m0..m28 were confirmed; m29 is readable
    at once (the old code kept the floor: m29 hidden until a produce or slave ack)."""
    store, ends = slave_log(tmp_path / "s", FlushDiskType.ASYNC_FLUSH, opened)
    store.set_confirm_offset(ends[28])  # the last confirmOffset the old master sent
    link = await become_master(store, opened, frozenset({BROKER_ID}))
    assert link.confirm_offset() == ends[29] == store.max_offset
    assert store.confirm_offset == ends[29]  # what the checkpoint persists
    # What the produce path answers reads with (ProducePath: queue ranges up to it).
    readable = sum(store.queue_offset_range("drain", q, link.confirm_offset())[1] for q in range(4))
    assert readable == 30


async def test_sync_flush_master_reads_only_its_durable_log(
    tmp_path: Path, opened: list[ReplicationLink | MessageStore]
) -> None:
    """The master's own "ack" is its durable offset on SYNC_FLUSH: a tail a crash could
    lose is not readable (nor was it acknowledged: a slave acks only durable bytes)."""
    store, ends = slave_log(tmp_path / "s", FlushDiskType.SYNC_FLUSH, opened)
    store.set_confirm_offset(ends[20])
    store.put_messages(
        [MessageInput(topic="drain", queue_id=0, body=b"not durable")],
        STORE_HOST,
        NOW_MS,
        flush=False,
    )
    assert store.flushed_offset == ends[29] < store.max_offset
    link = await become_master(store, opened, frozenset({BROKER_ID}))
    assert link.confirm_offset() == ends[29]


async def test_members_not_heard_from_keep_the_floor(
    tmp_path: Path, opened: list[ReplicationLink | MessageStore]
) -> None:
    """The rule is the SyncStateSet's, not "own max": a member this master has not
    heard from counts 0, so the floor (never lowered) stands until it acks."""
    store, ends = slave_log(tmp_path / "s", FlushDiskType.ASYNC_FLUSH, opened)
    store.set_confirm_offset(ends[28])
    link = await become_master(store, opened, frozenset({BROKER_ID, 3}))
    assert link.confirm_offset() == ends[28]


async def test_view_is_a_pure_read_and_confirm_offset_moves_by_the_explicit_call(
    tmp_path: Path, opened: list[ReplicationLink | MessageStore]
) -> None:
    """`view()` reads what the commit rule says and changes nothing; only
    `advance_confirm_offset()` adopts it (the store's confirmOffset and its arrival
    wakes, the HA master's)."""
    store, ends = slave_log(tmp_path / "s", FlushDiskType.SYNC_FLUSH, opened)
    link = await become_master(store, opened, frozenset({BROKER_ID}))
    assert link.confirm_offset() == ends[29]
    store.put_messages([MessageInput(topic="drain", queue_id=0, body=b"m30")], STORE_HOST, NOW_MS)
    assert link.view().confirm_offset == store.max_offset > ends[29]
    assert link.confirm_offset() == store.confirm_offset == ends[29]  # unchanged by view()
    assert link.advance_confirm_offset().confirm_offset == store.max_offset
    assert link.confirm_offset() == store.confirm_offset == store.max_offset
