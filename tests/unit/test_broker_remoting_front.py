"""The broker's RocketMQ remoting front end (brokergroup_broker.remoting_front).

The pure layer (`wire`): SendMessageRequestHeader(V2), PullMessageRequestHeader and the
queue headers decode what a stock client sends and refuse anything else with `BadField`
only (hypothesis over structured field maps); MessageDecoder's batch body and offset
message ids round-trip; the registration body is what the name server's own parser
accepts. The consumer-group and queue-lock tables (`clients`).

Then the port itself on a real socket, over a real `ProducePath` (real store in a temp dir)
whose role is not confirmed yet, as every broker starts: a signed send is refused with
SERVICE_NOT_AVAILABLE (the not-master answer) and nothing is appended; a send to an unknown
topic with auto-creation off is TOPIC_NOT_EXIST; a bad signature is NO_PERMISSION before
the header is read; an unknown code is REQUEST_CODE_NOT_SUPPORTED with a remark; random
headers on every served code are answered and leave the store and the connection usable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.broker_settings import BrokerSettings, ha_config_of, store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import ControllerLink
from brokergroup_broker.core.lease import MasterLease
from brokergroup_broker.core.produce import ProducePath
from brokergroup_broker.core.replication import ReplicationLink
from brokergroup_broker.core.role_core import RoleCore
from brokergroup_broker.core.store_faults import StoreFaults
from brokergroup_broker.remoting_front import (
    FrontSettings,
    RemotingFront,
    RemotingFrontServer,
    wire,
)
from brokergroup_broker.remoting_front.clients import (
    CHANNEL_EXPIRED_MS,
    LOCK_EXPIRED_MS,
    ConsumerGroups,
    QueueLocks,
)
from brokergroup_broker.remoting_front.namesrv_link import Registration, register_body
from brokergroup_broker.store import MessageStore
from brokergroup_controller.client import ControllerClient
from brokergroup_controller.namesrv import bodies
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
V2_SEND = {
    "a": "pg", "b": "TopicA", "c": "TBW102", "d": "4", "e": "1", "f": "0",
    "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01ABC\x02TAGS\x01TagA\x02", "j": "0",
    "k": "false", "m": "false", "n": "broker-a",
}  # fmt: skip


# ---------------------------------------------------------------- the pure layer


def test_v2_send_header_decodes_like_the_long_one() -> None:
    long_names = {
        "producerGroup": "pg", "topic": "TopicA", "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4", "queueId": "1", "sysFlag": "0",
        "bornTimestamp": "1700000000000", "flag": "0",
        "properties": "UNIQ_KEY\x01ABC\x02TAGS\x01TagA\x02", "reconsumeTimes": "0",
    }  # fmt: skip
    v2 = wire.send_request(V2_SEND, v2=True)
    assert v2 == wire.send_request(long_names, v2=False)
    assert v2.topic == "TopicA" and v2.queue_id == 1
    assert v2.properties == {"UNIQ_KEY": "ABC", "TAGS": "TagA"}
    assert wire.decode_properties(wire.encode_properties(v2.properties)) == v2.properties


FIELD_NAMES = st.sampled_from(
    [*"abcdefghijklmn", "consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums",
     "sysFlag", "commitOffset", "suspendTimeoutMillis", "timestamp"]
)  # fmt: skip
FIELD_VALUES = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(1 << 70), max_value=1 << 70).map(str),
    st.sampled_from(["", "-", "true", "1e3", "٣", " 1", "9" * 30]),
)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(FIELD_NAMES, FIELD_VALUES, max_size=16))
def test_header_decoders_raise_only_bad_header(fields: dict[str, str]) -> None:
    for decode in (
        lambda f: wire.send_request(f, v2=True),
        lambda f: wire.send_request(f, v2=False),
        wire.pull_request,
        wire.queue_ref,
    ):
        with contextlib.suppress(BadField):
            decode(fields)


def java_batch(messages: list[tuple[int, bytes, str]]) -> bytes:
    """MessageDecoder.encodeMessages, written out as Java does."""
    out = b""
    for flag, body, props in messages:
        raw_props = props.encode()
        total = 4 + 4 + 4 + 4 + 4 + len(body) + 2 + len(raw_props)
        out += struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(raw_props)) + raw_props
    return out


def test_batch_body_round_trips_and_refuses_cut_or_oversized_input() -> None:
    body = java_batch([(0, b"one", "KEYS\x01k1\x02"), (0, b"", ""), (0, b"three" * 100, "")])
    got = wire.decode_batch_body(body, max_messages=8)
    assert [(m.body, m.properties) for m in got] == [
        (b"one", {"KEYS": "k1"}), (b"", {}), (b"three" * 100, {}),
    ]  # fmt: skip
    with pytest.raises(BadField, match="more than 2"):
        wire.decode_batch_body(body, max_messages=2)
    first = len(java_batch([(0, b"one", "KEYS\x01k1\x02")]))
    boundaries = {first, first + len(java_batch([(0, b"", "")]))}
    for cut in set(range(1, len(body))) - boundaries:  # a cut inside a message
        with pytest.raises(BadField):
            wire.decode_batch_body(body[:cut], max_messages=8)
    with pytest.raises(BadField):
        wire.decode_batch_body(b"", max_messages=8)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_batch_decoder_raises_only_bad_header(body: bytes) -> None:
    with contextlib.suppress(BadField):
        wire.decode_batch_body(body, max_messages=16)


def test_offset_message_id_is_javas() -> None:
    # MessageDecoder.createMessageId(127.0.0.1:10911, 1234): ip, port, offset in upper hex.
    msg_id = wire.offset_message_id(("127.0.0.1", 10911), 1234)
    assert msg_id == "7F00000100002A9F00000000000004D2"
    assert wire.decode_message_id(msg_id) == ("127.0.0.1", 10911, 1234)
    with pytest.raises(BadField):
        wire.decode_message_id("nothex")


@given(
    st.sampled_from(["127.0.1.172", "10.244.3.9", "::1", "fd00::17"]),
    st.integers(0, 65535),
    st.lists(st.integers(0, (1 << 63) - 1), max_size=20),
)
def test_a_batch_answers_one_message_id_per_offset_in_order(
    host: str, port: int, offsets: list[int]
) -> None:
    ids = wire.offset_message_ids((host, port), offsets)
    assert [wire.decode_message_id(i) for i in ids] == [(host, port, o) for o in offsets]


def test_registration_body_is_what_the_name_server_parses() -> None:
    reg = Registration("DefaultCluster", "broker-a", 2, "127.0.0.10:10914",
                       "127.0.0.10:10912", True, 4)  # fmt: skip
    body = register_body(reg, {"TopicA": 4, "%RETRY%g": 1}, 3, 1700000000000)
    version, topics = bodies.decode_register_body(body, False)
    assert version.counter == 3
    assert topics["TopicA"].write_queue_nums == 4 and topics["TopicA"].perm == 6
    assert topics["TBW102"].perm == 7
    assert {"SELF_TEST_TOPIC", "DefaultCluster", "broker-a", "%RETRY%g"} <= set(topics)
    off = register_body(Registration("C", "b", 1, "h:1", "h:2", False, 4), {}, 1, 0)
    assert "TBW102" not in bodies.decode_register_body(off, False)[1]


def test_consumer_groups_expire_unregister_and_follow_connections() -> None:
    groups = ConsumerGroups()
    assert groups.heartbeat("g", "c1", 1, 0) and groups.heartbeat("g", "c2", 2, 0)
    assert groups.members("g", 1000) == ["c1", "c2"]
    groups.drop_connection(2)
    assert groups.members("g", 1000) == ["c1"]
    assert groups.members("g", CHANNEL_EXPIRED_MS + 1) == []
    groups.heartbeat("g", "c3", 3, 0)
    groups.unregister("g", "c3")
    assert groups.members("g", 0) == [] and groups.groups == {}


def test_queue_locks_belong_to_one_client_until_unlocked_or_expired() -> None:
    locks = QueueLocks()
    q = ("g", "T", "broker-a", 0)
    assert locks.lock([q], "c1", 0) == [q]
    assert locks.lock([q], "c2", 1000) == []
    assert locks.lock([q], "c1", 2000) == [q]  # renewal
    locks.unlock([q], "c2")  # not the owner: no effect
    assert locks.lock([q], "c2", 3000) == []
    assert locks.lock([q], "c2", 2000 + LOCK_EXPIRED_MS + 1) == [q]


# ---------------------------------------------------------------- the port


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    config = BrokerConfig()
    s = MessageStore.open(tmp_path / "store", store_config_of(config))
    yield s
    s.close()


def unconfirmed_produce_path(store: MessageStore, tmp_path: Path) -> ProducePath:
    """A broker's real produce path before the controller confirmed its role."""
    config = BrokerConfig()
    settings = BrokerSettings("C", "broker-a", tmp_path, ("127.0.0.1:1",), None,
                              "127.0.0.1", "127.0.0.1")  # fmt: skip
    role, lease = RoleCore(), MasterLease(config.master_lease_ms)
    link = ControllerLink(ControllerClient(["127.0.0.1:1"]), "C", "broker-a")
    replication = ReplicationLink(
        broker_id=1, config=config, ha_config=ha_config_of(config), ha_bind=("127.0.0.1", 0),
        store=store, role=role, lease=lease, controller=link, registered_host=lambda _: None,
    )  # fmt: skip
    return ProducePath(
        settings=settings, config=config, store=store, role=role, lease=lease,
        replication=replication, faults=StoreFaults(), committer=None, heartbeat_now=lambda: None,
    )  # fmt: skip


class Port:
    def __init__(self, server: RemotingFrontServer, client: RemotingClient) -> None:
        self.server = server
        self.client = client

    async def ask(self, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(cmd, 5.0)

    async def reconnect(self) -> None:
        await self.client.close()
        self.client = await RemotingClient.connect(
            f"127.0.0.1:{self.server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
        )


async def open_port(store: MessageStore, tmp_path: Path, *, auto_create: bool) -> Port:
    front = RemotingFront(
        unconfirmed_produce_path(store, tmp_path),
        FrontSettings("C", "broker-a", ("127.0.0.1", 10911), auto_create_topic=auto_create),
    )
    server = RemotingFrontServer(front, ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
    await server.start("127.0.0.1", 0)
    client = await RemotingClient.connect(
        f"127.0.0.1:{server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
    )
    return Port(server, client)


@pytest.fixture
async def port(store: MessageStore, tmp_path: Path) -> AsyncIterator[Port]:
    p = await open_port(store, tmp_path, auto_create=True)
    yield p
    await p.client.close()
    await p.server.close()


async def test_an_unconfirmed_broker_refuses_sends_with_the_not_master_code(
    port: Port, store: MessageStore
) -> None:
    for code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        body = b"hello" if code == RequestCode.SEND_MESSAGE_V2 else java_batch([(0, b"x", "")])
        answer = await port.ask(request(code, 0, V2_SEND, body))
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer
        assert "no confirmed role" in (answer.remark or "")
        # ... and closes the connection, so a client behind a stable master address
        # reconnects to the current master (bounded wait: liveness, not timing).
        await asyncio.wait_for(port.client.connection.wait_closed(), 10)
        await port.reconnect()
    pull = {"consumerGroup": "g", "topic": "TopicA", "queueId": "0", "queueOffset": "0",
            "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0"}  # fmt: skip
    for code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
        answer = await port.ask(request(code, 0, pull))
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer
    assert store.max_offset == 0


async def test_transactions_and_delays_are_refused_with_a_remark(port: Port) -> None:
    prepared = {**V2_SEND, "f": str(1 << 2)}
    answer = await port.ask(request(RequestCode.SEND_MESSAGE_V2, 0, prepared, b"x"))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "transactional" in (answer.remark or "")
    delayed = {**V2_SEND, "i": "DELAY\x013\x02"}
    answer = await port.ask(request(RequestCode.SEND_MESSAGE_V2, 0, delayed, b"x"))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL and "scheduled" in (answer.remark or "")


async def test_unknown_topic_without_auto_creation_is_topic_not_exist(
    store: MessageStore, tmp_path: Path
) -> None:
    p = await open_port(store, tmp_path, auto_create=False)
    try:
        answer = await p.ask(request(RequestCode.SEND_MESSAGE_V2, 0, V2_SEND, b"x"))
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        assert "autoCreateTopicEnable" in (answer.remark or "")
    finally:
        await p.client.close()
        await p.server.close()
    assert store.max_offset == 0


async def test_bad_signature_and_unknown_codes_are_answered_and_harm_nothing(
    port: Port, store: MessageStore
) -> None:
    stranger = await RemotingClient.connect(
        f"127.0.0.1:{port.server.port}", credentials=Credentials(ACCESS_KEY, "wrong-secret")
    )
    try:
        answer = await stranger.invoke(request(RequestCode.SEND_MESSAGE_V2, 0, V2_SEND, b"x"))
        assert answer.code == ResponseCode.NO_PERMISSION
    finally:
        await stranger.close()
    for code in (RequestCode.END_TRANSACTION, RequestCode.POP_MESSAGE, 9999):
        answer = await port.ask(request(code, 0, {"topic": "TopicA"}))
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert f"request code {int(code)} not supported" == answer.remark
    heartbeat = {"clientID": "c1", "consumerDataSet": [{"groupName": "g"}]}
    answer = await port.ask(request(RequestCode.HEART_BEAT, 0, {}, json.dumps(heartbeat).encode()))
    assert answer.code == ResponseCode.SUCCESS
    answer = await port.ask(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 0,
                                    {"consumerGroup": "g"}))  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS
    assert json.loads(answer.body) == {"consumerIdList": ["c1"]}
    assert store.max_offset == 0


SERVED = [
    RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
    RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.UPDATE_CONSUMER_OFFSET, RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_EARLIEST_MSG_STORETIME,
    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ, RequestCode.CONSUMER_SEND_MSG_BACK,
    RequestCode.VIEW_MESSAGE_BY_ID, RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.UPDATE_AND_CREATE_TOPIC,
]  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    code=st.sampled_from(SERVED),
    fields=st.dictionaries(FIELD_NAMES, FIELD_VALUES, max_size=12),
    body=st.one_of(st.binary(max_size=64), st.sampled_from([b"{}", b"[]", b'{"mqSet":7}'])),
)
def test_random_headers_on_every_served_code_are_answered_without_harm(
    tmp_path_factory: pytest.TempPathFactory,
    code: int,
    fields: dict[str, str],
    body: bytes,
) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    with MessageStore.open(tmp / "store", store_config_of(BrokerConfig())) as s:

        async def run() -> None:
            p = await open_port(s, tmp, auto_create=True)
            try:
                answer = await p.ask(request(code, 0, fields, body))
                assert (answer.is_response and answer.code != ResponseCode.SUCCESS) or code in (
                    RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT,
                    RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
                    RequestCode.GET_ALL_TOPIC_CONFIG, RequestCode.UPDATE_AND_CREATE_TOPIC,
                )  # fmt: skip
                # The connection goes on.
                again = await p.ask(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 0,
                                            {"consumerGroup": "nobody"}))  # fmt: skip
                assert again.code == ResponseCode.SYSTEM_ERROR
                assert "no consumer for this group" in (again.remark or "")
            finally:
                await p.client.close()
                await p.server.close()

        asyncio.run(run())
        assert s.max_offset == 0


async def test_created_and_retry_topics_are_served_before_their_first_record(
    port: Port, store: MessageStore
) -> None:
    answer = await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0,
                                    {"topic": "Created", "writeQueueNums": "8"}))  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS
    heartbeat = {"clientID": "c1", "consumerDataSet": [{"groupName": "g",
                 "messageModel": "CLUSTERING"}]}  # fmt: skip
    await port.ask(request(RequestCode.HEART_BEAT, 0, {}, json.dumps(heartbeat).encode()))
    answer = await port.ask(request(RequestCode.GET_ALL_TOPIC_CONFIG, 0, None))
    table = json.loads(answer.body)["topicConfigTable"]
    # As asked, past defaultTopicQueueNums (4): sends spread over the configured queues.
    assert table["Created"]["writeQueueNums"] == 8
    assert table["%RETRY%g"]["writeQueueNums"] == 1
    answer = await port.ask(request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": "a b"}))
    assert answer.code == ResponseCode.SYSTEM_ERROR  # the topic rule
    # A send-back or a view of an offset that holds nothing is refused, nothing is stored.
    answer = await port.ask(request(RequestCode.VIEW_MESSAGE_BY_ID, 0, {"offset": "0"}))
    assert answer.code != ResponseCode.SUCCESS
    assert store.max_offset == 0
