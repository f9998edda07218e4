"""The consumer codes of the broker's remoting port: HEART_BEAT, UNREGISTER_CLIENT,
GET_CONSUMER_LIST_BY_GROUP, LOCK_BATCH_MQ, UNLOCK_BATCH_MQ, QUERY_CONSUMER_OFFSET and
UPDATE_CONSUMER_OFFSET.

`Consumers` owns the consumer groups and queue locks (`clients`, pure), the watch of each
consumer connection's close (ClientHousekeepingService: a closed connection's members are
forgotten) and the `GroupNotifier` that tells a clustering group's members to rebalance
when its membership changes. It is also the one place a consumer offset is checked before
it is committed (`commit_offset`): UPDATE_CONSUMER_OFFSET and a pull's commit flag both go
through it (docs/security.md "Client state").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from brokergroup_broker.protocol.messages import NO_CONSUMER_OFFSET
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.clients import ConsumerGroups, QueueLocks
from brokergroup_broker.remoting_front.group_notify import GroupNotifier
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import decode_json_object, json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import BadField, RequestRefused
from brokergroup_remoting.net import Connection

_MAX_HEARTBEAT_GROUPS = 1024


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
        self.locks = QueueLocks()
        self._notifier = GroupNotifier()
        #: Keys of the connections whose close is watched (`_watch`).
        self._watched: set[int] = set()

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
        # Every name is checked before any member is recorded.
        groups = [
            names.check_group(
                consumer.get("groupName") if isinstance(consumer, dict) else None,
                "a consumer's groupName in HeartbeatData",
            )
            for consumer in consumers
        ]
        now = self._clock_ms()
        if consumers:
            self._watch(conn)
        for consumer, group in zip(consumers, groups, strict=True):
            joins = self.groups.joins(group, client_id, id(conn))
            busy = self.groups.refusal(group, client_id, id(conn), now)
            if busy is not None:
                return response_to(cmd, ResponseCode.SYSTEM_BUSY, f"[OVERLOAD] {busy}")
            self.groups.heartbeat(group, client_id, id(conn), now)
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
        self._watched.add(key)
        self._notifier.track(conn)

        def forget() -> None:
            self._watched.discard(key)
            self._notifier.forget(key)
            for group in self.groups.drop_connection(key):
                self._notifier.notify(group, self.groups.connections(group))

        conn.on_close(forget)

    async def unregister_client(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        client_id = header.text(fields, "clientID")
        group = names.optional_group_name(fields, "consumerGroup")
        if group is not None and self.groups.unregister(group, client_id):
            self._notifier.notify(group, self.groups.connections(group))
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
        await self.commit_offset(ref.group, ref.topic, ref.queue_id, offset)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit a consumer offset once `_offset_refusal` allows it (RequestRefused if not)."""
        refusal = await self._offset_refusal(group, topic, queue_id, offset)
        if refusal is not None:
            raise refusal
        await self._produce.commit_consumer_offset(group, topic, queue_id, offset)

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
