"""A node that stops answering (issue 17 item 5; DESIGN.md §3.3 "Fencing", §5).

Three nodes (the `three_nodes` fixture: node-1..node-3, one process kubelet
each), a 3-replica BrokerGroup spread one pod per node (required pod
anti-affinity on the hostname), three controllers and the operator as local
processes (not on any of the nodes), and a steady producer through the
master Service. Then the node of the master pod is frozen (`freeze`: its
kubelet stops renewing its lease, reporting status and handling pods, and
every container process of the node is SIGSTOPped), as a node that hung or
dropped off the network. Checked, comparing content (BrokerIds, roles, keys):

- a SyncStateSet member on another node is elected and labelled master;
- the old pod loses `role=master`, so the master Service stops sending to it;
- the node is seen NotReady by the node lifecycle controller while the group
  keeps taking writes (a frozen pod is not proof that its process is gone);
- after the node returns (`thaw`), the same pod (same uid) rejoins as a
  slave and the group is back to 3 in sync;
- every write acknowledged before, during and after is read back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.operator_env import (
    OperatorEnv,
    acked_keys,
    one_pod_per_node,
    tier_env,
    wait_for,
)

pytestmark = pytest.mark.cluster

NAME, TOPIC = "orders", "N"
ROLE, BROKER_ID = "brokergroup.io/role", "brokergroup.io/broker-id"


@pytest.fixture
def node_env(three_nodes: Any, tmp_path: Path) -> Iterator[OperatorEnv]:
    with tier_env(three_nodes, "nl", tmp_path) as env:
        try:
            yield env
        finally:
            for name in list(three_nodes.extra_kubelets):
                three_nodes.node(name).thaw()


class SteadyProducer(threading.Thread):
    """Batches of 20 through whatever pod the master Service selects, until stopped."""

    def __init__(self, env: OperatorEnv, ack_log: Path) -> None:
        super().__init__(daemon=True)
        self.env, self.ack_log = env, ack_log
        self.halt = threading.Event()
        self.batches = 0

    def run(self) -> None:
        while not self.halt.is_set():
            address = self.env.service_address(NAME)
            if address:
                # A batch sent to the frozen master hangs: cut it (its acks are kept), take
                # the Service's next pick.
                self.env.produce(
                    address, TOPIC, 20, f"b{self.batches}-", self.ack_log, timeout_s=10
                )
                self.batches += 1
            time.sleep(0.05)

    def stop(self) -> list[str]:
        self.halt.set()
        self.join(60)
        return acked_keys(self.ack_log)


def node_ready(env: OperatorEnv, node: str) -> bool:
    conditions = env.core.read_node(node).status.conditions or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def test_master_node_stops_answering(
    node_env: OperatorEnv, three_nodes: Any, tmp_path: Path
) -> None:
    env = node_env
    env.create_group(NAME, 3, ha={"minInSyncReplicas": 2}, template=one_pod_per_node(NAME))
    env.wait_available(NAME, 3, 180)
    nodes = sorted(p.spec.node_name for p in env.pods(NAME))
    assert nodes == ["node-1", "node-2", "node-3"]
    old = env.master_pod(NAME)
    assert old is not None
    old_name, old_uid, old_id = old.metadata.name, old.metadata.uid, old.metadata.labels[BROKER_ID]
    old_address = f"{old.status.pod_ip}:10911"
    in_sync = {str(b) for b in env.group(NAME)["status"]["syncStateSet"]}
    lost_node = three_nodes.pod_node(old)

    producer = SteadyProducer(env, tmp_path / "acks.jsonl")
    producer.start()
    wait_for("writes flowing", lambda: acked_keys(producer.ack_log), 60)
    acked_before = set(acked_keys(producer.ack_log))
    lost_node.freeze()
    try:

        def new_master() -> Any:
            pod = env.master_pod(NAME)
            return pod if pod is not None and pod.metadata.labels[BROKER_ID] != old_id else None

        pod = wait_for("a new master labelled", new_master, 60)
        assert pod.metadata.labels[BROKER_ID] in in_sync
        assert pod.spec.node_name != old.spec.node_name
        wait_for(
            "the old pod without role=master",
            lambda: (env.labelled(NAME)[old_name][0] != "master") or None,
            30,
        )
        assert env.service_address(NAME) not in (None, old_address)
        # The node lifecycle controller notices the silence; writes keep flowing.
        wait_for("the frozen node NotReady", lambda: not node_ready(env, lost_node.node_name), 90)
        during = len(acked_keys(producer.ack_log))
        wait_for(
            "writes acknowledged by the new master",
            lambda: len(acked_keys(producer.ack_log)) > during,
            60,
        )
    finally:
        lost_node.thaw()
    env.wait_available(NAME, 3, 180)
    role, broker_id, _ip = env.labelled(NAME)[old_name]
    back = env.core.read_namespaced_pod(old_name, env.namespace)
    assert (role, broker_id, back.metadata.uid) == ("slave", old_id, old_uid)
    acked = producer.stop()
    assert acked_before < set(acked), "no write was acknowledged after the freeze"
    address = wait_for("the client Service's endpoint", lambda: env.service_address(NAME), 30)
    read = set(env.consume_keys(address, TOPIC))
    missing = sorted(set(acked) - read)
    assert missing == [], f"{len(missing)} acknowledged keys lost, e.g. {missing[:5]}"
