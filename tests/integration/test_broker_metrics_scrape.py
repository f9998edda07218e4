"""The brokers' /metrics on real processes (docs/metrics.md): after real sends and pulls a
scrape of the master's page gives the exact per-topic put counts and bytes and the pulled
counts, and a SIGSTOPped slave's lag is exactly the bytes the master wrote since it was
paused; the page is open (no bearer token), as the controller's."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.broker_harness import BrokerGroupHarness, CarefulProducer, read_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def scrape(http: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"{http}/metrics", timeout=5) as response:  # no token
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_scrape_counts_puts_gets_and_a_paused_slaves_lag(tmp_path: Path) -> None:
    with BrokerGroupHarness(tmp_path, block=43) as group:
        group.start_all()
        master = await asyncio.to_thread(group.wait_for_master)
        await asyncio.to_thread(group.wait_for_sync_state_set, 3)
        producer = CarefulProducer(group, "metered")
        for _ in range(10):
            await producer.send_one(b"x" * 100)
        assert len(producer.ledger.acked) == 10, producer.ledger.errors
        queues = await read_topic(group.brokers[master].address, "metered")
        assert sum(len(ms) for ms in queues.values()) == 10
        http = group.brokers[master].http
        status = group.status(master)
        assert status is not None
        got = scrape(http)
        assert got[("brokergroup_broker_put_messages_total", (("topic", "metered"),))] == 10
        # The only records in this store are these ten: their bytes are the log's end.
        put_bytes = got[("brokergroup_broker_put_bytes_total", (("topic", "metered"),))]
        assert put_bytes == status["maxOffset"] - status["minOffset"]
        key = (("group", "-"), ("topic", "metered"))
        assert got[("brokergroup_broker_get_messages_total", key)] == 10
        assert got[("brokergroup_broker_get_bytes_total", key)] == put_bytes
        assert got[("brokergroup_broker_role", (("role", "MASTER"),))] == 1
        assert got[("brokergroup_broker_sync_state_set_size", ())] == 3
        assert got[("brokergroup_broker_commit_round_seconds_count", ())] == 10

        slave = next(s for s in range(len(group.brokers)) if s != master)
        slave_id = str(group.status(slave)["brokerId"])  # type: ignore[index]
        lag_key = ("brokergroup_broker_slave_lag_bytes", (("slave", slave_id),))
        group.wait_for(lambda: scrape(http)[lag_key] == 0 or None, "the slave caught up")
        before = group.status(master)["maxOffset"]  # type: ignore[index]
        group.pause(slave)
        try:
            for _ in range(100):  # acknowledged once the master shrinks the slave out
                await producer.send_one(b"y" * 100)
                if len(producer.ledger.acked) >= 15:
                    break
                await asyncio.sleep(0.05)
            after = group.status(master)["maxOffset"]  # type: ignore[index]
            got = scrape(http)
            assert got[lag_key] == after - before > 0
            assert got[("brokergroup_broker_slave_in_sync_state_set", (("slave", slave_id),))] == 0
            assert got[("brokergroup_broker_put_messages_total", (("topic", "metered"),))] == len(
                producer.ledger.acked
            )
        finally:
            group.resume(slave)
            await producer.close()
