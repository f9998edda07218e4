"""BrokerStats (brokergroup_broker.broker_stats): RocketMQ's StatsItem windows and
StoreStatsService's tps with an injected clock; exact sums, tps and avgpt, the windows'
roll-over, the morning totals at midnight, the key bound; the commit round's buckets."""

from __future__ import annotations

import math

import pytest

from brokergroup_broker.broker_stats import (
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    LatencyBuckets,
    StatsWindow,
)

#: A UTC midnight plus 1 h (wall ms).
T0 = 1_700_006_400_000 + 3_600_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_minute_window_is_statsitems_first_to_last_sample() -> None:
    clock = Clock()
    stats = BrokerStats(clock, cluster_name="C")
    stats.on_put("T", 2, 200)
    # Before the first 10 s sample the item exists with no window yet (RocketMQ: zeros).
    first = stats.item(TOPIC_PUT_NUMS, "T")
    assert first is not None and first.minute == StatsWindow(0, 0.0, 0.0, 0)
    assert (first.value, first.times) == (2, 1)
    clock.now += 10_000  # sample 1: a zero point 10 s back, then (times 1, value 2)
    stats.on_put("T", 3, 300)
    clock.now += 10_000  # sample 2: (times 2, value 5)
    got = stats.item(TOPIC_PUT_NUMS, "T")
    assert got is not None
    assert got.minute == StatsWindow(sum=5, tps=0.25, avgpt=2.5, times=2)
    size = stats.item(TOPIC_PUT_SIZE, "T")
    assert size is not None and size.minute == StatsWindow(500, 25.0, 250.0, 2)
    # BROKER_PUT_NUMS is keyed by the cluster and counts messages only (times stay 0).
    broker = stats.item(BROKER_PUT_NUMS, "C")
    assert broker is not None and broker.minute == StatsWindow(5, 0.25, 0.0, 0)
    assert stats.item(TOPIC_PUT_NUMS, "other") is None
    assert stats.item("NO_SUCH_STATS", "T") is None


def test_minute_window_rolls_over_after_seven_samples() -> None:
    clock = Clock()
    stats = BrokerStats(clock, cluster_name="C")
    values = []
    for step in range(12):  # one put of `step + 1` messages in every 10 s
        stats.on_put("T", step + 1, 1)
        values.append(step + 1)
        clock.now += 10_000
    got = stats.item(TOPIC_PUT_NUMS, "T")
    assert got is not None
    # 7 samples kept: the last 6 intervals' puts (7..12), over 60 s, 6 calls.
    assert got.minute == StatsWindow(sum(values[6:]), sum(values[6:]) / 60, sum(values[6:]) / 6, 6)
    # The hour window sampled at start (nothing yet) only: empty; the day window too.
    assert got.hour == StatsWindow(0, 0.0, 0.0, 0)
    clock.now = T0 + 600_000  # the first 10 min sample: zero point at T0, then all 78
    got = stats.item(TOPIC_PUT_NUMS, "T")
    assert got is not None and got.hour == StatsWindow(78, 78 / 600, 78 / 12, 12)


def test_an_idle_gap_keeps_what_the_samples_would_have_held() -> None:
    clock = Clock()
    stats = BrokerStats(clock, cluster_name="C")
    stats.on_get("G", "T", 4, 400)
    clock.now += 10_000
    stats.on_get("G", "T", 6, 600)
    clock.now += 3_600_000  # an hour without calls: the minute list holds 7 equal samples
    got = stats.item(GROUP_GET_NUMS, "T@G")
    assert got is not None and got.minute == StatsWindow(0, 0.0, 0.0, 0)
    assert got.hour.sum == 10 and got.hour.times == 2
    size = stats.item(GROUP_GET_SIZE, "T@G")
    assert size is not None and size.value == 1000


def test_runtime_tps_over_10_60_600_seconds_and_totals() -> None:
    clock = Clock()
    stats = BrokerStats(clock, cluster_name="C")
    assert stats.totals().put_tps == (None, None, None)
    for _ in range(61):  # 5 messages a second, sampled each second
        stats.on_put("T", 5, 50)
        stats.on_get("G", "T", 2, 20)
        clock.now += 1_000
    totals = stats.totals()
    assert totals.put_tps == (5.0, 5.0, None)
    assert totals.get_tps == (2.0, 2.0, None)
    assert (totals.put_nums, totals.put_size, totals.put_times) == (305, 3050, 61)
    assert (totals.get_nums, totals.get_size) == (122, 1220)


def test_morning_totals_move_at_midnight_and_skip_system_topics() -> None:
    clock = Clock()
    stats = BrokerStats(clock, cluster_name="C")
    stats.on_put("T", 7, 70)
    stats.on_put("rmq_sys_TRACE", 100, 1)  # a system topic: not in msgPutTotal*
    stats.on_get("G", "T", 3, 30)
    totals = stats.totals()
    assert (totals.put_nums_without_system, totals.put_total_today_morning) == (7, 0)
    clock.now = T0 - 3_600_000 + 86_400_000  # the next midnight
    stats.on_put("T", 1, 10)
    totals = stats.totals()
    assert (totals.put_total_today_morning, totals.put_total_yesterday_morning) == (7, 0)
    assert (totals.get_total_today_morning, totals.put_nums_without_system) == (3, 8)
    clock.now += 86_400_000
    totals = stats.totals()
    assert (totals.put_total_today_morning, totals.put_total_yesterday_morning) == (8, 7)


def test_keys_are_bounded_and_the_totals_still_count() -> None:
    stats = BrokerStats(Clock(), cluster_name="C", max_keys=2)
    for topic in ("A", "B", "C"):
        stats.on_put(topic, 1, 10)
    assert sorted(k for k, _ in stats.values(TOPIC_PUT_NUMS)) == ["A", "B"]
    assert stats.untracked_keys == 2  # C's NUMS and SIZE
    assert stats.totals().put_nums == 3
    stats.on_send_back("G", "%RETRY%G")
    assert list(stats.values(SNDBCK_PUT_NUMS)) == [("%RETRY%G@G", 1)]
    with pytest.raises(ValueError, match="max_keys"):
        BrokerStats(Clock(), cluster_name="C", max_keys=0)


def test_latency_buckets_are_cumulative_le() -> None:
    buckets = LatencyBuckets((0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 0.5):
        buckets.observe(seconds)
    assert buckets.cumulative() == [(0.001, 2), (0.01, 3), (math.inf, 4)]
    assert buckets.count == 4 and buckets.sum_s == pytest.approx(0.5035)
    with pytest.raises(ValueError):
        LatencyBuckets((0.01, 0.001))
