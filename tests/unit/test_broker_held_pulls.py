"""Long polling on the broker's remoting port (remoting_front/pulls.py `pull_message`,
store/arrivals.py), against a confirmed master over real sockets: a suspended PULL_MESSAGE
holds until its queue's records are readable (RocketMQ's PullRequestHoldService woken by
NotifyMessageArrivingListener), not on a timer; a send to another queue leaves it held;
timeouts, closed connections and role changes leave no hold behind; over `max_held_pulls`
a pull is answered SYSTEM_BUSY at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.remoting_front import FrontSettings, RemotingFront, RemotingFrontServer
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth
from tests.unit.confirmed_master import confirmed_master

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
TOPIC = "TopicA"


class Port:
    def __init__(self, broker: Broker, server: RemotingFrontServer) -> None:
        self.broker = broker
        self.server = server
        assert broker.parts is not None
        self.parts = broker.parts
        self.arrivals = broker.parts.store.arrivals

    async def client(self) -> RemotingClient:
        return await RemotingClient.connect(
            f"127.0.0.1:{self.server.port}", credentials=Credentials(ACCESS_KEY, SECRET_KEY)
        )

    async def send(self, queue_id: int) -> None:
        await self.parts.produce.send_messages(TOPIC, queue_id, [ProduceMessage(TOPIC, b"m")])


def held_pull(queue_id: int, offset: int = 0, suspend_ms: int = 30_000) -> RemotingCommand:
    return request(RequestCode.PULL_MESSAGE, 0, {
        "consumerGroup": "g", "topic": TOPIC, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
        "suspendTimeoutMillis": str(suspend_ms),
    })  # fmt: skip


async def until(check: Callable[[], bool], what: str) -> None:
    """Wait for `check` (liveness, bounded; never a timing assertion)."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def start_pull(client: RemotingClient, cmd: RemotingCommand) -> asyncio.Task[RemotingCommand]:
    return asyncio.ensure_future(client.invoke(cmd, 60.0))


@pytest.fixture
async def make_port(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Port]]]:
    """A registered broker 1, confirmed master of SyncStateSet {1}, with its remoting port."""
    config = BrokerConfig()
    servers: list[RemotingFrontServer] = []
    async with confirmed_master(tmp_path, config) as m:
        broker, parts = m.broker, m.parts

        async def make(**front: int) -> Port:
            settings = FrontSettings("C", "broker-a", ("127.0.0.1", 10911), True, **front)
            server = RemotingFrontServer(
                RemotingFront(parts.produce, settings), ServerAuth({ACCESS_KEY: SECRET_KEY}.get)
            )
            await server.start("127.0.0.1", 0)
            servers.append(server)
            return Port(broker, server)

        yield make
        for server in servers:
            await server.close()


async def test_a_held_pull_is_answered_by_its_queues_arrival_only(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    consumer = await port.client()
    try:
        pull = await start_pull(consumer, held_pull(0))
        await until(lambda: len(port.arrivals) == 1, "the pull holds")
        await port.send(1)  # acknowledged: confirmOffset covers it
        await asyncio.sleep(0)
        assert not pull.done() and len(port.arrivals) == 1  # another queue: still held
        await port.send(0)
        answer = await pull
        assert answer.code == ResponseCode.SUCCESS, answer
        assert answer.fields()["nextBeginOffset"] == "1"
        assert len(port.arrivals) == 0
    finally:
        await consumer.close()


async def test_an_idle_held_pull_reads_the_store_once(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    """Held, it costs nothing: no re-read while its queue does not move (the old front
    re-read every 20 ms). The sleep only lets a timer, if there were one, fire."""
    port = await make_port()
    produce = port.parts.produce
    reads = 0
    pull_records = produce.pull_records

    async def counted(*args: Any) -> Any:
        nonlocal reads
        reads += 1
        return await pull_records(*args)

    produce.pull_records = counted  # type: ignore[method-assign]
    consumer = await port.client()
    try:
        pull = await start_pull(consumer, held_pull(0))
        await until(lambda: reads == 1, "the pull read its queue")
        await asyncio.sleep(0.3)
        assert reads == 1 and not pull.done()
        await port.send(0)
        assert (await pull).code == ResponseCode.SUCCESS
        assert reads == 2  # woken once, read once
    finally:
        await consumer.close()


async def test_a_timed_out_pull_answers_not_found_and_leaves_no_hold(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    consumer = await port.client()
    try:
        answer = await consumer.invoke(held_pull(0, suspend_ms=50), 10.0)
        assert answer.code == ResponseCode.PULL_NOT_FOUND, answer
        assert len(port.arrivals) == 0
    finally:
        await consumer.close()


async def test_a_closed_connection_leaves_no_hold(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    consumer = await port.client()
    pulls = [await start_pull(consumer, held_pull(q % 4)) for q in range(200)]
    await until(lambda: len(port.arrivals) == 200, "200 pulls hold")
    await consumer.close()
    await until(lambda: len(port.arrivals) == 0, "the closed connection's holds are gone")
    assert not port.arrivals._holds
    await asyncio.gather(*pulls, return_exceptions=True)


async def test_over_max_held_pulls_a_pull_is_answered_system_busy_at_once(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port(max_held_pulls=2)
    consumer = await port.client()
    try:
        held = [await start_pull(consumer, held_pull(q)) for q in (0, 1)]
        await until(lambda: len(port.arrivals) == 2, "two pulls hold")
        answer = await consumer.invoke(held_pull(2), 10.0)
        assert answer.code == ResponseCode.SYSTEM_BUSY, answer
        assert "max_held_pulls" in (answer.remark or "")
        await port.send(0)
        await port.send(1)
        assert [(await p).code for p in held] == [ResponseCode.SUCCESS] * 2
    finally:
        await consumer.close()


async def test_a_role_change_answers_held_pulls_as_the_new_role_says(
    make_port: Callable[..., Awaitable[Port]],
) -> None:
    port = await make_port()
    consumer = await port.client()
    try:
        pull = await start_pull(consumer, held_pull(0))
        await until(lambda: len(port.arrivals) == 1, "the pull holds")
        # RoleTransitions' Fence: stop replication, then take the new role.
        await port.parts.replication.stop()
        port.broker.role.fence()
        answer = await pull
        assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE, answer
        assert "fenced" in (answer.remark or "")
        assert len(port.arrivals) == 0
    finally:
        await consumer.close()
