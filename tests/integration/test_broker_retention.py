"""Retention in a real group (issue 33 item 1; docs/retention.md): three broker processes
and their controllers on loopback, 64 KiB segments, fileReservedTime 0.001 h (3.6 s) at
every hour, the policy run every 300 ms.

1. Every replica deletes its own expired segments and records each in its retention.log
   (the record's fields as the audit reads them; the file's segments are gone).
2. A consumer group that committed offset 0 before the deletion resumes from each
   queue's new min (the brokergroup client follows nextQueueOffset): it receives exactly
   the acknowledged messages the master still holds, in queue order, none below the min.
3. A slave stopped with an old store, restarted after the master deleted past its end,
   resynchronises from the master's min (logged as a full resync), holds the same bytes
   as the master in every segment both have, and rejoins the SyncStateSet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import pytest

from brokergroup_broker.protocol.consumer import Consumer
from tests.integration.broker_harness import (
    BROKER_NAME,
    CLUSTER,
    BrokerGroupHarness,
    CarefulProducer,
)

pytestmark = pytest.mark.timeout(300)

TOPIC = "retained"
ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))
SETTINGS = {
    "fileReservedTime": "0.001",
    "deleteWhen": ALL_HOURS,
    "cleanResourceInterval": "300",
}
BODY = b"x" * 1000


def retention_records(data_dir: Path) -> list[dict[str, object]]:
    path = data_dir / "retention.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def segment_files(data_dir: Path) -> dict[str, bytes]:
    """The segments now (retention may delete one while it is read: it is left out)."""
    out = {}
    for path in sorted((data_dir / "commitlog").iterdir()):
        with contextlib.suppress(FileNotFoundError):
            out[path.name] = path.read_bytes()
    return out


async def produce(producer: CarefulProducer, count: int) -> None:
    for _ in range(count):
        await producer.send_one(BODY)


async def test_retention_deletes_on_every_replica_and_consumers_and_slaves_follow(
    tmp_path: Path,
) -> None:
    with BrokerGroupHarness(tmp_path, block=61, settings=SETTINGS) as group:
        group.start_all()
        info = await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        master = group.slot_of_broker_id(info["masterBrokerId"])
        assert master is not None
        address = group.brokers[master].address
        producer = CarefulProducer(group, TOPIC)
        await produce(producer, 20)
        lagging = Consumer(CLUSTER, BROKER_NAME, group="lagging", static_address=address)
        async with lagging:
            for queue_id in range(4):  # a consumer that read nothing yet
                await lagging.commit(TOPIC, queue_id, 0)
        await produce(producer, 400)
        assert not producer.ledger.errors, producer.ledger.errors

        # 1. Every replica deletes by its own clock and disk, and records each deletion.
        def deleted_everywhere() -> bool:
            statuses = [group.status(slot) for slot in group.brokers]
            return all(s is not None and s["minOffset"] > 0 for s in statuses)

        await asyncio.to_thread(group.wait_for, deleted_everywhere, "deletion on every replica")
        for slot, broker in group.brokers.items():
            records = retention_records(broker.data_dir)
            assert records, slot
            names = set(segment_files(broker.data_dir))
            for r in records:
                assert set(r) == {
                    "atMs", "segment", "fromOffset", "toOffset", "reason", "newMinOffset"
                }  # fmt: skip
                assert r["reason"] == "expired" and r["segment"] not in names
                assert r["segment"] == f"{r['fromOffset']:020d}"
                assert r["newMinOffset"] == r["toOffset"]
            starts = [int(str(r["fromOffset"])) for r in records]
            assert starts == sorted(starts)  # oldest first

        # 2. The lagging group resumes from each queue's new min. Nothing is sent now, so
        # retention settles once every replica keeps only the segment being written.
        def settled() -> bool:
            return all(
                len([p for p in (b.data_dir / "commitlog").iterdir() if p.name.isdigit()]) == 1
                for b in group.brokers.values()
            )

        await asyncio.to_thread(group.wait_for, settled, "only the active segments left")
        lagging = Consumer(CLUSTER, BROKER_NAME, group="lagging", static_address=address)
        async with lagging:
            mins = {q: (await lagging.query_offsets(TOPIC, q))[0] for q in range(4)}
            assert any(low > 0 for low in mins.values()), mins
            got = [
                m async for m in lagging.messages(TOPIC, idle_timeout_ms=1500)
            ]  # fmt: skip
        expected = sorted(
            (queue_id, offset, key)
            for key, (queue_id, offset) in producer.ledger.acked.items()
            if offset >= mins[queue_id]
        )
        assert sorted((m.queue_id, m.queue_offset, m.key) for m in got) == expected
        for queue_id in range(4):  # in queue order, from the min on
            offsets = [m.queue_offset for m in got if m.queue_id == queue_id]
            assert offsets == list(range(mins[queue_id], mins[queue_id] + len(offsets)))

        # 3. A slave away while the master deletes past its end resyncs from the min.
        slave = next(s for s in group.brokers if s != master)
        before = group.status(slave)
        assert before is not None
        group.kill(slave)
        await produce(producer, 400)

        def master_past(end: int) -> int | None:
            s = group.status(master)
            return s["minOffset"] if s is not None and s["minOffset"] > end else None

        await asyncio.to_thread(group.wait_for, lambda: master_past(before["maxOffset"]),
                                "the master deleted past the stopped slave's end")  # fmt: skip
        group.start(slave)

        def caught_up() -> bool:
            s, m = group.status(slave), group.status(master)
            return (
                s is not None
                and m is not None
                and s["maxOffset"] == m["maxOffset"]
                and s["minOffset"] > before["maxOffset"]
            )

        await asyncio.to_thread(group.wait_for, caught_up, "the slave resyncs from the min")
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        mine, theirs = (
            segment_files(group.brokers[slave].data_dir),
            segment_files(group.brokers[master].data_dir),
        )
        shared = sorted(set(mine) & set(theirs))
        assert shared and all(mine[n] == theirs[n] for n in shared)
        log = group.brokers[slave].log_path.read_text()
        assert "FULL RESYNC" in log
        await producer.close()
