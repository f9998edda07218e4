"""What the operator scenarios need from a cluster, in one place.

`OperatorEnv` runs, for one test namespace: three Raft controllers as local
processes (the Helm chart's controller StatefulSet is the chart's own
scenarios' business), the Secret broker pods mount, and the operator itself
as a process (`brokergroup operator --namespace NS`), against a real API
server whose node runs each pod's command as a local process of this
installation (the cluster tier, docs/development.md). Produce and consume
use the project's CLI against the address the client Service selects, read
from its EndpointSlice (the pod the `role=master` label points at).

Where the cluster comes from: the cluster tier's fixture when it is present
(`k8s_cluster`), else a kubeconfig in BROKERGROUP_TEST_KUBECONFIG for a
cluster that runs pods as local processes of this checkout; otherwise the
scenarios skip with that reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from brokergroup_controller.credentials import Role, derive_credential

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
#: How long an interrupted `brokergroup produce` gets to close its connection and its
#: ack log before it is killed.
PRODUCE_INTERRUPT_S = 15
GROUP, VERSION, PLURAL = "brokergroup.io", "v1alpha1", "brokergroups"
T = TypeVar("T")


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float = 60.0, every_s: float = 0.1
) -> T:
    """Poll until `probe` returns something truthy; fail naming `what` and the last value.

    A 404, 409, 500 or 503 from the API server is polled through (an object not created
    yet, a conflict, an apiserver hiccup), never an answer: it once returned "API 404" as
    the probe's truthy value, so waiting on a group that did not exist passed at once."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except ApiException as exc:
            last = f"API {exc.status}"
            if exc.status not in (404, 409, 500, 503):
                raise
        else:
            last = value
            if value:
                return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


@dataclass
class Controllers:
    """Three controller processes on loopback addresses."""

    root: Path
    hosts: tuple[str, ...]
    token_file: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: More `brokergroup controller` flags (e.g. `--api-tls` and its files).
    extra_args: tuple[str, ...] = ()
    #: With an HTTPS API: the CA the test's reads verify the controllers against.
    ca_file: Path | None = None

    @property
    def scheme(self) -> str:
        return "http" if self.ca_file is None else "https"

    @property
    def addresses(self) -> str:
        return ",".join(f"{h}:9878" for h in self.hosts)

    def start(self) -> None:
        peers = ",".join(f"{h}:9880" for h in self.hosts)
        raft_password = self.root / "raft-password"
        raft_password.write_text(secrets.token_hex(16))
        raft_password.chmod(0o600)
        self.broker_credential_root_file.write_text(secrets.token_hex(16))
        self.broker_credential_root_file.chmod(0o600)
        self.ha_secret_file.write_text(secrets.token_hex(16))
        self.ha_secret_file.chmod(0o600)
        # The RocketMQ ports' key pair (remoting port and name server; stock brokers sign
        # with it), as the chart's release Secret holds it.
        pair = {"accessKey": f"bg-{secrets.token_hex(8)}", "secretKey": secrets.token_hex(16)}
        self.rocketmq_credentials_file.write_text(json.dumps(pair, separators=(",", ":")))
        self.rocketmq_credentials_file.chmod(0o600)
        for n, host in enumerate(self.hosts, 1):
            log = open(self.root / f"controller-{n}.log", "ab")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "brokergroup"),
                        "controller",
                        "--node-id",
                        str(n),
                        "--peers",
                        peers,
                        "--bind-address",
                        host,
                        "--data-dir",
                        str(self.root / f"controller-{n}"),
                        "--admin-token-file",
                        str(self.token_file),
                        "--broker-credential-root-file",
                        str(self.broker_credential_root_file),
                        "--raft-password-file",
                        str(raft_password),
                        "--remoting-credentials-file",
                        str(self.rocketmq_credentials_file),
                        "--namesrv-key-file",
                        str(self.rocketmq_credentials_file),
                        *self.extra_args,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        wait_for("a controller leader", lambda: self.raft_leader(), 30)

    @property
    def broker_credential_root_file(self) -> Path:
        return self.root / "broker-credential-root"

    @property
    def ha_secret_file(self) -> Path:
        return self.root / "ha-secret"

    @property
    def rocketmq_credentials_file(self) -> Path:
        return self.root / "rocketmq-credentials"

    def client_credential(self, cluster_name: str, broker_name: str) -> str:
        """A group's client credential (producers, consumers), as the operator derives it."""
        root = self.broker_credential_root_file.read_text().strip()
        return derive_credential(root, Role.CLIENT, cluster_name, broker_name)

    def _get(self, url: str) -> Any:
        """A controller read with the admin token (reads need a credential too)."""
        import urllib.request

        headers = {"Authorization": f"Bearer {self.token_file.read_text().strip()}"}
        context = None
        if self.ca_file is not None:
            import ssl

            context = ssl.create_default_context(cafile=str(self.ca_file))
        return urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=1.0, context=context
        )

    def raft_leader(self) -> str | None:
        for host in self.hosts:
            try:
                with self._get(f"{self.scheme}://{host}:9878/v1/raft") as r:
                    leader = json.loads(r.read()).get("leader")
                    if leader:
                        return str(leader)
            except OSError:
                continue
        return None

    def replica_info(self, namespace: str, name: str) -> dict[str, Any]:
        for host in self.hosts:
            url = (
                f"{self.scheme}://{host}:9878/v1/replica-info"
                f"?clusterName={namespace}&brokerName={name}"
            )
            try:
                with self._get(url) as r:
                    return dict(json.loads(r.read()))
            except OSError:
                continue
        return {}

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@dataclass
class OperatorProcess:
    namespace: str
    kubeconfig: str
    env: dict[str, str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                str(BIN / "brokergroup"),
                "operator",
                "--namespace",
                self.namespace,
                "--kubeconfig",
                self.kubeconfig,
                "--peering",
                "brokergroup",
                "--peering-lifetime",
                "5",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
        )

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class OperatorEnv:
    def __init__(
        self,
        kubeconfig: str,
        namespace: str,
        work: Path,
        controller_hosts: tuple[str, ...],
        crash: Callable[[dict[str, Any]], None] | None = None,
        operator_kubeconfig: str | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        #: The operator's own identity (e.g. the chart's ServiceAccount); the test's
        #: calls keep using `kubeconfig`.
        self.operator_kubeconfig = operator_kubeconfig or kubeconfig
        self.namespace = namespace
        self.work = work
        #: Client address → the group (Service) it was picked for (client_key_args).
        self.group_of_address: dict[str, str] = {}
        api = config.new_client_from_config(config_file=kubeconfig)
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.events = client.CoreV1Api(api)
        token = work / "api-token"
        token.write_text(secrets.token_hex(16))
        token.chmod(0o600)
        self.controllers = Controllers(work, controller_hosts, token)
        self.operators: list[OperatorProcess] = []
        self._crash = crash

    # ------------------------------------------------------------ lifecycle

    def start(self, operators: int = 1) -> None:
        self.controllers.start()
        for i in range(operators):
            self.add_operator(i)

    def operator_env(self) -> dict[str, str]:
        return {
            "BROKERGROUP_CONTROLLER_ADDRESSES": self.controllers.addresses,
            "BROKERGROUP_TOKEN_FILE": str(self.controllers.token_file),
            "BROKERGROUP_BROKER_CREDENTIAL_ROOT_FILE": str(
                self.controllers.broker_credential_root_file
            ),
            "BROKERGROUP_HA_SECRET_FILE": str(self.controllers.ha_secret_file),
            "BROKERGROUP_ROCKETMQ_CREDENTIALS_FILE": str(
                self.controllers.rocketmq_credentials_file
            ),
            "BROKERGROUP_IMAGE": "brokergroup:dev",
            "BROKERGROUP_ROCKETMQ_IMAGE": "brokergroup-rocketmq:5.3.3",
            "BROKERGROUP_RESYNC_SECONDS": "2",
        }

    def add_operator(self, i: int) -> OperatorProcess:
        op = OperatorProcess(
            self.namespace,
            self.operator_kubeconfig,
            self.operator_env(),
            self.work / f"operator-{i}.log",
        )
        op.start()
        self.operators.append(op)
        return op

    def close(self) -> None:
        for name in [g["metadata"]["name"] for g in self.groups()]:
            with contextlib.suppress(ApiException):
                self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, name
                )
        try:
            wait_for("BrokerGroups deleted", lambda: not self.groups() or None, 60)
            wait_for("the groups' pods gone", lambda: not self.group_pods() or None, 60)
        except AssertionError:
            pass
        for op in self.operators:
            op.stop()
        self.controllers.stop()

    # ------------------------------------------------------------ reads

    def groups(self) -> list[dict[str, Any]]:
        return list(
            self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL)[
                "items"
            ]
        )

    def group(self, name: str) -> dict[str, Any]:
        return dict(
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)
        )

    def pods(self, name: str | None = None) -> list[Any]:
        selector = "app.kubernetes.io/name=brokergroup" + (
            f",brokergroup.io/group={name}" if name else ""
        )
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def group_pods(self) -> list[Any]:
        """The groups' own pods: brokers and stock proxies. Not `pods()`: the chart's
        operator and controller pods carry app.kubernetes.io/name=brokergroup too and
        stay until `helm uninstall`, so waiting for those to go only ran into close's
        timeout (60 s of every chart test's teardown)."""
        return [
            p
            for selector in ("brokergroup.io/group", "app.kubernetes.io/component=proxy")
            for p in self.core.list_namespaced_pod(
                self.namespace, label_selector=f"app.kubernetes.io/name=brokergroup,{selector}"
            ).items
        ]

    def labelled(self, name: str) -> dict[str, tuple[str | None, str | None, str | None]]:
        """Pod name → (role, broker-id, IP) for live pods."""
        return {
            p.metadata.name: (
                (p.metadata.labels or {}).get("brokergroup.io/role"),
                (p.metadata.labels or {}).get("brokergroup.io/broker-id"),
                p.status.pod_ip,
            )
            for p in self.pods(name)
            if p.metadata.deletion_timestamp is None
        }

    def master_pod(self, name: str) -> Any | None:
        masters = [
            p
            for p in self.pods(name)
            if (p.metadata.labels or {}).get("brokergroup.io/role") == "master"
            and p.metadata.deletion_timestamp is None
        ]
        assert len(masters) <= 1, f"two pods labelled master: {[p.metadata.name for p in masters]}"
        return masters[0] if masters else None

    def service_address(self, service: str) -> str | None:
        """The ready pod the Service's selector picks (what its endpoints hold).

        Read from the selector rather than the EndpointSlice: a node that gives
        pods loopback addresses gets no EndpointSlice (the API refuses 127/8),
        and the selector is what the operator's labels drive either way.
        """
        selector = self.core.read_namespaced_service(service, self.namespace).spec.selector or {}
        text = ",".join(f"{k}={v}" for k, v in selector.items())
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=text).items:
            ready = any(
                c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
            )
            if ready and pod.metadata.deletion_timestamp is None and pod.status.pod_ip:
                address = f"{pod.status.pod_ip}:10911"
                self.group_of_address[address] = service
                return address
        return None

    def client_key_args(self, address: str) -> list[str]:
        """`--key-file` with the client pair of the group whose Service gave `address`:
        brokers authenticate their client port (docs/security.md). The pair is read from
        the Secret the operator writes for applications (`<group>-rocketmq-client`); none
        when the address's group is unknown or has no such Secret."""
        group = self.group_of_address.get(address)
        path = None if group is None else self.client_key_file(group)
        return [] if path is None else ["--key-file", str(path)]

    def client_key_file(self, group: str) -> Path | None:
        """The group's client pair as a key file (0600), from the Secret the operator
        writes for applications; None when there is none."""
        import base64

        path = self.work / f"client-keys-{group}.json"
        if not path.exists():
            try:
                secret = self.core.read_namespaced_secret(
                    f"{group}-rocketmq-client", self.namespace
                )
            except ApiException:
                return None
            text = base64.b64decode((secret.data or {})["rocketmq-credentials"]).decode()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        return path

    def group_events(self, name: str) -> list[tuple[str, str]]:
        items = self.core.list_namespaced_event(
            self.namespace,
            field_selector=f"involvedObject.kind=BrokerGroup,involvedObject.name={name}",
        ).items
        # Creation order: timestamps have one-second resolution (two Events of one
        # second came back by their random names), an Event's resourceVersion is the
        # etcd revision of its creation (the operator never updates an Event).
        items.sort(key=lambda e: int(e.metadata.resource_version))
        return [(e.reason, e.message) for e in items]

    # ------------------------------------------------------------ actions

    def create_group(self, name: str, replicas: int = 3, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "BrokerGroup",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"replicas": replicas, "storage": {"size": "1Gi"}, **spec},
        }
        return dict(
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, body
            )
        )

    def patch_group(self, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, patch
        )

    def wait_available(self, name: str, replicas: int, timeout_s: float = 90) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            g = self.group(name)
            status = g.get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            labels = self.labelled(name)
            roles = sorted(r for r, b, _ in labels.values() if r and b)
            if (
                conds.get("Available") == "True"
                and status.get("readyReplicas") == replicas
                and len(status.get("syncStateSet") or []) == replicas
                and roles == ["master"] + ["slave"] * (replicas - 1)
            ):
                return g
            return None

        return wait_for(f"bg/{name} Available with {replicas} in sync", ready, timeout_s)

    def delete_pod(self, pod_name: str) -> None:
        self.core.delete_namespaced_pod(pod_name, self.namespace)

    def crash_broker(self, pod: Any) -> None:
        """Kill the broker process inside the pod (the container restarts, same pod)."""
        if self._crash is not None:
            self._crash(pod)
            return
        out = subprocess.run(
            ["pgrep", "-f", f"advertise-address {pod.status.pod_ip} "],
            capture_output=True,
            text=True,
        ).stdout.split()
        assert out, f"no broker process for {pod.metadata.name} at {pod.status.pod_ip}"
        os.kill(int(out[0]), signal.SIGKILL)

    def produce(
        self,
        address: str,
        topic: str,
        count: int,
        key_prefix: str,
        ack_log: Path,
        timeout_s: float = 60,
    ) -> dict[str, Any]:
        """One `brokergroup produce` run; its JSON summary. A run still going after
        `timeout_s` is interrupted (SIGINT: it closes its ack log, so the acks it did get
        are kept; a SIGKILL lost the unflushed ones) and answers
        `{"timedOut": timeout_s, "error": <its stderr>}`."""
        process = subprocess.Popen(
            [
                str(BIN / "brokergroup"),
                "produce",
                "--broker-address",
                address,
                "--topic",
                topic,
                "--count",
                str(count),
                "--size",
                "128",
                "--batch",
                "16",
                "--key-prefix",
                key_prefix,
                "--ack-log",
                str(ack_log),
                "--json",
                "--controller-token-file",
                str(self.controllers.token_file),
                *self.client_key_args(address),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)
            try:
                stdout, stderr = process.communicate(timeout=PRODUCE_INTERRUPT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            return {"timedOut": timeout_s, "error": stderr[-2000:]}
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {"error": stderr[-2000:]}

    def consume_keys(self, address: str, topic: str) -> list[str]:
        result = subprocess.run(
            [
                str(BIN / "brokergroup"),
                "consume",
                "--broker-address",
                address,
                "--topic",
                topic,
                "--from-beginning",
                "--json",
                "--idle-timeout-ms",
                "2000",
                *self.client_key_args(address),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return [
            json.loads(line)["key"] for line in result.stdout.splitlines() if line.startswith("{")
        ]


@contextlib.contextmanager
def tier_env(cluster: Any, prefix: str, work: Path) -> Iterator[OperatorEnv]:
    """An `OperatorEnv` in a fresh namespace `<prefix>-…` of the cluster tier
    (`k8s_cluster`), controllers on addresses the tier's pods reach."""
    kubeconfig = str(cluster.kubeconfig)
    apply_crds(kubeconfig)
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    env = OperatorEnv(kubeconfig, namespace, work, tuple(cluster.host_addresses(3)))
    env.core.create_namespace({"metadata": {"name": namespace}})
    env.start()
    try:
        yield env
    finally:
        env.close()
        env.core.delete_namespace(namespace)


def one_pod_per_node(group: str) -> dict[str, Any]:
    """A BrokerGroup's spec.template placing no two of its pods on one node."""
    return {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"brokergroup.io/group": group}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        }
    }


def acked_keys(ack_log: Path) -> list[str]:
    if not ack_log.exists():
        return []
    keys = []
    for line in ack_log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # cut by a producer killed mid-line: not an acknowledgement we can name
        if entry.get("outcome", "ok") == "ok":
            keys.append(str(entry["key"]))
    return keys


def apply_crds(kubeconfig: str) -> None:
    """`kubectl apply -f crds/` (server-side apply), then wait until established."""
    import asyncio

    import yaml

    from brokergroup_operator.kube import Kube, load_kube_config

    kube = Kube(load_kube_config(kubeconfig))

    async def apply_all() -> None:
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    await kube.apply(doc)

    asyncio.run(apply_all())
    ext = client.ApiextensionsV1Api(kube.api)

    def established() -> bool:
        crd = ext.read_custom_resource_definition("brokergroups.brokergroup.io")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_for("the BrokerGroup CRD established", established, 30)


def external_kubeconfig() -> str | None:
    return os.environ.get("BROKERGROUP_TEST_KUBECONFIG") or None


def iter_controller_blocks() -> Iterator[tuple[str, ...]]:
    """Loopback blocks for each test's controllers (tests use 127.0.2.0/24 and above)."""
    n = 0
    while True:
        base = 10 + 4 * (n % 60)
        yield tuple(f"127.0.5.{base + i}" for i in range(3))
        n += 1


class Writer:
    """Keeps producing batches of 50 through the client Service's endpoint (wherever the
    master label is) until stopped; every acknowledgement goes to `ack_log`. For checking
    that a roll or a restart keeps the group writable and loses nothing."""

    def __init__(
        self, env: OperatorEnv, group: str, topic: str, prefix: str, ack_log: Path
    ) -> None:
        import threading

        self.env, self.group, self.topic, self.prefix, self.ack_log = (
            env, group, topic, prefix, ack_log,
        )  # fmt: skip
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        #: (address, outcome) of each `produce` run, in order.
        self.outcomes: list[tuple[str, str]] = []

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                address = self.env.service_address(self.group)
                if address:
                    summary = self.env.produce(
                        address, self.topic, 50, f"{self.prefix}{n}-", self.ack_log, timeout_s=30
                    )
                    self.outcomes.append((address, _outcome(summary)))
                    n += 1
            except Exception as exc:  # the API server under load, say: keep writing
                self.outcomes.append(("", f"{type(exc).__name__}: {exc}"[:300]))
            time.sleep(0.05)

    def __enter__(self) -> Writer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "the writer is still producing 60 s after its stop"

    def report(self) -> str:
        """Each run's address and outcome, in order: what a failing check shows."""
        return "\n".join(f"{address}: {outcome}" for address, outcome in self.outcomes)


def _outcome(summary: dict[str, Any]) -> str:
    if "timedOut" in summary:
        return f"no summary after {summary['timedOut']} s: {summary['error'][-300:]}"
    if "acked" not in summary:
        return f"no summary: {summary.get('error', '')[-300:]}"
    return (
        f"acked {summary['acked']}, failed {summary['failed']} {summary.get('errors') or ''} "
        f"{summary.get('firstError') or ''}".rstrip()
    )


def answer_to_plaintext(address: str, frame: bytes) -> bytes:
    """Everything a port at `address` (host:port) sends back to `frame` written in plaintext,
    until it closes or goes quiet for 10 s (b"": closed with no answer, as enforcing TLS does)."""
    host, _, port = address.rpartition(":")
    got = b""
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return got
