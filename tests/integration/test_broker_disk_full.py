"""A master whose disk fills up is failed over (DESIGN.md §2.3, §3.4a;
RocketMQ issue 6468 never failed over on a full disk).

How: the first broker's data dir is a small tmpfs of its own, so it can be
filled without touching the machine's disk. That broker is started alone and
becomes master; the other two join and are expanded into the SyncStateSet.
A filler file pushes the tmpfs over diskFullRatio: the master's store stops
taking writes, its heartbeats say so, the controller marks it inactive and
elects a SyncStateSet member, and producing continues there. When the filler
is removed the old master's store is writable again and it rejoins as a
slave of the new master. Skips (with the reason) where tmpfs cannot be
mounted (not root).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from brokergroup_cli.chaos.faults import fill_disk
from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

TMPFS_BYTES = 32 * 1024 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "broker0"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


async def test_full_disk_fails_the_master_over_and_it_rejoins_when_space_returns(
    tmp_path: Path, small_disk: Path
) -> None:
    with BrokerGroupHarness(tmp_path, block=17) as group:
        assert group.brokers[0].data_dir == small_disk
        group.start_controllers()
        group.start(0)
        assert await asyncio.to_thread(group.wait_for_master) == 0
        group.start(1)
        group.start(2)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        full_id = info["masterBrokerId"]

        producer = CarefulProducer(group, "full")
        for _ in range(20):
            await producer.send_one()
        assert len(producer.ledger.acked) == 20, producer.ledger.errors

        filler = fill_disk(small_disk, 0.99, "filler")  # diskFullRatio defaults to 0.95
        new_master = await asyncio.to_thread(group.wait_for_master, 30.0, {0})
        new_info = group.replica_info()
        assert new_info is not None
        assert new_info["masterBrokerId"] != full_id
        assert new_info["masterBrokerId"] in info["syncStateSet"]
        assert new_info["masterEpoch"] > info["masterEpoch"]
        status = group.status(0)
        assert status is not None and status["storeWritable"] is False
        assert not group.ready(0)  # /readyz tells Kubernetes the same

        acked = len(producer.ledger.acked)
        for _ in range(200):
            await producer.send_one()
            if len(producer.ledger.acked) >= acked + 20:
                break
        assert len(producer.ledger.acked) >= acked + 20, producer.ledger.errors
        await producer.close()

        filler.unlink()

        def rejoined() -> dict[str, object] | None:
            status = group.status(0)
            ok = (
                status is not None
                and status["role"] == "SLAVE"
                and status["storeWritable"]
                and status["masterBrokerId"] == group.status(new_master)["brokerId"]  # type: ignore[index]
            )
            return status if ok else None

        await asyncio.to_thread(group.wait_for, rejoined, "the old master to rejoin as slave")
