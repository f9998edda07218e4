"""Lease fencing with allAckInSyncStateSet=false (DESIGN.md §3.3 "Fencing").

The promise: with any ack setting, no write is acknowledged by an old
master after the new master's first acknowledged write.

How: three real brokers with allAckInSyncStateSet=false and
inSyncReplicas=1, so a master acknowledges alone. The master is cut from
the three controllers by a real partition (packets dropped both ways, no
FIN: `netfault.LoopbackPartition`), while its clients and slaves still
reach it; then it is reported not ready, as the operator does when a
readiness probe fails. That report makes the controller elect at once,
while the old master's lease (masterLeaseMs) is still running. A producer
pinned to the old master keeps sending; a second producer writes to the
new master as soon as the controller names it. Every acknowledgement's
arrival is timed on one monotonic clock.

Before the fix the new master acknowledged within ~0.1 s of its election
while the old one went on acknowledging for up to masterLeaseMs (2 s here).
Now the controller tells the new master how much of the old lease may be
left (`masterTakeoverWaitMs`) and it holds its acknowledgements until then.
Afterwards the partition heals, the old master rejoins as a slave, and
everything the new producer had acknowledged is read back, in order.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from brokergroup_cli.chaos import netfault
from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SETTINGS = {
    "allAckInSyncStateSet": "false",
    "inSyncReplicas": "1",
    # A wide lease makes the split-brain window obvious when the fence is missing.
    "heartbeatTimeoutMs": "3000",
    "masterLeaseMs": "2000",
    "slaveTimeoutMs": "6000",
}


async def _pump(
    producer: CarefulProducer, ack_times: dict[str, float], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        key = await producer.send_one()
        if key in producer.ledger.acked:
            ack_times[key] = time.monotonic()
        await asyncio.sleep(0.01)


@pytest.mark.skipif(
    netfault.unavailable_reason() is not None, reason=str(netfault.unavailable_reason())
)
async def test_old_master_acknowledges_nothing_after_the_new_masters_first_ack(
    tmp_path: Path,
) -> None:
    with (
        BrokerGroupHarness(tmp_path, block=31, settings=SETTINGS) as group,
        netfault.LoopbackPartition() as partition,
    ):
        group.start_all()
        old = await asyncio.to_thread(group.wait_for_master)
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        old_id, old_epoch = info["masterBrokerId"], info["masterEpoch"]

        to_old = CarefulProducer(group, "fence", prefix="old-")
        to_old.pinned_address = group.brokers[old].address
        old_acks: dict[str, float] = {}
        stop_old = asyncio.Event()
        pump = asyncio.create_task(_pump(to_old, old_acks, stop_old))
        await asyncio.to_thread(group.wait_for, lambda: len(old_acks) >= 20 or None, "old acks")

        controller_hosts = [node.host for node in group.controllers.nodes.values()]
        partition.cut([group.brokers[old].host], controller_hosts)
        cut_at = time.monotonic()
        leader = await asyncio.to_thread(group.controllers.wait_for_leader)
        # Retried on NOT_LEADER as the operator's client does (an idempotent report): a
        # stall of the loaded machine can start an election right after the wait (CI run 50).
        reply = await asyncio.to_thread(
            group.controllers.request_retrying,
            leader,
            "POST",
            "/v1/brokers/inactive",
            {"clusterName": "itest", "brokerName": "broker-a", "brokerId": old_id,
             "reason": "pod not ready (readiness probe failed)"},
        )  # fmt: skip
        assert reply.status == 200, reply.body

        def new_master() -> dict[str, object] | None:
            now = group.replica_info()
            if now is None or now["masterEpoch"] <= old_epoch or now["masterBrokerId"] == old_id:
                return None
            return now if now.get("masterAlive", True) else None

        elected = await asyncio.to_thread(group.wait_for, new_master, "a new master")
        new_slot = group.slot_of_broker_id(int(elected["masterBrokerId"]))  # type: ignore[call-overload]
        assert new_slot is not None and new_slot != old
        to_new = CarefulProducer(group, "fence", prefix="new-")
        to_new.pinned_address = group.brokers[new_slot].address
        new_acks: dict[str, float] = {}
        while len(new_acks) < 10:
            key = await to_new.send_one()
            if key in to_new.ledger.acked:
                new_acks[key] = time.monotonic()
            assert time.monotonic() - cut_at < 60, f"new master never acknowledged\n{group.logs()}"
        first_new_ack = min(new_acks.values())

        # Let the old master run until its lease is surely over, then stop sending to it.
        await asyncio.sleep(max(0.0, cut_at + 3.0 - time.monotonic()))
        stop_old.set()
        await pump
        late = sorted(
            (round(t - first_new_ack, 3), key) for key, t in old_acks.items() if t >= first_new_ack
        )
        assert late == [], (
            f"the old master acknowledged {len(late)} writes after the new master's first "
            f"acknowledgement (seconds after it, key): {late[:10]}"
        )
        # The window was real: the cut-off master went on acknowledging (its lease ran).
        assert any(t > cut_at for t in old_acks.values()), (
            f"the old master acknowledged nothing after the cut: {to_old.ledger.errors}"
        )

        partition.heal()
        await asyncio.to_thread(group.wait_for_sync_state_set, 3, 60.0)
        master = await asyncio.to_thread(group.wait_for_master)
        queues = await read_topic(group.brokers[master].address, "fence")
        read = {m.key: (queue_id, m.queue_offset, m.body) for queue_id, ms in queues.items()
                for m in ms}  # fmt: skip
        for key in sorted(to_new.ledger.acked, key=lambda k: int(k.split("-")[1])):
            assert key in read, f"acknowledged {key} lost"
            queue_id, offset, body = read[key]
            assert (queue_id, offset) == to_new.ledger.acked[key] and body == key.encode()
        for queue_id, messages in queues.items():
            new_keys = [m.key for m in messages if m.key.startswith("new-")]
            assert new_keys == sorted(new_keys, key=lambda k: int(k.split("-")[1])), queue_id
        await to_old.close()
        await to_new.close()
