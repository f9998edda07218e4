"""The operator under the chart's RBAC (issue 11 item 5), on the cluster tier.

The chart's ServiceAccount, Roles and RoleBindings (the default scope: the
release namespace, nothing cluster-wide) are rendered by `helm template` and
applied; the operator then runs with a token of that
ServiceAccount (TokenRequest, as a pod would get) and must bring a 3-replica
BrokerGroup to Available with a labelled master — so the RBAC is enough for
its job — while the same identity is refused what it does not need (reading
Secrets, nodes, Deployments, RBAC objects, pod exec, anything in another
namespace). The broker pods it made
mount no ServiceAccount token and only their group's Secret, which holds the
group's broker credential, the HA secret and the group's own RocketMQ key pairs, and
never the admin token or the release's RocketMQ pair (DESIGN.md §11); the applications'
Secret `<group>-rocketmq-client` holds the client pair alone.
"""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from brokergroup_controller.credentials import Role, derive_credential, derive_rocketmq_pair
from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import OperatorEnv, apply_crds
from tests.cluster.tier.paths import ROOT

pytestmark = pytest.mark.cluster

ALLOWED = [
    ("patch", "brokergroups.brokergroup.io"),
    ("patch", "brokergroups.brokergroup.io", "--subresource=status"),
    ("delete", "pods"),
    ("create", "statefulsets.apps"),
    ("create", "poddisruptionbudgets.policy"),
    ("create", "networkpolicies.networking.k8s.io"),
    ("create", "events"),
    ("create", "kopfpeerings.kopf.dev"),
    ("create", "secrets"),
    ("patch", "secrets"),
    ("patch", "persistentvolumeclaims"),
    # engine rocketmq: the stock proxy's Deployment per group (rocketmq_proxy.py)
    ("create", "deployments.apps"),
]
REFUSED = [
    ("get", "secrets"),
    ("list", "secrets"),
    ("list", "nodes"),
    ("create", "daemonsets.apps"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "pods", "--subresource=exec"),
    ("delete", "brokergroups.brokergroup.io"),
    ("create", "persistentvolumes"),
    ("delete", "persistentvolumeclaims"),
]


@pytest.fixture
def operator_identity(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(release namespace, kubeconfig of the chart's operator ServiceAccount)."""
    namespace = f"rbac-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", namespace)
    rendered = k8s_cluster.helm(
        "template", "bg", str(ROOT / "charts" / "brokergroup"), "-n", namespace,
        "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml",
    ).stdout  # fmt: skip
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(rendered)
    k8s_cluster.kubectl("apply", "-n", namespace, "-f", str(manifest))
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(rendered) if d)
    # The default scope is the release namespace: Roles there, nothing cluster-wide.
    assert kinds == ["Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount"]
    token = k8s_cluster.kubectl(
        "create", "token", "bg-brokergroup", "-n", namespace, "--duration", "1h"
    ).stdout.strip()
    admin = yaml.safe_load(k8s_cluster.kubeconfig.read_text())
    admin["users"] = [{"name": "operator", "user": {"token": token}}]
    admin["contexts"] = [{"name": "operator", "context": {"cluster": "test", "user": "operator"}}]
    admin["current-context"] = "operator"
    kubeconfig = tmp_path / "operator.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(admin))
    try:
        yield namespace, str(kubeconfig)
    finally:
        k8s_cluster.kubectl("delete", "-f", str(manifest), "--wait=false", check=False)
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _can_i(k8s_cluster: K8sCluster, kubeconfig: str, namespace: str, *check: str) -> bool:
    done = subprocess.run(
        [str(k8s_cluster.bin_dir / "kubectl"), "--kubeconfig", kubeconfig, "auth", "can-i",
         *check, "-n", namespace],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.stdout.strip() == "yes"


def test_the_operator_does_its_job_under_the_charts_rbac_and_nothing_more(
    k8s_cluster: K8sCluster, operator_identity: tuple[str, str], tmp_path: Path
) -> None:
    namespace, kubeconfig = operator_identity
    apply_crds(str(k8s_cluster.kubeconfig))  # can-i resolves resource names through discovery
    for check in ALLOWED:
        assert _can_i(k8s_cluster, kubeconfig, namespace, *check), check
    for check in REFUSED:
        assert not _can_i(k8s_cluster, kubeconfig, namespace, *check), check
    for check in ALLOWED:  # namespaced RBAC: nothing outside the watched namespace
        assert not _can_i(k8s_cluster, kubeconfig, "default", *check), ("default", check)

    (tmp_path / "env").mkdir()
    env = OperatorEnv(
        str(k8s_cluster.kubeconfig), namespace, tmp_path / "env",
        tuple(k8s_cluster.host_addresses(3)), crash=k8s_cluster.crash_pod,
        operator_kubeconfig=kubeconfig,
    )  # fmt: skip
    env.start()
    try:
        env.create_group("orders", 3)
        group = env.wait_available("orders", 3)
        master = env.master_pod("orders")
        assert master is not None
        assert group["status"]["master"]["pod"] == master.metadata.name
        assert_brokers_hold_only_their_groups_credential(env, "orders")
    finally:
        env.close()


def assert_brokers_hold_only_their_groups_credential(env: OperatorEnv, group: str) -> None:
    """DESIGN.md §11 as the API server admitted the pods: no ServiceAccount token
    volume (automountServiceAccountToken false), one Secret volume, the group's
    own, with its broker credential and the HA secret; the admin token and the
    credential root are in no Secret of the namespace the operator wrote."""
    admin_token = env.controllers.token_file.read_text().strip()
    root = env.controllers.broker_credential_root_file.read_text().strip()
    pods = env.pods(group)
    assert len(pods) == 3
    for pod in pods:
        assert pod.spec.automount_service_account_token is False
        mounted = [
            (v.name, v.secret.secret_name, [(i.key, i.path) for i in v.secret.items])
            for v in pod.spec.volumes
            if v.secret is not None
        ]
        assert mounted == [
            (
                "secrets",
                f"{group}-credentials",
                [
                    ("broker-credential", "broker-credential"),
                    ("ha-secret", "ha-secret"),
                    # The group's RocketMQ broker pair (registrations with the name servers)
                    # and client pair, both accepted on the broker's remoting port (the
                    # operator has the release pair, so the port is on).
                    ("rocketmq-credentials", "rocketmq-credentials"),
                    ("rocketmq-client-credentials", "rocketmq-client-credentials"),
                ],
            )
        ], pod.metadata.name
        projected = [v.name for v in pod.spec.volumes if v.projected is not None]
        assert projected == [], (pod.metadata.name, projected)
        for container in pod.spec.containers:
            mounts = [m.mount_path for m in container.volume_mounts or []]
            assert not any(m.startswith("/var/run/secrets") for m in mounts), mounts
    secret = env.core.read_namespaced_secret(f"{group}-credentials", env.namespace)
    data = {k: base64.b64decode(v).decode() for k, v in secret.data.items()}
    assert sorted(data) == [
        "broker-credential", "client-credential", "ha-secret", "rocketmq-client-credentials",
        "rocketmq-credentials",
    ]  # fmt: skip
    # The group's own RocketMQ pairs, never the release's (the controllers' admin pair).
    assert data["rocketmq-credentials"] == (
        derive_rocketmq_pair(root, Role.BROKER, env.namespace, group).to_json()
    )
    client_pair = derive_rocketmq_pair(root, Role.CLIENT, env.namespace, group)
    assert data["rocketmq-client-credentials"] == client_pair.to_json()
    release_pair = json.loads(env.controllers.rocketmq_credentials_file.read_text())
    assert release_pair["secretKey"] not in json.dumps(data)
    assert data["broker-credential"] == derive_credential(root, Role.BROKER, env.namespace, group)
    assert admin_token not in data.values() and root not in data.values()
    # The applications' Secret: the client pair alone, owned by the group.
    client = env.core.read_namespaced_secret(f"{group}-rocketmq-client", env.namespace)
    assert {k: base64.b64decode(v).decode() for k, v in client.data.items()} == {
        "accessKey": client_pair.access_key,
        "secretKey": client_pair.secret_key,
        "rocketmq-credentials": client_pair.to_json(),
    }
    assert [(o.kind, o.name) for o in client.metadata.owner_references] == [("BrokerGroup", group)]
