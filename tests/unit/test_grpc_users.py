"""Users on the gRPC port (issue 36 item 3; docs/security.md "Users with rights";
grpc_front/users.py): a real grpcio server on loopback over a confirmed master's produce path,
the signature check over the group's pair and the cluster's users, then UserAuthorization.

A user allowed Pub on T sends to T (stored); its send to U is answered FORBIDDEN with
RocketMQ's remark and nothing of U is stored; QueryRoute needs Pub or Sub on the topic; a
deleted user is refused UNAUTHORIZED by the signature check; the group's pair is untouched.
`needs_of_message` follows DefaultAuthorizationContextBuilder's gRPC table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc

from brokergroup_broker.core.remoting_keys import group_server_auth
from brokergroup_broker.core.users import BrokerUsers, with_users
from brokergroup_broker.grpc_front import GrpcFrontServer, GrpcSettings, MessagingService, convert
from brokergroup_broker.grpc_front.definitions import pb, service_grpc, service_pb
from brokergroup_broker.grpc_front.server import SignatureCheck
from brokergroup_broker.grpc_front.users import UserAuthorization, needs_of_message, peer_ip
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_broker.schedule.admission import ScheduledSends
from tests.unit.confirmed_master import confirmed_master
from tests.unit.test_grpc_front import PAIR, endpoints, sdk_metadata, v2_message

APP = {
    "accessKey": "app",
    "secretKey": "app-secret-01",
    "policies": [{"resource": "Topic:T", "actions": ["Pub"], "decision": "Allow"}],
}


@asynccontextmanager
async def front(tmp_path: Path, users: BrokerUsers) -> AsyncIterator[tuple[Any, Any]]:
    async with confirmed_master(tmp_path) as master:
        parts = master.parts
        topics = DeclaredTopics(parts.produce, default_queue_nums=4, on_new_topic=lambda _t: None)
        service = MessagingService(
            parts.produce,
            topics,
            GrpcSettings("broker-a", True, 4, ("127.0.0.1", 1)),
            scheduling=ScheduledSends(
                parts.schedule.rules, timers_pending=parts.schedule.timers_pending
            ),
        )
        pairs = group_server_auth((PAIR,), ("C", "broker-a"))
        combined = with_users(pairs, users)
        server = GrpcFrontServer(
            service,
            SignatureCheck(combined.secret_for),
            authorization=UserAuthorization(users, lambda k: pairs.secret_for(k) is not None),
        )
        await server.start("127.0.0.1", 0)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                yield service_grpc.MessagingServiceStub(channel), master
        finally:
            await server.close()


def _send(topic: str) -> Any:
    message = v2_message()
    message.topic.name = topic
    return service_pb.SendMessageRequest(messages=[message])


async def test_a_user_on_grpc(tmp_path: Path) -> None:
    users = BrokerUsers()
    users.replace({"usersVersion": 1, "changed": True, "users": [APP]})
    app = list(sdk_metadata("app", "app-secret-01").items())
    async with front(tmp_path, users) as (stub, master):
        sent = await stub.SendMessage(_send("T"), metadata=app)
        assert sent.status.code == convert.OK, sent.status
        refused = await stub.SendMessage(_send("U"), metadata=app)
        assert refused.status.code == convert.FORBIDDEN
        assert refused.status.message == (
            "User:app has no permission to access Topic:U from 127.0.0.1, no matched policies."
        )
        assert list(refused.entries) == []
        assert not master.parts.produce.holds_topic("U")
        route = await stub.QueryRoute(
            service_pb.QueryRouteRequest(topic=pb.Resource(name="T"), endpoints=endpoints()),
            metadata=app,
        )
        assert route.status.code == convert.OK
        receive = stub.ReceiveMessage(
            service_pb.ReceiveMessageRequest(
                group=pb.Resource(name="G"),
                message_queue=pb.MessageQueue(topic=pb.Resource(name="T")),
            ),
            metadata=app,
        )
        answers = [a async for a in receive]
        assert [a.status.code for a in answers] == [convert.FORBIDDEN]
        assert "Group:G" in answers[0].status.message
        pair = await stub.SendMessage(
            _send("U"), metadata=list(sdk_metadata(PAIR.access_key, PAIR.secret_key).items())
        )
        assert pair.status.code == convert.OK  # the group's pair: untouched
        users.replace({"usersVersion": 2, "changed": True, "users": []})
        gone = await stub.SendMessage(_send("T"), metadata=app)
        assert gone.status.code == convert.UNAUTHORIZED


def test_needs_of_messages() -> None:
    consumer = service_pb.HeartbeatRequest(
        group=pb.Resource(name="G"), client_type=pb.ClientType.Value("SIMPLE_CONSUMER")
    )
    producer = service_pb.HeartbeatRequest(client_type=pb.ClientType.Value("PRODUCER"))
    ack = service_pb.AckMessageRequest(group=pb.Resource(name="G"), topic=pb.Resource(name="T"))
    settings = service_pb.TelemetryCommand(
        settings=pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
    )

    def keys(method: str, request: Any) -> list[tuple[str, list[str]]]:
        return [
            (n.resource.key, sorted(a.value for a in n.actions))
            for n in needs_of_message(method, request)
        ]

    assert keys("Heartbeat", consumer) == [("Group:G", ["Sub"])]
    assert keys("Heartbeat", producer) == []
    assert keys("AckMessage", ack) == [("Group:G", ["Sub"]), ("Topic:T", ["Sub"])]
    assert keys("Telemetry", settings) == [("Topic:T", ["Pub"])]
    assert keys("SendMessage", _send("T")) == [("Topic:T", ["Pub"])]
    assert peer_ip("ipv4:127.0.0.1:5000") == "127.0.0.1" and peer_ip("ipv6:[::1]:9") == "::1"
