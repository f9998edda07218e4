"""The mqadmin commands behind the RocketMQ dashboard's and exporter's admin calls, against
`brokergroup local up` with stock RocketMQ 5.3.1 clients (issue 33 item 6).

One local runtime for the module; tools/rocketmq/StockClient.java's `failover` mode is a
running producer (until its stop file), its `follow` mode a running push consumer (one line
per delivery). Each mqadmin command's output is checked for content:

- producerConnection lists the running producer's clientId (GET_PRODUCER_CONNECTION_LIST);
- consumerConnection lists the running consumer's clientId, its subscription and consume
  type, model and start (GET_CONSUMER_CONNECTION_LIST);
- consumerStatus writes the consumer's own ConsumerRunningInfo, asked of it by the broker
  (GET_CONSUMER_RUNNING_INFO), and finds the group's rebalance OK;
- resetOffsetByTime to a time between two batches makes the running consumer receive the
  second batch again, exactly, and not the first (INVOKE_BROKER_TO_RESET_OFFSET, the pull
  that follows answered PULL_OFFSET_MOVED);
- brokerConsumeStats shows the group's queues of the topic (GET_BROKER_CONSUME_STATS);
- statsAll shows the topic's 20 puts and the group consuming it (QUERY_TOPIC_CONSUME_BY_WHO,
  VIEW_BROKER_STATS_DATA).

On the code before (08e4c59) each command failed: the broker answered its code
REQUEST_CODE_NOT_SUPPORTED (producerConnection, consumerStatus, resetOffsetByTime,
brokerConsumeStats: "CODE: 3"), consumerConnection showed no subscription, and statsAll
printed no row for the topic. Skips, saying why, without Java or the cached jars.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.integration.local_harness import Runtime
from tests.integration.stock_client_harness import StockRuntime, stock_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TOPIC = "AdminReset"
GROUP = "admin-follow"
T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float, runtime: Runtime) -> T:
    """Poll `check` until it returns a value; fail with the runtime's logs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout_s}s waiting for {what}\n{runtime.logs()}")


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockRuntime]:
    with stock_runtime(tmp_path_factory.mktemp("stock-admin")) as runtime:
        yield runtime


def stop(proc: subprocess.Popen[bytes], stop_file: Path) -> None:
    """Ask a StockClient mode to end (its stop file), then wait; SIGKILL by PID if it hangs."""
    stop_file.touch()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def test_producer_connection_lists_the_running_producer(rt: StockRuntime) -> None:
    work = rt.work / "producer"
    work.mkdir()
    proc = rt.client.start(
        "failover", work / "producer.out", topic="AdminProduced", group="admin-producer",
        seconds=600, stop=work / "stop", acks=work / "acks.tsv", log=work / "send.log",
    )  # fmt: skip
    try:
        client = f"@stock-client-{proc.pid}"

        def listed() -> str | None:
            out = rt.mqadmin("producerConnection", "-g", "admin-producer", "-t", "AdminProduced")
            return out if client in out else None

        out = wait_for("the producer listed", listed, 120, rt.runtime)
        [line] = [x for x in out.splitlines() if client in x]
        assert re.match(r"^0001\s+\S+@stock-client-\d+\s+\S+:\d+\s+JAVA\s+V5_3_1$", line), line
    finally:
        stop(proc, work / "stop")


def deliveries(path: Path) -> list[str]:
    """Body ids in delivery order (follow's out file: receivedAtMs, bodyId, queue, offset)."""
    if not path.exists():
        return []
    return [x.split("\t")[1] for x in path.read_text().splitlines() if x.count("\t") >= 4]


@pytest.fixture(scope="module")
def follower(rt: StockRuntime) -> Iterator[dict[str, Any]]:
    """A running push consumer of TOPIC in GROUP that received batch A then batch B, and
    the time between the two batches (the broker's clock is this machine's)."""
    work = rt.work / "follow"
    work.mkdir()
    out = work / "follow.tsv"
    proc = rt.client.start("follow", work / "follow.log", topic=TOPIC, group=GROUP, out=out,
                           stop=work / "stop")  # fmt: skip
    try:
        first = rt.client.run("send", kind="sync", topic=TOPIC, count=10, run="a")
        assert first[-1]["sendOk"] == 10, first
        time.sleep(0.05)  # store times of A and B in distinct milliseconds around `between`
        between = time.time_ns() // 1_000_000
        time.sleep(0.05)
        second = rt.client.run("send", kind="sync", topic=TOPIC, count=10, run="b")
        assert second[-1]["sendOk"] == 10, second
        a = [f"a-{i}" for i in range(10)]
        b = [f"b-{i}" for i in range(10)]
        wait_for(
            "both batches delivered",
            lambda: set(deliveries(out)) >= set(a + b) or None,
            120,
            rt.runtime,
        )
        yield {"pid": proc.pid, "out": out, "between": between, "a": a, "b": b}
    finally:
        stop(proc, work / "stop")


def test_consumer_connection_lists_the_running_consumer_and_its_subscription(
    rt: StockRuntime, follower: dict[str, Any]
) -> None:
    out = rt.mqadmin("consumerConnection", "-g", GROUP)
    client = f"@stock-client-{follower['pid']}"
    assert re.search(rf"^\S+{client}\s+\S+:\d+\s+JAVA\s+V5_3_1$", out, re.M), out
    assert re.search(rf"^{TOPIC}\s+\*$", out, re.M), out
    assert re.search(rf"^%RETRY%{GROUP}\s+\*$", out, re.M), out
    assert "ConsumeType: CONSUME_PASSIVELY" in out
    assert "MessageModel: CLUSTERING" in out
    assert "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET" in out


def section(text: str, title: str) -> list[str]:
    """The lines of one `#Title#` section of ConsumerRunningInfo.formatString, up to its blank
    line (each section is preceded by two newlines)."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def test_consumer_status_is_the_consumers_own_running_info(
    rt: StockRuntime, follower: dict[str, Any]
) -> None:
    out = rt.mqadmin("consumerStatus", "-g", GROUP)
    client = f"@stock-client-{follower['pid']}"
    [row] = [x for x in out.splitlines() if client in x]
    _, client_id, version, path = row.split()
    assert version == "V5_3_1"
    # The file is the ConsumerRunningInfo the consumer itself answered, relayed by the broker.
    info = (rt.work / path).read_text()
    # ConsumerRunningInfo.formatString: the subscriptionSet (a TreeSet, by "topic@subString")
    # one "%03d Topic: %-40s ClassFilter: %-8s SubExpression: %s" line each.
    assert section(info, "#Consumer Subscription#") == [
        f"{i:03d} Topic: {topic:<40} ClassFilter: {'false':<8} SubExpression: *"
        for i, topic in enumerate(sorted([TOPIC, f"%RETRY%{GROUP}"]), 1)
    ], info
    # The mqTable: the group's one consumer holds every queue of the topic (it received both
    # batches); the retry topic's queue only once its route was read, so it is not asked here.
    detail = [x.split()[:3] for x in section(info, "#Consumer MQ Detail#")[1:]]
    assert sorted(int(q) for t, _, q in detail if t == TOPIC) == [0, 1, 2, 3], info
    assert "Same subscription in the same group of consumer" in out
    assert "Rebalance OK" in out
    assert client_id.endswith(client)


def test_reset_offset_by_time_makes_the_running_consumer_receive_exactly_what_follows(
    rt: StockRuntime, follower: dict[str, Any]
) -> None:
    out_file: Path = follower["out"]
    before = len(deliveries(out_file))
    out = rt.mqadmin("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(follower["between"]))
    assert "#brokerName" in out and "#offset" in out, out
    rows = [x.split() for x in out.splitlines() if re.match(r"^\S+\s+\d+\s+\d+\s*$", x)]
    assert sorted(int(r[1]) for r in rows) == [0, 1, 2, 3], out

    def again() -> list[str] | None:
        new = deliveries(out_file)[before:]
        return new if set(new) >= set(follower["b"]) else None

    new = wait_for("batch B delivered again", again, 120, rt.runtime)
    # Exactly B again: none of A (stored before the time), every one of B.
    assert not set(new) & set(follower["a"]), new
    assert Counter(new) == Counter(follower["b"]), new
    # Each queue's new offset is the count of A's messages in it: 10 in all.
    assert sum(int(r[2]) for r in rows) == 10, out


def test_broker_consume_stats_shows_the_groups_queues(
    rt: StockRuntime, follower: dict[str, Any]
) -> None:
    master = rt.status()["masterAddress"]
    out = rt.mqadmin("brokerConsumeStats", "-b", master)
    # #Topic #Group #Broker Name #QID #Broker Offset #Consumer Offset #Diff #LastTime
    rows = [x.split() for x in out.splitlines() if x.startswith(TOPIC + " ")]
    assert rows and all(r[1] == GROUP for r in rows), out
    assert sorted(int(r[3]) for r in rows) == [0, 1, 2, 3], out
    assert sum(int(r[4]) for r in rows) == 20, out  # the broker offsets: the 20 stored
    assert "Diff Total:" in out


def stats_all_row(rt: StockRuntime, topic: str) -> list[str] | None:
    """statsAll's row of one topic, split: #Topic #Consumer Group #Accumulation #InTPS
    #OutTPS #InMsg24Hour #OutMsg24Hour, or without a group #Topic #Accumulation #InTPS
    #InMsg24Hour NO_CONSUMER (StatsAllSubCommand.printTopicDetail)."""
    text = rt.mqadmin("statsAll", "-t", topic)
    found = [x.split() for x in text.splitlines() if x.startswith(topic + " ")]
    return found[0] if found else None


def test_stats_all_shows_the_topics_puts_and_its_consumer_group(rt: StockRuntime) -> None:
    """statsAll's 24-hour counts are StatsAllSubCommand.compute24HourSum: the day window's
    sum, else the hour's, else the minute's. A count enters the minute window with the next
    10 s sample (all of a burst: with the sample after its last call) and leaves it 60 s
    after its first, then shows again with the next 10-minute sample (the hour window). So
    each count is read soon after its burst, waiting for the whole of it: the puts before
    any consumer exists, then the group's gets. By then the puts may have left the minute
    window in part or whole (a burst split by a sample leaves in two steps), as RocketMQ
    prints them, so the puts' count there is only bounded."""
    topic, group = "AdminStats", "admin-stats"
    sent = rt.client.run("send", kind="sync", topic=topic, count=20, run="s")
    assert sent[-1]["sendOk"] == 20, sent

    def puts() -> list[str] | None:
        found = stats_all_row(rt, topic)
        return found if found and found[-2] == "20" else None

    put_row = wait_for("statsAll counts the topic's 20 puts", puts, 120, rt.runtime)
    assert (put_row[0], put_row[1], put_row[-1]) == (topic, "0", "NO_CONSUMER"), put_row

    got = rt.client.run("consume", kind="lite", topic=topic, group=group, count=20, idle_s=30)
    assert len([x for x in got if "summary" not in x]) >= 20

    def gets() -> list[str] | None:
        found = stats_all_row(rt, topic)
        return found if found and len(found) == 7 and int(found[-1]) >= 20 else None

    got_row = wait_for("statsAll counts the group's gets", gets, 120, rt.runtime)
    name, consumer_group, accumulation, _in_tps, _out_tps, in_today, _ = got_row
    assert (name, consumer_group, accumulation) == (topic, group, "0"), got_row
    assert 0 <= int(in_today) <= 20, got_row
