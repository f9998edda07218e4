"""Transactional messages on the broker's remoting port (issue 34 item 2), over real sockets
against a confirmed master with a real store, its remoting port started as the broker starts
it (`Broker._start_remoting`), and its transaction service stepped on a fake wall clock (no
sleeps):

- a prepared SEND_MESSAGE_V2 (TRAN_MSG=true, PGROUP, the prepared sysFlag) is stored in
  RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC / REAL_QID and its transaction bits
  cleared, answered with the queue it asked for, the half queue offset and its
  transactionId, and nothing reaches the real topic;
- END_TRANSACTION commit stores it in its real queue once (sysFlag of the commit type, every
  property kept, as RocketMQ's stored properties), with a "d" op record naming the half; the
  same END again, or a rollback after it, stores nothing; a rollback stores only the op;
- an END naming the wrong group, offset or a record that is no half message is refused
  with RocketMQ's remark and stores nothing; a prepared send without PGROUP, and a send to
  the half topic, are refused;
- a half message past transactionTimeOut is checked back: CHECK_TRANSACTION_STATE
  (oneway) reaches the producer connection of its group with RocketMQ's header and the
  message (real topic, TRANSACTION_CHECK_TIMES) as its body; the producer's answer
  (fromTransactionCheck) commits it; one unanswered is checked transactionCheckMax times,
  then moved to TRANS_CHECK_MAX_TIME_TOPIC, and a late commit delivers nothing;
- a new term (a new master from the persisted progress) keeps the check counts and
  resolutions: nothing is delivered twice.

On the old code (08e4c59) the first prepared send is answered MESSAGE_ILLEGAL
("transactional messages are not supported by brokergroup").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
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
from brokergroup_broker.store.message_scan import decode_record
from brokergroup_controller.client import ControllerClient
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Connection, Credentials, RemotingClient
from tests.unit.conftest import Clock, eventually, free_ports

ACCESS_KEY, SECRET_KEY = "brokerAK01", "brokerSecret-0123"
HALF, OP, CHECK_MAX = (
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
)
BORN = 1_700_000_000_000
COMMIT, ROLLBACK = 8, 12


@dataclass
class Port:
    broker: Broker
    store: MessageStore
    client: RemotingClient
    clock: Clock[int]
    service: Any
    #: CHECK_TRANSACTION_STATE requests the producer connection received.
    checks: list[RemotingCommand] = field(default_factory=list)

    async def send(self, props: dict[str, str], *, topic: str = "Orders", sys_flag: int = 4,
                   body: bytes = b"payload") -> RemotingCommand:  # fmt: skip
        fields = {
            "a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": str(sys_flag),
            "g": str(BORN), "h": "0", "i": wire.encode_properties(props), "j": "0",
            "k": "false", "m": "false", "n": "broker-a",
        }  # fmt: skip
        return await self.client.invoke(request(RequestCode.SEND_MESSAGE_V2, 0, fields, body), 5.0)

    async def half(self, key: str) -> tuple[int, int]:
        """A prepared send of `key`: (commit log offset, half queue offset)."""
        answer = await self.send({"TRAN_MSG": "true", "PGROUP": "pg", "UNIQ_KEY": key})
        assert answer.code == ResponseCode.SUCCESS, answer
        _, _, offset = wire.decode_message_id(answer.fields()["msgId"])
        return offset, int(answer.fields()["queueOffset"])

    async def end(self, offset: tuple[int, int], kind: int, *, group: str = "pg",
                  from_check: bool = False) -> RemotingCommand:  # fmt: skip
        fields = {
            "producerGroup": group, "tranStateTableOffset": str(offset[1]),
            "commitLogOffset": str(offset[0]), "commitOrRollback": str(kind),
            "fromTransactionCheck": str(from_check).lower(), "msgId": "m",
        }  # fmt: skip
        return await self.client.invoke(request(RequestCode.END_TRANSACTION, 0, fields), 5.0)

    def read(self, topic: str, queue: int = 0) -> list[StoredMessage]:
        return self.store.get_messages(topic, queue, 0, 100, self.store.max_offset)

    def step(self) -> None:
        self.service.step()


async def _port(tmp_path: Path, config: BrokerConfig) -> AsyncIterator[Port]:
    settings = BrokerSettings("C", "broker-a", tmp_path, ("127.0.0.1:1",), None,
                              "127.0.0.1", "127.0.0.1", client_port=-1,
                              remoting_port=free_ports()[0],
                              remoting_credentials=Credentials(ACCESS_KEY, SECRET_KEY))  # fmt: skip
    controller = ControllerLink(ControllerClient(["127.0.0.1:1"]), "C", "broker-a")
    broker = Broker(settings, config, controller)
    broker.store = store = MessageStore.open(tmp_path / "store", store_config_of(config))
    clock = Clock(BORN + 1_000)
    async with aiohttp.ClientSession() as http:
        parts = broker._wire(1, store, PeerHttp(http))
        become_master = roles.BecomeMaster(1, frozenset({1}), 1)
        store.epoch_file.begin_epoch(1, store.max_offset)
        await parts.replication.start_master(become_master, store.max_offset, 0)
        broker.role.carried_out(become_master)
        broker.lease.renew(mono_ms())
        service = _service(broker, clock)
        await broker._start_remoting(parts)
        assert settings.remoting_port is not None
        port: Port | None = None

        async def on_check(cmd: RemotingCommand, conn: Connection) -> RemotingCommand | None:
            assert port is not None
            port.checks.append(cmd)
            return None

        client = await RemotingClient.connect(
            f"127.0.0.1:{settings.remoting_port}",
            credentials=Credentials(ACCESS_KEY, SECRET_KEY),
            handlers={int(RequestCode.CHECK_TRANSACTION_STATE): on_check},
        )
        port = Port(broker, store, client, clock, service)
        if service is not None:
            service.step()  # the term starts now: its first check round one interval later
        yield port
        await client.close()
        assert broker._remoting is not None
        await broker._remoting.close()
        await parts.replication.stop()
    store.close()
    await controller.close()


def _service(broker: Broker, clock: Clock[int]) -> Any:
    """The broker's transaction service on a fake wall clock, in its place before the
    remoting port starts (imported here: on the old code the first send already fails)."""
    if getattr(broker, "transactions", None) is None:
        return None
    from brokergroup_broker.transaction.service import TransactionService

    parts = broker.parts
    assert parts is not None and broker.transactions is not None
    role = broker.role
    broker.transactions = TransactionService(
        store=parts.store,
        produce=parts.produce,
        rules=broker.transactions.rules,
        master_term=lambda: role.master_epoch if role.accepting_writes else None,
        confirm_offset=parts.replication.confirm_offset,
        wall_ms=clock,
    )
    return broker.transactions


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    config = BrokerConfig(
        auto_create_topic_enable=True,
        transaction_time_out=6_000,
        transaction_check_interval=30_000,
        transaction_check_max=2,
    ) if "transaction_time_out" in BrokerConfig.__dataclass_fields__ else BrokerConfig(
        auto_create_topic_enable=True
    )  # fmt: skip
    async for p in _port(tmp_path, config):
        yield p


def _ids(messages: list[StoredMessage]) -> list[str | None]:
    return [m.properties.get("UNIQ_KEY") for m in messages]


async def test_a_commit_is_stored_once_in_its_real_queue(port: Port) -> None:
    answer = await port.send({"TRAN_MSG": "true", "PGROUP": "pg", "UNIQ_KEY": "U1",
                              "TAGS": "TagA"})  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS, answer
    got = answer.fields()
    assert (got["queueId"], got["queueOffset"], got["transactionId"]) == ("1", "0", "U1")
    [half] = port.read(HALF)
    assert (half.body, half.sys_flag & 0xC) == (b"payload", 0)
    assert half.properties["REAL_TOPIC"] == "Orders" and half.properties["REAL_QID"] == "1"
    assert port.read("Orders", 1) == []
    offset = (half.physical_offset, half.queue_offset)
    assert (await port.end(offset, COMMIT)).code == ResponseCode.SUCCESS
    [real] = port.read("Orders", 1)
    assert (real.body, real.sys_flag & 0xC, real.born_timestamp_ms) == (b"payload", 8, BORN)
    props = {k: v for k, v in real.properties.items() if k in half.properties}
    assert props == half.properties  # TRAN_MSG, PGROUP, REAL_* kept as RocketMQ stores them
    [op] = port.read(OP)
    assert (op.tags, op.body) == ("d", b"0,")
    # The same END again (a resend, a check answer racing it), or a rollback: nothing more.
    assert (await port.end(offset, COMMIT)).code == ResponseCode.SUCCESS
    assert (await port.end(offset, ROLLBACK)).code == ResponseCode.SUCCESS
    port.step()
    assert (await port.end(offset, COMMIT)).code == ResponseCode.SUCCESS
    assert _ids(port.read("Orders", 1)) == ["U1"] and len(port.read(OP)) == 1


async def test_a_rollback_stores_only_its_op_record(port: Port) -> None:
    offset = await port.half("R1")
    assert (await port.end(offset, ROLLBACK)).code == ResponseCode.SUCCESS
    assert (await port.end(offset, COMMIT)).code == ResponseCode.SUCCESS  # too late: nothing
    assert port.read("Orders", 1) == []
    assert [(m.tags, m.body) for m in port.read(OP)] == [("d", b"0,")]


async def test_bad_ends_and_sends_are_refused_and_store_nothing(port: Port) -> None:
    offset = await port.half("B1")
    plain = await port.send({"UNIQ_KEY": "P1"}, sys_flag=0)
    _, _, plain_offset = wire.decode_message_id(plain.fields()["msgId"])
    refused = [
        await port.end(offset, COMMIT, group="other"),
        await port.end((offset[0], offset[1] + 1), COMMIT),
        await port.end((plain_offset, 0), COMMIT),
        await port.end(offset, 5),
    ]
    assert [(a.code, a.remark) for a in refused[:2]] == [
        (ResponseCode.SYSTEM_ERROR, "The producer group wrong"),
        (ResponseCode.SYSTEM_ERROR, "The transaction state table offset wrong"),
    ]
    assert refused[2].code == ResponseCode.SYSTEM_ERROR
    assert "not a half message" in (refused[2].remark or "")
    assert (refused[3].code, refused[3].remark) == (
        ResponseCode.SYSTEM_ERROR, "commitOrRollback field wrong"
    )  # fmt: skip
    assert _ids(port.read("Orders", 1)) == ["P1"] and port.read(OP) == []
    no_group = await port.send({"TRAN_MSG": "true", "UNIQ_KEY": "N1"})
    assert no_group.code == ResponseCode.MESSAGE_ILLEGAL and "PGROUP" in (no_group.remark or "")
    to_half = await port.send({"UNIQ_KEY": "H1"}, topic=HALF, sys_flag=0)
    assert to_half.code == ResponseCode.NO_PERMISSION
    assert _ids(port.read(HALF)) == ["B1"]


async def _heartbeat_as_producer(port: Port) -> None:
    body = json.dumps({
        "clientID": "producer-1", "producerDataSet": [{"groupName": "pg"}],
        "consumerDataSet": [],
    }).encode()  # fmt: skip
    answer = await port.client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body), 5.0)
    assert answer.code == ResponseCode.SUCCESS, answer


async def test_an_unresolved_half_is_checked_back_and_the_answer_commits_it(
    port: Port,
) -> None:
    await _heartbeat_as_producer(port)
    offset = await port.half("C1")
    port.clock.advance(30_000)  # one interval after the term started: the first round
    port.step()
    await eventually(lambda: len(port.checks) == 1, "a CHECK_TRANSACTION_STATE")
    check = port.checks[0]
    assert check.is_oneway
    fields = check.fields()
    assert {k: fields[k] for k in ("topic", "commitLogOffset", "tranStateTableOffset", "msgId",
                                   "transactionId", "brokerName")} == {
        "topic": HALF, "commitLogOffset": str(offset[0]), "tranStateTableOffset": "0",
        "msgId": "C1", "transactionId": "C1", "brokerName": "broker-a",
    }  # fmt: skip
    message = decode_record(check.body)
    assert (message.topic, message.queue_id, message.body) == ("Orders", 1, b"payload")
    assert message.properties["TRANSACTION_CHECK_TIMES"] == "1"
    assert [(m.tags, m.body) for m in port.read(OP)] == [("c", b"0,")]
    answer = await port.end(
        (int(fields["commitLogOffset"]), int(fields["tranStateTableOffset"])), COMMIT,
        from_check=True,
    )  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS
    assert _ids(port.read("Orders", 1)) == ["C1"]
    port.clock.advance(30_000)
    port.step()
    await asyncio.sleep(0.05)
    assert len(port.checks) == 1  # resolved: not checked again


async def test_checked_check_max_times_then_discarded(port: Port) -> None:
    await _heartbeat_as_producer(port)
    offset = await port.half("D1")
    port.clock.advance(1_000)
    port.step()
    assert port.checks == []  # younger than transactionTimeOut (and no round yet)
    for n in (1, 2):
        port.clock.advance(30_000)
        port.step()
        await eventually(lambda n=n: len(port.checks) == n, f"check {n}")  # type: ignore[misc]
        port.step()  # read the "c" op record back
    times = [decode_record(c.body).properties["TRANSACTION_CHECK_TIMES"] for c in port.checks]
    assert times == ["1", "2"]
    port.clock.advance(30_000)
    port.step()
    [discarded] = port.read(CHECK_MAX)
    assert (discarded.properties["UNIQ_KEY"], discarded.body) == ("D1", b"payload")
    assert discarded.properties["TRANSACTION_CHECK_TIMES"] == "2"
    assert [(m.tags, m.body) for m in port.read(OP)] == [("c", b"0,"), ("c", b"0,"), ("d", b"0,")]
    assert (await port.end(offset, COMMIT)).code == ResponseCode.SUCCESS  # too late
    assert port.read("Orders", 1) == [] and len(port.checks) == 2


async def test_a_new_term_resumes_from_the_progress_and_delivers_nothing_twice(
    port: Port,
) -> None:
    done = await port.half("T1")
    await port.half("T2")
    assert (await port.end(done, COMMIT)).code == ResponseCode.SUCCESS
    port.clock.advance(30_000)
    port.step()  # checks T2 once (no producer online: counted all the same)

    def counted() -> bool:
        port.step()  # reads the "c" op record back once it is acknowledged
        return bool(port.service.counts.no_producer == 1 and len(port.read(OP)) == 2)

    await eventually(counted, "the check of T2 counted")
    port.step()
    progress = (
        port.store.consumer_offsets.get("CID_RMQ_SYS_TRANS", HALF, 0),
        port.store.consumer_offsets.get("CID_RMQ_SYS_TRANS", OP, 0),
    )
    assert progress == (1, 1)  # T1 resolved, T2 pending; op 0 ("d" of T1) names half 0 < 1
    fresh = _service(port.broker, port.clock)
    fresh.step()
    assert {h: p.checks for h, p in fresh._queue.pending.items()} == {1: 1}
    assert (await fresh.end_transaction(_end(done))).repeated
    assert _ids(port.read("Orders", 1)) == ["T1"]


def _end(offset: tuple[int, int]) -> Any:
    from brokergroup_broker.transaction.service import EndTransaction

    return EndTransaction("pg", offset[1], offset[0], COMMIT)
