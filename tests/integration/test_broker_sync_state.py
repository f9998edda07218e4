"""SyncStateSet shrink/expand and minInSyncReplicas on real processes
(DESIGN.md §3.3; seed controller-mode-design "Shrink/Expand SyncStateSet").

How: a group whose brokers all run with minInSyncReplicas=3. A slave is
SIGSTOPped: the master shrinks it out after haMaxTimeSlaveNotCatchUpMs and
writes are then refused at once with IN_SYNC_REPLICAS_NOT_ENOUGH (never
appended). After SIGCONT the slave catches up, is expanded back in, and
writes are acknowledged again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_lagging_slave_shrunk_then_expanded_and_min_in_sync_replicas(
    tmp_path: Path,
) -> None:
    with BrokerGroupHarness(tmp_path, block=13, settings={"minInSyncReplicas": "3"}) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        producer = CarefulProducer(group, "isr")
        for _ in range(10):
            await producer.send_one()
        assert len(producer.ledger.acked) == 10
        # Where the master's group commit synced them (/v1/status, store/group_commit.py).
        commits = group.status(master)["groupCommit"]  # type: ignore[index]
        assert set(commits) == {"loopSyncs", "threadSyncs", "movesToThread"}, commits
        assert commits["loopSyncs"] + commits["threadSyncs"] >= 1, commits

        lagging = next(s for s in group.brokers if s != master)
        lagging_id = group.status(lagging)["brokerId"]  # type: ignore[index]
        group.pause(lagging)
        shrunk = await asyncio.to_thread(group.wait_for_sync_state_set, 2)
        assert lagging_id not in shrunk["syncStateSet"]
        assert shrunk["syncStateSetEpoch"] > info["syncStateSetEpoch"]

        key = await producer.send_one()
        assert producer.ledger.errors.get(key) == "IN_SYNC_REPLICAS_NOT_ENOUGH"
        assert key not in producer.ledger.uncertain

        group.resume(lagging)
        expanded = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        assert lagging_id in expanded["syncStateSet"]

        async def write_until_acked() -> str:
            for _ in range(100):
                key = await producer.send_one()
                if key in producer.ledger.acked:
                    return key
                await asyncio.sleep(0.1)
            raise AssertionError(f"no write acknowledged after expansion: {producer.ledger.errors}")

        await write_until_acked()
        queues = await read_topic(group.brokers[master].address, "isr")
        keys = {m.key for ms in queues.values() for m in ms}
        assert set(producer.ledger.acked) <= keys
        refused = {
            k for k, code in producer.ledger.errors.items() if code == "IN_SYNC_REPLICAS_NOT_ENOUGH"
        }
        assert not refused & keys, "a refused produce must never be stored"
        await producer.close()


async def test_sync_state_set_follows_slave_connections_not_the_check_timer(
    tmp_path: Path,
) -> None:
    """A slave that catches up is expanded in, and one whose connection drops is shrunk
    out, when that happens: with the periodic check set to ten minutes, both still
    happen (with allAck every write waits for that shrink)."""
    settings = {"syncStateSetCheckIntervalMs": "600000"}
    with BrokerGroupHarness(tmp_path, block=19, settings=settings) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        producer = CarefulProducer(group, "wake")
        for _ in range(5):
            await producer.send_one()
        assert len(producer.ledger.acked) == 5

        victim = next(s for s in group.brokers if s != master)
        victim_id = group.status(victim)["brokerId"]  # type: ignore[index]
        group.kill(victim)
        shrunk = await asyncio.to_thread(group.wait_for_sync_state_set, 2)
        assert victim_id not in shrunk["syncStateSet"]
        assert shrunk["syncStateSetEpoch"] > info["syncStateSetEpoch"]
        for _ in range(5):
            await producer.send_one()
        assert len(producer.ledger.acked) == 10, producer.ledger.errors

        group.start(victim)
        expanded = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        assert victim_id in expanded["syncStateSet"]
        await producer.close()
