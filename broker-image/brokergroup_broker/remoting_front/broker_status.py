"""What `mqadmin topicStatus`, `brokerStatus` and `getBrokerConfig` ask the broker port:
GET_TOPIC_STATS_INFO (202), GET_BROKER_RUNTIME_INFO (28) and GET_BROKER_CONFIG (26).

Answers are RocketMQ 5.3's (AdminBrokerProcessor.getTopicStatsInfo / getBrokerRuntimeInfo /
getBrokerConfig), from the broker's real state only:

- TopicStatsTable: per queue of the topic, its min and max offset (what a consumer can read,
  up to confirmOffset) and the store time of its newest record (0 for an empty queue), keyed
  by MessageQueue objects as fastjson writes a map with object keys. `topicPutTps` is 0.0:
  this broker keeps no put-rate statistics (BrokerStatsManager).
- KVTable of runtime info: only the keys this broker knows (bootTimestamp and runtime of the
  remoting port, earliestMessageTimeStamp over the readable queues, left out on a broker
  that serves no offsets, a slave; the store disk's commitLogDiskRatio,
  consumeQueueDiskRatio and commitLogDirCapacity, what the dashboard shows as disk usage;
  the put/get counters of `BrokerStats`, the same the metrics export: putTps and
  getTransferredTps (also under 4.x's spelling getTransferedTps) over 10, 60 and 600 s as
  StoreStatsService writes them, putMessageTimesTotal/SizeTotal/AverageSize and
  msgPut/GetTotalTodayNow/TodayMorning/YesterdayMorning as BrokerStats.record() keeps
  them); RocketMQ's other keys (thread-pool queues, timers) are not tracked here and left
  out rather than made up (docs/rocketmq-compatibility.md).
- The broker config as RocketMQ's properties text (`key=value` lines), RocketMQ's names
  for this broker's settings; the response header's `version` is a DataVersion that never
  moves (the settings are fixed for the process's life).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Protocol

from brokergroup_broker.broker_stats import BrokerStats, RuntimeTotals
from brokergroup_broker.protocol.messages import BrokerError
from brokergroup_broker.store.health import DiskSpace
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting.body import json_text
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection


@dataclass(frozen=True)
class TopicOffsetRow:
    """TopicOffset of one queue."""

    queue_id: int
    min_offset: int
    max_offset: int
    last_update_ms: int


def topic_stats_body(topic: str, broker_name: str, rows: list[TopicOffsetRow]) -> bytes:
    """TopicStatsTable as fastjson writes it (fields in name order, MessageQueue keys)."""
    entries = []
    for r in rows:
        key = {"brokerName": broker_name, "queueId": r.queue_id, "topic": topic}
        value = {
            "lastUpdateTimestamp": r.last_update_ms,
            "maxOffset": r.max_offset,
            "minOffset": r.min_offset,
        }
        entries.append(f"{json_text(key)}:{json_text(value)}")
    return ('{"offsetTable":{' + ",".join(entries) + '},"topicPutTps":0.0}').encode()


def kv_table_body(table: Mapping[str, str]) -> bytes:
    """KVTable: {"table": {key: value}}."""
    return json_text({"table": dict(sorted(table.items()))}).encode()


def runtime_text(elapsed_ms: int) -> str:
    """StoreStatsService.getFormatRuntime (MessageFormat groups thousands of days with ',')."""
    seconds, _ = divmod(max(0, elapsed_ms), 1000)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"[ {days:,} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def disk_ratio_text(space: DiskSpace) -> str:
    """UtilAll.getDiskPartitionSpaceUsedPercent as String.valueOf prints it: the used
    percent rounded up to a whole one, over 100 ("0.48"). The same ratio as diskFullRatio's."""
    whole = space.used + space.usable
    if whole <= 0:
        return "0.0"
    percent, rest = divmod(space.used * 100, whole)
    return repr((percent + (1 if rest else 0)) / 100)


def human_bytes(count: int) -> str:
    """MixAll.humanReadableByteCount(count, false): "512 B", "3.9 KiB", "251.9 GiB"."""
    if count < 1024:
        return f"{count} B"
    exp = int(math.log(count) / math.log(1024))
    scaled = Decimal(repr(count / 1024**exp)).quantize(Decimal("0.1"), ROUND_HALF_UP)
    return f"{scaled} {'KMGTPE'[exp - 1]}iB"


def disk_capacity_text(space: DiskSpace) -> str:
    """commitLogDirCapacity: "Total : 251.9 GiB, Free : 209.5 GiB." (Free is getFreeSpace:
    root's reserve included, as RocketMQ shows it)."""
    return f"Total : {human_bytes(space.total)}, Free : {human_bytes(space.free)}."


def java_double(value: float) -> str:
    """Java's Double.toString: Python's shortest repr, in Java's scientific form outside
    [1e-3, 1e7) ("1.0E7")."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    mantissa, _, exponent = f"{value:e}".partition("e")
    digits = repr(float(mantissa.rstrip("0").rstrip(".") or "0"))
    return f"{digits}E{int(exponent)}"


def tps_text(tps: tuple[float | None, ...]) -> str:
    """StoreStatsService.getPutTps(): the 10, 60 and 600 s rates joined by a space, each
    empty while fewer seconds were sampled."""
    return " ".join("" if t is None else java_double(t) for t in tps)


def counters_table(totals: RuntimeTotals) -> dict[str, str]:
    """The runtime info keys the counters give (StoreStatsService.getRuntimeInfo and
    AdminBrokerProcessor.prepareRuntimeInfo)."""
    times = totals.put_nums or 1  # RocketMQ divides by at least 1 and reports it
    get_tps = tps_text(totals.get_tps)
    return {
        "putTps": tps_text(totals.put_tps),
        "getTransferredTps": get_tps,
        "getTransferedTps": get_tps,
        "putMessageTimesTotal": str(times),
        "putMessageSizeTotal": str(totals.put_size),
        "putMessageAverageSize": java_double(totals.put_size / times),
        "msgPutTotalTodayNow": str(totals.put_nums_without_system),
        "msgPutTotalTodayMorning": str(totals.put_total_today_morning),
        "msgPutTotalYesterdayMorning": str(totals.put_total_yesterday_morning),
        "msgGetTotalTodayNow": str(totals.get_nums_without_system),
        "msgGetTotalTodayMorning": str(totals.get_total_today_morning),
        "msgGetTotalYesterdayMorning": str(totals.get_total_yesterday_morning),
    }


def properties_text(config: Mapping[str, str]) -> bytes:
    """MixAll.properties2String (sorted, so an answer is reproducible)."""
    return "".join(f"{k}={v}\n" for k, v in sorted(config.items())).encode()


class StatusReads(Protocol):
    """What these handlers read of the produce path (`front.ProduceAndPull` has it)."""

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def store_timestamp_at(
        self, topic: str, queue_id: int, queue_offset: int
    ) -> int | None: ...


class BrokerStatus:
    """Handlers of GET_TOPIC_STATS_INFO, GET_BROKER_RUNTIME_INFO and GET_BROKER_CONFIG."""

    def __init__(
        self,
        produce: StatusReads,
        *,
        broker_name: str,
        config: Mapping[str, str],
        topics: Callable[[], Mapping[str, int]],
        disk_space: Callable[[], DiskSpace] | None = None,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        stats: BrokerStats | None = None,
    ) -> None:
        self._produce = produce
        self._stats = stats
        self._disk_space = disk_space
        self._broker_name = broker_name
        self._config = dict(config)
        self._topics = topics
        self._wall_ms = wall_ms
        self.boot_ms = wall_ms()

    async def topic_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_TOPIC_STATS_INFO: the topic's queues' min/max offsets and last store time."""
        topic = names.topic_name(cmd.fields(), "topic")
        queues = self._topics().get(topic)
        if queues is None:
            return response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        rows = []
        for queue_id in range(queues):
            low, high = await self._produce.query_offsets(topic, queue_id)
            last = 0
            if high > 0:  # RocketMQ reads the store time at max - 1 (0 if unreadable)
                last = await self._produce.store_timestamp_at(topic, queue_id, high - 1) or 0
            rows.append(TopicOffsetRow(queue_id, max(0, low), max(0, high), last))
        body = topic_stats_body(topic, self._broker_name, rows)
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body)

    async def runtime_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_BROKER_RUNTIME_INFO: a KVTable of the runtime values this broker tracks."""
        table = {
            "bootTimestamp": str(self.boot_ms),
            "runtime": runtime_text(self._wall_ms() - self.boot_ms),
        }
        if self._stats is not None:
            table.update(counters_table(self._stats.totals()))
        try:
            earliest = await self._earliest_store_time()
        except BrokerError:  # a slave serves no offsets: `brokerStatus -c` still lists it
            pass
        else:
            table["earliestMessageTimeStamp"] = str(-1 if earliest is None else earliest)
        if self._disk_space is not None:
            try:
                space = self._disk_space()
            except OSError:
                pass  # an unreadable disk is left out, like RocketMQ's missing store dir
            else:
                # Commit log and consume queues share the store's one filesystem here.
                table["commitLogDiskRatio"] = table["consumeQueueDiskRatio"] = disk_ratio_text(
                    space
                )
                table["commitLogDirCapacity"] = disk_capacity_text(space)
        return response_to(cmd, ResponseCode.SUCCESS, None, None, kv_table_body(table))

    async def _earliest_store_time(self) -> int | None:
        earliest: int | None = None
        for topic, queues in self._topics().items():
            for queue_id in range(queues):
                low, high = await self._produce.query_offsets(topic, queue_id)
                if low >= high:
                    continue
                stored = await self._produce.store_timestamp_at(topic, queue_id, low)
                if stored is not None and (earliest is None or stored < earliest):
                    earliest = stored
        return earliest

    async def broker_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_BROKER_CONFIG: the settings as properties text, header `version` a DataVersion."""
        version = json_text({"counter": 0, "stateVersion": 0, "timestamp": self.boot_ms})
        return response_to(
            cmd, ResponseCode.SUCCESS, None, {"version": version}, properties_text(self._config)
        )
