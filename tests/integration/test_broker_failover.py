"""Broker failover on real processes (DESIGN.md §3.2–§3.4, §8; issue text:
"kill -9 master → new master from the SyncStateSet → no acknowledged loss").

How: 3 controllers + 3 brokers on one loopback block (broker_harness). A
careful producer sends one message per request and never retries a message
(an error marks its key uncertain), so every acknowledged key must be
readable exactly once, and an uncertain key at most once. Deadlines are
generous; nothing asserts how long a step took.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def check_ledger(producer: CarefulProducer, queues: dict[int, list[object]]) -> None:
    ledger = producer.ledger
    keys = Counter(m.key for messages in queues.values() for m in messages)  # type: ignore[attr-defined]
    missing = [k for k in ledger.acked if keys[k] == 0]
    assert not missing, f"acknowledged but not readable: {missing[:10]} (of {len(missing)})"
    dupes = [k for k, n in keys.items() if n > 1]
    assert not dupes, f"readable more than once: {dupes[:10]}"
    unknown = set(keys) - set(ledger.acked) - ledger.uncertain
    assert not unknown, (
        f"readable but never sent or refused before the append: {sorted(unknown)[:10]}"
    )
    read_at: dict[str, tuple[int, int, bytes]] = {}
    for queue_id, messages in queues.items():
        offsets = [m.queue_offset for m in messages]  # type: ignore[attr-defined]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))) if offsets else True
        for m in messages:
            read_at[m.key] = (queue_id, m.queue_offset, m.body)  # type: ignore[attr-defined]
        # Acknowledged keys of one queue sit in the order they were sent (one request
        # at a time, so send order is key order).
        order = [m.key for m in messages if m.key in ledger.acked]  # type: ignore[attr-defined]
        assert order == sorted(order, key=lambda k: int(k.lstrip("abcdefghijklmnopqrstuvwxyz-"))), (
            f"queue {queue_id} holds acknowledged keys out of send order: {order[:20]}"
        )
    # Content: every acknowledged key is where its acknowledgement said, with its body.
    for key, (queue_id, queue_offset) in ledger.acked.items():
        got = read_at[key]
        assert got[:2] == (queue_id, queue_offset), (
            f"{key} acked at {(queue_id, queue_offset)}, read at {got[:2]}"
        )
        assert got[2] == ledger.bodies[key], f"{key}: body differs from what was sent"


async def test_kill_master_new_master_from_sync_state_set_no_acknowledged_loss(
    tmp_path: Path,
) -> None:
    with BrokerGroupHarness(tmp_path, block=10) as group:
        group.start_all()
        old_master = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        old_master_id = info["masterBrokerId"]
        sync_state_set = set(info["syncStateSet"])

        producer = CarefulProducer(group, "orders")
        for _ in range(150):
            await producer.send_one()
        acked_before = len(producer.ledger.acked)
        assert acked_before > 0

        group.kill(old_master, signal.SIGKILL)
        # Producing continues across the failover, through the same careful loop.
        new_info = None
        for _ in range(2000):
            await producer.send_one()
            new_info = await asyncio.to_thread(group.replica_info)
            if (
                new_info is not None
                and new_info.get("masterBrokerId") not in (None, old_master_id)
                and len(producer.ledger.acked) >= acked_before + 100
            ):
                break
        assert new_info is not None
        new_master_id = new_info["masterBrokerId"]
        assert new_master_id in sync_state_set, "the new master must come from the SyncStateSet"
        assert new_info["masterEpoch"] > info["masterEpoch"]
        await producer.close()

        new_master = await asyncio.to_thread(group.wait_for_master, 30.0, {old_master})
        queues = await read_topic(group.brokers[new_master].address, "orders")
        check_ledger(producer, queues)

        # The old master comes back (same address, same data) as a slave of the new one.
        group.start(old_master)
        status = await asyncio.to_thread(
            group.wait_for,
            lambda: (s := group.status(old_master)) and s["role"] == "SLAVE" and s,
            "the old master to rejoin as slave",
        )
        assert status["brokerId"] == old_master_id
        assert status["masterBrokerId"] == new_master_id
        # Whatever it held past the common epoch (an in-flight append) is cut:
        # it converges on exactly the new master's log.
        await asyncio.to_thread(
            group.wait_for,
            lambda: (
                (s := group.status(old_master))
                and (m := group.status(new_master))
                and s["maxOffset"] == m["maxOffset"]
                and s["epoch"] == m["epoch"]
            ),
            "the old master's log to converge on the new master's",
        )
        rejoined = await read_topic(group.brokers[old_master].address, "orders")
        assert {m.key for ms in rejoined.values() for m in ms} == {
            m.key for ms in queues.values() for m in ms
        }


async def test_restarted_old_master_truncates_its_unreplicated_tail(tmp_path: Path) -> None:
    """The old master holds a tail no other replica has; after an election
    elsewhere it must cut that tail when it rejoins (epoch-based truncation at
    the HA handshake, DESIGN.md §3.2).

    A tail no other replica has is made deterministically: both slaves die,
    the master shrinks the SyncStateSet to itself and keeps acknowledging
    alone; then it dies and the controller (with enableElectUncleanMaster)
    elects a restarted slave. (Pausing the slaves instead would not work: the
    bytes wait in their socket buffers and replicate on SIGCONT.)"""
    with BrokerGroupHarness(
        tmp_path, block=11, controller_config={"enableElectUncleanMaster": True}
    ) as group:
        group.start_all()
        old_master = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        producer = CarefulProducer(group, "tail")
        for _ in range(20):
            await producer.send_one()
        assert len(producer.ledger.acked) == 20
        slaves = [s for s in group.brokers if s != old_master]
        for slot in slaves:
            group.kill(slot, signal.SIGKILL)
        await asyncio.to_thread(group.wait_for_sync_state_set, 1)
        tail = CarefulProducer(group, "tail", prefix="only-on-old-master-")
        for _ in range(10):
            await tail.send_one()
        assert tail.ledger.acked, "the master alone must keep acknowledging (minInSyncReplicas 1)"
        await tail.close()
        await producer.close()
        tail_status = group.status(old_master)
        assert tail_status is not None

        group.kill(old_master, signal.SIGKILL)
        for slot in slaves:
            group.start(slot)
        new_master = await asyncio.to_thread(group.wait_for_master, 60.0, {old_master})
        new_status = group.status(new_master)
        assert new_status is not None and new_status["masterEpoch"] > info["masterEpoch"]
        assert new_status["maxOffset"] < tail_status["maxOffset"]
        after = CarefulProducer(group, "tail", prefix="after-")
        for _ in range(10):
            await after.send_one()
        await after.close()

        group.start(old_master)
        rejoined = await asyncio.to_thread(
            group.wait_for,
            lambda: (
                (s := group.status(old_master))
                and (m := group.status(new_master))
                and s["role"] == "SLAVE"
                and s["maxOffset"] == m["maxOffset"]
                and s["epoch"] == m["epoch"]
                and s
            ),
            "the old master to rejoin and match the new master's log",
            60.0,
        )
        assert rejoined["epoch"] > tail_status["epoch"]
        old_keys = {
            m.key
            for messages in (await read_topic(group.brokers[old_master].address, "tail")).values()
            for m in messages
        }
        new_keys = {
            m.key
            for messages in (await read_topic(group.brokers[new_master].address, "tail")).values()
            for m in messages
        }
        assert old_keys == new_keys
        assert not any(k.startswith("only-on-old-master-") for k in old_keys)
        assert set(producer.ledger.acked) <= old_keys
        assert set(after.ledger.acked) <= old_keys
