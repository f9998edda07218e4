"""A broker's one auth step with users (issue 36 item 3; docs/security.md "Users with
rights"): brokergroup_broker.core.users.with_users over the group's pairs
(remoting_keys.group_server_auth), on a real remoting port (RemotingServer on loopback) whose
handlers only count what reaches them.

- a user allowed Pub on T sends to T; to U it is NO_PERMISSION with RocketMQ 5.3's remark
  ("User:app has no permission to access Topic:U from 127.0.0.1, no matched policies.") and
  the handler never runs;
- a pull needs Sub on the topic and on the group; a heartbeat needs Sub on its consumer
  groups and topics (read from the signed body);
- a wrong signature with a user's AccessKey is refused as before (before any decode);
- a user deleted (a new snapshot without it) is refused afterwards: unknown AccessKey;
- the group's pairs keep working unchanged, and a user cannot shadow a pair;
- `refresh_forever` takes the controller's snapshots by version.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from brokergroup_broker.core.remoting_keys import group_server_auth
from brokergroup_broker.core.users import BrokerUsers, with_users
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.net import Connection, Credentials, RemotingClient, RemotingServer

ROOT = "broker-credential-root-of-the-test"
GROUP = ("DefaultCluster", "broker-a")
CLIENT_PAIR = derive_rocketmq_pair(ROOT, Role.CLIENT, *GROUP)
BROKER_PAIR = derive_rocketmq_pair(ROOT, Role.BROKER, *GROUP)


def _snapshot(version: int, *users: dict[str, Any]) -> dict[str, Any]:
    return {"usersVersion": version, "changed": True, "users": list(users)}


APP = {
    "accessKey": "app",
    "secretKey": "app-secret-01",
    "policies": [
        {"resource": "Topic:T", "actions": ["Pub", "Sub"], "decision": "Allow"},
        {"resource": "Group:G", "actions": ["Sub"], "decision": "Allow"},
    ],
}


class Port:
    def __init__(self) -> None:
        self.users = BrokerUsers()
        self.reached: list[int] = []
        pairs = (
            Credentials(BROKER_PAIR.access_key, BROKER_PAIR.secret_key),
            Credentials(CLIENT_PAIR.access_key, CLIENT_PAIR.secret_key),
        )
        auth = with_users(group_server_auth(pairs, GROUP), self.users)

        async def handle(cmd: RemotingCommand, _conn: Connection) -> RemotingCommand:
            self.reached.append(cmd.code)
            return response_to(cmd, ResponseCode.SUCCESS, None)

        codes = (
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.PULL_MESSAGE,
            RequestCode.HEART_BEAT,
            RequestCode.UPDATE_AND_CREATE_TOPIC,
        )
        self.server = RemotingServer({int(c): handle for c in codes}, auth=auth)

    async def client(self, access_key: str, secret_key: str) -> RemotingClient:
        return await RemotingClient.connect(
            f"127.0.0.1:{self.server.port}", credentials=Credentials(access_key, secret_key)
        )


@pytest.fixture
async def port() -> AsyncIterator[Port]:
    p = Port()
    await p.server.start("127.0.0.1", 0)
    yield p
    await p.server.close()


def _send(topic: str) -> RemotingCommand:
    return request(RequestCode.SEND_MESSAGE_V2, 0, {"a": "P", "b": topic, "c": "TBW102"}, b"x")


def _pull(topic: str, group: str) -> RemotingCommand:
    fields = {"consumerGroup": group, "topic": topic, "queueId": "0", "queueOffset": "0"}
    return request(RequestCode.PULL_MESSAGE, 0, fields)


async def test_a_user_is_authorized_by_its_policies(port: Port) -> None:
    port.users.replace(_snapshot(1, APP))
    app = await port.client("app", "app-secret-01")
    try:
        assert (await app.invoke(_send("T"), 5)).code == ResponseCode.SUCCESS
        refused = await app.invoke(_send("U"), 5)
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark == (
            "User:app has no permission to access Topic:U from 127.0.0.1, no matched policies."
        )
        assert (await app.invoke(_pull("T", "G"), 5)).code == ResponseCode.SUCCESS
        refused = await app.invoke(_pull("T", "H"), 5)
        assert refused.remark is not None and "Group:H" in refused.remark
        heartbeat: dict[str, Any] = {"clientID": "c1", "consumerDataSet": [
            {"groupName": "G", "subscriptionDataSet": [{"topic": "T"}, {"topic": "%RETRY%G"}]}
        ]}  # fmt: skip
        hb = request(RequestCode.HEART_BEAT, 0, {}, json.dumps(heartbeat).encode())
        assert (await app.invoke(hb, 5)).code == ResponseCode.SUCCESS
        heartbeat["consumerDataSet"][0]["subscriptionDataSet"] = [{"topic": "U"}]
        hb = request(RequestCode.HEART_BEAT, 0, {}, json.dumps(heartbeat).encode())
        assert (await app.invoke(hb, 5)).code == ResponseCode.NO_PERMISSION
        topic = request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": "T"})
        assert (await app.invoke(topic, 5)).code == ResponseCode.NO_PERMISSION
    finally:
        await app.close()
    assert port.reached == [
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.PULL_MESSAGE,
        RequestCode.HEART_BEAT,
    ]


async def test_wrong_secret_deleted_user_and_pairs(port: Port) -> None:
    port.users.replace(_snapshot(1, APP))
    wrong = await port.client("app", "not-the-secret")
    try:
        answer = await wrong.invoke(_send("T"), 5)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark == "the Signature does not match the request"
    finally:
        await wrong.close()
    port.users.replace(_snapshot(2))  # the user deleted
    app = await port.client("app", "app-secret-01")
    try:
        answer = await app.invoke(_send("T"), 5)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert (answer.remark or "").startswith("the AccessKey is not known")
    finally:
        await app.close()
    # the group's pairs keep working, even with a user spelled like a pair
    shadow = {**APP, "accessKey": "x", "secretKey": "other-secret"}
    port.users.replace(_snapshot(3, shadow))
    client = await port.client(CLIENT_PAIR.access_key, CLIENT_PAIR.secret_key)
    try:
        assert (await client.invoke(_send("U"), 5)).code == ResponseCode.SUCCESS
        topic = request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, {"topic": "T"})
        assert (await client.invoke(topic, 5)).code == ResponseCode.NO_PERMISSION  # as before
    finally:
        await client.close()
    assert port.reached == [RequestCode.SEND_MESSAGE_V2]


class FakeController:
    """The users-snapshot answers of a controller, by version (the real endpoint is tested in
    test_controller_users.py)."""

    def __init__(self) -> None:
        self.version = 1
        self.asked: list[int] = []

    async def users_snapshot(self, cluster_name: str, since_version: int = -1) -> dict[str, Any]:
        self.asked.append(since_version)
        if since_version >= self.version:
            return {"usersVersion": self.version, "changed": False, "users": []}
        return _snapshot(self.version, APP)


async def test_refresh_follows_the_version() -> None:
    users, controller = BrokerUsers(), FakeController()
    task = asyncio.create_task(users.refresh_forever(controller, "DefaultCluster", 0.01))
    try:
        async with asyncio.timeout(10):
            while users.get("app") is None:
                await asyncio.sleep(0.01)
            while len(controller.asked) < 3:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
    assert users.version == 1 and controller.asked[:3] == [-1, 1, 1]
