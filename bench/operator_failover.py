"""Operator failover benchmark (DESIGN.md §9 "Operator"; issue 11 "Must show").

    .venv/bin/python bench/operator_failover.py --quick   # 5 deletions + 2 crashes
    .venv/bin/python bench/operator_failover.py           # 20 deletions + 5 crashes
    .venv/bin/python bench/operator_failover.py --node-loss 10   # 3 nodes, 10 node losses

Runs on the cluster tier (docs/development.md): without `--kubeconfig` (or
BROKERGROUP_TEST_KUBECONFIG) it starts the tier's control plane and process
kubelet itself and ends them afterwards; with one, it uses that cluster (its
node must run pods as local processes of this checkout). In its own namespace it starts three
controllers, the operator (`brokergroup operator`) and a 3-replica
BrokerGroup (tests/cluster/operator_env.py does the setup), then per round:

1. waits until the group is healthy (Available, all three in the SyncStateSet,
   one master label) and writes 20 keyed messages through the master Service;
2. deletes the master pod (or, for the crash case, kills the broker process
   inside it: the container restarts in the same pod) and times
   - `label_s`: → another pod carries `brokergroup.io/role=master`, polled
     every 10 ms through the API server;
   - `write_s`: → the first acknowledged write through the master Service
     (the ready pod its selector picks), retried every 20 ms.
At the end every acknowledged key is read back from the master: `acked_lost`
must be 0. The ceiling printed with the numbers is what the API server
itself costs in the same run: a GET of a pod, and a label patch until a
reader sees it (the operator needs at least one of each after an election).

Writes bench/results/operator_failover.json; the last stdout line is one JSON
object with `deletions`, `p50_label_s`, `p99_label_s`, `p50_write_s`,
`p99_write_s`, `acked_lost` and the crash case.

`--node-loss N` runs the node-loss rounds instead (bench/node_loss.py): three
nodes, one pod per node, the master's node frozen N times under steady
producers, the history judged by the chaos checker; it writes
bench/results/operator_node_loss.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_last_line, summarize, write_result

from brokergroup_broker.protocol.client import BrokerConnection
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_remoting.keys import read_key_file
from brokergroup_remoting.net import Credentials
from tests.cluster.operator_env import OperatorEnv, apply_crds, wait_for

TOPIC = "bench"
NAME = "bench"


def _pair(env: OperatorEnv) -> Credentials | None:
    """The group's client pair: brokers authenticate their client port."""
    path = env.client_key_file(NAME)
    return None if path is None else read_key_file(str(path))


async def _send_one(address: str, key: str, pair: Credentials | None) -> bool:
    try:
        conn = await asyncio.wait_for(BrokerConnection.connect(address, credentials=pair), 1.0)
    except (OSError, TimeoutError, ConnectionError):
        return False
    try:
        await asyncio.wait_for(
            conn.send(TOPIC, [ProduceMessage(TOPIC, key.encode(), key=key)]), 4.0
        )
        return True
    except Exception:
        return False
    finally:
        await conn.close()


def first_write(env: OperatorEnv, key: str, deadline_s: float = 30.0) -> float:
    """Seconds from now until one write through the master Service is acknowledged."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline_s:
        address = env.service_address(NAME)
        if address and asyncio.run(_send_one(address, key, _pair(env))):
            return time.monotonic() - t0
        time.sleep(0.02)
    raise AssertionError(f"no acknowledged write within {deadline_s}s")


def write_batch(env: OperatorEnv, prefix: str, count: int) -> list[str]:
    address = wait_for("the master Service", lambda: env.service_address(NAME), 30)
    keys = [f"{prefix}{i}" for i in range(count)]

    async def send() -> None:
        conn = await BrokerConnection.connect(address, credentials=_pair(env))
        try:
            await conn.send(TOPIC, [ProduceMessage(TOPIC, k.encode(), key=k) for k in keys])
        finally:
            await conn.close()

    asyncio.run(send())
    return keys


def one_round(env: OperatorEnv, n: int, crash: bool) -> dict[str, Any]:
    env.wait_available(NAME, 3, 120)
    acked = write_batch(env, f"r{n}-", 20)
    old = env.master_pod(NAME)
    assert old is not None
    old_id = old.metadata.labels["brokergroup.io/broker-id"]
    t0 = time.monotonic()
    if crash:
        env.crash_broker(old)
    else:
        env.delete_pod(old.metadata.name)

    def moved() -> bool:
        pod = env.master_pod(NAME)
        return pod is not None and pod.metadata.labels["brokergroup.io/broker-id"] != old_id

    wait_for("the new master label", moved, 30, 0.01)
    label_s = time.monotonic() - t0
    write_s = label_s + first_write(env, f"w{n}")
    acked.append(f"w{n}")
    return {"label_s": round(label_s, 4), "write_s": round(write_s, 4), "acked": acked}


def ceiling(env: OperatorEnv, samples: int = 20) -> dict[str, Any]:
    pod = env.pods(NAME)[0]
    gets = []
    patches = []
    for i in range(samples):
        t0 = time.monotonic()
        env.core.read_namespaced_pod(pod.metadata.name, env.namespace)
        gets.append(time.monotonic() - t0)
        t0 = time.monotonic()
        env.core.patch_namespaced_pod(
            pod.metadata.name, env.namespace, {"metadata": {"labels": {"bench/probe": str(i)}}}
        )
        wait_for(
            "the probe label",
            lambda i=i: (
                (
                    env.core.read_namespaced_pod(pod.metadata.name, env.namespace).metadata.labels
                    or {}
                ).get("bench/probe")
                == str(i)
            ),
            5,
            0.005,
        )
        patches.append(time.monotonic() - t0)
    env.core.patch_namespaced_pod(
        pod.metadata.name, env.namespace, {"metadata": {"labels": {"bench/probe": None}}}
    )
    return {"api_get_s": summarize(gets), "label_patch_visible_s": summarize(patches)}


def start_tier(nodes: int = 1) -> tuple[Any, list[Any]] | str:
    """The cluster tier's control plane and process kubelet (tests/cluster/tier),
    in a temporary state directory; a reason string where it cannot run.
    Returns the control plane and the kubelets of node-1..node-`nodes`."""
    import subprocess

    from tests.cluster.tier.controlplane import NODE_NAME, NODE_NAMES, ControlPlane
    from tests.cluster.tier.kubelet import ProcessKubelet
    from tests.cluster.tier.paths import BUILD_SCRIPT, missing_reason

    reason = missing_reason()
    if reason is not None:
        return reason
    subprocess.run([str(BUILD_SCRIPT)], check=True, capture_output=True)  # no-op when built
    state = Path(tempfile.mkdtemp(prefix="bg-opbench-tier-"))
    control_plane = ControlPlane(state / "control-plane")
    control_plane.start()
    kubelet = ProcessKubelet(
        control_plane.kubeconfig("node"), control_plane.admin_kubeconfig, state / "kubelet"
    )
    kubelets = [kubelet]
    try:
        kubelet.start()
        for name in NODE_NAMES[1:nodes]:
            extra = ProcessKubelet(
                control_plane.kubeconfig(name),
                control_plane.admin_kubeconfig,
                state / f"kubelet-{name}",
                node_name=name,
                share_with=kubelet,
            )
            kubelets.append(extra)
            extra.start()
        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(control_plane.admin_kubeconfig))
        core = client.CoreV1Api(api)
        for name in [NODE_NAME, *NODE_NAMES[1:nodes]]:
            wait_for(
                f"{name} Ready",
                lambda name=name: any(
                    c.type == "Ready" and c.status == "True"
                    for c in core.read_node(name).status.conditions or []
                ),
                60,
            )
    except BaseException:
        for k in reversed(kubelets):
            k.stop()
        control_plane.stop()
        raise
    return control_plane, kubelets


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 deletions + 2 crashes")
    parser.add_argument("--deletions", type=int, default=None)
    parser.add_argument("--crashes", type=int, default=None)
    parser.add_argument("--kubeconfig", default=os.environ.get("BROKERGROUP_TEST_KUBECONFIG"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--note", default="", help="what cluster this ran on (kept in the JSON)")
    parser.add_argument(
        "--node-loss", type=int, default=None, metavar="N",
        help="N node-loss rounds on three nodes instead (the tier only)",
    )  # fmt: skip
    parser.add_argument(
        "--frozen-s", type=float, default=8.0, help="how long each lost node stays frozen"
    )
    args = parser.parse_args()
    tier = None
    crash = None
    hosts: tuple[str, ...] = ("127.0.6.1", "127.0.6.2", "127.0.6.3")
    if args.node_loss is not None and args.kubeconfig:
        print("operator_failover: --node-loss needs the tier's own nodes", file=sys.stderr)
        return 2
    if not args.kubeconfig:
        tier = start_tier(3 if args.node_loss is not None else 1)
        if isinstance(tier, str):
            print(f"operator_failover: {tier}", file=sys.stderr)
            return 2
        args.kubeconfig = str(tier[0].admin_kubeconfig)
        crash = tier[1][0].crash_pod
        # Pods have their own network namespaces: the controllers listen where pods reach.
        hosts = tuple(tier[1][0].host_address() for _ in range(3))
    try:
        if args.node_loss is not None:
            assert tier is not None
            nodes = {k.node_name: k for k in tier[1]}
            return run_node_loss(args, lambda pod: nodes[pod.spec.node_name], hosts)
        return run(args, crash, hosts)
    finally:
        if tier is not None:
            for kubelet in reversed(tier[1]):
                kubelet.stop()
            tier[0].stop()


def run_node_loss(args: argparse.Namespace, node_of: Any, hosts: tuple[str, ...]) -> int:
    from node_loss import run_rounds

    apply_crds(args.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="bg-nodeloss-"))
    namespace = f"nodeloss-{uuid.uuid4().hex[:6]}"
    env = OperatorEnv(args.kubeconfig, namespace, work, hosts)
    env.core.create_namespace({"metadata": {"name": namespace}})
    started = time.monotonic()
    try:
        env.start()
        outcome = run_rounds(env, node_of, NAME, args.node_loss, args.frozen_s)
    finally:
        env.close()
        env.core.delete_namespace(namespace)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    rounds = outcome["rounds"]
    label = [r["label_s"] for r in rounds]
    write = [r["write_s"] for r in rounds]
    findings = outcome["findings"]
    result = {
        "node_losses": len(rounds),
        "frozen_s": args.frozen_s,
        "p50_label_s": summarize(label)["p50"],
        "p99_label_s": summarize(label)["p99"],
        "p50_write_s": summarize(write)["p50"],
        "p99_write_s": summarize(write)["p99"],
        "lost": findings["lost"],
        "order_violations": findings["order_violations"],
        "duplicated": findings["duplicated"],
        "acknowledged": findings["acknowledged"],
        "label_s": summarize(label),
        "write_s": summarize(write),
        "rounds": rounds,
        "findings": findings,
        "elapsed_s": round(time.monotonic() - started, 1),
        "cluster": {"nodes": ["node-1", "node-2", "node-3"], "note": args.note},
    }
    write_result("operator_node_loss", result)
    print_last_line(
        {
            k: result[k]
            for k in (
                "node_losses", "p50_label_s", "p99_label_s", "p50_write_s", "p99_write_s",
                "lost", "order_violations", "duplicated", "acknowledged", "elapsed_s",
            )
        }
    )  # fmt: skip
    return 0 if findings["data_safe"] and findings["lost"] == 0 else 1


def run(args: argparse.Namespace, crash: Any, hosts: tuple[str, ...]) -> int:
    deletions = args.deletions if args.deletions is not None else (5 if args.quick else 20)
    crashes = args.crashes if args.crashes is not None else (2 if args.quick else 5)
    apply_crds(args.kubeconfig)
    work = Path(tempfile.mkdtemp(prefix="bg-opbench-"))
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    env = OperatorEnv(args.kubeconfig, namespace, work, hosts, crash=crash)
    env.core.create_namespace({"metadata": {"name": namespace}})
    started = time.monotonic()
    from kubernetes import client

    version = client.VersionApi(env.api).get_code()
    cluster = {
        "apiServer": version.git_version,
        "nodes": sorted(
            f"{n.metadata.name} ({n.status.node_info.kubelet_version or 'process kubelet'})"
            if n.status.node_info
            else n.metadata.name
            for n in env.core.list_node().items
        ),
    }
    try:
        env.start()
        env.create_group(NAME, 3, ha={"minInSyncReplicas": 2})
        env.wait_available(NAME, 3, 120)
        ceil = ceiling(env)
        print(
            f"ceiling: API GET p50 {ceil['api_get_s']['p50']}s, label patch visible p50 "
            f"{ceil['label_patch_visible_s']['p50']}s",
            file=sys.stderr,
        )
        rounds = [one_round(env, i, crash=False) for i in range(deletions)]
        crash_rounds = [one_round(env, deletions + i, crash=True) for i in range(crashes)]
        env.wait_available(NAME, 3, 120)
        acked = [k for r in rounds + crash_rounds for k in r["acked"]]
        address = wait_for("the master Service", lambda: env.service_address(NAME), 30)
        read = set(env.consume_keys(address, TOPIC))
        lost = sorted(set(acked) - read)
    finally:
        env.close()
        env.core.delete_namespace(namespace)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    label = [r["label_s"] for r in rounds]
    write = [r["write_s"] for r in rounds]
    crash_label = [r["label_s"] for r in crash_rounds]
    crash_write = [r["write_s"] for r in crash_rounds]
    result = {
        "deletions": deletions,
        "p50_label_s": summarize(label)["p50"],
        "p99_label_s": summarize(label)["p99"],
        "p50_write_s": summarize(write)["p50"],
        "p99_write_s": summarize(write)["p99"],
        "acked_lost": len(lost),
        "acked": len(acked),
        "crashes": crashes,
        "crash_p50_label_s": summarize(crash_label)["p50"],
        "crash_p99_label_s": summarize(crash_label)["p99"],
        "crash_p99_write_s": summarize(crash_write)["p99"],
        "label_s": summarize(label),
        "write_s": summarize(write),
        "crash_label_s": summarize(crash_label),
        "crash_write_s": summarize(crash_write),
        "ceiling": ceil,
        "elapsed_s": round(time.monotonic() - started, 1),
        "cluster": {**cluster, "note": args.note},
        "quick": bool(args.quick),
    }
    write_result("operator_failover", result)
    print_last_line(
        {
            k: result[k]
            for k in (
                "deletions",
                "p50_label_s",
                "p99_label_s",
                "p50_write_s",
                "p99_write_s",
                "acked_lost",
                "crashes",
                "crash_p99_label_s",
                "crash_p99_write_s",
                "elapsed_s",
            )
        }
    )
    return 0 if not lost else 1


if __name__ == "__main__":
    sys.exit(main())
