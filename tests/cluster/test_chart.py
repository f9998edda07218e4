"""The Helm chart charts/brokergroup (issue 11 item 3, DESIGN.md §6, §11).

- `helm lint` passes; the chart's crds/ are byte-for-byte the repo's crds/.
- `helm template` with several value sets renders what the values say: the
  operator's RBAC is exactly the list in docs/kubernetes.md, pods run
  non-root with a read-only root filesystem, the controllers mount the
  admin token and the broker credential root, the controller peers are
  stable DNS names for every replica, the Raft port is reachable only from
  controller pods; values.schema.json refuses bad values.
- `helm template` renders no secret values and twice gives the same bytes
  (GitOps tools never rotate anything); named watch namespaces get a Role
  and RoleBinding each and nothing cluster-wide.
- On the cluster tier (a real API server): `helm install`; the operator
  creates the release Secret; `helm upgrade` and an operator restart keep
  it; `helm uninstall` removes the workloads and leaves the Secret (never
  part of the release).
"""

from __future__ import annotations

import base64
import subprocess
import uuid
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import wait_for
from tests.cluster.tier.paths import ROOT, k8s_bin_dir, missing_reason

pytestmark = pytest.mark.cluster

CHART = ROOT / "charts" / "brokergroup"

EXPECTED_RULES = [
    {
        "apiGroups": ["brokergroup.io"],
        "resources": ["brokergroups"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {
        "apiGroups": ["brokergroup.io"],
        "resources": ["brokergroups/status"],
        "verbs": ["get", "patch"],
    },
    # BrokerGroupUser (users.py): its Secret, the controllers' users, its status.
    {
        "apiGroups": ["brokergroup.io"],
        "resources": ["brokergroupusers"],
        "verbs": ["get", "list", "watch", "patch"],
    },
    {
        "apiGroups": ["brokergroup.io"],
        "resources": ["brokergroupusers/status"],
        "verbs": ["get", "patch"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["services", "configmaps"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch"]},
    # spec.tls issuer cert-manager (tls_material.py).
    {
        "apiGroups": ["cert-manager.io"],
        "resources": ["certificates"],
        "verbs": ["get", "create", "patch"],
    },
    {
        "apiGroups": ["apps"],
        # Deployments: a rocketmq-engine group's stock proxy (rocketmq_proxy.py).
        "resources": ["statefulsets", "deployments"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # Volumes that grow: the operator patches its groups' data PVCs (docs/kubernetes.md).
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "patch"]},
    {
        "apiGroups": ["policy"],
        "resources": ["poddisruptionbudgets"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
]
CLUSTER_ONLY_RULES = [
    {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings", "clusterkopfpeerings"],
     "verbs": ["get", "list", "watch", "patch", "create"]},
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
     "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get"]},
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


NAMESPACED_RULES = [
    *EXPECTED_RULES,
    {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"],
     "verbs": ["get", "list", "watch", "patch", "create"]},
]  # fmt: skip
RELEASE_RULES = [
    {"apiGroups": [""], "resources": ["secrets"],
     "resourceNames": ["rel-brokergroup-secrets"], "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["secrets"],
     "resourceNames": ["rel-brokergroup-cluster-ca", "rel-brokergroup-controller-tls"],
     "verbs": ["get", "patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    {"apiGroups": ["apps"], "resources": ["deployments"],
     "resourceNames": ["rel-brokergroup-operator"], "verbs": ["get", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
]  # fmt: skip


def _rbac(objs: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted(
        (kind, name, str(d["metadata"].get("namespace", "")))
        for (kind, name), d in objs.items()
        if kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    )


def test_default_render() -> None:
    objs = _render()
    # The default scope is the release namespace: a Role there, nothing cluster-wide.
    assert _rbac(objs) == [
        ("Role", "rel-brokergroup-operator", "mq"),
        ("Role", "rel-brokergroup-release", "mq"),
        ("RoleBinding", "rel-brokergroup-operator", "mq"),
        ("RoleBinding", "rel-brokergroup-release", "mq"),
    ]
    assert objs[("Role", "rel-brokergroup-operator")]["rules"] == NAMESPACED_RULES
    assert objs[("Role", "rel-brokergroup-release")]["rules"] == RELEASE_RULES
    for name in ("rel-brokergroup-operator", "rel-brokergroup-release"):
        assert objs[("RoleBinding", name)]["subjects"] == [
            {"kind": "ServiceAccount", "name": "rel-brokergroup", "namespace": "mq"}
        ]
    wide = _render("operator.clusterWide=true")
    assert wide[("ClusterRole", "rel-brokergroup-operator")]["rules"] == [
        *EXPECTED_RULES,
        *CLUSTER_ONLY_RULES,
    ]
    assert wide[("ClusterRoleBinding", "rel-brokergroup-operator")]["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-brokergroup", "namespace": "mq"}
    ]
    assert ("Role", "rel-brokergroup-operator") not in wide
    assert wide[("Role", "rel-brokergroup-release")]["rules"] == RELEASE_RULES
    # The release Secret and the cluster CA both brought: nothing for the operator to create.
    brought = _render("secrets.existingSecret=mine", "tls.clusterCa.existingSecret=myca")[
        ("Role", "rel-brokergroup-release")
    ]
    assert {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]} not in brought[
        "rules"
    ]
    # No secret values are rendered: the operator creates the release Secret.
    assert [k for k in objs if k[0] == "Secret"] == []
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
    assert env["BROKERGROUP_RELEASE_SECRET"] == "mq/rel-brokergroup-secrets"
    assert env["BROKERGROUP_RELEASE_SECRET_MANAGED"] == "true"
    assert "volumes" not in operator["spec"]["template"]["spec"] or all(
        "secret" not in v for v in operator["spec"]["template"]["spec"]["volumes"]
    )
    script = sts["spec"]["template"]["spec"]["containers"][0]["command"][2]
    peers = ",".join(a.replace(":9878", ":9880") for a in apis)
    assert f"--peers {peers}" in script and "--raft-password-file" in script
    assert "--admin-token-file /etc/brokergroup/secrets/api-token" in script
    root = "/etc/brokergroup/secrets/broker-credential-root"
    assert f"--broker-credential-root-file {root}" in script
    (secrets_volume,) = [v for v in sts["spec"]["template"]["spec"]["volumes"] if "secret" in v]
    assert [i["key"] for i in secrets_volume["secret"]["items"]] == [
        "api-token", "broker-credential-root", "raft-password", "rocketmq-credentials",
    ]  # fmt: skip
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


def test_repeated_renders_are_identical() -> None:
    """GitOps tools (Argo CD, Flux) render with `helm template` on every sync: a
    render that differed (a random secret) would rotate it each time."""
    args = ["template", "rel", str(CHART), "--namespace", "mq"]
    assert _helm(*args).stdout == _helm(*args).stdout
    named = [*args, "--set", "operator.watchNamespaces={a,b}"]
    assert _helm(*named).stdout == _helm(*named).stdout


def test_named_namespaces_get_a_role_and_binding_each_and_nothing_cluster_wide() -> None:
    args = ["template", "rel", str(CHART), "--namespace", "mq",
            "--set", "operator.watchNamespaces={a,b}"]  # fmt: skip
    docs = [d for d in yaml.safe_load_all(_helm(*args).stdout) if d]
    rbac = sorted(
        (d["kind"], d["metadata"]["name"], d["metadata"].get("namespace", ""))
        for d in docs
        if d["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
    )
    assert rbac == [
        ("Role", "rel-brokergroup-operator", "a"),
        ("Role", "rel-brokergroup-operator", "b"),
        ("Role", "rel-brokergroup-release", "mq"),
        ("RoleBinding", "rel-brokergroup-operator", "a"),
        ("RoleBinding", "rel-brokergroup-operator", "b"),
        ("RoleBinding", "rel-brokergroup-release", "mq"),
    ]
    for d in docs:
        if d["kind"] == "Role" and d["metadata"]["name"] == "rel-brokergroup-operator":
            assert d["rules"] == NAMESPACED_RULES
        if d["kind"] == "RoleBinding":
            assert d["subjects"] == [
                {"kind": "ServiceAccount", "name": "rel-brokergroup", "namespace": "mq"}
            ]


def test_value_sets() -> None:
    objs = _render(
        "secrets.existingSecret=mine", "rbac.create=false", "networkPolicy.enabled=false",
        "controller.replicas=5", "operator.watchNamespaces={a,b}",
    )  # fmt: skip
    kinds = sorted(k for k, _ in objs)
    assert "Secret" not in kinds and "ClusterRole" not in kinds and "NetworkPolicy" not in kinds
    assert "Role" not in kinds
    sts = objs[("StatefulSet", "rel-brokergroup-controller")]
    assert sts["spec"]["replicas"] == 5
    assert sts["spec"]["template"]["spec"]["containers"][0]["command"][2].count(":9880") == 5
    operator = objs[("Deployment", "rel-brokergroup-operator")]["spec"]["template"]["spec"]
    command = operator["containers"][0]["command"]
    assert command[2:6] == ["--namespace", "a", "--namespace", "b"]
    assert "--all-namespaces" not in command
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    assert env["BROKERGROUP_RELEASE_SECRET"] == "mq/mine"
    assert env["BROKERGROUP_RELEASE_SECRET_MANAGED"] == "false"


@pytest.mark.parametrize(
    "bad",
    ["controller.replicas=2", "operator.replicas=0", "nosuchkey=1", "controller.storage.size=big"],
)
def test_schema_refuses_bad_values(bad: str) -> None:
    result = _helm("template", "rel", str(CHART), "--set", bad, check=False)
    assert result.returncode != 0 and "values don't meet the specifications" in result.stderr


def test_install_upgrade_uninstall_on_the_tier(k8s_cluster: K8sCluster) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    namespace = f"chart-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", namespace)
    core = client.CoreV1Api(k8s_cluster.api())
    apps = client.AppsV1Api(k8s_cluster.api())
    installed = k8s_cluster.helm("install", "bg", str(CHART), "-n", namespace)
    assert "STATUS: deployed" in installed.stdout, installed.stderr
    assert "kubectl -n" in installed.stdout  # NOTES.txt tells what to run next

    def release_secret() -> dict[str, str] | None:
        try:
            return core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    # The operator creates it at its start (the chart renders no values).
    before = wait_for("the operator to create the release Secret", release_secret, 120)
    assert sorted(before) == [
        "api-token", "broker-credential-root", "ha-secret", "raft-password", "rocketmq-credentials",
    ]  # fmt: skip
    assert all(len(base64.b64decode(v)) >= 32 for v in before.values())
    assert apps.read_namespaced_stateful_set("bg-brokergroup-controller", namespace)
    k8s_cluster.helm("upgrade", "bg", str(CHART), "-n", namespace, "--set", "operator.replicas=1")
    after = core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data
    assert after == before, "helm upgrade must keep the generated secrets"
    # A restarted operator finds the Secret and changes nothing.
    for pod in core.list_namespaced_pod(
        namespace, label_selector="app.kubernetes.io/component=operator"
    ).items:
        core.delete_namespaced_pod(pod.metadata.name, namespace)
    wait_for(
        "a new operator pod running",
        lambda: [
            p for p in core.list_namespaced_pod(
                namespace, label_selector="app.kubernetes.io/component=operator"
            ).items
            if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        ] or None,
        120,
    )  # fmt: skip
    assert core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data == before
    deployment = apps.read_namespaced_deployment("bg-brokergroup-operator", namespace)
    assert deployment.spec.replicas == 1
    k8s_cluster.helm("uninstall", "bg", "-n", namespace)
    assert not apps.list_namespaced_stateful_set(namespace).items
    assert not apps.list_namespaced_deployment(namespace).items
    assert core.read_namespaced_secret("bg-brokergroup-secrets", namespace).data == before
    k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
