"""A master that restarts at an unchanged masterEpoch with a shorter log
(DESIGN.md §3.2 "On becoming master (every time, including a restart at the
same masterEpoch)", issue 7 item 6).

The master's unflushed tail is lost (cut here by truncating its last segment
while it is down, the power-loss model); the controller never noticed it was
gone (long heartbeat and connection-close timeouts), so it names the same
broker master at the same masterEpoch. Both slaves are paused meanwhile, so
when they come back the master has already written *new* bytes past the old
log end. Slaves truncate only to an epoch's end: if the master kept its old
epoch entry, a slave's old bytes in [cut point, old end) stay and the logs
diverge under one (epoch, startOffset). The fix takes a new masterEpoch that
begins at the shortened log end, so every slave cuts there.

Checked: a new masterEpoch after the restart, every replica's commit log is
byte-for-byte the master's, and every message the slaves serve is one the
master serves (content and order per queue).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = pytest.mark.integration

# The controller must not notice the master's restart: no failover, same epoch.
SLOW_DETECTION_CONTROLLER = {"heartbeatTimeoutMs": 20000, "connectionCloseGraceMs": 19000}
SLOW_DETECTION_BROKER = {"heartbeatTimeoutMs": "20000", "masterLeaseMs": "15000"}


def _commit_log(data_dir: Path) -> bytes:
    segments = sorted(data_dir.rglob("commitlog/*"))
    return b"".join(p.read_bytes() for p in segments if p.is_file())


def _cut_last_segment(data_dir: Path, keep_bytes: int) -> None:
    last = sorted(p for p in data_dir.rglob("commitlog/*") if p.is_file())[-1]
    with open(last, "r+b") as f:
        f.truncate(keep_bytes)
        os.fsync(f.fileno())


async def test_restart_at_the_same_epoch_with_a_cut_tail_truncates_the_slaves(
    tmp_path: Path,
) -> None:
    with BrokerGroupHarness(
        tmp_path,
        block=18,
        controller_config=SLOW_DETECTION_CONTROLLER,
        settings=SLOW_DETECTION_BROKER,
    ) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        epoch = info["masterEpoch"]
        slaves = [s for s in group.brokers if s != master]

        producer = CarefulProducer(group, "orders", prefix="old-")
        for _ in range(60):
            await producer.send_one(b"old body " + b"x" * 200)
        await producer.close()
        end = group.status(master)["maxOffset"]  # type: ignore[index]
        await asyncio.to_thread(
            group.wait_for,
            lambda: all(group.status(s)["maxOffset"] == end for s in slaves) or None,  # type: ignore[index]
            "both slaves to hold the whole log",
        )

        for s in slaves:
            group.pause(s)
        group.kill(master)
        segment_start = end - (end % 65536)
        cut_to = max(0, (end - segment_start) - 2500)  # drop the last ~10 records
        _cut_last_segment(group.brokers[master].data_dir, cut_to)
        group.start(master)

        def master_again() -> dict[str, object] | None:
            st = group.status(master)
            return st if st is not None and st.get("role") == "MASTER" else None

        await asyncio.to_thread(group.wait_for, master_again, "the master back", 30.0)
        # New bytes past the old end while the slaves are away.
        producer = CarefulProducer(group, "orders", prefix="new-")
        producer.pinned_address = group.brokers[master].address
        while group.status(master)["maxOffset"] <= end + 4096:  # type: ignore[index]
            await producer.send_one(b"new body " + b"y" * 300)
        await producer.close()

        for s in slaves:
            group.resume(s)
        after = await asyncio.to_thread(group.wait_for_sync_state_set, 3, 60.0)
        assert after["masterBrokerId"] == info["masterBrokerId"]
        assert after["masterEpoch"] > epoch, "the restarted master must take a new epoch"

        final = group.status(master)["maxOffset"]  # type: ignore[index]
        await asyncio.to_thread(
            group.wait_for,
            lambda: all(group.status(s)["maxOffset"] == final for s in slaves) or None,  # type: ignore[index]
            "both slaves to catch up",
        )
        master_log = _commit_log(group.brokers[master].data_dir)[:final]
        for s in slaves:
            slave_log = _commit_log(group.brokers[s].data_dir)[:final]
            first_diff = next(
                (i for i, (a, b) in enumerate(zip(master_log, slave_log, strict=True)) if a != b),
                None,
            )
            assert first_diff is None, f"slot {s} diverges from the master at offset {first_diff}"

        on_master = await read_topic(group.brokers[master].address, "orders")
        for s in slaves:
            on_slave = await read_topic(group.brokers[s].address, "orders")
            for queue_id, messages in on_slave.items():
                assert [(m.key, m.body) for m in messages] == [
                    (m.key, m.body) for m in on_master[queue_id][: len(messages)]
                ], f"slot {s} queue {queue_id}"
