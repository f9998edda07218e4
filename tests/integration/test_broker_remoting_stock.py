"""A stock RocketMQ 5.3.1 client sends to and consumes from brokergroup's own brokers.

`brokergroup local up` (3 controllers with their name servers, 3 brokers): each broker
serves the RocketMQ remoting port (client port + 3) and registers it with every name
server; `local status --json` gives `namesrvAddress`, `accessKey`, `secretKey`. The stock
DefaultMQProducer (AclClientRPCHook with that pair) sends to a topic that does not exist yet
(auto-created on first send in the local runtime; tests/integration/namesrv_java/
NamesrvClient.java); the route names the master's remoting address as brokerId 0 and a send
signed with a wrong secret is refused. A stock DefaultLitePullConsumer receives every
message with its body (its pulls are LITE_PULL_MESSAGE). Skips, saying why, where Java or
the jars are missing.

Before the remoting port existed no broker registered with the name server, so the wait for
TBW102's route timed out; before LITE_PULL_MESSAGE was served the consumer received 0 of 20.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.local_harness import Runtime, local_runtime, wait_for

pytestmark = pytest.mark.integration

VERSION = "5.3.1"
JAVA_SOURCE = Path(__file__).with_name("namesrv_java") / "NamesrvClient.java"
TOPIC = "StockOnBrokergroup"
COUNT = 20


def rocketmq_home() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(
        os.environ.get(
            "BROKERGROUP_ROCKETMQ_HOME", Path(root) / "brokergroup" / "rocketmq" / VERSION
        )
    )


@dataclass
class Java:
    home: Path
    classes: Path
    work: Path

    def client(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "java",
                "-Xmx128m",
                f"-Duser.home={self.work}",
                "-Drocketmq.client.logUseSlf4j=false",
                "-cp",
                f"{self.classes}:{self.home / 'lib'}/*",
                "NamesrvClient",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Java:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed: the stock RocketMQ client cannot run")
    home = rocketmq_home()
    if not (home / "lib" / ".complete").exists():
        pytest.skip(f"RocketMQ {VERSION} client jars not cached: run tools/rocketmq/fetch.sh")
    work = tmp_path_factory.mktemp("broker-remoting-java")
    classes = work / "classes"
    subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", f"{home / 'lib'}/*", str(JAVA_SOURCE)],
        check=True,
        timeout=300,
    )
    return Java(home, classes, work)


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    with local_runtime(tmp_path / "local") as rt:
        yield rt


def route(namesrv: str, creds: Credentials, topic: str) -> dict[str, object] | None:
    async def ask() -> dict[str, object] | None:
        client = await RemotingClient.connect(namesrv, credentials=creds)
        try:
            answer = await client.invoke(
                request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": topic})
            )
        finally:
            await client.close()
        if answer.code != ResponseCode.SUCCESS:
            return None
        data: dict[str, object] = json.loads(answer.body)
        return data

    return asyncio.run(ask())


def up_and_wait(runtime: Runtime) -> tuple[str, str, str, dict[str, object]]:
    assert runtime.up().returncode == 0, runtime.logs()
    status = wait_for(
        "three brokers in the SyncStateSet",
        lambda: (
            ((s := runtime.status())["master"] is not None and len(s["syncStateSet"]) == 3 and s)
            or None
        ),
        60,
        runtime,
    )
    namesrv, ak, sk = status["namesrvAddress"], status["accessKey"], status["secretKey"]
    # The brokers registered their remoting ports; TBW102 lets a producer route a new topic.
    first = namesrv.split(";")[0]
    wait_for("TBW102 routed", lambda: route(first, Credentials(ak, sk), "TBW102"), 60, runtime)
    return namesrv, ak, sk, status


def test_stock_producer_sends_through_local_up(java: Java, runtime: Runtime) -> None:
    namesrv, ak, sk, status = up_and_wait(runtime)
    sent = java.client("produce", namesrv, ak, sk, TOPIC, str(COUNT))
    assert sent.returncode == 0, f"{sent.stdout}\n{sent.stderr}\n{runtime.logs()}"
    assert sent.stdout.count("SEND_OK") == COUNT

    # The route names the group's stable master address (the local runtime's forwarder to the
    # master's remoting port, client port + 3) as brokerId 0.
    data = route(namesrv.split(";")[0], Credentials(ak, sk), TOPIC)
    assert data is not None
    brokers = data["brokerDatas"]
    assert isinstance(brokers, list) and len(brokers) == 1
    master = status["master"]
    assert isinstance(master, dict)
    host = str(master["address"]).rsplit(":", 1)[0]
    assert brokers[0]["brokerAddrs"]["0"] == status["masterAddress"]
    assert wait_for(
        "the forwarder on the master",
        lambda: ((s := runtime.status())["masterTarget"] == f"{host}:{20911 + 3}" and s) or None,
        30,
        runtime,
    )

    # A wrong secret is refused (the name server and the broker port both check it).
    wrong = java.client("produce", namesrv, ak, sk + "x", TOPIC, "1")
    assert wrong.returncode != 0


def test_stock_lite_pull_consumer_receives_every_message(java: Java, runtime: Runtime) -> None:
    namesrv, ak, sk, _ = up_and_wait(runtime)
    sent = java.client("produce", namesrv, ak, sk, TOPIC, str(COUNT))
    assert sent.returncode == 0, f"{sent.stdout}\n{sent.stderr}\n{runtime.logs()}"
    got = java.client("consume", namesrv, ak, sk, TOPIC, "stock-group", str(COUNT), "60000")
    assert got.returncode == 0, f"{got.stdout}\n{got.stderr}\n{runtime.logs()}"
    received = sorted(line.split(" ", 1)[1] for line in got.stdout.splitlines()
                      if line.startswith("RECEIVED "))  # fmt: skip
    assert received == sorted(f"message-{i}" for i in range(COUNT))
