"""One owner for "disk full" (DESIGN.md §3.4a, issue 32 item 3): the store's verdict.

A broker whose disk is exactly at diskFullRatio and one just above it, each a real
`Broker` wired over a real store in a temp dir, confirmed master with a valid lease (as
the controller would leave it). The disk's usage comes from a fixed statvfs answer so
the ratio is exact. For each, the three readers of store health must agree:

- the heartbeat (`storeWritable`: what the controller decides liveness and elections on),
- readiness (what `/readyz` serialises: the Kubernetes readiness probe),
- produce admission (`ProducePath.send_messages`: STORE_NOT_WRITABLE or appended).

RocketMQ 5 marks the disk full only above the ratio (`physicRatio >
diskSpaceWarningLevelRatio` in DefaultMessageStore's isSpaceFull), so at the ratio all
three say writable, and just above it all three refuse.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage, ResponseCode
from brokergroup_broker.store import health
from tests.unit.confirmed_master import confirmed_master

DISK_FULL_RATIO = 0.5


def statvfs(blocks: int, free: int, available: int) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, blocks, free, available, 0, 0, 0, 0, 255))


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Broker]:
    """A registered broker 1, confirmed master of SyncStateSet {1}, lease valid."""
    # A ratio set to the disk's own usage: forced cleaning off (it must start below it).
    config = BrokerConfig(disk_full_ratio=DISK_FULL_RATIO, clean_file_forcibly_enable=False)
    async with confirmed_master(tmp_path, config) as m:
        yield m.broker


async def verdicts(broker: Broker) -> tuple[bool, bool, bool]:
    """(heartbeat storeWritable, ready, produce admitted)."""
    assert broker.parts is not None
    heartbeat = broker._heartbeat()
    ready, problems = broker.readiness()
    try:
        await broker.parts.produce.send_messages("TopicA", 0, [ProduceMessage("TopicA", b"m")])
    except BrokerError as exc:
        assert exc.code is ResponseCode.STORE_NOT_WRITABLE, exc
        admitted = False
    else:
        admitted = True
    if not ready:  # the only problem is the store's own verdict, in its words
        assert problems == [f"store not writable: {heartbeat.store_error}"], problems
    return heartbeat.store_writable, ready, admitted


async def test_at_disk_full_ratio_heartbeat_readyz_and_admission_say_writable(
    master: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = statvfs(100, 50, 50)  # used 50 / (50 + 50) = 0.5, exactly the ratio
    assert health.DiskSpace.from_statvfs(answer).used_ratio == DISK_FULL_RATIO
    monkeypatch.setattr(health.os, "statvfs", lambda _path: answer)
    assert await verdicts(master) == (True, True, True)


async def test_above_disk_full_ratio_heartbeat_readyz_and_admission_refuse(
    master: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = statvfs(100, 49, 49)  # used 51 / 100
    monkeypatch.setattr(health.os, "statvfs", lambda _path: answer)
    assert await verdicts(master) == (False, False, False)


async def test_an_unreadable_disk_is_one_verdict_too(
    master: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(_path: object) -> os.statvfs_result:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(health.os, "statvfs", failing)
    assert await verdicts(master) == (False, False, False)
