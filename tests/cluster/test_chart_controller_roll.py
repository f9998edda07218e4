"""The chart's controller StatefulSet recovers from a bad upgrade by a revert alone
(issue 22 item 3).

`helm upgrade` with a value that leaves the new controller pod unable to run
(here a nodeSelector no node has, so it stays Pending: the tier's node runs
processes and ignores images, so a bad image would not show), then
`helm upgrade` back to the installed values. Every controller pod ends on the
StatefulSet's current revision and Ready, the Raft quorum whole, and nobody
ran `kubectl delete pod`: with `podManagementPolicy: Parallel` the
StatefulSet controller does not wait for the stuck pod to become ready
before it replaces it on the reverted revision (with OrderedReady it would,
forever — kubernetes/kubernetes#67250).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster import test_chart_in_cluster as chart
from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import wait_for

pytestmark = pytest.mark.cluster
env = chart.env  # the chart installed in a fresh namespace


def _install_flags(namespace: str) -> list[str]:
    return [
        "--set", f"operator.watchNamespaces={{{namespace}}}",
        "--set", "controller.storage.size=64Mi",
    ]  # fmt: skip


def _controllers_on(env: chart.InClusterEnv, revision: str) -> bool:
    pods = [
        p
        for p in env.core.list_namespaced_pod(
            env.namespace, label_selector=chart.CONTROLLER_SELECTOR
        ).items
        if p.metadata.deletion_timestamp is None
    ]
    return len(pods) == 3 and all(
        (p.metadata.labels or {}).get("controller-revision-hash") == revision
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        for p in pods
    )


def test_bad_controller_upgrade_reverted_recovers_without_deleting_pods(
    env: chart.InClusterEnv, k8s_cluster: K8sCluster
) -> None:
    wait_for("3 controllers with one leader", env.whole_quorum, 120)
    good = env.apps.read_namespaced_stateful_set(chart.CONTROLLER, env.namespace).status
    good_revision = good.update_revision
    path = str(chart.CHART)
    bad = k8s_cluster.helm(
        "upgrade", chart.RELEASE, path, "-n", env.namespace, *_install_flags(env.namespace),
        "--set-string", "controller.nodeSelector.brokergroup\\.io/nowhere=true", check=False,
    )  # fmt: skip
    assert "has been upgraded" in bad.stdout, bad.stderr

    def stuck() -> str | None:
        for p in env.core.list_namespaced_pod(
            env.namespace, label_selector=chart.CONTROLLER_SELECTOR
        ).items:
            rev = (p.metadata.labels or {}).get("controller-revision-hash")
            if rev != good_revision and p.status.phase == "Pending":
                return str(p.metadata.name)
        return None

    pending = wait_for("a controller pod Pending on the bad revision", stuck, 60)
    reverted = k8s_cluster.helm(
        "upgrade", chart.RELEASE, path, "-n", env.namespace, *_install_flags(env.namespace),
        check=False,
    )  # fmt: skip
    assert "has been upgraded" in reverted.stdout, reverted.stderr

    def recovered() -> Any:
        sts = env.apps.read_namespaced_stateful_set(chart.CONTROLLER, env.namespace).status
        return sts.update_revision == good_revision and _controllers_on(env, good_revision)

    wait_for(f"every controller Ready on {good_revision} ({pending} was stuck)", recovered, 120)
    wait_for("the Raft quorum whole again", env.whole_quorum, 60)
