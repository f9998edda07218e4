"""Topic and subscription-group metadata across a failover, and the stock mqadmin commands
that change it, against `brokergroup local up` (issue 33 item 3 and item 6's updateSubGroup,
deleteSubGroup, deleteTopic).

Stock mqadmin 5.3.1, signed with the group's broker pair (metadata writes are admin rights),
creates a topic (3 queues: not the 4 a send would auto-create) and a subscription group
(retryMaxTimes 3, consumeFromMinEnable true) on the master. Each slave's GET /v1/metadata
shows both once the 1 s sync ran; then the master is SIGKILLed before any send. The new
master answers both in GET_ALL_TOPIC_CONFIG / GET_ALL_SUBSCRIPTIONGROUP_CONFIG (asked on the
stable master address), the name server routes the topic with its 3 queues, and a stock
producer sends to it. Then mqadmin deleteSubGroup and deleteTopic take them away: from the
master's tables and from the name server's routes.

On the old code (08e4c59) the topic lived only in the master's memory and groups were not
served: the new master's GET_ALL_TOPIC_CONFIG lacks the topic and the route is gone
("No topic route info"), and updateSubGroup fails with "request code 200 not supported".
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from brokergroup_broker.core.broker_settings import http_address_of
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import wait_for
from tests.integration.stock_client_harness import StockRuntime, stock_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

TOPIC, GROUP = "KeptTopic", "kept-group"


def broker_pair(rt: StockRuntime) -> StockRuntime:
    keys = json.loads((rt.runtime.root / "broker-keys.json").read_text())
    return replace(rt, access_key=keys["accessKey"], secret_key=keys["secretKey"],
                   work=rt.work / "broker-pair")  # fmt: skip


async def _ask(rt: StockRuntime, admin: StockRuntime, code: int) -> dict[str, Any]:
    """`code` (a GET_ALL_* read) on the current master through its stable address."""
    client = await RemotingClient.connect(
        rt.status()["masterAddress"], credentials=Credentials(admin.access_key, admin.secret_key)
    )
    try:
        answer: RemotingCommand = await client.invoke(request(code, 0, {}), 10.0)
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, answer
    body: dict[str, Any] = json.loads(answer.body)
    return body


def ask(rt: StockRuntime, admin: StockRuntime, code: int) -> dict[str, Any]:
    return asyncio.run(_ask(rt, admin, code))


def slave_tables(rt: StockRuntime) -> list[dict[str, Any] | None]:
    """Every slave's GET /v1/metadata (None: not served), with the group's broker credential."""
    token = (rt.runtime.root / "broker-credential").read_text().strip()
    status = rt.status()
    master = status["master"]["address"]

    async def read(address: str) -> dict[str, Any] | None:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            url = f"http://{http_address_of(address)}/v1/metadata"
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
                return await response.json() if response.status == 200 else None

    slaves = [b["address"] for b in status["brokers"] if b.get("alive") and b["address"] != master]
    return [asyncio.run(read(a)) for a in slaves]


def route_queues(rt: StockRuntime, topic: str) -> str:
    out = rt.mqadmin("topicRoute", "-t", topic)
    found = re.findall(r'"readQueueNums"\s*:\s*(\d+)', out)
    return found[0] if found else out


def test_topic_and_group_survive_a_master_kill_before_any_send_then_mqadmin_deletes_them(
    tmp_path: Path,
) -> None:
    with stock_runtime(tmp_path) as rt:
        admin = broker_pair(rt)
        out = admin.mqadmin("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "3",
                            "-w", "3")  # fmt: skip
        assert "success" in out, out
        out = admin.mqadmin("updateSubGroup", "-c", "DefaultCluster", "-g", GROUP, "-r", "3",
                            "-m", "true")  # fmt: skip
        assert "create subscription group to" in out and "success" in out, out

        def replicated() -> dict[str, Any] | None:
            tables = slave_tables(rt)
            ok = tables and all(
                t is not None
                and TOPIC in t["topics"]["topicConfigTable"]
                and GROUP in t["subscriptionGroups"]["subscriptionGroupTable"]
                for t in tables
            )
            return {"tables": tables} if ok else None

        wait_for("both on every slave", replicated, 30.0, rt.runtime)
        epoch = rt.status()["masterEpoch"]
        rt.kill_master()  # before any send to the topic
        rt.wait_healthy(min_epoch=epoch + 1)

        topics = ask(rt, admin, RequestCode.GET_ALL_TOPIC_CONFIG)["topicConfigTable"]
        assert (topics[TOPIC]["readQueueNums"], topics[TOPIC]["writeQueueNums"]) == (3, 3)
        groups = ask(rt, admin, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        kept = groups["subscriptionGroupTable"][GROUP]
        assert (kept["retryMaxTimes"], kept["consumeFromMinEnable"]) == (3, True), kept
        assert route_queues(rt, TOPIC) == "3"  # from the name server, as created
        summary = rt.client.run("send", kind="sync", topic=TOPIC, count=5)[-1]
        assert summary["sendOk"] == 5, summary
        assert route_queues(rt, TOPIC) == "3"  # not auto-created again

        out = admin.mqadmin("deleteSubGroup", "-c", "DefaultCluster", "-g", GROUP)
        assert f"delete subscription group [{GROUP}]" in out and "success" in out, out
        groups = ask(rt, admin, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert GROUP not in groups["subscriptionGroupTable"]
        out = admin.mqadmin("deleteTopic", "-c", "DefaultCluster", "-t", TOPIC)
        assert "from NameServer success" in out, out
        topics = ask(rt, admin, RequestCode.GET_ALL_TOPIC_CONFIG)["topicConfigTable"]
        assert TOPIC not in topics
        assert "No topic route info" in rt.mqadmin("topicRoute", "-t", TOPIC)
