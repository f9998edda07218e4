"""A readiness blip of the master costs no election (issue 17 item 9).

One node, three controllers and the operator as processes, a 3-replica
BrokerGroup. The master pod's readiness probe fails for 2 s
(`stall_readiness`: the broker process runs on and keeps heartbeating), so
its Ready condition goes True → False → True and the operator reports "pod
not ready". That is a symptom, not an end: the controller keeps the master
while its heartbeats stay fresh (its heartbeat timeout, 2 s, would still
fail it over if they stopped). Checked: the same BrokerId is master at the
same masterEpoch after the blip, the operator did report the blip, and the
group is Available again with the same master labelled.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_env import OperatorEnv, tier_env, wait_for

pytestmark = pytest.mark.cluster

NAME = "orders"
BROKER_ID = "brokergroup.io/broker-id"


@pytest.fixture
def env(k8s_cluster: Any, tmp_path: Path) -> Iterator[OperatorEnv]:
    with tier_env(k8s_cluster, "rb", tmp_path) as e:
        yield e


def ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_a_two_second_readiness_stall_of_the_master_keeps_it(
    env: OperatorEnv, k8s_cluster: Any
) -> None:
    env.create_group(NAME, 3, ha={"minInSyncReplicas": 2})
    env.wait_available(NAME, 3, 120)
    master = env.master_pod(NAME)
    assert master is not None
    before = env.controllers.replica_info(env.namespace, NAME)
    k8s_cluster.stall_readiness(master, 2.0)
    wait_for(
        "the master pod not ready",
        lambda: not ready(env.core.read_namespaced_pod(master.metadata.name, env.namespace)),
        30,
        0.05,
    )
    wait_for(
        "the master pod ready again",
        lambda: ready(env.core.read_namespaced_pod(master.metadata.name, env.namespace)),
        30,
        0.05,
    )
    env.wait_available(NAME, 3, 60)
    after = env.controllers.replica_info(env.namespace, NAME)
    assert (after["masterBrokerId"], after["masterEpoch"]) == (
        before["masterBrokerId"],
        before["masterEpoch"],
    )
    now = env.master_pod(NAME)
    assert now is not None and now.metadata.name == master.metadata.name
    logs = "".join(p.read_text(errors="replace") for p in env.work.glob("operator-*.log"))
    reported = f"reported broker {master.metadata.labels[BROKER_ID]} of {env.namespace}/{NAME}"
    assert f"{reported} inactive: pod not ready" in logs, "the operator never reported the blip"
