"""The gRPC front end (broker-image/brokergroup_broker/grpc_front): the SDKs' signature check,
the request translation, and the service on a real grpc.aio port over a confirmed master's
produce path (what is stored is read back from the store)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import ClientConfiguration, Credentials
from rocketmq.v5.util.signature import Signature

from brokergroup_broker.core.remoting_keys import group_server_auth
from brokergroup_broker.grpc_front import (
    GrpcFrontServer,
    GrpcSettings,
    MessagingService,
    auth,
    convert,
)
from brokergroup_broker.grpc_front.consumption import PopConsumption
from brokergroup_broker.grpc_front.definitions import pb, service_grpc, service_pb
from brokergroup_broker.grpc_front.server import SignatureCheck
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_broker.schedule.admission import ScheduledSends
from brokergroup_remoting.net import Credentials as KeyPair
from tests.unit.confirmed_master import confirmed_master

PAIR = KeyPair("grpc-ak", "grpc-secret")


def sdk_metadata(access_key: str, secret_key: str, client_id: str = "c-1") -> dict[str, str]:
    """What the official Python SDK sends with every call (its own Signature code)."""
    config = ClientConfiguration("127.0.0.1:1", Credentials(access_key, secret_key))
    return dict(Signature.metadata(config, client_id))


# ------------------------------------------------------------------ the signature


def secret_for(key: str) -> str | None:
    return PAIR.secret_key if key == PAIR.access_key else None


def test_the_sdks_signature_is_accepted() -> None:
    assert auth.refusal(sdk_metadata("grpc-ak", "grpc-secret"), secret_for) is None


def test_bad_and_missing_signatures_are_refused_with_the_reason() -> None:
    good = sdk_metadata("grpc-ak", "grpc-secret")
    wrong_secret = sdk_metadata("grpc-ak", "not-the-secret")
    assert auth.refusal(wrong_secret, secret_for) == "check signature failed"
    unknown = sdk_metadata("other-ak", "grpc-secret")
    reason = auth.refusal(unknown, secret_for, lambda key: f"{key} belongs elsewhere")
    assert reason == "AccessKey 'other-ak' is not served here: other-ak belongs elsewhere"
    unsigned = {k: v for k, v in good.items() if k != "authorization"}
    assert auth.refusal(unsigned, secret_for) is not None
    assert "not signed" in str(auth.refusal(unsigned, secret_for))
    no_date = {k: v for k, v in good.items() if k != "x-mq-date-time"}
    assert auth.refusal(no_date, secret_for) == "datetime is null (no x-mq-date-time header)"
    # The signature covers x-mq-date-time: another date with the same signature fails.
    replayed = {**good, "x-mq-date-time": "20000101T000000Z"}
    assert auth.refusal(replayed, secret_for) == "check signature failed"
    garbled = {**good, "authorization": good["authorization"].replace("Signature=", "Signature=zz")}
    assert auth.refusal(garbled, secret_for) == "the signature is not hexadecimal"
    other_scheme = {**good, "authorization": "Basic abc"}
    assert auth.refusal(other_scheme, secret_for) == (
        "authentication algorithm 'Basic' is not MQv2-HMAC-SHA1"
    )


def test_sign_matches_the_sdk() -> None:
    assert auth.sign("sk", "20260101T120000Z") == Signature.sign("sk", "20260101T120000Z")


# ------------------------------------------------------------------ the translation


def test_queue_of_a_message_group_is_guavas_consistent_hash_of_javas_hash_code() -> None:
    # Guava's own golden values (HashingTest.testConsistentHash_linearCongruentialGenerator...).
    golden = [0, 55, 62, 8, 45, 59, 86, 97, 82, 59, 73, 37, 17, 56, 86, 21, 90, 37, 38, 83]
    assert [convert.consistent_hash(i, 100) for i in range(20)] == golden
    assert convert.consistent_hash(10863919174838991, 11) == 6
    assert convert.consistent_hash(2201, 100001) == 22152
    assert convert.java_string_hash("hello") == 99162322
    assert convert.java_string_hash("polygenelubricants") == -2147483648
    assert convert.queue_for_group("hello", 8) == convert.consistent_hash(99162322, 8)


def v2_message(**system: Any) -> Any:
    props = pb.SystemProperties(message_id="01ABC", **system)
    return pb.Message(
        topic=pb.Resource(name="T"),
        user_properties={"color": "red", "size": "9"},
        system_properties=props,
        body=b"payload",
    )


def test_a_message_is_stored_with_the_properties_the_proxy_gives_it() -> None:
    born = Timestamp(seconds=1_700_000_000, nanos=5_000_000)
    deliver = Timestamp(seconds=1_700_000_010)
    message = v2_message(
        tag="TagA",
        keys=["k1", "k2"],
        message_group="g-1",
        born_timestamp=born,
        born_host="10.0.0.1",
        delivery_timestamp=deliver,
        delivery_attempt=2,
        trace_context="tc",
        body_encoding=pb.GZIP,
    )
    sent = convert.store_send(message, "127.0.0.1:5555", now_ms=1_700_000_000_000)
    assert sent.properties == {
        "color": "red",
        "size": "9",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "UNIQ_KEY": "01ABC",
        "TIMER_DELIVER_MS": "1700000010000",
        "RECONSUME_TIME": "2",
        "PGROUP": "T",
        "__SHARDINGKEY": "g-1",
        "TRACE_CONTEXT": "tc",
        "__BORNHOST": "10.0.0.1",
        "BORN_TIMESTAMP": "1700000000005",
    }
    assert (sent.sys_flag, sent.born_timestamp_ms, sent.body) == (1, 1_700_000_000_005, b"payload")


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (
            lambda m: m.user_properties.__setitem__("UNIQ_KEY", "x"),
            convert.ILLEGAL_MESSAGE_PROPERTY_KEY,
        ),
        (lambda m: m.ClearField("body"), convert.MESSAGE_BODY_EMPTY),
        (lambda m: m.system_properties.ClearField("message_id"), convert.ILLEGAL_MESSAGE_ID),
        (lambda m: setattr(m.system_properties, "tag", "a|b"), convert.ILLEGAL_MESSAGE_TAG),
        (
            lambda m: setattr(m.system_properties, "message_group", " "),
            convert.ILLEGAL_MESSAGE_GROUP,
        ),
        (
            lambda m: m.system_properties.delivery_timestamp.CopyFrom(Timestamp(seconds=10**10)),
            convert.ILLEGAL_DELIVERY_TIME,
        ),
    ],
)
def test_a_message_the_proxy_refuses_is_refused_with_its_code(change: Any, code: int) -> None:
    message = v2_message()
    change(message)
    with pytest.raises(convert.GrpcRefusal) as refused:
        convert.store_send(message, None, now_ms=1_700_000_000_000)
    assert refused.value.code == code


# ------------------------------------------------------------------ the service on a port


@dataclass
class Front:
    stub: Any
    master: Any
    check: SignatureCheck
    service: MessagingService
    channel: Any


@asynccontextmanager
async def grpc_front(tmp_path: Path, *, auto_create: bool = True) -> AsyncIterator[Front]:
    async with confirmed_master(tmp_path) as master:
        parts = master.parts
        topics = DeclaredTopics(parts.produce, default_queue_nums=4, on_new_topic=lambda _t: None)
        service = MessagingService(
            parts.produce,
            topics,
            GrpcSettings("broker-a", auto_create, 4, ("127.0.0.1", 1)),
            scheduling=ScheduledSends(
                parts.schedule.rules, timers_pending=parts.schedule.timers_pending
            ),
        )
        server_auth = group_server_auth((PAIR,), ("C", "broker-a"))
        check = SignatureCheck(server_auth.secret_for)
        server = GrpcFrontServer(service, check)
        await server.start("127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                yield Front(
                    service_grpc.MessagingServiceStub(channel), master, check, service, channel
                )
        finally:
            await server.close()


def signed(client_id: str = "c-1") -> list[tuple[str, str]]:
    return list(sdk_metadata(PAIR.access_key, PAIR.secret_key, client_id).items())


def endpoints(port: int = 8081) -> Any:
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host="127.0.1.10", port=port)])


async def stored(master: Any, topic: str, queue_id: int) -> list[Any]:
    result = await master.parts.produce.pull_messages(topic, queue_id, 0, 32)
    return list(result.messages)


async def test_unsigned_and_badly_signed_calls_are_answered_unauthorized_and_store_nothing(
    tmp_path: Path,
) -> None:
    async with grpc_front(tmp_path) as front:
        request = service_pb.SendMessageRequest(messages=[v2_message()])
        unsigned = await front.stub.SendMessage(request, metadata=[("x-mq-client-id", "c")])
        bad = await front.stub.SendMessage(
            request, metadata=list(sdk_metadata(PAIR.access_key, "wrong").items())
        )
        for answer in (unsigned, bad):
            assert answer.status.code == convert.UNAUTHORIZED
            assert list(answer.entries) == []
        assert bad.status.message == "check signature failed"
        # A streaming call is refused the same way, in its first (only) answer.
        receive = front.stub.ReceiveMessage(service_pb.ReceiveMessageRequest(), metadata=[])
        answers = [r async for r in receive]
        assert [a.status.code for a in answers] == [convert.UNAUTHORIZED]
        assert front.check.refused == 3
        assert not front.master.parts.produce.holds_topic("T")
        # Not a request body the service could parse: never decoded, still answered.
        raw = front.channel.unary_unary(
            "/apache.rocketmq.v2.MessagingService/SendMessage",
            request_serializer=lambda b: b,
            response_deserializer=service_pb.SendMessageResponse.FromString,
        )
        garbage = await raw(b"\xff\xff\xff\x01garbage", metadata=[])
        assert garbage.status.code == convert.UNAUTHORIZED


async def test_a_call_without_client_id_is_refused(tmp_path: Path) -> None:
    async with grpc_front(tmp_path) as front:
        metadata = [(k, v) for k, v in signed() if k != "x-mq-client-id"]
        answer = await front.stub.QueryRoute(
            service_pb.QueryRouteRequest(topic=pb.Resource(name="T"), endpoints=endpoints()),
            metadata=metadata,
        )
        assert answer.status.code == convert.CLIENT_ID_REQUIRED


async def test_route_names_the_access_point_and_the_topics_queues(tmp_path: Path) -> None:
    async with grpc_front(tmp_path, auto_create=False) as front:
        missing = await front.stub.QueryRoute(
            service_pb.QueryRouteRequest(topic=pb.Resource(name="T"), endpoints=endpoints()),
            metadata=signed(),
        )
        assert missing.status.code == convert.TOPIC_NOT_FOUND
        front.service._topics.declare("T", 4)
        route = await front.stub.QueryRoute(
            service_pb.QueryRouteRequest(topic=pb.Resource(name="T"), endpoints=endpoints()),
            metadata=signed(),
        )
        assert route.status.code == convert.OK
        assert [
            (q.id, q.permission, q.broker.name, q.broker.id, q.broker.endpoints)
            for q in route.message_queues
        ] == [(i, pb.READ_WRITE, "broker-a", 0, endpoints()) for i in range(4)]
        assignment = await front.stub.QueryAssignment(
            service_pb.QueryAssignmentRequest(
                topic=pb.Resource(name="T"), group=pb.Resource(name="G"), endpoints=endpoints()
            ),
            metadata=signed(),
        )
        assert [
            (a.message_queue.id, a.message_queue.broker.endpoints) for a in assignment.assignments
        ] == [(-1, endpoints())]


async def test_sends_are_stored_through_the_produce_path_in_group_order(tmp_path: Path) -> None:
    async with grpc_front(tmp_path) as front:
        ids = []
        for i in range(5):
            message = v2_message(message_group="order-7", tag="T1", keys=[f"key-{i}"])
            message.system_properties.message_id = f"id-{i}"
            message.body = f"body-{i}".encode()
            answer = await front.stub.SendMessage(
                service_pb.SendMessageRequest(messages=[message]), metadata=signed()
            )
            assert answer.status.code == convert.OK, answer.status
            ids.append((answer.entries[0].message_id, answer.entries[0].offset))
        assert ids == [(f"id-{i}", i) for i in range(5)]
        queue = convert.queue_for_group("order-7", 4)
        records = await stored(front.master, "T", queue)
        assert [(r.body, r.properties["KEYS"], r.properties["UNIQ_KEY"]) for r in records] == [
            (f"body-{i}".encode(), f"key-{i}", f"id-{i}") for i in range(5)
        ]
        assert {r.properties["__SHARDINGKEY"] for r in records} == {"order-7"}
        assert {r.properties["TAGS"] for r in records} == {"T1"}


async def test_a_delivery_timestamp_goes_through_the_schedule_admission(tmp_path: Path) -> None:
    async with grpc_front(tmp_path) as front:
        message = v2_message()
        deliver_ms = front.service._wall_ms() + 60_000
        message.system_properties.delivery_timestamp.FromMilliseconds(deliver_ms)
        answer = await front.stub.SendMessage(
            service_pb.SendMessageRequest(messages=[message]), metadata=signed()
        )
        assert answer.status.code == convert.OK, answer.status
        # Not in the topic yet: in the timer system topic, due at the delivery time.
        assert await stored(front.master, "T", 0) == []
        timer = await stored(front.master, "rmq_sys_wheel_timer", 0)
        assert [(r.properties["REAL_TOPIC"], r.properties["TIMER_OUT_MS"]) for r in timer] == [
            ("T", str(deliver_ms))
        ]


async def test_a_transactional_send_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    async with grpc_front(tmp_path) as front:
        message = v2_message(message_type=pb.TRANSACTION)
        answer = await front.stub.SendMessage(
            service_pb.SendMessageRequest(messages=[message]), metadata=signed()
        )
        assert answer.status.code == convert.NOT_IMPLEMENTED
        assert not front.master.parts.produce.holds_topic("T")


async def test_telemetry_answers_the_settings_exchange(tmp_path: Path) -> None:
    async with grpc_front(tmp_path) as front:
        settings = pb.Settings(
            client_type=pb.PRODUCER,
            access_point=endpoints(),
            publishing=pb.Publishing(topics=[pb.Resource(name="T")]),
        )
        consumer = pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name="G")),
        )
        call = front.stub.Telemetry(metadata=signed("c-9"))
        await call.write(service_pb.TelemetryCommand(settings=settings))
        first = await call.read()
        await call.write(service_pb.TelemetryCommand(settings=consumer))
        second = await call.read()
        await call.done_writing()
        assert first.status.code == convert.OK
        assert first.settings.publishing.max_body_size == 4 * 1024 * 1024
        assert first.settings.backoff_policy.max_attempts == 3
        assert list(first.settings.publishing.topics) == [pb.Resource(name="T")]
        assert second.settings.subscription.receive_batch_size == 32
        assert second.settings.subscription.long_polling_timeout.seconds == 20
        assert second.settings.backoff_policy.max_attempts == 17
        assert [d.seconds for d in second.settings.backoff_policy.customized_backoff.next][:4] == [
            1,
            5,
            10,
            30,
        ]
        assert await call.read() == grpc.aio.EOF


# ------------------------------------------------------------------ consumption over POP


@asynccontextmanager
async def consuming_front(tmp_path: Path) -> AsyncIterator[Front]:
    async with grpc_front(tmp_path) as front:
        pop = front.master.parts.pop
        pop.step()  # the master's POP state, rebuilt as its loop does once per tick
        front.service._consumption = PopConsumption(pop)
        yield front


async def receive(
    front: Front, *, tag: str = "*", batch: int = 32, queue_id: int = -1
) -> list[Any]:
    request = service_pb.ReceiveMessageRequest(
        group=pb.Resource(name="G"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="T"), id=queue_id),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=tag),
        batch_size=batch,
        invisible_duration=Duration(seconds=30),
        long_polling_timeout=Duration(seconds=0),
    )
    return [r async for r in front.stub.ReceiveMessage(request, metadata=signed())]


async def test_receive_ack_and_change_invisible_duration_over_pop(tmp_path: Path) -> None:
    async with consuming_front(tmp_path) as front:
        for i in range(3):
            message = v2_message(tag=f"tag{i % 2}", keys=[f"k{i}"])
            message.system_properties.message_id = f"id-{i}"
            message.body = f"b{i}".encode()
            sent = await front.stub.SendMessage(
                service_pb.SendMessageRequest(messages=[message]), metadata=signed()
            )
            assert sent.status.code == convert.OK
        answers = await receive(front, tag="tag0")
        # A status first, then each message, then the delivery timestamp (the proxy's stream).
        assert [a.WhichOneof("content") for a in answers] == [
            "status",
            "message",
            "message",
            "delivery_timestamp",
        ]
        assert answers[0].status.code == convert.OK
        got = [a.message for a in answers[1:3]]
        assert sorted((m.system_properties.message_id, m.body, m.system_properties.tag,
                       list(m.system_properties.keys), dict(m.user_properties),
                       m.system_properties.delivery_attempt, m.topic.name) for m in got) == [
            ("id-0", b"b0", "tag0", ["k0"], {"color": "red", "size": "9"}, 1, "T"),
            ("id-2", b"b2", "tag0", ["k2"], {"color": "red", "size": "9"}, 1, "T"),
        ]  # fmt: skip
        # Invisible now: nothing more for this group.
        again = await receive(front)
        assert [a.status.code for a in again if a.WhichOneof("content") == "status"] == [40401]
        changed = await front.stub.ChangeInvisibleDuration(
            service_pb.ChangeInvisibleDurationRequest(
                group=pb.Resource(name="G"),
                topic=pb.Resource(name="T"),
                receipt_handle=got[0].system_properties.receipt_handle,
                invisible_duration=Duration(seconds=60),
                message_id=got[0].system_properties.message_id,
            ),
            metadata=signed(),
        )
        assert changed.status.code == convert.OK
        assert changed.receipt_handle != got[0].system_properties.receipt_handle
        handles = [changed.receipt_handle, got[1].system_properties.receipt_handle,
                   got[0].system_properties.receipt_handle]  # fmt: skip
        acked = await front.stub.AckMessage(
            service_pb.AckMessageRequest(
                group=pb.Resource(name="G"),
                topic=pb.Resource(name="T"),
                entries=[
                    service_pb.AckMessageEntry(message_id="x", receipt_handle=h) for h in handles
                ],
            ),
            metadata=signed(),
        )
        # The old handle of a changed message is stale: INVALID_RECEIPT_HANDLE, the rest OK.
        assert [e.status.code for e in acked.entries] == [convert.OK, convert.OK, 40013]
        assert acked.status.code == convert.MULTIPLE_RESULTS


async def test_a_receive_naming_any_queue_pops_every_queue_of_the_topic(tmp_path: Path) -> None:
    """The SDKs name the route's queues in turn; the proxy pops the broker's whole topic
    (queue -1) whatever queue is named. Popping only the named queue kept a fresh Python SDK
    consumer waiting 10 s for a message in another queue (4 queues, 2 s long polls)."""
    async with consuming_front(tmp_path) as front:
        for i in range(2):
            message = v2_message(message_group="order-7")
            message.system_properties.message_id = f"id-{i}"
            message.body = f"b{i}".encode()
            sent = await front.stub.SendMessage(
                service_pb.SendMessageRequest(messages=[message]), metadata=signed()
            )
            assert sent.status.code == convert.OK
        held = convert.queue_for_group("order-7", 4)
        other = (held + 1) % 4
        answers = await receive(front, queue_id=other)
        assert [(a.message.system_properties.message_id, a.message.body,
                 a.message.system_properties.queue_id) for a in answers
                if a.WhichOneof("content") == "message"] == [
            ("id-0", b"b0", held), ("id-1", b"b1", held)
        ]  # fmt: skip


async def test_a_fifo_message_and_an_auto_renew_receive(tmp_path: Path) -> None:
    """A push consumer's receive (auto_renew, no invisible duration) is served with the
    proxy's default invisible time; a FIFO message comes back with its message group as a
    system property and only the sender's own user properties."""
    async with consuming_front(tmp_path) as front:
        message = v2_message(message_group="g-7", trace_context="tc-1")
        sent = await front.stub.SendMessage(
            service_pb.SendMessageRequest(messages=[message]), metadata=signed()
        )
        assert sent.status.code == convert.OK
        request = service_pb.ReceiveMessageRequest(
            group=pb.Resource(name="G"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="T"), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=32,
            auto_renew=True,
            long_polling_timeout=Duration(seconds=0),
        )
        answers = [r async for r in front.stub.ReceiveMessage(request, metadata=signed())]
        assert answers[0].status.code == convert.OK, answers[0].status
        got = answers[1].message
        assert dict(got.user_properties) == {"color": "red", "size": "9"}
        assert (got.system_properties.message_group, got.system_properties.trace_context) == (
            "g-7",
            "tc-1",
        )
        assert got.system_properties.message_type == pb.FIFO
