"""Engine rocketmq's stock proxy in a real cluster (issue 35 item 3, cluster tier).

One namespace, three controllers (with their name servers) and the operator as processes
(as in test_operator_engines.py), one BrokerGroup `stock` with `spec.engine: rocketmq` and
its stock RocketMQ 5.3 proxy enabled: the operator's ConfigMap, Service and Deployment
`stock-proxy` (operator/brokergroup_operator/rocketmq_proxy.py); the kube-controller-manager
turns the Deployment into a pod, which the process kubelet runs as a JVM from the cached
Maven Central jars (the RocketMQ image's /opt/rocketmq, tests/cluster/tier/paths.py), with the
launcher's `sh -c` writing rmq-proxy.json from the ConfigMap and the group's client pair.

1. the proxy's pod becomes Ready (its gRPC port answers) behind the Service `stock-proxy`;
2. a topic is created with mqadmin (the proxy routes only topics the name servers know);
3. the official Python SDK (tests/cluster/grpc_sdk_app.py) in pods, with the group's client
   pair from the Secret `stock-rocketmq-client` and the endpoint `stock-proxy.<ns>.svc:8081`,
   sends messages and receives them with a SimpleConsumer, compared field by field (message
   id, body, tag, keys, user properties), each delivered once.

The group runs `spec.tls: {mode: enforcing}` (issue 36) and the release's name servers and
controller remoting port serve TLS (`--remoting-tls-mode permissive`, a certificate of the
cluster CA the test brings, as test_operator_controller_tls.py; the operator told so by
BROKERGROUP_CONTROLLER_TLS), so the stock brokers and the proxy run `-Dtls.enable=true`: every
link of the proxy (name servers, brokers, its own gRPC and remoting ports) is TLS, and the
brokers take nothing else. The SDK opens TLS trusting the group's bundle (`stock-tls-trust`)
and grpc verifies the proxy's certificate for `stock-proxy.<ns>.svc`, so a send proves the
proxy serves the operator-issued certificate and that it names the proxy's Service (before
d1988a2 the proxy served RocketMQ's self-signed test certificate, and the group's
certificate did not name it). On the proxy's remoting port a plaintext request is closed
unanswered, the stock Java client with `-Dtls.enable=true` sends to the topic and without
it fails on its first request (RemotingSendRequestException: the proxy closed it). The topic is created over TLS (UPDATE_AND_CREATE_TOPIC on the master:
mqadmin would speak plaintext).

With the group on `permissive` (the module before) the plaintext client was served by the
proxy: the plaintext frame is answered and the test fails there.

Not FIFO: the topic carries no message.type (a 5.3.3 slave cannot sync a topic with
attributes, docs/rocketmq-compatibility.md), and the stock proxy's route for such a topic
says its queues accept NORMAL messages once its caches know the topic, so the SDK refuses a
FIFO send itself ("current message type not match with queue accept message types"); one of
two runs got its FIFO sends through before that and received them with `__SHARDINGKEY` among
the user properties.

Four JVMs (three brokers, the proxy) share the machine with the control plane: small heaps.
Skips, saying why, without Java or the cached stock jars (with the proxy's jar).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.rocketmq_stock import find_home, proxy_missing
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.certificates import issue, make_ca
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from brokergroup_remoting.tls import client_context
from tests.cluster.operator_env import OperatorEnv, answer_to_plaintext, apply_crds, wait_for
from tests.cluster.test_grpc_sdk_in_cluster import SdkPods, content
from tests.cluster.test_operator_scenarios import _kubeconfig, operator_env_in_namespace
from tests.integration.stock_client_harness import require_stock_client
from tests.integration.test_rocketmq_engine_users import _send as acl_send
from tools.rocketmq.stock_client import TEST_DEADLINE_MS, StockClient

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

GROUP = "stock"
STOCK = {
    "engine": "rocketmq",
    "tls": {"mode": "enforcing"},
    "rocketmq": {
        "heapSize": "256m",
        "mappedFileSizeCommitLog": 16 << 20,
        "proxy": {"enabled": True, "replicas": 1, "heapSize": "256m"},
    },
    # A JVM on a loaded 2-core machine can pause longer than the 2 s default.
    "ha": {"minInSyncReplicas": 2, "heartbeatTimeoutMs": 5000},
}
PROXY_SELECTOR = "app.kubernetes.io/instance=stock,app.kubernetes.io/component=proxy"
CA_SECRET = "brokergroup-cluster-ca"


class NamesrvTlsEnv(OperatorEnv):
    """The release's name servers and controller remoting port on TLS (permissive: the
    test's own reads stay plaintext) with a certificate of a cluster CA the test brings in
    the cluster CA Secret; the operator issues the group's certificates from it and knows
    the name servers serve TLS, so a stock JVM's one `tls.enable` can be on."""

    def start(self, operators: int = 1) -> None:
        now = datetime.datetime.now(datetime.UTC)
        # Not a CA of 30 days: the group's leaf cannot outlive it, so it would be due for
        # renewal (renewalDays 30) at every pass and the group would roll without end.
        ca = make_ca("test cluster CA", now=now, valid_days=3650)
        leaf = issue(ca, "controllers", list(self.controllers.hosts), now=now, valid_days=365)
        files = {"ca.crt": ca.cert_pem, "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}
        for name, data in files.items():
            (self.work / name).write_bytes(data)
            (self.work / name).chmod(0o600)
        self.controllers.extra_args = (
            "--tls-cert-file", str(self.work / "tls.crt"),
            "--tls-key-file", str(self.work / "tls.key"),
            "--tls-ca-file", str(self.work / "ca.crt"), "--remoting-tls-mode", "permissive",
        )  # fmt: skip
        bundle = ca.cert_pem.decode()
        self.core.create_namespaced_secret(
            self.namespace,
            {
                "metadata": {"name": CA_SECRET},
                "stringData": {
                    "ca.crt": bundle,
                    "ca.key": ca.key_pem.decode(),
                    "ca-bundle.crt": bundle,
                },
            },
        )
        super().start(operators)

    def operator_env(self) -> dict[str, str]:
        return {
            **super().operator_env(),
            "BROKERGROUP_CLUSTER_CA_SECRET": f"{self.namespace}/{CA_SECRET}",
            "BROKERGROUP_CLUSTER_CA_MANAGED": "false",
            "BROKERGROUP_CONTROLLER_TLS": "true",
            "BROKERGROUP_TLS_CHECK_SECONDS": "1",
        }


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OperatorEnv]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    if (why := proxy_missing(home)) is not None:
        pytest.skip(why)
    kubeconfig = _kubeconfig(request)
    apply_crds(kubeconfig)
    with operator_env_in_namespace(request, tmp_path, kubeconfig, "rmqp", NamesrvTlsEnv) as e:
        yield e


def create_topic(env: OperatorEnv, topic: str) -> None:
    """UPDATE_AND_CREATE_TOPIC (its CreateTopicRequestHeader) on the group's master over TLS
    (enforcing: mqadmin's plaintext would be closed); the broker registers it with the name
    servers. No attributes (a 5.3.3 slave cannot sync a topic carrying them)."""
    master = env.master_pod(GROUP)
    assert master is not None
    pair = json.loads(env.controllers.rocketmq_credentials_file.read_text())
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4",
              "writeQueueNums": "4", "perm": "6", "topicFilterType": "SINGLE_TAG",
              "topicSysFlag": "0", "order": "false"}  # fmt: skip

    async def once() -> tuple[int, str]:
        client = await RemotingClient.connect(
            f"{master.status.pod_ip}:10911",
            credentials=Credentials(pair["accessKey"], pair["secretKey"]),
            tls=client_context(None),
        )
        try:
            answer = await client.invoke(
                request(RequestCode.UPDATE_AND_CREATE_TOPIC, 0, fields), 10
            )
            return int(answer.code), str(answer.remark or "")
        finally:
            await client.close()

    code, remark = asyncio.run(once())
    assert code == ResponseCode.SUCCESS, (code, remark)


def plaintext_answer(address: str) -> bytes:
    """What a port answers a plaintext GET_ROUTEINFO_BY_TOPIC frame with (b"": closed)."""
    header = json.dumps({"code": int(RequestCode.GET_ROUTEINFO_BY_TOPIC), "flag": 0,
                         "language": "JAVA", "opaque": 1, "serializeTypeCurrentRPC": "JSON",
                         "version": 453, "extFields": {"topic": "ProxyStock"}}).encode()  # fmt: skip
    return answer_to_plaintext(address, struct.pack(">II", 4 + len(header), len(header)) + header)


def ready_proxy_pods(env: OperatorEnv) -> list[Any]:
    pods = env.core.list_namespaced_pod(env.namespace, label_selector=PROXY_SELECTOR).items
    return [
        p
        for p in pods
        if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def test_the_python_sdk_sends_and_receives_through_the_groups_stock_proxy(
    env: OperatorEnv,
) -> None:
    env.create_group(GROUP, 3, **STOCK)
    env.wait_available(GROUP, 3, 300)
    service = env.core.read_namespaced_service(f"{GROUP}-proxy", env.namespace)
    assert {p.name: p.port for p in service.spec.ports} == {"grpc": 8081, "remoting": 8080}
    (proxy,) = wait_for("the stock proxy's pod Ready", lambda: ready_proxy_pods(env), 240, 1)
    # Not the group's pods: its selectors (master Service, PDB, role labels) never see it.
    assert "brokergroup.io/group" not in proxy.metadata.labels, proxy.metadata.labels
    create_topic(env, "ProxySdk")
    create_topic(env, "ProxyStock")

    # The proxy's remoting port: a plaintext frame closed unanswered, a plaintext stock client
    # sends nothing, the same client with TLS sends (trusting any server, RocketMQ's default).
    remoting = f"{proxy.status.pod_ip}:8080"
    assert plaintext_answer(remoting) == b""
    classes = require_stock_client()
    pair = json.loads(env.client_key_file(GROUP).read_text())  # type: ignore[union-attr]

    def stock(tls: bool) -> StockClient:
        name = "tls" if tls else "plain"
        return StockClient(remoting, env.work / f"stock-{name}", pair["accessKey"],
                           pair["secretKey"], classes,
                           ("-Dtls.enable=true",) if tls else (),
                           deadline_ms=TEST_DEADLINE_MS)  # fmt: skip

    # The proxy learns the topic's route through its caches: a first send may be refused.
    served: list[dict[str, Any]] = []

    def tls_sent() -> bool:
        nonlocal served
        try:
            served = acl_send(stock(True), "ProxyStock", "tls", count=3)
        except RuntimeError as failed:
            print(f"TLS stock client not yet: {str(failed)[-300:]}")
            return False
        return served[-1]["ok"] == 3

    wait_for("the TLS stock client's sends through the proxy", tls_sent, 240, 2)
    run = served[0]["body"].rsplit("-", 1)[0]
    assert [line["body"] for line in served[:-1]] == [f"{run}-{i}" for i in range(3)]
    # Now that the proxy routes the topic: the same client without TLS sends nothing.
    # Its route request is written in plaintext and the proxy closes the connection: the
    # client's own RemotingSendRequestException ends the run (no send reaches a broker).
    with pytest.raises(RuntimeError) as refused:
        stock(False).run("aclSend", topic="ProxyStock", count=2, run="plain",
                         send_timeout_ms=5000, timeout_s=180)  # fmt: skip
    assert f"RemotingSendRequestException: send request to </{remoting}> failed" in str(
        refused.value
    ), str(refused.value)[-2000:]

    bundle = env.work / "stock-ca.crt"
    trust = env.core.read_namespaced_config_map(f"{GROUP}-tls-trust", env.namespace)
    bundle.write_text(trust.data["ca.crt"])
    pods = SdkPods(env, env.work, f"{GROUP}-rocketmq-client",
                   extra_env={"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(bundle)})  # fmt: skip
    endpoint = f"{GROUP}-proxy.{env.namespace}.svc:8081"
    # The proxy learns the topic's route from the name servers through its caches: the first
    # send may be refused; the app fails and the next pod tries again.
    sent: list[dict[str, Any]] = []

    def first_send() -> bool:
        nonlocal sent
        try:
            sent = pods.python("send", endpoint, timeout_s=180, topic="ProxySdk", count=10,
                               run="xn")[:-1]  # fmt: skip
        except AssertionError as failed:
            print(f"send through the proxy not yet: {str(failed)[-300:]}")
            return False
        return True

    wait_for("a first SDK send through the stock proxy", first_send, 300, 2)
    sent += pods.python("send", endpoint, topic="ProxySdk", count=9, run="xm")[:-1]
    got = pods.python("receive", endpoint, topic="ProxySdk", group="ProxySdkGroup", count=19,
                      timeout_s=180)[:-1]  # fmt: skip
    assert sorted(map(content, got)) == sorted(map(content, sent))
    assert [line["attempt"] for line in got] == [1] * 19
