"""The broker port's read-only admin and query codes: QUERY_MESSAGE (`key_query`),
GET_CONSUME_STATS and GET_TOPIC_CONFIG (what `mqadmin consumerProgress` calls besides the
name server), GET_CONSUMER_CONNECTION_LIST.

Bodies are RocketMQ 5.3's JSON (fastjson's field names): ConsumeStats
(`offsetTable` keyed by MessageQueue objects, as fastjson writes a map with object keys;
`consumeTps`, the group's GROUP_GET_NUMS tps of the last minute per topic), OffsetWrapper
(brokerOffset, consumerOffset, pullOffset, lastTimestamp), TopicConfigAndQueueMapping (a
TopicConfig with `mappingDetail` null: no static topics), ConsumerConnection (the members'
Connection: clientId, clientAddr, language, version, and the group's consumer data from its
latest heartbeat). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.broker_stats import GROUP_GET_NUMS, BrokerStats, stats_key
from brokergroup_broker.protocol.messages import NO_CONSUMER_OFFSET
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.key_query import RecordSource, key_query, run_key_query
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting.body import json_text
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

from .clients import ClientInfo, ConsumerGroups


def group_get_tps(stats: BrokerStats | None, group: str, topic: str) -> float:
    """BrokerStatsManager.tpsGroupGetNums: the group's gets of the topic per second over the
    last minute (0 when not counted)."""
    item = None if stats is None else stats.item(GROUP_GET_NUMS, stats_key(topic, group))
    return 0.0 if item is None else float(item.minute.tps)


def message_queue_map(broker_name: str, entries: Iterable[tuple[str, int, str]]) -> str:
    """A map keyed by MessageQueue objects as fastjson writes it: each key is itself a JSON
    object (not valid JSON for most parsers, but what the stock client's decode reads);
    `entries` are (topic, queueId, the value's JSON text)."""
    parts = [
        json_text({"brokerName": broker_name, "queueId": queue_id, "topic": topic}) + ":" + value
        for topic, queue_id, value in entries
    ]
    return "{" + ",".join(parts) + "}"


def connection_json(client_id: str, info: ClientInfo) -> dict[str, object]:
    """RocketMQ's Connection (ClientChannelInfo as the connection lists show it)."""
    return {
        "clientAddr": info.address,
        "clientId": client_id,
        "language": info.language,
        "version": info.version,
    }


@dataclass(frozen=True)
class QueueStats:
    """OffsetWrapper of one queue."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp_ms: int


def consume_stats_text(broker_name: str, stats: list[QueueStats], consume_tps: float) -> str:
    """ConsumeStats as fastjson writes it (`offsetTable` keyed by MessageQueue objects:
    `message_queue_map`). The pull offset is the consumer offset: this broker keeps no
    separate pull offsets."""
    table = message_queue_map(
        broker_name,
        (
            (s.topic, s.queue_id, json_text({
                "brokerOffset": s.broker_offset, "consumerOffset": s.consumer_offset,
                "lastTimestamp": s.last_timestamp_ms, "pullOffset": s.consumer_offset,
            }))
            for s in stats
        ),
    )  # fmt: skip
    return '{"consumeTps":' + repr(float(consume_tps)) + ',"offsetTable":' + table + "}"


def consume_stats_body(broker_name: str, stats: list[QueueStats], consume_tps: float) -> bytes:
    """ConsumeStats's body (`consume_stats_text`)."""
    return consume_stats_text(broker_name, stats, consume_tps).encode("utf-8")


class AdminReads(RecordSource, Protocol):
    """What these handlers read of the produce path (`front.ProduceAndPull` has it all)."""

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...


async def queue_stats(
    produce: AdminReads, group: str, topic: str, queues: int
) -> list[QueueStats] | None:
    """OffsetWrapper of each queue of `topic` for `group` (AdminBrokerProcessor): the
    queue's max offset, the group's offset (0 when none) and the store time of its last
    consumed record; None when the group holds no offset of the topic."""
    offsets = [await produce.query_consumer_offset(group, topic, q) for q in range(queues)]
    if all(o == NO_CONSUMER_OFFSET for o in offsets):
        return None
    stats: list[QueueStats] = []
    for queue_id, committed in enumerate(offsets):
        _, high = await produce.query_offsets(topic, queue_id)
        consumer = max(0, committed)
        last = 0
        if consumer > 0:
            last = await produce.store_timestamp_at(topic, queue_id, consumer - 1) or 0
        stats.append(QueueStats(topic, queue_id, high, consumer, last))
    return stats


class AdminQueries:
    """Handlers of QUERY_MESSAGE, GET_CONSUME_STATS, GET_TOPIC_CONFIG and
    GET_CONSUMER_CONNECTION_LIST; `RemotingFront` serves them."""

    def __init__(
        self,
        produce: AdminReads,
        *,
        broker_name: str,
        topics: Callable[[], Mapping[str, int]],
        consumers: ConsumerGroups,
        clock_ms: Callable[[], int],
        key_query_budget_bytes: int,
        stats: BrokerStats | None = None,
    ) -> None:
        self._produce = produce
        self._broker_name = broker_name
        self._topics = topics
        self._consumers = consumers
        self._clock_ms = clock_ms
        self._budget = key_query_budget_bytes
        self._stats = stats

    async def query_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """QUERY_MESSAGE: the topic's records whose KEYS or UNIQ_KEY is `key`, as stored."""
        query = key_query(cmd.fields())
        queues = self._topics().get(query.topic, 0)
        result = await run_key_query(self._produce, query, queues, budget_bytes=self._budget)
        header = {
            "indexLastUpdateTimestamp": str(result.last_timestamp_ms),
            "indexLastUpdatePhyoffset": str(result.last_physical_offset),
        }
        if not result.records:
            return response_to(
                cmd,
                ResponseCode.QUERY_NOT_FOUND,
                "can not find message, maybe time range not correct"
                + (" (the query's scan budget ran out)" if result.exhausted_budget else ""),
                header,
            )
        return response_to(cmd, ResponseCode.SUCCESS, None, header, b"".join(result.records))

    async def consume_stats(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_CONSUME_STATS: per queue of the group's topics (the asked one, or every topic
        the group has an offset in, as ConsumerOffsetManager.whichTopicByConsumer), the
        queue's max offset, the group's offset and the store time of its last consumed
        record (AdminBrokerProcessor.getConsumeStats)."""
        fields = cmd.fields()
        group = names.group_name(fields, "consumerGroup")
        asked = names.optional_topic_name(fields, "topic")
        topics = self._topics()
        stats: list[QueueStats] = []
        consume_tps = 0.0
        for topic in [asked] if asked else sorted(topics):
            found = await queue_stats(self._produce, group, topic, topics.get(topic, 0))
            if found is None and not asked:
                continue
            stats += found or [
                QueueStats(topic, q, (await self._produce.query_offsets(topic, q))[1], 0, 0)
                for q in range(topics.get(topic, 0))
            ]
            consume_tps += group_get_tps(self._stats, group, topic)
        body = consume_stats_body(self._broker_name, stats, consume_tps)
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body)

    async def topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_TOPIC_CONFIG: TopicConfigAndQueueMapping (no static-topic mapping here)."""
        topic = names.topic_name(cmd.fields(), "topic")
        queues = self._topics().get(topic)
        if queues is None:
            return response_to(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}"
            )
        body = {**wire.topic_config(topic, queues), "mappingDetail": None}
        return response_to(cmd, ResponseCode.SUCCESS, None, None, json_text(body).encode())

    async def consumer_connections(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_CONSUMER_CONNECTION_LIST: the group's live clients (Connection each) and the
        consumer data of the group's latest heartbeat (its subscriptions by topic)."""
        group = names.group_name(cmd.fields(), "consumerGroup")
        members = self._consumers.member_infos(group, self._clock_ms())
        if not members:
            return response_to(
                cmd, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        data = self._consumers.consumer_data.get(group)
        subscriptions = () if data is None else data.subscriptions
        head = json_text({
            "connectionSet": [connection_json(m, info) for m, info in members],
            "consumeFromWhere": None if data is None else data.consume_from_where,
            "consumeType": None if data is None else data.consume_type,
            "messageModel": None if data is None else data.message_model,
        })  # fmt: skip
        # The subscriptions are kept as their JSON text; spliced in as they are.
        table = ",".join(f"{json_text(topic)}:{text}" for topic, text in subscriptions)
        body = head[:-1] + ',"subscriptionTable":{' + table + "}}"
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body.encode("utf-8"))
