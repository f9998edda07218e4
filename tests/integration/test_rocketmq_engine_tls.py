"""TLS of `local up --engine rocketmq --set local.tls=enforcing` (issue 36; docs/security.md
"engine rocketmq, locally"): the stock RocketMQ 5.3 brokers and the stock proxy on the local CA.

One runtime for the module: three controllers, two stock brokers (fewer JVMs), the stock proxy,
TLS enforcing. The stock processes take RocketMQ's own TlsSystemConfig (tls.server.mode,
tls.config.file naming the runtime's certificate and CA, tls.enable on their own connections).

- A stock RocketMQ 5.3.1 Java client started with `-Dtls.enable=true`, verifying every server
  against the runtime's CA (`tls.test.mode.enable=false`, `tls.client.authServer=true`,
  `tls.client.trustCertPath`), sends and consumes every message whole.
- On each stock broker's remoting port and the stock proxy's remoting port a plaintext
  remoting client gets no answer, and a TLS client verifying the CA is answered (so the
  ports serve the local CA's certificate, not RocketMQ's self-signed test one).
- The official Python SDK (rocketmq-python-client, `tls_enable=True`, trusting the CA through
  GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) sends and receives through the stock proxy's gRPC port,
  which the proxy only reaches the brokers through over TLS (enforcing brokers refuse
  anything else).

Stock HA replication stays plaintext (RocketMQ 5.3 has no TLS there; docs/security.md).
On the code before this, `local up --engine rocketmq --set local.tls=enforcing` was refused
("local.tls needs --engine builtin"): the fixture's `up` failed. Skips, saying why, without
Java, the cached jars or the SDK. Addresses and ports of its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.rocketmq_stock import find_home
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from brokergroup_remoting.tls import client_context
from tests.integration.local_harness import Runtime, local_runtime, wait_for
from tests.integration.stock_client_harness import require_stock_client
from tools.rocketmq.stock_client import TEST_DEADLINE_MS, StockClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

PROXY_REMOTING_PORT = 33080
SETTINGS = (
    "local.tls=enforcing",
    "local.controllerHosts=127.0.1.141,127.0.1.142,127.0.1.143",
    "local.brokerFirstHost=127.0.1.150",
    "local.brokerLastHost=127.0.1.159",
    "local.masterEndpointHost=127.0.1.140",
    "local.controllerApiPort=33878",
    "local.controllerRaftPort=33880",
    "local.controllerRemotingPort=33879",
    "local.namesrvPort=33876",
    "local.brokerClientPort=34911",
    "local.masterEndpointPort=34900",
    "local.proxyGrpcPort=33081",
    f"local.proxyRemotingPort={PROXY_REMOTING_PORT}",
    "local.upWaitTimeoutMs=200000",
)
TOPIC = "StockTlsT"
COUNT = 20

#: Send COUNT messages through the gRPC endpoint with TLS, then receive with a new group until
#: every one of them came back (a message the Java test sent to the topic may come too).
SDK_PROGRAM = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer
from rocketmq import SimpleConsumer
endpoint, ak, sk, topic, group, marker, count = sys.argv[1:8]
conf = ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=10)
producer = Producer(conf, (topic,), tls_enable=True)
producer.startup()
sent = []
try:
    for i in range(int(count)):
        m = Message()
        m.topic = topic
        m.body = f"{marker}-{i}".encode()
        m.keys = f"{marker}-key-{i}"
        sent.append({"id": producer.send(m).message_id, "body": m.body.decode()})
finally:
    producer.shutdown()
consumer = SimpleConsumer(conf, group, {topic: FilterExpression("*")}, 5, tls_enable=True)
consumer.startup()
got = []
mine = {m["id"] for m in sent}
try:
    deadline = time.time() + 90
    while len(mine & {m["id"] for m in got}) < len(sent) and time.time() < deadline:
        for m in consumer.receive(32, 20) or []:
            got.append({"id": m.message_id, "body": m.body.decode()})
            consumer.ack(m)
finally:
    consumer.shutdown()
print(json.dumps({"sent": sent, "got": got}))
"""


@dataclass
class Cluster:
    runtime: Runtime
    classes: Path
    work: Path


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    classes = require_stock_client()
    root = tmp_path_factory.mktemp("stock-tls")
    with local_runtime(root / "local", SETTINGS) as runtime:
        up = runtime.up(brokers=2, engine="rocketmq")
        assert up.returncode == 0, f"local up failed:\n{up.stdout}\n{up.stderr}\n{runtime.logs()}"
        wait_for("both brokers in sync", lambda: _two_in_sync(runtime), 180, runtime)
        yield Cluster(runtime, classes, root)


def _two_in_sync(runtime: Runtime) -> dict[str, Any] | None:
    status = runtime.status()
    brokers = [b for b in status.get("brokers") or [] if b.get("address")]
    if len(brokers) != 2 or status.get("master") is None:
        return None
    if len(status.get("syncStateSet") or []) < 2:
        return None
    return status


def _pair(status: dict[str, Any]) -> tuple[str, str]:
    return str(status["accessKey"]), str(status["secretKey"])


def _verifying_client(cluster: Cluster, status: dict[str, Any]) -> StockClient:
    """The stock Java client with TLS on, verifying each server against the runtime's CA
    (TlsSystemConfig; without tls.test.mode.enable=false it would trust any server)."""
    return StockClient(
        status["namesrvAddress"], cluster.work / "client", *_pair(status), cluster.classes,
        deadline_ms=TEST_DEADLINE_MS,
        jvm_options=(
            "-Dtls.enable=true", "-Dtls.test.mode.enable=false", "-Dtls.client.authServer=true",
            f"-Dtls.client.trustCertPath={status['caFile']}",
        ),
    )  # fmt: skip


def messages(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if "summary" not in x]


def test_status_names_the_mode_and_the_ca(rt: Cluster) -> None:
    status = rt.runtime.status()
    assert status["tlsMode"] == "enforcing"
    assert Path(status["caFile"]).read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


def test_a_verifying_java_client_sends_and_consumes_through_the_stock_brokers(
    rt: Cluster,
) -> None:
    client = _verifying_client(rt, rt.runtime.status())
    # aclSend: a budget per send of our own (RocketMQ's 3 s is short for a first send that
    # opens three TLS sessions and creates the topic on a loaded 2-core machine); no retries.
    sent = client.run("aclSend", topic=TOPIC, count=COUNT, run="tls", send_timeout_ms=30_000)
    assert sent[-1] == {"summary": True, "ok": COUNT, "refused": 0}, sent
    got = messages(
        client.run(
            "consume", kind="concurrent", topic=TOPIC, group="tls-push", count=COUNT, idle_s=40
        )
    )
    assert sorted(base64.b64decode(m["body"]).decode() for m in got) == sorted(
        m["body"] for m in sent[:-1]
    )


async def _heartbeat(address: str, pair: tuple[str, str], ca: Path | None) -> int:
    """A producer heartbeat over TLS verifying `ca`, or plaintext (ca None): the answer's code."""
    tls = None if ca is None else client_context(ca)
    client = await RemotingClient.connect(
        address, credentials=Credentials(*pair), tls=tls, connect_timeout_s=10
    )
    try:
        body = json.dumps({"clientID": "tls-probe", "producerDataSet": [{"groupName": "p"}]})
        answer = await client.invoke(request(RequestCode.HEART_BEAT, 0, {}, body.encode()), 10)
        return answer.code
    finally:
        await client.close()


def _plaintext_answer(address: str, pair: tuple[str, str]) -> str:
    """What a plaintext remoting client gets: an answer code, or why it got none."""
    try:
        return f"answered {asyncio.run(_heartbeat(address, pair, None))}"
    except (OSError, TimeoutError, EOFError) as exc:
        return f"no answer: {type(exc).__name__}"


def test_plaintext_is_refused_on_the_stock_brokers_and_the_proxy_remoting_ports(
    rt: Cluster,
) -> None:
    status = rt.runtime.status()
    ca = Path(status["caFile"])
    pair = _pair(status)
    brokers = [str(b["address"]) for b in status["brokers"] if b.get("address")]
    proxy = f"{status['grpcEndpoint'].rsplit(':', 1)[0]}:{PROXY_REMOTING_PORT}"
    assert len(brokers) == 2
    for address in (*brokers, proxy):
        # The proxy opens its ports once the group has a master: wait for a TLS answer.
        def tls_answered(a: str = address) -> dict[str, Any] | None:
            code = _tls_answer(a, pair, ca)
            return {"code": code} if code == ResponseCode.SUCCESS else None

        wait_for(f"a TLS answer from {address}", tls_answered, 120, rt.runtime)
        assert _plaintext_answer(address, pair).startswith("no answer"), address


def _tls_answer(address: str, pair: tuple[str, str], ca: Path) -> int | None:
    try:
        return asyncio.run(_heartbeat(address, pair, ca))
    except (OSError, TimeoutError, EOFError):
        return None


def test_the_grpc_sdk_sends_and_receives_through_the_stock_proxy_over_tls(rt: Cluster) -> None:
    pytest.importorskip("rocketmq", reason="rocketmq-python-client is not installed")
    status = rt.runtime.status()
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": status["caFile"]}
    attempts = iter(range(1000))

    def roundtrip() -> dict[str, Any] | None:
        n = next(attempts)
        done = subprocess.run(
            [sys.executable, "-c", SDK_PROGRAM, status["grpcEndpoint"], *_pair(status), TOPIC,
             f"tls-simple-{n}", f"grpc{n}", str(COUNT)],
            capture_output=True, text=True, timeout=200, check=False, env=env,
        )  # fmt: skip
        if done.returncode != 0:  # the proxy still starting or learning the route: again
            print(done.stderr[-2000:])
            return None
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    result = wait_for("the SDK's round trip through the proxy over TLS", roundtrip, 240, rt.runtime)
    assert len(result["sent"]) == COUNT
    by_id = {m["id"]: m["body"] for m in result["got"]}
    assert [by_id.get(m["id"]) for m in result["sent"]] == [m["body"] for m in result["sent"]]
