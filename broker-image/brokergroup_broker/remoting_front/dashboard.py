"""The read-only admin codes the RocketMQ dashboard and rocketmq-exporter poll, besides
those of admin_queries.py: QUERY_TOPIC_CONSUME_BY_WHO (`mqadmin statsAll`),
VIEW_BROKER_STATS_DATA (statsAll's put and get rates), GET_PRODUCER_CONNECTION_LIST
(`mqadmin producerConnection`) and GET_BROKER_CONSUME_STATS (`mqadmin brokerConsumeStats`,
the exporter's lag of every group).

Bodies are RocketMQ 5.3's JSON (AdminBrokerProcessor): GroupList (`groupList`: the groups
whose live consumers subscribe the topic, ConsumerManager.queryTopicConsumeByWho, and those
holding an offset of it, ConsumerOffsetManager.whichGroupByTopic); BrokerStatsData
(statsMinute, statsHour, statsDay: BrokerStatsItem sum, tps, avgpt of the broker's
StatsItem, `core.broker_stats`; SYSTEM_ERROR "The stats <name> <key> not exist" for one it
never counted); ProducerConnection (`connectionSet` of the group's live producers;
SYSTEM_ERROR when none); ConsumeStatsList (brokerAddr, consumeStatsList: per consumer group
a one-key map to a ConsumeStats per topic the group holds offsets of and subscribes, when
its consumers are online, totalDiff, totalInflightDiff 0: no pull offsets are kept).
Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.remoting_front.admin_queries import (
    AdminReads,
    connection_json,
    consume_stats_text,
    group_get_tps,
    queue_stats,
)
from brokergroup_broker.remoting_front.clients import ConsumerGroups, ProducerGroups
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import json_body, json_text
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection


class DashboardReads(AdminReads, Protocol):
    """What these handlers read of the produce path (`front.ProduceAndPull` has it)."""

    def consumer_offset_keys(self) -> list[tuple[str, str, int]]: ...


class DashboardQueries:
    """Handlers of QUERY_TOPIC_CONSUME_BY_WHO, VIEW_BROKER_STATS_DATA,
    GET_PRODUCER_CONNECTION_LIST and GET_BROKER_CONSUME_STATS."""

    def __init__(
        self,
        produce: DashboardReads,
        *,
        broker_name: str,
        broker_addr: str,
        topics: Callable[[], Mapping[str, int]],
        consumers: ConsumerGroups,
        producers: ProducerGroups,
        stats: BrokerStats | None,
        clock_ms: Callable[[], int],
    ) -> None:
        self._produce = produce
        self._broker_name = broker_name
        self._broker_addr = broker_addr
        self._topics = topics
        self._consumers = consumers
        self._producers = producers
        self._stats = stats
        self._clock_ms = clock_ms

    async def topic_consumed_by(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """QUERY_TOPIC_CONSUME_BY_WHO: header topic."""
        topic = names.topic_name(cmd.fields(), "topic")
        groups = set(self._consumers.subscribers(topic))
        groups.update(g for g, t, _ in self._produce.consumer_offset_keys() if t == topic)
        body = json_body({"groupList": sorted(groups)})
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body)

    async def broker_stats_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """VIEW_BROKER_STATS_DATA: header statsName, statsKey (e.g. TOPIC_PUT_NUMS and a
        topic, GROUP_GET_NUMS and topic@group)."""
        fields = cmd.fields()
        name = header.text(fields, "statsName")
        key = header.text(fields, "statsKey")
        item = None if self._stats is None else self._stats.item(name, key)
        if item is None:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist"
            )
        body = json_body({
            "statsDay": {"avgpt": item.day.avgpt, "sum": item.day.sum, "tps": item.day.tps},
            "statsHour": {"avgpt": item.hour.avgpt, "sum": item.hour.sum, "tps": item.hour.tps},
            "statsMinute": {
                "avgpt": item.minute.avgpt, "sum": item.minute.sum, "tps": item.minute.tps
            },
        })  # fmt: skip
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body)

    async def producer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_PRODUCER_CONNECTION_LIST: header producerGroup."""
        group = names.producer_group_name(cmd.fields(), "producerGroup")
        members = self._producers.member_infos(group, self._clock_ms())
        if not members:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist"
            )
        body = json_body({"connectionSet": [connection_json(m, info) for m, info in members]})
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body)

    async def broker_consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_BROKER_CONSUME_STATS: header isOrder (only order topics: none here)."""
        is_order = header.boolean(cmd.fields(), "isOrder")
        held: dict[str, set[str]] = {}
        for group, topic, _ in self._produce.consumer_offset_keys():
            held.setdefault(group, set()).add(topic)
        served = self._topics()
        total_diff = 0
        entries: list[str] = []
        for group in sorted(set(held) | set(self._consumers.groups)):
            data = self._consumers.consumer_data.get(group)
            subscribed = {t for t, _ in data.subscriptions} if data is not None else set()
            per_topic: list[str] = []
            for topic in sorted(held.get(group, ())):
                queues = served.get(topic, 0)
                if is_order or queues == 0 or (subscribed and topic not in subscribed):
                    continue
                stats = await queue_stats(self._produce, group, topic, queues)
                if stats is None:
                    continue
                total_diff += sum(s.broker_offset - s.consumer_offset for s in stats)
                tps = group_get_tps(self._stats, group, topic)
                per_topic.append(consume_stats_text(self._broker_name, stats, tps))
            entries.append("{" + json_text(group) + ":[" + ",".join(per_topic) + "]}")
        body = (
            '{"brokerAddr":' + json_text(self._broker_addr)
            + ',"consumeStatsList":[' + ",".join(entries) + "]"
            + f',"totalDiff":{total_diff},"totalInflightDiff":0}}'
        )  # fmt: skip
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body.encode("utf-8"))
