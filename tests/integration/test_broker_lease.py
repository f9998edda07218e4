"""Master lease fencing (DESIGN.md §3.3 "Fencing").

How: the master loses every controller (all three SIGSTOPped — a partition
from the quorum without touching the network); after masterLeaseMs without
an answered heartbeat it must acknowledge nothing: a produce gets FENCED.
When the controllers come back the master is confirmed again (same epoch,
nobody could elect anyone meanwhile) and acknowledges again.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_master_without_controller_quorum_acknowledges_nothing(tmp_path: Path) -> None:
    with BrokerGroupHarness(tmp_path, block=14) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        producer = CarefulProducer(group, "lease")
        for _ in range(5):
            await producer.send_one()
        assert len(producer.ledger.acked) == 5
        producer.pinned_address = group.brokers[master].address
        before = await asyncio.to_thread(group.replica_info)
        assert before is not None

        for node_id in group.controllers.nodes:
            group.controllers.kill(node_id, signal.SIGSTOP)
        try:
            await asyncio.to_thread(
                group.wait_for,
                lambda: (s := group.status(master)) and s["leaseRemainingMs"] == 0,
                "the master's lease to lapse",
            )
            acked_before = len(producer.ledger.acked)
            for _ in range(5):
                key = await producer.send_one()
                assert key not in producer.ledger.acked
                assert producer.ledger.errors[key] == "FENCED", producer.ledger.errors
            assert len(producer.ledger.acked) == acked_before
        finally:
            for node_id in group.controllers.nodes:
                group.controllers.kill(node_id, signal.SIGCONT)

        async def acked_again() -> None:
            for _ in range(200):
                key = await producer.send_one()
                if key in producer.ledger.acked:
                    return
                await asyncio.sleep(0.1)
            raise AssertionError(f"writes never resumed: {producer.ledger.errors}")

        await acked_again()
        await producer.close()
        # The controllers' own pause was not the brokers' silence: no election happened.
        after = await asyncio.to_thread(group.replica_info)
        assert after is not None
        assert (after["masterBrokerId"], after["masterEpoch"]) == (
            before["masterBrokerId"],
            before["masterEpoch"],
        ), (before, after)
