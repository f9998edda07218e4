"""A real Kubernetes control plane on loopback (DESIGN.md §8 cluster/, §10).

etcd, kube-apiserver, kube-controller-manager and kube-scheduler built by
tools/k8s/build.sh, each a child process ended by PID. A CA, the apiserver's
serving certificate and the service-account key pair are made with the
`openssl` CLI; identities are static bearer tokens (admin in system:masters,
the controller manager, the scheduler, and the nodes `system:node:node-1`
(identity `node`) to `node-3` (identities `node-2`, `node-3`) in system:nodes,
so the Node authorizer and NodeRestriction treat each process kubelet as they
treat a real one). One kubeconfig per identity.

Ports (env `BROKERGROUP_K8S_*_PORT` overrides) stay away from the defaults so
a developer's other clusters are not disturbed. Logs stay in the state
directory for a failed test to show.
"""

from __future__ import annotations

import os
import secrets
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.tier.paths import k8s_bin_dir
from tests.cluster.tier.podnet import KUBERNETES_SERVICE_IP
from tests.cluster.tier.podnet import SERVICE_CIDR as _SERVICE_NETWORK

NODE_NAME = "node-1"
#: Every node the tier can run (one process kubelet each); node-1 always runs.
NODE_NAMES = ("node-1", "node-2", "node-3")
SERVICE_CIDR = str(_SERVICE_NETWORK)
HOST = "127.0.0.1"


def _port(name: str, default: int) -> int:
    return int(os.environ.get(f"BROKERGROUP_K8S_{name}_PORT", default))


@dataclass(frozen=True)
class Ports:
    etcd_client: int = _port("ETCD", 23790)
    etcd_peer: int = _port("ETCD_PEER", 23800)
    apiserver: int = _port("APISERVER", 16443)
    controller_manager: int = _port("KCM", 20257)
    scheduler: int = _port("SCHEDULER", 20259)


IDENTITIES: Mapping[str, tuple[str, str]] = {
    # name: (user, comma-separated groups)
    "admin": ("admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
    "node": (f"system:node:{NODE_NAME}", "system:nodes"),
    **{name: (f"system:node:{name}", "system:nodes") for name in NODE_NAMES[1:]},
}


@dataclass
class ControlPlane:
    """`start()` brings it up in seconds; `stop()` ends every process by PID."""

    state: Path
    bin_dir: Path = field(default_factory=k8s_bin_dir)
    ports: Ports = field(default_factory=Ports)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.ports.apiserver}"

    def kubeconfig(self, identity: str = "admin") -> Path:
        return self.state / f"{identity}.kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig("admin")

    # ------------------------------------------------------------------ setup

    def _openssl(self, *args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=self.pki)

    def _make_pki(self) -> None:
        self.pki.mkdir(parents=True, exist_ok=True)
        if (self.pki / "apiserver.crt").exists():
            return
        self._openssl("genrsa", "-out", "ca.key", "2048")
        self._openssl(
            "req", "-x509", "-new", "-nodes", "-key", "ca.key", "-sha256", "-days", "3650",
            "-subj", "/CN=brokergroup-test-ca", "-out", "ca.crt",
        )  # fmt: skip
        self._openssl("genrsa", "-out", "apiserver.key", "2048")
        (self.pki / "apiserver.ext").write_text(
            f"subjectAltName=IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP},DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            "DNS:kubernetes.default.svc.cluster.local\n"
            "extendedKeyUsage=serverAuth\n"
        )
        self._openssl(
            "req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver",
            "-out", "apiserver.csr",
        )  # fmt: skip
        self._openssl(
            "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "3650", "-sha256", "-extfile", "apiserver.ext",
            "-out", "apiserver.crt",
        )  # fmt: skip
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    def _make_identities(self) -> dict[str, str]:
        tokens_csv = self.pki / "tokens.csv"
        tokens: dict[str, str] = {}
        if tokens_csv.exists():
            for line in tokens_csv.read_text().splitlines():
                token, user = line.split(",")[:2]
                tokens[next(k for k, v in IDENTITIES.items() if v[0] == user)] = token
        else:
            lines = []
            for name, (user, groups) in IDENTITIES.items():
                tokens[name] = secrets.token_hex(16)
                lines.append(f'{tokens[name]},{user},{user},"{groups}"')
            tokens_csv.write_text("\n".join(lines) + "\n")
            tokens_csv.chmod(0o600)
        for name, token in tokens.items():
            self.kubeconfig(name).write_text(
                f"""apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: {self.server}
    certificate-authority: {self.pki / "ca.crt"}
users:
- name: {name}
  user:
    token: {token}
contexts:
- name: {name}
  context: {{cluster: test, user: {name}}}
current-context: {name}
"""
            )
            self.kubeconfig(name).chmod(0o600)
        return tokens

    # ------------------------------------------------------------------ processes

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.state / f"{name}.log", "ab")  # noqa: SIM115  # the child owns it
        try:
            self.procs[name] = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            log.close()

    def _wait_http(self, name: str, url: str, timeout_s: float, token: str | None = None) -> None:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if "127.0.0.1:" in url and name in ("kube-controller-manager", "kube-scheduler"):
            context = ssl._create_unverified_context()  # self-signed serving certs
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            proc = self.procs[name]
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}\n{self.log_tail(name)}")
            request = urllib.request.Request(url)
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError) as exc:
                last = str(exc)
            time.sleep(0.1)
        raise TimeoutError(f"{name} not healthy at {url} in {timeout_s}s ({last})")

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.state / f"{name}.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        for binary in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            if not (self.bin_dir / binary).exists():
                raise FileNotFoundError(
                    f"{self.bin_dir / binary} is missing: run `make k8s-tools` (tools/k8s/build.sh)"
                )
        self._make_pki()
        tokens = self._make_identities()
        p, b, pki = self.ports, self.bin_dir, self.pki
        self._spawn(
            "etcd",
            [
                str(b / "etcd"), "--name", "default", "--data-dir", str(self.state / "etcd"),
                "--listen-client-urls", f"http://{HOST}:{p.etcd_client}",
                "--advertise-client-urls", f"http://{HOST}:{p.etcd_client}",
                "--listen-peer-urls", f"http://{HOST}:{p.etcd_peer}",
                "--initial-advertise-peer-urls", f"http://{HOST}:{p.etcd_peer}",
                "--initial-cluster", f"default=http://{HOST}:{p.etcd_peer}",
                "--unsafe-no-fsync", "--quota-backend-bytes", str(1 << 30),
                "--log-level", "warn",
            ],
        )  # fmt: skip
        self._wait_http("etcd", f"http://{HOST}:{p.etcd_client}/health", 30)
        self._spawn(
            "kube-apiserver",
            [
                str(b / "kube-apiserver"),
                "--etcd-servers", f"http://{HOST}:{p.etcd_client}",
                "--bind-address", HOST, "--advertise-address", HOST,
                "--secure-port", str(p.apiserver),
                "--tls-cert-file", str(pki / "apiserver.crt"),
                "--tls-private-key-file", str(pki / "apiserver.key"),
                "--client-ca-file", str(pki / "ca.crt"),
                "--token-auth-file", str(pki / "tokens.csv"),
                "--authorization-mode", "Node,RBAC",
                "--enable-admission-plugins", "NodeRestriction",
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(pki / "sa.pub"),
                "--service-account-signing-key-file", str(pki / "sa.key"),
                "--service-cluster-ip-range", SERVICE_CIDR,
                "--endpoint-reconciler-type", "none",
                "--allow-privileged=true", "--profiling=false",
                # The process kubelet serves logs at its InternalIP (node-1 has no DNS name).
                "--kubelet-preferred-address-types", "InternalIP",
            ],
        )  # fmt: skip
        self._wait_http("kube-apiserver", f"{self.server}/readyz", 60, tokens["admin"])
        self._spawn(
            "kube-controller-manager",
            [
                str(b / "kube-controller-manager"),
                "--kubeconfig", str(self.kubeconfig("controller-manager")),
                "--bind-address", HOST, "--secure-port", str(p.controller_manager),
                "--use-service-account-credentials=true",
                "--service-account-private-key-file", str(pki / "sa.key"),
                "--root-ca-file", str(pki / "ca.crt"),
                "--cluster-signing-cert-file", str(pki / "ca.crt"),
                "--cluster-signing-key-file", str(pki / "ca.key"),
                "--service-cluster-ip-range", SERVICE_CIDR,
                "--leader-elect=false", "--profiling=false",
                # A node that stopped answering is NotReady after 20 s (default
                # 50 s), so node-loss tests see it within their run; leases are
                # renewed every 5 s, well inside.
                "--node-monitor-grace-period", "20s", "--node-monitor-period", "2s",
            ],
        )  # fmt: skip
        self._spawn(
            "kube-scheduler",
            [
                str(b / "kube-scheduler"),
                "--kubeconfig", str(self.kubeconfig("scheduler")),
                "--bind-address", HOST, "--secure-port", str(p.scheduler),
                "--leader-elect=false", "--profiling=false",
            ],
        )  # fmt: skip
        self._wait_http(
            "kube-controller-manager", f"https://{HOST}:{p.controller_manager}/healthz", 60
        )
        self._wait_http("kube-scheduler", f"https://{HOST}:{p.scheduler}/healthz", 60)

    def version(self) -> str:
        out = subprocess.run(
            [str(self.bin_dir / "kube-apiserver"), "--version"], capture_output=True, text=True
        )
        return out.stdout.strip()

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every process by PID (in reverse start order), SIGKILL after `grace_s`."""
        for name in reversed(list(self.procs)):
            proc = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
