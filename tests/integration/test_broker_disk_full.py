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

A whole group stopped by full disks (issue 33 item 4: every replica over
diskFullRatio, no master, writes refused) comes back when its volumes grow, with
nothing done by hand: each broker's tmpfs is remounted larger while the brokers
run (what a CSI driver's online expansion does to a mounted filesystem), the
brokers find the space on their own, a master is elected, the acknowledged
messages are all there and new ones are taken.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from brokergroup_cli.chaos.faults import fill_disk
from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(150)]

TMPFS_BYTES = 32 * 1024 * 1024


def _mount_tmpfs(mount_point: Path) -> None:
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the full-disk test: {mounted.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "broker0"
    _mount_tmpfs(mount_point)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.fixture
def small_disks(tmp_path: Path) -> Iterator[list[Path]]:
    """Every broker's data dir on a small tmpfs of its own."""
    mounted: list[Path] = []
    try:
        for slot in range(3):
            _mount_tmpfs(tmp_path / f"broker{slot}")
            mounted.append(tmp_path / f"broker{slot}")
        yield mounted
    finally:
        for mount_point in mounted:
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


async def test_a_group_stopped_by_full_disks_recovers_when_its_volumes_grow(
    tmp_path: Path, small_disks: list[Path]
) -> None:
    with BrokerGroupHarness(tmp_path, block=27) as group:
        assert [group.brokers[s].data_dir for s in range(3)] == small_disks
        group.start_controllers()
        group.start_all()
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)

        producer = CarefulProducer(group, "grow")
        for _ in range(20):
            await producer.send_one()
        assert len(producer.ledger.acked) == 20, producer.ledger.errors

        for disk in small_disks:
            fill_disk(disk, 0.99, "filler")  # diskFullRatio defaults to 0.95

        def stopped() -> bool:
            statuses = [group.status(slot) for slot in range(3)]
            replica = group.replica_info() or {}
            return all(
                s is not None and s["storeWritable"] is False for s in statuses
            ) and not replica.get("masterAlive", True)

        await asyncio.to_thread(group.wait_for, stopped, "every store full and no live master")
        refused = await producer.send_one()
        assert refused not in producer.ledger.acked

        # The volumes grow under the running brokers; nothing else is done.
        for disk in small_disks:
            subprocess.run(
                ["mount", "-o", f"remount,size={4 * TMPFS_BYTES}", str(disk)], check=True
            )
        master = await asyncio.to_thread(group.wait_for_master, 30.0)
        await producer.close()

        acked = len(producer.ledger.acked)
        for _ in range(200):
            await producer.send_one()
            if len(producer.ledger.acked) >= acked + 20:
                break
        assert len(producer.ledger.acked) == acked + 20, producer.ledger.errors
        await producer.close()

        read = await read_topic(group.brokers[master].address, "grow")
        keys = {m.key for queue in read.values() for m in queue}
        assert sorted(set(producer.ledger.acked) - keys) == []
        assert all(group.status(slot)["storeWritable"] for slot in range(3))  # type: ignore[index]
