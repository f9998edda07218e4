"""The RocketMQ 5 SDKs over gRPC through the chart's and the operator's Services (issue 35
item 5, cluster tier).

`helm install` of the chart (controllers, operator), one BrokerGroup `orders` of the built-in
broker with autoCreateTopicEnable. The SDK applications run in pods of the cluster, with the
group's client pair mapped from the Secret `orders-rocketmq-client` the operator writes (as an
application would mount it) and the group's stable gRPC endpoint, the master Service
`orders.<ns>.svc:8081`, resolved by the pod's cluster DNS and reached through the Service
proxy:

1. the official Python SDK (rocketmq-python-client, tests/cluster/grpc_sdk_app.py): a Producer
   sends normal messages (tag, keys, user properties) and FIFO ones in three message groups;
   a SimpleConsumer receives and acks them, compared field by field (message id, body, tag,
   keys, properties, message group) and per message group in send order; an unacked message
   comes back after its invisible time with its delivery attempt raised, a changed invisible
   duration gives a new receipt handle, and once acked it does not come again (POP receive,
   ack, revive);
2. the Java 5.x SDK (rocketmq-client-java from Maven Central, tools/rocketmq/GrpcSdkClient.java)
   sends normal and FIFO messages and receives them, compared the same way (skipped, saying
   why, without Java, Maven or Maven Central);
3. the master pod is deleted while a Python SDK Producer sends continuously: sends are
   acknowledged again once the new master is labelled (through the same Service: no route
   refresh), and a new consumer group receives every acknowledged message with its body
   (lost 0). The SDK's longest wait between two acknowledged sends from the deletion on is
   printed, not asserted (bench/ holds the timings).

The client pods are processes of this machine (the process kubelet): their commands name the
app and the compiled Java client by host paths and write their JSON lines to files of the
module's tmp dir. On the code before the gRPC front end nothing listens on the Service's gRPC
port and every SDK call fails: the first test fails at its send.
"""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import apply_crds, wait_for
from tests.cluster.test_chart_in_cluster import (
    CHART,
    CONTROLLER_SELECTOR,
    RELEASE,
    InClusterEnv,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
APP = Path(__file__).resolve().parent / "grpc_sdk_app.py"
GROUP = "orders"
GRPC_SERVICE_PORT = 8081


def secret_env(secret: str) -> list[dict[str, Any]]:
    """The group's client pair as the SDK apps read it (ROCKETMQ_ACCESS_KEY/SECRET_KEY)."""
    pairs = (("ROCKETMQ_ACCESS_KEY", "accessKey"), ("ROCKETMQ_SECRET_KEY", "secretKey"))
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for name, key in pairs
    ]


class SdkPods:
    """Runs SDK applications as pods of a namespace; their stdout goes to files of `work`."""

    def __init__(
        self,
        env: Any,
        work: Path,
        secret: str,
        image: str = "brokergroup:dev",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.env, self.work, self.secret, self.image = env, work, secret, image
        self.extra_env = extra_env or {}

    def start(self, name: str, argv: list[str]) -> tuple[str, Path]:
        name = f"{name}-{uuid.uuid4().hex[:6]}"
        out = self.work / f"{name}.jsonl"
        err = out.with_suffix(".err")
        script = f"exec {shlex.join(argv)} > {shlex.quote(str(out))} 2> {shlex.quote(str(err))}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "sdk-client"}},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": "client",
                        "image": self.image,
                        "command": ["sh", "-c", script],
                        "env": [
                            *secret_env(self.secret),
                            *({"name": k, "value": v} for k, v in self.extra_env.items()),
                        ],
                    }
                ],
            },
        }
        self.env.core.create_namespaced_pod(self.env.namespace, pod)
        return name, out

    def wait(self, name: str, out: Path, timeout_s: float = 300) -> list[dict[str, Any]]:
        def ended() -> str | None:
            phase = self.env.core.read_namespaced_pod(name, self.env.namespace).status.phase
            return phase if phase in ("Succeeded", "Failed") else None

        def printed() -> str:
            err = out.with_suffix(".err")
            text = out.read_text()[-3000:] if out.exists() else ""
            return text + "\n" + (err.read_text()[-3000:] if err.exists() else "")

        try:
            phase = wait_for(f"SDK pod {name} to end", ended, timeout_s, every_s=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it printed:\n{printed()}") from None
        text = out.read_text() if out.exists() else ""
        lines = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
        if phase != "Succeeded" or not lines or "summary" not in lines[-1]:
            raise AssertionError(f"SDK pod {name} {phase}:\n{printed()}")
        return lines

    def python(self, mode: str, endpoint: str, **options: object) -> Any:
        """Run grpc_sdk_app.py `mode` in a pod; every option goes to the app, and the pod is
        given the app's own worst case plus POD_START_S to end."""
        return self.wait(*self.start_python(mode, endpoint, **options),
                         timeout_s=app_worst_case_s(mode, options) + POD_START_S)  # fmt: skip

    def start_python(self, mode: str, endpoint: str, **options: object) -> tuple[str, Path]:
        argv = ["python", str(APP), mode, "--endpoint", endpoint]
        for key, value in options.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        return self.start(f"py-{mode}", argv)

    def java(self, home: Path, endpoint: str, **options: str) -> list[dict[str, Any]]:
        argv = ["java", "-cp", f"{home}/classes:{home}/lib/*", "GrpcSdkClient",
                f"endpoint={endpoint}", *(f"{k}={v}" for k, v in options.items())]  # fmt: skip
        return self.wait(*self.start(f"java-{options.get('mode', 'send')}", argv), timeout_s=300)


# A pod is a fresh Python that imports grpc and the SDK: seconds on a quiet machine, tens of
# seconds on a loaded 2-core one.
POD_START_S = 90.0
APP_TIMEOUT_S = 120.0  # grpc_sdk_app.py's --timeout-s default
APP_INVISIBLE_S = 15  # its --invisible-s default
APP_AWAIT_S = 2  # its consumers' long-polling await_duration


def app_worst_case_s(mode: str, options: dict[str, object]) -> float:
    """How long grpc_sdk_app.py `mode` may take by its own bounds (once its client started).

    The pod's wait derives from it: run 44 waited 60 s for a redeliver pod that may take 120 s
    for its first receive, 60 for the revived one and 15 (plus a long poll) for the check that
    nothing comes after the ack; on a loaded machine the pod's start alone took tens of them."""
    timeout_s = float(str(options.get("timeout_s", APP_TIMEOUT_S)))
    if mode != "redeliver":
        return timeout_s + APP_AWAIT_S
    invisible_s = float(str(options.get("invisible_s", APP_INVISIBLE_S)))
    return timeout_s + (invisible_s * 4 + 20) + (invisible_s + 5) + 3 * APP_AWAIT_S


def content(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["messageId"], line["body"], line["tag"], tuple(line["keys"]),
            tuple(sorted(line["props"].items())), line["group"])  # fmt: skip


def group_order(lines: list[dict[str, Any]]) -> dict[str, list[str]]:
    order: dict[str, list[str]] = defaultdict(list)
    for line in lines:
        if line["group"]:
            order[line["group"]].append(line["body"])
    return dict(order)


@pytest.fixture(scope="module")
def env(
    k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InClusterEnv]:
    apply_crds(str(k8s_cluster.kubeconfig))
    namespace = f"sdk-{uuid.uuid4().hex[:6]}"
    k8s_cluster.kubectl("create", "namespace", namespace)
    e = InClusterEnv(k8s_cluster, namespace, tmp_path_factory.mktemp("grpc-sdk-k8s"))
    installed = k8s_cluster.helm(
        "install", RELEASE, str(CHART), "-n", namespace,
        "--set", f"operator.watchNamespaces={{{namespace}}}",
        "--set", "controller.storage.size=64Mi",
    )  # fmt: skip
    assert "STATUS: deployed" in installed.stdout, installed.stderr
    try:
        wait_for("3 controllers with one leader", e.whole_quorum, 120)
        wait_for("3 controllers Ready", lambda: len(e.ready_pods(CONTROLLER_SELECTOR)) == 3, 120)
        e.create_group(GROUP, 3, config={"autoCreateTopicEnable": True})
        e.wait_available(GROUP, 3, timeout_s=240)
        yield e
    finally:
        e.close()
        k8s_cluster.helm("uninstall", RELEASE, "-n", namespace, check=False)
        k8s_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def pods(env: InClusterEnv) -> SdkPods:
    return SdkPods(env, env.work, f"{GROUP}-rocketmq-client")


@pytest.fixture(scope="module")
def endpoint(env: InClusterEnv) -> str:
    return f"{GROUP}.{env.namespace}.svc:{GRPC_SERVICE_PORT}"


def test_the_python_sdk_sends_receives_and_revives_through_the_master_service(
    pods: SdkPods, endpoint: str
) -> None:
    sent = pods.python("send", endpoint, topic="SdkNormal", count=20, run="pn")[:-1]
    sent += pods.python("send", endpoint, topic="SdkNormal", count=12, run="pf", fifo_groups=3)[:-1]
    got = pods.python("receive", endpoint, topic="SdkNormal", group="SdkNormalGroup",
                      count=32, timeout_s=120)[:-1]  # fmt: skip
    assert sorted(map(content, got)) == sorted(map(content, sent))
    assert [line["attempt"] for line in got] == [1] * 32
    assert (
        group_order(got)
        == group_order(sent)
        == {f"order-{g}": [f"pf-body-{i}" for i in range(12) if i % 3 == g] for g in range(3)}
    )

    # POP: unacked → revived after its invisible time (attempt 2) → acked → never again.
    (one,) = pods.python("send", endpoint, topic="SdkRevive", count=1, run="rv")[:-1]
    lines = pods.python("redeliver", endpoint, topic="SdkRevive", group="SdkReviveGroup",
                        invisible_s=10, timeout_s=60)[:-1]  # fmt: skip
    seen = [(x["phase"], x["messageId"], x["body"], x["attempt"]) for x in lines]
    assert seen == [
        ("first", one["messageId"], "rv-body-0", 1),
        ("again", one["messageId"], "rv-body-0", 2),
    ], lines
    assert lines[1]["newHandle"] is True


@pytest.fixture(scope="module")
def java_sdk() -> Path:
    """rocketmq-client-java from Maven Central and GrpcSdkClient.java compiled against it
    (tools/rocketmq/fetch_sdk.sh, cached outside the repository); skipped without them."""
    try:
        done = subprocess.run([str(REPO / "tools/rocketmq/fetch_sdk.sh")], capture_output=True,
                              text=True, timeout=600, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"the Java SDK could not be fetched: {exc}")
    if done.returncode != 0:
        pytest.skip(f"the Java SDK could not be fetched: {done.stderr.strip()[-300:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def test_the_java_sdk_sends_and_receives_through_the_master_service(
    pods: SdkPods, endpoint: str, java_sdk: Path
) -> None:
    sent = pods.java(java_sdk, endpoint, mode="send", topic="SdkJava", count="10", run="jn")[:-1]
    sent += pods.java(java_sdk, endpoint, mode="send", topic="SdkJava", count="9", run="jf",
                      fifo="true")[:-1]  # fmt: skip
    got = pods.java(java_sdk, endpoint, mode="receive", topic="SdkJava", group="SdkJavaGroup",
                    count="19", timeoutS="120")[:-1]  # fmt: skip
    assert sorted(map(content, got)) == sorted(map(content, sent))
    assert group_order(got) == {
        f"order-{g}": [f"jf-body-{i}" for i in range(9) if i % 3 == g] for g in range(3)
    }


def acks_of(path: Path) -> list[tuple[str, int, int]]:
    """(messageId, beganMs, doneMs) of every acknowledged send logged so far."""
    try:
        rows = path.read_text().splitlines()
    except OSError:
        return []
    return [(p[0], int(p[1]), int(p[2])) for p in (r.split("\t") for r in rows) if len(p) == 4]


def test_every_acknowledged_sdk_send_is_consumed_across_a_master_pod_deletion(
    env: InClusterEnv, pods: SdkPods, endpoint: str
) -> None:
    acks, stop = env.work / "failover.acks", env.work / "failover.stop"
    sender = pods.start_python("failover", endpoint, topic="SdkFailover", acks=acks, stop=stop,
                               run="fo")  # fmt: skip
    try:
        wait_for("50 acknowledged SDK sends", lambda: len(acks_of(acks)) >= 50, 120)
        group = env.group(GROUP)
        deleted_ms = int(time.time() * 1000)
        master = env.fail_over(list(group["status"]["syncStateSet"]))
        labelled_ms = int(time.time() * 1000)
        wait_for(
            "an SDK send begun after the label acknowledged",
            lambda: any(b > labelled_ms for _, b, _ in acks_of(acks)),
            120,
        )
        before = len(acks_of(acks))
        wait_for("50 more acknowledged sends", lambda: len(acks_of(acks)) >= before + 50, 120)
    finally:
        stop.touch()
    summary = pods.wait(*sender, timeout_s=120)[-1]
    done = sorted(d for _, _, d in acks_of(acks))
    # What the SDK saw: its longest wait between two acknowledged sends from the deletion on
    # (the old master may still acknowledge while it shuts down on SIGTERM).
    gap_ms = max(b - a for a, b in itertools.pairwise(done) if b > deleted_ms)
    after_label = min(d for _, b, d in acks_of(acks) if b > labelled_ms)
    print(
        f"\nmaster pod deleted → new master {master.metadata.name} labelled after "
        f"{(labelled_ms - deleted_ms) / 1000:.3f} s (polled); the SDK's longest gap between "
        f"acknowledged sends {gap_ms / 1000:.3f} s; first send begun after the label "
        f"acknowledged {(after_label - labelled_ms) / 1000:.3f} s after it; sender {summary}"
    )
    env.wait_available(GROUP, 3, timeout_s=240)
    result = pods.python("verify", endpoint, topic="SdkFailover", group="SdkFailoverVerify",
                         acks=acks, timeout_s=180)[-1]  # fmt: skip
    assert result["acked"] == len(acks_of(acks)) > 100, result
    assert (result["lost"], result["badBody"]) == (0, 0), result
