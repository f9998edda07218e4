"""Per-group RocketMQ key pairs on a real `brokergroup local up` (DESIGN.md §11, issue 19
item 4; docs/security.md, docs/local.md).

The runtime derives its group's BROKER pair (DIR/broker-keys.json: the brokers sign with it)
and CLIENT pair (DIR/client-keys.json: `local status --json` accessKey/secretKey) from the
broker credential root; the release pair (DIR/namesrv-keys.json, `adminAccessKey`) stays the
controllers' admin pair.

Built-in brokers: the client pair reads a route from the name server and sends through the
master's remoting port; the admin pair is refused by the broker (it holds only its group's
pairs); the client pair may not REGISTER_BROKER on the name server, and the broker pair may
not register under another brokerName (NO_PERMISSION, the route unchanged).

Stock brokers (`--engine rocketmq`, whose innerClientAuthenticationCredentials is the broker
pair): they register with the controllers and the name servers and get a master and a full
SyncStateSet with that pair alone; on the controller remoting port the client pair is refused
CONTROLLER_ELECT_MASTER and CLEAN_BROKER_DATA (NO_PERMISSION), and the master is unchanged.
Skips, saying why, without Java or the stock server jars.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.remoting_front.namesrv_link import (
    Registration,
    register_body,
    register_fields,
)
from brokergroup_cli.local.rocketmq_stock import find_home
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import Runtime, local_runtime, wait_for
from tests.integration.test_remoting_not_master import send_fields

pytestmark = pytest.mark.integration

REMOTING_PORT = 20911 + 3  # the built-in broker's (client port + 3)
CONTROLLER_REMOTING = [f"127.0.1.{i}:19879" for i in (1, 2, 3)]
TOPIC = "GroupKeysT"
C, B = "DefaultCluster", "broker-a"


async def ask(address: str, signer: Credentials, cmd: RemotingCommand) -> RemotingCommand:
    client = await RemotingClient.connect(address, credentials=signer)
    try:
        return await client.invoke(cmd, timeout_s=10)
    finally:
        await client.close()


def pair_of(data: dict[str, Any], prefix: str = "") -> Credentials:
    access, secret = ("adminAccessKey", "adminSecretKey") if prefix else ("accessKey", "secretKey")
    return Credentials(str(data[access]), str(data[secret]))


def key_file(runtime: Runtime, name: str) -> Credentials:
    keys = json.loads((runtime.root / name).read_text())
    return Credentials(keys["accessKey"], keys["secretKey"])


def route_of(topic: str) -> RemotingCommand:
    return request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": topic})


def registration(broker_name: str, broker_addr: str) -> RemotingCommand:
    reg = Registration(C, broker_name, 7, broker_addr, "127.0.0.99:1", True, 4)
    body = register_body(reg, {}, 1, int(time.time() * 1000))
    return request(RequestCode.REGISTER_BROKER, 0, register_fields(reg, body), body)


async def cluster_brokers(namesrv: str, signer: Credentials) -> set[str]:
    info = await ask(namesrv, signer, request(RequestCode.GET_BROKER_CLUSTER_INFO, 0))
    assert info.code == ResponseCode.SUCCESS, info
    return set(json.loads(info.body)["brokerAddrTable"])


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local") as rt:
        yield rt


async def builtin_scenario(runtime: Runtime, status: dict[str, Any]) -> None:
    client, admin = pair_of(status), pair_of(status, "admin")
    broker = key_file(runtime, "broker-keys.json")
    assert client == key_file(runtime, "client-keys.json")
    assert len({client.access_key, admin.access_key, broker.access_key}) == 3
    namesrv = status["namesrvAddress"].split(";")[0]

    # The client pair reads routes (the brokers registered TBW102 with their broker pair).
    for _ in range(100):
        if (await ask(namesrv, client, route_of("TBW102"))).code == ResponseCode.SUCCESS:
            break
        await asyncio.sleep(0.2)
    assert (await ask(namesrv, client, route_of("TBW102"))).code == ResponseCode.SUCCESS

    # ... and sends through the master's remoting port; the release pair is not the broker's.
    master = f"{status['master']['address'].rsplit(':', 1)[0]}:{REMOTING_PORT}"
    send = request(RequestCode.SEND_MESSAGE_V2, 0, send_fields(TOPIC), b"signed by a client")
    sent = await ask(master, client, send)
    assert sent.code == ResponseCode.SUCCESS, sent
    refused = await ask(master, admin, send)
    assert refused.code == ResponseCode.NO_PERMISSION, refused
    assert refused.remark == "the AccessKey is not known"

    # Registrations: never with the client pair, the broker pair only for its own group.
    before = await cluster_brokers(namesrv, client)
    answer = await ask(namesrv, client, registration(B, "127.0.0.99:20914"))
    assert answer.code == ResponseCode.NO_PERMISSION, answer
    assert "may not make request 103 on the name server" in (answer.remark or "")
    answer = await ask(namesrv, broker, registration("broker-z", "127.0.0.99:20914"))
    assert answer.code == ResponseCode.NO_PERMISSION, answer
    assert "registers only its own group" in (answer.remark or "")
    assert await cluster_brokers(namesrv, client) == before
    assert "broker-z" not in before


def test_builtin_brokers_take_the_groups_client_pair_and_nothing_else(runtime: Runtime) -> None:
    up = runtime.up(brokers=2)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"

    def forwarding() -> dict[str, Any] | None:
        s = runtime.status()
        return s if s["master"] is not None and s.get("masterTarget") else None

    status = wait_for("a master whose stable address forwards", forwarding, 60, runtime)
    asyncio.run(builtin_scenario(runtime, status))


# ---------------------------------------------------------------- stock brokers


@pytest.fixture
def stock_runtime(tmp_path: Path) -> Iterator[Runtime]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    settings = ("local.controllerRemotingPort=19879", "local.upWaitTimeoutMs=200000")
    with local_runtime(tmp_path / "local", settings) as rt:
        yield rt


async def controller_scenario(status: dict[str, Any]) -> None:
    client = pair_of(status)
    leader = CONTROLLER_REMOTING[status["controllerLeader"]["nodeId"] - 1]
    master = status["master"]["brokerId"]
    other = next(b["brokerId"] for b in status["brokers"] if b["brokerId"] != master)
    elect = request(RequestCode.CONTROLLER_ELECT_MASTER, 0, {
        "clusterName": C, "brokerName": B, "brokerId": str(other), "designateElect": "true",
        "invokeTime": str(int(time.time() * 1000)),
    })  # fmt: skip
    clean = request(RequestCode.CLEAN_BROKER_DATA, 0, {
        "clusterName": C, "brokerName": B, "brokerControllerIdsToClean": str(other),
        "isCleanLivingBroker": "true",
    })  # fmt: skip
    for cmd in (elect, clean):
        answer = await ask(leader, client, cmd)
        assert answer.code == ResponseCode.NO_PERMISSION, answer
        assert answer.remark, answer


def test_stock_brokers_run_on_their_broker_pair_and_clients_may_not_elect(
    stock_runtime: Runtime,
) -> None:
    rt = stock_runtime
    up = rt.up(brokers=2, engine="rocketmq")
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{rt.logs()}"

    def in_sync() -> dict[str, Any] | None:
        s = rt.status()
        return s if s["master"] is not None and len(s["syncStateSet"]) == 2 else None

    status = wait_for(
        "a master and both stock brokers in the SyncStateSet (registered with the broker pair)",
        in_sync,
        180,
        rt,
    )
    conf = (rt.root / "brokers" / "0" / "broker.conf").read_text()
    broker = key_file(rt, "broker-keys.json")
    assert f'"accessKey":"{broker.access_key}"' in conf
    assert status["adminAccessKey"] not in conf
    asyncio.run(controller_scenario(status))
    after = rt.status()
    assert after["master"]["brokerId"] == status["master"]["brokerId"]
    assert after["masterEpoch"] == status["masterEpoch"]
