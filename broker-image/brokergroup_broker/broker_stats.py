"""The broker's put/get counters in RocketMQ's StatsItem terms (BrokerStatsManager).

One `BrokerStats` per broker, fed by the send and pull paths of both client ports and
read by GET_BROKER_RUNTIME_INFO, VIEW_BROKER_STATS_DATA (`mqadmin statsAll`) and the
Prometheus collector (docs/metrics.md). Pure: no I/O, no threads, time from the injected
`clock` (wall milliseconds).

Per stats name (TOPIC_PUT_NUMS, ...) and key it keeps RocketMQ's StatsItem: a running
`value` and call count `times`, and three lists of samples `(timestamp, times, value)`:
every 10 s (the last 7: the minute window), every 10 min (the last 7: the hour window),
every hour (the last 25: the day window). A window's sum is last - first value, its tps
that sum per second between their timestamps, its avgpt the sum per call (StatsItem.
computeStatsData). RocketMQ samples on a timer; here sampling is lazy: every call first
takes the samples whose instants have passed, before it adds, so a sample holds exactly
the value at its instant (nothing changed between the previous call and now), and an idle
broker costs nothing. A key's first sample is preceded by a zero one an interval earlier,
as StatsItem.samplingInSeconds does.

GET_BROKER_RUNTIME_INFO's putTps and getTransferredTps follow StoreStatsService: totals
sampled every second, the last 601 kept, tps over the last 10, 60 and 600 seconds. The
msgPut/GetTotal*Morning values follow BrokerStats.record(), taken at each midnight (UTC,
the pods' clock zone).

Keys are bounded (`max_keys` per stats name): puts are keyed by topic, which the store
bounds by maxTopics; gets and send-backs by topic@group, which only this bound limits. A
key past the bound is still counted in the broker totals, not on its own; `untracked_keys`
says how many calls missed it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# Stats names (RocketMQ's Stats.*).
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"
STATS_NAMES = (
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    BROKER_PUT_NUMS,
    BROKER_GET_NUMS,
)

MINUTE_SAMPLE_MS = 10_000
HOUR_SAMPLE_MS = 600_000
DAY_SAMPLE_MS = 3_600_000
MINUTE_SAMPLES = 7
HOUR_SAMPLES = 7
DAY_SAMPLES = 25
SECOND_SAMPLE_MS = 1_000
#: StoreStatsService.MAX_RECORDS_OF_SAMPLING + 1.
SECOND_SAMPLES = 601
DAY_MS = 86_400_000
DEFAULT_MAX_KEYS = 10_000

#: TopicValidator's system topics (not in msgPut/GetTotal*: *_WITHOUT_SYSTEM_TOPIC).
SYSTEM_TOPICS = frozenset(
    {
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "TBW102",
    }
)


def is_system_topic(topic: str) -> bool:
    """TopicValidator.isSystemTopic."""
    return topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")


def stats_key(topic: str, group: str) -> str:
    """BrokerStatsManager.buildStatsKey(topic, group): "topic@group"."""
    return f"{topic}@{group}"


@dataclass(frozen=True)
class StatsWindow:
    """RocketMQ's StatsSnapshot of one window (what BrokerStatsItem carries)."""

    sum: int
    tps: float
    avgpt: float
    times: int


ZERO_WINDOW = StatsWindow(0, 0.0, 0.0, 0)


@dataclass(frozen=True)
class StatsSnapshot:
    """One key's windows (BrokerStatsData: statsMinute, statsHour, statsDay) and its sums."""

    minute: StatsWindow
    hour: StatsWindow
    day: StatsWindow
    value: int
    times: int


@dataclass(frozen=True)
class RuntimeTotals:
    """What GET_BROKER_RUNTIME_INFO reports of the counters.

    `put_tps`/`get_tps`: over the last 10, 60 and 600 s, None where fewer seconds were
    sampled (StoreStatsService leaves those empty)."""

    put_nums: int
    put_size: int
    put_times: int
    get_nums: int
    get_size: int
    put_nums_without_system: int
    get_nums_without_system: int
    put_total_today_morning: int
    put_total_yesterday_morning: int
    get_total_today_morning: int
    get_total_yesterday_morning: int
    put_tps: tuple[float | None, float | None, float | None]
    get_tps: tuple[float | None, float | None, float | None]


_Sample = tuple[int, int, int]  # (timestamp_ms, times, value) as CallSnapshot


def _window(samples: deque[_Sample]) -> StatsWindow:
    """StatsItem.computeStatsData."""
    if not samples:
        return ZERO_WINDOW
    first_ts, first_times, first_value = samples[0]
    last_ts, last_times, last_value = samples[-1]
    total = last_value - first_value
    elapsed = last_ts - first_ts
    tps = total * 1000.0 / elapsed if elapsed > 0 else 0.0
    times = last_times - first_times
    return StatsWindow(total, tps, total / times if times > 0 else 0.0, times)


class StatsItem:
    """One key's running sums and sample lists."""

    __slots__ = ("day", "hour", "minute", "times", "value")

    def __init__(self) -> None:
        self.value = 0
        self.times = 0
        self.minute: deque[_Sample] = deque(maxlen=MINUTE_SAMPLES)
        self.hour: deque[_Sample] = deque(maxlen=HOUR_SAMPLES)
        self.day: deque[_Sample] = deque(maxlen=DAY_SAMPLES)

    def sample(self, samples: deque[_Sample], at_ms: int, interval_ms: int) -> None:
        if not samples:
            samples.append((at_ms - interval_ms, 0, 0))
        samples.append((at_ms, self.times, self.value))

    def snapshot(self) -> StatsSnapshot:
        return StatsSnapshot(
            _window(self.minute), _window(self.hour), _window(self.day), self.value, self.times
        )


class _Schedule:
    """The next instant of one sampling period, first at `start_ms` (scheduleAtFixedRate
    with no initial delay)."""

    __slots__ = ("interval_ms", "keep", "next_ms")

    def __init__(self, start_ms: int, interval_ms: int, keep: int) -> None:
        self.interval_ms = interval_ms
        self.keep = keep
        self.next_ms = start_ms

    def due(self, now_ms: int) -> list[int]:
        """The instants passed since the last call, at most `keep` (older ones would be
        pushed out of the list anyway; the counters did not move in between)."""
        if now_ms < self.next_ms:
            return []
        count = (now_ms - self.next_ms) // self.interval_ms + 1
        first = self.next_ms + max(0, count - self.keep) * self.interval_ms
        self.next_ms += count * self.interval_ms
        return list(range(first, self.next_ms, self.interval_ms))


class BrokerStats:
    """The broker's counters (BrokerStatsManager's, the ones this broker counts)."""

    def __init__(
        self,
        clock: Callable[[], int],
        *,
        cluster_name: str,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if max_keys <= 0:
            raise ValueError(f"max_keys must be > 0, got {max_keys}")
        self._clock = clock
        self.cluster_name = cluster_name
        self.max_keys = max_keys
        self._sets: dict[str, dict[str, StatsItem]] = {name: {} for name in STATS_NAMES}
        now = clock()
        self.boot_ms = now
        self._minute = _Schedule(now, MINUTE_SAMPLE_MS, MINUTE_SAMPLES)
        self._hour = _Schedule(now, HOUR_SAMPLE_MS, HOUR_SAMPLES)
        self._day = _Schedule(now, DAY_SAMPLE_MS, DAY_SAMPLES)
        self._second = _Schedule(now, SECOND_SAMPLE_MS, SECOND_SAMPLES)
        self._midnight = _Schedule(now - now % DAY_MS + DAY_MS, DAY_MS, 2)
        self._next_due = now
        self.untracked_keys = 0
        # Broker-wide sums (kept apart from the keyed sets: never refused a key).
        self._put_nums = 0
        self._put_size = 0
        self._put_times = 0
        self._get_nums = 0
        self._get_size = 0
        self._put_nums_user = 0
        self._get_nums_user = 0
        self._put_per_second: deque[tuple[int, int]] = deque(maxlen=SECOND_SAMPLES)
        self._get_per_second: deque[tuple[int, int]] = deque(maxlen=SECOND_SAMPLES)
        self._morning = (0, 0, 0, 0)  # put today, put yesterday, get today, get yesterday

    # -- feeding (the send and pull paths) ------------------------------------------------

    def on_put(self, topic: str, messages: int, size: int) -> None:
        """One stored send request of `messages` records, `size` bytes (incTopicPutNums with
        times 1, incTopicPutSize, incBrokerPutNums)."""
        self._catch_up()
        self._add(TOPIC_PUT_NUMS, topic, messages)
        self._add(TOPIC_PUT_SIZE, topic, size)
        self._add(BROKER_PUT_NUMS, self.cluster_name, messages, 0)
        self._put_nums += messages
        self._put_size += size
        self._put_times += 1
        if not is_system_topic(topic):
            self._put_nums_user += messages

    def on_get(self, group: str, topic: str, messages: int, size: int) -> None:
        """One pull that found `messages` records of `size` bytes (incGroupGetNums/Size,
        incBrokerGetNums)."""
        self._catch_up()
        key = stats_key(topic, group)
        self._add(GROUP_GET_NUMS, key, messages)
        self._add(GROUP_GET_SIZE, key, size)
        self._add(BROKER_GET_NUMS, self.cluster_name, messages, 0)
        self._get_nums += messages
        self._get_size += size
        if not is_system_topic(topic):
            self._get_nums_user += messages

    def on_send_back(self, group: str, topic: str, messages: int = 1) -> None:
        """CONSUMER_SEND_MSG_BACK stored (incSendBackNums)."""
        self._catch_up()
        self._add(SNDBCK_PUT_NUMS, stats_key(topic, group), messages)

    # -- reading ----------------------------------------------------------------------------

    def item(self, stats_name: str, key: str) -> StatsSnapshot | None:
        """VIEW_BROKER_STATS_DATA's answer for one key; None for an unknown name or key."""
        self._catch_up()
        stats = self._sets.get(stats_name)
        if stats is None:
            return None
        found = stats.get(key)
        return None if found is None else found.snapshot()

    def values(self, stats_name: str) -> Iterator[tuple[str, int]]:
        """Every key's running value of one stats name (what the metrics export)."""
        for key, item in self._sets[stats_name].items():
            yield key, item.value

    def totals(self) -> RuntimeTotals:
        self._catch_up()
        today_put, yesterday_put, today_get, yesterday_get = self._morning
        return RuntimeTotals(
            put_nums=self._put_nums,
            put_size=self._put_size,
            put_times=self._put_times,
            get_nums=self._get_nums,
            get_size=self._get_size,
            put_nums_without_system=self._put_nums_user,
            get_nums_without_system=self._get_nums_user,
            put_total_today_morning=today_put,
            put_total_yesterday_morning=yesterday_put,
            get_total_today_morning=today_get,
            get_total_yesterday_morning=yesterday_get,
            put_tps=_tps_over(self._put_per_second),
            get_tps=_tps_over(self._get_per_second),
        )

    # -- inside -----------------------------------------------------------------------------

    def _add(self, stats_name: str, key: str, value: int, times: int = 1) -> None:
        stats = self._sets[stats_name]
        item = stats.get(key)
        if item is None:
            if len(stats) >= self.max_keys:
                self.untracked_keys += 1
                return
            item = stats[key] = StatsItem()
        item.value += value
        item.times += times

    def _catch_up(self) -> None:
        now = self._clock()
        if now < self._next_due:  # the common case: one comparison per call
            return
        for at in self._second.due(now):
            self._put_per_second.append((at, self._put_nums))
            self._get_per_second.append((at, self._get_nums))
        for _ in self._midnight.due(now):
            # BrokerStats.record(): yesterday's morning takes today's, today's the totals.
            today_put, _, today_get, _ = self._morning
            self._morning = (self._put_nums_user, today_put, self._get_nums_user, today_get)
        for schedule, pick in (
            (self._minute, _minute_list),
            (self._hour, _hour_list),
            (self._day, _day_list),
        ):
            for at in schedule.due(now):
                for stats in self._sets.values():
                    for item in stats.values():
                        item.sample(pick(item), at, schedule.interval_ms)
        self._next_due = min(
            s.next_ms for s in (self._second, self._midnight, self._minute, self._hour, self._day)
        )


def _minute_list(item: StatsItem) -> deque[_Sample]:
    return item.minute


def _hour_list(item: StatsItem) -> deque[_Sample]:
    return item.hour


def _day_list(item: StatsItem) -> deque[_Sample]:
    return item.day


def _tps_over(
    samples: deque[tuple[int, int]],
) -> tuple[float | None, float | None, float | None]:
    """StoreStatsService.getPutTps(10/60/600): CallSnapshot.getTPS from the sample `time`
    before the newest; None while fewer than time + 1 samples were taken."""

    def over(seconds: int) -> float | None:
        if len(samples) <= seconds:
            return None
        begin_ms, begin = samples[-(seconds + 1)]
        end_ms, end = samples[-1]
        return (end - begin) / (end_ms - begin_ms) * 1000

    return over(10), over(60), over(600)


#: The group the project's own protocol's pulls count under: its pulls name none.
OWN_PROTOCOL_GROUP = "-"

#: Upper bounds (seconds) of the commit round's histogram buckets: an append to its
#: acknowledgement (group commit fdatasync and the SyncStateSet's acks), 0.1 ms to 10 s.
COMMIT_ROUND_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
)  # fmt: skip


class LatencyBuckets:
    """A cumulative-at-read histogram for one hot path: `observe` is a bisect and two
    additions (no lock: the event loop is its one writer); the metrics collector reads
    `cumulative()` at scrape time."""

    __slots__ = ("_counts", "bounds", "count", "sum_s")

    def __init__(self, bounds: tuple[float, ...] = COMMIT_ROUND_BUCKETS_S) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"bucket bounds must increase: {bounds}")
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)  # the last: above every bound (+Inf)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations <= it) per bucket, +Inf last (Prometheus' `le`)."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, math.inf), self._counts, strict=True):
            running += n
            out.append((bound, running))
        return out
