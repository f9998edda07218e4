"""The broker port's read-only admin and query codes: QUERY_MESSAGE (`key_query`),
GET_CONSUME_STATS and GET_TOPIC_CONFIG (what `mqadmin consumerProgress` calls besides the
name server), GET_CONSUMER_CONNECTION_LIST.

Bodies are RocketMQ 5.3's JSON (fastjson's field names): ConsumeStats
(`offsetTable` keyed by MessageQueue objects, as fastjson writes a map with object keys;
`consumeTps`), OffsetWrapper (brokerOffset, consumerOffset, pullOffset, lastTimestamp),
TopicConfigAndQueueMapping (a TopicConfig with `mappingDetail` null: no static topics),
ConsumerConnection. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.protocol.messages import NO_CONSUMER_OFFSET
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.key_query import RecordSource, key_query, run_key_query
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting.body import json_text
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

from .clients import ConsumerGroups


@dataclass(frozen=True)
class QueueStats:
    """OffsetWrapper of one queue."""

    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp_ms: int


def consume_stats_body(broker_name: str, stats: list[QueueStats], consume_tps: float) -> bytes:
    """ConsumeStats as fastjson writes it: `offsetTable` is a map whose keys are MessageQueue
    objects, so each key is itself a JSON object (not valid JSON for most parsers, but what
    the stock client's ConsumeStats.decode reads). The pull offset is the consumer offset:
    this broker keeps no separate pull offsets."""
    entries = []
    for s in stats:
        key = {"brokerName": broker_name, "queueId": s.queue_id, "topic": s.topic}
        value = {
            "brokerOffset": s.broker_offset,
            "consumerOffset": s.consumer_offset,
            "lastTimestamp": s.last_timestamp_ms,
            "pullOffset": s.consumer_offset,
        }
        entries.append(f"{json_text(key)}:{json_text(value)}")
    return ('{"consumeTps":' + repr(float(consume_tps)) + ',"offsetTable":{'
            + ",".join(entries) + "}}").encode("utf-8")  # fmt: skip


class AdminReads(RecordSource, Protocol):
    """What these handlers read of the produce path (`front.ProduceAndPull` has it all)."""

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...


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
    ) -> None:
        self._produce = produce
        self._broker_name = broker_name
        self._topics = topics
        self._consumers = consumers
        self._clock_ms = clock_ms
        self._budget = key_query_budget_bytes

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
        for topic in [asked] if asked else sorted(topics):
            queues = topics.get(topic, 0)
            offsets = [
                await self._produce.query_consumer_offset(group, topic, q) for q in range(queues)
            ]
            if not asked and all(o == NO_CONSUMER_OFFSET for o in offsets):
                continue
            for queue_id, committed in enumerate(offsets):
                _, high = await self._produce.query_offsets(topic, queue_id)
                consumer = max(0, committed)
                last = 0
                if consumer > 0:
                    last = (
                        await self._produce.store_timestamp_at(topic, queue_id, consumer - 1) or 0
                    )
                stats.append(QueueStats(topic, queue_id, high, consumer, last))
        body = consume_stats_body(self._broker_name, stats, 0.0)
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
        """GET_CONSUMER_CONNECTION_LIST: the group's live clients. The heartbeat's
        subscriptions are not kept, so subscriptionTable is empty and the consume type and
        message model are the push consumer's defaults."""
        group = names.group_name(cmd.fields(), "consumerGroup")
        members = self._consumers.members(group, self._clock_ms())
        if not members:
            return response_to(
                cmd, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online"
            )
        body = {
            "connectionSet": [
                {"clientId": m, "clientAddr": "", "language": "JAVA", "version": 0} for m in members
            ],
            "subscriptionTable": {},
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
        }
        return response_to(cmd, ResponseCode.SUCCESS, None, None, json_text(body).encode())
