"""`kubectl brokergroup …` against a real group (issue 22 item 7).

The installed `kubectl-brokergroup` runs through the tier's own kubectl
(`kubectl brokergroup …`, the virtualenv's bin on PATH, KUBECONFIG set), as
a user runs it, against the operator scenarios' setup (three controllers,
the operator as a process, a 3-replica BrokerGroup with minInSyncReplicas 2
whose pods the tier's node runs). In order:

- `status` names the master pod and BrokerId the labels say; `--json` too;
- `switchover` by pod name, then by BrokerId, each moves the master;
- a switchover to the current master fails at once ("is already the
  master", nothing asked); one to an unregistered BrokerId fails with the
  operator's SwitchoverRefused reason long before its --wait would end;
- `restart --wait` rolls every pod, slaves first and the old master last
  (the rolling update's transcript), with writes flowing and none
  acknowledged lost;
- `report` writes a tarball with the objects, events and each pod's log
  (served by the tier's kubelet log endpoint), the Secret's values nowhere.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.cluster import test_operator_scenarios as scenarios
from tests.cluster.operator_env import BIN, OperatorEnv, Writer, acked_keys
from tests.cluster.tier.paths import k8s_bin_dir

pytestmark = pytest.mark.cluster
# The operator scenarios' fixtures: a namespace with controllers, the Secret and the operator.
crds_applied = scenarios.crds_applied
env = scenarios.env
#: Generous for a loaded 2-core machine; a refusal must end the command long before.
SWITCHOVER_WAIT_S = 120


def kubectl_brokergroup(
    env: OperatorEnv, *args: str, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(BIN), str(k8s_bin_dir()), os.environ.get("PATH", "")])
    return subprocess.run(
        [str(k8s_bin_dir() / "kubectl"), "brokergroup", *args, "-n", env.namespace],
        env={**os.environ, "PATH": path, "KUBECONFIG": str(env.kubeconfig)},
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"rc {result.returncode}: {result.stderr}{result.stdout}"
    return result.stdout


def master_of(env: OperatorEnv) -> tuple[str, str]:
    pod = env.master_pod("orders")
    assert pod is not None
    return pod.metadata.name, pod.metadata.labels["brokergroup.io/broker-id"]


def test_kubectl_brokergroup(env: OperatorEnv, tmp_path: Path) -> None:
    env.create_group("orders", 3, ha={"minInSyncReplicas": 2})
    env.wait_available("orders", 3)
    pod, bid = master_of(env)

    # status
    text = ok(kubectl_brokergroup(env, "status", "orders"))
    assert f"master: broker {bid} at {pod} (" in text, text
    doc = json.loads(ok(kubectl_brokergroup(env, "status", "bg/orders", "--json")))
    assert (doc["master"]["pod"], str(doc["master"]["brokerId"])) == (pod, bid)
    assert sorted(b["pod"] for b in doc["brokers"]) == ["orders-0", "orders-1", "orders-2"]

    # switchover by pod name, then by BrokerId
    slaves = sorted(p for p in env.labelled("orders") if p != pod)
    ok(
        kubectl_brokergroup(
            env, "switchover", "orders", slaves[0], "--wait", str(SWITCHOVER_WAIT_S)
        )
    )
    assert master_of(env)[0] == slaves[0]
    env.wait_available("orders", 3)
    target = env.labelled("orders")[slaves[1]][1]
    assert target is not None
    ok(kubectl_brokergroup(env, "switchover", "orders", target, "--wait", str(SWITCHOVER_WAIT_S)))
    assert master_of(env) == (slaves[1], target)
    env.wait_available("orders", 3)

    # refusals: at once, with the reason
    already = kubectl_brokergroup(env, "switchover", "orders", slaves[1], "--wait", "600")
    assert already.returncode == 1
    assert f"broker {target} ({slaves[1]}) is already the master" in already.stderr
    assert "brokergroup.io/switchover-to" not in (
        env.group("orders")["metadata"].get("annotations") or {}
    )
    refused = kubectl_brokergroup(env, "switchover", "orders", "9", "--wait", "600", timeout_s=60)
    assert refused.returncode == 1
    assert refused.stderr.strip().endswith(
        "SwitchoverRefused: broker 9 is not registered with the controller"
    ), refused.stderr

    # restart: the safe roll, with writes flowing
    env.wait_available("orders", 3)
    old_master = master_of(env)[1]
    ids = tuple(sorted(b for _, b, _ in env.labelled("orders").values() if b))
    ack_log = tmp_path / "acks.jsonl"
    observer = scenarios.RollObserver(env, "orders")
    observer.start()
    try:
        with Writer(env, "orders", "R", "restart", ack_log) as writer:
            out = ok(kubectl_brokergroup(env, "restart", "orders", "--wait", "240", timeout_s=300))
            env.wait_available("orders", 3, 60)
    finally:
        observer.stop()
    assert "bg/orders restarted: 3/3 pods ready on revision" in out, out
    observer.assert_slaves_first(old_master, ids)
    acked = acked_keys(ack_log)
    assert acked, f"no write was acknowledged during the restart:\n{writer.report()}"
    scenarios._assert_nothing_lost(env, "orders", "R", acked)

    # report
    path = tmp_path / "report.tar.gz"
    out = ok(kubectl_brokergroup(env, "report", "orders", "-o", str(path)))
    with tarfile.open(path) as tar:
        members = {
            m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
        }
    assert {
        "brokergroup.json", "status.txt", "events.json", "objects/pods.json",
        "objects/statefulsets.json", "objects/services.json", "objects/configmaps.json",
        "secrets/orders-credentials.json",
    } <= set(members), sorted(members)  # fmt: skip
    assert sorted(p for p in members if p.startswith("logs/")) == [
        f"logs/orders-{i}/broker.log" for i in range(3)
    ], (sorted(members), members.get("errors.txt"))
    for i in range(3):
        assert members[f"logs/orders-{i}/broker.log"].startswith("--- start #1 at ")
    assert json.loads(members["brokergroup.json"])["metadata"]["name"] == "orders"
    reasons = {e["reason"] for e in json.loads(members["events.json"])}
    assert {"Switchover", "SwitchoverRefused", "RollingUpdate"} <= reasons, reasons
    # The group's credentials (the operator's Secret, all the pods hold) nowhere.
    secret = env.core.read_namespaced_secret("orders-credentials", env.namespace)
    values = [base64.b64decode(v).decode() for v in secret.data.values()]
    assert len(values) == 5
    assert [p for p, text in members.items() for v in values if v in text] == []
    assert json.loads(members["secrets/orders-credentials.json"])["data"] == {
        "broker-credential": "<redacted>", "client-credential": "<redacted>",
        "ha-secret": "<redacted>", "rocketmq-client-credentials": "<redacted>",
        "rocketmq-credentials": "<redacted>",
    }  # fmt: skip
