"""A stock RocketMQ 5.3.1 client through the chart's name server Service (issue 19 items 5-6,
cluster tier).

`helm install` of the chart (controllers with their name servers, the operator), one
BrokerGroup of the built-in broker with autoCreateTopicEnable. The stock client
(tools/rocketmq/StockClient.java, default client settings, AclClientRPCHook with the group's
client pair from the Secret `orders-rocketmq-client` the operator writes) runs in pods of the cluster, so it resolves Service names
through the pod's cluster DNS search path and reaches ClusterIPs through the Service proxy,
as a client application would. Its namesrvAddr is the chart's name server Service
`bg-brokergroup-namesrv.<ns>.svc:9876`.

1. routes through the name server Service name the group's master Service
   `orders.<ns>.svc:10914` as brokerId 0 and the slaves by their pod addresses;
2. a stock producer sends, an orderly push consumer receives every message whole (body,
   keys, tags, properties), where its SEND_OK put it, in queue order;
3. the master pod is deleted under load (one thread of sync sends): a SEND_OK comes once the
   new master is labelled (through the same master address: no route refresh), and a new
   consumer group reads every acknowledged message back with its body.
No timing is asserted: bench/stock_client_k8s.py measures deletion → first SEND_OK.

The client pods are processes of this machine (the process kubelet), so their command names
the compiled client and its jars by their host paths and writes its JSON lines to files of
the test's tmp_path. Skips, saying why, without Java or the cached client jars.
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request
from brokergroup_remoting.net import Credentials, RemotingClient
from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import apply_crds, wait_for
from tests.cluster.test_chart_in_cluster import (
    CHART,
    CONTROLLER_SELECTOR,
    RELEASE,
    InClusterEnv,
)
from tools.rocketmq import stock_client


def _controller_has_master_address_template() -> bool:
    from brokergroup_controller import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    return any(
        "--namesrv-master-address-template" in action.option_strings
        for sub in parser._subparsers._group_actions  # type: ignore[union-attr]
        for choice in sub.choices.values()  # type: ignore[union-attr]
        for action in choice._actions
    )


pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        not _controller_has_master_address_template(),
        reason="the controller has no --namesrv-master-address-template (the chart's default)",
    ),
]

GROUP = "orders"
NAMESRV_SERVICE = f"{RELEASE}-brokergroup-namesrv"
#: The built-in broker's remoting port (client port + 3), served by the master Service.
REMOTING_PORT = 10914
SEND_OK_PATIENCE_S = 120.0


class StockClientPods:
    """Runs StockClient modes as pods of the test namespace."""

    def __init__(self, env: InClusterEnv, client: stock_client.StockClient, work: Path) -> None:
        self.env, self.client, self.work = env, client, work

    def start(self, mode: str, **options: object) -> tuple[str, Path]:
        name = f"stock-{mode}-{uuid.uuid4().hex[:6]}"
        self.client.work.mkdir(parents=True, exist_ok=True)
        out = self.work / f"{name}.jsonl"
        command = shlex.join(self.client.command(mode, **options))
        err = shlex.quote(str(out.with_suffix(".err")))
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "stock-client"}},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "client",
                        "image": "brokergroup-rocketmq:5.3.3",
                        "command": [
                            "sh",
                            "-c",
                            f"exec {command} > {shlex.quote(str(out))} 2> {err}",
                        ],
                    }
                ],
            },
        }
        self.env.core.create_namespaced_pod(self.env.namespace, pod)
        return name, out

    def wait(self, name: str, out: Path, timeout_s: float = 300) -> list[dict[str, Any]]:
        def ended() -> str | None:
            phase = self.env.core.read_namespaced_pod(name, self.env.namespace).status.phase
            return phase if phase in ("Succeeded", "Failed") else None

        phase = wait_for(f"client pod {name} to end", ended, timeout_s, every_s=0.5)
        text = out.read_text() if out.exists() else ""
        lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
        if phase != "Succeeded" or not lines or "summary" not in lines[-1]:
            err = out.with_suffix(".err")
            tail = err.read_text()[-3000:] if err.exists() else ""
            raise AssertionError(f"client pod {name} {phase}:\n{text[-3000:]}\n{tail}")
        return lines

    def run(self, mode: str, timeout_s: float = 300, **options: object) -> list[dict[str, Any]]:
        return self.wait(*self.start(mode, **options), timeout_s=timeout_s)


@pytest.fixture
def env(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[InClusterEnv]:
    reason = stock_client.missing()
    if reason is not None:
        pytest.skip(reason)
    apply_crds(str(k8s_cluster.kubeconfig))
    namespace = f"stock-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", namespace)
    e = InClusterEnv(k8s_cluster, namespace, tmp_path)
    installed = k8s_cluster.helm(
        "install", RELEASE, str(CHART), "-n", namespace,
        "--set", f"operator.watchNamespaces={{{namespace}}}",
        "--set", "controller.storage.size=64Mi",
    )  # fmt: skip
    assert "STATUS: deployed" in installed.stdout, installed.stderr
    try:
        yield e
    finally:
        e.close()
        k8s_cluster.helm("uninstall", RELEASE, "-n", namespace, check=False)
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _credentials(env: InClusterEnv) -> Credentials:
    """The group's client pair, from the Secret an application mounts: `<bg>-rocketmq-client`
    (no broker credential in it), never the release's admin pair."""
    data = {
        k: base64.b64decode(v).decode()
        for k, v in env.core.read_namespaced_secret(
            f"{GROUP}-rocketmq-client", env.namespace
        ).data.items()
    }
    assert sorted(data) == ["accessKey", "rocketmq-credentials", "secretKey"], sorted(data)
    assert json.loads(data["rocketmq-credentials"]) == {
        "accessKey": data["accessKey"],
        "secretKey": data["secretKey"],
    }
    release = env.core.read_namespaced_secret(f"{RELEASE}-brokergroup-secrets", env.namespace)
    admin = json.loads(base64.b64decode(release.data["rocketmq-credentials"]))
    assert data["accessKey"] != admin["accessKey"], "the client Secret holds the admin pair"
    return Credentials(data["accessKey"], data["secretKey"])


async def _broker_addrs(namesrv: str, credentials: Credentials, topic: str) -> dict[str, str]:
    """brokerId → address in the route the name server Service gives for `topic`."""
    client = await RemotingClient.connect(namesrv, credentials=credentials)
    try:
        answer = await client.invoke(
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": topic}),
            timeout_s=5,
        )
    finally:
        await client.close()
    assert answer.code == ResponseCode.SUCCESS, answer
    (broker,) = json.loads(answer.body)["brokerDatas"]
    assert broker["brokerName"] == GROUP and broker["cluster"] != "", broker
    return {str(k): str(v) for k, v in broker["brokerAddrs"].items()}


def _route_or_none(namesrv: str, credentials: Credentials, topic: str) -> dict[str, str] | None:
    import asyncio

    try:
        addrs = asyncio.run(_broker_addrs(namesrv, credentials, topic))
    except (AssertionError, OSError):
        return None
    return addrs if len(addrs) == 3 else None


def _send_oks(log: Path) -> list[int]:
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return []
    return [int(p[1]) for p in (x.split("\t") for x in lines) if p[0] == "ok" and p[2] == "SEND_OK"]


def test_a_stock_client_follows_the_master_service_through_a_master_pod_deletion(
    env: InClusterEnv, tmp_path: Path
) -> None:
    wait_for("3 controllers with one leader", env.whole_quorum, 120)
    wait_for("3 controllers Ready", lambda: len(env.ready_pods(CONTROLLER_SELECTOR)) == 3, 120)
    env.create_group(GROUP, 3, config={"autoCreateTopicEnable": True})
    group = env.wait_available(GROUP, 3, timeout_s=240)
    credentials = _credentials(env)
    namesrv_name = f"{NAMESRV_SERVICE}.{env.namespace}.svc:9876"
    master_service = f"{GROUP}.{env.namespace}.svc:{REMOTING_PORT}"
    client = stock_client.StockClient(
        namesrv_name,
        tmp_path / "client",
        credentials.access_key,
        credentials.secret_key,
        deadline_ms=stock_client.TEST_DEADLINE_MS,
    )
    pods = StockClientPods(env, client, tmp_path)

    # 2. Send and receive through the name server Service and the master Service.
    sent_lines = pods.run("send", kind="sync", topic="K8sSends", count=40, run="k8s")
    assert sent_lines[-1]["sendOk"] == 40, sent_lines[-1]
    sent = sent_lines[:-1]

    # 1. The route names the master Service as brokerId 0, the slaves by pod address.
    namesrv_ip = env.core.read_namespaced_service(NAMESRV_SERVICE, env.namespace).spec.cluster_ip
    # Registration is periodic: the route of the new topic may take a heartbeat to appear.
    addrs = wait_for(
        "the route of K8sSends with a master and two slaves",
        lambda: _route_or_none(f"{namesrv_ip}:9876", credentials, "K8sSends"),
        60,
        every_s=1,
    )
    assert addrs["0"] == master_service, addrs
    pod_ips = {p.status.pod_ip for p in env.pods(GROUP)}
    slaves = {a.rsplit(":", 1)[0] for k, a in addrs.items() if k != "0"}
    assert slaves <= pod_ips and len(slaves) == 2, (addrs, pod_ips)

    received = pods.run(
        "consume", kind="orderly", topic="K8sSends", group="k8s-orderly", count=40, idle_s=60
    )[:-1]

    def content(m: dict[str, Any]) -> tuple[str, str, str, str]:
        return (m["body"], m["keys"], m["tags"], json.dumps(m["props"], sort_keys=True))

    assert sorted(map(content, received)) == sorted(map(content, sent))
    found = {m["body"]: (m["msgId"], m["queueId"], m["queueOffset"]) for m in received}
    for m in sent:
        assert found[m["body"]] == (m["msgId"], m["queueId"], m["queueOffset"]), m
    by_queue: dict[int, list[int]] = {}
    for m in received:
        by_queue.setdefault(m["queueId"], []).append(m["queueOffset"])
    for queue, offsets in by_queue.items():
        assert offsets == sorted(offsets), f"queue {queue} delivered out of order: {offsets}"

    # 3. The master pod is deleted under load.
    acks, log, stop = tmp_path / "fo.acks", tmp_path / "fo.log", tmp_path / "fo.stop"
    sender, sender_out = pods.start(
        "failover", topic="K8sFailover", acks=acks, log=log, stop=stop, seconds=900, run="fo"
    )
    try:
        wait_for("a SEND_OK before the deletion", lambda: _send_oks(log), SEND_OK_PATIENCE_S)
        env.fail_over(list(group["status"]["syncStateSet"]))
        # A SEND_OK once the new master carries the label can only be the new master's (one
        # logged between the deletion and then may be the old master's last).
        labelled_ms = int(time.time() * 1000)
        wait_for(
            "a SEND_OK from the new master",
            lambda: any(t > labelled_ms for t in _send_oks(log)),
            SEND_OK_PATIENCE_S,
        )
    finally:
        stop.touch()
    assert pods.wait(sender, sender_out, 120)[-1]["sent"] > 0
    env.wait_available(GROUP, 3, timeout_s=240)
    # A new consumer needs the topic's route: the new master registers the topic (which it
    # learnt as a slave) on its next periodic registration, up to 30 s after the failover.
    # The producer kept the route it had (brokerId 0 = the master Service) throughout.
    wait_for(
        "the route of K8sFailover after the failover",
        lambda: _route_or_none(f"{namesrv_ip}:9876", credentials, "K8sFailover"),
        90,
        every_s=1,
    )
    summary = pods.run("verify", topic="K8sFailover", acks=acks, idle_s=30, consumer="push")[-1]
    assert summary["acked"] > 0, summary
    assert (summary["lost"], summary["badBody"]) == (0, 0), summary
