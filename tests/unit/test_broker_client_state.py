"""Client state on the broker's remoting port is bounded and validated once (issue 31 item 3).

Each attack found with the client key pair every application holds, replayed on real
sockets against a confirmed master (a real store and produce path), then what the group
must still do:

- UPDATE_CONSUMER_OFFSET (and a pull's commit flag) for a group nobody consumes in, a topic
  the broker does not serve, queue 2^31-1 or offset 2^63-1: refused, the offset table
  unchanged (before: every one stored; the table grew without bound and a real group's
  offset could skip every unread message).
- a HEART_BEAT with a consumer group of 121 characters: refused, so its retry topic never
  reaches the name server's topic limit; the broker's next registration still routes every
  other topic (before: the name server refused that broker's registrations, and every topic
  left the routes).
- UPDATE_AND_CREATE_TOPIC with the client pair: NO_PERMISSION; the group's broker pair
  creates the topic.
- queue locks expire (60 s, RebalanceLockManager) and another client takes them over;
  expired ones are purged as locks are taken.
- one connection holding many fake consumer members cannot make a real consumer on another
  connection SYSTEM_BUSY (a bound per connection).
- topics declared before their first record are bounded: UPDATE_AND_CREATE_TOPIC past the
  bound is SYSTEM_BUSY with the reason, and a new group's heartbeat is still served.

Time is the front's injected clock (no sleeps, no timing asserts).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.broker_settings import (
    BrokerSettings,
    remoting_auth_of,
)
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_broker.remoting_front import topics as topics_module
from brokergroup_broker.remoting_front.namesrv_link import (
    Registration,
    register_body,
    register_fields,
)
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_controller.namesrv.server import NameServer
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
TOPIC = "TopicA"
INT32_MAX, INT64_MAX = (1 << 31) - 1, (1 << 63) - 1
ROOT = "broker-credential-root-for-tests"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class Port:
    def __init__(self, broker: Broker, server: RemotingFrontServer, clock: Clock) -> None:
        self.broker = broker
        self.server = server
        self.front = server.front
        self.clock = clock
        assert broker.parts is not None
        self.parts = broker.parts
        self.offsets = broker.parts.store.consumer_offsets

    async def client(self, signer: Credentials | None = None) -> RemotingClient:
        return await RemotingClient.connect(
            f"127.0.0.1:{self.server.port}",
            credentials=signer or Credentials(ACCESS_KEY, SECRET_KEY),
        )

    async def send(self, queue_id: int, count: int = 1) -> None:
        for _ in range(count):
            await self.parts.produce.send_messages(TOPIC, queue_id, [ProduceMessage(TOPIC, b"m")])


@pytest.fixture
async def make_port(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Port]]]:
    """A registered broker 1, confirmed master of SyncStateSet {1}, with its remoting port
    (signed with `auth`, default one test pair) on an injected clock."""
    config = BrokerConfig()
    servers: list[RemotingFrontServer] = []
    async with confirmed_master(tmp_path, config) as m:
        broker, parts = m.broker, m.parts

        async def make(auth: ServerAuth | None = None) -> Port:
            clock = Clock()
            front = RemotingFront(
                parts.produce,
                FrontSettings("C", "broker-a", ("127.0.0.1", 10911), True),
                clock_ms=clock,
            )
            server = RemotingFrontServer(front, auth or ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
            await server.start("127.0.0.1", 0)
            servers.append(server)
            return Port(broker, server, clock)

        yield make
        for server in servers:
            await server.close()


def heartbeat(client_id: str, *groups: str) -> RemotingCommand:
    data = {
        "clientID": client_id,
        "consumerDataSet": [{"groupName": g, "messageModel": "CLUSTERING"} for g in groups],
    }
    return request(RequestCode.HEART_BEAT, 0, {}, json.dumps(data).encode())


def commit(group: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    return request(RequestCode.UPDATE_CONSUMER_OFFSET, 0, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
        "commitOffset": str(offset),
    })  # fmt: skip


def query(group: str, topic: str, queue_id: int) -> RemotingCommand:
    return request(RequestCode.QUERY_CONSUMER_OFFSET, 0, {
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id),
        "setZeroIfNotFound": "false",
    })  # fmt: skip


# ---------------------------------------------------------------- consumer offsets


async def test_offsets_only_for_a_known_group_topic_queue_and_offset(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    await port.send(0, 3)
    client = await port.client()
    try:
        # No consumer of "ghost" ever heartbeat here.
        answer = await client.invoke(commit("ghost", TOPIC, 0, 1), 5.0)
        assert answer.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, answer
        assert (await client.invoke(heartbeat("c1", "real"), 5.0)).code == ResponseCode.SUCCESS
        refused = [
            (commit("real", "NoSuchTopic", 0, 0), ResponseCode.TOPIC_NOT_EXIST),
            (commit("real", TOPIC, INT32_MAX, 0), ResponseCode.SYSTEM_ERROR),
            (commit("real", TOPIC, 4, 0), ResponseCode.SYSTEM_ERROR),  # 4 queues: 0..3
            (commit("real", TOPIC, 0, INT64_MAX), ResponseCode.SYSTEM_ERROR),
            (commit("real", TOPIC, 0, 4), ResponseCode.SYSTEM_ERROR),  # max offset 3
        ]
        for cmd, code in refused:
            answer = await client.invoke(cmd, 5.0)
            assert answer.code == code, (cmd.ext_fields, answer)
            assert answer.remark, answer
        assert len(port.offsets.snapshot().offsets) == 0
        # A real consumer's commits go through, up to the queue's max offset.
        for offset in (2, 3):
            answer = await client.invoke(commit("real", TOPIC, 0, offset), 5.0)
            assert answer.code == ResponseCode.SUCCESS, answer
        answer = await client.invoke(commit("real", TOPIC, 0, INT64_MAX), 5.0)
        assert answer.code == ResponseCode.SYSTEM_ERROR  # would skip every unread message
        answer = await client.invoke(query("real", TOPIC, 0), 5.0)
        assert answer.code == ResponseCode.SUCCESS and answer.fields()["offset"] == "3"
        assert port.offsets.snapshot().offsets == {("real", TOPIC, 0): 3}
        # A stock lite consumer persists its offsets right after UNREGISTER_CLIENT: the
        # group stays known, as RocketMQ keeps its subscription config.
        answer = await client.invoke(
            request(RequestCode.UNREGISTER_CLIENT, 0, {"clientID": "c1", "consumerGroup": "real"}),
            5.0,
        )
        assert answer.code == ResponseCode.SUCCESS
        answer = await client.invoke(commit("real", TOPIC, 1, 0), 5.0)
        assert answer.code == ResponseCode.SUCCESS, answer
    finally:
        await client.close()


async def test_a_pulls_commit_flag_stores_no_offset_for_an_unknown_group(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    await port.send(0, 2)
    client = await port.client()
    try:
        for group, offset in (("ghost", 1), ("ghost", INT64_MAX)):
            pull = request(RequestCode.PULL_MESSAGE, 0, {
                "consumerGroup": group, "topic": TOPIC, "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": "1", "commitOffset": str(offset),
            })  # fmt: skip
            answer = await client.invoke(pull, 5.0)
            assert answer.code == ResponseCode.SUCCESS  # the pull itself is served
        assert len(port.offsets.snapshot().offsets) == 0
    finally:
        await client.close()


async def test_a_flood_of_offsets_for_made_up_groups_and_topics_stores_nothing(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    """The flood that caused 10 elections: offsets for groups and topics that do not exist.
    (Before: 2,000 requests, 2,000 entries in the table every slave fetches each second.)"""
    port = await make_port()
    client = await port.client()
    try:
        for i in range(2000):
            answer = await client.invoke(commit(f"g{i}", f"T{i}", INT32_MAX - i, i), 5.0)
            assert answer.code != ResponseCode.SUCCESS
        assert len(port.offsets.snapshot().offsets) == 0
    finally:
        await client.close()


# ---------------------------------------------------------------- group names


async def test_a_group_whose_retry_topic_is_too_long_keeps_every_topic_routed(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    """One HEART_BEAT with a 121-character group (legal characters), then the broker's
    registration: the name server still routes every other topic."""
    port = await make_port()
    await port.send(0)
    namesrv = NameServer(dict, auth=None)
    await namesrv.start("127.0.0.1", 0)
    client = await port.client()
    ns = await RemotingClient.connect(f"127.0.0.1:{namesrv.port}")
    try:
        too_long = await client.invoke(heartbeat("c1", "g" * 121), 5.0)
        longest = await client.invoke(heartbeat("c2", "g" * 120), 5.0)
        reg = Registration("C", "broker-a", 1, "127.0.0.1:10911", "127.0.0.1:10912", True, 4)
        body = register_body(reg, port.front.topics(), 1, 0)
        answer = await ns.invoke(
            request(RequestCode.REGISTER_BROKER, 0, register_fields(reg, body), body), 5.0
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        routed = {t for r in namesrv.registry for t in r.topics}
        assert {TOPIC, "%RETRY%" + "g" * 120, "TBW102"} <= routed, routed
        # The group itself is refused, with the rule, before any table is touched.
        assert too_long.code == ResponseCode.SYSTEM_ERROR, too_long
        assert "120" in (too_long.remark or "")
        assert longest.code == ResponseCode.SUCCESS
        assert "g" * 121 not in port.front.consumers.groups
    finally:
        await client.close()
        await ns.close()
        await namesrv.close()


# ---------------------------------------------------------------- topic creation


def derived(role: Role) -> Credentials:
    pair = derive_rocketmq_pair(ROOT, role, "C", "broker-a")
    return Credentials(pair.access_key, pair.secret_key)


@pytest.mark.parametrize("derived_pairs", [True, False], ids=["derived", "release-wide"])
async def test_only_the_broker_pair_creates_topics(
    make_port: Callable[..., Awaitable[Port]], tmp_path: Path, derived_pairs: bool
) -> None:
    if derived_pairs:
        broker_pair, client_pair = derived(Role.BROKER), derived(Role.CLIENT)
    else:
        broker_pair = Credentials("releaseBrokerAK", "release-broker-secret")
        client_pair = Credentials("releaseClientAK", "release-client-secret")
    settings = BrokerSettings(
        "C", "broker-a", tmp_path, ("127.0.0.1:1",), None, "127.0.0.1", "127.0.0.1",
        remoting_credentials=broker_pair, remoting_client_credentials=client_pair,
    )  # fmt: skip
    port = await make_port(remoting_auth_of(settings))
    create = request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": "Created"})
    application = await port.client(client_pair)
    admin = await port.client(broker_pair)
    try:
        answer = await application.invoke(create, 5.0)
        assert answer.code == ResponseCode.NO_PERMISSION, answer
        assert "broker pair" in (answer.remark or "")
        assert "Created" not in port.front.topics()
        # The client pair still consumes (a heartbeat) and the broker pair creates.
        assert (await application.invoke(heartbeat("c1", "g"), 5.0)).code == ResponseCode.SUCCESS
        assert (await admin.invoke(create, 5.0)).code == ResponseCode.SUCCESS
        assert "Created" in port.front.topics()
    finally:
        await application.close()
        await admin.close()


# ---------------------------------------------------------------- locks and members


def lock_body(client_id: str, queues: range) -> bytes:
    return json.dumps({
        "consumerGroup": "g", "clientId": client_id,
        "mqSet": [{"topic": TOPIC, "brokerName": "broker-a", "queueId": q} for q in queues],
    }).encode()  # fmt: skip


async def test_expired_queue_locks_are_taken_over_and_purged(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    client = await port.client()

    async def lock(client_id: str, queues: range) -> list[int]:
        answer = await client.invoke(
            request(RequestCode.LOCK_BATCH_MQ, 0, {}, lock_body(client_id, queues)), 5.0
        )
        assert answer.code == ResponseCode.SUCCESS
        return sorted(mq["queueId"] for mq in json.loads(answer.body)["lockOKMQSet"])

    try:
        assert await lock("c1", range(4)) == [0, 1, 2, 3]
        assert await lock("c2", range(4)) == []  # held by c1
        port.clock.ms += 60_001  # c1 renewed nothing for 60 s (RebalanceLockManager)
        assert await lock("c2", range(2)) == [0, 1]  # taken over
        # c1's other two expired locks were purged, not kept until someone asks for them.
        assert len(port.front.locks.locks) == 2
        assert await lock("c1", range(4)) == [2, 3]
    finally:
        await client.close()


async def test_one_connection_with_many_fake_members_does_not_block_new_consumers(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    """An idle connection holding 10,240 fake members (10 heartbeats of 1,024 groups) made
    every new consumer SYSTEM_BUSY: now that connection is bounded, others are not."""
    port = await make_port()
    attacker = await port.client()
    consumer = await port.client()
    try:
        accepted = 0
        for batch in range(10):
            groups = [f"fake{batch}_{i}" for i in range(1024)]
            answer = await attacker.invoke(heartbeat(f"c{batch}", *groups), 5.0)
            accepted += answer.code == ResponseCode.SUCCESS
        assert accepted == 1, accepted  # 1,024 members per connection, then SYSTEM_BUSY
        assert len(port.front.consumers) <= 1024
        answer = await consumer.invoke(heartbeat("real-client", "real"), 5.0)
        assert answer.code == ResponseCode.SUCCESS, answer
        listed = await consumer.invoke(
            request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, 0, {"consumerGroup": "real"}), 5.0
        )
        assert json.loads(listed.body) == {"consumerIdList": ["real-client"]}
        # Members that stop heartbeating are gone 120 s later (ClientHousekeepingService),
        # purged as the table is used, so the attacker's connection is free again.
        port.clock.ms += 120_001
        for _ in range(20):  # each heartbeat purges a bounded number
            await consumer.invoke(heartbeat("real-client", "real"), 5.0)
        assert len(port.front.consumers) == 1
    finally:
        await attacker.close()
        await consumer.close()


async def test_declared_topics_are_bounded_with_a_clear_refusal_and_heartbeats_go_on(
    make_port: Callable[..., Awaitable[Port]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 UPDATE_AND_CREATE_TOPIC calls filled the declared-topic table, and then every
    new consumer group's heartbeat failed on its retry topic (here the bound is 3)."""
    monkeypatch.setattr(topics_module, "MAX_DECLARED_TOPICS", 3)
    port = await make_port()
    client = await port.client()
    try:
        for i in range(3):
            create = request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": f"Created{i}"})
            assert (await client.invoke(create, 5.0)).code == ResponseCode.SUCCESS
        create = request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": "OneTooMany"})
        answer = await client.invoke(create, 5.0)
        assert answer.code == ResponseCode.SYSTEM_BUSY and "maxTopics" in (answer.remark or "")
        assert "OneTooMany" not in port.front.topics()
        answer = await client.invoke(heartbeat("c1", "late-group"), 5.0)
        assert answer.code == ResponseCode.SUCCESS, answer
        assert port.front.consumers.known("late-group")
    finally:
        await client.close()
