"""Transactions and ForwardMessageToDeadLetterQueue on the broker's gRPC port: a real broker
(confirmed master, no controller) whose remoting and gRPC ports are started as the broker
starts them, a real grpc.aio client signed as the SDKs sign, and what is stored read back
from the store. The transaction service runs on a fake wall clock, stepped by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.broker import Broker
from brokergroup_broker.core.broker_settings import BrokerSettings, mono_ms, store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.controller_link import ControllerLink
from brokergroup_broker.core.peer_http import PeerHttp
from brokergroup_broker.grpc_front.definitions import pb, service_grpc, service_pb
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.message import StoredMessage
from brokergroup_broker.transaction.service import TransactionService
from brokergroup_controller.client import ControllerClient
from brokergroup_remoting.net import Credentials
from tests.unit.conftest import Clock, free_ports
from tests.unit.test_grpc_front import sdk_metadata

ACCESS_KEY, SECRET_KEY = "tx-ak", "tx-secret"
OK, INTERNAL_SERVER_ERROR, INVALID_RECEIPT_HANDLE = 20000, 50001, 40013
BORN = 1_700_000_000_000
HALF_TOPIC, OP_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@dataclass
class Port:
    broker: Broker
    store: MessageStore
    stub: Any
    clock: Clock[int]
    service: TransactionService

    def read(self, topic: str, queue: int = 0) -> list[StoredMessage]:
        return self.store.get_messages(topic, queue, 0, 100, self.store.max_offset)


def signed(client_id: str = "c-1") -> list[tuple[str, str]]:
    return list(sdk_metadata(ACCESS_KEY, SECRET_KEY, client_id).items())


@pytest.fixture
async def port(tmp_path: Path) -> AsyncIterator[Port]:
    config = BrokerConfig(default_topic_queue_nums=1, auto_create_topic_enable=True)
    remoting_port, grpc_port = free_ports(2)
    settings = BrokerSettings("C", "broker-a", tmp_path, ("127.0.0.1:1",), None,
                              "127.0.0.1", "127.0.0.1", client_port=-1,
                              remoting_port=remoting_port, grpc_port=grpc_port,
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
        role = broker.role
        assert broker.transactions is not None
        service = broker.transactions = TransactionService(
            store=parts.store,
            produce=parts.produce,
            rules=broker.transactions.rules,
            master_term=lambda: role.master_epoch if role.accepting_writes else None,
            confirm_offset=parts.replication.confirm_offset,
            wall_ms=clock,
        )
        await broker._start_remoting(parts)
        service.step()  # the term starts now: its first check round one interval later
        parts.pop.step()  # the master's POP state, as its loop builds it
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{settings.grpc_port}") as channel:
                yield Port(
                    broker, store, service_grpc.MessagingServiceStub(channel), clock, service
                )
        finally:
            for server in (broker._grpc, broker._remoting):
                if server is not None:
                    await server.close()
            await parts.replication.stop()
    store.close()
    await controller.close()


def half_message(message_id: str, body: bytes, **system: Any) -> Any:
    born = Timestamp()
    born.FromMilliseconds(BORN)  # the producer's clock: the check waits from here
    system.setdefault("born_timestamp", born)
    return pb.Message(
        topic=pb.Resource(name="T"),
        user_properties={"order": message_id},
        system_properties=pb.SystemProperties(
            message_id=message_id, message_type=pb.TRANSACTION, tag="tx", **system
        ),
        body=body,
    )


async def send_half(port: Port, message_id: str, body: bytes, **system: Any) -> Any:
    answer = await port.stub.SendMessage(
        service_pb.SendMessageRequest(messages=[half_message(message_id, body, **system)]),
        metadata=signed(),
    )
    assert answer.status.code == OK, answer.status
    return answer.entries[0]


async def end(port: Port, entry: Any, resolution: int, source: int = pb.SOURCE_CLIENT) -> Any:
    return await port.stub.EndTransaction(
        service_pb.EndTransactionRequest(
            topic=pb.Resource(name="T"),
            message_id=entry.message_id,
            transaction_id=entry.transaction_id,
            resolution=resolution,
            source=source,
        ),
        metadata=signed(),
    )


async def test_a_transactional_send_is_a_half_message_ended_by_end_transaction(
    port: Port,
) -> None:
    committed = await send_half(port, "tx-commit", b"commit me")
    rolled_back = await send_half(port, "tx-rollback", b"roll me back")
    assert (committed.transaction_id, rolled_back.transaction_id) == ("tx-commit", "tx-rollback")
    # Half messages, by the transaction package's rules; nothing in the real topic.
    halves = port.read(HALF_TOPIC)
    assert [(h.body, h.properties["REAL_TOPIC"], h.properties["REAL_QID"],
             h.properties["PGROUP"], h.properties["TRAN_MSG"], h.properties["UNIQ_KEY"])
            for h in halves] == [
        (b"commit me", "T", "-1", "T", "true", "tx-commit"),
        (b"roll me back", "T", "-1", "T", "true", "tx-rollback"),
    ]  # fmt: skip
    assert port.read("T") == []
    assert (await end(port, committed, pb.COMMIT)).status.code == OK
    assert (await end(port, rolled_back, pb.ROLLBACK)).status.code == OK
    # The commit only, once, with its properties; both resolved by op records.
    stored = port.read("T")
    assert [(m.body, m.properties["UNIQ_KEY"], m.properties["order"], m.tags) for m in stored] == [
        (b"commit me", "tx-commit", "tx-commit", "tx")
    ]
    assert [op.tags for op in port.read(OP_TOPIC)] == ["d", "d"]
    assert (port.service.counts.committed, port.service.counts.rolled_back) == (1, 1)
    # The transaction data is taken by its end: a repeat is not found (as the proxy).
    again = await end(port, committed, pb.COMMIT)
    assert (again.status.code, again.status.message) == (
        INTERNAL_SERVER_ERROR,
        "cannot found transaction data",
    )
    assert len(port.read("T")) == 1


async def test_an_unknown_transaction_is_checked_over_the_producers_telemetry_stream(
    port: Port,
) -> None:
    # A producer of T with a live Telemetry stream (the SDK's settings exchange first).
    call = port.stub.Telemetry(metadata=signed("producer-1"))
    settings = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])
    )
    await call.write(service_pb.TelemetryCommand(settings=settings))
    assert (await call.read()).status.code == OK
    entry = await send_half(
        port, "tx-unknown", b"ask me", orphaned_transaction_recovery_duration=Duration(seconds=8)
    )
    assert port.read(HALF_TOPIC)[0].properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "8"
    # The producer answers UNKNOWN: it stays a half message until it is checked.
    unknown = await end(port, entry, pb.TRANSACTION_RESOLUTION_UNSPECIFIED)
    assert unknown.status.code == OK
    assert port.read("T") == []
    # Past its immunity and one check interval: the check round asks the producer.
    port.clock.advance(port.service.rules.check_interval_ms + 1)
    port.service.step()
    command = await call.read()
    assert command.WhichOneof("command") == "recover_orphaned_transaction_command"
    recover = command.recover_orphaned_transaction_command
    assert (recover.transaction_id, recover.message.topic.name, recover.message.body,
            recover.message.system_properties.message_id,
            recover.message.system_properties.message_type,
            dict(recover.message.user_properties)) == (
        "tx-unknown", "T", b"ask me", "tx-unknown", pb.TRANSACTION,
        # As the proxy's buildMessage: what is not in STRING_HASH_SET shows as a user property.
        {"order": "tx-unknown", "__transactionId__": "tx-unknown",
         "CHECK_IMMUNITY_TIME_IN_SECONDS": "8"},
    )  # fmt: skip
    assert port.service.counts.checked == 1 and port.service.counts.no_producer == 0
    # The SDK's answer: EndTransaction from the check, found by the check's transaction id.
    answer = await port.stub.EndTransaction(
        service_pb.EndTransactionRequest(
            topic=pb.Resource(name="T"),
            message_id=recover.message.system_properties.message_id,
            transaction_id=recover.transaction_id,
            resolution=pb.COMMIT,
            source=pb.SOURCE_SERVER_CHECK,
        ),
        metadata=signed("producer-1"),
    )
    assert answer.status.code == OK, answer.status
    assert [m.body for m in port.read("T")] == [b"ask me"]
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF


async def test_no_live_grpc_producer_counts_as_no_producer(port: Port) -> None:
    await send_half(port, "tx-orphan", b"nobody to ask")
    port.clock.advance(port.service.rules.check_interval_ms + 1)
    port.service.step()
    assert (port.service.counts.checked, port.service.counts.no_producer) == (1, 1)


async def test_forward_to_dead_letter_queue_puts_the_message_to_the_dlq_and_acks_it(
    port: Port,
) -> None:
    message = pb.Message(
        topic=pb.Resource(name="T"),
        user_properties={"k": "v"},
        system_properties=pb.SystemProperties(message_id="m-dead", tag="x"),
        body=b"poison",
    )
    sent = await port.stub.SendMessage(
        service_pb.SendMessageRequest(messages=[message]), metadata=signed()
    )
    assert sent.status.code == OK
    receive = service_pb.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="T"), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=1,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=0),
    )
    got = [r async for r in port.stub.ReceiveMessage(receive, metadata=signed())]
    handle = got[1].message.system_properties.receipt_handle
    request = service_pb.ForwardMessageToDeadLetterQueueRequest(
        group=pb.Resource(name="G"),
        topic=pb.Resource(name="T"),
        receipt_handle=handle,
        message_id="m-dead",
        delivery_attempt=1,
        max_delivery_attempts=16,
    )
    answer = await port.stub.ForwardMessageToDeadLetterQueue(request, metadata=signed())
    assert answer.status.code == OK, answer.status
    dead = port.read("%DLQ%G")
    assert [(m.body, m.properties["UNIQ_KEY"], m.properties["k"], m.properties["RETRY_TOPIC"],
             m.properties["ORIGIN_MESSAGE_ID"], m.reconsume_times) for m in dead] == [
        (b"poison", "m-dead", "v", "T", "m-dead", 1)
    ]  # fmt: skip
    # Acked: the handle is done, so a second forward stores nothing.
    second = await port.stub.ForwardMessageToDeadLetterQueue(request, metadata=signed())
    assert second.status.code == INVALID_RECEIPT_HANDLE
    assert len(port.read("%DLQ%G")) == 1
    assert port.broker.parts is not None
    assert port.broker.parts.pop.counts.acked == 1


async def test_a_reconnected_producers_newer_stream_is_asked(port: Port) -> None:
    settings = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")])
    )
    streams = []
    for _ in range(2):  # the SDK's stream, then the one it opens after a reconnect
        call = port.stub.Telemetry(metadata=signed("producer-2"))
        await call.write(service_pb.TelemetryCommand(settings=settings))
        assert (await call.read()).status.code == OK
        streams.append(call)
    old, new = streams
    await old.done_writing()
    assert await old.read() == grpc.aio.EOF
    await send_half(port, "tx-reconnected", b"ask the new stream")
    port.clock.advance(port.service.rules.check_interval_ms + 1)
    port.service.step()
    # The older stream's end left the client a producer (its settings stay with the newer).
    assert port.service.counts.no_producer == 0
    command = await new.read()
    assert command.recover_orphaned_transaction_command.transaction_id == "tx-reconnected"
    await new.done_writing()
    assert await new.read() == grpc.aio.EOF
