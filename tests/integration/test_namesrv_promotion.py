"""A promoted master registers with the name servers at once (RocketMQ's changeToMaster →
registerBrokerAll), local runtime with real brokers and name servers.

A topic is created on the master by a send through its remoting port; the slaves learn it as
the record replicates. Then every name server forgets the topic (DELETE_TOPIC_IN_NAMESRV: a
name server that missed the master's registration, restarted or unreachable then, holds the
same). Every broker's periodic registration (`registerNameServerPeriodMs`) is set to 115 s,
just under the name servers' 120 s route expiry (the most a broker accepts), and the
supervisor's restart delay to ten minutes, so nothing but the role change registers the topic
again while the scenario runs. After `local kill master` and the election, the topic's route
must name the group within a bounded wait (brokerId 0 is the new master). Waits are bounded
(liveness); no timing is asserted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import Runtime, local_runtime, wait_for
from tests.integration.test_remoting_not_master import send_fields

pytestmark = pytest.mark.integration

REMOTING_PORT = 20911 + 3
TOPIC = "PromotedTopic"
SLOW = (
    "broker.registerNameServerPeriodMs=115000",
    "local.restartInitialDelayMs=600000",
    "local.restartMaxDelayMs=600000",
)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local", SLOW) as rt:
        yield rt


async def ask(address: str, credentials: Credentials, cmd: RemotingCommand) -> RemotingCommand:
    client = await RemotingClient.connect(address, credentials=credentials)
    try:
        return await client.invoke(cmd, timeout_s=10)
    finally:
        await client.close()


async def route(namesrv: str, credentials: Credentials) -> RemotingCommand:
    return await ask(
        namesrv, credentials, request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": TOPIC})
    )


async def topics_of(broker: str, credentials: Credentials) -> set[str]:
    answer = await ask(broker, credentials, request(RequestCode.GET_ALL_TOPIC_CONFIG, 0))
    assert answer.code == ResponseCode.SUCCESS, answer
    return set(json.loads(answer.body)["topicConfigTable"])


async def scenario(runtime: Runtime, status: dict[str, Any]) -> None:
    credentials = Credentials(status["accessKey"], status["secretKey"])
    namesrv = status["namesrvAddress"].split(";")[0]
    remoting = {
        b["brokerId"]: f"{b['address'].rsplit(':', 1)[0]}:{REMOTING_PORT}"
        for b in status["brokers"]
    }
    master_id = status["master"]["brokerId"]

    sent = await ask(
        remoting[master_id],
        credentials,
        request(RequestCode.SEND_MESSAGE_V2, 0, send_fields(TOPIC), b"before the failover"),
    )
    assert sent.code == ResponseCode.SUCCESS, sent
    # The master registered the new topic at once; the slaves hold its record (bounded wait).
    for _ in range(100):
        if (await route(namesrv, credentials)).code == ResponseCode.SUCCESS:
            break
        await asyncio.sleep(0.1)
    assert (await route(namesrv, credentials)).code == ResponseCode.SUCCESS
    for broker_id, address in remoting.items():
        for _ in range(100):
            if broker_id == master_id or TOPIC in await topics_of(address, credentials):
                break
            await asyncio.sleep(0.1)
        assert broker_id == master_id or TOPIC in await topics_of(address, credentials)
    # Forgetting a topic is a name-server write: the release's admin pair, not a client's.
    admin = Credentials(status["adminAccessKey"], status["adminSecretKey"])
    for node in status["namesrvAddress"].split(";"):
        forget = request(RequestCode.DELETE_TOPIC_IN_NAMESRV, 0, {"topic": TOPIC})
        assert (await ask(node, admin, forget)).code == ResponseCode.SUCCESS
        assert (await route(node, credentials)).code == ResponseCode.TOPIC_NOT_EXIST

    killed = runtime.run("kill", "master")
    assert killed.returncode == 0, killed.stderr
    promoted = wait_for(
        "a new master",
        lambda: (
            s
            if (s := runtime.status())["master"] is not None
            and s["master"]["brokerId"] != master_id
            else None
        ),
        60,
        runtime,
    )
    new_master = promoted["master"]["brokerId"]

    answer = await route(namesrv, credentials)
    for _ in range(100):  # bounded: the promotion registers at once, the period is 115 s
        if answer.code == ResponseCode.SUCCESS:
            break
        await asyncio.sleep(0.2)
        answer = await route(namesrv, credentials)
    assert answer.code == ResponseCode.SUCCESS, answer
    addrs = json.loads(answer.body)["brokerDatas"][0]["brokerAddrs"]
    assert "0" in addrs and str(new_master) not in addrs, addrs


def test_a_promoted_master_registers_its_topics_at_once(runtime: Runtime) -> None:
    up = runtime.up(brokers=3)
    assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{runtime.logs()}"
    status = wait_for(
        "three brokers in the SyncStateSet",
        lambda: (
            ((s := runtime.status())["master"] is not None and len(s["syncStateSet"]) == 3 and s)
            or None
        ),
        60,
        runtime,
    )
    asyncio.run(scenario(runtime, status))
