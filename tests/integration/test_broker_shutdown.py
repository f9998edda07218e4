"""Graceful stop (SIGTERM) of a master: the process drains, exits 0, tells
the controller it is going away, and a slave from the SyncStateSet takes
over; the acknowledged messages are all there (DESIGN.md §3.4, §3.3).

"All there" is read once, as soon as the new master is master: the last
acknowledged message included (issue 32 item 8: the stop used to cancel the
slave streams while that message's confirmOffset waited
confirm_publish_delay_ms, and the new master served reads below it until a
produce or a slave ack). The mechanisms are tested deterministically in
tests/unit/test_ha_replication.py and test_ha_new_master_readable_range.py;
docs/ha.md "Hand-over".
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def test_sigterm_master_exits_cleanly_and_hands_over(tmp_path: Path) -> None:
    with BrokerGroupHarness(tmp_path, block=15) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        producer = CarefulProducer(group, "drain")
        for _ in range(30):
            await producer.send_one()
        await producer.close()

        group.kill(master, signal.SIGTERM)
        process = group.brokers[master].process
        assert process is not None and process.returncode == 0, group.logs()
        assert "stopped" in group.brokers[master].log_path.read_text()

        new_master = await asyncio.to_thread(group.wait_for_master, 30.0, {master})
        new_info = group.replica_info()
        assert new_info is not None
        assert new_info["masterBrokerId"] in info["syncStateSet"]
        queues = await read_topic(group.brokers[new_master].address, "drain")
        keys = {m.key for ms in queues.values() for m in ms}
        assert set(producer.ledger.acked) <= keys
