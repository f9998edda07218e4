"""Server-side rebalance and the message request mode (RocketMQ 5.3's QueryAssignmentProcessor):
QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401).

A stock `DefaultMQPushConsumer` with `setClientRebalance(false)` (concurrent, clustering)
asks the broker which queues are its own (QUERY_ASSIGNMENT) instead of allocating them
itself; each answered queue carries a mode. PULL queues are pulled as before; POP queues
make the client pop them (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME:
remoting_front/pop.py). The mode of a (topic, group) is set by SET_MESSAGE_REQUEST_MODE
(`mqadmin setConsumeMode -c <cluster> -t <topic> -g <group> -m POP -q <n>`) and kept in the
broker's metadata (metadata/request_modes.py: durable, replicated to the slaves, taken by a
new master). Without one a (topic, group) is PULL (defaultMessageRequestMode), as a retry
topic always is.

The allocation is RocketMQ's: the topic's queues (here: this broker's, as the only broker of
its name; RocketMQ takes them from the routes of every broker) and the group's live clients,
both sorted, split by the client's strategy (AVG: AllocateMessageQueueAveragely,
AVG_BY_CIRCLE: AllocateMessageQueueAveragelyByCircle; another name: no answer, the client
keeps what it has). In POP mode with popShareQueueNum 0 (or at least the clients but one)
every client pops every queue: one assignment of queue -1 (any queue, the broker picks);
otherwise a client pops its own queues and those of the popShareQueueNum clients after it.
BROADCASTING answers every queue.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from brokergroup_broker.metadata import (
    BadMetadata,
    BrokerMetadata,
    MessageRequestMode,
    MetadataError,
    MetadataFull,
    RequestMode,
)
from brokergroup_broker.remoting_front.clients import ConsumerGroups
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, names
from brokergroup_remoting.body import decode_json_object, json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import Connection

#: AllocateMessageQueueStrategy.getName() of the strategies the broker runs.
AVG = "AVG"
AVG_BY_CIRCLE = "AVG_BY_CIRCLE"
CLUSTERING = "CLUSTERING"
BROADCASTING = "BROADCASTING"
#: MessageModel's JSON is its name; fastjson also reads the ordinal.
_MESSAGE_MODELS = (BROADCASTING, CLUSTERING)


@dataclass(frozen=True, order=True)
class MessageQueue:
    """MessageQueue, ordered as its compareTo: topic, brokerName, queueId."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


# ---------------------------------------------------------------- the allocation (pure)


def allocate_averagely(mq_all: Sequence[MessageQueue], cid_all: Sequence[str],
                       client_id: str) -> list[MessageQueue]:  # fmt: skip
    """AllocateMessageQueueAveragely.allocate: consecutive runs, the first clients one more."""
    if client_id not in cid_all or not mq_all:
        return []
    index = cid_all.index(client_id)
    mod = len(mq_all) % len(cid_all)
    if len(mq_all) <= len(cid_all):
        average = 1
    elif mod > 0 and index < mod:
        average = len(mq_all) // len(cid_all) + 1
    else:
        average = len(mq_all) // len(cid_all)
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, len(mq_all) - start)
    return [mq_all[(start + i) % len(mq_all)] for i in range(count)]


def allocate_by_circle(mq_all: Sequence[MessageQueue], cid_all: Sequence[str],
                       client_id: str) -> list[MessageQueue]:  # fmt: skip
    """AllocateMessageQueueAveragelyByCircle.allocate: every len(cid_all)-th queue."""
    if client_id not in cid_all:
        return []
    index = cid_all.index(client_id)
    return [mq for i, mq in enumerate(mq_all) if i % len(cid_all) == index]


STRATEGIES: dict[
    str, Callable[[Sequence[MessageQueue], Sequence[str], str], list[MessageQueue]]
] = {
    AVG: allocate_averagely,
    AVG_BY_CIRCLE: allocate_by_circle,
}


def allocate_for_pop(
    strategy: Callable[[Sequence[MessageQueue], Sequence[str], str], list[MessageQueue]],
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
    client_id: str,
    pop_share_queue_num: int,
) -> list[MessageQueue]:
    """QueryAssignmentProcessor.allocate4Pop."""
    if pop_share_queue_num <= 0 or pop_share_queue_num >= len(cid_all) - 1:
        # Every client pops every queue of each broker: queue -1, the broker picks.
        return sorted({MessageQueue(mq.topic, mq.broker_name, -1) for mq in mq_all})
    if len(cid_all) <= len(mq_all):
        out = strategy(mq_all, cid_all, client_id)
        if client_id in cid_all:
            index = cid_all.index(client_id)
            for _ in range(pop_share_queue_num):
                index = (index + 1) % len(cid_all)
                out += strategy(mq_all, cid_all, cid_all[index])
        return out
    # More clients than queues: each client one queue, so every client is assigned.
    if client_id not in cid_all:
        return []
    return [mq_all[cid_all.index(client_id) % len(mq_all)]]


def assign(
    *,
    topic: str,
    broker_name: str,
    queue_count: int | None,
    clients: Sequence[str],
    client_id: str,
    message_model: str,
    strategy_name: str | None,
    mode: RequestMode,
) -> list[MessageQueue] | None:
    """The queues QUERY_ASSIGNMENT answers `client_id` (None: no answer, the client keeps
    its assignment: an unknown topic, strategy or group)."""
    if queue_count is None:
        return None
    mq_all = [MessageQueue(topic, broker_name, q) for q in range(queue_count)]
    if message_model == BROADCASTING:
        return mq_all
    if not clients:
        return None
    strategy = STRATEGIES.get(strategy_name or "")
    if strategy is None:
        return None
    cid_all = sorted(clients)
    if mode.mode is MessageRequestMode.POP:
        return allocate_for_pop(strategy, mq_all, cid_all, client_id, mode.pop_share_queue_num)
    return strategy(mq_all, cid_all, client_id)


# ---------------------------------------------------------------- the handlers


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Assignments:
    """The QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE part of the remoting front."""

    def __init__(
        self,
        metadata: BrokerMetadata,
        *,
        broker_name: str,
        topics: Callable[[], dict[str, int]],
        consumers: ConsumerGroups,
        clock_ms: Callable[[], int],
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        """`topics`: the topics served with their queue counts; `clock_ms`: the consumer
        tables' clock (their liveness)."""
        self._metadata = metadata
        self._broker_name = broker_name
        self._topics = topics
        self._consumers = consumers
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms

    def table(
        self,
    ) -> dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]]:
        return {
            RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
            RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_message_request_mode,
        }

    def mode_of(self, topic: str, group: str) -> RequestMode:
        """The (topic, group)'s mode; PULL without an entry, and always for a retry topic."""
        held = self._metadata.request_modes.get(topic, group)
        if held is None or topic.startswith(names.RETRY_GROUP_TOPIC_PREFIX):
            return RequestMode(topic, group)
        return held

    async def query_assignment(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """QUERY_ASSIGNMENT: a QueryAssignmentRequestBody in, a QueryAssignmentResponseBody
        out (`messageQueueAssignments` null when there is no answer)."""
        body = decode_json_object(cmd.body or b"", "QueryAssignmentRequestBody")
        topic = names.check_topic(body.get("topic"))
        group = names.check_group(body.get("consumerGroup"), "consumerGroup")
        client_id = body.get("clientId")
        if not isinstance(client_id, str) or not client_id:
            raise BadField("clientId is not a non-empty string")
        model = body.get("messageModel", CLUSTERING)
        if type(model) is int and 0 <= model < len(_MESSAGE_MODELS):
            model = _MESSAGE_MODELS[model]
        if model not in _MESSAGE_MODELS:
            raise BadField(f"messageModel {model!r:.40} is not CLUSTERING or BROADCASTING")
        strategy = body.get("strategyName")
        mode = self.mode_of(topic, group)
        queues = assign(
            topic=topic,
            broker_name=self._broker_name,
            queue_count=self._topics().get(topic),
            clients=self._consumers.members(group, self._clock_ms()),
            client_id=client_id,
            message_model=str(model),
            strategy_name=strategy if isinstance(strategy, str) else None,
            mode=mode,
        )
        assignments = (
            None
            if queues is None
            else [
                {"messageQueue": mq.to_json(), "mode": mode.mode.value, "attachments": {}}
                for mq in queues
            ]
        )
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            None,
            None,
            json_body({"messageQueueAssignments": assignments}),
        )

    async def set_message_request_mode(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        """SET_MESSAGE_REQUEST_MODE: a SetMessageRequestModeRequestBody, kept durably (and
        replicated) before the answer; a retry topic's mode is refused NO_PERMISSION, as
        RocketMQ refuses it."""
        body = decode_json_object(cmd.body or b"", "SetMessageRequestModeRequestBody")
        topic = body.get("topic")
        if isinstance(topic, str) and topic.startswith(names.RETRY_GROUP_TOPIC_PREFIX):
            return response_to(
                cmd, ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode"
            )
        try:
            entry = RequestMode.from_json(body)
            self._metadata.put_request_mode(entry, self._wall_ms())
        except BadMetadata as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        except MetadataFull as exc:
            return response_to(cmd, ResponseCode.SYSTEM_BUSY, str(exc))
        except MetadataError as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, f"mode not saved: {exc}")
        return response_to(cmd, ResponseCode.SUCCESS)
