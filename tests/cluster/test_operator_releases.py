"""The operator as people use it (issue 22 items 2, 4 and 6), on a real API server.

- Two releases of the chart, each with its defaults, in two namespaces: the
  second one's operator never touches the first one's group (its
  StatefulSet keeps the first release's controller addresses and Secret); a
  third, cluster-wide install is refused with a message naming the release
  it would overlap. `helm uninstall` of the first release, with its group
  still there, then `kubectl delete bg` ends: the operator let go of its
  group on the way out (an OperatorUninstalled Warning Event says so).
- With the operator as a process (tests/cluster/operator_env.py):
  `kubectl wait --for=condition=Ready bg/x` returns; after a roll
  status.currentRevision is the new revision; a group whose release Secret
  the operator cannot create or read says so in Ready and an Event; deleting a group whose controller
  is gone ends after the cleanup timeout with a CleanupIncomplete Event.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import OperatorEnv, OperatorProcess, apply_crds, wait_for
from tests.cluster.test_operator_scenarios import crds_applied, env  # noqa: F401  (fixtures)

pytestmark = pytest.mark.cluster
CHART = Path(__file__).resolve().parents[2] / "charts" / "brokergroup"
GROUP, VERSION, PLURAL = "brokergroup.io", "v1alpha1", "brokergroups"


def _condition(group: dict[str, Any], kind: str) -> tuple[str, str] | None:
    for c in (group.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return (str(c.get("status")), str(c.get("reason")))
    return None


def _broker_command(apps: Any, namespace: str, name: str) -> tuple[str, str] | None:
    """(controller addresses, Secret) of the group's StatefulSet; None while it is missing."""
    try:
        sts = apps.read_namespaced_stateful_set(name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    pod = sts.spec.template.spec
    command = pod.containers[0].command
    addresses = command[command.index("--controller-addresses") + 1]
    secret = next(v.secret.secret_name for v in pod.volumes if v.secret is not None)
    return addresses, secret


# ------------------------------------------------------------------ the chart


@pytest.fixture
def namespaces(k8s_cluster: K8sCluster) -> Iterator[list[str]]:
    apply_crds(str(k8s_cluster.kubeconfig))
    made: list[str] = []
    yield made
    for ns in made:
        for release in ("a", "b", "c"):
            k8s_cluster.helm("uninstall", release, "-n", ns, "--wait", check=False)
        k8s_cluster.kubectl("delete", "bg", "--all", "-n", ns, "--wait=false", check=False)
        k8s_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _install(cluster: K8sCluster, release: str, namespace: str, *sets: str) -> Any:
    args = ["install", release, str(CHART), "-n", namespace, "--create-namespace"]
    for s in (
        "controller.replicas=1",
        "operator.replicas=1",
        "controller.storage.size=64Mi",
        *sets,
    ):
        args += ["--set", s]
    return cluster.helm(*args, check=False)


def _create_group(custom: Any, namespace: str, name: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "BrokerGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "storage": {"size": "64Mi"}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def test_two_releases_do_not_fight_and_uninstall_lets_go(
    k8s_cluster: K8sCluster, namespaces: list[str]
) -> None:
    api = k8s_cluster.api()
    apps, custom, core = client.AppsV1Api(api), client.CustomObjectsApi(api), client.CoreV1Api(api)
    tag = uuid.uuid4().hex[:6]
    ns_a, ns_b, ns_c = f"rel-a-{tag}", f"rel-b-{tag}", f"rel-c-{tag}"
    namespaces += [ns_a, ns_b, ns_c]

    installed = _install(k8s_cluster, "a", ns_a)
    assert "STATUS: deployed" in installed.stdout, installed.stderr
    _create_group(custom, ns_a, "orders")
    mine = wait_for(
        "release a's operator to create bg/orders' StatefulSet",
        lambda: _broker_command(apps, ns_a, "orders"),
        120,
    )
    assert mine is not None and mine[0].startswith(
        f"a-brokergroup-controller-0.a-brokergroup-controller.{ns_a}."
    )
    assert mine[1] == "orders-credentials"  # the group's own, written by the operator

    installed = _install(k8s_cluster, "b", ns_b)
    assert "STATUS: deployed" in installed.stdout, installed.stderr
    _create_group(custom, ns_b, "payments")
    # Release b's operator has run passes (its own group has a status) ...
    wait_for(
        "release b's operator to write bg/payments' status",
        lambda: _condition(
            custom.get_namespaced_custom_object(GROUP, VERSION, ns_b, PLURAL, "payments"), "Ready"
        ),
        120,
    )
    # ... and release a's group is still release a's.
    assert _broker_command(apps, ns_a, "orders") == mine
    finalizers = custom.get_namespaced_custom_object(GROUP, VERSION, ns_a, PLURAL, "orders")[
        "metadata"
    ].get("finalizers")
    assert finalizers == ["brokergroup.io/cleanup"]

    refused = _install(k8s_cluster, "c", ns_c, "operator.clusterWide=true")
    assert refused.returncode != 0
    assert "this release would watch every namespace, but release " in refused.stderr
    assert "Only one brokergroup operator may watch a namespace" in refused.stderr
    assert k8s_cluster.helm("status", "c", "-n", ns_c, check=False).returncode != 0

    # helm uninstall before deleting the group: the delete still ends.
    k8s_cluster.helm("uninstall", "a", "-n", ns_a, "--wait")
    wait_for(
        "release a's operator pod gone",
        lambda: (
            not core.list_namespaced_pod(
                ns_a, label_selector="app.kubernetes.io/component=operator"
            ).items
            or None
        ),
        60,
    )
    deleted = k8s_cluster.kubectl(
        "delete", "bg", "orders", "-n", ns_a, "--timeout=60s", check=False
    )
    assert deleted.returncode == 0, deleted.stderr
    events = core.list_namespaced_event(
        ns_a, field_selector="involvedObject.kind=BrokerGroup,involvedObject.name=orders"
    ).items
    assert "OperatorUninstalled" in [e.reason for e in events]


# ------------------------------------------------------- the operator process


def _restart_operator(e: OperatorEnv, **extra: str) -> None:
    for op in e.operators:
        op.stop()
    e.operators.clear()
    op = OperatorProcess(
        e.namespace,
        e.operator_kubeconfig,
        {**e.operator_env(), **extra},
        e.work / f"operator-{uuid.uuid4().hex[:4]}.log",
    )
    op.start()
    e.operators.append(op)


def test_kubectl_wait_ready_and_current_revision_after_a_roll(
    env: OperatorEnv,  # noqa: F811
    k8s_cluster: K8sCluster,
) -> None:
    env.create_group("orders", 2)
    waited = k8s_cluster.kubectl(
        "wait", "--for=condition=Ready", "bg/orders", "-n", env.namespace, "--timeout=120s",
        check=False,
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    assert "condition met" in waited.stdout
    before = env.group("orders")["status"]
    assert before["currentRevision"] == before["updateRevision"] != ""
    # The read Service of earlier versions is gone (slaves answer NOT_MASTER to offsets).
    services = sorted(
        s.metadata.name for s in env.core.list_namespaced_service(env.namespace).items
    )
    assert services == ["orders", "orders-headless"]

    env.patch_group("orders", {"spec": {"config": {"maxPullMessages": 128}}})

    def rolled() -> dict[str, Any] | None:
        status = env.group("orders").get("status") or {}
        new = status.get("updateRevision")
        done = (
            new
            and new != before["updateRevision"]
            and _condition(env.group("orders"), "Ready") == ("True", "GroupReady")
        )
        return status if done else None

    after = wait_for("the roll to finish and Ready again", rolled, 180)
    assert after["currentRevision"] == after["updateRevision"]


def test_a_group_without_its_secret_says_so(env: OperatorEnv) -> None:  # noqa: F811
    """The release Secret is the user's (secrets.existingSecret) and missing: the
    operator may not create it, so no group can get its credentials. The group
    says so (Ready=False SecretMissing, one Event); once the Secret exists the
    next pass reads it and writes the group's own `<name>-credentials`."""
    _restart_operator(
        env,
        BROKERGROUP_RELEASE_SECRET=f"{env.namespace}/not-there",
        BROKERGROUP_RELEASE_SECRET_MANAGED="false",
    )
    env.create_group("orders", 1)
    group = wait_for(
        "Ready=False SecretMissing",
        lambda: (
            (g := env.group("orders"))
            and _condition(g, "Ready") == ("False", "SecretMissing")
            and g
        ),
        60,
    )
    message = next(c["message"] for c in group["status"]["conditions"] if c["type"] == "Ready")
    assert (
        f"the operator could not create or read the release Secret {env.namespace}/not-there: "
        "it does not exist and was brought by the user"
    ) in message, message
    reasons = wait_for(
        "a SecretMissing Event", lambda: [r for r, _ in env.group_events("orders")] or None, 30
    )
    assert reasons.count("SecretMissing") == 1, reasons
    keys = ("api-token", "broker-credential-root", "raft-password", "ha-secret")
    env.core.create_namespaced_secret(
        env.namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="not-there"),
            string_data={
                **{k: uuid.uuid4().hex for k in keys},
                # The controllers' RocketMQ key pair (issue 20 item 4): JSON, not a token.
                "rocketmq-credentials": json.dumps(
                    {"accessKey": "bg-user-pair", "secretKey": uuid.uuid4().hex}
                ),
            },
        ),
    )

    def credentials() -> Any:
        try:
            return env.core.read_namespaced_secret("orders-credentials", env.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    secret = wait_for("the group's own Secret", credentials, 60)
    # The user's release Secret brought the RocketMQ key pair, so the group's brokers get
    # their own pairs for their remoting port (issue 19 items 4-5), not the release's.
    assert sorted(secret.data) == [
        "broker-credential", "client-credential", "ha-secret", "rocketmq-client-credentials",
        "rocketmq-credentials",
    ]  # fmt: skip
    pair = json.loads(base64.b64decode(secret.data["rocketmq-credentials"]))
    assert pair["accessKey"] != "bg-user-pair", pair["accessKey"]


def test_delete_ends_when_the_controller_is_gone(env: OperatorEnv) -> None:  # noqa: F811
    _restart_operator(env, BROKERGROUP_CLEANUP_TIMEOUT_SECONDS="3")
    env.create_group("orders", 1)
    # Its broker registered, and the status says so: a group that never registered
    # one has nothing in the controllers and is let go at once (ownership.ever_registered).
    wait_for(
        "the finalizer on bg/orders and a BrokerId in its status",
        lambda: (
            (g := env.group("orders"))["metadata"].get("finalizers")
            and any(
                isinstance(r.get("brokerId"), int)
                for r in (g.get("status") or {}).get("brokers") or []
            )
        ),
        90,
    )
    env.controllers.stop()  # e.g. the release's controllers uninstalled first
    env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, "orders")
    wait_for("bg/orders deleted", lambda: not env.groups() or None, 90)
    events = dict(env.group_events("orders"))
    assert "left behind: the group's BrokerIds in the controller" in events["CleanupIncomplete"]


def test_an_uninstalled_operator_lets_go_of_its_groups(env: OperatorEnv) -> None:  # noqa: F811
    # The Deployment named here does not exist: the operator's exit counts as an uninstall.
    _restart_operator(env, BROKERGROUP_OPERATOR_DEPLOYMENT=f"{env.namespace}/gone-operator")
    env.create_group("orders", 1)
    wait_for(
        "the finalizer on bg/orders",
        lambda: env.group("orders")["metadata"].get("finalizers"),
        60,
    )
    for op in env.operators:
        op.stop()
    env.operators.clear()
    env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.namespace, PLURAL, "orders")
    wait_for("bg/orders deleted with no operator running", lambda: not env.groups() or None, 30)
    assert "OperatorUninstalled" in [r for r, _ in env.group_events("orders")]
