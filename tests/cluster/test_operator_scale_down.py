"""Scale-down and stuck pods on a real API server (issue 17 item 1, issue 22 item 3).

Each test gets the scenarios' environment (its own namespace, three
controllers, the operator as a process, broker pods run by the tier's node):

- scale 3→2 and 5→3 under a steady producer while the only in-sync slave
  sits on the highest ordinal (the other slaves are paused with SIGSTOP, so
  the master drops them from the SyncStateSet). A sampler reads the
  SyncStateSet from the controller throughout: it never holds fewer than
  minInSyncReplicas members. The operator waits (its Progressing condition
  says why) until the paused slaves are resumed and back in sync, then
  removes one ordinal at a time; no acknowledged write is lost, and the
  removed replicas' PVCs remain (retained by default).
- a bad pod template (a nodeSelector no node has) leaves the rolled pod
  Pending; reverting the spec brings every pod back Ready on the current
  revision with no `kubectl delete pod`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import test_operator_scenarios as scenarios
from tests.cluster.operator_env import OperatorEnv, acked_keys, wait_for

pytestmark = pytest.mark.cluster
# The scenarios' fixtures: a namespace with three controllers and the operator.
crds_applied = scenarios.crds_applied
env = scenarios.env
SWITCHOVER = "brokergroup.io/switchover-to"


class SyncStateSetSampler(threading.Thread):
    """The controller's SyncStateSet every 50 ms, as (masterEpoch, sorted members)."""

    def __init__(self, env: OperatorEnv, name: str) -> None:
        super().__init__(daemon=True)
        self.env, self.name = env, name
        self.samples: list[tuple[int, tuple[int, ...]]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            info = self.env.controllers.replica_info(self.env.namespace, self.name)
            if info.get("syncStateSet") is not None:
                sample = (int(info.get("masterEpoch", 0)), tuple(sorted(info["syncStateSet"])))
                if not self.samples or self.samples[-1] != sample:
                    self.samples.append(sample)
            time.sleep(0.05)

    def stop(self) -> list[tuple[int, tuple[int, ...]]]:
        self._done.set()
        self.join(10)
        return list(self.samples)


class SteadyProducer(threading.Thread):
    """Batches of 20 to whatever pod the client Service selects, until stopped."""

    def __init__(self, env: OperatorEnv, name: str, ack_log: Path) -> None:
        super().__init__(daemon=True)
        self.env, self.name, self.ack_log = env, name, ack_log
        self._done = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._done.is_set():
            address = self.env.service_address(self.name)
            if address:
                self.env.produce(address, "S", 20, f"s{n}-", self.ack_log, timeout_s=30)
                n += 1
            time.sleep(0.05)

    def stop(self) -> None:
        self._done.set()
        self.join(60)


def _ids(env: OperatorEnv, name: str) -> dict[str, int]:
    return {pod: int(bid) for pod, (_, bid, _) in env.labelled(name).items() if bid}


def _master_to_ordinal_0(env: OperatorEnv, name: str) -> None:
    ids = _ids(env, name)
    master = env.master_pod(name)
    if master is not None and master.metadata.name == f"{name}-0":
        return
    env.patch_group(name, {"metadata": {"annotations": {SWITCHOVER: str(ids[f"{name}-0"])}}})
    wait_for(
        f"the master on {name}-0",
        lambda: (p := env.master_pod(name)) is not None and p.metadata.name == f"{name}-0",
        30,
    )


def _progressing(env: OperatorEnv, name: str) -> str:
    for c in (env.group(name).get("status") or {}).get("conditions") or []:
        if c["type"] == "Progressing":
            return f"{c['reason']}: {c['message']}"
    return ""


def _scale_down_keeps_the_in_sync_copy(
    env: OperatorEnv, cluster: Any, tmp: Path, name: str, start: int, end: int
) -> None:
    env.create_group(name, start, ha={"minInSyncReplicas": 2})
    env.wait_available(name, start, 120)
    _master_to_ordinal_0(env, name)
    env.wait_available(name, start, 60)
    ids = _ids(env, name)
    top = f"{name}-{start - 1}"
    paused = [
        env.core.read_namespaced_pod(f"{name}-{i}", env.namespace) for i in range(1, start - 1)
    ]
    for pod in paused:
        cluster.pause_pod(pod)
    expected = (ids[f"{name}-0"], ids[top])
    wait_for(
        f"the SyncStateSet to be the master and {top} only",
        lambda: (
            tuple(
                sorted(env.controllers.replica_info(env.namespace, name).get("syncStateSet") or [])
            )
            == tuple(sorted(expected))
        ),
        60,
    )
    sampler = SyncStateSetSampler(env, name)
    sampler.start()
    producer = SteadyProducer(env, name, tmp / "acks.jsonl")
    producer.start()
    env.patch_group(name, {"spec": {"replicas": end}})
    # The operator must hold the top replica while it is the only in-sync slave.
    reason = wait_for(
        "the scale-down to wait (or the top pod to go)",
        lambda: (
            ("scale down waits" in (text := _progressing(env, name)) and text)
            or (top not in env.labelled(name) and f"{top} removed")
        ),
        60,
    )
    assert "fewer than minInSyncReplicas 2" in reason, reason
    assert top in env.labelled(name)
    # Highest ordinal first: once a resumed slave is back in sync the operator may remove
    # the top pod and then the next one down at once, so a lower-first loop could reach a
    # pod already removed (CI: orders-3 gone while orders-1 was resumed). A pod can only be
    # removed after some lower one rejoined, and those are resumed after it.
    for pod in reversed(paused):
        cluster.resume_pod(pod)
    env.wait_available(name, end, 180)
    producer.stop()
    samples = sampler.stop()
    assert [s for s in samples if len(s[1]) < 2] == [], samples
    acked = acked_keys(tmp / "acks.jsonl")
    assert acked, "no write was acknowledged during the scale-down"
    address = wait_for("the client Service's endpoint", lambda: env.service_address(name), 30)
    missing = sorted(set(acked) - set(env.consume_keys(address, "S")))
    assert missing == [], f"{len(missing)} acknowledged keys lost, e.g. {missing[:5]}"
    claims = {c.metadata.name for c in env.core.list_namespaced_persistent_volume_claim(
        env.namespace).items}  # fmt: skip
    assert {f"data-{name}-{i}" for i in range(start)} <= claims, sorted(claims)
    scaling = [m for r, m in env.group_events(name) if r == "Scaling"]
    assert scaling == [
        f"scale down: removing pod ordinal {i} (broker {ids[f'{name}-{i}']}): {i + 1} → {i}"
        for i in range(start - 1, end - 1, -1)
    ], scaling


def test_scale_3_to_2_keeps_the_only_in_sync_slave(
    env: OperatorEnv, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = request.getfixturevalue("k8s_cluster")
    _scale_down_keeps_the_in_sync_copy(env, cluster, tmp_path, "orders", 3, 2)


def test_scale_5_to_3_keeps_the_only_in_sync_slave(
    env: OperatorEnv, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cluster = request.getfixturevalue("k8s_cluster")
    _scale_down_keeps_the_in_sync_copy(env, cluster, tmp_path, "orders", 5, 3)


def _on_update_revision_and_ready(env: OperatorEnv, name: str, replicas: int) -> bool:
    sts = env.apps.read_namespaced_stateful_set(name, env.namespace)
    revision = sts.status.update_revision
    pods = [p for p in env.pods(name) if p.metadata.deletion_timestamp is None]
    return len(pods) == replicas and all(
        (p.metadata.labels or {}).get("controller-revision-hash") == revision
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        for p in pods
    )


def test_bad_template_reverted_recovers_without_deleting_pods(env: OperatorEnv) -> None:
    env.create_group("orders", 3, ha={"minInSyncReplicas": 2})
    env.wait_available("orders", 3)
    good = env.apps.read_namespaced_stateful_set("orders", env.namespace).status.update_revision
    env.patch_group(
        "orders", {"spec": {"template": {"nodeSelector": {"brokergroup.io/nowhere": "true"}}}}
    )

    def pending() -> str | None:
        for p in env.pods("orders"):
            rev = (p.metadata.labels or {}).get("controller-revision-hash")
            if (
                rev != good
                and p.status.phase == "Pending"
                and p.metadata.deletion_timestamp is None
            ):
                return str(p.metadata.name)
        return None

    stuck = wait_for("a rolled pod Pending on the bad template", pending, 60)
    env.patch_group("orders", {"spec": {"template": {"nodeSelector": None}}})
    wait_for(
        f"every pod Ready on the current revision after the revert ({stuck} was stuck)",
        lambda: _on_update_revision_and_ready(env, "orders", 3),
        120,
        0.5,
    )
    revision = env.apps.read_namespaced_stateful_set("orders", env.namespace).status
    assert revision.update_revision == good
    env.wait_available("orders", 3, 60)
    restarts = [m for r, m in env.group_events("orders") if r == "RollingUpdate"]
    assert any(m.startswith(f"restarting {stuck} ") and "stuck" in m for m in restarts), restarts
