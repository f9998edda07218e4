"""QUERY_MESSAGE, GET_CONSUME_STATS, GET_TOPIC_CONFIG and GET_CONSUMER_CONNECTION_LIST on
the broker's remoting port (remoting_front.key_query, admin_queries; store.record_keys).

The pure parts: `record_keys` reads a stored record's keys as RocketMQ's IndexService
indexes them (each KEYS key, UNIQ_KEY) and refuses bytes that are not one record; the
QUERY_MESSAGE header decoder raises only BadField on random field maps; the ConsumeStats
body is fastjson's form with MessageQueue objects as keys (compared as text). The scan runs
over a real store (a temp dir) and is checked against a naive reference (every record of
the topic decoded and filtered) on random keys, time ranges and maxNum; a byte budget
stops it early. On the port: a malformed header of each new code is answered with a remark
and harms neither the store nor the connection; an unserved code is still
REQUEST_CODE_NOT_SUPPORTED. Membership changes of a consumer group notify its members
(NOTIFY_CONSUMER_IDS_CHANGED), on real sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.broker_settings import store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.protocol.messages import RecordPull
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.admin_queries import QueueStats, consume_stats_body
from brokergroup_broker.remoting_front.key_query import (
    DEFAULT_QUERY_MAX_NUM,
    KeyQuery,
    key_query,
    matches,
    run_key_query,
)
from brokergroup_broker.store import MessageInput, MessageStore
from brokergroup_broker.store.message_scan import decode_record
from brokergroup_broker.store.record_keys import NotARecord, record_keys
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import Connection, Credentials, Handler, RemotingClient
from tests.unit.test_broker_remoting_front import ACCESS_KEY, SECRET_KEY, Port, open_port

HOST = ("127.0.0.1", 10911)
T0 = 1_700_000_000_000


class StoreSource:
    """The two reads a key query makes, straight from a real store (all of it readable)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self.pulls = 0

    async def pull_records(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> RecordPull:
        self.pulls += 1
        low, high = self.store.queue_offset_range(topic, queue_id, self.store.max_offset)
        if not low <= queue_offset < high:
            return RecordPull((), queue_offset, low, high)
        got = self.store.get_records(
            topic, queue_id, queue_offset, min(max_count, 32), self.store.max_offset
        )
        return RecordPull(tuple(r for _, r in got), got[-1][0].queue_offset + 1, low, high)

    async def store_timestamp_at(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        got = self.store.get_records(topic, queue_id, queue_offset, 1, self.store.max_offset)
        return got[0][0].store_timestamp_ms if got else None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore.open(tmp_path / "store", store_config_of(BrokerConfig()))
    yield s
    s.close()


def put(store: MessageStore, topic: str, queue_id: int, keys: str | None, uniq: str,
        at_ms: int, body: bytes = b"body") -> None:  # fmt: skip
    props = {"UNIQ_KEY": uniq, "TAGS": "t"}
    if keys is not None:
        props["KEYS"] = keys
    store.put_messages([MessageInput(topic, queue_id, body, props)], HOST, at_ms)


# ---------------------------------------------------------------- pure parts


def test_record_keys_are_the_keys_property_split_on_spaces_and_the_uniq_key(
    store: MessageStore,
) -> None:
    put(store, "T", 0, "order-1  order-2 ", "U1", T0)
    put(store, "T", 0, None, "U2", T0 + 5)
    [(_, r1), (m2, r2)] = store.get_records("T", 0, 0, 2, store.max_offset)
    one, two = record_keys(r1), record_keys(r2)
    assert one.keys == frozenset({"order-1", "order-2", "U1"})
    assert (one.topic, one.store_timestamp_ms, one.physical_offset) == ("T", T0, 0)
    assert two.keys == frozenset({"U2"}) and two.physical_offset == m2.physical_offset
    assert two.store_timestamp_ms == decode_record(r2).store_timestamp_ms == T0 + 5
    for cut in (r1[:10], r1[:-1], r1 + b"x", b"\0" * len(r1)):
        with pytest.raises(NotARecord):
            record_keys(cut)


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_record_keys_raises_only_not_a_record(raw: bytes) -> None:
    with contextlib.suppress(NotARecord):
        record_keys(raw)


QUERY_FIELDS = st.sampled_from(
    ["topic", "key", "maxNum", "beginTimestamp", "endTimestamp", "_UNIQUE_KEY_QUERY",
     "consumerGroup"]
)  # fmt: skip
QUERY_VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str),
    st.sampled_from(["", "-", "true", "1e3", "٣", " 1", "9" * 30]),
)


@settings(deadline=None)
@given(st.dictionaries(QUERY_FIELDS, QUERY_VALUES, max_size=8))
def test_query_header_decoder_raises_only_bad_header(fields: dict[str, str]) -> None:
    with contextlib.suppress(BadField):
        q = key_query(fields)
        assert 0 <= q.max_num <= 64 and q.topic and q.key


def test_query_header_applies_rocketmqs_max_num_rules() -> None:
    fields = {"topic": "T", "key": "k", "maxNum": "1000", "beginTimestamp": "0",
              "endTimestamp": str((1 << 63) - 1)}  # fmt: skip
    assert key_query(fields).max_num == 64  # maxMsgsNumBatch
    assert key_query({**fields, "_UNIQUE_KEY_QUERY": "true"}).max_num == DEFAULT_QUERY_MAX_NUM
    for missing in ("topic", "key", "maxNum", "beginTimestamp", "endTimestamp"):
        with pytest.raises(BadField, match=missing):
            key_query({k: v for k, v in fields.items() if k != missing})


def test_consume_stats_body_is_fastjsons_map_with_message_queue_keys() -> None:
    body = consume_stats_body(
        "broker-a", [QueueStats("T", 0, 10, 7, T0), QueueStats("T", 1, 3, 3, 0)], 0.0
    )
    assert body.decode() == (
        '{"consumeTps":0.0,"offsetTable":{'
        '{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        '{"brokerOffset":10,"consumerOffset":7,"lastTimestamp":1700000000000,"pullOffset":7},'
        '{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        '{"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0,"pullOffset":3}}}'
    )
    assert consume_stats_body("b", [], 0.0) == b'{"consumeTps":0.0,"offsetTable":{}}'


# ---------------------------------------------------------------- the scan, on a real store


def reference(store: MessageStore, q: KeyQuery, queues: int) -> set[bytes]:
    """Every record of the topic, decoded, filtered: what the scan must find (all of it
    when maxNum and the budget allow)."""
    out = set()
    for queue_id in range(queues):
        low, high = store.queue_offset_range(q.topic, queue_id)
        for _, raw in store.get_records(q.topic, queue_id, low, high - low, store.max_offset):
            if matches(record_keys(raw), q):
                out.add(raw)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(st.sampled_from(["T", "Other"]), st.integers(0, 2),
                  st.sampled_from(["a", "b", "a b", "ab", None]), st.integers(0, 50)),
        max_size=60,
    ),
    key=st.sampled_from(["a", "b", "ab", "U3", "zz"]),
    window=st.tuples(st.integers(-5, 60), st.integers(-5, 60)),
    max_num=st.integers(1, 70),
    unique=st.booleans(),
)  # fmt: skip
def test_scan_finds_what_a_full_decode_finds(
    tmp_path_factory: pytest.TempPathFactory,
    rows: list[tuple[str, int, str | None, int]],
    key: str,
    window: tuple[int, int],
    max_num: int,
    unique: bool,
) -> None:
    tmp = tmp_path_factory.mktemp("scan")
    with MessageStore.open(tmp / "store", store_config_of(BrokerConfig())) as s:
        clock = T0
        for i, (topic, queue_id, keys, step) in enumerate(rows):
            clock += step  # store time never goes back on one master
            put(s, topic, queue_id, keys, f"U{i}", clock)
        begin, end = T0 + min(window), T0 + max(window) * 30
        q = KeyQuery("T", key, min(max_num, 64), begin, end, unique=unique)
        want = reference(s, q, 3)
        got = asyncio.run(run_key_query(StoreSource(s), q, 3, budget_bytes=1 << 30))
        assert set(got.records) <= want
        # A message id names one message: the scan stops at its newest copy.
        assert len(got.records) == min(len(want), 1 if unique else q.max_num)
        assert not got.exhausted_budget


async def test_scan_newest_first_stops_at_the_budget(store: MessageStore) -> None:
    for i in range(200):
        put(store, "T", 0, "k", f"U{i}", T0 + i, body=b"x" * 100)
    q = KeyQuery("T", "k", 64, 0, (1 << 63) - 1, unique=False)
    source = StoreSource(store)
    full = await run_key_query(source, q, 1, budget_bytes=1 << 30)
    assert [decode_record(r).queue_offset for r in full.records] == list(range(199, 135, -1))
    assert full.last_timestamp_ms == T0 + 199
    record_bytes = len(full.records[0])
    cut = await run_key_query(source, q, 1, budget_bytes=10 * record_bytes)
    assert [decode_record(r).queue_offset for r in cut.records] == list(range(199, 189, -1))
    assert cut.exhausted_budget and cut.scanned_bytes == 10 * record_bytes
    # Only the queue offsets in the time range are read: a narrow window reads a few records.
    source.pulls = 0
    narrow = KeyQuery("T", "k", 64, T0 + 50, T0 + 52, unique=False)
    got = await run_key_query(source, narrow, 1, budget_bytes=1 << 30)
    assert [decode_record(r).queue_offset for r in got.records] == [52, 51, 50]
    assert source.pulls < 20


# ---------------------------------------------------------------- on the port


@pytest.fixture
async def port(store: MessageStore, tmp_path: Path) -> AsyncIterator[Port]:
    p = await open_port(store, tmp_path, auto_create=True)
    yield p
    await p.client.close()
    await p.server.close()


NEW_CODES = [
    RequestCode.QUERY_MESSAGE,
    RequestCode.GET_CONSUME_STATS,
    RequestCode.GET_TOPIC_CONFIG,
    RequestCode.GET_CONSUMER_CONNECTION_LIST,
]


async def test_malformed_headers_of_the_new_codes_are_answered_and_harm_nothing(
    port: Port, store: MessageStore
) -> None:
    for code in NEW_CODES:
        for fields in ({}, {"topic": "", "consumerGroup": ""}):
            answer = await port.ask(request(code, 0, fields))
            assert answer.code == ResponseCode.SYSTEM_ERROR, (code, answer)
            assert "header field" in (answer.remark or ""), answer
    bad = {"topic": "T", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "z"}
    answer = await port.ask(request(RequestCode.QUERY_MESSAGE, 0, bad))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == "the header field endTimestamp is not a number (a long): 'z'"
    # Still REQUEST_CODE_NOT_SUPPORTED for what is not served; the connection goes on.
    answer = await port.ask(request(RequestCode.QUERY_CONSUME_QUEUE, 0, {}))
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    answer = await port.ask(request(RequestCode.GET_TOPIC_CONFIG, 0, {"topic": "Nowhere"}))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    answer = await port.ask(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, 0,
                                    {"consumerGroup": "nobody"}))  # fmt: skip
    assert answer.code == ResponseCode.CONSUMER_NOT_ONLINE
    assert store.max_offset == 0


async def test_topic_config_and_connections_answer_in_rocketmqs_json(port: Port) -> None:
    await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": "Created"}))
    answer = await port.ask(request(RequestCode.GET_TOPIC_CONFIG, 0, {"topic": "Created",
                                                                     "lo": "true"}))  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS
    assert json.loads(answer.body) == {**wire.topic_config("Created", 4), "mappingDetail": None}
    heartbeat = {"clientID": "c1", "consumerDataSet": [{"groupName": "g"}]}
    await port.ask(request(RequestCode.HEART_BEAT, 0, {}, json.dumps(heartbeat).encode()))
    answer = await port.ask(request(RequestCode.GET_CONSUMER_CONNECTION_LIST, 0,
                                    {"consumerGroup": "g"}))  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS
    assert [c["clientId"] for c in json.loads(answer.body)["connectionSet"]] == ["c1"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    code=st.sampled_from(NEW_CODES),
    fields=st.dictionaries(QUERY_FIELDS, QUERY_VALUES, max_size=8),
    body=st.binary(max_size=32),
)
def test_random_headers_on_the_new_codes_are_answered_without_harm(
    tmp_path_factory: pytest.TempPathFactory, code: int, fields: dict[str, str], body: bytes
) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    with MessageStore.open(tmp / "store", store_config_of(BrokerConfig())) as s:

        async def run() -> None:
            p = await open_port(s, tmp, auto_create=True)
            try:
                answer = await p.ask(request(code, 0, fields, body))
                assert answer.is_response and answer.code in (
                    ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR,
                    ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.TOPIC_NOT_EXIST,
                    ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.QUERY_NOT_FOUND,
                    ResponseCode.NO_PERMISSION,  # an empty value may fail the signature: refused unread
                ), answer  # fmt: skip
                again = await p.ask(request(RequestCode.GET_TOPIC_CONFIG, 0, {"topic": "X"}))
                assert again.code == ResponseCode.TOPIC_NOT_EXIST
            finally:
                await p.client.close()
                await p.server.close()

        asyncio.run(run())
        assert s.max_offset == 0


# ---------------------------------------------------------------- NOTIFY_CONSUMER_IDS_CHANGED


async def test_membership_changes_notify_the_group_so_it_rebalances_now(port: Port) -> None:
    """ConsumerManager → Broker2Client.notifyConsumerIdsChanged: a new member, an
    unregistered one and a closed connection each send the group's remaining members a
    oneway NOTIFY_CONSUMER_IDS_CHANGED; a heartbeat that changes nothing sends none. (A stock
    lite pull consumer rebalances only on it or after 20 s.)"""
    heard: dict[str, asyncio.Queue[str]] = {"c1": asyncio.Queue(), "c2": asyncio.Queue()}

    def member(name: str) -> Handler:
        async def on_notify(cmd: RemotingCommand, _conn: Connection) -> None:
            assert cmd.is_oneway
            heard[name].put_nowait(cmd.fields()["consumerGroup"])

        return on_notify

    async def connect(name: str) -> RemotingClient:
        return await RemotingClient.connect(
            f"127.0.0.1:{port.server.port}",
            credentials=Credentials(ACCESS_KEY, SECRET_KEY),
            handlers={RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: member(name)},
        )

    def beat(name: str) -> RemotingCommand:
        data = {"clientID": name, "consumerDataSet": [{"groupName": "g",
                "messageModel": "CLUSTERING"}]}  # fmt: skip
        return request(RequestCode.HEART_BEAT, 0, {}, json.dumps(data).encode())

    one, two = await connect("c1"), await connect("c2")
    try:
        await one.invoke(beat("c1"))
        assert await asyncio.wait_for(heard["c1"].get(), 5) == "g"  # it joined
        await one.invoke(beat("c1"))  # nothing changed
        await two.invoke(beat("c2"))
        assert await asyncio.wait_for(heard["c2"].get(), 5) == "g"
        assert await asyncio.wait_for(heard["c1"].get(), 5) == "g"
        assert heard["c1"].empty()  # the repeated heartbeat sent nothing
        await two.invoke(request(RequestCode.UNREGISTER_CLIENT, 0,
                                 {"clientID": "c2", "consumerGroup": "g"}))  # fmt: skip
        assert await asyncio.wait_for(heard["c1"].get(), 5) == "g"
        await two.invoke(beat("c2"))
        await asyncio.wait_for(heard["c1"].get(), 5)
        await two.close()  # its connection closes: c1 hears again
        assert await asyncio.wait_for(heard["c1"].get(), 5) == "g"
    finally:
        await one.close()
        await two.close()
