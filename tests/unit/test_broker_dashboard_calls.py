"""The admin calls the RocketMQ dashboard and rocketmq-exporter make, on the broker's
remoting port (issue 33 item 6): QUERY_TOPIC_CONSUME_BY_WHO, VIEW_BROKER_STATS_DATA,
GET_PRODUCER_CONNECTION_LIST, GET_BROKER_CONSUME_STATS (dashboard.py),
GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY (client_calls.py),
INVOKE_BROKER_TO_RESET_OFFSET (offset_reset.py), and what GET_CONSUMER_CONNECTION_LIST now
shows of a heartbeat (clients.py, consumers.py).

On real sockets against a confirmed master (a real store and produce path, the front and
the broker's counters on one injected clock), each answer's body is decoded as the stock
client decodes it (fastjson: maps keyed by MessageQueue objects included, `fastjson_loads`)
and compared field by field with what was sent, stored or committed. A consumer is a
RemotingClient that serves the broker's calls (as the stock client's
ClientRemotingProcessor does). On the code before (08e4c59) every one of these codes was
REQUEST_CODE_NOT_SUPPORTED, and the connection list named only clientIds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.core.broker import Broker
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.remoting_front import (
    FrontSettings,
    RemotingFront,
    RemotingFrontServer,
    wire,
)
from brokergroup_broker.remoting_front.clients import (
    CHANNEL_EXPIRED_MS,
    RESET_EXPIRED_MS,
    ClientInfo,
    ConsumerData,
    ConsumerGroups,
    MemberBounds,
    PendingResets,
    ProducerGroups,
)
from brokergroup_broker.remoting_front.consumers import consumer_data_of
from brokergroup_remoting import LanguageCode, RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import Connection, Credentials, Handler, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master
from tests.unit.conftest import eventually

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
TOPIC = "DashTopic"
STORE_HOST = ("127.0.0.1", 10911)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


# ---------------------------------------------------------------- fastjson's maps


def fastjson_loads(text: str) -> Any:
    """JSON as fastjson writes it, where a map key may be an object (a MessageQueue): such
    a key becomes a tuple of its sorted items, so tests compare content, not text."""
    pos = 0

    def ws() -> None:
        nonlocal pos
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1

    def value() -> Any:
        nonlocal pos
        ws()
        if text[pos] == "{":
            pos += 1
            out: dict[Any, Any] = {}
            ws()
            if text[pos] == "}":
                pos += 1
                return out
            while True:
                key = value()
                if isinstance(key, dict):
                    key = tuple(sorted(key.items()))
                ws()
                assert text[pos] == ":", text[pos:]
                pos += 1
                out[key] = value()
                ws()
                pos += 1
                if text[pos - 1] == "}":
                    return out
        if text[pos] == "[":
            pos += 1
            items: list[Any] = []
            ws()
            if text[pos] == "]":
                pos += 1
                return items
            while True:
                items.append(value())
                ws()
                pos += 1
                if text[pos - 1] == "]":
                    return items
        got, end = json.JSONDecoder().raw_decode(text, pos)
        pos = end
        return got

    result = value()
    ws()
    assert pos == len(text)
    return result


def mq(topic: str, queue_id: int, broker: str = "broker-a") -> tuple[tuple[str, Any], ...]:
    return (("brokerName", broker), ("queueId", queue_id), ("topic", topic))


# ---------------------------------------------------------------- pure tables


def test_members_keep_their_client_info_and_groups_their_latest_consumer_data() -> None:
    groups = ConsumerGroups()
    info = ClientInfo("10.0.0.7:50000", "JAVA", 485)
    data = ConsumerData("CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET",
                        (("T1", '{"topic":"T1"}'),))  # fmt: skip
    assert groups.heartbeat("g", "c1", 1, 0, info) and groups.describe("g", data)
    assert groups.member_infos("g", 0) == [("c1", info)]
    assert groups.connection_of("g", "c1", 0) == 1 and groups.connection_of("g", "c2", 0) is None
    assert groups.subscribers("T1") == ["g"] and groups.subscribers("T2") == []
    newer = ConsumerData("CONSUME_PASSIVELY", "CLUSTERING", None, (("T2", '{"topic":"T2"}'),))
    assert groups.describe("g", newer)
    assert groups.subscribers("T1") == [] and groups.subscribers("T2") == ["g"]
    # Its last member gone, the group's consumer data goes; it stays known (offsets).
    assert groups.connection_of("g", "c1", CHANNEL_EXPIRED_MS + 1) is None
    groups.unregister("g", "c1")
    assert groups.consumer_data == {} and groups.subscribers("T2") == [] and groups.known("g")
    assert not groups.describe("nobody", data)  # no member: nothing kept


def test_consumer_data_is_bounded_in_bytes_across_groups() -> None:
    groups = ConsumerGroups(MemberBounds(consumer_data_bytes=100))
    big = ConsumerData(None, None, None, (("T", "x" * 90),))  # 91 bytes
    assert groups.heartbeat("a", "c", 1, 0) and groups.heartbeat("b", "c", 1, 0)
    assert groups.describe("a", big)
    assert groups.data_refusal("b", big) == (
        "the consumer data of all groups would take 182 bytes on this broker (at most 100)"
    )
    assert not groups.describe("b", big) and "b" not in groups.consumer_data
    assert groups.describe("a", big)  # replacing its own takes no more room
    groups.drop_connection(1)
    assert groups.describe("b", big) is False  # no member any more
    assert groups.heartbeat("b", "c", 2, 0) and groups.describe("b", big)


def test_producers_are_members_of_their_groups_like_consumers() -> None:
    producers = ProducerGroups(MemberBounds(per_connection=2))
    assert producers.heartbeat("P", "c1", 1, 0, ClientInfo("a:1", "GO", 7))
    assert producers.heartbeat("CLIENT_INNER_PRODUCER", "c1", 1, 0)
    assert producers.refusal("P2", "c1", 1, 0) == (
        "this connection already holds 2 producer members (group, clientId); "
        "at most 2 per connection"
    )
    assert producers.member_infos("P", 0) == [("c1", ClientInfo("a:1", "GO", 7))]
    assert producers.drop_connection(1) == ["CLIENT_INNER_PRODUCER", "P"]
    assert producers.member_infos("P", 0) == []


def test_pending_resets_are_taken_once_expire_and_are_bounded() -> None:
    resets = PendingResets(max_resets=2)
    resets.assign("g", "T", 0, 5, 0)
    assert resets.pending("g", "T", 0, 0) == 5 and resets.pending("g", "T", 1, 0) is None
    assert resets.take("g", "T", 0, 0) == 5 and resets.take("g", "T", 0, 0) is None
    resets.assign("g", "T", 0, 1, 0)
    resets.assign("g", "T", 1, 2, 1)
    resets.assign("g", "T", 2, 3, 2)  # over the bound: the oldest goes
    assert [resets.pending("g", "T", q, 2) for q in range(3)] == [None, 2, 3]
    assert resets.pending("g", "T", 1, 1 + RESET_EXPIRED_MS + 1) is None
    assert resets.purge(2 + RESET_EXPIRED_MS + 1) == 2 and len(resets) == 0


def test_consumer_data_of_a_heartbeat_is_checked_and_written_as_rocketmqs_json() -> None:
    data = consumer_data_of({
        "groupName": "g", "consumeType": "CONSUME_ACTIVELY", "messageModel": "BROADCASTING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [
            {"topic": "T", "subString": "a || b", "tagsSet": ["a", "b"], "codeSet": [97, 98],
             "subVersion": 17, "expressionType": "TAG", "classFilterMode": False,
             "filterClassSource": "dropped", "extra": 1},
            {"topic": "%RETRY%g", "subString": "*"},
        ],
    })  # fmt: skip
    assert (data.consume_type, data.message_model, data.consume_from_where) == (
        "CONSUME_ACTIVELY", "BROADCASTING", "CONSUME_FROM_FIRST_OFFSET")  # fmt: skip
    assert [t for t, _ in data.subscriptions] == ["%RETRY%g", "T"]
    assert json.loads(dict(data.subscriptions)["T"]) == {
        "topic": "T", "subString": "a || b", "tagsSet": ["a", "b"], "codeSet": [97, 98],
        "subVersion": 17, "expressionType": "TAG", "classFilterMode": False,
    }  # fmt: skip
    for bad in (
        {"consumeType": "PULL_ALL"},
        {"messageModel": 3},
        {"subscriptionDataSet": [{"topic": "bad topic"}]},
        {"subscriptionDataSet": [{"topic": "T", "tagsSet": [1]}]},
        {"subscriptionDataSet": [{"topic": "T", "subString": "x" * 5000}]},
        {"subscriptionDataSet": [{"topic": "T", "subVersion": "1"}]},
        {"subscriptionDataSet": "T"},
    ):
        with pytest.raises(BadField):
            consumer_data_of({"groupName": "g", **bad})


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(
    st.sampled_from(["consumeType", "messageModel", "consumeFromWhere", "subscriptionDataSet"]),
    JSONISH | st.lists(st.dictionaries(st.sampled_from(
        ["topic", "subString", "tagsSet", "codeSet", "subVersion", "expressionType",
         "classFilterMode"]), JSONISH), max_size=3),
))  # fmt: skip
def test_consumer_data_decoder_raises_only_bad_field(consumer: dict[str, Any]) -> None:
    with contextlib.suppress(BadField):
        consumer_data_of(consumer)


# ---------------------------------------------------------------- on the port


class Port:
    def __init__(self, broker: Broker, server: RemotingFrontServer, clock: Clock) -> None:
        self.broker = broker
        self.server = server
        self.front: RemotingFront = server.front
        self.clock = clock
        assert broker.parts is not None
        self.parts = broker.parts
        self.address = f"127.0.0.1:{server.port}"

    async def client(self, handlers: dict[int, Handler] | None = None) -> RemotingClient:
        return await RemotingClient.connect(
            self.address, credentials=Credentials(ACCESS_KEY, SECRET_KEY), handlers=handlers
        )

    async def send(self, topic: str, queue_id: int, count: int) -> None:
        for i in range(count):
            await self.parts.produce.send_messages(
                topic, queue_id, [ProduceMessage(topic, f"m{i}".encode())]
            )


@pytest.fixture
async def make_port(tmp_path: Path) -> AsyncIterator[Callable[[], Awaitable[Port]]]:
    """A registered broker 1, confirmed master of SyncStateSet {1}, its remoting port, the
    front and the broker's counters on one fake clock."""
    clock = Clock()
    servers: list[RemotingFrontServer] = []
    async with confirmed_master(tmp_path, stats=BrokerStats(clock, cluster_name="C")) as m:
        broker, parts = m.broker, m.parts

        async def make() -> Port:
            front = RemotingFront(
                parts.produce, FrontSettings("C", "broker-a", STORE_HOST, True),
                clock_ms=clock, stats=broker.stats,
            )  # fmt: skip
            server = RemotingFrontServer(front, ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
            await server.start("127.0.0.1", 0)
            servers.append(server)
            return Port(broker, server, clock)

        yield make
        for server in servers:
            await server.close()


def heartbeat(client_id: str, consumers: list[dict[str, Any]],
              producers: tuple[str, ...] = ()) -> RemotingCommand:  # fmt: skip
    data = {
        "clientID": client_id,
        "consumerDataSet": consumers,
        "producerDataSet": [{"groupName": g} for g in producers],
    }
    return request(RequestCode.HEART_BEAT, 0, {}, json.dumps(data).encode(),
                   language=LanguageCode.GO, version=493)  # fmt: skip


def consumer(group: str, *topics: str) -> dict[str, Any]:
    return {
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        "subscriptionDataSet": [
            {"topic": t, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 5,
             "expressionType": "TAG", "classFilterMode": False} for t in topics
        ],
    }  # fmt: skip


def local_address(client: RemotingClient) -> str:
    host, port = client.connection.transport.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


async def test_connection_lists_show_each_member_and_the_groups_consumer_data(
    make_port: Callable[[], Awaitable[Port]],
) -> None:
    port = await make_port()
    app = await port.client()
    admin = await port.client()
    try:
        answer = await app.invoke(
            heartbeat("10.1.1.1@app", [consumer("cg", TOPIC)], ("pg", "CLIENT_INNER_PRODUCER"))
        )
        assert answer.code == ResponseCode.SUCCESS
        me = {"clientId": "10.1.1.1@app", "clientAddr": local_address(app), "language": "GO",
              "version": 493}  # fmt: skip
        got = await admin.invoke(request(RequestCode.GET_PRODUCER_CONNECTION_LIST, 0,
                                         {"producerGroup": "pg"}))  # fmt: skip
        assert got.code == ResponseCode.SUCCESS
        assert json.loads(got.body) == {"connectionSet": [me]}
        got = await admin.invoke(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, 0,
                                         {"consumerGroup": "cg"}))  # fmt: skip
        assert got.code == ResponseCode.SUCCESS
        assert json.loads(got.body) == {
            "connectionSet": [me],
            "subscriptionTable": {TOPIC: {
                "topic": TOPIC, "subString": "*", "tagsSet": [], "codeSet": [],
                "subVersion": 5, "expressionType": "TAG", "classFilterMode": False}},
            "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
        }  # fmt: skip
        # UNREGISTER_CLIENT with its producer group: that producer is gone.
        await app.invoke(request(RequestCode.UNREGISTER_CLIENT, 0,
                                 {"clientID": "10.1.1.1@app", "producerGroup": "pg"}))  # fmt: skip
        got = await admin.invoke(request(RequestCode.GET_PRODUCER_CONNECTION_LIST, 0,
                                         {"producerGroup": "pg"}))  # fmt: skip
        assert (got.code, got.remark) == (ResponseCode.SYSTEM_ERROR,
                                          "the producer group[pg] not exist")  # fmt: skip
        # Its connection closed: the inner producer and the consumer are gone too.
        await app.close()
        await eventually(lambda: not port.front.consumers.groups, "the consumer forgotten")
        got = await admin.invoke(request(RequestCode.GET_PRODUCER_CONNECTION_LIST, 0,
                                         {"producerGroup": "CLIENT_INNER_PRODUCER"}))  # fmt: skip
        assert got.code == ResponseCode.SYSTEM_ERROR
        got = await admin.invoke(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, 0,
                                         {"consumerGroup": "cg"}))  # fmt: skip
        assert got.code == ResponseCode.CONSUMER_NOT_ONLINE
    finally:
        await app.close()
        await admin.close()


async def test_who_consumes_a_topic_stats_data_and_broker_consume_stats(
    make_port: Callable[[], Awaitable[Port]],
) -> None:
    port = await make_port()
    app = await port.client()
    try:
        await port.send(TOPIC, 0, 5)
        await port.send(TOPIC, 1, 3)
        await app.invoke(heartbeat("c1", [consumer("online", TOPIC)]))
        # "offline" left an offset behind; "online" subscribes but committed none yet.
        await port.parts.produce.commit_consumer_offset("offline", TOPIC, 0, 2)
        await port.parts.produce.commit_consumer_offset("offline", "Other", 0, 0)
        got = await app.invoke(request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, 0,
                                       {"topic": TOPIC}))  # fmt: skip
        assert json.loads(got.body) == {"groupList": ["offline", "online"]}

        # The broker's counters: 8 puts of TOPIC in this minute's samples.
        port.clock.ms += 10_001
        port.broker.stats.on_get("offline", TOPIC, 2, 4)
        port.clock.ms += 10_001
        got = await app.invoke(request(RequestCode.VIEW_BROKER_STATS_DATA, 0,
                                       {"statsName": "TOPIC_PUT_NUMS", "statsKey": TOPIC}))  # fmt: skip
        assert got.code == ResponseCode.SUCCESS, got
        body = json.loads(got.body)
        assert set(body) == {"statsMinute", "statsHour", "statsDay"}
        expected = port.broker.stats.item("TOPIC_PUT_NUMS", TOPIC)
        assert expected is not None and expected.minute.sum == 8
        for window, name in ((expected.minute, "statsMinute"), (expected.hour, "statsHour"),
                             (expected.day, "statsDay")):  # fmt: skip
            assert body[name] == {"sum": window.sum, "tps": window.tps, "avgpt": window.avgpt}
        got = await app.invoke(request(RequestCode.VIEW_BROKER_STATS_DATA, 0,
                                       {"statsName": "GROUP_GET_NUMS", "statsKey": "X@y"}))  # fmt: skip
        assert (got.code, got.remark) == (ResponseCode.SYSTEM_ERROR,
                                          "The stats <GROUP_GET_NUMS> <X@y> not exist")  # fmt: skip

        got = await app.invoke(request(RequestCode.GET_BROKER_CONSUME_STATS, 0,
                                       {"isOrder": "false"}))  # fmt: skip
        assert got.code == ResponseCode.SUCCESS
        stats = fastjson_loads(got.body.decode())
        gets = port.broker.stats.item("GROUP_GET_NUMS", f"{TOPIC}@offline")
        assert gets is not None
        queues = {
            mq(TOPIC, q): {"brokerOffset": high, "consumerOffset": committed,
                           "pullOffset": committed, "lastTimestamp": last}
            for q, high, committed, last in (
                (0, 5, 2, await port.parts.produce.store_timestamp_at(TOPIC, 0, 1)),
                (1, 3, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0))
        }  # fmt: skip
        assert stats == {
            "brokerAddr": "127.0.0.1:10911",
            # "Other" is not served here; "online" holds no offset.
            "consumeStatsList": [
                {"offline": [{"consumeTps": gets.minute.tps, "offsetTable": queues}]},
                {"online": []},
            ],
            "totalDiff": (5 - 2) + 3,
            "totalInflightDiff": 0,
        }
        got = await app.invoke(request(RequestCode.GET_BROKER_CONSUME_STATS, 0,
                                       {"isOrder": "true"}))  # fmt: skip
        assert fastjson_loads(got.body.decode())["consumeStatsList"] == [
            {"offline": []}, {"online": []}]  # fmt: skip
        # GET_CONSUME_STATS's consumeTps is the group's get rate too.
        got = await app.invoke(request(RequestCode.GET_CONSUME_STATS, 0,
                                       {"consumerGroup": "offline", "topic": TOPIC}))  # fmt: skip
        assert fastjson_loads(got.body.decode())["consumeTps"] == gets.minute.tps > 0
    finally:
        await app.close()


async def store_times(port: Port, topic: str, queue_id: int, count: int) -> list[int]:
    out = []
    for offset in range(count):
        at = await port.parts.produce.store_timestamp_at(topic, queue_id, offset)
        assert at is not None
        out.append(at)
    return out


def pull(group: str, topic: str, queue_id: int, offset: int, commit: int = -1) -> RemotingCommand:
    flag = wire.PULL_FLAG_COMMIT_OFFSET if commit >= 0 else 0
    return request(RequestCode.PULL_MESSAGE, 0, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": str(flag),
        "commitOffset": str(commit), "suspendTimeoutMillis": "0",
    })  # fmt: skip


async def committed(client: RemotingClient, group: str, topic: str, queue_id: int) -> int:
    got = await client.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, 0, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id)}))  # fmt: skip
    return int(got.fields()["offset"])


async def test_reset_by_time_commits_the_offsets_and_the_next_pull_moves_the_consumer(
    make_port: Callable[[], Awaitable[Port]],
) -> None:
    port = await make_port()
    app = await port.client()
    try:
        await port.send(TOPIC, 0, 6)
        await port.send(TOPIC, 1, 4)
        await app.invoke(heartbeat("c1", [consumer("g", TOPIC)]))
        for q, offset in ((0, 6), (1, 4)):
            await app.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, 0, {
                "consumerGroup": "g", "topic": TOPIC, "queueId": str(q),
                "commitOffset": str(offset)}))  # fmt: skip
        times0, times1 = await store_times(port, TOPIC, 0, 6), await store_times(port, TOPIC, 1, 4)
        at = times0[3]

        def first_at_or_after(times: list[int]) -> int:  # the reference: a linear scan
            return next((i for i, t in enumerate(times) if t >= at), len(times))

        got = await app.invoke(request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 0, {
            "topic": TOPIC, "group": "g", "timestamp": str(at), "isForce": "true",
            "offset": "-1"}))  # fmt: skip
        assert got.code == ResponseCode.SUCCESS, got
        want = {0: first_at_or_after(times0), 1: first_at_or_after(times1), 2: 0, 3: 0}
        assert want[0] <= 3
        assert fastjson_loads(got.body.decode()) == {
            "offsetTable": {mq(TOPIC, q): o for q, o in want.items()}}  # fmt: skip
        assert [await committed(app, "g", TOPIC, q) for q in range(4)] == list(want.values())

        # The consumer's own offset predates the reset: ignored until its next pull.
        got = await app.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, 0, {
            "consumerGroup": "g", "topic": TOPIC, "queueId": "0", "commitOffset": "6"}))  # fmt: skip
        assert (got.code, got.remark) == (ResponseCode.SUCCESS, "Offset has been previously reset")
        assert await committed(app, "g", TOPIC, 0) == want[0]
        moved = await app.invoke(pull("g", TOPIC, 0, 6, commit=6))
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED
        assert moved.fields() == {"suggestWhichBrokerId": "0", "nextBeginOffset": str(want[0]),
                                  "minOffset": "0", "maxOffset": "6"}  # fmt: skip
        assert await committed(app, "g", TOPIC, 0) == want[0]  # the pull's commit ignored
        again = await app.invoke(pull("g", TOPIC, 0, want[0]))
        assert again.code == ResponseCode.SUCCESS
        bodies = [m.body for m in wire_records(again.body)]
        assert bodies == [f"m{i}".encode() for i in range(want[0], 6)]
        # Told once: commits move the queue again.
        await app.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, 0, {
            "consumerGroup": "g", "topic": TOPIC, "queueId": "0", "commitOffset": "5"}))  # fmt: skip
        assert await committed(app, "g", TOPIC, 0) == 5

        # One queue to a given offset; a timestamp < 0 is the end of every queue.
        got = await app.invoke(request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 0, {
            "topic": TOPIC, "group": "g", "timestamp": "0", "queueId": "1",
            "offset": "2"}))  # fmt: skip
        assert fastjson_loads(got.body.decode()) == {"offsetTable": {mq(TOPIC, 1): 2}}
        got = await app.invoke(request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 0, {
            "topic": TOPIC, "group": "g", "timestamp": "-1"}))  # fmt: skip
        assert fastjson_loads(got.body.decode())["offsetTable"] == {
            mq(TOPIC, 0): 6, mq(TOPIC, 1): 4, mq(TOPIC, 2): 0, mq(TOPIC, 3): 0}  # fmt: skip

        # Refusals, nothing written.
        for fields, code, remark in (
            ({"topic": "Nowhere", "group": "g"}, ResponseCode.TOPIC_NOT_EXIST,
             "Topic Nowhere does not exist"),
            ({"topic": TOPIC, "group": "never"}, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
             "Group never does not exist"),
            ({"topic": TOPIC, "group": "g", "queueId": "0", "offset": "7"},
             ResponseCode.SYSTEM_ERROR, "Target offset 7 not in consume queue range [0-6]"),
            ({"topic": TOPIC, "group": "g", "queueId": "9"}, ResponseCode.SYSTEM_ERROR,
             f"queueId 9 is illegal: {TOPIC} has 4 queues"),
        ):  # fmt: skip
            got = await app.invoke(request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, 0,
                                           {"timestamp": "0", **fields}))  # fmt: skip
            assert (got.code, got.remark) == (code, remark)
        assert [await committed(app, "g", TOPIC, q) for q in range(2)] == [6, 4]
    finally:
        await app.close()


def wire_records(body: bytes) -> list[Any]:
    from brokergroup_broker.store.message_scan import decode_record

    out, pos = [], 0
    while pos < len(body):
        size = int.from_bytes(body[pos : pos + 4], "big")
        out.append(decode_record(body[pos : pos + size], 0))
        pos += size
    return out


async def test_running_info_and_direct_consume_are_asked_of_the_consumer_and_relayed(
    make_port: Callable[[], Awaitable[Port]],
) -> None:
    port = await make_port()
    asked: asyncio.Queue[RemotingCommand] = asyncio.Queue()

    async def answer(cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
        asked.put_nowait(cmd)
        if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            body = {"properties": {"PROP_CONSUMER_START_TIMESTAMP": "1"}, "jstack": None}
            return response_to(cmd, ResponseCode.SUCCESS, None, None, json.dumps(body).encode())
        return response_to(cmd, ResponseCode.SUCCESS, "consumed", {"x": "1"},
                           b'{"consumeResult":"CR_SUCCESS","order":false}')  # fmt: skip

    async def hang_up(cmd: RemotingCommand, conn: Connection) -> None:
        await conn.close()

    app = await port.client({RequestCode.GET_CONSUMER_RUNNING_INFO: answer,
                             RequestCode.CONSUME_MESSAGE_DIRECTLY: answer})  # fmt: skip
    leaving = await port.client({RequestCode.GET_CONSUMER_RUNNING_INFO: hang_up})
    admin = await port.client()
    try:
        await port.send(TOPIC, 2, 2)
        await app.invoke(heartbeat("c1", [consumer("g", TOPIC)]))
        await leaving.invoke(heartbeat("c2", [consumer("g", TOPIC)]))
        fields = {"consumerGroup": "g", "clientId": "c1", "jstackEnable": "false"}
        got = await admin.invoke(request(RequestCode.GET_CONSUMER_RUNNING_INFO, 0, fields))
        assert got.code == ResponseCode.SUCCESS
        assert json.loads(got.body) == {
            "properties": {"PROP_CONSUMER_START_TIMESTAMP": "1"}, "jstack": None}  # fmt: skip
        seen = asked.get_nowait()
        assert seen.code == RequestCode.GET_CONSUMER_RUNNING_INFO and seen.fields() == fields

        first = await port.parts.produce.message_at(0)
        assert first is not None
        raw = first[1]
        second = await port.parts.produce.message_at(len(raw))
        assert second is not None
        msg_id = wire.offset_message_id(STORE_HOST, second[0].physical_offset)
        got = await admin.invoke(request(RequestCode.CONSUME_MESSAGE_DIRECTLY, 0, {
            "consumerGroup": "g", "clientId": "c1", "msgId": msg_id, "topic": TOPIC}))  # fmt: skip
        assert (got.code, got.remark, got.fields()) == (ResponseCode.SUCCESS, "consumed",
                                                        {"x": "1"})  # fmt: skip
        assert json.loads(got.body) == {"consumeResult": "CR_SUCCESS", "order": False}
        seen = asked.get_nowait()
        assert seen.body == second[1]  # the stored record, as stored
        assert seen.fields() == {
            "consumerGroup": "g", "clientId": "c1", "msgId": msg_id, "topic": TOPIC,
            "brokerName": "broker-a", "topicSysFlag": "0", "groupSysFlag": "0"}  # fmt: skip

        got = await admin.invoke(request(RequestCode.GET_CONSUMER_RUNNING_INFO, 0,
                                         {"consumerGroup": "g", "clientId": "c9"}))  # fmt: skip
        assert (got.code, got.remark) == (ResponseCode.SYSTEM_ERROR,
                                          "The Consumer <g> <c9> not online")  # fmt: skip
        got = await admin.invoke(request(RequestCode.GET_CONSUMER_RUNNING_INFO, 0,
                                         {"consumerGroup": "g", "clientId": "c2"}))  # fmt: skip
        assert got.code == ResponseCode.SYSTEM_ERROR
        assert (got.remark or "").startswith("invoke consumer <g> <c2> Exception: ")
    finally:
        for c in (app, leaving, admin):
            await c.close()
