"""Retention in a confirmed master (core/retention_service.py over store/retention.py),
answered on the broker's RocketMQ remoting port and its own protocol's pull path, with
real sockets and a real store (small segments); the service's clock and hour are fakes.

- Outside deleteWhen and below diskMaxUsedSpaceRatio nothing is deleted; at deleteWhen
  every expired segment but the active one is, each recorded in retention.log.
- Then GET_MIN_OFFSET answers each queue's new min; a PULL_MESSAGE below it is answered
  PULL_OFFSET_MOVED with nextBeginOffset = that min (RocketMQ's OFFSET_TOO_SMALL ->
  nextBeginOffset), and a pull from there gets exactly the records kept; the own
  protocol's pull below the min answers no messages and nextQueueOffset = the min.
- Above diskSpaceCleanForciblyRatio unexpired segments go ("forced").
- /v1/status reports the served min offset and the retention floor; a slave's learned
  floor is what a new master takes before going online (`pre_online`, from its peers'
  /v1/status over real HTTP).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.peer_http import PeerHttp
from brokergroup_broker.core.retention_service import RetentionService
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_broker.store import MessageStore
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master
from tests.unit.conftest import Clock

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
TOPIC = "TopicR"
SEG = 4096
HOUR_MS = 3_600_000


@dataclass
class Master:
    broker: Broker
    store: MessageStore
    client: RemotingClient
    clock: Clock[int]
    retention: RetentionService

    async def send(self, count: int) -> None:
        assert self.broker.parts is not None
        for i in range(count):
            body = f"record-{i}-".encode() * 20
            await self.broker.parts.produce.send_messages(
                TOPIC, i % 2, [ProduceMessage(TOPIC, body)]
            )

    async def ask(self, cmd: RemotingCommand) -> RemotingCommand:
        return await self.client.invoke(cmd, 30.0)


def pull(queue_id: int, offset: int, *, suspend_ms: int = 0) -> RemotingCommand:
    return request(RequestCode.PULL_MESSAGE, 0, {
        "consumerGroup": "g", "topic": TOPIC, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "2" if suspend_ms else "0",
        "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
    })  # fmt: skip


def min_offset(queue_id: int) -> RemotingCommand:
    return request(RequestCode.GET_MIN_OFFSET, 0, {"topic": TOPIC, "queueId": str(queue_id)})


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Master]:
    config = BrokerConfig(mapped_file_size_commit_log=SEG, file_reserved_time=0.5)
    clock = Clock(1_800_000_000_000)
    async with confirmed_master(tmp_path, config) as m:
        broker, store, parts = m.broker, m.store, m.parts
        front = RemotingFront(
            parts.produce, FrontSettings("C", "broker-a", ("127.0.0.1", 10911), True)
        )
        server = RemotingFrontServer(front, ServerAuth({ACCESS_KEY: SECRET_KEY}.get))
        await server.start("127.0.0.1", 0)
        client = await RemotingClient.connect(
            f"127.0.0.1:{server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
        )
        # File mtimes are the real clock's; the fake starts far enough after them.
        service = RetentionService(
            store=store, config=config, role=broker.role, session=None,
            clock_ms=clock, hour_of=lambda _ms: 12, sleep=lambda _s: asyncio.sleep(0),
        )  # fmt: skip
        yield Master(broker, store, client, clock, service)
        await client.close()
        await server.close()


async def test_deleted_segments_answer_pull_offset_moved_with_the_new_begin(
    master: Master,
) -> None:
    await master.send(60)
    store = master.store
    assert len(store.commitlog.segments) >= 4
    before = {q: store.get_messages(TOPIC, q, 0, 100, store.max_offset) for q in (0, 1)}
    held = asyncio.ensure_future(master.ask(pull(0, 0, suspend_ms=20_000)))
    # Noon, disk not under pressure, segments not yet expired: nothing goes.
    master.clock.now = store.retention.segment_facts()[0][-1].last_write_ms + 1000
    assert await master.retention.run_once() == []
    answer = await held  # something to read at 0: served at once
    assert answer.code == ResponseCode.SUCCESS
    # deleteWhen hour (04) with every segment expired: all but the active one go.
    master.retention._hour_of = lambda _ms: 4
    master.clock.advance(HOUR_MS)
    segments = [s.start for s in store.commitlog.segments]
    removed = await master.retention.run_once()
    assert [(r.start, r.reason.value) for r in removed] == [(s, "expired") for s in segments[:-1]]
    assert store.min_offset == segments[-1]
    assert [r["newMinOffset"] for r in store.retention.log.records()] == segments[1:]

    for q in (0, 1):
        kept = [m for m in before[q] if m.physical_offset >= store.min_offset]
        new_min = kept[0].queue_offset if kept else before[q][-1].queue_offset + 1
        got = await master.ask(min_offset(q))
        assert (got.code, got.fields()["offset"]) == (ResponseCode.SUCCESS, str(new_min))
        moved = await master.ask(pull(q, 0))
        assert moved.code == ResponseCode.PULL_OFFSET_MOVED, moved
        assert moved.fields()["nextBeginOffset"] == str(new_min)
        assert moved.fields()["minOffset"] == str(new_min)
        if kept:
            served = await master.ask(pull(q, new_min))
            assert served.code == ResponseCode.SUCCESS
            assert served.fields()["nextBeginOffset"] == str(kept[-1].queue_offset + 1)
        # The own protocol: no messages, continue at the min.
        assert master.broker.parts is not None
        own = await master.broker.parts.produce.pull_messages(TOPIC, q, 0, 32)
        assert (own.messages, own.next_queue_offset, own.min_queue_offset) == ((), new_min, new_min)


async def test_forced_cleaning_deletes_unexpired_segments_and_pulls_move(
    master: Master,
) -> None:
    await master.send(60)
    store = master.store
    low, high = store.queue_offset_range(TOPIC, 0)
    # Disk "above 85 %": the thresholds are set below the real disk's usage instead.
    master.retention._settings = dataclasses.replace(
        master.retention._settings, disk_max_used_space_ratio=1e-4,
        disk_space_clean_forcibly_ratio=1e-4,
    )  # fmt: skip
    master.clock.now = 0  # nothing is expired
    removed = await master.retention.run_once()
    assert removed and {r.reason.value for r in removed} == {"forced"}
    assert store.min_offset == store.commitlog.segments[-1].start
    moved = await master.ask(pull(0, 0))
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    new_low, new_high = store.queue_offset_range(TOPIC, 0)
    assert new_low > low and new_high == high
    assert moved.fields()["nextBeginOffset"] == str(new_low)


async def test_status_reports_the_floor_and_a_new_master_takes_its_peers(master: Master) -> None:
    await master.send(60)
    store = master.store
    status = master.broker.status()
    assert status["servedMinOffset"] == store.min_offset == status["retentionFloor"] == 0
    floor = store.commitlog.segments[2].start
    master.retention.raise_floor(floor)
    status = master.broker.status()
    assert (status["minOffset"], status["servedMinOffset"], status["retentionFloor"]) == (
        0,
        floor,
        floor,
    )
    moved = await master.ask(pull(0, 0))
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED


async def test_pre_online_takes_the_highest_floor_its_peers_report(master: Master) -> None:
    """Three peers on real HTTP ports: one reports a floor, one none, one junk."""
    await master.send(60)
    reported: list[object] = [master.store.commitlog.segments[1].start, None, "junk"]
    runners, peers = [], []
    for value in reported:
        app = web.Application()

        async def status(_: web.Request, value: object = value) -> web.Response:
            return web.json_response({"retentionFloor": value})

        app.router.add_get("/v1/status", status)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        http_port = runner.addresses[0][1]
        peers.append(f"127.0.0.1:{http_port - 2}")  # a peer's HTTP port is clientPort + 2
    try:
        async with aiohttp.ClientSession() as http:
            master.retention._session = PeerHttp(http)
            await master.retention.pre_online(peers)
    finally:
        for runner in runners:
            await runner.cleanup()
    assert master.store.served_min_offset == reported[0]
    assert (await master.ask(pull(0, 0))).code == ResponseCode.PULL_OFFSET_MOVED
