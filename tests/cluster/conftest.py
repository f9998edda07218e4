"""The cluster tier's fixtures (docs/development.md "Cluster tier").

`k8s_cluster` (session): a real control plane (tests/cluster/tier/controlplane.py)
plus one process kubelet (tier/kubelet.py), built from tools/k8s if needed.
`three_nodes` (per test): node-2 and node-3 join as further process
kubelets for the test and leave afterwards (their Node objects deleted), so
only tests that ask for several nodes see them.
`namespace` (per test): a fresh namespace, deleted afterwards. Tests carry the
`cluster` marker; the tier skips only where Go is missing (the binaries cannot
be built) or the tests do not run as root (pod network namespaces), with that
reason.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.tier.controlplane import NODE_NAME, NODE_NAMES, ControlPlane
from tests.cluster.tier.kubelet import ProcessKubelet
from tests.cluster.tier.paths import BUILD_SCRIPT, missing_reason


@dataclass
class K8sCluster:
    control_plane: ControlPlane
    kubelet: ProcessKubelet
    #: node-2, node-3 while a test runs with several nodes.
    extra_kubelets: dict[str, ProcessKubelet] = field(default_factory=dict)

    def node(self, name: str) -> ProcessKubelet:
        return self.kubelet if name == NODE_NAME else self.extra_kubelets[name]

    def add_node(self, name: str) -> ProcessKubelet:
        """Start the process kubelet of `name` (node-2, node-3) and wait until Ready."""
        kubelet = ProcessKubelet(
            self.control_plane.kubeconfig(name),
            self.control_plane.admin_kubeconfig,
            self.state / f"kubelet-{name}-{uuid.uuid4().hex[:6]}",
            node_name=name,
            share_with=self.kubelet,
        )
        self.extra_kubelets[name] = kubelet
        kubelet.start()
        from kubernetes import client

        core = client.CoreV1Api(self.api())

        def ready() -> bool:
            node = core.read_node(name)
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)

        _wait(f"{name} Ready", ready, 30)
        return kubelet

    def remove_node(self, name: str) -> None:
        """Stop its kubelet (its pods' processes end) and delete the Node."""
        from kubernetes import client

        kubelet = self.extra_kubelets.pop(name)
        kubelet.stop()
        with contextlib.suppress(Exception):
            client.CoreV1Api(self.api()).delete_node(name)

    def pod_node(self, pod: Any) -> ProcessKubelet:
        """The kubelet running `pod` (a V1Pod)."""
        return self.node(pod.spec.node_name)

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.admin_kubeconfig

    admin_kubeconfig = kubeconfig

    @property
    def bin_dir(self) -> Path:
        return self.control_plane.bin_dir

    @property
    def state(self) -> Path:
        return self.control_plane.state.parent

    def api(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, check=check, timeout=120,
        )  # fmt: skip

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "helm"), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True, text=True, check=check, timeout=300,
        )  # fmt: skip

    def crash_pod(self, pod: Any, name: str | None = None, container: str | None = None) -> int:
        return self.kubelet.crash_pod(pod, name, container)

    def pause_pod(self, pod: Any, name: str | None = None, container: str | None = None) -> int:
        return self.kubelet.pause_pod(pod, name, container)

    def resume_pod(self, pod: Any, name: str | None = None, container: str | None = None) -> int:
        return self.kubelet.resume_pod(pod, name, container)

    def cut_pod_network(self, pod: Any, name: str | None = None) -> None:
        self.kubelet.cut_pod_network(pod, name)

    def restore_pod_network(self, pod: Any, name: str | None = None) -> None:
        self.kubelet.restore_pod_network(pod, name)

    def stall_readiness(self, pod: Any, seconds: float) -> None:
        self.pod_node(pod).stall_readiness(pod, seconds)

    def host_addresses(self, n: int) -> list[str]:
        """Fresh addresses of this machine that pods reach (for processes a test runs)."""
        return [self.kubelet.host_address() for _ in range(n)]


def _wait(what: str, probe: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            found = probe()
            if found:
                return found
        time.sleep(0.2)
    raise TimeoutError(f"cluster tier: {what} within {timeout_s}s")


# Package scope: the control plane and the kubelet stop after the tier's last test, not at
# the end of the worker's session (its other tests ran beside an idle control plane's ~10 %
# of a core: kube-apiserver, etcd, kube-controller-manager).
@pytest.fixture(scope="package")
def k8s_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[K8sCluster]:
    reason = missing_reason()
    if reason is not None:
        pytest.skip(reason)
    subprocess.run([str(BUILD_SCRIPT)], check=True, capture_output=True)  # no-op when built
    state = tmp_path_factory.mktemp("k8s-tier")
    control_plane = ControlPlane(state / "control-plane")
    control_plane.start()
    kubelet = ProcessKubelet(
        control_plane.kubeconfig("node"), control_plane.admin_kubeconfig, state / "kubelet"
    )
    cluster = K8sCluster(control_plane, kubelet)
    try:
        kubelet.start()
        from kubernetes import client

        core = client.CoreV1Api(cluster.api())

        def node_ready() -> bool:
            node = core.read_node(NODE_NAME)
            return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)

        _wait("node-1 Ready", node_ready, 30)
        print(f"\ncluster tier: {control_plane.version()} at {control_plane.server}, state {state}")
        yield cluster
    finally:
        for name in list(cluster.extra_kubelets):
            cluster.remove_node(name)
        kubelet.stop()
        control_plane.stop()


@pytest.fixture
def three_nodes(k8s_cluster: K8sCluster) -> Iterator[K8sCluster]:
    """node-1..node-3 for one test; node-2 and node-3 leave afterwards."""
    try:
        for name in NODE_NAMES[1:]:
            k8s_cluster.add_node(name)
        yield k8s_cluster
    finally:
        for name in list(k8s_cluster.extra_kubelets):
            k8s_cluster.remove_node(name)


@pytest.fixture
def namespace(k8s_cluster: K8sCluster) -> Iterator[str]:
    from kubernetes import client

    core = client.CoreV1Api(k8s_cluster.api())
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    # Pods are refused until the service-account controller made `default`.
    _wait(
        f"ServiceAccount default in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        30,
    )
    try:
        yield name
    finally:
        with contextlib.suppress(Exception):
            core.delete_namespace(name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and "k8s_cluster" in getattr(item, "fixturenames", ()):
        cluster = item.funcargs.get("k8s_cluster")  # type: ignore[attr-defined]
        if isinstance(cluster, K8sCluster):
            report.sections.append(
                (
                    "cluster tier",
                    f"state and logs: {cluster.state}\n"
                    f"kubectl --kubeconfig {cluster.kubeconfig} get pods -A",
                )
            )


def pytest_report_header(config: pytest.Config) -> str:
    reason = missing_reason()
    if reason is not None:
        return f"cluster tier: will skip ({reason})"
    from tests.cluster.tier.paths import k8s_bin_dir

    apiserver = k8s_bin_dir() / "kube-apiserver"
    if not apiserver.exists():
        return f"cluster tier: binaries will be built into {apiserver.parent}"
    version = subprocess.run([str(apiserver), "--version"], capture_output=True, text=True)
    return f"cluster tier: {version.stdout.strip()} ({apiserver.parent})"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line at the end of every run: the API server's version and the tier's count."""
    counts: dict[str, int] = {}
    for outcome in ("passed", "failed", "error", "skipped"):
        for report in terminalreporter.stats.get(outcome, []):
            if "tests/cluster/" in getattr(report, "nodeid", "") and report.when in (
                "call",
                "setup",
            ):
                if outcome == "passed" and report.when != "call":
                    continue
                counts[outcome] = counts.get(outcome, 0) + 1
    if counts:
        summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        header = pytest_report_header(terminalreporter.config)
        terminalreporter.write_line(f"{header}: {summary}")
