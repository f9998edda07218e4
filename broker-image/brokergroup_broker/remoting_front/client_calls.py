"""The admin codes the broker answers by asking a consumer: GET_CONSUMER_RUNNING_INFO
(`mqadmin consumerStatus`, the dashboard's client view) and CONSUME_MESSAGE_DIRECTLY
(`mqadmin queryMsgById -g G -d CLIENT`, the dashboard's resend).

As AdminBrokerProcessor.callConsumer and Broker2Client.callClient: the member (group,
clientId) is looked up among the live consumers (ConsumerManager.findChannel); the request
goes to it over its own connection with the same code, the caller's header fields and body,
and the consumer's answer (code, remark, fields, body: ConsumerRunningInfo or
ConsumeMessageDirectlyResult JSON, the client's own) is relayed as it is. The consumer has
10 s (callClient's invokeSync timeout): past it CONSUME_MSG_TIMEOUT; a member not online,
or a connection that fails, is SYSTEM_ERROR with RocketMQ's remark. CONSUME_MESSAGE_DIRECTLY
carries the stored record the msgId (an offset message id) names as its body, and the
broker's brokerName, topicSysFlag and groupSysFlag (0: no unit or order flags here) in its
header, as AdminBrokerProcessor.consumeMessageDirectly adds them.

The caller's signature fields are not passed on: the consumer checks none, and they are the
caller's, not the broker's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.clients import ConsumerGroups
from brokergroup_broker.store.message import StoredMessage
from brokergroup_remoting import RemotingCommand, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import Connection

#: Broker2Client.callClient: invokeSync(channel, request, 10000).
CALL_CLIENT_TIMEOUT_S = 10.0
#: extFields the ACL hook adds to a signed request: the caller's, never forwarded.
SIGNATURE_FIELDS = frozenset({"AccessKey", "Signature", "SecurityToken"})


class MessageAt(Protocol):
    """The stored record at a commit log offset (`front.ProduceAndPull` has it)."""

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...


class ClientCalls:
    """Handlers of GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY."""

    def __init__(
        self,
        produce: MessageAt,
        *,
        broker_name: str,
        topics: Callable[[], Mapping[str, int]],
        consumers: ConsumerGroups,
        connection: Callable[[int], Connection | None],
        clock_ms: Callable[[], int],
        timeout_s: float = CALL_CLIENT_TIMEOUT_S,
    ) -> None:
        self._produce = produce
        self._broker_name = broker_name
        self._topics = topics
        self._consumers = consumers
        self._connection = connection
        self._clock_ms = clock_ms
        self._timeout_s = timeout_s

    async def consumer_running_info(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO: header consumerGroup, clientId, jstackEnable."""
        fields = cmd.fields()
        group = names.group_name(fields, "consumerGroup")
        client_id = header.text(fields, "clientId")
        return await self._call(cmd, group, client_id, fields, cmd.body)

    async def consume_message_directly(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY: header consumerGroup, clientId, msgId (an offset
        message id), topic; the consumer gets the stored record."""
        fields = cmd.fields()
        group = names.group_name(fields, "consumerGroup")
        client_id = header.text(fields, "clientId")
        _, _, physical_offset = wire.decode_message_id(header.text(fields, "msgId"))
        topic = names.optional_topic_name(fields, "topic")
        found = await self._produce.message_at(physical_offset)
        if found is None:
            raise BadField(f"no message at commit log offset {physical_offset} on this broker")
        fields["brokerName"] = self._broker_name
        if topic is not None and topic in self._topics():
            fields["topicSysFlag"] = "0"
        if self._consumers.known(group):
            fields["groupSysFlag"] = "0"
        return await self._call(cmd, group, client_id, fields, found[1])

    async def _call(
        self,
        cmd: RemotingCommand,
        group: str,
        client_id: str,
        fields: dict[str, str],
        body: bytes,
    ) -> RemotingCommand:
        key = self._consumers.connection_of(group, client_id, self._clock_ms())
        client = None if key is None else self._connection(key)
        if client is None:
            return response_to(
                cmd, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online"
            )
        forwarded = {k: v for k, v in fields.items() if k not in SIGNATURE_FIELDS}
        try:
            answer = await client.invoke(request(cmd.code, 0, forwarded, body), self._timeout_s)
        except TimeoutError as exc:
            return response_to(
                cmd,
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> Timeout: {exc!r}",
            )
        except (ConnectionError, OSError) as exc:
            return response_to(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {exc!r}",
            )
        return response_to(
            cmd, answer.code, answer.remark, answer.fields(), answer.body, version=answer.version
        )
