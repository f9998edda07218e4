"""The name server's handlers on a real loopback socket (brokergroup_controller.namesrv).

A `NameServer` runs in-process on 127.0.0.1 with a key pair; clients are
brokergroup_remoting.net clients, signed as the stock AclClientRPCHook signs. Checks every
handler's refusals (unsigned or wrongly signed requests, unknown codes, malformed header
fields, bodies that are not what they claim, a crc32 mismatch, a decompression bomb): each
gets an answer, changes no registration and leaves another connection working. Then the
broker side (REGISTER_BROKER in both body encodings, QUERY_DATA_VERSION, UNREGISTER_BROKER,
a closed connection) and that a committed election moves brokerId 0 in the next route with
no new registration.
"""

from __future__ import annotations

import datetime
import json
import struct
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brokergroup_controller.config import ControllerConfig
from brokergroup_controller.credentials import (
    Principal,
    RocketMQKeyPair,
    RocketMQKeys,
    Role,
    derive_rocketmq_pair,
)
from brokergroup_controller.namesrv import access as namesrv_access
from brokergroup_controller.namesrv.routes import ManagedGroup
from brokergroup_controller.namesrv.serve import name_server_auth
from brokergroup_controller.namesrv.server import NameServer
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, SerializeType
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient, ServerAuth
from brokergroup_remoting.tls import client_context
from tests.unit.tls_material import make_material

KEYS = {"nsAccessKey": "nsSecretKey-1234"}
GOOD = Credentials("nsAccessKey", "nsSecretKey-1234")
KEY = ("DefaultCluster", "broker-a")
A1, A2 = "127.0.0.10:10911", "127.0.0.11:10911"


class Groups:
    """The controller state the name server reads (tests change it as a commit would)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], ManagedGroup] = {}

    def __call__(self) -> dict[tuple[str, str], ManagedGroup]:
        return self.groups


@pytest.fixture
async def served() -> AsyncIterator[tuple[NameServer, Groups, str]]:
    groups = Groups()
    server = NameServer(groups, auth=ServerAuth(secret_for=KEYS.get))
    await server.start("127.0.0.1", 0)
    try:
        yield server, groups, f"127.0.0.1:{server.port}"
    finally:
        await server.close()


def topic_table(*names: str) -> dict[str, object]:
    return {
        name: {
            "attributes": {},
            "order": False,
            "perm": 6,
            "readQueueNums": 4,
            "topicFilterType": "SINGLE_TAG",
            "topicName": name,
            "topicSysFlag": 0,
            "writeQueueNums": 4,
        }
        for name in names
    }


def json_body(*topics: str, counter: int = 1) -> bytes:
    """RegisterBrokerBody as a 5.3.1 broker writes it (compressedRegister=false)."""
    return json.dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": {"counter": counter, "stateVersion": 0, "timestamp": 1700000000000},
                "mappingDataVersion": {"counter": 0, "stateVersion": 0, "timestamp": 1700000000000},
                "topicConfigTable": topic_table(*topics),
                "topicQueueMappingDetailMap": {},
                "topicQueueMappingInfoMap": {},
            },
        },
        separators=(",", ":"),
    ).encode()


def compressed_body(*topics: str) -> bytes:
    """RegisterBrokerBody.encode(true): a zlib stream of length-prefixed parts."""

    def part(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    raw = part(b'{"counter":1,"stateVersion":0,"timestamp":1700000000000}')
    raw += struct.pack(">i", len(topics))
    for name in topics:
        raw += part(f"{name} 4 4 6 SINGLE_TAG {{}}".encode())
    raw += part(b"[]") + struct.pack(">i", 0)
    return zlib.compress(raw, 9)


def register_fields(addr: str, broker_id: int, **extra: str) -> dict[str, str]:
    fields = {
        "brokerName": "broker-a",
        "brokerAddr": addr,
        "clusterName": "DefaultCluster",
        "haServerAddr": addr.replace(":10911", ":10912"),
        "brokerId": str(broker_id),
        "compressed": "false",
        "bodyCrc32": "0",
    }
    fields.update(extra)
    return fields


async def call(
    address: str, cmd: RemotingCommand, credentials: Credentials | None = GOOD
) -> RemotingCommand:
    client = await RemotingClient.connect(address, credentials=credentials)
    try:
        return await client.invoke(cmd, timeout_s=5)
    finally:
        await client.close()


async def route(address: str, topic: str = "orders") -> tuple[int, dict[str, object] | None]:
    answer = await call(address, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": topic}))
    return answer.code, (json.loads(answer.body) if answer.body else None)


async def test_unsigned_wrongly_signed_and_unknown_requests_are_refused(
    served: tuple[NameServer, Groups, str],
) -> None:
    _, _, address = served
    reg = request(RequestCode.REGISTER_BROKER, 0, register_fields(A1, 0), json_body("orders", "x"))
    answer = await call(address, reg, credentials=None)
    assert (answer.code, answer.remark) == (
        ResponseCode.NO_PERMISSION,
        "the request carries no AccessKey",
    )
    answer = await call(address, reg, credentials=Credentials("nsAccessKey", "not-the-secret"))
    assert (answer.code, answer.remark) == (
        ResponseCode.NO_PERMISSION,
        "the Signature does not match the request",
    )
    answer = await call(address, request(RequestCode.SEND_MESSAGE, 0, {"topic": "orders"}))
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert answer.remark == f"request code {RequestCode.SEND_MESSAGE} not supported"
    assert (await route(address))[0] == ResponseCode.TOPIC_NOT_EXIST


BAD_REGISTRATIONS = [
    ("missing brokerAddr", {"brokerAddr": None}, b"", "the header field brokerAddr is missing"),
    ("brokerId not a number", {"brokerId": "zero"}, b"", "field brokerId is not a number"),
    ("negative brokerId", {"brokerId": "-1"}, b"", "field brokerId is -1, outside"),
    ("brokerId overflow", {"brokerId": "99999999999999999999"}, b"", "field brokerId"),
    ("address without port", {"brokerAddr": "127.0.0.10"}, b"", "is not host:port"),
    ("port out of range", {"brokerAddr": "127.0.0.10:70000"}, b"", "is not host:port"),
    ("empty brokerName", {"brokerName": ""}, b"", "the header field brokerName is empty"),
    ("body not JSON", {}, b"{not json", "RegisterBrokerBody body is not JSON"),
    ("body not UTF-8", {}, b"\xff\xfe", "RegisterBrokerBody body is not JSON"),
    ("body a list", {}, b"[]", "must be a JSON object"),
    (
        "topic table not an object",
        {},
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":[1]}}',
        "topicConfigTable must be a JSON object",
    ),
    (
        "queue count a string",
        {},
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"t":{"topicName":"t","readQueueNums":"4"}}}}',
        "readQueueNums must be an integer",
    ),
    ("compressed garbage", {"compressed": "true"}, b"not zlib at all", "is not a zlib stream"),
    (
        "compressed and truncated",
        {"compressed": "true"},
        zlib.compress(struct.pack(">i", 50) + b"{}"),
        "ends inside the DataVersion",
    ),
    (
        "decompression bomb",
        {"compressed": "true"},
        zlib.compress(b"\0" * (65 * 1024 * 1024), 9),
        "inflates beyond",
    ),
    ("crc32 mismatch", {"bodyCrc32": "12345"}, json_body("orders", "x"), "crc32 not match"),
    ("crc32 not a number", {"bodyCrc32": "0x10"}, b"", "field bodyCrc32 is not a number"),
]


@pytest.mark.parametrize(
    ("fields", "body", "reason"),
    [case[1:] for case in BAD_REGISTRATIONS],
    ids=[case[0] for case in BAD_REGISTRATIONS],
)
async def test_a_bad_registration_is_answered_and_changes_nothing(
    served: tuple[NameServer, Groups, str], fields: dict[str, str | None], body: bytes, reason: str
) -> None:
    server, _, address = served
    bystander = await RemotingClient.connect(address, credentials=GOOD)
    try:
        ok = request(
            RequestCode.REGISTER_BROKER, 0, register_fields(A2, 1), json_body("orders", "x")
        )
        assert (await bystander.invoke(ok, 5)).code == ResponseCode.SUCCESS
        merged = {k: v for k, v in {**register_fields(A1, 0), **fields}.items() if v is not None}
        for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
            bad = request(
                RequestCode.REGISTER_BROKER, 0, merged, body, serialize_type=serialize_type
            )
            answer = await call(address, bad)
            assert answer.code == ResponseCode.SYSTEM_ERROR, answer
            assert reason in (answer.remark or ""), answer.remark
            assert answer.serialize_type == serialize_type
        assert [r.broker_addr for r in server.registry] == [A2]
        # The other connection is untouched and still served.
        code, data = await route(address)
        assert code == ResponseCode.SUCCESS and data is not None
        assert not bystander.closed
        assert (await bystander.invoke(ok, 5)).code == ResponseCode.SUCCESS
    finally:
        await bystander.close()


@pytest.mark.parametrize(
    ("code", "fields"),
    [
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {}),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": ""}),
        (RequestCode.GET_TOPICS_BY_CLUSTER, {}),
        (RequestCode.UNREGISTER_BROKER, {"brokerName": "broker-a", "clusterName": "c"}),
        (
            RequestCode.QUERY_DATA_VERSION,
            {"brokerName": "b", "brokerAddr": A1, "clusterName": "c", "brokerId": "x"},
        ),
        (RequestCode.BROKER_HEARTBEAT, {"clusterName": "c", "brokerAddr": "nowhere"}),
        (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"clusterName": "c"}),
    ],
)
async def test_malformed_header_fields_are_answered_system_error(
    served: tuple[NameServer, Groups, str], code: int, fields: dict[str, str]
) -> None:
    _, _, address = served
    answer = await call(address, request(code, 0, fields))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark


async def test_a_data_version_body_that_is_not_json_is_refused(
    served: tuple[NameServer, Groups, str],
) -> None:
    _, _, address = served
    fields = {"brokerName": "b", "brokerAddr": A1, "clusterName": "c", "brokerId": "0"}
    answer = await call(address, request(RequestCode.QUERY_DATA_VERSION, 0, fields, b"\x00{"))
    assert (answer.code, answer.remark is not None) == (ResponseCode.SYSTEM_ERROR, True)


async def test_json_and_compressed_registrations_give_the_same_route(
    served: tuple[NameServer, Groups, str],
) -> None:
    server, _, address = served
    body = compressed_body("orders", "TBW102")
    fields = register_fields(A1, 0, compressed="true", bodyCrc32=str(zlib.crc32(body) & 0x7FFFFFFF))
    broker = await RemotingClient.connect(address, credentials=GOOD)
    try:
        answer = await broker.invoke(request(RequestCode.REGISTER_BROKER, 0, fields, body), 5)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        compressed_route = await route(address)
        assert server.registry.unregister("DefaultCluster", A1, "broker-a")
        plain = register_fields(A1, 0)
        answer = await broker.invoke(
            request(RequestCode.REGISTER_BROKER, 0, plain, json_body("orders", "TBW102")), 5
        )
        assert answer.code == ResponseCode.SUCCESS
        assert await route(address) == compressed_route
        # What a 5.3.1 broker with compressedRegister=true sends: the zlib body under
        # compressed=false (BrokerOuterAPI); recognized by the zlib header.
        assert server.registry.unregister("DefaultCluster", A1, "broker-a")
        as_sent = register_fields(A1, 0, bodyCrc32=str(zlib.crc32(body) & 0x7FFFFFFF))
        answer = await broker.invoke(request(RequestCode.REGISTER_BROKER, 0, as_sent, body), 5)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert await route(address) == compressed_route
    finally:
        await broker.close()
    assert compressed_route == (
        ResponseCode.SUCCESS,
        {
            "brokerDatas": [
                {
                    "brokerAddrs": {"0": A1},
                    "brokerName": "broker-a",
                    "cluster": "DefaultCluster",
                    "enableActingMaster": False,
                }
            ],
            "filterServerTable": {},
            "queueDatas": [
                {
                    "brokerName": "broker-a",
                    "perm": 6,
                    "readQueueNums": 4,
                    "topicSysFlag": 0,
                    "writeQueueNums": 4,
                }
            ],
        },
    )


async def test_broker_lifecycle_and_an_election_without_a_new_registration(
    served: tuple[NameServer, Groups, str],
) -> None:
    server, groups, address = served
    groups.groups[KEY] = ManagedGroup(KEY[0], KEY[1], 1, 1, {1: A1, 2: A2})
    master = await RemotingClient.connect(address, credentials=GOOD)
    slave = await RemotingClient.connect(address, credentials=GOOD)
    try:
        answer = await master.invoke(
            request(
                RequestCode.REGISTER_BROKER, 0, register_fields(A1, 0), json_body("orders", "x")
            ),
            5,
        )
        assert (answer.code, answer.fields()) == (ResponseCode.SUCCESS, {})
        answer = await slave.invoke(
            request(
                RequestCode.REGISTER_BROKER, 0, register_fields(A2, 2), json_body("orders", "x")
            ),
            5,
        )
        # A slave learns its master and the master's HA address (RegisterBrokerResult).
        assert answer.fields() == {"haServerAddr": "127.0.0.10:10912", "masterAddr": A1}
        _, data = await route(address)
        assert data is not None and data["brokerDatas"][0]["brokerAddrs"] == {"0": A1, "2": A2}  # type: ignore[index]

        # The controller commits an election of broker 2: the next route says so.
        groups.groups[KEY] = ManagedGroup(KEY[0], KEY[1], 2, 2, {1: A1, 2: A2})
        _, data = await route(address)
        assert data is not None and data["brokerDatas"][0]["brokerAddrs"] == {"0": A2, "1": A1}  # type: ignore[index]

        version = {
            "brokerName": "broker-a",
            "brokerAddr": A2,
            "clusterName": "DefaultCluster",
            "brokerId": "2",
        }
        same = b'{"counter":1,"stateVersion":0,"timestamp":1700000000000}'
        answer = await call(address, request(RequestCode.QUERY_DATA_VERSION, 0, version, same))
        assert (answer.code, answer.fields()) == (ResponseCode.SUCCESS, {"changed": "false"})
        assert json.loads(answer.body) == json.loads(same)
        newer = same.replace(b'"counter":1', b'"counter":2')
        answer = await call(address, request(RequestCode.QUERY_DATA_VERSION, 0, version, newer))
        assert answer.fields() == {"changed": "true"}

        # The old master's connection closes (a killed broker): it leaves the route.
        await master.close()
        for _ in range(100):
            if len(server.registry) == 1:
                break
            await asyncio_sleep()
        _, data = await route(address)
        assert data is not None and data["brokerDatas"][0]["brokerAddrs"] == {"0": A2}  # type: ignore[index]

        unregister = {
            "brokerName": "broker-a",
            "brokerAddr": A2,
            "clusterName": "DefaultCluster",
            "brokerId": "0",
        }
        assert (
            await slave.invoke(request(RequestCode.UNREGISTER_BROKER, 0, unregister), 5)
        ).code == 0
        assert (await route(address))[0] == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await master.close()
        await slave.close()


async def test_cluster_info_and_topic_lists(served: tuple[NameServer, Groups, str]) -> None:
    _, _, address = served
    broker = await RemotingClient.connect(address, credentials=GOOD)
    body = json_body("orders", "TBW102")
    answer = await broker.invoke(
        request(RequestCode.REGISTER_BROKER, 0, register_fields(A1, 0), body), 5
    )
    assert answer.code == ResponseCode.SUCCESS
    info = json.loads((await call(address, request(RequestCode.GET_BROKER_CLUSTER_INFO, 0))).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": A1}
    topics = await call(address, request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, 0))
    assert json.loads(topics.body) == {"topicList": ["TBW102", "orders"]}
    by_cluster = await call(
        address, request(RequestCode.GET_TOPICS_BY_CLUSTER, 0, {"cluster": "DefaultCluster"})
    )
    assert json.loads(by_cluster.body) == {"topicList": ["TBW102", "orders"]}
    system = await call(address, request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, 0))
    assert json.loads(system.body) == {
        "brokerAddr": A1,
        "topicList": ["DefaultCluster", "broker-a"],
    }
    delete = {"topic": "orders", "clusterName": "DefaultCluster"}
    assert (await call(address, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, 0, delete))).code == 0
    assert (await route(address))[0] == ResponseCode.TOPIC_NOT_EXIST
    await broker.close()


async def asyncio_sleep() -> None:
    import asyncio

    await asyncio.sleep(0.01)


async def test_every_answer_names_the_stable_master_address_a_slave_gets_the_master() -> None:
    # Issue 19 item 5: with --namesrv-master-address, topic routes, cluster info (mqadmin
    # clusterList) and the system topic list name the stable address as brokerId 0; the
    # answer to a slave's own registration still names the master itself (HA follows it).
    from brokergroup_controller.master_address import load_policy

    stable = "127.0.1.10:10911"
    groups = Groups()
    groups.groups[KEY] = ManagedGroup(KEY[0], KEY[1], 1, 2, {1: A1, 2: A2})
    server = NameServer(
        groups,
        auth=ServerAuth(secret_for=KEYS.get),
        master_address=load_policy(None, [f"{KEY[0]}/{KEY[1]}={stable}"]),
    )
    await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    # Brokers keep their connections: a registration leaves with its connection.
    brokers = [await RemotingClient.connect(address, credentials=GOOD) for _ in range(2)]
    try:
        body = json_body("orders", "x")
        first = await brokers[0].invoke(
            request(RequestCode.REGISTER_BROKER, 0, register_fields(A1, 1), body), 5
        )
        assert first.code == ResponseCode.SUCCESS and "masterAddr" not in first.fields()
        slave = await brokers[1].invoke(
            request(RequestCode.REGISTER_BROKER, 0, register_fields(A2, 2), body), 5
        )
        assert slave.fields().get("masterAddr") == A1, slave
        assert slave.fields().get("haServerAddr") == "127.0.0.10:10912", slave
        code, data = await route(address)
        assert code == ResponseCode.SUCCESS and data is not None
        assert data["brokerDatas"][0]["brokerAddrs"] == {"0": stable, "2": A2}  # type: ignore[index]
        info = await call(address, request(RequestCode.GET_BROKER_CLUSTER_INFO, 0))
        addrs = json.loads(info.body)["brokerAddrTable"]["broker-a"]["brokerAddrs"]
        assert addrs == {"0": stable, "2": A2}
        system = await call(address, request(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, 0))
        assert json.loads(system.body)["brokerAddr"] == stable
    finally:
        for broker in brokers:
            await broker.close()
        await server.close()


# ---------------------------------------------------------------- per-group key pairs

ROOT = "broker-credential-root-of-this-test"


def _pair(role: Role, broker_name: str = "broker-a") -> Credentials:
    pair = derive_rocketmq_pair(ROOT, role, "DefaultCluster", broker_name)
    return Credentials(pair.access_key, pair.secret_key)


async def test_a_broker_pair_registers_only_its_own_group_and_a_client_pair_only_reads() -> None:
    """DESIGN.md §11: a stolen broker pair cannot put addresses into another group's routes;
    a client pair reads routes and writes nothing. Refusals are NO_PERMISSION with the
    reason and change no registration."""
    groups = Groups()
    groups.groups[KEY] = ManagedGroup(KEY[0], KEY[1], 1, 1, {1: A1, 2: A2})
    keys = RocketMQKeys(RocketMQKeyPair(GOOD.access_key, GOOD.secret_key), ROOT)
    server = NameServer(groups, auth=name_server_auth(keys))
    await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    try:
        reg = request(
            RequestCode.REGISTER_BROKER, 0, register_fields(A1, 0), json_body("orders", "x")
        )
        # The registration lives as long as the broker's connection (kept open here).
        broker = await RemotingClient.connect(address, credentials=_pair(Role.BROKER))
        answer = await broker.invoke(reg, 5)
        assert answer.code == ResponseCode.SUCCESS, answer
        snapshot = [(r.broker_addr, r.broker_name) for r in server.registry]
        assert snapshot == [(A1, "broker-a")]

        forged = request(
            RequestCode.REGISTER_BROKER, 0, register_fields(A2, 2), json_body("orders", "stolen")
        )
        unregister = request(
            RequestCode.UNREGISTER_BROKER,
            0,
            {
                k: v
                for k, v in register_fields(A1, 1).items()
                if k in ("brokerName", "brokerAddr", "clusterName", "brokerId")
            },
        )
        delete = request(RequestCode.DELETE_TOPIC_IN_NAMESRV, 0, {"topic": "orders"})
        for credentials, cmd, why in (
            (_pair(Role.BROKER, "broker-b"), forged, "DefaultCluster/broker-a"),
            (_pair(Role.BROKER, "broker-b"), unregister, "DefaultCluster/broker-a"),
            (_pair(Role.CLIENT), forged, "may not make request 103"),
            (_pair(Role.CLIENT), delete, "may not make request"),
            # A broker pair deletes its own group's topics only, naming its cluster.
            (_pair(Role.BROKER), delete, "of its own group only"),
        ):
            answer = await call(address, cmd, credentials=credentials)
            assert (answer.code, why in (answer.remark or "")) == (
                ResponseCode.NO_PERMISSION,
                True,
            ), answer
        assert [(r.broker_addr, r.broker_name) for r in server.registry] == snapshot
        read = await call(
            address,
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": "orders"}),
            credentials=_pair(Role.CLIENT),
        )
        assert read.code == ResponseCode.SUCCESS
        assert [b["brokerAddrs"] for b in json.loads(read.body)["brokerDatas"]] == [{"0": A1}]
        await broker.close()
    finally:
        await server.close()


@pytest.mark.parametrize(
    ("principal", "code", "fields", "allowed"),
    [
        (Principal(Role.ADMIN), RequestCode.DELETE_TOPIC_IN_NAMESRV, {}, True),
        (Principal(Role.CLIENT, KEY), RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, True),
        (Principal(Role.CLIENT, KEY), RequestCode.QUERY_DATA_VERSION, {}, True),
        (
            Principal(Role.CLIENT, KEY),
            RequestCode.REGISTER_BROKER,
            dict(zip(("clusterName", "brokerName"), KEY, strict=True)),
            False,
        ),
        (
            Principal(Role.BROKER, KEY),
            RequestCode.REGISTER_BROKER,
            dict(zip(("clusterName", "brokerName"), KEY, strict=True)),
            True,
        ),
        (
            Principal(Role.BROKER, KEY),
            RequestCode.BROKER_HEARTBEAT,
            dict(zip(("clusterName", "brokerName"), KEY, strict=True)),
            True,
        ),
        (
            Principal(Role.BROKER, KEY),
            RequestCode.REGISTER_BROKER,
            {"clusterName": "Other", "brokerName": "broker-a"},
            False,
        ),
        (
            Principal(Role.BROKER, KEY),
            RequestCode.UNREGISTER_BROKER,
            {"brokerName": "broker-a"},
            False,
        ),
        (Principal(Role.BROKER, KEY), RequestCode.DELETE_TOPIC_IN_NAMESRV, {}, False),
        (Principal(Role.BROKER, KEY), 999_999, {}, False),
        (None, RequestCode.GET_ROUTEINFO_BY_TOPIC, {}, False),
    ],
)
def test_name_server_access_decision(
    principal: Principal | None, code: int, fields: dict[str, str], allowed: bool
) -> None:
    assert (namesrv_access.decide(principal, code, fields) is None) == allowed


@pytest.mark.parametrize("encoding", ["json", "compressed"])
async def test_a_registration_with_one_bad_topic_routes_every_other_topic(
    served: tuple[NameServer, Groups, str], caplog: pytest.LogCaptureFixture, encoding: str
) -> None:
    """Issue 31 item 3: one topic breaking the topic rule (a 121-character group's retry
    topic, a dot) is left out, said once per broker and topic; the registration and every
    other topic stand (before: the whole registration refused, every topic of the broker
    gone from the routes once its last good registration expired)."""
    server, _, address = served
    bad = ["%RETRY%" + "g" * 121, "orders.v1"]
    topics = ("orders", *bad, "payments", "TBW102")
    body = json_body(*topics) if encoding == "json" else compressed_body(*topics)
    fields = register_fields(A1, 0, compressed=str(encoding == "compressed").lower())
    broker = await RemotingClient.connect(address, credentials=GOOD)
    try:
        for _ in range(3):  # a broker registers every 30 s
            answer = await broker.invoke(request(RequestCode.REGISTER_BROKER, 0, fields, body), 5)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        held = server.registry.get("DefaultCluster", A1)
        assert held is not None and set(held.topics) == {"orders", "payments", "TBW102"}
        assert (await route(address, "payments"))[0] == ResponseCode.SUCCESS
    finally:
        await broker.close()
    said = [r.getMessage() for r in caplog.records if "breaks the topic rule" in r.getMessage()]
    assert len(said) == len(bad), said  # once per broker and topic, not per registration
    assert all(A1 in line for line in said)


async def test_name_server_under_enforcing_tls_serves_tls_clients_only(tmp_path: Path) -> None:
    """The controller's settings give the name server its TLS (--remoting-tls-mode,
    --tls-cert-file, --tls-key-file): a bad mode or a missing certificate stops start-up;
    under enforcing a plaintext client is closed unanswered and a TLS client is served."""
    material = make_material(tmp_path, datetime.datetime.now(datetime.UTC))
    base = {
        "node_id": 1,
        "peers": ("127.0.0.1:9880",),
        "data_dir": str(tmp_path),
        "insecure_no_auth": True,
    }
    with pytest.raises(ValueError, match="is not one of disabled, permissive, enforcing"):
        ControllerConfig(**base, remoting_tls_mode="strict").validate()  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a certificate and key file"):
        ControllerConfig(**base, remoting_tls_mode="enforcing").validate()  # type: ignore[arg-type]
    config = ControllerConfig(
        **base,  # type: ignore[arg-type]
        remoting_tls_mode="enforcing",
        tls_cert_file=str(material.cert_file),
        tls_key_file=str(material.key_file),
    )
    config.validate()
    server = NameServer(Groups(), auth=ServerAuth(secret_for=KEYS.get), tls=config.remoting_tls())
    await server.start("127.0.0.1", 0)
    address = f"127.0.0.1:{server.port}"
    ask = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": "Orders"})
    try:
        plain = await RemotingClient.connect(address, credentials=GOOD)
        try:
            with pytest.raises((ConnectionError, TimeoutError)):
                await plain.invoke(ask, timeout_s=5)
        finally:
            await plain.close()
        sealed = await RemotingClient.connect(
            address, credentials=GOOD, tls=client_context(material.ca_file)
        )
        try:
            answer = await sealed.invoke(ask, timeout_s=5)
        finally:
            await sealed.close()
    finally:
        await server.close()
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    assert "Orders" in (answer.remark or "")
