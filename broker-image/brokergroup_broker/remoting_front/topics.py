"""The topics the broker's remoting port serves: `DeclaredTopics`, the topics that exist
before their first record, and `TopicAdmin`, the admin codes that declare and list them
(UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG) with VIEW_MESSAGE_BY_ID, the admin read of
one record by its commit log offset.

A topic is served when the store holds a record of it or when it was declared: by
UPDATE_AND_CREATE_TOPIC, or as the retry topic of a clustering consumer group that
heartbeats here (RocketMQ creates it on heartbeat too). Declarations are kept in memory and
bounded (`MAX_DECLARED_TOPICS`, docs/security.md "Client state"): past the bound a new one
is refused, and the sends part drops a declaration once the topic's first record is stored.
Every change to the served topics is announced through `on_new_topic` (the broker registers
with the name servers again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from brokergroup_broker.remoting_front import wire
from brokergroup_broker.store.message import StoredMessage
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

#: Topics declared before their first record (UPDATE_AND_CREATE_TOPIC's, consumer groups'
#: retry topics); docs/security.md "Client state".
MAX_DECLARED_TOPICS = 10_000


class StoredTopics(Protocol):
    """What the table reads of the produce path (`front.ProduceAndPull` has it)."""

    def topic_queue_counts(self) -> dict[str, int]: ...

    def holds_topic(self, topic: str) -> bool: ...

    async def topic_queue_count(self, topic: str) -> int: ...


class DeclaredTopics:
    """Topics declared before their first record, name → queue count, at most `max_topics`
    (MAX_DECLARED_TOPICS when the table is made); with the store's, what the port serves."""

    def __init__(
        self,
        produce: StoredTopics,
        *,
        default_queue_nums: int,
        on_new_topic: Callable[[str], None],
        max_topics: int | None = None,
    ) -> None:
        self._produce = produce
        self._default_queue_nums = default_queue_nums
        self._on_new_topic = on_new_topic
        self.max_topics = MAX_DECLARED_TOPICS if max_topics is None else max_topics
        self._declared: dict[str, int] = {}

    def served(self) -> dict[str, int]:
        """Every topic this broker serves: declared ones and the store's."""
        return {**self._declared, **self._produce.topic_queue_counts()}

    def known(self, topic: str) -> bool:
        """`topic in self.served()` without building it: every send asks, and a broker may
        serve thousands of topics."""
        return topic in self._declared or self._produce.holds_topic(topic)

    def declare(self, topic: str, queues: int) -> bool:
        """Make `topic` routable before its first record; False when `max_topics` topics
        already wait for theirs."""
        if self.known(topic):
            return True
        if len(self._declared) >= self.max_topics:
            return False
        self._declared[topic] = queues
        self._on_new_topic(topic)
        return True

    def undeclare(self, topic: str) -> None:
        """Drop `topic`'s declaration (its first record is stored: the store serves it)."""
        self._declared.pop(topic, None)

    def first_stored(self, topic: str) -> None:
        """A send stored the first record of `topic`, unknown when it was asked."""
        self._on_new_topic(topic)

    async def queue_count(self, topic: str) -> int:
        """Queues of `topic` as the routes announce them (0: not a topic of this broker)."""
        declared = self._declared.get(topic)
        if declared is not None:
            return declared
        if not self._produce.holds_topic(topic):
            return 0
        count = await self._produce.topic_queue_count(topic)
        return max(count, self._default_queue_nums)


class MessageAt(Protocol):
    """The record read VIEW_MESSAGE_BY_ID makes (`front.ProduceAndPull` has it)."""

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...


class TopicAdmin:
    """Handlers of UPDATE_AND_CREATE_TOPIC, GET_ALL_TOPIC_CONFIG and VIEW_MESSAGE_BY_ID."""

    def __init__(
        self, produce: MessageAt, topics: DeclaredTopics, *, default_queue_nums: int
    ) -> None:
        self._produce = produce
        self._topics = topics
        self._default_queue_nums = default_queue_nums

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
        """GET_ALL_TOPIC_CONFIG: TopicConfigSerializeWrapper of every topic served here."""
        table = {
            name: wire.topic_config(name, queues)
            for name, queues in sorted(self._topics.served().items())
        }
        body = {
            "topicConfigTable": table,
            "dataVersion": {"stateVersion": 0, "timestamp": 0, "counter": 0},
        }
        return response_to(cmd, ResponseCode.SUCCESS, None, None, json_body(body))

    async def create_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: the topic is routable at once and stored on its first send.
        An admin request: the port's authorization (core/remoting_keys.py) lets only the
        group's broker pair make it."""
        fields = cmd.fields()
        topic = names.topic_name(fields, "topic")
        wanted = header.optional_int32(fields, "writeQueueNums", 0, low=0, high=1024)
        queues = max(1, min(wanted or self._default_queue_nums, self._default_queue_nums))
        if not self._topics.declare(topic, queues):
            return response_to(
                cmd,
                ResponseCode.SYSTEM_BUSY,
                f"{self._topics.max_topics} topics already wait for their first record on this "
                f"broker (MAX_DECLARED_TOPICS); send to one of them first",
            )
        return response_to(cmd, ResponseCode.SUCCESS)
