"""Scheduled and timer messages on the broker's remoting port (issue 34 item 1), over real
sockets against a confirmed master with a real store, its remoting port started as the
broker starts it (`Broker._start_remoting`), and its delivery service stepped with a fake
wall clock (no sleeps):

- SEND_MESSAGE_V2 with DELAY=3 is stored in SCHEDULE_TOPIC_XXXX queue 2 with REAL_TOPIC /
  REAL_QID and answered with the queue it asked for; it reaches its real topic and queue
  10 s after its store time, not a millisecond before, without DELAY;
- TIMER_DELAY_SEC / TIMER_DELIVER_MS are stored in rmq_sys_wheel_timer with TIMER_OUT_MS
  and delivered then, with TIMER_ENQUEUE_MS / TIMER_DEQUEUE_MS and without REAL_*; a
  deliver time in the past is an ordinary send; beyond timerMaxDelaySec, unreadable, to a
  system topic, or past timerMaxPending: refused with RocketMQ's codes and remarks;
- CONSUMER_SEND_MSG_BACK (delayLevel 0, reconsumeTimes 0) waits level 3 (10 s) in
  SCHEDULE_TOPIC_XXXX before %RETRY%<group>; delivery progress is kept as consumer offsets,
  so a new term (a restart of the service from them) delivers nothing twice.

On the old code (08e4c59) the first delayed send is answered MESSAGE_ILLEGAL ("scheduled
(delayed/timer) messages are not supported by brokergroup").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.broker_settings import BrokerSettings, mono_ms, store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import ControllerLink
from brokergroup_broker.core.peer_http import PeerHttp
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.message import StoredMessage
from brokergroup_controller.client import ControllerClient
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.unit.conftest import Clock, eventually, free_ports

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
SCHEDULE_TOPIC, TIMER_TOPIC = "SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"


@dataclass
class Port:
    broker: Broker
    store: MessageStore
    client: RemotingClient

    async def send(self, props: dict[str, str], *, topic: str = "Orders", queue: int = 1,
                   body: bytes = b"x") -> RemotingCommand:  # fmt: skip
        fields = {
            "a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": str(queue), "f": "0",
            "g": "1700000000000", "h": "0", "i": wire.encode_properties(props), "j": "0",
            "k": "false", "m": "false", "n": "broker-a",
        }  # fmt: skip
        return await self.client.invoke(request(RequestCode.SEND_MESSAGE_V2, 0, fields, body), 5.0)

    def read(self, topic: str, queue: int) -> list[StoredMessage]:
        return self.store.get_messages(topic, queue, 0, 100, self.store.max_offset)


async def _port(tmp_path: Path, config: BrokerConfig) -> AsyncIterator[Port]:
    settings = BrokerSettings("C", "broker-a", tmp_path, ("127.0.0.1:1",), None,
                              "127.0.0.1", "127.0.0.1", client_port=-1,
                              remoting_port=free_ports()[0],
                              remoting_credentials=Credentials(ACCESS_KEY, SECRET_KEY))  # fmt: skip
    controller = ControllerLink(ControllerClient(["127.0.0.1:1"]), "C", "broker-a")
    broker = Broker(settings, config, controller)
    broker.store = store = MessageStore.open(tmp_path / "store", store_config_of(config))
    async with aiohttp.ClientSession() as http:
        parts = broker._wire(1, store, PeerHttp(http))
        become_master = roles.BecomeMaster(1, frozenset({1}), 1)
        store.epoch_file.begin_epoch(1, store.max_offset)
        await parts.replication.start_master(become_master, store.max_offset, 0)
        broker.role.carried_out(become_master)
        broker.lease.renew(mono_ms())
        await broker._start_remoting(parts)
        assert settings.remoting_port is not None
        client = await RemotingClient.connect(
            f"127.0.0.1:{settings.remoting_port}",
            credentials=Credentials(ACCESS_KEY, SECRET_KEY),
        )
        yield Port(broker, store, client)
        await client.close()
        assert broker._remoting is not None
        await broker._remoting.close()
        await parts.replication.stop()
    store.close()
    await controller.close()


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    async for p in _port(tmp_path, BrokerConfig(auto_create_topic_enable=True)):
        yield p


def _service(port: Port, clock: Clock[int]) -> Any:
    """A delivery service over the broker's produce path and store, on a fake wall clock
    (imported here: on the old code the first send already fails)."""
    from brokergroup_broker.schedule.service import ScheduleService

    parts = port.broker.parts
    assert parts is not None
    role = port.broker.role
    return ScheduleService(
        store=port.store,
        produce=parts.produce,
        rules=parts.schedule.rules,
        master_term=lambda: role.master_epoch if role.accepting_writes else None,
        confirm_offset=parts.replication.confirm_offset,
        wall_ms=clock,
    )


async def _deliver(service: Any, port: Port, topic: str, queue: int, count: int) -> None:
    def stepped() -> bool:
        service.step()
        return len(port.read(topic, queue)) >= count

    await eventually(stepped, f"{count} messages in {topic} queue {queue}")


async def test_a_delay_level_waits_its_delay_then_reaches_its_real_queue(port: Port) -> None:
    answer = await port.send({"UNIQ_KEY": "U1", "TAGS": "TagA", "DELAY": "3"}, body=b"later")
    assert answer.code == ResponseCode.SUCCESS, answer
    assert answer.fields()["queueId"] == "1"  # the queue asked for, as RocketMQ answers
    assert port.read("Orders", 1) == []
    (held,) = port.read(SCHEDULE_TOPIC, 2)
    # The broker's stamps (as SendMessageProcessor adds them) come before the redirect.
    stamps = {"MSG_REGION": "DefaultRegion", "TRACE_ON": "true", "CLUSTER": "C"}
    assert held.properties == {"UNIQ_KEY": "U1", "TAGS": "TagA", "DELAY": "3", **stamps,
                               "REAL_TOPIC": "Orders", "REAL_QID": "1"}  # fmt: skip
    clock = Clock(held.store_timestamp_ms + 9_999)
    service = _service(port, clock)
    for _ in range(3):
        service.step()
    assert port.read("Orders", 1) == []  # 1 ms before its time
    clock.now += 1
    await _deliver(service, port, "Orders", 1, 1)
    (delivered,) = port.read("Orders", 1)
    assert (delivered.body, delivered.properties) == (
        b"later",
        {"UNIQ_KEY": "U1", "TAGS": "TagA", **stamps, "REAL_TOPIC": "Orders", "REAL_QID": "1"},
    )
    assert (delivered.born_timestamp_ms, delivered.flag) == (held.born_timestamp_ms, held.flag)
    # The progress is a consumer offset of the system group: a new term starts after it.
    offsets = port.store.consumer_offsets
    assert offsets.get("CID_RMQ_SYS_SCHEDULE", SCHEDULE_TOPIC, 2) == 1
    # An idle service does not rewrite the offsets (and the slaves' copies) every tick.
    service.step()
    version = offsets.version
    for _ in range(5):
        clock.now += 1_000
        service.step()
    assert offsets.version == version
    clock.now += 60_000
    again = _service(port, clock)
    for _ in range(3):
        again.step()
    assert len(port.read("Orders", 1)) == 1


async def test_timers_are_delivered_at_their_time_and_refused_beyond_the_rules(
    port: Port,
) -> None:
    answer = await port.send({"UNIQ_KEY": "T1", "TIMER_DELAY_SEC": "5"}, queue=2)
    assert answer.code == ResponseCode.SUCCESS, answer
    (held,) = port.read(TIMER_TOPIC, 0)
    out = int(held.properties["TIMER_OUT_MS"])
    assert held.store_timestamp_ms < out <= held.store_timestamp_ms + 5_000  # 5 s from the send
    assert (held.properties["REAL_TOPIC"], held.properties["REAL_QID"]) == ("Orders", "2")
    # A deliver time already past is an ordinary send.
    answer = await port.send({"UNIQ_KEY": "T0", "TIMER_DELIVER_MS": "1000"}, queue=3)
    assert answer.code == ResponseCode.SUCCESS, answer
    assert [m.properties["UNIQ_KEY"] for m in port.read("Orders", 3)] == ["T0"]
    refusals = [
        ({"TIMER_DELAY_SEC": str(3 * 86_400 + 60)}, "Orders", ResponseCode.MESSAGE_ILLEGAL,
         "timer message illegal, the delay time should not be bigger than the max delay "
         "259200000ms"),
        ({"TIMER_DELIVER_MS": "soon"}, "Orders", ResponseCode.MESSAGE_ILLEGAL, "must be a number"),
        ({"DELAY": "two"}, "Orders", ResponseCode.MESSAGE_ILLEGAL, "is not a number"),
        ({}, SCHEDULE_TOPIC, ResponseCode.NO_PERMISSION,
         "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."),
    ]  # fmt: skip
    for props, topic, code, remark in refusals:
        answer = await port.send(props, topic=topic, queue=0)
        assert answer.code == code and remark in (answer.remark or ""), (props, answer)
    assert len(port.read(TIMER_TOPIC, 0)) == 1  # nothing refused was stored
    clock = Clock(out - 1)
    service = _service(port, clock)
    for _ in range(3):
        service.step()
    assert len(port.read("Orders", 2)) == 0
    clock.now = out
    await _deliver(service, port, "Orders", 2, 1)
    (delivered,) = port.read("Orders", 2)
    props = delivered.properties
    assert props["UNIQ_KEY"] == "T1" and props["TIMER_OUT_MS"] == str(out)
    assert "REAL_TOPIC" not in props and "REAL_QID" not in props
    assert props["TIMER_ENQUEUE_MS"] == str(held.store_timestamp_ms)
    assert props["TIMER_DEQUEUE_MS"] == str(out)


async def test_timer_max_pending_refuses_one_more_timer(tmp_path: Path) -> None:
    config = BrokerConfig(auto_create_topic_enable=True, timer_max_pending=2)
    async for port in _port(tmp_path, config):
        for key in ("A", "B"):
            answer = await port.send({"UNIQ_KEY": key, "TIMER_DELAY_MS": "60000"})
            assert answer.code == ResponseCode.SUCCESS, answer
        answer = await port.send({"UNIQ_KEY": "C", "TIMER_DELAY_MS": "60000"})
        assert answer.code == ResponseCode.SYSTEM_ERROR
        assert "timerMaxPending is 2" in (answer.remark or "")
        # A delay level is no timer: not bounded by it.
        answer = await port.send({"UNIQ_KEY": "D", "DELAY": "1"})
        assert answer.code == ResponseCode.SUCCESS, answer
        assert [m.properties["UNIQ_KEY"] for m in port.read(TIMER_TOPIC, 0)] == ["A", "B"]


async def test_a_send_back_waits_level_three_before_the_retry_topic(port: Port) -> None:
    answer = await port.send({"UNIQ_KEY": "R1"}, queue=0, body=b"work")
    assert answer.code == ResponseCode.SUCCESS, answer
    (original,) = port.read("Orders", 0)
    back = {"offset": str(original.physical_offset), "group": "billing", "delayLevel": "0",
            "originMsgId": "R1", "maxReconsumeTimes": "16"}  # fmt: skip
    answer = await port.client.invoke(request(RequestCode.CONSUMER_SEND_MSG_BACK, 0, back), 5.0)
    assert answer.code == ResponseCode.SUCCESS, answer
    assert port.read("%RETRY%billing", 0) == []
    (held,) = port.read(SCHEDULE_TOPIC, 2)  # level 3 = 3 + reconsumeTimes 0
    assert held.properties["DELAY"] == "3" and held.properties["REAL_TOPIC"] == "%RETRY%billing"
    assert held.reconsume_times == 1
    clock = Clock(held.store_timestamp_ms + 9_999)
    service = _service(port, clock)
    for _ in range(3):
        service.step()
    assert port.read("%RETRY%billing", 0) == []
    clock.now += 1
    await _deliver(service, port, "%RETRY%billing", 0, 1)
    (retry,) = port.read("%RETRY%billing", 0)
    assert (retry.body, retry.reconsume_times) == (b"work", 1)
    assert retry.properties["RETRY_TOPIC"] == "Orders"
    assert retry.properties["ORIGIN_MESSAGE_ID"] == "R1"
    assert "DELAY" not in retry.properties
    # The second send-back waits level 4 (30 s).
    back["offset"] = str(retry.physical_offset)
    answer = await port.client.invoke(request(RequestCode.CONSUMER_SEND_MSG_BACK, 0, back), 5.0)
    assert answer.code == ResponseCode.SUCCESS, answer
    (held4,) = port.read(SCHEDULE_TOPIC, 3)
    assert (held4.properties["DELAY"], held4.reconsume_times) == ("4", 2)
