"""The consumer codes of the broker's remoting port: HEART_BEAT, UNREGISTER_CLIENT,
GET_CONSUMER_LIST_BY_GROUP, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ, QUERY_CONSUMER_OFFSET and
UPDATE_CONSUMER_OFFSET.

`Consumers` owns the consumer and producer groups, the queue locks and the pending offset
resets (`clients`, pure), the watch of each client connection's close
(ClientHousekeepingService: a closed connection's members are forgotten; the live
connections by key, so a request can be forwarded to a client: client_calls.py) and the
`GroupNotifier` that tells a clustering group's members to rebalance when its membership
changes. A heartbeat records its producer groups (ProducerManager) and each consumer
group's consumer data (consume type, message model, consume-from-where, subscriptions:
ConsumerGroupInfo) besides the members. It is also the one place a consumer offset is
checked before it is committed (`commit_offset`): UPDATE_CONSUMER_OFFSET and a pull's commit
flag both go through it (docs/security.md "Client state"), and neither moves a queue whose
offset a reset assigned until the queue's next pull was told (offset_reset.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from brokergroup_broker.protocol.messages import NO_CONSUMER_OFFSET
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.clients import (
    ClientInfo,
    ConsumerData,
    ConsumerGroups,
    PendingResets,
    ProducerGroups,
    QueueLocks,
)
from brokergroup_broker.remoting_front.group_notify import GroupNotifier
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import decode_json_object, json_body, json_text
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import BadField, RequestRefused
from brokergroup_remoting.net import Connection

_MAX_HEARTBEAT_GROUPS = 1024
#: Subscriptions of one consumer group in one heartbeat, and the bounds of one
#: subscription's expression and tags (a client's subscriptions are a handful of topics).
MAX_SUBSCRIPTIONS = 1024
MAX_EXPRESSION_CHARS = 4096
MAX_TAGS = 1024
#: The enums of ConsumerData, by name (fastjson writes an enum as its name).
CONSUME_TYPES = frozenset({"CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP"})
MESSAGE_MODELS = frozenset({"BROADCASTING", "CLUSTERING"})
CONSUME_FROM_WHERE = frozenset({
    "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
})  # fmt: skip


class OffsetStore(Protocol):
    """What the consumers read and write of the produce path (`front.ProduceAndPull`
    has it)."""

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None: ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...


class Consumers:
    """Handlers of the consumer codes; `groups` and `locks` are the tables they keep."""

    def __init__(
        self, produce: OffsetStore, topics: DeclaredTopics, *, clock_ms: Callable[[], int]
    ) -> None:
        self._produce = produce
        self._topics = topics
        self._clock_ms = clock_ms
        self.groups = ConsumerGroups()
        self.producers = ProducerGroups()
        self.locks = QueueLocks()
        self.resets = PendingResets()
        self._notifier = GroupNotifier()
        #: The connections whose close is watched (`_watch`), by the key the tables keep.
        self._watched: dict[int, Connection] = {}

    def connection(self, key: int) -> Connection | None:
        """The open client connection the tables know by `key`, or None."""
        conn = self._watched.get(key)
        return None if conn is None or conn.closed else conn

    async def heart_beat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "HeartbeatData")
        client_id = data.get("clientID")
        if not isinstance(client_id, str) or not client_id:
            raise BadField("HeartbeatData has no clientID")
        if len(client_id) > header.MAX_TEXT_BYTES:
            raise BadField(f"HeartbeatData's clientID is over {header.MAX_TEXT_BYTES} characters")
        consumers = data.get("consumerDataSet") or []
        if not isinstance(consumers, list) or len(consumers) > _MAX_HEARTBEAT_GROUPS:
            raise BadField("HeartbeatData's consumerDataSet is not a list of groups")
        producers = data.get("producerDataSet") or []
        if not isinstance(producers, list) or len(producers) > _MAX_HEARTBEAT_GROUPS:
            raise BadField("HeartbeatData's producerDataSet is not a list of groups")
        # Every name and description is checked before any member is recorded.
        groups = [
            names.check_group(
                consumer.get("groupName") if isinstance(consumer, dict) else None,
                "a consumer's groupName in HeartbeatData",
            )
            for consumer in consumers
        ]
        described = [consumer_data_of(consumer) for consumer in consumers]
        producer_groups = [_producer_group(producer) for producer in producers]
        now = self._clock_ms()
        info = ClientInfo(conn.peer, cmd.language.name, cmd.version)
        if consumers or producers:
            self._watch(conn)
        for group in producer_groups:
            busy = self.producers.refusal(group, client_id, id(conn), now)
            if busy is not None:
                return response_to(cmd, ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {busy}")
            self.producers.heartbeat(group, client_id, id(conn), now, info)
        for consumer, group, description in zip(consumers, groups, described, strict=True):
            joins = self.groups.joins(group, client_id, id(conn))
            busy = self.groups.refusal(group, client_id, id(conn), now) or (
                self.groups.data_refusal(group, description)
            )
            if busy is not None:
                return response_to(cmd, ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {busy}")
            self.groups.heartbeat(group, client_id, id(conn), now, info)
            self.groups.describe(group, description)
            clustering = consumer.get("messageModel", "CLUSTERING") == "CLUSTERING"
            if joins and clustering:  # the group rebalances now (group_notify.py)
                self._notifier.notify(group, self.groups.connections(group))
            # A clustering consumer also consumes its group's retry topic: make it routable
            # (RocketMQ creates it on heartbeat too).
            # Over MAX_DECLARED_TOPICS it is routable from its first send-back instead.
            if clustering:
                self._topics.declare(names.retry_topic(group), 1)
        # The client records the answer's version as the broker's (MQClientAPIImpl): answer
        # with its own, so no version-gated path takes this broker for an older one.
        return response_to(
            cmd, ResponseCode.SUCCESS, None, {"isSupportHeartBeatV2": "false"}, version=cmd.version
        )

    def _watch(self, conn: Connection) -> None:
        """Forget a connection's consumers when it closes (ClientHousekeepingService)."""
        key = id(conn)
        if key in self._watched:
            return
        self._watched[key] = conn
        self._notifier.track(conn)

        def forget() -> None:
            self._watched.pop(key, None)
            self._notifier.forget(key)
            self.producers.drop_connection(key)
            for group in self.groups.drop_connection(key):
                self._notifier.notify(group, self.groups.connections(group))

        conn.on_close(forget)

    async def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        client_id = header.text(fields, "clientID")
        group = names.optional_group_name(fields, "consumerGroup")
        producer_group = fields.get("producerGroup")
        if group is not None and self.groups.unregister(group, client_id):
            self._notifier.notify(group, self.groups.connections(group))
        if producer_group:
            self.producers.unregister(producer_group, client_id)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def get_consumer_list(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        group = names.group_name(cmd.fields(), "consumerGroup")
        members = self.groups.members(group, self._clock_ms())
        if not members:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}"
            )
        return response_to(
            cmd, ResponseCode.SUCCESS, None, None, json_body({"consumerIdList": members})
        )

    async def lock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "LockBatchRequestBody")
        group, client_id, queues = _lock_body(data)
        held = self.locks.lock([(group, *q) for q in queues], client_id, self._clock_ms())
        ok = [{"topic": t, "brokerName": b, "queueId": i} for _, t, b, i in held]
        return response_to(cmd, ResponseCode.SUCCESS, None, None, json_body({"lockOKMQSet": ok}))

    async def unlock_batch(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        data = decode_json_object(cmd.body, "UnlockBatchRequestBody")
        group, client_id, queues = _lock_body(data)
        self.locks.unlock([(group, *q) for q in queues], client_id)
        return response_to(cmd, ResponseCode.SUCCESS)

    # ------------------------------------------------------------------ consumer offsets

    async def query_consumer_offset(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        fields = cmd.fields()
        ref = wire.queue_ref(fields, group="consumerGroup")
        assert ref.group is not None
        offset = await self._produce.query_consumer_offset(ref.group, ref.topic, ref.queue_id)
        if offset != NO_CONSUMER_OFFSET:
            return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(offset)})
        # ConsumerManageProcessor: a new group starts at 0 while the queue still begins at 0.
        low, _ = await self._produce.query_offsets(ref.topic, ref.queue_id)
        if fields.get("setZeroIfNotFound", "true").lower() != "false" and low == 0:
            return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": "0"})
        return response_to(
            cmd, ResponseCode.QUERY_NOT_FOUND, "Not found, maybe this group consumer boot first"
        )

    async def update_consumer_offset(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        fields = cmd.fields()
        ref = wire.queue_ref(fields, group="consumerGroup")
        assert ref.group is not None
        offset = header.int64(fields, "commitOffset", low=0, high=header.INT64_MAX)
        if self._reset_pending(ref.group, ref.topic, ref.queue_id):
            # ConsumerManageProcessor: the consumer's offset predates the reset; ignored.
            return response_to(cmd, ResponseCode.SUCCESS, "Offset has been previously reset")
        await self.commit_offset(ref.group, ref.topic, ref.queue_id, offset)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a consumer offset once `_offset_refusal` allows it (RequestRefused if not).
        Nothing is committed while a reset of that queue waits for its next pull: the
        consumer does not know of the reset yet, and its offset would undo it."""
        if self._reset_pending(group, topic, queue_id):
            return
        refusal = await self._offset_refusal(group, topic, queue_id, offset)
        if refusal is not None:
            raise refusal
        await self._produce.commit_consumer_offset(group, topic, queue_id, offset)

    def _reset_pending(self, group: str, topic: str, queue_id: int) -> bool:
        return self.resets.pending(group, topic, queue_id, self._clock_ms()) is not None

    async def _offset_refusal(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> RequestRefused | None:
        """Why a consumer offset may not be committed here (None: it may): only for a known
        group (one whose consumer heartbeat this broker heard, as RocketMQ creates a
        group's subscription config at its heartbeat: a stock client persists its offsets
        right after it unregisters; or one this broker already holds an offset of for this
        very queue, e.g. replicated before a failover), a topic this broker serves, a queue
        the topic has and an offset within the queue (docs/security.md "Client state")."""
        if not self.groups.known(group):
            held = await self._produce.query_consumer_offset(group, topic, queue_id)
            if held == NO_CONSUMER_OFFSET:
                return RequestRefused(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                    f"Group {group} not exist! (no consumer of it heartbeats to this broker)",
                )
        queues = await self._topics.queue_count(topic)
        if queues == 0:
            return RequestRefused(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} not exist!")
        if queue_id >= queues:
            return RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"queueId {queue_id} is illegal: topic {topic} has {queues} queues",
            )
        _, max_offset = await self._produce.query_offsets(topic, queue_id)
        if offset > max_offset:
            return RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"offset {offset} is beyond the max offset {max_offset} of {topic}:{queue_id}",
            )
        return None

    async def close(self) -> None:
        """Stop the group notifications in flight."""
        await self._notifier.close()


def _lock_body(data: dict[str, object]) -> tuple[str, str, list[tuple[str, str, int]]]:
    """LockBatchRequestBody / UnlockBatchRequestBody: group, clientId, mqSet."""
    group = names.check_group(data.get("consumerGroup"), "a lock request's consumerGroup")
    client_id, mq_set = data.get("clientId"), data.get("mqSet")
    if not isinstance(client_id, str) or not 0 < len(client_id) <= header.MAX_TEXT_BYTES:
        raise BadField("a lock request needs a clientId")
    if not isinstance(mq_set, list) or len(mq_set) > 10_000:
        raise BadField("a lock request's mqSet is not a list of queues")
    queues: list[tuple[str, str, int]] = []
    for mq in mq_set:
        topic = mq.get("topic") if isinstance(mq, dict) else None
        broker = mq.get("brokerName") if isinstance(mq, dict) else None
        queue_id = mq.get("queueId") if isinstance(mq, dict) else None
        if not (
            isinstance(broker, str)
            and 0 < len(broker) <= header.MAX_TEXT_BYTES
            and type(queue_id) is int
            and 0 <= queue_id <= header.INT32_MAX
        ):
            raise BadField("a queue in mqSet needs topic, brokerName and queueId")
        queues.append((names.check_topic(topic, "a queue's topic in mqSet"), broker, queue_id))
    return group, client_id, queues


def _producer_group(producer: object) -> str:
    """A ProducerData's groupName (RocketMQ's group rule: up to 255 characters)."""
    group = producer.get("groupName") if isinstance(producer, dict) else None
    if not isinstance(group, str):
        raise BadField("a producer's groupName in HeartbeatData is missing")
    error = names.producer_group_error(group)
    if error is not None:
        raise BadField(f"a producer's groupName in HeartbeatData: {error}")
    return group


def _enum(data: dict[str, object], name: str, allowed: frozenset[str]) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or value not in allowed:
        raise BadField(f"a consumer's {name} in HeartbeatData is not one of {sorted(allowed)}")
    return value


def consumer_data_of(consumer: object) -> ConsumerData:
    """A heartbeat's ConsumerData as the broker keeps it: the enums checked by name, and
    each SubscriptionData's fields checked and written again as RocketMQ's JSON (the
    fields SubscriptionData serializes, nothing else the client sent)."""
    if not isinstance(consumer, dict):
        raise BadField("a consumer in HeartbeatData is not an object")
    subs = consumer.get("subscriptionDataSet") or []
    if not isinstance(subs, list) or len(subs) > MAX_SUBSCRIPTIONS:
        raise BadField(
            f"a consumer's subscriptionDataSet is not a list of at most {MAX_SUBSCRIPTIONS}"
        )
    table = {}
    for sub in subs:
        topic, text = _subscription(sub)
        table[topic] = text
    return ConsumerData(
        consume_type=_enum(consumer, "consumeType", CONSUME_TYPES),
        message_model=_enum(consumer, "messageModel", MESSAGE_MODELS),
        consume_from_where=_enum(consumer, "consumeFromWhere", CONSUME_FROM_WHERE),
        subscriptions=tuple(sorted(table.items())),
    )


def _subscription(sub: object) -> tuple[str, str]:
    if not isinstance(sub, dict):
        raise BadField("a subscription in HeartbeatData is not an object")
    topic = names.check_topic(sub.get("topic"), "a subscription's topic in HeartbeatData")
    expression = sub.get("subString")
    if expression is not None and (
        not isinstance(expression, str) or len(expression) > MAX_EXPRESSION_CHARS
    ):
        raise BadField(
            f"a subscription's subString is not text of at most {MAX_EXPRESSION_CHARS} characters"
        )
    tags, codes = sub.get("tagsSet") or [], sub.get("codeSet") or []
    if not (
        isinstance(tags, list)
        and len(tags) <= MAX_TAGS
        and all(isinstance(t, str) and len(t) <= header.MAX_TEXT_BYTES for t in tags)
    ):
        raise BadField(f"a subscription's tagsSet is not a list of at most {MAX_TAGS} tags")
    if not (
        isinstance(codes, list)
        and len(codes) <= MAX_TAGS
        and all(type(c) is int and header.INT32_MIN <= c <= header.INT32_MAX for c in codes)
    ):
        raise BadField(f"a subscription's codeSet is not a list of at most {MAX_TAGS} ints")
    version = sub.get("subVersion", 0)
    kind = sub.get("expressionType", "TAG")
    filter_mode = sub.get("classFilterMode", False)
    if type(version) is not int or not header.INT64_MIN <= version <= header.INT64_MAX:
        raise BadField("a subscription's subVersion is not a long")
    if not isinstance(kind, str) or not 0 < len(kind) <= 32:
        raise BadField("a subscription's expressionType is not a name")
    if not isinstance(filter_mode, bool):
        raise BadField("a subscription's classFilterMode is not a boolean")
    return topic, json_text({
        "classFilterMode": filter_mode, "codeSet": codes, "expressionType": kind,
        "subString": expression, "subVersion": version, "tagsSet": tags, "topic": topic,
    })  # fmt: skip
