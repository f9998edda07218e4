"""TLS on the local runtime's RocketMQ addresses (`--set local.tls=enforcing`, issue 36
item 1), through the stock RocketMQ 5.3.1 Java client.

One runtime for the module, every remoting address enforcing TLS: the controllers' name
servers, the stable master address (the forwarder ends the client's session and reads its
frames), the brokers' remoting ports (the forwarder reaches the master over TLS, the brokers
register with the name servers over TLS). `local status --json` names the mode and the CA.
A stock client started with `-Dtls.enable=true` (RocketMQ's own switch; its default trusts
any server certificate) sends and consumes every message whole and in queue order; the same
client without it finds no route; a Python client that verifies the name server's
certificate against the CA and its address is answered.

Against a runtime without TLS the TLS client fails (no TLS session), and against one whose
forwarder or brokers do not speak TLS, it cannot send.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from brokergroup_remoting.tls import client_context
from tests.integration.stock_client_harness import StockRuntime, stock_runtime
from tools.rocketmq.stock_client import StockClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOPIC = "TlsOrders"


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockRuntime]:
    with stock_runtime(tmp_path_factory.mktemp("tls"), ("local.tls=enforcing",)) as runtime:
        yield runtime


@pytest.fixture(scope="module")
def sealed_client(rt: StockRuntime) -> StockClient:
    return replace(rt.client, jvm_options=("-Dtls.enable=true",))


def messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if "summary" not in x]


def test_status_names_the_mode_and_the_ca(rt: StockRuntime) -> None:
    status = rt.status()
    assert status["tlsMode"] == "enforcing"
    assert Path(status["caFile"]).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


async def test_a_verifying_client_is_answered_by_the_name_server(rt: StockRuntime) -> None:
    status = rt.status()
    client = await RemotingClient.connect(
        status["namesrvAddress"].split(";")[0],
        credentials=Credentials(status["accessKey"], status["secretKey"]),
        tls=client_context(Path(status["caFile"])),  # host name checked against the SANs
    )
    try:
        answer = await client.invoke(
            request(RequestCode.GET_BROKER_CLUSTER_INFO, 0, None), timeout_s=10
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS
    assert "broker-a" in json.loads(answer.body or b"{}").get("brokerAddrTable", {})


def test_a_tls_client_sends_and_consumes_every_message_in_queue_order(
    sealed_client: StockClient,
) -> None:
    sent = messages(sealed_client.run("send", kind="sync", topic=TOPIC, count=30, run="tls"))
    assert [m["status"] for m in sent] == ["SEND_OK"] * 30
    got = messages(
        sealed_client.run(
            "consume", kind="orderly", topic=TOPIC, group="tls-orderly", count=30, idle_s=30
        )
    )
    assert sorted((m["body"], m["msgId"]) for m in got) == sorted(
        (m["body"], m["msgId"]) for m in sent
    )
    by_queue: dict[int, list[int]] = {}
    for m in got:
        by_queue.setdefault(m["queueId"], []).append(m["queueOffset"])
        assert base64.b64decode(m["body"]).startswith(m["keys"].removeprefix("key-").encode())
    assert all(offsets == sorted(offsets) for offsets in by_queue.values()), by_queue


def test_a_plaintext_client_finds_no_route(rt: StockRuntime) -> None:
    try:
        lines = rt.client.run("send", kind="sync", topic=TOPIC, count=1, run="plain", timeout_s=120)
    except RuntimeError as exc:  # the client gives up: its name server request got no answer
        reasons = ("No route info", "connect to", "send request to")
        assert any(reason in str(exc) for reason in reasons), str(exc)[-2000:]
    else:
        assert [m["status"] for m in messages(lines)] != ["SEND_OK"], lines
