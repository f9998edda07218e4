"""How a stock push consumer turns to POP (remoting_front/assignments.py, docs/pop.md "A
stock push consumer"): QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401), and the
message request modes kept in the broker's metadata (metadata/request_modes.py).

- The allocation strategies are RocketMQ's: AllocateMessageQueueAveragely's and ByCircle's
  expected answers from RocketMQ's own tests' cases, and on random inputs every queue goes
  to exactly one live client, in order (hypothesis); allocate4Pop shares the queues of the
  next popShareQueueNum clients, or hands every client queue -1.
- Over a real socket to a confirmed master: a (topic, group) is PULL until
  SET_MESSAGE_REQUEST_MODE sets POP; then QUERY_ASSIGNMENT answers mode POP with queue -1;
  a retry topic's mode is refused NO_PERMISSION and a bad body SYSTEM_ERROR, changing
  nothing; the mode survives a reopen (fsynced file) and reaches a slave through the
  metadata snapshot, and a stale peer's table does not replace a newer one.
- POP's SQL92 subscriptions go through the filter package: only matching messages are
  popped; an expression that does not compile is refused SUBSCRIPTION_PARSE_FAILED.

On the old code (b0939bf) QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE and POP_MESSAGE are
answered REQUEST_CODE_NOT_SUPPORTED, and there is no assignments module to import.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.metadata import (
    BadMetadata,
    BrokerMetadata,
    MessageRequestMode,
    RequestMode,
)
from brokergroup_broker.remoting_front.assignments import (
    AVG,
    AVG_BY_CIRCLE,
    MessageQueue,
    allocate_averagely,
    allocate_by_circle,
    allocate_for_pop,
    assign,
)
from brokergroup_broker.store.message_scan import decode_record
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from tests.unit.test_schedule_wire import Port, _port

GROUP, TOPIC = "pg", "Orders"


def queues(n: int, topic: str = TOPIC) -> list[MessageQueue]:
    return [MessageQueue(topic, "broker-a", q) for q in range(n)]


# ---------------------------------------------------------------- the allocation (pure)


def test_averagely_gives_consecutive_runs_the_first_clients_one_more() -> None:
    mqs = queues(10)
    cids = ["c0", "c1", "c2", "c3"]
    got = {c: [mq.queue_id for mq in allocate_averagely(mqs, cids, c)] for c in cids}
    assert got == {"c0": [0, 1, 2], "c1": [3, 4, 5], "c2": [6, 7], "c3": [8, 9]}
    # More clients than queues: one each, the rest nothing.
    few = {c: [mq.queue_id for mq in allocate_averagely(queues(2), cids, c)] for c in cids}
    assert few == {"c0": [0], "c1": [1], "c2": [], "c3": []}
    assert allocate_averagely(mqs, cids, "stranger") == []


def test_by_circle_deals_the_queues_round() -> None:
    cids = ["c0", "c1", "c2"]
    got = {c: [mq.queue_id for mq in allocate_by_circle(queues(7), cids, c)] for c in cids}
    assert got == {"c0": [0, 3, 6], "c1": [1, 4], "c2": [2, 5]}


@given(
    st.integers(1, 40), st.sets(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=12)
)
def test_every_queue_goes_to_exactly_one_client_in_order(n: int, clients: set[str]) -> None:
    mqs, cids = queues(n), sorted(clients)
    for strategy in (allocate_averagely, allocate_by_circle):
        dealt = [mq for c in cids for mq in strategy(mqs, cids, c)]
        assert sorted(dealt) == mqs  # each once, none left
        for c in cids:
            mine = strategy(mqs, cids, c)
            assert mine == sorted(mine)


def test_pop_assignments_share_queues_or_hand_out_any_queue() -> None:
    mqs, cids = queues(8), ["c0", "c1", "c2", "c3"]
    # popShareQueueNum 0: every client pops every queue, as queue -1 (the broker picks).
    assert allocate_for_pop(allocate_averagely, mqs, cids, "c1", 0) == [
        MessageQueue(TOPIC, "broker-a", -1)
    ]
    # 1: its own and the next client's (wrapping round).
    own_and_next = allocate_for_pop(allocate_averagely, mqs, cids, "c3", 1)
    assert [mq.queue_id for mq in own_and_next] == [6, 7, 0, 1]
    # At least the clients but one: everything, as 0.
    assert allocate_for_pop(allocate_averagely, mqs, cids, "c0", 3)[0].queue_id == -1
    # More clients than queues: one queue each, so nobody is idle.
    many = [f"c{i}" for i in range(5)]
    two = queues(2)
    got = [allocate_for_pop(allocate_averagely, two, many, c, 1)[0].queue_id for c in many]
    assert got == [0, 1, 0, 1, 0]


def test_assign_answers_nothing_for_an_unknown_topic_strategy_or_group() -> None:
    pop = RequestMode(TOPIC, GROUP, MessageRequestMode.POP)
    base = {"topic": TOPIC, "broker_name": "broker-a", "queue_count": 4, "clients": ["c0"],
            "client_id": "c0", "message_model": "CLUSTERING", "strategy_name": AVG,
            "mode": pop}  # fmt: skip
    assert assign(**base) == [MessageQueue(TOPIC, "broker-a", -1)]  # type: ignore[arg-type]
    assert assign(**{**base, "queue_count": None}) is None  # type: ignore[arg-type]
    assert assign(**{**base, "strategy_name": "CONSISTENT_HASH"}) is None  # type: ignore[arg-type]
    assert assign(**{**base, "clients": []}) is None  # type: ignore[arg-type]
    broadcast = assign(**{**base, "message_model": "BROADCASTING"})  # type: ignore[arg-type]
    assert broadcast == queues(4)
    pull = assign(**{**base, "mode": RequestMode(TOPIC, GROUP), "strategy_name": AVG_BY_CIRCLE})  # type: ignore[arg-type]
    assert pull == queues(4)


# ---------------------------------------------------------------- the metadata table


def test_request_modes_are_durable_replicated_and_checked(tmp_path: Path) -> None:
    master = BrokerMetadata(tmp_path / "master")
    entry = RequestMode(TOPIC, GROUP, MessageRequestMode.POP, 2)
    assert master.put_request_mode(entry, 1000)
    assert not master.put_request_mode(entry, 1001)  # already so: no new version
    reopened = BrokerMetadata(tmp_path / "master")
    assert reopened.request_modes.get(TOPIC, GROUP) == entry
    file = json.loads((tmp_path / "master" / "config" / "messageRequestMode.json").read_text())
    assert file["messageRequestModeMap"] == {TOPIC: {GROUP: {
        "topic": TOPIC, "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 2}}}  # fmt: skip

    slave = BrokerMetadata(tmp_path / "slave")
    assert slave.sync_from_master(*slave.parse_snapshot(master.snapshot()))
    assert slave.request_modes == master.request_modes
    assert BrokerMetadata(tmp_path / "slave").request_modes.get(TOPIC, GROUP) == entry
    # A stale peer (an older version) does not replace a newer table before going online.
    stale = BrokerMetadata(None)
    stale.put_request_mode(RequestMode(TOPIC, GROUP), 500)
    assert not master.merge_newer(*master.parse_snapshot(stale.snapshot()))
    assert master.request_modes.get(TOPIC, GROUP) == entry
    # An older peer's snapshot without the table: an empty one, never newer.
    old = master.snapshot()
    del old["messageRequestModes"]
    assert len(master.parse_snapshot(old)[2]) == 0

    for bad in ({"topic": TOPIC, "consumerGroup": GROUP, "mode": "PUSH"},
                {"topic": TOPIC, "consumerGroup": GROUP, "popShareQueueNum": -1},
                {"topic": "bad topic!", "consumerGroup": GROUP},
                {"topic": TOPIC}):  # fmt: skip
        with pytest.raises(BadMetadata):
            RequestMode.from_json(bad)


# ---------------------------------------------------------------- over the wire


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    async for p in _port(tmp_path, BrokerConfig(auto_create_topic_enable=True)):
        assert p.broker.parts is not None
        p.broker.parts.pop.step()  # the revive loop's first tick starts the POP term
        yield p


async def _heartbeat(port: Port, client_id: str) -> None:
    data = {
        "clientID": client_id,
        "consumerDataSet": [{
            "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
            "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "expressionType": "TAG",
                                     "tagsSet": [], "codeSet": [], "subVersion": 1}],
            "unitMode": False}],
    }  # fmt: skip
    body = json.dumps(data).encode()
    answer = await port.client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body), 5.0)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


async def _query(port: Port, client_id: str, topic: str = TOPIC) -> RemotingCommand:
    body = {"topic": topic, "consumerGroup": GROUP, "clientId": client_id,
            "strategyName": "AVG", "messageModel": "CLUSTERING"}  # fmt: skip
    return await port.client.invoke(
        request(RequestCode.QUERY_ASSIGNMENT, 0, {}, json.dumps(body).encode()), 5.0
    )


async def _set_mode(port: Port, body: dict[str, object]) -> RemotingCommand:
    return await port.client.invoke(
        request(RequestCode.SET_MESSAGE_REQUEST_MODE, 0, {}, json.dumps(body).encode()), 5.0
    )


def _assignments(answer: RemotingCommand) -> list[tuple[int, str]]:
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    found = json.loads(answer.body)["messageQueueAssignments"]
    return sorted((a["messageQueue"]["queueId"], a["mode"]) for a in found)


async def test_a_group_is_pull_until_set_to_pop_then_pops_any_queue(port: Port) -> None:
    assert (await port.send({"UNIQ_KEY": "k"}, queue=0)).code == 0  # the topic, 4 queues
    await _heartbeat(port, "c1")
    await _heartbeat(port, "c2")
    assert _assignments(await _query(port, "c1")) == [(0, "PULL"), (1, "PULL")]
    assert _assignments(await _query(port, "c2")) == [(2, "PULL"), (3, "PULL")]

    pop = {"topic": TOPIC, "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0}
    answer = await _set_mode(port, pop)
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert _assignments(await _query(port, "c1")) == [(-1, "POP")]
    assert _assignments(await _query(port, "c2")) == [(-1, "POP")]
    # The group's retry topic stays PULL, and may not be set.
    refused = await _set_mode(port, {**pop, "topic": "%RETRY%pg"})
    assert refused.code == ResponseCode.NO_PERMISSION
    assert refused.remark == "retry topic is not allowed to set mode"
    # A bad body changes nothing.
    bad = await _set_mode(port, {**pop, "mode": "PUSH"})
    assert bad.code == ResponseCode.SYSTEM_ERROR and "PUSH" in (bad.remark or "")
    assert port.broker._remoting is not None
    held = port.broker._remoting.front.metadata.request_modes
    assert [e.to_json() for e in held.entries.values()] == [pop]
    # An unknown topic: no answer (null), the client keeps what it has.
    unknown = await _query(port, "c1", "NoSuchTopic")
    assert json.loads(unknown.body) == {"messageQueueAssignments": None}


async def _pop(port: Port, exp_type: str, exp: str) -> RemotingCommand:
    fields = {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": "-1", "maxMsgNums": "32",
        "invisibleTime": "60000", "pollTime": "0", "bornTime": "1", "initMode": "0",
        "expType": exp_type, "exp": exp, "order": "false",
    }  # fmt: skip
    return await port.client.invoke(request(RequestCode.POP_MESSAGE, 0, fields), 5.0)


async def test_a_sql92_pop_hands_out_only_matching_messages(port: Port) -> None:
    for i in range(6):
        props = {"UNIQ_KEY": f"k{i}", "amount": str(i * 10), "TAGS": "even" if i % 2 else "odd"}
        assert (await port.send(props, queue=0, body=f"m{i}".encode())).code == 0
    bad = await _pop(port, "SQL92", "amount >")
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, bad.remark
    answer = await _pop(port, "SQL92", "amount >= 20 AND TAGS = 'even'")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    bodies, pos = [], 0
    while pos < len(answer.body):
        m = decode_record(answer.body, pos)
        pos += m.size
        bodies.append(m.body)
    assert bodies == [b"m3", b"m5"]
