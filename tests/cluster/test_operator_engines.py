"""Both engines under one operator on a real API server (issue 20 items 4-5, cluster tier).

One namespace, three controllers (with their RocketMQ remoting port and name server), the
operator as a process, and two BrokerGroups: `plain` runs the built-in broker, `stock`
(`spec.engine: rocketmq`) runs stock RocketMQ 5.3 brokers, whose pods the process kubelet
runs as JVMs from the cached Maven Central jars (the RocketMQ image's /opt/rocketmq is
mapped to them, tests/cluster/tier/paths.py). For each group:
- it comes up: BrokerIds 1-3 from the controller, one master label, the SyncStateSet of 3;
- the master pod is deleted → a SyncStateSet member is elected by this controller and
  labelled master, the client Service selects it, the old pod comes back on a new IP with
  its old BrokerId (the stock broker's brokerIdentity file is on the PVC) as a slave.
The CRD's engine rules are in test_operator_scenarios.py (CEL_CASES, test_engine_is_immutable).

Skips with the reason where Java or the stock jars are missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_env import OperatorEnv, apply_crds, wait_for
from tests.cluster.test_operator_scenarios import _kubeconfig, operator_env_in_namespace
from tests.integration.rocketmq_brokers import find_home

pytestmark = pytest.mark.cluster

STOCK = {
    "engine": "rocketmq",
    # Small: three JVMs share a 2-core machine with the control plane.
    # No stock proxy (a fourth JVM; its objects are unit-tested, test_operator_rocketmq_proxy).
    "rocketmq": {
        "heapSize": "256m",
        "mappedFileSizeCommitLog": 16 << 20,
        "proxy": {"enabled": False},
    },
    # A JVM on a loaded 2-core machine can pause longer than the 2 s default; a pod deletion
    # is reported by the operator at once, so the failover does not wait for this timeout.
    "ha": {"minInSyncReplicas": 2, "heartbeatTimeoutMs": 5000},
}


@pytest.fixture
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OperatorEnv]:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    kubeconfig = _kubeconfig(request)
    apply_crds(kubeconfig)
    with operator_env_in_namespace(request, tmp_path, kubeconfig, "eng") as e:
        yield e


def _ids(env: OperatorEnv, name: str) -> dict[str, str | None]:
    return {pod: bid for pod, (_, bid, _) in env.labelled(name).items()}


def _fail_over_by_pod_deletion(env: OperatorEnv, name: str, timeout_s: float) -> None:
    old = env.master_pod(name)
    assert old is not None
    old_name, old_id, old_ip = (
        old.metadata.name,
        old.metadata.labels["brokergroup.io/broker-id"],
        old.status.pod_ip,
    )
    status = env.group(name)["status"]
    in_sync, epoch = set(status["syncStateSet"]), status["masterEpoch"]
    ids_before = _ids(env, name)
    env.delete_pod(old_name)

    def new_master() -> Any:
        pod = env.master_pod(name)
        return (
            pod
            if pod is not None and pod.metadata.labels["brokergroup.io/broker-id"] != old_id
            else None
        )

    pod = wait_for(f"{name}: a new master labelled", new_master, timeout_s)
    assert int(pod.metadata.labels["brokergroup.io/broker-id"]) in in_sync
    # The client Service follows the label (its selector picks the new master's pod).
    assert wait_for(
        f"{name}: the master Service on the new master",
        lambda: env.service_address(name) == f"{pod.status.pod_ip}:10911",
        timeout_s,
    )
    group = env.wait_available(name, 3, timeout_s * 3)
    assert group["status"]["masterEpoch"] > epoch
    role, broker_id, ip = env.labelled(name)[old_name]
    assert (role, broker_id, ip != old_ip) == ("slave", old_id, True)
    assert _ids(env, name) == ids_before  # every pod keeps its BrokerId


def test_one_group_of_each_engine_fails_over_on_master_pod_deletion(env: OperatorEnv) -> None:
    env.create_group("plain", 3, ha={"minInSyncReplicas": 2})
    env.create_group("stock", 3, **STOCK)
    for name in ("plain", "stock"):
        group = env.wait_available(name, 3, 240)
        assert sorted(int(b) for b in _ids(env, name).values() if b) == [1, 2, 3]
        assert group["status"]["inSync"] == "3/3"
    sts = env.apps.read_namespaced_stateful_set("stock", env.namespace)
    (container,) = sts.spec.template.spec.containers
    assert (
        container.image == "brokergroup-rocketmq:5.3.3" and "BrokerStartup" in container.command[2]
    )
    # The controller knows the stock group by the same key as the built-in one.
    info = env.controllers.replica_info(env.namespace, "stock")
    assert len(info.get("syncStateSet") or []) == 3, info
    _fail_over_by_pod_deletion(env, "plain", 30)
    _fail_over_by_pod_deletion(env, "stock", 60)
