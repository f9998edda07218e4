"""INVOKE_BROKER_TO_RESET_OFFSET (`mqadmin resetOffsetByTime`, the dashboard's reset): a
consumer group's offsets of a topic move to the first message stored at or after a time,
and its running consumers resume from there.

As RocketMQ 5.3 does by default (BrokerConfig.useServerSideResetOffset = true:
AdminBrokerProcessor.resetOffsetInner, not Broker2Client's RESET_CONSUMER_CLIENT_OFFSET,
which 5.3 sends only with that switch off): the broker commits the new offset of each queue
(so a consumer that starts later reads it; committed here through the store, replicated to
the slaves like any offset, where RocketMQ keeps the reset in memory) and remembers it as
pending (`clients.PendingResets`, ConsumerOffsetManager.resetOffsetTable). The next pull of
that queue by that group is answered PULL_OFFSET_MOVED with nextBeginOffset = the reset
offset (PullMessageProcessor's OFFSET_RESET); the stock push consumer then drops the queue,
stores that offset and pulls from it, the lite pull consumer pulls from it at once. Until
that pull, the group's commits of that queue (UPDATE_CONSUMER_OFFSET, a pull's commit
flag) are ignored: they carry the offset from before the reset (consumers.py).

The header is ResetOffsetRequestHeader: topic, group, timestamp (< 0: the queue's end),
queueId (-1: every queue) and offset (-1 or absent: by time; else that offset of that one
queue, within the queue's range), isForce (ignored, as the server-side reset ignores it).
The answer is ResetOffsetBody: `offsetTable` keyed by MessageQueue objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

from brokergroup_broker.protocol.messages import NO_CONSUMER_OFFSET
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.admin_queries import message_queue_map
from brokergroup_broker.remoting_front.clients import ConsumerGroups, PendingResets
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.command import response_to
from brokergroup_remoting.net import Connection

#: A pull handler (pulls.Pulls.pull_message, behind any other guard).
PullHandler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]


class ResetReads(Protocol):
    """What a reset reads and writes of the produce path (`front.ProduceAndPull` has it)."""

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def store_timestamp_at(
        self, topic: str, queue_id: int, queue_offset: int
    ) -> int | None: ...

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None: ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...


async def offset_by_time(reads: ResetReads, topic: str, queue_id: int, timestamp_ms: int) -> int:
    """The first queue offset whose record was stored at or after `timestamp_ms`, the
    queue's end when none was (MessageStore.getOffsetInQueueByTime, BoundaryType.LOWER), the
    end for a negative time (AdminBrokerProcessor.searchOffsetByTimestamp). A binary search
    over store timestamps, which grow with the queue offset (the log is appended in order),
    from the queue's first retained record."""
    low, high = await reads.query_offsets(topic, queue_id)
    if timestamp_ms < 0:
        return high
    while low < high:
        mid = (low + high) // 2
        stored = await reads.store_timestamp_at(topic, queue_id, mid)
        if stored is None or stored >= timestamp_ms:
            high = mid
        else:
            low = mid + 1
    return low


class OffsetReset:
    """The handler of INVOKE_BROKER_TO_RESET_OFFSET and the pull guard that tells a
    consumer of its queue's reset; `RemotingFront` serves them."""

    def __init__(
        self,
        produce: ResetReads,
        *,
        broker_name: str,
        topics: Callable[[], Mapping[str, int]],
        consumers: ConsumerGroups,
        resets: PendingResets,
        clock_ms: Callable[[], int],
    ) -> None:
        self._produce = produce
        self._broker_name = broker_name
        self._topics = topics
        self._consumers = consumers
        self._resets = resets
        self._clock_ms = clock_ms

    async def reset_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        topic = names.topic_name(fields, "topic")
        group = names.group_name(fields, "group")
        timestamp = header.int64(fields, "timestamp")
        queue_id = header.optional_int32(fields, "queueId", -1, low=-1, high=header.INT32_MAX)
        offset = header.optional_int64(fields, "offset", -1, low=-1, high=header.INT64_MAX)
        queues = self._topics().get(topic, 0)
        if queues == 0:
            return response_to(cmd, ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if queue_id >= queues:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"queueId {queue_id} is illegal: {topic} has "
                f"{queues} queues",
            )  # fmt: skip
        if not await self._group_exists(group, topic, queues):
            return response_to(
                cmd, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist"
            )
        # Every new offset is found before any is written.
        targets: dict[int, int] = {}
        for q in [queue_id] if queue_id >= 0 else range(queues):
            if queue_id >= 0 and offset != -1:
                low, high = await self._produce.query_offsets(topic, q)
                if not low <= offset <= high:
                    return response_to(
                        cmd, ResponseCode.SYSTEM_ERROR,
                        f"Target offset {offset} not in consume queue range [{low}-{high}]",
                    )  # fmt: skip
                targets[q] = offset
            else:
                targets[q] = await offset_by_time(self._produce, topic, q, timestamp)
        for q, target in targets.items():
            await self._produce.commit_consumer_offset(group, topic, q, target)
            self._resets.assign(group, topic, q, target, self._clock_ms())
        table = message_queue_map(
            self._broker_name, ((topic, q, str(target)) for q, target in targets.items())
        )
        body = ('{"offsetTable":' + table + "}").encode("utf-8")
        return response_to(cmd, ResponseCode.SUCCESS, None, None, body)

    async def _group_exists(self, group: str, topic: str, queues: int) -> bool:
        """A group this broker knows (SubscriptionGroupManager.containsSubscriptionGroup):
        one whose heartbeat it heard, or one holding an offset of the topic."""
        if self._consumers.known(group):
            return True
        for q in range(queues):
            if await self._produce.query_consumer_offset(group, topic, q) != NO_CONSUMER_OFFSET:
                return True
        return False

    def guard(self, pull: PullHandler) -> PullHandler:
        """`pull` (PULL_MESSAGE / LITE_PULL_MESSAGE), except that the first pull of a queue
        whose offset a reset assigned is answered PULL_OFFSET_MOVED with that offset as
        nextBeginOffset (its commit flag ignored: it carries the offset before the reset)."""

        async def pull_or_moved(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
            req = wire.pull_request(cmd.fields())
            key = (req.consumer_group, req.topic, req.queue_id)
            if self._resets.pending(*key, self._clock_ms()) is None:
                return await pull(cmd, conn)
            low, high = await self._produce.query_offsets(req.topic, req.queue_id)
            moved = self._resets.take(*key, self._clock_ms())
            if moved is None:  # taken by a pull of the same queue meanwhile
                return await pull(cmd, conn)
            return response_to(cmd, ResponseCode.PULL_OFFSET_MOVED, None, {
                "suggestWhichBrokerId": "0", "nextBeginOffset": str(moved),
                "minOffset": str(low), "maxOffset": str(high),
            })  # fmt: skip

        return pull_or_moved
