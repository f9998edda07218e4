"""Server-side filters on the broker's remoting port (remoting_front/pulls.py,
client_config.py, docs/filters.md), against a confirmed master over real sockets.

A pull with a tag subscription (in its header, or from its group's heartbeat) is answered
only the matching records: the others' bodies are not in the answer, the get statistics
count only what was sent, and nextBeginOffset moves past every entry looked at, also when
nothing matched (PULL_NOT_FOUND at the queue's end, PULL_RETRY_IMMEDIATELY after a whole
scan window). Two tags with one hash ("Aa", "BB") are told apart
on the broker. A SQL92 subscription is evaluated on each record's properties; without
enablePropertyFilter it is refused as RocketMQ refuses it. CHECK_CLIENT_CONFIG answers a
SQL92 consumer's start-up check. The tag hash is Java's String.hashCode (values printed by
a JDK 17, non-ASCII included).
"""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from brokergroup_broker.broker_stats import GROUP_GET_NUMS, GROUP_GET_SIZE, stats_key
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.filter import FilterRefused, compile_filter
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_broker.remoting_front.pulls import MAX_FILTER_SCAN
from brokergroup_broker.store.message import java_string_hash
from brokergroup_broker.store.message_scan import decode_records
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
TOPIC = "TopicF"

#: "x".hashCode() as a JDK 17 prints it.
JAVA_HASHES = {
    "TagA": 2598919, "TagB": 2598920, "TagC": 2598921, "*": 42, "": 0, "标签": 857175,
    "Ünïcødé": 1055433303, "😀tag": 1276941143, "Aa": 2112, "BB": 2112, "a b": 94307,
    "TagA||TagB": 1789476431,
}  # fmt: skip


def test_tag_hash_is_javas_string_hash_code() -> None:
    assert {text: java_string_hash(text) for text in JAVA_HASHES} == JAVA_HASHES


def test_tag_expressions_as_filter_api_builds_them() -> None:
    both = compile_filter("TAG", " TagA || TagC ||")
    assert both.matches_tag_hash(2598919) and both.matches_tag_hash(2598921)
    assert not both.matches_tag_hash(2598920) and not both.matches_tag_hash(0)
    assert both.matches({"TAGS": "TagA"}) and not both.matches({"TAGS": "TagB"})
    for every in ("*", "", None):
        assert compile_filter(None, every).matches_all
    assert not compile_filter("TAG", " * ").matches_all  # only exactly "*" is SUB_ALL
    with pytest.raises(FilterRefused, match="no tag"):
        compile_filter("TAG", "||")


class Port:
    def __init__(self, server: RemotingFrontServer, front: RemotingFront, parts: object) -> None:
        self.server, self.front, self.parts = server, front, parts

    async def client(self) -> RemotingClient:
        return await RemotingClient.connect(
            f"127.0.0.1:{self.server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
        )

    async def send(self, tags: str | None, body: bytes, **props: str) -> None:
        message = ProduceMessage(TOPIC, body, tags=tags, properties=props)
        await self.parts.produce.send_messages(TOPIC, 0, [message])  # type: ignore[attr-defined]


@pytest.fixture
async def make_port(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Port]]]:
    servers: list[RemotingFrontServer] = []
    async with confirmed_master(tmp_path, BrokerConfig()) as m:

        async def make(enable_property_filter: bool = False) -> Port:
            settings = FrontSettings(
                "C", "broker-a", ("127.0.0.1", 10911), True,
                enable_property_filter=enable_property_filter,
            )  # fmt: skip
            front = RemotingFront(m.parts.produce, settings)
            server = RemotingFrontServer(front, ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
            await server.start("127.0.0.1", 0)
            servers.append(server)
            return Port(server, front, m.parts)

        yield make
        for server in servers:
            await server.close()


def pull(offset: int, *, subscription: tuple[str, str] | None = None, group: str = "g",
         max_msgs: int = 32) -> RemotingCommand:  # fmt: skip
    fields = {
        "consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": str(offset),
        "maxMsgNums": str(max_msgs), "sysFlag": "0", "commitOffset": "0",
        "suspendTimeoutMillis": "0",
    }  # fmt: skip
    if subscription is not None:
        fields["sysFlag"] = str(0x4)  # FLAG_SUBSCRIPTION
        fields["expressionType"], fields["subscription"] = subscription
    return request(RequestCode.PULL_MESSAGE, 0, fields)


def bodies(answer: RemotingCommand) -> list[tuple[int, bytes]]:
    """(queue offset, body) of each record in a pull answer, in order."""
    data, positions, at = answer.body, [], 0
    while at < len(data):
        positions.append(at)
        at += struct.unpack_from(">i", data, at)[0]
    return [(m.queue_offset, m.body) for m in decode_records(data, positions)]


async def test_a_tag_filtered_pull_sends_only_matching_bodies_and_moves_past_the_rest(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    tags = ["TagA", "TagB", None, "TagC", "TagB", "Aa", "BB", "TagA"]
    for i, tag in enumerate(tags):
        await port.send(tag, f"body-{i}-{tag}".encode())
    client = await port.client()
    try:
        answer = await client.invoke(pull(0, subscription=("TAG", "TagA || TagC || BB")), 5)
        assert answer.code == ResponseCode.SUCCESS
        # "Aa" has BB's hash: passed by the consume queue check, refused on its real tag.
        assert bodies(answer) == [
            (0, b"body-0-TagA"), (3, b"body-3-TagC"), (6, b"body-6-BB"), (7, b"body-7-TagA"),
        ]  # fmt: skip
        assert answer.fields()["nextBeginOffset"] == "8"
        # The get statistics count what was sent: 4 records, the answer's bytes.
        key = stats_key(TOPIC, "g")
        nums, size = (
            port.front.stats.item(GROUP_GET_NUMS, key),
            port.front.stats.item(GROUP_GET_SIZE, key),
        )
        assert nums is not None and size is not None
        assert (nums.value, size.value) == (4, len(answer.body))
        # Nothing matches past offset 1: the pull looked at all, reached the end and
        # answers from there (nextBeginOffset moved past the 7 entries).
        answer = await client.invoke(pull(1, subscription=("TAG", "TagZ")), 5)
        assert (answer.code, answer.body) == (ResponseCode.PULL_NOT_FOUND, b"")
        assert answer.fields()["nextBeginOffset"] == "8"
        # More non-matching entries than one scan window (MAX_FILTER_SCAN): the client
        # is told to pull again at once from past the window, then gets the match.
        others = [ProduceMessage(TOPIC, b"b", tags="TagB")] * (MAX_FILTER_SCAN + 50)
        await port.parts.produce.send_messages(TOPIC, 0, others)  # type: ignore[attr-defined]
        await port.send("TagA", b"late")
        answer = await client.invoke(pull(8, subscription=("TAG", "TagA")), 5)
        assert (answer.code, answer.body) == (ResponseCode.PULL_RETRY_IMMEDIATELY, b"")
        assert answer.fields()["nextBeginOffset"] == str(8 + MAX_FILTER_SCAN)
        answer = await client.invoke(pull(8 + MAX_FILTER_SCAN, subscription=("TAG", "TagA")), 5)
        assert bodies(answer) == [(8 + MAX_FILTER_SCAN + 50, b"late")]
    finally:
        await client.close()


async def test_a_push_consumers_pull_uses_its_heartbeat_subscription(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    for i, tag in enumerate(["TagB", "TagA", "TagB"]):
        await port.send(tag, f"m{i}".encode())
    client = await port.client()
    try:
        heartbeat = {
            "clientID": "c1", "producerDataSet": [],
            "consumerDataSet": [{
                "groupName": "push", "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [{
                    "topic": TOPIC, "subString": "TagA", "expressionType": "TAG",
                    "tagsSet": ["TagA"], "codeSet": [2598919], "subVersion": 1,
                }],
            }],
        }  # fmt: skip
        beat = request(RequestCode.HEART_BEAT, 0, {}, json.dumps(heartbeat).encode())
        assert (await client.invoke(beat, 5)).code == ResponseCode.SUCCESS
        answer = await client.invoke(pull(0, group="push"), 5)
        assert bodies(answer) == [(1, b"m1")]
        # Another group with no heartbeat here is not filtered.
        assert [b for _, b in bodies(await client.invoke(pull(0, group="other"), 5))] == [
            b"m0",
            b"m1",
            b"m2",
        ]
    finally:
        await client.close()


async def test_sql92_pulls_evaluate_properties_and_need_enable_property_filter(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    selector = ("SQL92", "a BETWEEN 3 AND 7 AND b = 'x'")
    on, off = await make_port(enable_property_filter=True), await make_port()
    for a, b in [("1", "x"), ("3", "x"), ("5", "y"), ("7", "x"), ("9", "x"), ("5.5", "x")]:
        await on.send("T", f"a={a},b={b}".encode(), a=a, b=b)
    await on.send("T", b"no-properties")
    client = await on.client()
    try:
        answer = await client.invoke(pull(0, subscription=selector), 5)
        assert bodies(answer) == [(1, b"a=3,b=x"), (3, b"a=7,b=x")]
        assert answer.fields()["nextBeginOffset"] == "7"
        bad = await client.invoke(pull(0, subscription=("SQL92", "a >")), 5)
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "expected a literal" in (bad.remark or "")
    finally:
        await client.close()
    client = await off.client()
    try:
        refused = await client.invoke(pull(0, subscription=selector), 5)
        assert (refused.code, refused.remark) == (
            ResponseCode.SYSTEM_ERROR,
            "The broker does not support consumer to filter message by SQL92",
        )
    finally:
        await client.close()


def check_body(kind: str, expression: str) -> bytes:
    return json.dumps({
        "clientId": "c1", "group": "g",
        "subscriptionData": {"topic": TOPIC, "subString": expression, "expressionType": kind},
    }).encode()  # fmt: skip


async def test_check_client_config_answers_as_rocketmq(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    on, off = await make_port(enable_property_filter=True), await make_port()
    answers = {}
    for name, port in (("on", on), ("off", off)):
        client = await port.client()
        try:
            for kind, expression in (("TAG", "TagA"), ("SQL92", "a > 1"), ("SQL92", "a >")):
                cmd = request(RequestCode.CHECK_CLIENT_CONFIG, 0, {}, check_body(kind, expression))
                got = await client.invoke(cmd, 5)
                answers[name, kind, expression] = (got.code, got.remark or "")
        finally:
            await client.close()
    refusal = (
        ResponseCode.SYSTEM_ERROR,
        "The broker does not support consumer to filter message by SQL92",
    )
    assert answers == {
        ("on", "TAG", "TagA"): (ResponseCode.SUCCESS, ""),
        ("on", "SQL92", "a > 1"): (ResponseCode.SUCCESS, ""),
        ("on", "SQL92", "a >"): (ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                 "Invalid MessageSelector: expected a literal, a property or '(', "
                                 "found the end at column 4"),
        ("off", "TAG", "TagA"): (ResponseCode.SUCCESS, ""),
        ("off", "SQL92", "a > 1"): refusal,
        ("off", "SQL92", "a >"): refusal,
    }  # fmt: skip
