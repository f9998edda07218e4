"""A producer with a request in flight to a partitioned master finishes it on
the new master as soon as the controller elects one (issue: clients follow
a partitioned master in under 3 s).

How: three real brokers; the master is paused (SIGSTOP: no FIN, its socket
stays open, like a partition) while the project's `Producer` has a send in
flight to it. The producer's request timeout is two minutes, so waiting it
out would be obvious: the send must complete on the new master while the
old one is still paused. Before the change the send sat on the paused
master until its request timeout. Then the old master is continued, rejoins
as a slave, and every acknowledged message is read back in order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from brokergroup_broker.protocol.client import ClientConfig
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.protocol.producer import Producer
from tests.integration.broker_harness import BROKER_NAME, CLUSTER, BrokerGroupHarness, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: Far beyond the test's patience: a send that waits it out fails the test.
REQUEST_TIMEOUT_MS = 120_000
PATIENCE_S = 60.0


async def test_in_flight_send_moves_to_the_new_master_without_its_timeout(tmp_path: Path) -> None:
    with BrokerGroupHarness(tmp_path, block=32) as group:
        group.start_all()
        old = await asyncio.to_thread(group.wait_for_master)
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        info = group.replica_info()
        assert info is not None
        old_epoch, old_address = info["masterEpoch"], group.brokers[old].address
        config = ClientConfig(request_timeout_ms=REQUEST_TIMEOUT_MS)
        async with Producer(
            CLUSTER, BROKER_NAME, controller_addresses=group.controllers.api_addresses,
            token=group.controllers.token, config=config,
        ) as producer:  # fmt: skip
            acked: list[tuple[str, int, int]] = []
            for i in range(5):
                result = await producer.send(
                    ProduceMessage("follow", f"before-{i}".encode(), key=f"before-{i}"), queue_id=0
                )
                acked.append((f"before-{i}", 0, result.messages[0].queue_offset))  # fmt: skip
            assert producer.master_address == old_address

            group.pause(old)
            try:
                send = asyncio.create_task(
                    producer.send(ProduceMessage("follow", b"in-flight", key="in-flight"), queue_id=0)
                )  # fmt: skip
                done, _ = await asyncio.wait({send}, timeout=PATIENCE_S)
                assert send in done, (
                    f"the send was still waiting on the paused master {old_address} after "
                    f"{PATIENCE_S} s (its request timeout is {REQUEST_TIMEOUT_MS} ms)\n{group.logs()}"
                )
                result = send.result()
                assert result.master_epoch > old_epoch
                assert producer.master_address not in (None, old_address)
                assert producer.master_changes_followed >= 1
                acked.append(("in-flight", 0, result.messages[0].queue_offset))
                result = await producer.send(
                    ProduceMessage("follow", b"after", key="after"), queue_id=0
                )
                acked.append(("after", 0, result.messages[0].queue_offset))  # fmt: skip
            finally:
                group.resume(old)
        await asyncio.to_thread(group.wait_for_sync_state_set, 3, 60.0)
        master = await asyncio.to_thread(group.wait_for_master)
        queue = (await read_topic(group.brokers[master].address, "follow", queue_count=1))[0]
        read = [(m.key, m.queue_offset) for m in queue]
        # Acknowledged ones are there, at their offsets, in send order (an
        # abandoned attempt may have landed too: at least once).
        positions = [read.index((key, offset)) for key, _q, offset in acked]
        assert positions == sorted(positions), read
