"""What the kind e2e scenarios need from a kind cluster, in one place.

`KindCluster` is the cluster `make e2e` brought up (tools/kind/up.sh wrote its
settings; tools/kind/e2e.sh exports them): kubectl, helm and kind built for
the tier, the kubeconfig, the node container, and the project image loaded
into the node.

`Release` is one test's world: a namespace of its own with a Helm release of
charts/brokergroup in it (the real chart: operator Deployment with two
replicas watching only this namespace, controller StatefulSet with three),
and a client pod running the project image, through which every produce,
consume and controller query goes (real DNS, real Services). It reuses the
cluster tier's BrokerGroup reads and waits (tests/cluster/operator_env.py,
`OperatorEnv`) and replaces what differs in real containers: where the
controllers are, how a broker process is crashed, how the CLI runs.
Teardown deletes the groups (while the operator still runs to finish its
finalizer), uninstalls the release and waits until the namespace is gone, so
nothing of one test is left for the next.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.cluster.operator_env import OperatorEnv, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "brokergroup"
SECRETS = "/etc/brokergroup/secrets"
#: Real containers on a shared 2-core machine start in seconds, not instantly.
POD_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class KindCluster:
    name: str
    kubeconfig: str
    bin_dir: Path
    image: str
    path: str
    node_image: str
    rocketmq_image: str = ""
    """The stock RocketMQ image e2e.sh loaded ("" if it could not build one)."""

    @classmethod
    def from_env(cls) -> KindCluster | None:
        env = os.environ
        needed = ("BROKERGROUP_E2E_KUBECONFIG", "BROKERGROUP_E2E_BIN", "BROKERGROUP_E2E_IMAGE")
        if not all(env.get(k) for k in needed):
            return None
        return cls(
            name=env.get("BROKERGROUP_E2E_CLUSTER", "brokergroup-e2e"),
            kubeconfig=env["BROKERGROUP_E2E_KUBECONFIG"],
            bin_dir=Path(env["BROKERGROUP_E2E_BIN"]),
            image=env["BROKERGROUP_E2E_IMAGE"],
            path=env.get("BROKERGROUP_E2E_PATH", "?"),
            node_image=env.get("BROKERGROUP_E2E_NODE_IMAGE", "?"),
            rocketmq_image=env.get("BROKERGROUP_E2E_ROCKETMQ_IMAGE", ""),
        )

    def run(
        self, tool: str, *args: str, check: bool = True, timeout: float = 300, stdin: str = ""
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.bin_dir / tool), "--kubeconfig", self.kubeconfig, *args],
            capture_output=True, text=True, timeout=timeout, input=stdin,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(
                f"{tool} {' '.join(args)} exited {result.returncode}: {result.stderr[-3000:]}"
            )
        return result

    def kubectl(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("helm", *args, **kw)

    def node_exec(self, node: str, *cmd: str) -> subprocess.CompletedProcess[str]:
        """A command in the kind node container (its containerd, crictl, processes)."""
        return subprocess.run(
            ["docker", "exec", node, *cmd], capture_output=True, text=True, timeout=60, check=True
        )


class Release(OperatorEnv):
    """One test's namespace, Helm release and client pod (see the module doc)."""

    def __init__(self, cluster: KindCluster, work: Path) -> None:
        # Not OperatorEnv.__init__: no local controller or operator processes here.
        self.cluster = cluster
        self.kubeconfig = cluster.kubeconfig
        self.operator_kubeconfig = cluster.kubeconfig
        suffix = uuid.uuid4().hex[:6]
        self.namespace = f"e2e-{suffix}"
        #: Cluster-scoped chart objects (ClusterRole, binding) carry the release name.
        self.release = f"r{suffix}"
        self.work = work
        self.api = config.new_client_from_config(config_file=cluster.kubeconfig)
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.events = self.core
        self.operators = []
        self._crash = None
        self.controllers = ChartControllers(self)  # type: ignore[assignment]
        repository, _, tag = cluster.image.rpartition(":")
        self.image_values: tuple[str, ...] = (
            "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
        )  # fmt: skip
        if cluster.rocketmq_image:
            repository, _, tag = cluster.rocketmq_image.rpartition(":")
            self.image_values += (
                "--set", f"rocketmqImage.repository={repository}",
                "--set", f"rocketmqImage.tag={tag}",
            )  # fmt: skip

    # ------------------------------------------------------------ lifecycle

    @property
    def fullname(self) -> str:
        return f"{self.release}-brokergroup"

    @property
    def controller_addresses(self) -> str:
        host = f"{self.fullname}-controller.{self.namespace}.svc.cluster.local"
        return ",".join(f"{self.fullname}-controller-{i}.{host}:9878" for i in range(3))

    def start(self, operators: int = 1) -> None:
        del operators  # the chart's Deployment runs two replicas
        self.core.create_namespace({"metadata": {"name": self.namespace}})
        self.cluster.helm(
            "install", self.release, str(CHART),
            "--namespace", self.namespace,
            *self.image_values,
            "--set", "image.pullPolicy=IfNotPresent",
            "--set-json", f'operator.watchNamespaces=["{self.namespace}"]',
            "--wait", "--timeout", f"{int(POD_TIMEOUT_S)}s",
            timeout=POD_TIMEOUT_S + 60,
        )  # fmt: skip
        self.core.create_namespaced_pod(self.namespace, self._client_pod())
        wait_for("the client pod Ready", lambda: self._ready("client"), POD_TIMEOUT_S, 0.5)
        wait_for("a controller leader", self.controllers.raft_leader, POD_TIMEOUT_S, 1.0)

    def _client_pod(self) -> dict[str, Any]:
        return {
            "metadata": {"name": "client", "labels": {"app": "e2e-client"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "client",
                        "image": self.cluster.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "infinity"],
                        "env": [
                            {
                                "name": "BROKERGROUP_CONTROLLER_ADDRESSES",
                                "value": self.controller_addresses,
                            }
                        ],
                        "volumeMounts": [
                            {"name": "secrets", "mountPath": SECRETS, "readOnly": True}
                        ],
                    }
                ],
                "volumes": [
                    {"name": "secrets", "secret": {"secretName": f"{self.fullname}-secrets"}}
                ],
            },
        }

    def _ready(self, pod_name: str) -> bool:
        pod = self.core.read_namespaced_pod(pod_name, self.namespace)
        return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])

    def diagnostics(self) -> str:
        """The namespace's pods, events and the logs of the chart's and the groups' pods
        (for a failed test)."""
        ns = ("-n", self.namespace)
        parts = [
            self.cluster.kubectl("get", "pods,pvc,bg", "-o", "wide", *ns, check=False).stdout,
            self.cluster.kubectl(
                "get", "events", "--sort-by=.lastTimestamp", *ns, check=False
            ).stdout[-6000:],
        ]
        for selector in (
            "app.kubernetes.io/component=operator",
            "app.kubernetes.io/component=controller",
            "brokergroup.io/group",  # every group's brokers
        ):
            parts.append(
                self.cluster.kubectl(
                    "logs", "-l", selector, "--tail", "60", "--prefix", "--max-log-requests",
                    "20", *ns, check=False,
                ).stdout
            )  # fmt: skip
        return "\n".join(parts)

    def close(self) -> None:
        with contextlib.suppress(ApiException):
            for name in [g["metadata"]["name"] for g in self.groups()]:
                with contextlib.suppress(ApiException):
                    self.custom.delete_namespaced_custom_object(
                        "brokergroup.io", "v1alpha1", self.namespace, "brokergroups", name
                    )
            # The operator's finalizer must run before the release (the operator) goes.
            wait_for("BrokerGroups deleted", lambda: not self.groups() or None, 120, 1.0)
        self.cluster.helm(
            "uninstall", self.release, "--namespace", self.namespace, "--wait",
            timeout=300, check=False,
        )  # fmt: skip
        with contextlib.suppress(ApiException):
            self.core.delete_namespace(self.namespace)

        def gone() -> bool:
            try:
                self.core.read_namespace(self.namespace)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(f"namespace {self.namespace} gone", gone, 300, 1.0)

    # ------------------------------------------------------------ the client pod

    def client(self, *args: str, timeout: float = 180, check: bool = True) -> str:
        """`brokergroup ARGS` in the client pod; its stdout."""
        result = self.cluster.kubectl(
            "exec", "-n", self.namespace, "client", "--", "brokergroup", *args,
            timeout=timeout, check=check,
        )  # fmt: skip
        return result.stdout

    def service_address(self, service: str) -> str | None:
        """The Service's DNS name: kube-proxy routes it to the pod its selector picks."""
        if not self.service_address_ready(service):
            return None
        return f"{service}.{self.namespace}.svc.cluster.local:10911"

    def service_address_ready(self, service: str) -> bool:
        slices = client.DiscoveryV1Api(self.api).list_namespaced_endpoint_slice(
            self.namespace, label_selector=f"kubernetes.io/service-name={service}"
        )
        return any(
            (e.conditions is None or e.conditions.ready)
            for s in slices.items
            for e in s.endpoints or []
        )

    def client_key_args(self, address: str) -> list[str]:
        """`--key-file` with the client pair of the group behind `address` (the Service
        `<group>.<ns>.svc…`): brokers authenticate their client port (docs/security.md).
        Derived in the client pod from the release Secret's root, as the operator does."""
        group = address.split(".", 1)[0]
        path = f"/tmp/client-keys-{group}.json"
        self.cluster.kubectl(
            "exec", "-n", self.namespace, "client", "--", "sh", "-c",
            f"umask 077 && brokergroup admin derive-credential --rocketmq --role client "
            f"--cluster-name {self.namespace} --broker-name {group} "
            f"--root-file {SECRETS}/broker-credential-root > {path}",
        )  # fmt: skip
        return ["--key-file", path]

    def produce(
        self,
        address: str,
        topic: str,
        count: int,
        key_prefix: str,
        ack_log: Path,
        timeout_s: float = 120,
    ) -> dict[str, Any]:
        """Produce from the client pod; its ack log is appended to the local `ack_log`."""
        remote = f"/tmp/acks-{uuid.uuid4().hex[:8]}.jsonl"
        out = self.client(
            "produce", "--broker-address", address, "--topic", topic, "--count", str(count),
            "--size", "128", "--batch", "16", "--key-prefix", key_prefix, "--ack-log", remote,
            "--json", "--controller-token-file", f"{SECRETS}/api-token",
            *self.client_key_args(address), timeout=timeout_s, check=False,
        )  # fmt: skip
        acks = self.cluster.kubectl(
            "exec", "-n", self.namespace, "client", "--", "cat", remote, check=False
        ).stdout
        with ack_log.open("a") as f:
            f.write(acks)
        lines = [line for line in out.splitlines() if line.startswith("{")]
        return dict(json.loads(lines[-1])) if lines else {"error": out[-2000:]}

    def consume_keys(self, address: str, topic: str) -> list[str]:
        out = self.client(
            "consume", "--broker-address", address, "--topic", topic, "--from-beginning",
            "--json", "--idle-timeout-ms", "3000", *self.client_key_args(address),
        )  # fmt: skip
        return [json.loads(line)["key"] for line in out.splitlines() if line.startswith("{")]

    # ------------------------------------------------------------ disruptions

    def crash_broker(self, pod: Any) -> None:
        """SIGKILL the broker process from the node (the container restarts, same pod)."""
        status = next(c for c in pod.status.container_statuses if c.name == "broker")
        container_id = status.container_id.split("://", 1)[1]
        pid = self.cluster.node_exec(
            pod.spec.node_name, "crictl", "inspect", "--output", "go-template",
            "--template", "{{.info.pid}}", container_id,
        ).stdout.strip()  # fmt: skip
        assert pid.isdigit() and int(pid) > 1, f"no PID for {pod.metadata.name}: {pid!r}"
        self.cluster.node_exec(pod.spec.node_name, "kill", "-KILL", pid)

    def restarts(self, pod_name: str, container: str = "broker") -> int:
        pod = self.core.read_namespaced_pod(pod_name, self.namespace)
        # A pod just created has no container statuses yet: no restarts.
        return next(
            (c.restart_count for c in pod.status.container_statuses or [] if c.name == container),
            0,
        )


class ChartControllers:
    """The chart's controller StatefulSet, asked through the client pod's CLI."""

    def __init__(self, release: Release) -> None:
        self.release = release

    def admin(self, *args: str) -> Any:
        out = self.release.client(
            "admin", *args, "--json", "--token-file", f"{SECRETS}/api-token",
            "--controller-addresses", self.release.controller_addresses,
            timeout=60, check=False,
        )  # fmt: skip
        try:
            return json.loads(out)
        except json.JSONDecodeError:
            return None

    def raft(self) -> list[dict[str, Any]]:
        return list(self.admin("raft") or [])

    def raft_leader(self) -> str | None:
        leaders = {s.get("leader") for s in self.raft() if "error" not in s}
        leaders.discard(None)
        return leaders.pop() if len(leaders) == 1 else None

    def replica_info(self, namespace: str, name: str) -> dict[str, Any]:
        info = self.admin("replica-info", "--cluster-name", namespace, "--broker-name", name)
        return dict(info or {})
