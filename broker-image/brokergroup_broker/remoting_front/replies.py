"""Request-reply on the broker's remoting port: SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2.

As RocketMQ's ReplyMessageProcessor: a responder (MessageUtil.createReplyMessage, then an
ordinary send the client turns into SEND_REPLY_MESSAGE_V2 because MSG_TYPE is "reply")
sends the reply to `<cluster>_REPLY_TOPIC`; the broker pushes it at once to the requesting
client, named by the reply's REPLY_TO_CLIENT property, with PUSH_REPLY_MESSAGE_TO_CLIENT over
that client's own connection (ProducerManager.findChannel: the requester heartbeats as a
producer), and, with storeReplyMessageEnable, also stores it through the one produce path.
The requester matches it to its request by CORRELATION_ID.

The answer is RocketMQ's: SUCCESS once the requester took the push (msgId "0" and queue
offset 0 unless the reply was stored, then the stored ones), SYSTEM_ERROR with RocketMQ's
remark when REPLY_TO_CLIENT is missing, the requester is not connected here or did not take
the push — the reply is still stored then, as RocketMQ stores it. A store refusal does not
change the answer (RocketMQ only logs it): the push is what the requester waits for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from brokergroup_broker.protocol.messages import ErrorResponse, Response, SendBatch, SendRunResult
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.clients import ProducerGroups
from brokergroup_broker.remoting_front.sends import SendPath, Stamps, send_through, size_refusal
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.net import Connection

log = logging.getLogger(__name__)

#: MixAll.REPLY_TOPIC_POSTFIX: the reply topic is "<brokerClusterName>_REPLY_TOPIC".
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"
#: MessageConst: the requester's clientId, and when the broker pushed the reply.
PROPERTY_REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
PROPERTY_PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
#: Broker2Client.callClient: invokeSync(channel, request, 10000).
PUSH_TIMEOUT_S = 10.0


def reply_topic(cluster: str) -> str:
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Replies:
    """Handler of SEND_REPLY_MESSAGE(_V2)."""

    def __init__(
        self,
        produce: SendPath,
        topics: DeclaredTopics,
        *,
        store_host: tuple[str, int],
        stamps: Stamps,
        store_reply: bool,
        producers: ProducerGroups,
        connection: Callable[[int], Connection | None],
        clock_ms: Callable[[], int],
        wall_ms: Callable[[], int] = _wall_ms,
        max_message_size: int = 4 << 20,
        timeout_s: float = PUSH_TIMEOUT_S,
    ) -> None:
        self._produce = produce
        self._topics = topics
        self._store_host = store_host
        self._message_id_prefix = wire.store_host_prefix(store_host)
        self._stamps = stamps
        self._store_reply = store_reply
        self._producers = producers
        self._connection = connection
        self._clock_ms = clock_ms
        self._wall_ms = wall_ms
        self._max_message_size = max_message_size
        self._timeout_s = timeout_s

    async def send_reply(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = wire.send_request(cmd.fields(), v2=cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2)
        answer_fields = self._stamps.answer_fields()
        if not self._topics.known(req.topic):
            return response_to(
                cmd,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{req.topic}] not exist, apply first please!",
                answer_fields,
            )
        too_large = size_refusal(len(cmd.body), self._max_message_size)
        if too_large is not None:
            return response_to(cmd, ResponseCode.MESSAGE_ILLEGAL, too_large, answer_fields)
        # buildMsgContext: the reply is stored and pushed with MSG_REGION and TRACE_ON.
        props = self._stamps.trace(req.properties)
        pushed, remark = await self._push(req, props, cmd.body, conn.peer)
        fields = {**answer_fields, "msgId": "0", "queueId": str(req.queue_id), "queueOffset": "0"}
        if self._store_reply:
            stored = await self._store(req, props, cmd.body, conn.peer)
            if isinstance(stored, SendRunResult):
                ids = wire.message_ids_after(self._message_id_prefix, stored.physical_offsets)
                fields.update(
                    msgId=",".join(ids),
                    queueId=str(stored.queue_id),
                    queueOffset=str(stored.first_queue_offset),
                )
            elif isinstance(stored, ErrorResponse):
                log.warning("reply to %s not stored: %s", req.topic, stored.message)
        if not pushed:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, remark, answer_fields)
        return response_to(cmd, ResponseCode.SUCCESS, None, fields)

    def _requester(self, client_id: str) -> Connection | None:
        """The live connection of a producer client `client_id` (ProducerManager.findChannel:
        any group; a requester heartbeats as a producer of its own group)."""
        now = self._clock_ms()
        for group in list(self._producers.groups):
            key = self._producers.connection_of(group, client_id, now)
            found = None if key is None else self._connection(key)
            if found is not None:
                return found
        return None

    async def _push(
        self, req: wire.SendRequest, props: dict[str, str], body: bytes, born: str
    ) -> tuple[bool, str]:
        """PUSH_REPLY_MESSAGE_TO_CLIENT to the requester: (taken, RocketMQ's remark if not)."""
        sender = props.get(PROPERTY_REPLY_TO_CLIENT)
        if sender is None:
            log.warning("%s is null, can not reply message", PROPERTY_REPLY_TO_CLIENT)
            return False, f"reply message properties[{PROPERTY_REPLY_TO_CLIENT}] is null"
        client = self._requester(sender)
        if client is None:
            remark = f"push reply message fail, channel of <{sender}> not found."
            log.warning(remark)
            return False, remark
        host, port = self._store_host
        fields = {
            "producerGroup": req.producer_group,
            "topic": req.topic,
            "defaultTopic": req.default_topic,
            "defaultTopicQueueNums": str(req.default_topic_queue_nums),
            "queueId": str(req.queue_id),
            "sysFlag": str(req.sys_flag),
            "bornTimestamp": str(req.born_timestamp_ms),
            "flag": str(req.flag),
            "properties": wire.encode_properties(
                {**props, PROPERTY_PUSH_REPLY_TIME: str(self._wall_ms())}
            ),
            "reconsumeTimes": str(req.reconsume_times),
            "unitMode": "false",
            "bornHost": born,
            "storeHost": f"{host}:{port}",
            "storeTimestamp": str(self._wall_ms()),
        }
        try:
            answer = await client.invoke(
                request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, 0, fields, body), self._timeout_s
            )
        except (TimeoutError, ConnectionError, OSError) as exc:
            log.warning("push reply message to <%s> fail: %r", sender, exc)
            return False, f"push reply message to {sender}fail."
        if answer.code != ResponseCode.SUCCESS:
            log.warning("push reply message to <%s> return fail: %s", sender, answer.remark)
            return False, f"push reply message to {sender}fail."
        return True, ""

    async def _store(
        self, req: wire.SendRequest, props: dict[str, str], body: bytes, born: str
    ) -> Response:
        """The reply in its topic, through the one produce path (an ErrorResponse if
        refused)."""
        host, _, port = born.rpartition(":")
        batch = SendBatch(
            req.topic,
            req.queue_id if req.queue_id >= 0 else None,
            [body],
            [(None, None, props)],
            flag=req.flag,
            sys_flag=req.sys_flag,
            born_timestamp_ms=req.born_timestamp_ms,
            born_host=(host, int(port)) if port.isdigit() else None,
            reconsume_times=req.reconsume_times,
        )
        return await send_through(self._produce, batch)
