"""POP over the broker's remoting port (a confirmed master, a real socket, RocketMQ's
headers): POP_MESSAGE answers the records and the offset infos a stock client builds each
message's POP_CK from (ExtraInfoUtil, rebuilt here as MQClientAPIImpl.processPopResponse
does), ACK_MESSAGE with that POP_CK, CHANGE_MESSAGE_INVISIBLETIME answers the new popTime,
BATCH_ACK_MESSAGE with BatchAck's bitSet, an empty long poll answers POLLING_TIMEOUT, a
FIFO pop answers orderCountInfo and reviveQid 999.

On the old code (b0939bf) POP_MESSAGE is answered REQUEST_CODE_NOT_SUPPORTED (the first
assert of every test fails so).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.store.message import StoredMessage
from brokergroup_broker.store.message_scan import decode_record
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from tests.unit.test_schedule_wire import Port, _port

GROUP, TOPIC = "pg", "Orders"


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    async for p in _port(tmp_path, BrokerConfig(auto_create_topic_enable=True)):
        step = getattr(p.broker.parts, "pop", None)
        if step is not None:
            step.step()  # the revive loop's first tick starts the master's POP term
        yield p


async def _pop(port: Port, n: int, *, poll_ms: int = 0, order: bool = False) -> RemotingCommand:
    fields = {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1", "maxMsgNums": str(n),
        "invisibleTime": "60000", "pollTime": str(poll_ms), "bornTime": "1", "initMode": "0",
        "expType": "TAG", "exp": "*", "order": str(order).lower(),
    }  # fmt: skip
    return await port.client.invoke(request(RequestCode.POP_MESSAGE, 0, fields), 5.0)


def _messages(answer: RemotingCommand) -> list[tuple[StoredMessage, str]]:
    """Each record with the POP_CK a stock client gives it (processPopResponse)."""
    f = answer.fields()
    starts = {
        f"{p[0]}@{p[1]}": int(p[2]) for p in (x.split(" ") for x in f["startOffsetInfo"].split(";"))
    }
    offsets = {f"{p[0]}@{p[1]}": [int(o) for o in p[2].split(",")]
               for p in (x.split(" ") for x in f["msgOffsetInfo"].split(";"))}  # fmt: skip
    body, pos, out = answer.body, 0, []
    while pos < len(body):
        m = decode_record(body, pos)
        pos += m.size
        mark = "1" if m.topic.startswith("%RETRY%") else "0"
        key = f"{mark}@{m.queue_id}"
        assert m.queue_offset in offsets[key]
        ck = " ".join([str(starts[key]), f["popTime"], f["invisibleTime"], f["reviveQid"], mark,
                       "broker-a", str(m.queue_id), str(m.queue_offset)])  # fmt: skip
        out.append((m, ck))
    return out


async def _ack(port: Port, m: StoredMessage, ck: str) -> RemotingCommand:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(m.queue_id),
              "extraInfo": ck, "offset": str(m.queue_offset)}  # fmt: skip
    return await port.client.invoke(request(RequestCode.ACK_MESSAGE, 0, fields), 5.0)


async def test_pop_ack_and_change_invisible_time_over_the_wire(port: Port) -> None:
    for key in ("k1", "k2", "k3"):
        assert (await port.send({"UNIQ_KEY": key}, queue=1, body=key.encode())).code == 0
    answer = await _pop(port, 2)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    got = _messages(answer)
    assert [(m.body, m.topic, m.queue_offset) for m, _ in got] == [
        (b"k1", TOPIC, 0), (b"k2", TOPIC, 1)
    ]  # fmt: skip
    assert answer.fields()["restNum"] == "1"
    assert (await _ack(port, *got[0])).code == ResponseCode.SUCCESS
    m, ck = got[1]
    change = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "1", "extraInfo": ck,
              "offset": str(m.queue_offset), "invisibleTime": "120000"}  # fmt: skip
    changed = await port.client.invoke(
        request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, 0, change), 5.0
    )
    assert changed.code == ResponseCode.SUCCESS, changed.remark
    assert changed.fields()["invisibleTime"] == "120000"
    stale = await _ack(port, m, ck)  # the receipt before the change no longer counts
    assert stale.code == ResponseCode.NO_MESSAGE and "not the message's current one" in (
        stale.remark or ""
    )
    new_ck = " ".join([str(m.queue_offset), changed.fields()["popTime"], "120000", "0", "0",
                       "broker-a", "1", str(m.queue_offset)])  # fmt: skip
    assert (await _ack(port, m, new_ck)).code == ResponseCode.SUCCESS
    rest = _messages(await _pop(port, 5))
    assert [m.body for m, _ in rest] == [b"k3"]
    m3, ck3 = rest[0]
    bits = base64.b64encode(bytes([1 << (m3.queue_offset - int(ck3.split(" ")[0]))])).decode()
    batch = {"brokerName": "broker-a", "acks": [{
        "c": GROUP, "t": TOPIC, "r": "0", "so": int(ck3.split(" ")[0]), "q": 1, "rq": 0,
        "pt": int(ck3.split(" ")[1]), "it": 60000, "b": bits}]}  # fmt: skip
    acked = await port.client.invoke(
        request(RequestCode.BATCH_ACK_MESSAGE, 0, {}, json.dumps(batch).encode()), 5.0
    )
    assert acked.code == ResponseCode.SUCCESS, acked.remark
    empty = await _pop(port, 5, poll_ms=50)  # long polling, nothing arrives
    assert empty.code == ResponseCode.POLLING_TIMEOUT
    assert port.broker.parts is not None
    port.broker.parts.pop.step()
    assert port.store.consumer_offsets.get(GROUP, TOPIC, 1) == 3


async def test_a_fifo_pop_answers_its_order_counts_and_the_order_revive_queue(port: Port) -> None:
    for key in ("f1", "f2"):
        assert (await port.send({"UNIQ_KEY": key}, queue=0, body=key.encode())).code == 0
    answer = await _pop(port, 1, order=True)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert answer.fields()["reviveQid"] == "999"
    assert answer.fields()["orderCountInfo"] == "0 qo0%0 0"
    [(m, ck)] = _messages(answer)
    locked = await _pop(port, 1, order=True)
    assert locked.code == ResponseCode.PULL_NOT_FOUND  # f2 waits for f1's ack
    assert (await _ack(port, m, ck)).code == ResponseCode.SUCCESS
    assert [m.body for m, _ in _messages(await _pop(port, 1, order=True))] == [b"f2"]


async def test_the_in_flight_bound_is_the_broker_setting(tmp_path: Path) -> None:
    """popMaxInFlightPerGroup from the broker's config: a group holding that many receipts
    is refused POLLING_FULL naming the bound; an ack makes room. 0 is refused at start."""
    with pytest.raises(ValueError, match="popMaxInFlightPerGroup must be > 0"):
        BrokerConfig(pop_max_in_flight_per_group=0)
    config = BrokerConfig(auto_create_topic_enable=True, pop_max_in_flight_per_group=2)
    async for port in _port(tmp_path, config):
        assert port.broker.parts is not None
        port.broker.parts.pop.step()
        for key in ("k1", "k2", "k3"):
            assert (await port.send({"UNIQ_KEY": key}, queue=0, body=key.encode())).code == 0
        got = _messages(await _pop(port, 5))
        assert [m.body for m, _ in got] == [b"k1", b"k2"]  # room for two only
        full = await _pop(port, 5)
        assert full.code == ResponseCode.POLLING_FULL
        assert "popMaxInFlightPerGroup 2" in (full.remark or ""), full.remark
        assert (await _ack(port, *got[0])).code == ResponseCode.SUCCESS
        assert [m.body for m, _ in _messages(await _pop(port, 5))] == [b"k3"]
