"""Traces, request-reply and batches on the broker's remoting port (issue 34 item 4), on real
sockets against a confirmed master (a real store and produce path):

- a stored single send carries MSG_REGION, TRACE_ON and CLUSTER as a RocketMQ broker stamps
  them (a consumer's trace hook drops the traces of a message without MSG_REGION; a
  responder's createReplyMessage needs CLUSTER), a batch's messages none (RocketMQ's store
  writes only the messages' own properties); the answer carries MSG_REGION and TRACE_ON;
- the trace topic (traceTopicEnable) and the cluster's reply topic are served from the
  start, one queue each, and take sends without autoCreateTopicEnable;
- SEND_REPLY_MESSAGE_V2 pushes the reply to the requester named by REPLY_TO_CLIENT over its
  own connection (PUSH_REPLY_MESSAGE_TO_CLIENT with every field the client's
  ReplyMessageRequestHeader requires) and stores it (storeReplyMessageEnable), with
  RocketMQ's answers when the requester is missing or refuses;
- a batch is bounded by its bytes (maxMessageSize, 4 MiB), not by 1,024 messages: 5,000
  messages are stored in order, one byte over the bound is refused MESSAGE_ILLEGAL.

On the code before (b0939bf): no stamp but the answer's, the reply topic unknown,
SEND_REPLY_MESSAGE_V2 REQUEST_CODE_NOT_SUPPORTED, a batch of 5,000 refused (SYSTEM_ERROR
"the batch holds more than 1024 messages").
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.core.broker import Broker
from brokergroup_broker.remoting_front import (
    FrontSettings,
    RemotingFront,
    RemotingFrontServer,
    wire,
)
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.net import Connection, Credentials, Handler, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
STORE_HOST = ("127.0.0.1", 10911)
MAX_MESSAGE_SIZE = 4 << 20


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


class Port:
    def __init__(self, broker: Broker, server: RemotingFrontServer) -> None:
        self.broker = broker
        self.server = server
        self.front: RemotingFront = server.front
        assert broker.parts is not None
        self.parts = broker.parts
        self.address = f"127.0.0.1:{server.port}"

    async def client(self, handlers: dict[int, Handler] | None = None) -> RemotingClient:
        return await RemotingClient.connect(
            self.address, credentials=Credentials(ACCESS_KEY, SECRET_KEY), handlers=handlers
        )

    async def stored(self, msg_id: str) -> tuple[bytes, dict[str, str]]:
        """Body and properties of the record an offset message id names."""
        _, _, offset = wire.decode_message_id(msg_id)
        found = await self.parts.produce.message_at(offset)
        assert found is not None, msg_id
        return bytes(found[0].body), dict(found[0].properties)


@pytest.fixture
async def make_port(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Port]]]:
    """A confirmed master's remoting port with FrontSettings("C", "broker-a", ...) and the
    given extra settings; auto_create_topic off unless given."""
    servers: list[RemotingFrontServer] = []
    async with confirmed_master(tmp_path) as m:

        async def make(**settings: Any) -> Port:
            front = RemotingFront(
                m.parts.produce, FrontSettings("C", "broker-a", STORE_HOST, **settings),
                clock_ms=Clock(),
            )  # fmt: skip
            server = RemotingFrontServer(front, ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
            await server.start("127.0.0.1", 0)
            servers.append(server)
            return Port(m.broker, server)

        yield make
        for server in servers:
            await server.close()


def send_v2(topic: str, props: dict[str, str], *, queue_id: int = 0, batch: bool = False,
            group: str = "pg") -> dict[str, str]:  # fmt: skip
    """SendMessageRequestHeaderV2's fields, as the stock client writes them."""
    return {
        "a": group, "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": "1700000000123", "h": "0", "i": wire.encode_properties(props), "j": "0",
        "k": "false", "m": str(batch).lower(),
    }  # fmt: skip


def java_batch(bodies: list[bytes], props: str = "") -> bytes:
    """MessageDecoder.encodeMessages, written out as Java does."""
    raw_props = props.encode()
    out = bytearray()
    for body in bodies:
        total = 20 + len(body) + 2 + len(raw_props)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(raw_props)) + raw_props
    return bytes(out)


# ---------------------------------------------------------------- stamps


async def test_a_stored_send_carries_region_trace_switch_and_cluster(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port(auto_create_topic=True)
    client = await port.client()
    try:
        user = {"UNIQ_KEY": "u1", "KEYS": "k1", "seq": "7"}
        answer = await client.invoke(
            request(RequestCode.SEND_MESSAGE_V2, 0, send_v2("Traced", user), b"traced body"), 5
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        fields = answer.fields()
        assert (fields["MSG_REGION"], fields["TRACE_ON"]) == ("DefaultRegion", "true")
        body, props = await port.stored(fields["msgId"])
        assert body == b"traced body"
        assert props == {**user, "MSG_REGION": "DefaultRegion", "TRACE_ON": "true",
                         "CLUSTER": "C"}  # fmt: skip

        # A batch's messages keep their own properties only, as RocketMQ stores them.
        batch = java_batch([b"b0", b"b1"], "KEYS\x01bk\x02")
        answer = await client.invoke(
            request(RequestCode.SEND_BATCH_MESSAGE, 0, send_v2("Traced", {}, batch=True), batch),
            5,
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        stored = [await port.stored(i) for i in answer.fields()["msgId"].split(",")]
        assert stored == [(b"b0", {"KEYS": "bk"}), (b"b1", {"KEYS": "bk"})]
    finally:
        await client.close()


async def test_the_region_and_trace_switch_are_the_brokers_settings(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port(auto_create_topic=True, region_id="eu-west-1", trace_on=False)
    client = await port.client()
    try:
        answer = await client.invoke(
            request(RequestCode.SEND_MESSAGE_V2, 0, send_v2("Traced", {"a": "1"}), b"x"), 5
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        fields = answer.fields()
        assert (fields["MSG_REGION"], fields["TRACE_ON"]) == ("eu-west-1", "false")
        _, props = await port.stored(fields["msgId"])
        assert props == {"a": "1", "MSG_REGION": "eu-west-1", "TRACE_ON": "false",
                         "CLUSTER": "C"}  # fmt: skip
    finally:
        await client.close()


# ---------------------------------------------------------------- system topics


async def test_trace_and_reply_topics_are_served_from_the_start(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    # Without traceTopicEnable only the reply topic is there.
    served = (await make_port()).front.topics()
    assert "RMQ_SYS_TRACE_TOPIC" not in served and served.get("C_REPLY_TOPIC") == 1
    port = await make_port(trace_topic="RMQ_SYS_TRACE_TOPIC")
    served = port.front.topics()
    assert (served.get("RMQ_SYS_TRACE_TOPIC"), served.get("C_REPLY_TOPIC")) == (1, 1)
    assert {"RMQ_SYS_TRACE_TOPIC", "C_REPLY_TOPIC"} <= set(port.front.topic_configs())
    client = await port.client()
    try:
        # autoCreateTopicEnable is off: a trace still has its topic.
        trace = send_v2("RMQ_SYS_TRACE_TOPIC", {"KEYS": "m1"})
        answer = await client.invoke(request(RequestCode.SEND_MESSAGE_V2, 0, trace, b"Pub"), 5)
        assert answer.code == ResponseCode.SUCCESS, answer
        other = await client.invoke(
            request(RequestCode.SEND_MESSAGE_V2, 0, send_v2("NotCreated", {}), b"x"), 5
        )
        assert other.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await client.close()


# ---------------------------------------------------------------- request-reply

REQUIRED_PUSH_FIELDS = {
    # ReplyMessageRequestHeader's @CFNotNull fields: the client refuses a push without one.
    "producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag",
    "bornTimestamp", "flag", "bornHost", "storeHost", "storeTimestamp",
}  # fmt: skip


def reply_props(requester: str | None) -> dict[str, str]:
    """What MessageUtil.createReplyMessage sets, and the request's CORRELATION_ID."""
    props = {"CORRELATION_ID": "corr-1", "MSG_TYPE": "reply", "CLUSTER": "C", "TTL": "3000"}
    if requester is not None:
        props["REPLY_TO_CLIENT"] = requester
    return props


class Requester:
    """A requesting client: heartbeats as a producer and answers pushed replies with
    `code`, as the stock client's ClientRemotingProcessor does."""

    def __init__(self, code: int = ResponseCode.SUCCESS) -> None:
        self.code = code
        self.pushed: asyncio.Queue[RemotingCommand] = asyncio.Queue()
        self.client: RemotingClient | None = None

    async def push(self, cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        self.pushed.put_nowait(cmd)
        return response_to(cmd, self.code)

    async def connect(self, port: Port, client_id: str) -> RemotingClient:
        import json

        self.client = await port.client({RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: self.push})
        data = {"clientID": client_id, "consumerDataSet": [],
                "producerDataSet": [{"groupName": "requesters"}]}  # fmt: skip
        answer = await self.client.invoke(
            request(RequestCode.HEART_BEAT, 0, {}, json.dumps(data).encode()), 5
        )
        assert answer.code == ResponseCode.SUCCESS
        return self.client


async def test_a_reply_is_pushed_to_its_requester_and_stored(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    requester = Requester()
    await requester.connect(port, "10.0.0.9@req")
    responder = await port.client()
    try:
        header = send_v2("C_REPLY_TOPIC", reply_props("10.0.0.9@req"), group="responders")
        answer = await responder.invoke(
            request(RequestCode.SEND_REPLY_MESSAGE_V2, 0, header, b"the answer"), 5
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        pushed = requester.pushed.get_nowait()
        assert pushed.code == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT
        assert pushed.body == b"the answer"
        got = pushed.fields()
        assert set(got) >= REQUIRED_PUSH_FIELDS
        host, port_number = responder.connection.transport.get_extra_info("sockname")[:2]
        assert {k: got[k] for k in REQUIRED_PUSH_FIELDS - {"storeTimestamp"}} == {
            "producerGroup": "responders", "topic": "C_REPLY_TOPIC", "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
            "bornTimestamp": "1700000000123", "flag": "0", "bornHost": f"{host}:{port_number}",
            "storeHost": "127.0.0.1:10911",
        }  # fmt: skip
        props = wire.decode_properties(got["properties"])
        assert set(props) == {*reply_props("x"), "MSG_REGION", "TRACE_ON", "PUSH_REPLY_TIME"}
        assert props["CORRELATION_ID"] == "corr-1" and props["REPLY_TO_CLIENT"] == "10.0.0.9@req"
        assert int(props["PUSH_REPLY_TIME"]) > 0 and int(got["storeTimestamp"]) > 0

        # Stored too (storeReplyMessageEnable): the answer names the stored record.
        fields = answer.fields()
        assert (fields["MSG_REGION"], fields["TRACE_ON"], fields["queueId"]) == (
            "DefaultRegion", "true", "0")  # fmt: skip
        body, stored = await port.stored(fields["msgId"])
        assert body == b"the answer"
        assert stored == {**reply_props("10.0.0.9@req"), "MSG_REGION": "DefaultRegion",
                          "TRACE_ON": "true"}  # fmt: skip
    finally:
        await responder.close()
        assert requester.client is not None
        await requester.client.close()


async def test_a_reply_without_its_requester_is_refused_with_rocketmqs_remark(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port(store_reply_message=False)
    refusing = Requester(ResponseCode.SYSTEM_ERROR)
    await refusing.connect(port, "10.0.0.8@refuses")
    responder = await port.client()
    before = port.parts.store.max_offset
    try:
        cases = [
            (None, "reply message properties[REPLY_TO_CLIENT] is null"),
            ("10.0.0.7@gone", "push reply message fail, channel of <10.0.0.7@gone> not found."),
            ("10.0.0.8@refuses", "push reply message to 10.0.0.8@refusesfail."),
        ]
        for requester, remark in cases:
            header = send_v2("C_REPLY_TOPIC", reply_props(requester))
            answer = await responder.invoke(
                request(RequestCode.SEND_REPLY_MESSAGE_V2, 0, header, b"lost answer"), 5
            )
            assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, remark)
        assert refusing.pushed.qsize() == 1
        # The original header names (SEND_REPLY_MESSAGE) and storeReplyMessageEnable off.
        ok = Requester()
        await ok.connect(port, "10.0.0.6@ok")
        header = {"producerGroup": "pg", "topic": "C_REPLY_TOPIC", "defaultTopic": "TBW102",
                  "defaultTopicQueueNums": "4", "queueId": "0", "sysFlag": "0",
                  "bornTimestamp": "1", "flag": "0",
                  "properties": wire.encode_properties(reply_props("10.0.0.6@ok"))}  # fmt: skip
        answer = await responder.invoke(
            request(RequestCode.SEND_REPLY_MESSAGE, 0, header, b"v1 answer"), 5
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        assert (answer.fields()["msgId"], answer.fields()["queueOffset"]) == ("0", "0")
        assert ok.pushed.get_nowait().body == b"v1 answer"
        assert port.parts.store.max_offset == before  # nothing stored
        assert ok.client is not None
        await ok.client.close()
    finally:
        await responder.close()
        assert refusing.client is not None
        await refusing.client.close()


# ---------------------------------------------------------------- batches


async def test_a_batch_is_bounded_by_its_bytes_not_its_count(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port(auto_create_topic=True)
    client = await port.client()
    try:
        bodies = [f"m{i:05d}".encode() for i in range(5000)]
        header = send_v2("Batched", {}, batch=True)
        answer = await client.invoke(
            request(RequestCode.SEND_BATCH_MESSAGE, 0, header, java_batch(bodies)), 10
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        ids = answer.fields()["msgId"].split(",")
        assert len(ids) == 5000
        # Stored in the batch's order, consecutive in the queue.
        assert [(await port.stored(i))[0] for i in ids] == bodies
        assert answer.fields()["queueOffset"] == "0"

        # Over maxMessageSize by one byte (a batch, then one message): refused, nothing stored.
        before = port.parts.store.max_offset
        big = java_batch([b"x" * (MAX_MESSAGE_SIZE - 22 - 22), b"y"])
        assert len(big) == MAX_MESSAGE_SIZE + 1
        refused = await client.invoke(request(RequestCode.SEND_BATCH_MESSAGE, 0, header, big), 10)
        remark = (
            "the message is illegal, maybe msg body or properties length not matched. "
            f"msg body length limit {MAX_MESSAGE_SIZE}B, msg properties length limit 32KB."
        )
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert (refused.remark or "").startswith(remark)
        single = b"z" * (MAX_MESSAGE_SIZE + 1)
        refused = await client.invoke(
            request(RequestCode.SEND_MESSAGE_V2, 0, send_v2("Batched", {}), single), 10
        )
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert (refused.remark or "").startswith(remark)
        assert port.parts.store.max_offset == before
    finally:
        await client.close()


# ---------------------------------------------------------------- broadcast consumers


async def test_a_group_without_consume_broadcast_enable_cannot_pull_in_broadcast_mode(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    """PullMessageProcessor: a push consumer's pull (no subscription of its own) of a group
    whose heartbeat says BROADCASTING and whose config says consumeBroadcastEnable=false is
    NO_PERMISSION with forbiddenType 4; the same group in CLUSTERING mode, or with the
    default config, pulls."""
    import json

    port = await make_port(auto_create_topic=True)
    client = await port.client()
    try:
        answer = await client.invoke(
            request(RequestCode.SEND_MESSAGE_V2, 0, send_v2("Broadcast", {}), b"every one"), 5
        )
        assert answer.code == ResponseCode.SUCCESS
        config = {"groupName": "no-broadcast", "consumeBroadcastEnable": False}
        answer = await client.invoke(
            request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 0, {},
                    json.dumps(config).encode()), 5,
        )  # fmt: skip
        assert answer.code == ResponseCode.SUCCESS, answer

        async def pull_as(group: str, model: str, sys_flag: int = 0x2) -> RemotingCommand:
            data = {"clientID": f"10.0.0.1@{group}-{model}", "producerDataSet": [],
                    "consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                         "messageModel": model, "subscriptionDataSet": []}]}  # fmt: skip
            beat = await client.invoke(
                request(RequestCode.HEART_BEAT, 0, {}, json.dumps(data).encode()), 5
            )
            assert beat.code == ResponseCode.SUCCESS
            fields = {"consumerGroup": group, "topic": "Broadcast", "queueId": "0",
                      "queueOffset": "0", "maxMsgNums": "32", "sysFlag": str(sys_flag),
                      "commitOffset": "0", "suspendTimeoutMillis": "0"}  # fmt: skip
            return await client.invoke(request(RequestCode.PULL_MESSAGE, 0, fields), 5)

        refused = await pull_as("no-broadcast", "BROADCASTING")
        assert (refused.code, refused.remark) == (
            ResponseCode.NO_PERMISSION,
            "the consumer group[no-broadcast] can not consume by broadcast way",
        )
        assert refused.fields()["forbiddenType"] == "4"
        # A pull that carries its own subscription, the group in CLUSTERING, a group with the
        # default config (consumeBroadcastEnable true): served.
        for group, model, flag in [("no-broadcast", "BROADCASTING", 0x2 | 0x4),
                                   ("no-broadcast", "CLUSTERING", 0x2),
                                   ("broadcast-ok", "BROADCASTING", 0x2)]:  # fmt: skip
            served = await pull_as(group, model, flag)
            assert served.code == ResponseCode.SUCCESS, (group, model, served)
    finally:
        await client.close()
