"""Users with rights in the controller (issue 36 item 3; docs/security.md "Users with
rights", the HTTP contract).

A real single-node Raft (its own loopback address in 127.0.7.0/24 and a temp data dir)
behind the real aiohttp app, driven by `ControllerClient`: create/get/list/update/delete a
user, the answer never carrying the SecretKey; bad input 400 naming the field and changing
nothing; broker and client credentials refused (403) except a broker's users-snapshot of its
own cluster, the one answer with SecretKeys; the SecretKey sealed in the replicated state
(dump) and not readable there; users surviving a restart from the data dir. Plus the pure
state transitions (version, idempotent delete, update keeping the secret) and the sealer.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from brokergroup_controller.app import create_app
from brokergroup_controller.client import ControllerClient
from brokergroup_controller.credentials import Role, derive_credential
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.server import ControllerConfig
from brokergroup_controller.state import (
    ControllerState,
    DeleteUser,
    PutUser,
    UserDeleted,
    UserPut,
    canonical_policies,
)
from brokergroup_controller.users_seal import SealError, SecretSealer

TOKEN = "users-admin-token"
RAFT_PASSWORD = "raft-secret-of-the-users-test"
ROOT = "broker-credential-root-of-the-users-test"
C = "DefaultCluster"
_hosts = itertools.count(1)

PUB_T = [{"resource": "Topic:T", "actions": ["Pub"], "decision": "Allow"}]


def _config(tmp_path: Path, host: str) -> ControllerConfig:
    return ControllerConfig(
        node_id=1,
        peers=(f"{host}:9880",),
        data_dir=str(tmp_path / "data"),
        bind_address=host,
        token=TOKEN,
        broker_credential_root=ROOT,
        raft_password=RAFT_PASSWORD,
    )


class Node:
    def __init__(self, tmp_path: Path, host: str) -> None:
        self.config = _config(tmp_path, host)
        self.node = ControllerRaftNode(self.config.raft_settings())
        self.server: TestServer | None = None

    async def start(self) -> str:
        self.node.start()
        deadline = time.monotonic() + 10
        while not self.node.status().caught_up:
            assert time.monotonic() < deadline, "single node never became leader"
            await asyncio.sleep(0.01)
        self.server = TestServer(create_app(self.config, self.node), host="127.0.0.1")
        await self.server.start_server()
        return f"127.0.0.1:{self.server.port}"

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.close()
        await asyncio.to_thread(self.node.stop)


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[Node, str]]:
    node = Node(tmp_path, f"127.0.7.{next(_hosts)}")
    address = await node.start()
    try:
        yield node, address
    finally:
        await node.stop()


def _client(address: str, token: str = TOKEN) -> ControllerClient:
    return ControllerClient([address], token=token, request_timeout_s=5)


def _dump(node: Node) -> dict[str, Any]:
    return node.node.read(lambda s: s.to_dict())


async def test_user_lifecycle_without_the_secret_in_answers(api: tuple[Node, str]) -> None:
    node, address = api
    async with _client(address) as admin:
        put = await admin.put_user(C, "alice", secret_key="alice-secret-1", policies=PUB_T)
        assert put["created"] is True and put["usersVersion"] == 1
        assert put["user"] == {
            "accessKey": "alice",
            "policies": [
                {"resource": "Topic:T", "actions": ["Pub"], "decision": "Allow", "sourceIps": []}
            ],
            "userStatus": "enable",
            "version": 1,
        }
        await admin.put_user(
            C,
            "bob",
            secret_key="bob-secret-22",
            policies=[{"resource": "Group:G", "actions": ["Sub"], "decision": "Allow"}],
        )
        listed = await admin.list_users(C)
        assert [u["accessKey"] for u in listed["users"]] == ["alice", "bob"]
        assert listed["usersVersion"] == 2
        assert "alice-secret-1" not in json.dumps(listed)
        # update without a secret keeps it; the policy list is replaced
        updated = await admin.put_user(
            C, "alice", secret_key=None, policies=[{"resource": "Topic:U", "actions": ["Sub"]}]
        )
        assert updated["created"] is False and updated["usersVersion"] == 3
        got = await admin.get_user(C, "alice")
        assert [p["resource"] for p in got["policies"]] == ["Topic:U"] and got["version"] == 3
        assert await admin.delete_user(C, "alice") is True
        assert await admin.delete_user(C, "alice") is False  # idempotent
        with pytest.raises(ControllerError) as missing:
            await admin.get_user(C, "alice")
        assert missing.value.code is ErrorCode.USER_NOT_FOUND
        # another cluster's users are apart
        assert (await admin.list_users("OtherCluster"))["users"] == []
    # the dump holds the secret sealed, never plain
    dump = json.dumps(_dump(node))
    assert "bob-secret-22" not in dump and "fernet1:" in dump


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"secretKey": "short", "policies": []}, "secretKey"),
        ({"secretKey": "long-enough-1", "policies": [{"resource": "Queue:T", "actions": ["Pub"]}]},
         "Queue:T"),
        ({"secretKey": "long-enough-1", "policies": [{"resource": "Topic:T", "actions": []}]},
         "actions must not be empty"),
        ({"secretKey": "long-enough-1", "policies": [], "admin": True}, "unknown fields"),
        ({"policies": []}, "needs a secretKey"),
    ],
)  # fmt: skip
async def test_bad_user_input(api: tuple[Node, str], body: dict[str, Any], message: str) -> None:
    node, address = api
    before = _dump(node)
    async with _client(address) as admin:
        with pytest.raises(ControllerError) as refused:
            await admin.request("PUT", f"/v1/clusters/{C}/users/carol", body=body)
        assert refused.value.code is ErrorCode.BAD_REQUEST
        assert message in refused.value.message
        with pytest.raises(ControllerError) as bad_key:
            await admin.put_user(C, "bad.key", secret_key="long-enough-1", policies=[])
        assert "accessKey" in bad_key.value.message
    assert _dump(node) == before


async def test_roles_and_the_brokers_snapshot(api: tuple[Node, str]) -> None:
    node, address = api
    broker = derive_credential(ROOT, Role.BROKER, C, "broker-b")
    client = derive_credential(ROOT, Role.CLIENT, C, "broker-a")
    other_broker = derive_credential(ROOT, Role.BROKER, "OtherCluster", "broker-a")
    async with _client(address) as admin:
        await admin.put_user(C, "alice", secret_key="alice-secret-1", policies=PUB_T)
    before = _dump(node)
    for token in (broker, client):
        async with _client(address, token) as someone:
            for call in (
                someone.put_user(C, "mallory", secret_key="mallory-secret", policies=[]),
                someone.list_users(C),
                someone.get_user(C, "alice"),
                someone.delete_user(C, "alice"),
            ):
                with pytest.raises(ControllerError) as refused:
                    await call
                assert refused.value.code is ErrorCode.FORBIDDEN
    assert _dump(node) == before
    async with _client(address, broker) as b:
        snap = await b.users_snapshot(C)
        assert snap["changed"] is True and snap["usersVersion"] == 1
        assert [(u["accessKey"], u["secretKey"]) for u in snap["users"]] == [
            ("alice", "alice-secret-1")
        ]
        assert (await b.users_snapshot(C, since_version=1)) == {
            "code": "SUCCESS",
            "usersVersion": 1,
            "changed": False,
            "users": [],
        }
    for token, cluster in ((client, C), (other_broker, C), (broker, "OtherCluster")):
        async with _client(address, token) as someone:
            with pytest.raises(ControllerError) as refused:
                await someone.users_snapshot(cluster)
            assert refused.value.code is ErrorCode.FORBIDDEN


async def test_users_survive_a_restart(tmp_path: Path) -> None:
    host = f"127.0.7.{next(_hosts)}"
    node = Node(tmp_path, host)
    address = await node.start()
    try:
        async with _client(address) as admin:
            await admin.put_user(C, "alice", secret_key="alice-secret-1", policies=PUB_T)
    finally:
        await node.stop()
    node = Node(tmp_path, host)
    address = await node.start()
    try:
        broker = derive_credential(ROOT, Role.BROKER, C, "broker-a")
        async with _client(address, broker) as b:
            snap = await b.users_snapshot(C)
        assert [(u["accessKey"], u["secretKey"]) for u in snap["users"]] == [
            ("alice", "alice-secret-1")
        ]
    finally:
        await node.stop()


# -- the pure transitions


def test_state_versions_and_idempotent_delete() -> None:
    state = ControllerState()
    policies = canonical_policies(PUB_T)
    assert state.apply(PutUser(C, "", "alice", "plain:alice-secret-1", policies)).outcome == (
        UserPut(True, 1)
    )
    assert state.apply(PutUser(C, "", "alice", None, policies)).outcome == UserPut(False, 2)
    assert state.cluster_users(C).users["alice"].sealed_secret_key == "plain:alice-secret-1"
    refused = state.apply(PutUser(C, "", "bob", None, policies))
    assert refused.code is ErrorCode.BAD_REQUEST and "bob" not in state.cluster_users(C).users
    assert state.apply(DeleteUser(C, "", "alice")).outcome == UserDeleted(True, 3)
    assert state.apply(DeleteUser(C, "", "alice")).outcome == UserDeleted(False, 3)
    again = ControllerState.from_dict(json.loads(json.dumps(state.to_dict())))
    assert again.to_dict() == state.to_dict()
    assert "users" not in ControllerState().to_dict()  # old dumps keep their format


def test_sealer() -> None:
    sealer = SecretSealer(ROOT)
    sealed = sealer.seal("alice-secret-1")
    assert sealed.startswith("fernet1:") and "alice-secret-1" not in sealed
    assert sealer.open(sealed) == "alice-secret-1"
    with pytest.raises(SealError, match="does not open"):
        SecretSealer("another-root-of-16-chars").open(sealed, "alice")
    assert SecretSealer(None).open(SecretSealer(None).seal("x-secret-9")) == "x-secret-9"


# -- brokergroup admin user (admin_users.py), through the real argument parser


async def test_admin_user_cli(api: tuple[Node, str], tmp_path: Path) -> None:
    import io

    from brokergroup_cli.main import build_parser
    from brokergroup_controller.admin import _run

    _, address = api
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    base = ["--controller-addresses", address, "--token-file", str(token_file)]

    async def cli(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        args = build_parser().parse_args(["admin", "user", *argv, *base])
        return await _run(args, out), out.getvalue()

    code, text = await cli("create", "app", "--allow", "Topic:T=Pub,Sub", "--deny", "Topic:T=Get")
    assert code == 0
    key_line = json.loads(text.splitlines()[0])
    assert key_line["accessKey"] == "app" and len(key_line["secretKey"]) == 43
    assert text.splitlines()[1] == "user app created (usersVersion 1)"
    code, text = await cli("get", "app")
    assert text == "app  version 1\n  Allow Topic:T Pub,Sub\n  Deny  Topic:T Get\n"
    with pytest.raises(ValueError, match="exists"):
        await cli("create", "app", "--allow", "Topic:T=Pub")
    with pytest.raises(ValueError, match="unknown action 'Publish'"):
        await cli("update", "app", "--allow", "Topic:T=Publish")
    code, text = await cli("update", "app", "--generate-secret")  # keeps the policies
    rotated = json.loads(text.splitlines()[0])["secretKey"]
    assert rotated != key_line["secretKey"]
    code, text = await cli("list")
    assert text.startswith("app  version 2\n  Allow Topic:T Pub,Sub\n")
    broker = derive_credential(ROOT, Role.BROKER, C, "broker-a")
    async with _client(address, broker) as b:
        snap = await b.users_snapshot(C)
    assert snap["users"][0]["secretKey"] == rotated
    code, text = await cli("delete", "app")
    assert (code, text) == (0, "user app deleted\n")
