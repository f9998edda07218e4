"""The controller's RocketMQ remoting front end (DESIGN.md §12, docs/controller.md) on one node.

A real single-node Raft (`ControllerRaftNode` on its own loopback address in 127.0.11.0/24)
behind the real `ControllerService` and `ControllerRemoting`, driven over loopback sockets
by `brokergroup_remoting.net.RemotingClient` with the headers and bodies a stock RocketMQ
5.3.1 broker and mqadmin send (BrokerOuterAPI, MQClientAPIImpl). Each refused request
(wrong signature, bad header, stale epochs, unknown code, not the leader) is checked to
leave the replicated state unchanged.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brokergroup_controller.credentials import (
    RocketMQKeyPair,
    RocketMQKeys,
    Role,
    derive_rocketmq_pair,
)
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.rocketmq_front import ControllerRemoting, server_auth, wire
from brokergroup_controller.server import ControllerConfig, ControllerService
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, request, response_to
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.keys import read_key_file as read_remoting_credentials
from brokergroup_remoting.net import (
    Connection,
    Credentials,
    RemotingClient,
    RemotingServer,
    ServerAuth,
)

KEYS = Credentials("rocketmq-broker", "broker-secret-of-this-test")
ROOT = "broker-credential-root-of-this-test"
C, B = "DefaultCluster", "broker-a"
_hosts = itertools.count(1)


def _config(tmp_path: Path, host: str, peers: tuple[str, ...] | None = None) -> ControllerConfig:
    return ControllerConfig(
        node_id=1,
        peers=peers or (f"{host}:9880",),
        data_dir=str(tmp_path / "data"),
        bind_address=host,
        token="api-token",
        broker_credential_root=ROOT,
        raft_password="raft-secret-of-this-test",
        remoting_port=0,
    )


@dataclass
class Node:
    host: str
    raft: ControllerRaftNode
    service: ControllerService
    front: ControllerRemoting
    client: RemotingClient

    def state(self) -> dict[str, Any]:
        return self.raft.read(lambda s: s.to_dict())

    async def call(
        self, code: int, fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        return await self.client.invoke(request(code, 0, fields, body), timeout_s=10)


async def _start(tmp_path: Path, *, leader: bool = True) -> AsyncIterator[Node]:
    host = f"127.0.11.{next(_hosts)}"
    # A second peer that never runs keeps node 1 from ever winning a majority.
    peers = None if leader else (f"{host}:9880", "127.0.11.250:9880")
    config = _config(tmp_path, host, peers)
    raft = ControllerRaftNode(config.raft_settings())
    raft.start()
    service = ControllerService(config, raft)
    keys = RocketMQKeys(RocketMQKeyPair(KEYS.access_key, KEYS.secret_key), ROOT)
    front = ControllerRemoting(
        service, port=0, auth=ServerAuth(secret_for=keys.secret_for), credentials=KEYS, keys=keys
    )
    try:
        deadline = time.monotonic() + 10
        while leader and not raft.status().caught_up:
            assert time.monotonic() < deadline, "single node never became leader"
            await asyncio.sleep(0.01)
        await service.start()
        await front.start(host)
        client = await RemotingClient.connect(f"{host}:{front.listening_port}", credentials=KEYS)
        try:
            yield Node(host, raft, service, front, client)
        finally:
            await client.close()
    finally:
        await front.close()
        await service.close()
        await asyncio.to_thread(raft.stop)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async for n in _start(tmp_path):
        yield n


def _apply(broker_id: int, address: str, code: str | None = None) -> dict[str, str]:
    return {
        "clusterName": C,
        "brokerName": B,
        "appliedBrokerId": str(broker_id),
        "registerCheckCode": code or f"{address};1700000000000",
    }


def _heartbeat(broker_id: int, address: str, **kw: str) -> dict[str, str]:
    return {
        "clusterName": C,
        "brokerAddr": address,
        "brokerName": B,
        "brokerId": str(broker_id),
        "epoch": "0",
        "maxOffset": "0",
        "confirmOffset": "-1",
        "heartbeatTimeoutMills": "60000",
        "electionPriority": "2147483647",
        **kw,
    }


async def _join(node: Node, broker_id: int, address: str) -> RemotingCommand:
    """What ReplicasManager.register() sends, then its first heartbeat (oneway)."""
    answer = await node.call(
        RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}
    )
    assert answer.code == ResponseCode.SUCCESS, answer
    assert answer.fields()["nextBrokerId"] == str(broker_id)
    answer = await node.call(RequestCode.CONTROLLER_APPLY_BROKER_ID, _apply(broker_id, address))
    assert answer.code == ResponseCode.SUCCESS, answer
    registered = await node.call(
        RequestCode.CONTROLLER_REGISTER_BROKER,
        {"clusterName": C, "brokerName": B, "brokerId": str(broker_id), "brokerAddress": address},
    )
    assert registered.code == ResponseCode.SUCCESS, registered
    await node.client.invoke_oneway(
        request(RequestCode.BROKER_HEARTBEAT, 0, _heartbeat(broker_id, address))
    )
    return registered


def _elect_fields(broker_id: int, *, designate: bool = False) -> dict[str, str]:
    return {
        "clusterName": C,
        "brokerName": B,
        "brokerId": str(broker_id),
        "designateElect": "true" if designate else "false",
        "invokeTime": "1700000000000",
    }


async def _group_of_two(node: Node) -> None:
    """Broker 1 master (first election), broker 2 registered and heartbeating."""
    await _join(node, 1, "127.0.0.1:10911")
    elected = await node.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(1))
    assert elected.code == ResponseCode.SUCCESS, elected
    registered = await _join(node, 2, "127.0.0.2:10911")
    assert registered.fields()["masterBrokerId"] == "1"
    await node.call(RequestCode.CONTROLLER_GET_METADATA_INFO)  # the heartbeat was handled


def _sync_state_set(members: list[int], epoch: int) -> bytes:
    return json.dumps({"syncStateSet": members, "syncStateSetEpoch": epoch}).encode()


def _alter_fields(master: int, master_epoch: int) -> dict[str, str]:
    return {
        "brokerName": B,
        "masterBrokerId": str(master),
        "masterEpoch": str(master_epoch),
        "invokeTime": "1700000000000",
    }


# ---------------------------------------------------------------- a broker joins


async def test_a_stock_broker_registers_is_elected_and_the_http_state_agrees(node: Node) -> None:
    registered = await _join(node, 1, "127.0.0.1:10911")
    assert "masterBrokerId" not in registered.fields()  # no master yet: the broker asks
    assert json.loads(registered.body) == {"syncStateSet": [], "syncStateSetEpoch": 0}

    elected = await node.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(1))
    assert elected.code == ResponseCode.SUCCESS, elected
    f = elected.fields()
    assert (f["masterBrokerId"], f["masterAddress"], f["masterEpoch"], f["syncStateSetEpoch"]) == (
        "1", "127.0.0.1:10911", "1", "1",
    )  # fmt: skip
    body = json.loads(elected.body)
    assert body["syncStateSet"] == [1]
    assert body["brokerMemberGroup"] == {
        "cluster": C,
        "brokerName": B,
        "brokerAddrs": {"1": "127.0.0.1:10911"},
    }
    broker_set = node.state()["brokerSets"][0]
    assert (broker_set["masterBrokerId"], broker_set["masterEpoch"]) == (1, 1)

    info = await node.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert info.code == ResponseCode.SUCCESS
    assert info.fields()["masterBrokerId"] == "1" and info.fields()["masterEpoch"] == "1"
    assert json.loads(info.body) == {"syncStateSet": [1], "syncStateSetEpoch": 1}


async def test_a_slave_joins_the_sync_state_set_through_alter(node: Node) -> None:
    await _group_of_two(node)
    grown = await node.call(
        RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, _alter_fields(1, 1), _sync_state_set([1, 2], 1)
    )
    assert grown.code == ResponseCode.SUCCESS, grown
    assert grown.fields() == {"newSyncStateSetEpoch": "2"}
    assert json.loads(grown.body) == {"syncStateSet": [1, 2], "syncStateSetEpoch": 2}

    data = await node.call(
        RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=json.dumps([B, "nope"]).encode()
    )
    assert data.code == ResponseCode.SUCCESS
    table = json.loads(data.body)["replicasInfoTable"]
    assert list(table) == [B]
    assert [r["brokerId"] for r in table[B]["inSyncReplicas"]] == [1, 2]
    assert all(r["alive"] for r in table[B]["inSyncReplicas"])


async def test_a_broker_asking_while_the_master_lives_gets_master_still_exist(node: Node) -> None:
    await _group_of_two(node)
    before = node.state()
    answer = await node.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(2))
    assert answer.code == ResponseCode.CONTROLLER_MASTER_STILL_EXIST
    # BrokerOuterAPI.brokerElect reads this answer like a success: it must name the master.
    assert answer.fields()["masterBrokerId"] == "1"
    assert json.loads(answer.body)["syncStateSet"] == [1]
    assert node.state() == before


async def _next_notification(
    node: Node, notified: asyncio.Queue[tuple[str, RemotingCommand]]
) -> tuple[str, RemotingCommand]:
    """The next NOTIFY_BROKER_ROLE_CHANGED a test broker got; failing, what the leader's front
    knew (its baseline of notified epochs, the brokers heartbeating over it, Raft's status),
    so a notification that never left can be told from one that left and was lost."""
    try:
        return await asyncio.wait_for(notified.get(), 10)
    except TimeoutError:
        front = node.front
        raise AssertionError(
            f"no role notification within 10 s: notified epochs {front._notified}, "
            f"heartbeating brokers {sorted(front._remoting_brokers)}, "
            f"notify tasks {front._tasks}, Raft {node.raft.status()}, "
            f"broker sets {node.state()['brokerSets']}"
        ) from None


async def test_admin_election_switches_and_notifies_the_brokers(node: Node) -> None:
    """mqadmin electMaster (designateElect=true) moves the master; every live stock broker
    gets NOTIFY_BROKER_ROLE_CHANGED with the new master and SyncStateSet."""
    notified: asyncio.Queue[tuple[str, RemotingCommand]] = asyncio.Queue()
    brokers = []
    for i in (1, 2):

        async def on_notify(cmd: RemotingCommand, conn: Connection, i: int = i) -> RemotingCommand:
            await notified.put((f"broker{i}", cmd))
            return response_to(cmd)

        server = RemotingServer(
            {RequestCode.NOTIFY_BROKER_ROLE_CHANGED: on_notify}, auth=server_auth(KEYS)
        )
        await server.start(node.host, 0)
        brokers.append(server)
    try:
        addresses = [f"{node.host}:{s.port}" for s in brokers]
        await _join(node, 1, addresses[0])
        assert (await node.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(1))).code == 0
        # The first election's notification goes to the only live broker, the new master.
        who, cmd = await _next_notification(node, notified)
        assert who == "broker1" and cmd.fields()["masterBrokerId"] == "1"
        await _join(node, 2, addresses[1])
        await node.call(
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
            _alter_fields(1, 1),
            _sync_state_set([1, 2], 1),
        )
        answer = await node.call(
            RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(2, designate=True)
        )
        assert answer.code == ResponseCode.SUCCESS, answer
        assert answer.fields()["masterBrokerId"] == "2" and answer.fields()["masterEpoch"] == "2"
        got: dict[str, RemotingCommand] = {}
        while len(got) < 2:
            who, cmd = await _next_notification(node, notified)
            if cmd.fields()["masterEpoch"] == "2":
                got[who] = cmd
        for cmd in got.values():
            assert cmd.fields() | {"AccessKey": "", "Signature": ""} == {
                "masterAddress": addresses[1],
                "masterEpoch": "2",
                "syncStateSetEpoch": "3",
                "masterBrokerId": "2",
                "AccessKey": "",
                "Signature": "",
            }
            assert json.loads(cmd.body) == {"syncStateSet": [2], "syncStateSetEpoch": 3}
            assert cmd.is_oneway
    finally:
        for server in brokers:
            await server.close()


async def test_the_masters_heartbeat_connection_closing_elects_a_slave(node: Node) -> None:
    """A SIGKILLed stock broker's connection closes: the leader elects from the SyncStateSet."""
    await _join(node, 1, "127.0.0.1:10911")
    await node.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(1))
    # Broker 2 heartbeats on a connection of its own, as each broker process does.
    other = await RemotingClient.connect(
        f"{node.host}:{node.front.listening_port}", credentials=KEYS
    )
    try:
        await other.invoke(
            request(RequestCode.CONTROLLER_APPLY_BROKER_ID, 0, _apply(2, "127.0.0.2:10911"))
        )
        await other.invoke(
            request(
                RequestCode.CONTROLLER_REGISTER_BROKER,
                0,
                {
                    "clusterName": C,
                    "brokerName": B,
                    "brokerId": "2",
                    "brokerAddress": "127.0.0.2:10911",
                },
            )
        )
        await other.invoke_oneway(
            request(RequestCode.BROKER_HEARTBEAT, 0, _heartbeat(2, "127.0.0.2:10911"))
        )
        grown = await other.invoke(
            request(
                RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                0,
                _alter_fields(1, 1),
                _sync_state_set([1, 2], 1),
            )
        )
        assert grown.code == ResponseCode.SUCCESS, grown
        await node.client.close()  # broker 1, the master, is gone
        deadline = time.monotonic() + 20
        while node.state()["brokerSets"][0]["masterBrokerId"] != 2:
            assert time.monotonic() < deadline, node.state()
            await asyncio.sleep(0.05)
        assert node.state()["brokerSets"][0]["masterEpoch"] == 2
    finally:
        await other.close()


# ---------------------------------------------------------------- refusals change nothing


async def test_a_wrong_signature_is_refused_before_anything_is_decoded(node: Node) -> None:
    before = node.state()
    for credentials in (
        Credentials(KEYS.access_key, "wrong-secret"),
        Credentials("nobody", "x"),
        None,
    ):
        client = await RemotingClient.connect(
            f"{node.host}:{node.front.listening_port}", credentials=credentials
        )
        try:
            answer = await client.invoke(
                request(RequestCode.CONTROLLER_APPLY_BROKER_ID, 0, _apply(1, "127.0.0.1:10911"))
            )
            assert answer.code == ResponseCode.NO_PERMISSION, answer
            # Even a malformed header is never looked at without a good signature.
            answer = await client.invoke(
                request(RequestCode.CONTROLLER_APPLY_BROKER_ID, 0, {"appliedBrokerId": "x"})
            )
            assert answer.code == ResponseCode.NO_PERMISSION
        finally:
            await client.close()
    assert node.state() == before


async def test_an_unknown_code_is_not_supported(node: Node) -> None:
    before = node.state()
    answer = await node.call(RequestCode.GET_BROKER_EPOCH_CACHE, {"brokerName": B})
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    answer = await node.call(9999)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert node.state() == before


@pytest.mark.parametrize(
    ("code", "fields", "body"),
    [
        (RequestCode.CONTROLLER_APPLY_BROKER_ID, {**_apply(1, "a:1"), "appliedBrokerId": "x"}, b""),
        (RequestCode.CONTROLLER_APPLY_BROKER_ID, {**_apply(1, "a:1"), "registerCheckCode": ""}, b""),
        (RequestCode.CONTROLLER_APPLY_BROKER_ID, {"brokerName": B, "appliedBrokerId": "1", "registerCheckCode": "a;1"}, b""),
        (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C}, b""),
        (RequestCode.CONTROLLER_REGISTER_BROKER, {"clusterName": C, "brokerName": B, "brokerId": "0", "brokerAddress": "a:1"}, b""),
        (RequestCode.CONTROLLER_REGISTER_BROKER, {"clusterName": C, "brokerName": B, "brokerId": "99999999999999999999", "brokerAddress": "a:1"}, b""),
        (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, _alter_fields(1, 1), b"not json"),
        (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, _alter_fields(1, 1), _sync_state_set([0], 1)),
        (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {**_alter_fields(1, 1), "masterEpoch": "1.5"}, _sync_state_set([1], 1)),
        (RequestCode.CONTROLLER_ELECT_MASTER, {**_elect_fields(1), "brokerId": "-1"}, b""),
        (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, None, b'{"a": 1}'),
        (RequestCode.CLEAN_BROKER_DATA, {"clusterName": C, "brokerName": B, "brokerControllerIdsToClean": "1;x"}, b""),
    ],
)  # fmt: skip
async def test_a_bad_header_or_body_is_an_invalid_request_and_changes_nothing(
    node: Node, code: int, fields: dict[str, str] | None, body: bytes
) -> None:
    await _join(node, 1, "127.0.0.1:10911")
    await node.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(1))
    before = node.state()
    answer = await node.call(code, fields, body)
    assert answer.code == ResponseCode.CONTROLLER_INVALID_REQUEST, answer
    assert answer.remark
    assert node.state() == before


async def test_stale_epochs_are_fenced_and_change_nothing(node: Node) -> None:
    await _group_of_two(node)
    before = node.state()
    cases = [
        (_alter_fields(1, 0), _sync_state_set([1, 2], 1), ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH),
        (_alter_fields(1, 1), _sync_state_set([1, 2], 0), ResponseCode.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH),
        (_alter_fields(2, 1), _sync_state_set([1, 2], 1), ResponseCode.CONTROLLER_INVALID_MASTER),
        (_alter_fields(1, 1), _sync_state_set([1, 3], 1), ResponseCode.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED),
    ]  # fmt: skip
    for fields, body, expected in cases:
        answer = await node.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, fields, body)
        assert answer.code == expected, (fields, body, answer)
        assert node.state() == before


async def test_identity_rules_answer_rocketmqs_codes(node: Node) -> None:
    before = node.state()
    answer = await node.call(RequestCode.CONTROLLER_APPLY_BROKER_ID, _apply(2, "127.0.0.1:10911"))
    assert answer.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID  # a new set starts at 1
    answer = await node.call(
        RequestCode.CONTROLLER_REGISTER_BROKER,
        {"clusterName": C, "brokerName": B, "brokerId": "1", "brokerAddress": "127.0.0.1:10911"},
    )
    assert answer.code == ResponseCode.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
    answer = await node.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
    assert answer.code == ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST
    assert node.state() == before
    await _join(node, 1, "127.0.0.1:10911")
    taken = node.state()
    answer = await node.call(
        RequestCode.CONTROLLER_APPLY_BROKER_ID, _apply(1, "127.0.0.9:10911", "127.0.0.9:10911;5")
    )
    assert answer.code == ResponseCode.CONTROLLER_BROKER_ID_INVALID  # id 1 is someone else's
    # The owner retrying with its own registerCheckCode is accepted (idempotent).
    answer = await node.call(RequestCode.CONTROLLER_APPLY_BROKER_ID, _apply(1, "127.0.0.1:10911"))
    assert answer.code == ResponseCode.SUCCESS
    assert node.state() == taken


async def test_clean_broker_data_refuses_live_brokers_unless_told(node: Node) -> None:
    await _group_of_two(node)
    before = node.state()
    fields = {"clusterName": C, "brokerName": B, "brokerControllerIdsToClean": "2"}
    answer = await node.call(RequestCode.CLEAN_BROKER_DATA, fields)
    assert answer.code == ResponseCode.CONTROLLER_INVALID_CLEAN_BROKER_METADATA
    assert node.state() == before
    answer = await node.call(
        RequestCode.CLEAN_BROKER_DATA, {**fields, "isCleanLivingBroker": "true"}
    )
    assert answer.code == ResponseCode.SUCCESS, answer
    assert list(node.state()["brokerSets"][0]["brokers"]) == ["1"]


async def test_metadata_names_the_leaders_remoting_address(node: Node) -> None:
    answer = await node.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
    assert answer.code == ResponseCode.SUCCESS
    f = answer.fields()
    address = f"{node.host}:{node.front.listening_port}"
    assert (f["isLeader"], f["controllerLeaderAddress"], f["controllerLeaderId"]) == (
        "true",
        address,
        "n1",
    )
    assert f["peers"] == f"n1:{address};"


async def test_controller_config_shows_settings_without_secrets_and_refuses_updates(
    node: Node,
) -> None:
    answer = await node.call(RequestCode.GET_CONTROLLER_CONFIG)
    assert answer.code == ResponseCode.SUCCESS
    text = answer.body.decode()
    assert "heartbeatTimeoutMs=2000\n" in text and "enableElectUncleanMaster=false\n" in text
    assert "api-token" not in text and "raft-secret" not in text and ROOT not in text
    answer = await node.call(
        RequestCode.UPDATE_CONTROLLER_CONFIG, body=b"enableElectUncleanMaster=true\n"
    )
    assert answer.code == ResponseCode.NO_PERMISSION
    assert "enableElectUncleanMaster" in (answer.remark or "")
    assert node.service.config.enable_elect_unclean_master is False


def _pair(role: Role, broker_name: str = B, root: str = ROOT) -> Credentials:
    pair = derive_rocketmq_pair(root, role, C, broker_name)
    return Credentials(pair.access_key, pair.secret_key)


async def _as(node: Node, credentials: Credentials) -> Node:
    client = await RemotingClient.connect(
        f"{node.host}:{node.front.listening_port}", credentials=credentials
    )
    return dataclasses.replace(node, client=client)


async def test_a_groups_broker_pair_runs_its_own_broker_and_nothing_else(node: Node) -> None:
    """DESIGN.md §11: a broker key pair does its own group's broker requests (the join and a
    first election as the requester); another group's, an admin election or a clean are
    refused NO_PERMISSION and change nothing."""
    broker = await _as(node, _pair(Role.BROKER))
    other = await _as(node, _pair(Role.BROKER, "broker-b"))
    try:
        await _join(broker, 1, "127.0.0.1:10911")
        elected = await broker.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(1))
        assert elected.code == ResponseCode.SUCCESS, elected
        await _join(broker, 2, "127.0.0.2:10911")
        before = node.state()
        refused = [
            (other, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}),
            (other, RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, _alter_fields(1, 1)),
            (other, RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(2)),
            (broker, RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(2, designate=True)),
            (
                broker,
                RequestCode.CLEAN_BROKER_DATA,
                {"clusterName": C, "brokerName": B, "brokerControllerIdsToClean": "2"},
            ),
            (broker, RequestCode.GET_CONTROLLER_CONFIG, {}),
            (broker, RequestCode.UPDATE_CONTROLLER_CONFIG, {}),
        ]
        for who, code, fields in refused:
            body = (
                _sync_state_set([1], 1)
                if code == RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET
                else b""
            )
            answer = await who.call(code, fields, body)
            assert (code, answer.code) == (code, ResponseCode.NO_PERMISSION), answer
        answer = await broker.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-a"]')
        assert answer.code == ResponseCode.NO_PERMISSION
        assert (
            "broker-b"
            in (await other.call(RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(2))).remark
        )
        assert node.state() == before
    finally:
        await broker.client.close()
        await other.client.close()


async def test_a_groups_client_pair_only_reads(node: Node) -> None:
    await _group_of_two(node)
    client = await _as(node, _pair(Role.CLIENT))
    forged = await _as(node, _pair(Role.BROKER, root="a-root-this-controller-never-had"))
    try:
        before = node.state()
        info = await client.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
        assert (info.code, info.fields()["masterBrokerId"]) == (ResponseCode.SUCCESS, "1")
        meta = await client.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert meta.code == ResponseCode.SUCCESS
        for code, fields in (
            (RequestCode.CONTROLLER_ELECT_MASTER, _elect_fields(2)),
            (
                RequestCode.CONTROLLER_REGISTER_BROKER,
                {
                    "clusterName": C,
                    "brokerName": B,
                    "brokerId": "3",
                    "brokerAddress": "127.0.0.3:10911",
                },
            ),
            (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": C, "brokerName": B}),
        ):
            answer = await client.call(code, fields)
            assert (code, answer.code) == (code, ResponseCode.NO_PERMISSION), answer
        # A pair derived from another root fails the signature itself.
        answer = await forged.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert answer.code == ResponseCode.NO_PERMISSION
        assert answer.remark == "the Signature does not match the request"
        assert node.state() == before
    finally:
        await client.client.close()
        await forged.client.close()


async def test_a_follower_answers_not_leader_and_changes_nothing(tmp_path: Path) -> None:
    async for follower in _start(tmp_path, leader=False):
        before = follower.state()
        answer = await follower.call(
            RequestCode.CONTROLLER_APPLY_BROKER_ID, _apply(1, "127.0.0.1:10911")
        )
        assert answer.code == ResponseCode.CONTROLLER_NOT_LEADER, answer
        answer = await follower.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": B})
        assert answer.code == ResponseCode.CONTROLLER_NOT_LEADER
        meta = await follower.call(RequestCode.CONTROLLER_GET_METADATA_INFO)
        assert meta.code == ResponseCode.SUCCESS and meta.fields()["isLeader"] == "false"
        assert "controllerLeaderAddress" not in meta.fields()  # no leader known
        heartbeat = await follower.call(
            RequestCode.BROKER_HEARTBEAT, _heartbeat(1, "127.0.0.1:10911")
        )
        assert heartbeat.code == ResponseCode.SUCCESS  # sent to every node; followers drop it
        assert follower.state() == before


# ---------------------------------------------------------------- pure pieces


def test_every_controller_code_has_one_rocketmq_code() -> None:
    assert set(wire.RESPONSE_CODE_OF) == set(ErrorCode)
    assert wire.response_code_of("NOT_A_CODE") == ResponseCode.SYSTEM_ERROR


def test_a_broker_name_in_two_clusters_needs_the_cluster() -> None:
    keys = [("c1", "b"), ("c2", "b"), ("c1", "x")]
    assert wire.resolve_broker_set(keys, "x") == ("c1", "x")
    assert wire.resolve_broker_set(keys, "b", "c2") == ("c2", "b")
    assert wire.resolve_broker_set(keys, "nope") is None
    with pytest.raises(BadField, match="several clusters"):
        wire.resolve_broker_set(keys, "b")


def test_the_credentials_file_is_checked_without_echoing_the_secret(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"accessKey": "akey01", "secretKey": "sk-value"}')
    assert read_remoting_credentials(str(path)) == Credentials("akey01", "sk-value")
    assert "sk-value" not in repr(read_remoting_credentials(str(path)))
    path.write_text('{"accessKey": "akey01", "secretKey": ""}')
    with pytest.raises(ValueError, match="secretKey must be a string"):
        read_remoting_credentials(str(path))
    path.write_text("sk-value")
    with pytest.raises(ValueError) as info:
        read_remoting_credentials(str(path))
    assert "sk-value" not in str(info.value)
