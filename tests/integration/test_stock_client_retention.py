"""A stock RocketMQ 5.3.1 push consumer over segments retention deleted (issue 33 item 1;
docs/retention.md "Reads below the minimum"): `local up` with 64 KiB segments and a 3.6 s
retention at every hour, a stock producer's sync sends, then a new consumer group from the
first offset. Its first pulls ask offset 0, below every queue's new min: the broker answers
PULL_OFFSET_MOVED with the new begin, and the stock client (DefaultMQPushConsumerImpl's
OFFSET_ILLEGAL path: the offset store takes nextBeginOffset, the queue is pulled again
after its rebalance) receives exactly the acknowledged messages at or above each queue's
min, as `mqadmin topicStatus` reports the mins, and nothing below them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.local_harness import wait_for
from tests.integration.stock_client_harness import stock_runtime

pytestmark = pytest.mark.timeout(600)

TOPIC = "StockRetained"
ALL_HOURS = ";".join(f"{h:02d}" for h in range(24))
RETENTION = (
    "mappedFileSizeCommitLog=65536",
    "fileReservedTime=0.001",
    f"deleteWhen={ALL_HOURS}",
    "cleanResourceInterval=300",
)


def messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if "summary" not in x]


def only_active_segments(root: Path) -> dict[str, Any] | None:
    """Every replica deleted all but the segment being written (nothing is sent now)."""
    dirs = sorted((root / "local" / "brokers").glob("*/commitlog"))
    counts = [len([p for p in d.iterdir() if p.name.isdigit()]) for d in dirs]
    return {"counts": counts} if len(dirs) == 3 and all(c == 1 for c in counts) else None


def test_a_stock_push_consumer_moves_to_the_new_min(tmp_path: Path) -> None:
    with stock_runtime(tmp_path, RETENTION) as rt:
        sends = messages(rt.client.run("send", kind="sync", topic=TOPIC, count=300, size=1000))
        assert all(m["status"] == "SEND_OK" for m in sends), sends[:3]
        wait_for("retention on every replica", lambda: only_active_segments(tmp_path), 60,
                 rt.runtime)  # fmt: skip
        out = rt.mqadmin("topicStatus", "-t", TOPIC)
        rows = re.findall(r"^broker-a\s+(\d+)\s+(\d+)\s+(\d+)", out, re.M)
        mins = {int(q): int(low) for q, low, _ in rows}
        assert sorted(mins) == [0, 1, 2, 3] and any(low > 0 for low in mins.values()), out
        got = messages(rt.client.run(
            "consume", kind="concurrent", topic=TOPIC, group="late-reader", count=len(sends),
            idle_s=45, timeout_s=240,
        ))  # fmt: skip
        expected = sorted(
            (m["queueId"], m["queueOffset"])
            for m in sends
            if m["queueOffset"] >= mins[m["queueId"]]
        )
        assert expected, mins
        assert sorted((m["queueId"], m["queueOffset"]) for m in got) == expected
