"""Persistent BrokerId across a restart on a new address (DESIGN.md §3.4;
seed persistent-broker-id "the BrokerId does not change when the IP does").

How: a slave is SIGKILLed and restarted with the same data dir on the next
unused loopback address, like a rescheduled pod; it must come back with its
BrokerId, the controller must record the new address, and it must rejoin
the SyncStateSet.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_broker_restarted_on_a_new_address_keeps_its_id(tmp_path: Path) -> None:
    with BrokerGroupHarness(tmp_path, block=12) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        slot = next(s for s in group.brokers if s != master)
        before = group.status(slot)
        assert before is not None
        old_address = group.brokers[slot].address

        group.kill(slot, signal.SIGKILL)
        producer = CarefulProducer(group, "ids")
        for _ in range(10):
            await producer.send_one()
        group.start(slot, new_address=True)
        new_address = group.brokers[slot].address
        assert new_address != old_address

        after = await asyncio.to_thread(
            group.wait_for,
            lambda: (s := group.status(slot)) and s["role"] == "SLAVE" and s,
            "the restarted broker to come back as slave",
        )
        assert after["brokerId"] == before["brokerId"]
        assert after["address"] == new_address

        def recorded() -> bool:
            info = group.replica_info()
            return info is not None and any(
                b["brokerId"] == before["brokerId"] and b["address"] == new_address and b["alive"]
                for b in info["brokers"]
            )

        await asyncio.to_thread(
            group.wait_for, recorded, "the controller to record the new address"
        )
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        assert before["brokerId"] in info["syncStateSet"]
        assert info["nextBrokerId"] == 4, "no new BrokerId was handed out"
        await producer.close()
