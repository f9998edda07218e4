"""Scheduled and timer messages and the retry back-off with the stock RocketMQ 5.3.1 client
against `brokergroup local up` (issue 34 item 1), through the routes and key pair
`local status --json` shows (tools/rocketmq/StockClient.java's `delayed`, `follow` and
`backoff` modes):

- delay-level (setDelayTimeLevel) and timer messages (setDeliverTimeMs, setDelayTimeSec,
  setDelayTimeMs) reach their real topic, each with its body, none before its time (the
  deliver time; the send's start + the delay for the others) — and all of them arrive;
- a push consumer answering RECONSUME_LATER gets the message again no sooner than 10 s
  later (level 3 = 3 + reconsumeTimes 0), with reconsumeTimes 1, and again no sooner than
  30 s after that (level 4);
- timer messages sent at 40/s through a SIGKILL of the master: every acknowledged one is
  delivered, none before its deliver time; duplicates are counted (at-least-once).

How late a delivery is, is measured by bench/delay.py, not asserted here (a generous
bound only says nothing got stuck). On the old code (08e4c59) every delayed send is refused
MESSAGE_ILLEGAL, so the client gets no SEND_OK (`sendOk` 0 of 20); and a RECONSUME_LATER
comes back at once once the consumer pulls its retry topic.

Skips, saying why, without Java or the cached jars.
"""

from __future__ import annotations

import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.stock_client_harness import StockRuntime, stock_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: Nothing stuck: every message arrives within this of its time (bench/delay.py measures).
STUCK_MS = 15_000
SIZE = 1024


@dataclass(frozen=True)
class Ack:
    body_id: str
    sent_at: int
    ack_at: int
    asked: int
    deliver_at: int


def acks_of(path: Path) -> dict[str, Ack]:
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        body_id, _, sent, acked, asked, deliver = line.split("\t")
        out[body_id] = Ack(body_id, int(sent), int(acked), int(asked), int(deliver))
    return out


def received_of(path: Path) -> dict[str, list[int]]:
    """bodyId → receivedAtMs of each delivery (follow's out file); bodies must be intact."""
    out: dict[str, list[int]] = defaultdict(list)
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        if len(parts) < 5:
            continue  # a line being written
        assert parts[4] == "true", f"body changed: {line}"
        out[parts[1]].append(int(parts[0]))
    return out


def wait_until(what: str, check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for: {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockRuntime]:
    with stock_runtime(tmp_path_factory.mktemp("stock-delay")) as runtime:
        yield runtime


class Follower:
    """A push consumer (follow mode) of `topic`, started once the topic exists and seen to
    receive (a first ordinary message), so it is subscribed before the delayed sends."""

    def __init__(self, rt: StockRuntime, work: Path, topic: str) -> None:
        self.out, self.stop = work / f"{topic}.follow.tsv", work / f"{topic}.stop"
        rt.client.run("send", kind="sync", topic=topic, count=1, run=f"{topic}-warm", size=SIZE)
        self.proc = rt.client.start(
            "follow", work / f"{topic}.follow.log", topic=topic, group=f"{topic}-follow",
            out=self.out, stop=self.stop, size=SIZE,
        )  # fmt: skip
        wait_until("the follower's first message", lambda: received_of(self.out), 120)

    def close(self) -> None:
        self.stop.touch()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def check_on_time(
    acks: dict[str, Ack], received: dict[str, list[int]], earliest: dict[str, int]
) -> None:
    missing = sorted(set(acks) - set(received))
    assert not missing, f"acknowledged, never delivered: {missing[:20]}"
    early = {i: (received[i], earliest[i]) for i in acks if min(received[i]) < earliest[i]}
    assert not early, f"delivered before their time (received, due): {early}"
    stuck = {i: (max(received[i]), earliest[i]) for i in acks
             if min(received[i]) > earliest[i] + (acks[i].ack_at - acks[i].sent_at) + STUCK_MS}  # fmt: skip
    assert not stuck, stuck


def test_delay_levels_and_timers_reach_their_topic_not_before_their_time(
    rt: StockRuntime, tmp_path: Path
) -> None:
    topic = "StockDelayOnTime"
    follower = Follower(rt, tmp_path, topic)
    try:
        runs: dict[str, dict[str, str | int]] = {
            "deliver": {"kind": "deliver", "count": 20, "delay_ms": 3000, "spread_ms": 4000},
            "level": {"kind": "level", "count": 10, "level": 2},  # 5 s
            "sec": {"kind": "sec", "count": 5, "delay_ms": 4000},
            "ms": {"kind": "ms", "count": 5, "delay_ms": 3500},
        }
        acks: dict[str, Ack] = {}
        for run, options in runs.items():
            path = tmp_path / f"{run}.acks"
            lines = rt.client.run(
                "delayed", timeout_s=300, topic=topic, run=run, acks=path, size=SIZE, **options
            )
            assert lines[-1]["sendOk"] == options["count"], lines
            acks |= acks_of(path)
        earliest = {
            i: a.deliver_at if a.deliver_at >= 0
            else a.sent_at + (5000 if i.startswith("level") else a.asked)
            for i, a in acks.items()
        }  # fmt: skip
        wait_until(
            "every delayed message delivered",
            lambda: set(acks) <= set(received_of(follower.out)),
            120,
        )
    finally:
        follower.close()
    received = received_of(follower.out)
    check_on_time(acks, received, earliest)
    assert all(len(received[i]) == 1 for i in acks), "delivered twice without a failover"


def test_reconsume_later_backs_off_through_the_delay_levels(
    rt: StockRuntime, tmp_path: Path
) -> None:
    topic = "StockBackoff"
    sends = rt.client.run("send", kind="sync", topic=topic, count=2, run="bo", size=SIZE)
    assert sends[-1]["sendOk"] == 2, sends
    out = tmp_path / "backoff.tsv"
    lines = rt.client.run(
        "backoff", topic=topic, group="stock-backoff", out=out, count=2, until=2, idle_s=120
    )
    assert lines[-1]["done"] == 2, lines
    deliveries: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for line in out.read_text().splitlines():
        at, body_id, times, delivered_topic = line.split("\t")
        deliveries[body_id].append((int(at), int(times), delivered_topic))
    assert set(deliveries) == {"bo-0", "bo-1"}
    for body_id, got in deliveries.items():
        assert [(t, tp) for _, t, tp in got] == [(0, topic), (1, topic), (2, topic)], got
        first, second, third = (at for at, _, _ in got)
        # Level 3 (10 s) after the send-back, which follows the first delivery; then level 4
        # (30 s), when the consumer already pulls its retry topic (the first retry may also
        # wait for the client's rebalance to reach %RETRY%: only the second tells).
        assert second - first >= 10_000, (body_id, got)
        assert third - second >= 30_000, (body_id, got)


def test_every_acknowledged_timer_is_delivered_across_a_master_kill_none_early(
    rt: StockRuntime, tmp_path: Path
) -> None:
    topic = "StockDelayFailover"
    rt.wait_healthy()
    follower = Follower(rt, tmp_path, topic)
    acks_path, stop = tmp_path / "failover.acks", tmp_path / "failover.stop"
    sender = rt.client.start(
        "delayed", tmp_path / "failover.log", topic=topic, kind="deliver", rate=40,
        delay_ms=2000, spread_ms=6000, acks=acks_path, stop=stop, run="fo", size=SIZE,
    )  # fmt: skip
    try:
        wait_until("200 acknowledged timers", lambda: len(acks_of(acks_path)) >= 200, 120)
        killed_at = int(time.time() * 1000)
        epoch = rt.kill_master()["masterEpoch"]
        wait_until(
            "a SEND_OK after the kill",
            lambda: any(a.ack_at > killed_at for a in acks_of(acks_path).values()),
            120,
        )
        count = len(acks_of(acks_path))
        wait_until("200 more", lambda: len(acks_of(acks_path)) >= count + 200, 120)
        stop.touch()
        sender.wait(timeout=60)
        acks = acks_of(acks_path)
        wait_until(
            "every acknowledged timer delivered",
            lambda: set(acks) <= set(received_of(follower.out)),
            180,
        )
        time.sleep(3)  # late duplicates, to count them
    finally:
        stop.touch()
        follower.close()
        if sender.poll() is None:
            sender.kill()
    assert rt.status()["masterEpoch"] > epoch
    received = received_of(follower.out)
    check_on_time(acks, received, {i: a.deliver_at for i, a in acks.items()})
    every_early = [(i, t) for i in acks for t in received[i] if t < acks[i].deliver_at]
    assert not every_early, every_early
    duplicates = sum(len(received[i]) - 1 for i in acks)
    print(f"{len(acks)} acknowledged timers, all delivered, none early; {duplicates} duplicates")
