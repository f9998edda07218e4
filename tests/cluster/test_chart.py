"""The Helm chart charts/brokergroup (issue 11 item 3, DESIGN.md §6, §11).

- `helm lint` passes; the chart's crds/ are byte-for-byte the repo's crds/.
- `helm template` with several value sets renders what the values say: the
  operator's RBAC is exactly the list in docs/kubernetes.md, pods run
  non-root with a read-only root filesystem, the Secret holds the three
  secrets (or is not rendered with existingSecret), the controller peers are
  stable DNS names for every replica, the Raft port is reachable only from
  controller pods; values.schema.json refuses bad values.
- On the cluster tier (a real API server): `helm install`, then `helm
  upgrade` keeps the generated secrets, `helm uninstall` removes the
  workloads and keeps the Secret (its resource policy).
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import K8sCluster
from tests.cluster.tier.paths import ROOT, k8s_bin_dir, missing_reason

pytestmark = pytest.mark.cluster

CHART = ROOT / "charts" / "brokergroup"

EXPECTED_RULES = [
    {"apiGroups": ["brokergroup.io"], "resources": ["brokergroups"],
     "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": ["brokergroup.io"], "resources": ["brokergroups/status"],
     "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "watch", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["services", "configmaps"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
     "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["rel-brokergroup-secrets"],
     "verbs": ["get"]},
    {"apiGroups": ["apps"], "resources": ["deployments"],
     "resourceNames": ["rel-brokergroup-operator"], "verbs": ["get", "delete"]},
    {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings", "clusterkopfpeerings"],
     "verbs": ["get", "list", "watch", "patch", "create"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
]  # fmt: skip


def _helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    helm = k8s_bin_dir() / "helm"
    if not helm.exists():
        subprocess.run([str(ROOT / "tools" / "k8s" / "build.sh")], check=True, capture_output=True)
    return subprocess.run([str(helm), *args], capture_output=True, text=True, check=check)


def _render(*sets: str) -> dict[tuple[str, str], dict[str, Any]]:
    args = ["template", "rel", str(CHART), "--namespace", "mq"]
    for s in sets:
        args += ["--set", s]
    out = _helm(*args).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def test_lint_and_crds_match_the_repo() -> None:
    lint = _helm("lint", str(CHART))
    assert "0 chart(s) failed" in lint.stdout, lint.stdout + lint.stderr
    for crd in sorted((ROOT / "crds").glob("*.yaml")):
        assert (CHART / "crds" / crd.name).read_bytes() == crd.read_bytes(), crd.name
    assert sorted(p.name for p in (CHART / "crds").glob("*.yaml")) == sorted(
        p.name for p in (ROOT / "crds").glob("*.yaml")
    )


def test_default_render() -> None:
    objs = _render()
    role = objs[("ClusterRole", "rel-brokergroup-operator")]
    assert role["rules"] == EXPECTED_RULES
    binding = objs[("ClusterRoleBinding", "rel-brokergroup-operator")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-brokergroup", "namespace": "mq"}
    ]
    secret = objs[("Secret", "rel-brokergroup-secrets")]
    assert sorted(secret["data"]) == ["api-token", "ha-secret", "raft-password"]
    assert all(len(base64.b64decode(v)) >= 32 for v in secret["data"].values())
    operator = objs[("Deployment", "rel-brokergroup-operator")]
    sts = objs[("StatefulSet", "rel-brokergroup-controller")]
    assert operator["spec"]["replicas"] == 2 and sts["spec"]["replicas"] == 3
    for pod in (operator["spec"]["template"]["spec"], sts["spec"]["template"]["spec"]):
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
    env = {
        e["name"]: e.get("value")
        for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    apis = [
        f"rel-brokergroup-controller-{i}.rel-brokergroup-controller.mq.svc.cluster.local:9878"
        for i in range(3)
    ]
    assert env["BROKERGROUP_CONTROLLER_ADDRESSES"] == ",".join(apis)
    assert env["BROKERGROUP_SECRET_NAME"] == "rel-brokergroup-secrets"
    script = sts["spec"]["template"]["spec"]["containers"][0]["command"][2]
    peers = ",".join(a.replace(":9878", ":9880") for a in apis)
    assert f"--peers {peers}" in script and "--raft-password-file" in script
    assert objs[("Service", "rel-brokergroup-controller")]["spec"]["publishNotReadyAddresses"]
    policy = objs[("NetworkPolicy", "rel-brokergroup-controller")]
    raft_rule = next(r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == 9880)
    assert raft_rule["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "rel",
                                         "app.kubernetes.io/component": "controller"}}}
    ]  # fmt: skip


def test_default_render_scopes_spreads_and_exposes_the_operator() -> None:
    """Issue 22 items 2 and 6: the operator watches its release namespace only,
    knows its release (BROKERGROUP_OPERATOR_ID), spreads like the controllers,
    keeps one replica through drains, and has a metrics Service; the
    Prometheus Operator objects only when asked."""
    objs = _render()
    operator = objs[("Deployment", "rel-brokergroup-operator")]
    pod = operator["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[2:4] == ["--namespace", "mq"] and "--all-namespaces" not in command
    assert operator["metadata"]["annotations"]["brokergroup.io/watch-namespaces"] == "mq"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert (env["BROKERGROUP_OPERATOR_ID"], env["BROKERGROUP_OPERATOR_DEPLOYMENT"]) == (
        "mq/rel-brokergroup",
        "mq/rel-brokergroup-operator",
    )
    sts = objs[("StatefulSet", "rel-brokergroup-controller")]["spec"]["template"]["spec"]
    for spec, component in ((pod, "operator"), (sts, "controller")):
        (term,) = spec["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        assert term["podAffinityTerm"] == {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "rel",
                                              "app.kubernetes.io/component": component}},
        }  # fmt: skip
    pdb = objs[("PodDisruptionBudget", "rel-brokergroup-operator")]["spec"]
    assert pdb == {"minAvailable": 1, "selector": {"matchLabels": {
        "app.kubernetes.io/instance": "rel", "app.kubernetes.io/component": "operator"}}}  # fmt: skip
    service = objs[("Service", "rel-brokergroup-operator-metrics")]["spec"]
    assert service["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics"}]
    assert not {k for k, _ in objs} & {"ServiceMonitor", "PodMonitor"}
    monitors = _render("metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true")
    assert monitors[("ServiceMonitor", "rel-brokergroup-operator")]["spec"]["endpoints"] == [
        {"port": "metrics", "interval": "30s"}
    ]
    assert monitors[("PodMonitor", "rel-brokergroup-operator")]["spec"]["podMetricsEndpoints"] == [
        {"port": "metrics", "interval": "30s"}
    ]
    wide = _render("operator.clusterWide=true")[("Deployment", "rel-brokergroup-operator")]
    assert "--all-namespaces" in wide["spec"]["template"]["spec"]["containers"][0]["command"]
    assert wide["metadata"]["annotations"]["brokergroup.io/watch-namespaces"] == "*"


def test_value_sets() -> None:
    objs = _render(
        "secrets.existingSecret=mine", "rbac.create=false", "networkPolicy.enabled=false",
        "controller.replicas=5", "operator.watchNamespaces={a,b}",
    )  # fmt: skip
    kinds = sorted(k for k, _ in objs)
    assert "Secret" not in kinds and "ClusterRole" not in kinds and "NetworkPolicy" not in kinds
    sts = objs[("StatefulSet", "rel-brokergroup-controller")]
    assert sts["spec"]["replicas"] == 5
    assert sts["spec"]["template"]["spec"]["containers"][0]["command"][2].count(":9880") == 5
    operator = objs[("Deployment", "rel-brokergroup-operator")]["spec"]["template"]["spec"]
    command = operator["containers"][0]["command"]
    assert command[2:6] == ["--namespace", "a", "--namespace", "b"]
    assert "--all-namespaces" not in command
    assert operator["volumes"][0]["secret"]["secretName"] == "mine"


@pytest.mark.parametrize(
    "bad",
    ["controller.replicas=2", "operator.replicas=0", "nosuchkey=1", "controller.storage.size=big"],
)
def test_schema_refuses_bad_values(bad: str) -> None:
    result = _helm("template", "rel", str(CHART), "--set", bad, check=False)
    assert result.returncode != 0 and "values don't meet the specifications" in result.stderr


def test_install_upgrade_uninstall_on_the_tier(k8s_cluster: K8sCluster) -> None:
    from kubernetes import client

    namespace = f"chart-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", namespace)
    core = client.CoreV1Api(k8s_cluster.api())
    apps = client.AppsV1Api(k8s_cluster.api())
    installed = k8s_cluster.helm("install", "bg", str(CHART), "-n", namespace)
    assert "STATUS: deployed" in installed.stdout, installed.stderr
    assert "kubectl -n" in installed.stdout  # NOTES.txt tells what to run next
    before = core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data
    assert sorted(before) == ["api-token", "ha-secret", "raft-password"]
    assert apps.read_namespaced_stateful_set("bg-brokergroup-controller", namespace)
    k8s_cluster.helm("upgrade", "bg", str(CHART), "-n", namespace, "--set", "operator.replicas=1")
    after = core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data
    assert after == before, "helm upgrade must keep the generated secrets"
    deployment = apps.read_namespaced_deployment("bg-brokergroup-operator", namespace)
    assert deployment.spec.replicas == 1
    k8s_cluster.helm("uninstall", "bg", "-n", namespace)
    assert not apps.list_namespaced_stateful_set(namespace).items
    assert not apps.list_namespaced_deployment(namespace).items
    assert core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data == before
    k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
