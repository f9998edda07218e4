"""GET_TOPIC_STATS_INFO, GET_BROKER_RUNTIME_INFO and GET_BROKER_CONFIG on the broker's
remoting port (remoting_front.broker_status): what `mqadmin topicStatus`, `brokerStatus` and
`getBrokerConfig` ask.

The bodies are compared as text with RocketMQ 5.3's (fastjson's TopicStatsTable with
MessageQueue objects as keys, KVTable, properties text), answered over real sockets from a
real store (a temp dir). Malformed headers are answered with the field's name and harm
neither the store nor the connection.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from brokergroup_broker.core.broker_settings import store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.remoting_front.broker_status import (
    BrokerStatus,
    TopicOffsetRow,
    disk_capacity_text,
    disk_ratio_text,
    human_bytes,
    kv_table_body,
    properties_text,
    runtime_text,
    topic_stats_body,
)
from brokergroup_broker.remoting_front.front import FrontSettings, rocketmq_config
from brokergroup_broker.store import MessageInput, MessageStore
from brokergroup_broker.store.health import DiskSpace
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, RemotingServer, ServerAuth
from tests.unit.test_broker_remoting_front import ACCESS_KEY, SECRET_KEY, Port, open_port

HOST = ("127.0.0.1", 10911)
T0 = 1_700_000_000_000
#: The disk the answers are built from: 270 GB, 45 GB used, 52 GB usable (a root reserve).
DISK = DiskSpace(total=270_000_000_000, free=225_000_000_000, usable=52_000_000_000)


class StoreReads:
    """The produce path's two reads, straight from a real store (all of it readable)."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        return self.store.queue_offset_range(topic, queue_id, self.store.max_offset)

    async def store_timestamp_at(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        got = self.store.get_records(topic, queue_id, queue_offset, 1, self.store.max_offset)
        return got[0][0].store_timestamp_ms if got else None


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    s = MessageStore.open(tmp_path / "store", store_config_of(BrokerConfig()))
    yield s
    s.close()


def put(store: MessageStore, topic: str, queue_id: int, at_ms: int) -> None:
    store.put_messages([MessageInput(topic, queue_id, b"body", {"UNIQ_KEY": "u"})], HOST, at_ms)


class Clock:
    def __init__(self) -> None:
        self.now = T0 + 10_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
async def status_port(store: MessageStore) -> AsyncIterator[tuple[RemotingClient, Clock]]:
    clock = Clock()
    settings = FrontSettings("C", "broker-a", HOST, auto_create_topic=True)
    status = BrokerStatus(
        StoreReads(store),
        broker_name="broker-a",
        config=rocketmq_config(settings),
        topics=lambda: {**store.queues.topics(), "Declared": 2},
        disk_space=lambda: DISK,
        wall_ms=clock,
    )
    server = RemotingServer(
        {
            RequestCode.GET_TOPIC_STATS_INFO: status.topic_stats,
            RequestCode.GET_BROKER_RUNTIME_INFO: status.runtime_info,
            RequestCode.GET_BROKER_CONFIG: status.broker_config,
        },
        auth=ServerAuth({ACCESS_KEY: SECRET_KEY}.get),
    )
    await server.start("127.0.0.1", 0)
    client = await RemotingClient.connect(
        f"127.0.0.1:{server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
    )
    yield client, clock
    await client.close()
    await server.close()


# ---------------------------------------------------------------- pure parts


def test_topic_stats_body_is_fastjsons_map_with_message_queue_keys() -> None:
    body = topic_stats_body(
        "T", "broker-a", [TopicOffsetRow(0, 2, 10, T0), TopicOffsetRow(1, 0, 0, 0)]
    )
    assert body.decode() == (
        '{"offsetTable":{'
        '{"brokerName":"broker-a","queueId":0,"topic":"T"}:'
        '{"lastUpdateTimestamp":1700000000000,"maxOffset":10,"minOffset":2},'
        '{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        '{"lastUpdateTimestamp":0,"maxOffset":0,"minOffset":0}},'
        '"topicPutTps":0.0}'
    )


def test_disk_texts_are_rocketmqs() -> None:
    # UtilAll.getDiskPartitionSpaceUsedPercent: used / (used + usable), up to a whole percent.
    assert disk_ratio_text(DiskSpace(100, 60, 10)) == "0.8"
    assert disk_ratio_text(DiskSpace(100, 60, 11)) == "0.79"  # 78.4 % rounds up
    assert disk_ratio_text(DiskSpace(100, 50, 0)) == "1.0"
    assert disk_ratio_text(DiskSpace(0, 0, 0)) == "0.0"
    assert disk_ratio_text(DISK) == "0.47"  # 45 / 97 GB = 46.4 %
    # MixAll.humanReadableByteCount(n, false).
    assert [human_bytes(n) for n in (0, 1023, 1024, 1536, 1587, 5 << 30, 1 << 60)] == [
        "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "1.5 KiB", "5.0 GiB", "1.0 EiB",
    ]  # fmt: skip
    assert disk_capacity_text(DISK) == "Total : 251.5 GiB, Free : 209.5 GiB."


def test_the_stores_disk_space_is_its_filesystems(store: MessageStore) -> None:
    space = store.disk_space()
    st = os.statvfs(store.root)
    assert space.total == st.f_blocks * st.f_frsize
    assert 0.0 <= space.used_ratio <= 1.0 and space.usable <= space.free <= space.total


def test_kv_table_runtime_and_properties_texts() -> None:
    assert kv_table_body({"b": "2", "a": "1"}) == b'{"table":{"a":"1","b":"2"}}'
    day = 86_400_000
    assert runtime_text(0) == "[ 0 days, 0 hours, 0 minutes, 0 seconds ]"
    assert runtime_text(1234 * day + 3_723_999) == "[ 1,234 days, 1 hours, 2 minutes, 3 seconds ]"
    assert properties_text({"z": "1", "a": "x y"}) == b"a=x y\nz=1\n"


# ---------------------------------------------------------------- answers from a real store


async def test_topic_stats_are_the_queues_offsets_and_last_store_times(
    store: MessageStore, status_port: tuple[RemotingClient, Clock]
) -> None:
    client, _ = status_port
    for i in range(3):
        put(store, "T", 0, T0 + i)
    put(store, "T", 2, T0 + 7)
    answer = await client.invoke(request(RequestCode.GET_TOPIC_STATS_INFO, 0, {"topic": "T"}), 5)
    assert answer.code == ResponseCode.SUCCESS, answer
    queues = store.queues.topics()["T"]
    rows = [TopicOffsetRow(0, 0, 3, T0 + 2), TopicOffsetRow(1, 0, 0, 0),
            TopicOffsetRow(2, 0, 1, T0 + 7)][:queues]  # fmt: skip
    assert answer.body == topic_stats_body("T", "broker-a", rows)
    # A declared topic without records: its queues, all empty.
    answer = await client.invoke(
        request(RequestCode.GET_TOPIC_STATS_INFO, 0, {"topic": "Declared"}), 5
    )
    assert answer.body == topic_stats_body(
        "Declared", "broker-a", [TopicOffsetRow(0, 0, 0, 0), TopicOffsetRow(1, 0, 0, 0)]
    )
    answer = await client.invoke(
        request(RequestCode.GET_TOPIC_STATS_INFO, 0, {"topic": "Nowhere"}), 5
    )
    assert (answer.code, answer.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "topic[Nowhere] not exist",
    )


async def test_runtime_info_names_only_what_the_broker_tracks(
    store: MessageStore, status_port: tuple[RemotingClient, Clock]
) -> None:
    client, clock = status_port
    ask = request(RequestCode.GET_BROKER_RUNTIME_INFO, 0, {})
    answer = await client.invoke(ask, 5)
    assert answer.code == ResponseCode.SUCCESS
    assert json.loads(answer.body) == {"table": {
        "bootTimestamp": str(T0 + 10_000),
        "commitLogDirCapacity": "Total : 251.5 GiB, Free : 209.5 GiB.",
        "commitLogDiskRatio": "0.47",
        "consumeQueueDiskRatio": "0.47",
        "earliestMessageTimeStamp": "-1",  # nothing stored yet
        "runtime": "[ 0 days, 0 hours, 0 minutes, 0 seconds ]",
    }}  # fmt: skip
    put(store, "B", 1, T0 + 5)
    put(store, "A", 0, T0 + 3)
    put(store, "A", 0, T0 + 1)  # later in the log, earlier clock: the queue's first counts
    clock.now += 90_061_000
    answer = await client.invoke(ask, 5)
    assert answer.body == kv_table_body({
        "bootTimestamp": str(T0 + 10_000),
        "commitLogDirCapacity": "Total : 251.5 GiB, Free : 209.5 GiB.",
        "commitLogDiskRatio": "0.47",
        "consumeQueueDiskRatio": "0.47",
        "earliestMessageTimeStamp": str(T0 + 3),
        "runtime": "[ 1 days, 1 hours, 1 minutes, 1 seconds ]",
    })  # fmt: skip


async def test_broker_config_is_the_settings_as_properties(
    status_port: tuple[RemotingClient, Clock],
) -> None:
    client, _ = status_port
    answer = await client.invoke(request(RequestCode.GET_BROKER_CONFIG, 0, {}), 5)
    assert answer.code == ResponseCode.SUCCESS
    assert answer.body.decode() == (
        "autoCreateTopicEnable=true\n"
        "brokerClusterName=C\n"
        "brokerIP1=127.0.0.1\n"
        "brokerName=broker-a\n"
        "defaultTopicQueueNums=4\n"
        "enablePropertyFilter=false\n"
        "listenPort=10911\n"
        "longPollingEnable=true\n"
        "maxMessageSize=4194304\n"
        "msgTraceTopicName=RMQ_SYS_TRACE_TOPIC\n"
        "regionId=DefaultRegion\n"
        "storeReplyMessageEnable=true\n"
        "traceOn=true\n"
        "traceTopicEnable=false\n"
    )
    assert json.loads(answer.fields()["version"]) == {
        "counter": 0, "stateVersion": 0, "timestamp": T0 + 10_000,
    }  # fmt: skip


# ---------------------------------------------------------------- on the broker's port


@pytest.fixture
async def port(store: MessageStore, tmp_path: Path) -> AsyncIterator[Port]:
    p = await open_port(store, tmp_path, auto_create=True)
    yield p
    await p.client.close()
    await p.server.close()


async def test_the_port_serves_the_codes_and_answers_malformed_headers(
    port: Port, store: MessageStore
) -> None:
    for fields in ({}, {"topic": ""}, {"topic": "x" * 128}):
        answer = await port.ask(request(RequestCode.GET_TOPIC_STATS_INFO, 0, fields))
        assert answer.code == ResponseCode.SYSTEM_ERROR, answer
        assert (answer.remark or "").startswith("the header field topic is "), answer
    # This port's broker has no confirmed role: offsets are not readable, and it says so.
    answer = await port.ask(request(RequestCode.GET_TOPIC_STATS_INFO, 0, {"topic": "Nowhere"}))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    for code in (RequestCode.GET_BROKER_CONFIG, RequestCode.GET_BROKER_RUNTIME_INFO):
        answer = await port.ask(request(code, 0, {"junk": "\x00"}, b"\xff"))
        assert answer.code == ResponseCode.SUCCESS, answer
    # A broker that serves no offsets (a slave, here one without a confirmed role) still
    # answers brokerStatus, without earliestMessageTimeStamp.
    put(store, "T", 0, T0)
    stored = store.max_offset
    answer = await port.ask(request(RequestCode.GET_BROKER_RUNTIME_INFO, 0, {}))
    assert answer.code == ResponseCode.SUCCESS, answer
    assert sorted(json.loads(answer.body)["table"]) == sorted([
        "bootTimestamp", "runtime", "putTps", "getTransferredTps", "getTransferedTps",
        "putMessageTimesTotal", "putMessageSizeTotal", "putMessageAverageSize",
        "msgPutTotalTodayNow", "msgPutTotalTodayMorning", "msgPutTotalYesterdayMorning",
        "msgGetTotalTodayNow", "msgGetTotalTodayMorning", "msgGetTotalYesterdayMorning",
    ])  # fmt: skip
    config = (await port.ask(request(RequestCode.GET_BROKER_CONFIG, 0, {}))).body.decode()
    assert "brokerName=broker-a\n" in config and "brokerClusterName=C\n" in config
    answer = await port.ask(request(RequestCode.GET_TOPIC_CONFIG, 0, {"topic": "X"}))
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST  # the connection goes on
    assert store.max_offset == stored
