"""Stock RocketMQ 5.3.1 broker, mqadmin and clients against the controllers' name server.

Three real controller processes (127.0.7.1-3) serve the name server on port 9876 with a key
pair. Two stock RocketMQ 5.3.1 brokers (org.apache.rocketmq.broker.BrokerStartup from the
jars `tools/rocketmq/fetch.sh server` caches; plain brokerId-0 masters signing with
innerClientAuthenticationCredentials, one registering JSON bodies, one zlib-compressed ones)
register with all three. Then the stock tools and
client work through our routes: `mqadmin clusterList`, `updateTopic`, `topicRoute` and
`topicList`, and a DefaultMQProducer sends and a DefaultLitePullConsumer receives every
message (tests/integration/namesrv_java/NamesrvClient.java, AclClientRPCHook). An mqadmin
without keys is refused. Skips, saying why, where Java or the jars are missing.

Before the name server existed the same producer failed: nothing listened on 9876
("connect to 127.0.7.1:9876 failed").
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.integration.controller_harness import ControllerCluster

pytestmark = pytest.mark.integration

VERSION = "5.3.1"
ACCESS_KEY = "nsStockAccessKey"
SECRET_KEY = "nsStockSecretKey-123"
BLOCK = 7
NAMESRV = ";".join(f"127.0.{BLOCK}.{i}:9876" for i in (1, 2, 3))
BROKER_HOST = f"127.0.{BLOCK}.20"
JAVA_SOURCE = Path(__file__).with_name("namesrv_java") / "NamesrvClient.java"


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

    def mqadmin(self, *args: str, keys: bool = True) -> str:
        """`mqadmin ARGS -n NAMESRV` (tools.yml in its ROCKETMQ_HOME holds the key pair)."""
        home = self.work / ("mqadmin-home" if keys else "mqadmin-home-nokeys")
        (home / "conf").mkdir(parents=True, exist_ok=True)
        if keys:
            (home / "conf" / "tools.yml").write_text(
                f"accessKey: {ACCESS_KEY}\nsecretKey: {SECRET_KEY}\n"
            )
        result = subprocess.run(
            [
                "java",
                "-Xmx128m",
                f"-Drocketmq.home.dir={home}",
                f"-Duser.home={self.work}",
                "-cp",
                f"{self.home / 'server' / 'lib'}/*",
                "org.apache.rocketmq.tools.command.MQAdminStartup",
                *args,
                "-n",
                NAMESRV,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        return result.stdout + result.stderr

    def client(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "java",
                "-Xmx128m",
                f"-Duser.home={self.work}",
                "-cp",
                f"{self.classes}:{self.home / 'lib'}/*",
                "NamesrvClient",
                args[0],
                NAMESRV,
                ACCESS_KEY,
                SECRET_KEY,
                *args[1:],
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
            pytest.skip(f"{tool} is not installed: the stock RocketMQ broker and client cannot run")
    home = rocketmq_home()
    for lib in (home / "lib", home / "server" / "lib"):
        if not (lib / ".complete").exists():
            pytest.skip(
                f"RocketMQ {VERSION} jars not cached in {lib}: run tools/rocketmq/fetch.sh server"
            )
    work = tmp_path_factory.mktemp("namesrv-java")
    classes = work / "classes"
    subprocess.run(
        ["javac", "-nowarn", "-d", str(classes), "-cp", f"{home / 'lib'}/*", str(JAVA_SOURCE)],
        check=True,
        timeout=300,
    )
    return Java(home, classes, work)


class KeyedControllers(ControllerCluster):
    """Controller nodes whose name servers check signatures with the test's key pair."""

    def __init__(self, base_dir: Path) -> None:
        super().__init__(base_dir, block=BLOCK)
        self.key_file = self.base_dir / "namesrv-keys.json"
        self.key_file.write_text(json.dumps({"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}))

    def command(self, node_id: int) -> list[str]:
        return [*super().command(node_id), "--namesrv-key-file", str(self.key_file)]


@pytest.fixture(scope="module")
def controllers(tmp_path_factory: pytest.TempPathFactory, java: Java) -> Iterator[KeyedControllers]:
    cluster = KeyedControllers(tmp_path_factory.mktemp("controllers"))
    with cluster:
        cluster.start_all()
        cluster.wait_for_leader()
        yield cluster


def free_broker_port(start: int) -> int:
    """A listenPort whose fast port (-2) and HA port (+1) are free too."""
    for port in range(start, start + 8000, 100):
        try:
            for p in (port - 2, port, port + 1):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", p))
            return port
        except OSError:
            continue
    pytest.skip(f"no free broker port in {start - 2}..{start + 8000}")


async def namesrv_call(address: str, code: int, fields: dict[str, str] | None = None) -> bytes:
    client = await RemotingClient.connect(address, credentials=Credentials(ACCESS_KEY, SECRET_KEY))
    try:
        answer = await client.invoke(request(code, 0, fields), timeout_s=5)
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, answer
    return answer.body


@dataclass
class StockBroker:
    address: str
    log: Path


def launch_broker(java: Java, name: str, port: int, *, compressed: bool) -> subprocess.Popen[bytes]:
    work = java.work / name
    (work / "home" / "conf").mkdir(parents=True)
    conf = work / "broker.conf"
    credentials = json.dumps({"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY})
    conf.write_text(
        "\n".join(
            [
                "brokerClusterName=DefaultCluster",
                f"brokerName={name}",
                "brokerId=0",
                f"listenPort={port}",
                f"namesrvAddr={NAMESRV}",
                f"brokerIP1={BROKER_HOST}",
                f"brokerIP2={BROKER_HOST}",
                f"storePathRootDir={work / 'store'}",
                f"storePathCommitLog={work / 'store' / 'commitlog'}",
                "mappedFileSizeCommitLog=67108864",
                "autoCreateTopicEnable=true",
                "diskMaxUsedSpaceRatio=98",
                # RegisterBrokerBody as JSON (the default) or as the zlib stream.
                f"compressedRegister={'true' if compressed else 'false'}",
                # The broker signs its name server requests with these (BrokerOuterAPI); its
                # auth module needs a metadata store to hold them as its inner user.
                f"innerClientAuthenticationCredentials={credentials}",
                "authenticationMetadataProvider="
                "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
                f"authConfigPath={work / 'auth'}",
            ]
        )
        + "\n"
    )
    with (work / "broker.out").open("wb") as out:
        return subprocess.Popen(
            [
                "java",
                "-Xms256m",
                "-Xmx256m",
                f"-Duser.home={work}",
                f"-Drocketmq.home.dir={work / 'home'}",
                "-cp",
                f"{java.home / 'server' / 'lib'}/*",
                "org.apache.rocketmq.broker.BrokerStartup",
                "-c",
                str(conf),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


@pytest.fixture(scope="module")
def stock_brokers(java: Java, controllers: KeyedControllers) -> Iterator[dict[str, StockBroker]]:
    """stock-a registers JSON bodies, stock-z zlib-compressed ones."""
    port_a = free_broker_port(31911)
    port_z = free_broker_port(port_a + 100)
    brokers = {
        "stock-a": StockBroker(f"{BROKER_HOST}:{port_a}", java.work / "stock-a" / "broker.out"),
        "stock-z": StockBroker(f"{BROKER_HOST}:{port_z}", java.work / "stock-z" / "broker.out"),
    }
    procs = [
        launch_broker(java, "stock-a", port_a, compressed=False),
        launch_broker(java, "stock-z", port_z, compressed=True),
    ]
    try:
        deadline = time.monotonic() + 180
        registered = False
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            # A broker registers with the three nodes concurrently: wait for every node.
            tables = [
                json.loads(
                    asyncio.run(
                        namesrv_call(f"127.0.{BLOCK}.{n}:9876", RequestCode.GET_BROKER_CLUSTER_INFO)
                    )
                )["brokerAddrTable"]
                for n in (1, 2, 3)
            ]
            if all(set(table) == set(brokers) for table in tables):
                registered = True
                break
            time.sleep(1)
        if not registered:
            tails = "\n".join(b.log.read_text(errors="replace")[-3000:] for b in brokers.values())
            pytest.fail(
                f"the stock brokers never registered ({[p.poll() for p in procs]}):\n{tails}"
            )
        yield brokers
    finally:
        # SIGKILL: nothing here checks a broker's graceful shutdown, which (unregistering from
        # three name servers, draining its executors) took most of this module's 15 s teardown.
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait(10)


def test_the_stock_brokers_register_with_every_node(
    stock_brokers: dict[str, StockBroker],
) -> None:
    for node in (1, 2, 3):
        info = json.loads(
            asyncio.run(
                namesrv_call(f"127.0.{BLOCK}.{node}:9876", RequestCode.GET_BROKER_CLUSTER_INFO)
            )
        )
        assert info["clusterAddrTable"] == {"DefaultCluster": ["stock-a", "stock-z"]}
        for name, broker in stock_brokers.items():
            assert info["brokerAddrTable"][name]["brokerAddrs"] == {"0": broker.address}


def mqadmin_route(java: Java, topic: str, brokers: int) -> dict[str, Any]:
    """`mqadmin topicRoute` once `brokers` groups serve `topic`: each broker announces a new
    topic with its next registration, so wait for them (bounded)."""
    deadline = time.monotonic() + 60
    text = ""
    while time.monotonic() < deadline:
        text = java.mqadmin("topicRoute", "-t", topic)
        if text.count('"brokerName"') >= 2 * brokers:  # one in brokerDatas, one in queueDatas
            break
        time.sleep(1)
    start = text.index("{")
    # fastjson prints Long map keys bare ({0:"addr"}); quote them to read it as JSON.
    body = re.sub(r"([{,]\s*)(\d+)(\s*:)", r'\1"\2"\3', text[start : text.rindex("}") + 1])
    route: dict[str, Any] = json.loads(body)
    return route


def test_mqadmin_cluster_list_update_topic_topic_route_and_topic_list(
    java: Java, stock_brokers: dict[str, StockBroker]
) -> None:
    clusters = java.mqadmin("clusterList")
    for name, broker in stock_brokers.items():
        assert name in clusters and broker.address in clusters, clusters

    created = java.mqadmin(
        "updateTopic", "-c", "DefaultCluster", "-t", "NsOrders", "-r", "4", "-w", "4"
    )
    for broker in stock_brokers.values():
        assert f"create topic to {broker.address} success" in created, created

    route = mqadmin_route(java, "NsOrders", brokers=2)
    assert sorted(route["brokerDatas"], key=lambda d: d["brokerName"]) == [
        {
            "brokerAddrs": {"0": broker.address},
            "brokerName": name,
            "cluster": "DefaultCluster",
            "enableActingMaster": False,
        }
        for name, broker in sorted(stock_brokers.items())
    ]
    assert sorted(
        (q["brokerName"], q["readQueueNums"], q["writeQueueNums"]) for q in route["queueDatas"]
    ) == [("stock-a", 4, 4), ("stock-z", 4, 4)]
    topics = java.mqadmin("topicList").split()
    assert "NsOrders" in topics and "TBW102" in topics


def test_a_stock_producer_and_consumer_route_through_the_name_server(
    java: Java, stock_brokers: dict[str, StockBroker]
) -> None:
    created = java.mqadmin(
        "updateTopic", "-c", "DefaultCluster", "-t", "NsFlow", "-r", "2", "-w", "2"
    )
    assert created.count("success") == len(stock_brokers), created
    mqadmin_route(java, "NsFlow", brokers=len(stock_brokers))
    sent = java.client("produce", "NsFlow", "20")
    assert sent.returncode == 0, sent.stdout + sent.stderr
    bodies = [
        line.split(" ", 2)[2] for line in sent.stdout.splitlines() if line.startswith("SEND_OK")
    ]
    assert bodies == [f"message-{i}" for i in range(20)]
    received = java.client("consume", "NsFlow", "ns-flow-group", "20", "60000")
    assert received.returncode == 0, received.stdout + received.stderr
    got = [
        line.split(" ", 1)[1]
        for line in received.stdout.splitlines()
        if line.startswith("RECEIVED")
    ]
    assert sorted(got) == sorted(bodies)


def test_mqadmin_without_keys_is_refused(java: Java, stock_brokers: dict[str, StockBroker]) -> None:
    out = java.mqadmin("topicList", keys=False)
    assert "TBW102" not in out.split()
    assert "NO_PERMISSION" in out or "CODE: 16" in out, out
