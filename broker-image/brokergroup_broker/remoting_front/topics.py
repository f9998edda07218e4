"""The topics the broker's remoting port serves: `DeclaredTopics`, the topic table sends and
consumers read (over the broker's `BrokerMetadata`, metadata/), and `TopicAdmin`, the admin
codes that create, list and delete topics (UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG,
DELETE_TOPIC_IN_BROKER) with VIEW_MESSAGE_BY_ID, the admin read of one record by its commit
log offset.

A topic is served when the metadata's topic table holds its config: created by
UPDATE_AND_CREATE_TOPIC, by the first send to it (autoCreateTopicEnable, a group's retry
and DLQ topics), as the retry topic of a clustering consumer group that heartbeats here
(RocketMQ creates it on heartbeat too), or adopted from the store by a new master
(metadata/tables.py). Each is written durably before the request that made it is answered
and replicated to the slaves (core/peer_metadata.py), so a failover before the topic's first
record keeps it. The table is bounded (the broker's maxTopics; MAX_DECLARED_TOPICS for a
front end made without a broker's metadata): past the bound a new topic is refused.
Every new topic is announced through `on_new_topic` (the broker registers with the name
servers again), every deleted one through `on_topic_deleted` (the broker takes it out of
the name servers' routes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from brokergroup_broker.metadata import (
    PERM_READ,
    PERM_WRITE,
    BadMetadata,
    BrokerMetadata,
    MetadataBounds,
    MetadataError,
    MetadataFull,
    TopicConfig,
)
from brokergroup_broker.metadata.attributes import TOPIC_ATTRIBUTES, alter, parse_modification
from brokergroup_broker.store.message import StoredMessage
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

log = logging.getLogger(__name__)

#: Topics the table of a front end made without the broker's metadata holds (tests); the
#: broker's own table is bounded by its maxTopics (docs/security.md "Client state").
MAX_DECLARED_TOPICS = 10_000
#: TopicValidator.RMQ_SYS_TRACE_TOPIC: where clients with enableMsgTrace write their traces
#: (the broker's msgTraceTopicName by default).
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class StoredTopics(Protocol):
    """What the table reads of the produce path (`front.ProduceAndPull` has it)."""

    def topic_queue_counts(self) -> dict[str, int]: ...

    def holds_topic(self, topic: str) -> bool: ...

    async def topic_queue_count(self, topic: str) -> int: ...


class DeclaredTopics:
    """The topics this broker serves: the configs of `metadata`'s topic table, and the
    store's topics that have none and were not deleted (records another front end stored,
    or replicated before their config: served with a default config until a new master
    adopts them into the table)."""

    def __init__(
        self,
        produce: StoredTopics,
        *,
        default_queue_nums: int,
        on_new_topic: Callable[[str], None],
        metadata: BrokerMetadata | None = None,
        wall_ms: Callable[[], int] = _wall_ms,
        system: Mapping[str, TopicConfig] | None = None,
    ) -> None:
        """`system`: topics served from the start without a config in the table (the reply
        and trace topics, as RocketMQ's TopicConfigManager makes them in memory at every
        start); a config the table holds for one (mqadmin updateTopic) takes its place."""
        self._system = dict(system or {})
        self._produce = produce
        self._default_queue_nums = default_queue_nums
        self._on_new_topic = on_new_topic
        if metadata is None:
            metadata = BrokerMetadata(None, bounds=MetadataBounds(topics=MAX_DECLARED_TOPICS))
        self.metadata = metadata
        self._wall_ms = wall_ms

    @property
    def max_topics(self) -> int:
        return self.metadata.bounds.topics

    def configs(self) -> dict[str, TopicConfig]:
        """Every topic this broker serves, with its config."""
        table = self.metadata.topics
        unbounded = MetadataBounds(topics=len(table) + MAX_DECLARED_TOPICS)
        served = dict(table.adopt(self._produce.topic_queue_counts(), 0, unbounded).entries)
        served.update((n, c) for n, c in self._system.items() if n not in table)
        return served

    def served(self) -> dict[str, int]:
        """Every topic this broker serves, with its queue count."""
        return {name: config.queue_count for name, config in self.configs().items()}

    def known(self, topic: str) -> bool:
        """`topic in self.served()` without building it: every send asks."""
        table = self.metadata.topics
        return (
            topic in table
            or topic in self._system
            or (topic not in table.deleted and self._produce.holds_topic(topic))
        )

    def config(self, topic: str) -> TopicConfig | None:
        return self.metadata.topics.get(topic) or self._system.get(topic)

    def declare(self, topic: str, queues: int) -> bool:
        """Give `topic` a read-write config of `queues` queues unless it has one;
        False when it cannot be (the table is full, or the write failed: logged)."""
        if topic in self.metadata.topics or topic in self._system:
            return True
        try:
            self.metadata.put_topic(
                TopicConfig(topic, queues, queues, PERM_READ | PERM_WRITE), self._wall_ms()
            )
        except MetadataError as exc:
            log.warning("topic %s not created: %s", topic, exc)
            return False
        self.announce(topic)
        return True

    def announce(self, topic: str) -> None:
        """A topic was created (the name servers must learn it before its next send)."""
        self._on_new_topic(topic)

    def stored_first(self, topic: str) -> None:
        """A send stored the first record of `topic` (autoCreateTopicEnable, a group's
        topic): its config is written now, before the send is answered. Were the table full
        or the write failed, the topic is still served from the store (logged)."""
        grouped = topic.startswith((names.RETRY_GROUP_TOPIC_PREFIX, names.DLQ_GROUP_TOPIC_PREFIX))
        queues = 1 if grouped else self._default_queue_nums
        if not self.declare(topic, queues):
            self.announce(topic)

    async def queue_count(self, topic: str) -> int:
        """Queues of `topic` as the routes announce them (0: not a topic of this broker)."""
        config = self.config(topic)
        if config is not None:
            return config.queue_count
        if not self.known(topic):
            return 0
        count = await self._produce.topic_queue_count(topic)
        return max(count, self._default_queue_nums)


class MessageAt(Protocol):
    """The record read VIEW_MESSAGE_BY_ID makes (`front.ProduceAndPull` has it)."""

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...


class TopicAdmin:
    """Handlers of UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG, DELETE_TOPIC_IN_BROKER
    and VIEW_MESSAGE_BY_ID."""

    def __init__(
        self,
        produce: MessageAt,
        topics: DeclaredTopics,
        *,
        default_queue_nums: int,
        on_topic_deleted: Callable[[str], None] = lambda _topic: None,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._produce = produce
        self._topics = topics
        self._metadata = topics.metadata
        self._default_queue_nums = default_queue_nums
        self._on_topic_deleted = on_topic_deleted
        self._wall_ms = wall_ms

    async def view_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """VIEW_MESSAGE_BY_ID: the record at the commit log `offset`, exactly as stored."""
        offset = header.int64(cmd.fields(), "offset", low=0, high=header.INT64_MAX)
        found = await self._produce.message_at(offset)
        if found is None:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}"
            )
        return response_to(cmd, ResponseCode.SUCCESS, None, None, found[1])

    async def all_topic_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG: TopicConfigAndMappingSerializeWrapper of every topic served
        here, with the table's DataVersion (no static topics: the mapping parts are empty)."""
        configs = self._topics.configs()
        body = {
            "dataVersion": self._metadata.topics.version.to_json(),
            "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 0},
            "topicConfigTable": {n: c.to_json() for n, c in sorted(configs.items())},
            "topicQueueMappingDetailMap": {},
        }
        return response_to(
            cmd, ResponseCode.SUCCESS, None, {"totalTopicNum": str(len(configs))}, json_body(body)
        )

    async def create_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC (CreateTopicRequestHeader): the config is written durably
        and replicated, then the topic is routable; sends spread over its writeQueueNums
        (1..1024, RocketMQ's bound; 0 or absent: defaultTopicQueueNums). An admin
        request: the port's authorization (core/remoting_keys.py) lets only the group's
        broker pair make it."""
        fields = cmd.fields()
        topic = names.topic_name(fields, "topic")
        held = self._metadata.topics.get(topic)
        try:
            config = TopicConfig(
                topic,
                self._queues(fields, "readQueueNums"),
                self._queues(fields, "writeQueueNums"),
                header.optional_int32(fields, "perm", PERM_READ | PERM_WRITE, low=0, high=0xF),
                fields.get("topicFilterType") or "SINGLE_TAG",
                header.optional_int32(fields, "topicSysFlag", 0, low=0),
                (header.optional_boolean(fields, "order") or False),
                alter(
                    {} if held is None else held.attributes,
                    parse_modification(fields.get("attributes")),
                    create=held is None,
                    rules=TOPIC_ATTRIBUTES,
                ),
            )
            created = self._metadata.put_topic(config, self._wall_ms())
        except BadMetadata as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        except MetadataFull as exc:
            return response_to(cmd, ResponseCode.SYSTEM_BUSY, str(exc))
        except MetadataError as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"topic {topic} not saved: {exc}")
        if created:
            self._topics.announce(topic)
        return response_to(cmd, ResponseCode.SUCCESS)

    def _queues(self, fields: dict[str, str], name: str) -> int:
        return header.optional_int32(fields, name, 0, low=0, high=1024) or self._default_queue_nums

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """DELETE_TOPIC_IN_BROKER (DeleteTopicRequestHeader): the topic's config is deleted
        (durably, replicated) and the name servers stop routing it. Its records stay in the
        commit log until retention and its queues keep their offsets, so a topic created
        again continues them (docs/rocketmq-compatibility.md)."""
        topic = names.topic_name(cmd.fields(), "topic")
        try:
            self._metadata.delete_topic(topic, self._wall_ms())
        except MetadataError as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"topic {topic} not deleted: {exc}")
        self._on_topic_deleted(topic)
        return response_to(cmd, ResponseCode.SUCCESS)
