"""The whole chart running in the cluster (issues 10 and 11): no process outside pods.

`helm install` puts the Raft controller StatefulSet (3 pods that find each
other through the headless Service's DNS names), and the operator Deployment
(2 replicas with kopf peering, in-cluster config from its ServiceAccount
token through the `kubernetes` Service) on the tier; then one BrokerGroup is
driven through the faults DESIGN.md §5 names:

1. the group comes up Available with one master; writes go through the
   client Service's ClusterIP;
2. the master pod is deleted: the controllers elect a new master from the
   SyncStateSet, the operator labels it, nothing acknowledged is lost;
3. the Raft leader's controller pod is deleted: it comes back on a new IP as
   the same member (same node id, same peer name, its journal from its
   PVC), the quorum is whole again, and the group still fails over;
4. the active operator replica is deleted: the standby takes over and labels
   the next master.
"""

from __future__ import annotations

import base64
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import OperatorEnv, acked_keys, apply_crds, wait_for

pytestmark = pytest.mark.cluster
CHART = Path(__file__).resolve().parents[2] / "charts" / "brokergroup"
RELEASE = "bg"
CONTROLLER = f"{RELEASE}-brokergroup-controller"
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"
CONTROLLER_SELECTOR = "app.kubernetes.io/component=controller"
GROUP_NAME = "orders"


class InClusterEnv(OperatorEnv):
    """OperatorEnv's reads and actions, with the chart's controllers and operators."""

    def __init__(self, cluster: K8sCluster, namespace: str, work: Path) -> None:
        super().__init__(str(cluster.kubeconfig), namespace, work, (), crash=cluster.crash_pod)
        self.cluster = cluster

    def ready_pods(self, selector: str) -> list[Any]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        return sorted(
            (
                p
                for p in pods
                if p.metadata.deletion_timestamp is None
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            ),
            key=lambda p: p.metadata.name,
        )

    def admin_token(self) -> str | None:
        """The release Secret's admin token, once the operator has created it; kept
        in the token file `produce`/`consume` pass (controller reads need one)."""
        try:
            data = self.core.read_namespaced_secret(
                f"{RELEASE}-brokergroup-secrets", self.namespace
            ).data
        except ApiException:
            return None
        token = base64.b64decode(data["api-token"]).decode()
        self.controllers.token_file.write_text(token)
        return token

    def raft(self, pod: Any) -> dict[str, Any] | None:
        token = self.admin_token()
        if token is None:
            return None
        try:
            url = f"http://{pod.status.pod_ip}:9878/v1/raft"
            request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(request, timeout=1) as response:
                return dict(json.loads(response.read()))
        except OSError:
            return None

    def whole_quorum(self) -> dict[str, dict[str, Any]] | None:
        """Pod name → /v1/raft when all three agree on a leader and see every member."""
        pods = self.ready_pods(CONTROLLER_SELECTOR)
        views = {p.metadata.name: self.raft(p) for p in pods}
        if len(views) != 3 or any(v is None for v in views.values()):
            return None
        leaders = {v["leader"] for v in views.values() if v}
        connected = all(all(m["connected"] for m in v["members"]) for v in views.values() if v)
        return views if len(leaders) == 1 and None not in leaders and connected else None  # type: ignore[return-value]

    def client_address(self) -> str:
        ip = self.core.read_namespaced_service(GROUP_NAME, self.namespace).spec.cluster_ip
        self.group_of_address[f"{ip}:10911"] = GROUP_NAME  # its client pair: client_key_args
        return f"{ip}:10911"

    def write(self, prefix: str, count: int = 200) -> list[str]:
        acks = self.work / f"acks-{prefix}.jsonl"
        summary = self.produce(self.client_address(), "orders-topic", count, prefix, acks)
        assert summary.get("failed") == 0 and summary.get("acked") == count, summary
        return acked_keys(acks)

    def assert_nothing_lost(self, acked: list[str]) -> None:
        read = self.consume_keys(self.client_address(), "orders-topic")
        missing = sorted(set(acked) - set(read))
        assert missing == [], f"{len(missing)} acknowledged keys lost, e.g. {missing[:5]}"

    def fail_over(self, sss_before: list[int]) -> Any:
        """Delete the master pod; the next master (from the SyncStateSet) once labelled."""
        old = self.master_pod(GROUP_NAME)
        assert old is not None
        self.delete_pod(old.metadata.name)

        def new_master() -> Any:
            m = self.master_pod(GROUP_NAME)
            return m if m is not None and m.metadata.name != old.metadata.name else None

        master = wait_for("a new master labelled", new_master, 90)
        broker_id = int(master.metadata.labels["brokergroup.io/broker-id"])
        assert broker_id in sss_before, (broker_id, sss_before)
        return master


@pytest.fixture
def env(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[InClusterEnv]:
    apply_crds(str(k8s_cluster.kubeconfig))
    namespace = f"chart-{uuid.uuid4().hex[:6]}"
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


def test_the_chart_runs_a_group_through_pod_faults(env: InClusterEnv) -> None:
    views = wait_for("3 controllers with one leader", env.whole_quorum, 120)
    assert sorted(v["nodeId"] for v in views.values()) == [1, 2, 3]
    peers = {name: v["self"] for name, v in views.items()}
    node_ids = {name: v["nodeId"] for name, v in views.items()}
    for name, peer in peers.items():  # stable DNS names, never pod IPs
        assert peer.startswith(f"{name}.{CONTROLLER}."), peers
    wait_for("2 operator replicas Ready", lambda: len(env.ready_pods(OPERATOR_SELECTOR)) == 2, 90)

    # 1. Up, with writes through the client Service's ClusterIP.
    env.create_group(GROUP_NAME, 3)
    group = env.wait_available(GROUP_NAME, 3, timeout_s=180)
    acked = env.write("a")

    # 2. The master pod dies: a new master from the SyncStateSet, labelled.
    env.fail_over(list(group["status"]["syncStateSet"]))
    group = env.wait_available(GROUP_NAME, 3, timeout_s=120)
    acked += env.write("b")
    env.assert_nothing_lost(acked)

    # 3. The Raft leader's pod dies: back on a new IP as the same member. The leader of
    # now, not of step 1: a stall of the loaded machine may have moved it since, or left
    # its pod briefly not ready (CI run 49: StopIteration on step 1's leader).
    def leader_now() -> tuple[dict[str, dict[str, Any]], Any] | None:
        found = env.whole_quorum()
        if not found:
            return None
        peer = next(iter(found.values()))["leader"]
        pod = next((p for p in env.ready_pods(CONTROLLER_SELECTOR)
                    if peers[p.metadata.name] == peer), None)  # fmt: skip
        return (found, pod) if pod is not None else None

    views, leader_pod = wait_for("the Raft leader's pod ready", leader_now, 120)
    leader_peer = peers[leader_pod.metadata.name]
    index_before = views[leader_pod.metadata.name]["commitIndex"]
    env.delete_pod(leader_pod.metadata.name)

    def rejoined() -> dict[str, dict[str, Any]] | None:
        found = env.whole_quorum()
        if not found:
            return None
        pod = next(p for p in env.ready_pods(CONTROLLER_SELECTOR)
                   if p.metadata.name == leader_pod.metadata.name)  # fmt: skip
        return found if pod.metadata.uid != leader_pod.metadata.uid else None

    views = wait_for(f"{leader_pod.metadata.name} rejoined", rejoined, 120)
    back = next(p for p in env.ready_pods(CONTROLLER_SELECTOR)
                if p.metadata.name == leader_pod.metadata.name)  # fmt: skip
    assert back.status.pod_ip != leader_pod.status.pod_ip
    mine = views[back.metadata.name]
    assert (mine["nodeId"], mine["self"]) == (node_ids[back.metadata.name], leader_peer)
    assert mine["commitIndex"] >= index_before, (mine, index_before)
    env.fail_over(list(group["status"]["syncStateSet"]))
    group = env.wait_available(GROUP_NAME, 3, timeout_s=120)
    acked += env.write("c")

    # 4. The active operator replica dies: the standby labels the next master.
    operators = env.ready_pods(OPERATOR_SELECTOR)
    peering = client.CustomObjectsApi(env.api).get_namespaced_custom_object(
        "kopf.dev", "v1", env.namespace, "kopfpeerings", RELEASE + "-brokergroup"
    )
    # The chart sets kopf's POD_ID, so peer ids are pod names; the highest priority is active.
    peers_seen = (peering.get("status") or {}).items()
    active = max(peers_seen, key=lambda kv: kv[1].get("priority", 0))[0]
    assert sorted(name for name, _ in peers_seen) == [p.metadata.name for p in operators]
    victim = next(p for p in operators if p.metadata.name == active)
    env.delete_pod(victim.metadata.name)
    env.fail_over(list(group["status"]["syncStateSet"]))
    env.wait_available(GROUP_NAME, 3, timeout_s=120)
    acked += env.write("d")
    env.assert_nothing_lost(acked)
