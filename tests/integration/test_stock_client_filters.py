"""Server-side tag and SQL92 filters with the stock RocketMQ 5.3.1 client against
`brokergroup local up --set enablePropertyFilter=true` (issue 34 item 3; docs/filters.md),
through tools/rocketmq/modes/FilterMode.java:

- a push consumer with MessageSelector.byTag("TagA || TagC") receives exactly the TagA and
  TagC messages, and one with MessageSelector.bySql("a BETWEEN 3 AND 7 AND b = 'x'")
  exactly those whose properties match, each once, bodies intact, in queue order per queue;
- the broker sent only those: its msgGetTotalTodayNow (messages answered to pulls, user
  topics) is the sum of the two consumers' matches, not twice the messages sent, so the
  other bodies never crossed the wire (logged).

On the old code (b0939bf) the SQL92 consumer fails at its start (CHECK_CLIENT_CONFIG is not
served: "request code 46 not supported") and the broker sends the tag consumer every
message (msgGetTotalTodayNow = all sent; the client drops the rest itself).

Skips, saying why, without Java or the cached jars.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stock_client_harness import StockRuntime, stock_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

log = logging.getLogger(__name__)
COUNT, SIZE = 400, 512


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockRuntime]:
    with stock_runtime(
        tmp_path_factory.mktemp("stock-filters"), ("enablePropertyFilter=true",)
    ) as runtime:
        yield runtime


def expected(consumer: str) -> set[str]:
    """FilterMode's messages: i has tag Tag{A,B,C,D}[i % 4], a = i % 10, b = x iff i % 3 == 0."""
    out = set()
    for i in range(COUNT):
        tag, a, b = "ABCD"[i % 4], i % 10, "x" if i % 3 == 0 else "y"
        if (consumer == "tag" and tag in "AC") or (consumer == "sql" and 3 <= a <= 7 and b == "x"):
            out.add(f"f-{i}")
    return out


def test_tag_and_sql92_consumers_receive_exactly_their_messages_and_nothing_else_is_sent(
    rt: StockRuntime, tmp_path: Path
) -> None:
    lines = rt.client.run("filter", topic="FilterT", count=COUNT, size=SIZE, idle_s=60,
                          timeout_s=400)  # fmt: skip
    assert not [line for line in lines if "startError" in line], lines[:3]
    summary = lines[-1]
    deliveries = [line for line in lines if "consumer" in line]
    for consumer in ("tag", "sql"):
        got = [d for d in deliveries if d["consumer"] == consumer]
        ids = [d["id"] for d in got]
        assert sorted(ids) == sorted(expected(consumer)), consumer  # each once, no other
        assert all(d["intact"] for d in got), consumer
        if consumer == "tag":
            assert {d["tags"] for d in got} == {"TagA", "TagC"}
        for queue in {d["queueId"] for d in got}:
            offsets = [d["queueOffset"] for d in got if d["queueId"] == queue]
            assert offsets == sorted(offsets), (consumer, queue)
    sent_to_consumers = int(summary["msgGetTotalTodayNow"])
    matching = len(expected("tag")) + len(expected("sql"))
    log.info(
        "filters: %d sent, the broker answered %d messages to the two consumers' pulls "
        "(%d matching; unfiltered it would be %d)",
        COUNT, sent_to_consumers, matching, 2 * COUNT,
    )  # fmt: skip
    assert sent_to_consumers == matching
