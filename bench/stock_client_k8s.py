"""Stock-client failover inside a cluster, through the chart's Services (issue 19 item 7,
the cluster-tier row).

    .venv/bin/python bench/stock_client_k8s.py            # 10 master pod deletions
    .venv/bin/python bench/stock_client_k8s.py --kills 3  # a quick look

Runs on the cluster tier (docs/development.md; the tier's control plane and process kubelet
are started here and ended afterwards): `helm install` of the chart, a BrokerGroup of the
built-in broker, and the stock RocketMQ 5.3.1 client (tools/rocketmq/StockClient.java,
default client settings) in a pod, whose namesrvAddr is the chart's name server Service and
whose routes name the group's master Service as brokerId 0. The client's failover mode sends
sync messages in one thread throughout and logs every result with its currentTimeMillis.
Per kill: wait until the group is whole (Available, 3 in sync) and a SEND_OK has come, note
the time, delete the master pod (grace period 0: the broker process is killed at once, like
a SIGKILL), then
- `failover_s`: the client's outage, the longest gap between consecutive SEND_OKs from the
  last one before the deletion to the new master's first (the first stamped after the label
  was seen). Not deletion → first SEND_OK: the API deletion returns before the kubelet has
  killed the broker, and the old master acknowledges sends until then (a first run measured
  p50 0.018 s that way, before the new master was even labelled);
- `label_s`: → another pod carries `brokergroup.io/role=master` (polled through the API
  server every 20 ms): the master Service cannot point at the new master sooner, so this is
  the ceiling the client's number is read against.
At the end a new consumer group reads the topic: `acked_lost` counts SEND_OK messages that
did not come back with their body (must be 0).

Writes bench/results/stock_client_k8s.json; the last stdout line is one JSON object with
`brokergroup_failover_p50_s`, `brokergroup_failover_p99_s`, `label_p50_s`, `kills`,
`acked_lost`. Skips (exit 2, saying why) without the tier's binaries, Java or the jars.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import print_last_line, summarize, write_result
from operator_failover import start_tier

from tests.cluster.operator_env import apply_crds, wait_for
from tests.cluster.test_stock_client_in_cluster import (
    CHART,
    GROUP,
    NAMESRV_SERVICE,
    RELEASE,
    StockClientPods,
    _credentials,
    _route_or_none,
    _send_oks,
)
from tools.rocketmq import stock_client

TOPIC = "K8sBenchFailover"


def _deleted_now(env: Any, pod_name: str) -> None:
    env.core.delete_namespaced_pod(pod_name, env.namespace, grace_period_seconds=0)


def one_kill(env: Any, log: Path) -> tuple[float, float]:
    """One master pod deletion on a whole group: (label_s, failover_s)."""
    env.wait_available(GROUP, 3, timeout_s=300)
    wait_for(
        "3 in the SyncStateSet",
        lambda: len(env.group(GROUP)["status"].get("syncStateSet") or []) == 3,
        300,
    )
    since = int(time.time() * 1000)
    wait_for("a SEND_OK", lambda: any(t > since for t in _send_oks(log)), 180)
    old = env.master_pod(GROUP)
    assert old is not None
    killed_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    _deleted_now(env, old.metadata.name)

    def relabelled() -> bool:
        pod = env.master_pod(GROUP)
        return pod is not None and pod.metadata.name != old.metadata.name

    wait_for("a new master labelled", relabelled, 180, every_s=0.02)
    label_s = time.monotonic() - t0
    # The API deletion returns before the kubelet has killed the broker: sends started after it
    # may still be acknowledged by the old master. The new master is reachable through the
    # Service only once labelled, so its first SEND_OK comes after `labelled_ms`; what the
    # client saw is the gap between the SEND_OKs around that moment.
    labelled_ms = int(time.time() * 1000)
    first = wait_for(
        "a SEND_OK from the new master",
        lambda: min((t for t in _send_oks(log) if t >= labelled_ms), default=None),
        180,
        every_s=0.05,
    )
    time.sleep(1)  # the SEND_OKs after the first, for the gap
    return label_s, outage_s(_send_oks(log), killed_ms, first)


def outage_s(send_oks: list[int], killed_ms: int, first_new_ms: int) -> float:
    """The longest gap between consecutive SEND_OKs (ms stamps) from the last one before the
    deletion to the new master's first: what the client saw of the failover."""
    before = [t for t in send_oks if t <= killed_ms]
    window = sorted(t for t in send_oks if killed_ms < t <= first_new_ms)
    stamps = [max(before), *window] if before else window
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return max(gaps, default=0) / 1000


def run(cluster: Any, kills: int, work: Path) -> dict[str, Any]:
    from tests.cluster.test_chart_in_cluster import CONTROLLER_SELECTOR, InClusterEnv

    apply_crds(str(cluster.kubeconfig))
    namespace = f"stockbench-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    env = InClusterEnv(cluster, namespace, work)
    cluster.helm(
        "install", RELEASE, str(CHART), "-n", namespace,
        "--set", f"operator.watchNamespaces={{{namespace}}}",
        "--set", "controller.storage.size=64Mi",
    )  # fmt: skip
    try:
        wait_for("3 controllers with one leader", env.whole_quorum, 180)
        wait_for("3 controllers Ready", lambda: len(env.ready_pods(CONTROLLER_SELECTOR)) == 3, 180)
        env.create_group(GROUP, 3, config={"autoCreateTopicEnable": True})
        env.wait_available(GROUP, 3, timeout_s=300)
        credentials = _credentials(env)
        client = stock_client.StockClient(
            f"{NAMESRV_SERVICE}.{namespace}.svc:9876",
            work / "client",
            credentials.access_key,
            credentials.secret_key,
        )
        pods = StockClientPods(env, client, work)
        service = env.core.read_namespaced_service(NAMESRV_SERVICE, namespace)
        namesrv_ip = f"{service.spec.cluster_ip}:9876"
        acks, log, stop = work / "acks.tsv", work / "failover.log", work / "stop"
        sender, sender_out = pods.start(
            "failover", topic=TOPIC, acks=acks, log=log, stop=stop, seconds=7200, run="bench"
        )
        failover_s: list[float] = []
        label_s: list[float] = []
        try:
            for kill in range(kills):
                label, failover = one_kill(env, log)
                label_s.append(label)
                failover_s.append(failover)
                print(
                    f"kill {kill + 1}/{kills}: label {label:.3f} s, client outage {failover:.3f} s",
                    flush=True,
                )
        finally:
            stop.touch()
        pods.wait(sender, sender_out, 180)
        env.wait_available(GROUP, 3, timeout_s=300)
        # The last new master registers the topic on its next periodic registration (≤ 30 s).
        wait_for("the topic's route", lambda: _route_or_none(namesrv_ip, credentials, TOPIC), 90)
        verify = pods.run("verify", timeout_s=900, topic=TOPIC, acks=acks, idle_s=30)[-1]
    finally:
        env.close()
        cluster.helm("uninstall", RELEASE, "-n", namespace, check=False)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    failover = summarize(failover_s, 3)
    label = summarize(label_s, 3)
    return {
        "bench": "stock_client_k8s",
        "where": "cluster tier: chart controllers + operator, built-in broker group of 3, "
        "stock client 5.3.1 in a pod through the name server and master Services",
        "kills": kills,
        "brokergroup_failover_p50_s": failover["p50"],
        "brokergroup_failover_p99_s": failover["p99"],
        "brokergroup_failover_max_s": failover["max"],
        "label_p50_s": label["p50"],
        "label_p99_s": label["p99"],
        "failover_s": failover_s,
        "label_s": [round(x, 3) for x in label_s],
        "acked": verify["acked"],
        "acked_lost": verify["lost"] + verify["badBody"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    args = parser.parse_args()
    reason = stock_client.missing()
    if reason is not None:
        print(f"stock_client_k8s: {reason}", file=sys.stderr)
        return 2
    tier = start_tier(1)
    if isinstance(tier, str):
        print(f"stock_client_k8s: {tier}", file=sys.stderr)
        return 2
    control_plane, kubelets = tier
    from tests.cluster.conftest import K8sCluster

    cluster = K8sCluster(control_plane, kubelets[0])
    try:
        with tempfile.TemporaryDirectory(prefix="bg-stockbench-") as work:
            result = run(cluster, args.kills, Path(work))
    finally:
        for kubelet in reversed(kubelets):
            kubelet.stop()
        control_plane.stop()
    print(
        f"ceiling: the master Service follows the role label; new master labelled p50 "
        f"{result['label_p50_s']} s, p99 {result['label_p99_s']} s after the deletion "
        f"(client outage p50 {result['brokergroup_failover_p50_s']} s)"
    )
    write_result("stock_client_k8s", result)
    print_last_line(result)
    return 0 if result["acked_lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
