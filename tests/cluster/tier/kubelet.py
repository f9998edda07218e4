"""A process kubelet: runs the pods bound to its Node as local processes.

It is a real node to the API server — it registers `node-1` as
`system:node:node-1` (so the Node authorizer and NodeRestriction apply),
renews its Lease, watches only its own pods (fieldSelector spec.nodeName) and
reports pod phase, IPs, container states, restart counts and the Ready
condition the way a kubelet does — but a container is a process of this
installation, not an image:

- the container's command runs with this checkout's virtualenv first on PATH
  (`brokergroup …` is the project's console script, whatever the image);
- every pod *incarnation* gets its own network namespace on the tier's
  bridge with a fresh address (10.244.x.y, never reused in a session), its own
  hostname, and /etc/resolv.conf and /etc/hosts pointing at the tier's cluster
  DNS (podnet.py); ClusterIP Services are routed by the tier's Service proxy
  (services.py), so Service names, headless pod names and ClusterIPs work as
  on a real cluster;
- volumes: PVC (a directory under the tier's state dir, provisioned by this
  kubelet's dynamic provisioner for its StorageClass `standard` and any other
  class naming its provisioner, kept until the claim is deleted, so data survives
  pod deletion; nothing resizes it: a test acts as the CSI resizer), ConfigMap and Secret
  (files), projected (service-account token from the TokenRequest API, the
  kube-root-ca.crt ConfigMap, downward API), emptyDir; every mountPath that
  appears as a whole path in the command, args and env (also inside an
  `sh -c` script) is rewritten to the host directory (so is the RocketMQ image's
  /opt/rocketmq, to the cached stock jars: paths.image_paths), and mounts under
  /var/run/secrets are bind-mounted in the
  container's mount namespace (the kubernetes client's in-cluster config reads
  fixed paths there); KUBERNETES_SERVICE_HOST/PORT name the `kubernetes`
  Service;
- env: values, fieldRef (podIP, name, namespace, uid, nodeName, hostIP),
  configMapKeyRef/secretKeyRef; `$(VAR)` expanded in command and args;
- probes: httpGet (scheme HTTP or HTTPS; HTTPS unverified, as a kubelet's),
  tcpSocket and exec readiness and liveness probes with the spec's periods and
  thresholds; a failed liveness probe restarts the container;
- restartPolicy Always/OnFailure/Never with a short backoff (0.2 s doubling to
  5 s; a real kubelet starts at 10 s);
- deletion: SIGTERM, the pod's grace period, SIGKILL, then DELETE with grace
  0 and the UID precondition so a recreated same-name pod is never deleted.

Several nodes: each `ProcessKubelet` is one node (`node_name`, with its
own `system:node:<name>` identity); the second and later share the first
one's pod network and Service proxy (`network`, `services`), so pods of all
nodes reach each other as on one cluster network.

Test helpers: `crash_pod` (SIGKILL the container process: the container
restarts, same pod, same IP), `pause_pod`/`resume_pod` (SIGSTOP/SIGCONT),
`cut_pod_network`/`restore_pod_network` (the pod's link down/up),
`stall_readiness` (the readiness probe fails for a while), and
`freeze`/`thaw` (the whole node stops answering: its lease, pod status
reports and pod watch stop, and every container process of the node is
SIGSTOPped, as a node that hung or dropped off the network; the API server
then sees only silence, exactly as with a real lost node).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import logging
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.cluster.tier.controlplane import NODE_NAME
from tests.cluster.tier.logserver import LogServer
from tests.cluster.tier.paths import VENV_BIN, image_paths
from tests.cluster.tier.podnet import (
    CLUSTER_DOMAIN,
    DNS_SERVICE_IP,
    GATEWAY,
    KUBERNETES_SERVICE_IP,
    PodAttachment,
    PodNetwork,
)
from tests.cluster.tier.services import ClusterServices

log = logging.getLogger("process-kubelet")

PROVISIONER = "brokergroup.io/process-kubelet"
STORAGE_CLASS = "standard"
#: The directories an image's PATH holds besides its own (Debian's default).
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_env(home: Path) -> dict[str, str]:
    """A container's environment before the pod's own variables: what the broker
    image's ENV sets (its venv first on PATH, unbuffered Python) and a HOME. Nothing
    of the test process's environment: a variable exported where the tests run (a
    KUBECONFIG, say) would reach no real pod, so it must not reach these. The one exception
    is the tests' JVM tuning (JDK_JAVA_OPTIONS, tests/conftest.py): a stock broker pod's
    JVM runs its operator-made command line with it, as every other JVM of the tiers does."""
    env = {
        "PATH": f"{VENV_BIN}:{_SYSTEM_PATH}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    jvm_options = os.environ.get("JDK_JAVA_OPTIONS")
    if jvm_options:
        env["JDK_JAVA_OPTIONS"] = jvm_options
    return env


_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
#: Mounts the container must see at their real path: fixed paths in client libraries, and
#: a stock RocketMQ broker's (its tls.properties, a ConfigMap file no rewrite reaches, names
#: the mounted certificate by its path in the pod).
_BIND_PREFIXES = ("/var/run/secrets/", "/run/secrets/", "/etc/rocketmq/")
#: A pod that could not start (e.g. its Secret does not exist yet) is tried again after this.
POD_START_RETRY_S = 2.0


def path_rewriter(mounts: dict[str, str]) -> Any:
    """A function replacing every whole-path occurrence of a mountPath with its host directory.

    Also inside `sh -c` scripts; the longest mountPath wins (/etc/x/secrets over /etc/x).
    """
    by_path = {m.rstrip("/"): h for m, h in mounts.items()}
    if not by_path:
        return lambda value: value
    ordered = sorted(by_path, key=len, reverse=True)
    pattern = re.compile(
        r"(?<![\w./-])(" + "|".join(map(re.escape, ordered)) + r")(?=[/\s\"':;,=)]|$)"
    )
    return lambda value: pattern.sub(lambda m: by_path[m.group(1)], value)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@dataclass
class _Container:
    name: str
    spec: Any
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    binds: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    ready: bool = False
    started_at: str | None = None
    last_exit: dict[str, Any] | None = None
    waiting: str | None = None
    done: bool = False


@dataclass
class _Pod:
    uid: str
    namespace: str
    name: str
    directory: Path
    restart_policy: str
    containers: list[_Container]
    net: PodAttachment | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_status: dict[str, Any] | None = None

    @property
    def ip(self) -> str:
        return self.net.ip if self.net is not None else ""


class ProcessKubelet:
    def __init__(
        self,
        node_kubeconfig: Path,
        admin_kubeconfig: Path,
        state: Path,
        *,
        node_name: str = NODE_NAME,
        share_with: ProcessKubelet | None = None,
    ) -> None:
        """`share_with`: a running kubelet whose pod network and Service proxy
        this node joins (it owns them: they end with it)."""
        self.node_kubeconfig = node_kubeconfig
        self.admin_kubeconfig = admin_kubeconfig
        self.state = state
        self.node_name = node_name
        self.pods: dict[str, _Pod] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._frozen = threading.Event()
        #: Pod uid → monotonic time until which its readiness probe fails.
        self._not_ready_until: dict[str, float] = {}
        self._threads: list[threading.Thread] = []
        self._owns_network = share_with is None
        self.network = PodNetwork() if share_with is None else share_with.network
        self.services: ClusterServices | None = None if share_with is None else share_with.services
        #: `kubectl logs` through the API server (logserver.py).
        self.logs = LogServer(GATEWAY, state, lambda ns, name: self._find(ns, name).directory)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        (self.state / "pods").mkdir(parents=True, exist_ok=True)
        (self.state / "volumes").mkdir(parents=True, exist_ok=True)
        if self._owns_network:
            self.network.setup()
            admin = _api(self.admin_kubeconfig)
            host, _, port = admin.configuration.host.removeprefix("https://").partition(":")
            self.services = ClusterServices(
                admin, DNS_SERVICE_IP, (KUBERNETES_SERVICE_IP, 443), (host, int(port or 443))
            )
            self.services.start()
        self.logs.start()
        self._register_node()
        self._ensure_storage_class()
        for target in (self._lease_loop, self._provisioner_loop, self._watch_loop):
            t = threading.Thread(target=target, name=target.__name__, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._frozen.clear()
        with self._lock:
            pods = list(self.pods.values())
        for pod in pods:
            pod.stopping.set()
            for c in pod.containers:
                if c.process is not None and c.process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(c.process.pid, signal.SIGCONT)
                    c.process.kill()
                    c.process.wait()
            if not self._owns_network:
                self.network.detach(pod.uid)
        self.logs.stop()
        if self._owns_network:
            if self.services is not None:
                self.services.stop()
            self.network.teardown()

    # ------------------------------------------------------------------ node loss

    def _container_pids(self) -> list[int]:
        with self._lock:
            pods = list(self.pods.values())
        return [
            c.process.pid
            for pod in pods
            for c in pod.containers
            if c.process is not None and c.process.poll() is None
        ]

    def freeze(self) -> list[int]:
        """The node stops answering: no lease, no status, no pod events handled,
        and its container processes are stopped (SIGSTOP). Returns their PIDs."""
        self._frozen.set()
        pids = self._container_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return pids

    def thaw(self) -> None:
        """The node answers again: processes continue, the kubelet catches up."""
        for pid in self._container_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        with self._lock:
            for pod in self.pods.values():
                # The node lifecycle controller may have marked them not ready
                # meanwhile: report every pod afresh, as a kubelet does on return.
                pod.last_status = None
        self._frozen.clear()

    @property
    def frozen(self) -> bool:
        return self._frozen.is_set()

    def _wait_thawed(self) -> None:
        while self._frozen.is_set() and not self._stop.is_set():
            self._stop.wait(0.1)

    # ------------------------------------------------------------------ node

    def _register_node(self) -> None:
        core = client.CoreV1Api(_api(self.node_kubeconfig))
        labels = {
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        with contextlib.suppress(ApiException):
            core.create_node({"metadata": {"name": self.node_name, "labels": labels}})
        self._patch_node_status(core)

    def _patch_node_status(self, core: client.CoreV1Api) -> None:
        now = _now()
        capacity = {"cpu": "16", "memory": "64Gi", "pods": "250", "ephemeral-storage": "100Gi"}
        core.patch_node_status(
            self.node_name,
            {
                "status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "process kubelet is posting ready status",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                    "addresses": [
                        {"type": "InternalIP", "address": GATEWAY},
                        {"type": "Hostname", "address": self.node_name},
                    ],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": self.logs.port}},
                    "nodeInfo": {
                        "kubeletVersion": "v1.33.13",
                        "kubeProxyVersion": "v1.33.13",
                        "operatingSystem": "linux",
                        "architecture": "amd64",
                        "containerRuntimeVersion": "process://brokergroup",
                        "osImage": "process kubelet",
                        "kernelVersion": os.uname().release,
                        "machineID": "",
                        "systemUUID": "",
                        "bootID": "",
                    },
                }
            },
        )

    def _lease_loop(self) -> None:
        api = _api(self.node_kubeconfig)
        leases = client.CoordinationV1Api(api)
        core = client.CoreV1Api(api)
        last_status = time.monotonic()
        while not self._stop.is_set():
            self._wait_thawed()
            body = {
                "metadata": {"name": self.node_name, "namespace": "kube-node-lease"},
                "spec": {
                    "holderIdentity": self.node_name,
                    "leaseDurationSeconds": 40,
                    "renewTime": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                },
            }
            try:
                try:
                    leases.patch_namespaced_lease(self.node_name, "kube-node-lease", body)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    leases.create_namespaced_lease("kube-node-lease", body)
                if time.monotonic() - last_status > 60 or not self._node_ready(core):
                    self._patch_node_status(core)
                    last_status = time.monotonic()
            except Exception as exc:  # keep beating through API hiccups
                log.warning("lease renewal failed: %s", exc)
            self._stop.wait(5)

    def _node_ready(self, core: client.CoreV1Api) -> bool:
        """False after a freeze the node lifecycle controller noticed: post Ready again."""
        node = core.read_node(self.node_name)
        return any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])

    # ------------------------------------------------------------------ volumes

    def _ensure_storage_class(self) -> None:
        storage = client.StorageV1Api(_api(self.admin_kubeconfig))
        with contextlib.suppress(ApiException):
            storage.create_storage_class(
                {
                    "metadata": {
                        "name": STORAGE_CLASS,
                        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
                    },
                    "provisioner": PROVISIONER,
                    "volumeBindingMode": "WaitForFirstConsumer",
                    "reclaimPolicy": "Delete",
                }
            )

    def _provisioner_loop(self) -> None:
        """Dynamic provisioning for `standard` (as the admin: a node may not create PVs)."""
        core = client.CoreV1Api(_api(self.admin_kubeconfig))
        while not self._stop.is_set():
            self._wait_thawed()
            try:
                self._provision_once(core)
            except Exception as exc:
                log.warning("provisioner pass failed: %s", exc)
            self._stop.wait(0.3)

    def _provision_once(self, core: client.CoreV1Api) -> None:
        for pvc in core.list_persistent_volume_claim_for_all_namespaces().items:
            ann = pvc.metadata.annotations or {}
            if (
                pvc.status.phase != "Pending"
                or pvc.spec.volume_name
                or ann.get("volume.kubernetes.io/storage-provisioner") != PROVISIONER
                or ann.get("volume.kubernetes.io/selected-node") != self.node_name
            ):
                continue
            name = f"pvc-{pvc.metadata.uid}"
            path = self.state / "volumes" / name
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o777)
            with contextlib.suppress(ApiException):
                core.create_persistent_volume(
                    {
                        "metadata": {
                            "name": name,
                            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                        },
                        "spec": {
                            "capacity": {"storage": pvc.spec.resources.requests["storage"]},
                            "accessModes": pvc.spec.access_modes or ["ReadWriteOnce"],
                            "persistentVolumeReclaimPolicy": "Delete",
                            # The claim's class: a test's own class of this
                            # provisioner (e.g. one that allows expansion) binds too.
                            "storageClassName": pvc.spec.storage_class_name or STORAGE_CLASS,
                            "hostPath": {"path": str(path)},
                            "claimRef": {
                                "namespace": pvc.metadata.namespace,
                                "name": pvc.metadata.name,
                                "uid": pvc.metadata.uid,
                            },
                            "nodeAffinity": {
                                "required": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {
                                                    "key": "kubernetes.io/hostname",
                                                    "operator": "In",
                                                    "values": [self.node_name],
                                                }
                                            ]
                                        }
                                    ]
                                }
                            },
                        },
                    }
                )
        for pv in core.list_persistent_volume().items:
            ann = pv.metadata.annotations or {}
            if ann.get("pv.kubernetes.io/provisioned-by") == PROVISIONER and pv.status.phase in (
                "Released",
                "Failed",
            ):
                with contextlib.suppress(ApiException):
                    core.delete_persistent_volume(pv.metadata.name)
                shutil.rmtree(pv.spec.host_path.path, ignore_errors=True)

    def _materialize(self, core: client.CoreV1Api, pod: Any, directory: Path) -> dict[str, str]:
        """Host directory of each volume mount's mountPath (first container's view)."""
        namespace = pod.metadata.namespace
        volumes: dict[str, str] = {}
        for volume in pod.spec.volumes or []:
            target = directory / "volumes" / volume.name
            if volume.projected is not None:
                target.mkdir(parents=True, exist_ok=True)
                self._project(core, pod, volume.projected, target)
                volumes[volume.name] = str(target)
                continue
            if volume.persistent_volume_claim is not None:
                claim = core.read_namespaced_persistent_volume_claim(
                    volume.persistent_volume_claim.claim_name, namespace
                )
                pv = core.read_persistent_volume(claim.spec.volume_name)
                source = pv.spec.host_path or pv.spec.local
                volumes[volume.name] = source.path
                continue
            target.mkdir(parents=True, exist_ok=True)
            if volume.config_map is not None:
                self._config_map_files(core, namespace, volume.config_map, target)
            elif volume.secret is not None:
                secret = volume.secret
                self._secret_files(core, namespace, secret.secret_name, secret.items, target)
            volumes[volume.name] = str(target)
        return volumes

    def _project(self, core: client.CoreV1Api, pod: Any, source: Any, target: Path) -> None:
        """A projected volume: service-account token (bound to this pod), ConfigMaps, downward API."""
        namespace = pod.metadata.namespace
        for item in source.sources or []:
            if item.service_account_token is not None:
                sat = item.service_account_token
                request = core.create_namespaced_service_account_token(
                    pod.spec.service_account_name or "default",
                    namespace,
                    {
                        "spec": {
                            "audiences": [sat.audience] if sat.audience else [],
                            "expirationSeconds": sat.expiration_seconds or 3607,
                            "boundObjectRef": {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": pod.metadata.name,
                                "uid": pod.metadata.uid,
                            },
                        }
                    },
                )
                token = {"t": request.status.token.encode()}
                self._write_files(
                    target, token, [client.V1KeyToPath(key="t", path=sat.path)], 0o600
                )
            elif item.config_map is not None:
                self._config_map_files(core, namespace, item.config_map, target)
            elif item.secret is not None:
                self._secret_files(core, namespace, item.secret.name, item.secret.items, target)
            elif item.downward_api is not None:
                fields = {
                    "metadata.namespace": namespace,
                    "metadata.name": pod.metadata.name,
                    "metadata.uid": pod.metadata.uid,
                }
                for f in item.downward_api.items or []:
                    if f.field_ref is not None:
                        value = fields.get(f.field_ref.field_path, "").encode()
                        at = [client.V1KeyToPath(key="v", path=f.path)]
                        self._write_files(target, {"v": value}, at, 0o644)

    def _config_map_files(
        self, core: client.CoreV1Api, namespace: str, ref: Any, target: Path
    ) -> None:
        cm = core.read_namespaced_config_map(ref.name, namespace)
        data = {k: v.encode() for k, v in (cm.data or {}).items()}
        self._write_files(target, data, ref.items, 0o644)

    def _secret_files(
        self, core: client.CoreV1Api, namespace: str, name: str, items: Any, target: Path
    ) -> None:
        secret = core.read_namespaced_secret(name, namespace)
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        self._write_files(target, data, items, 0o600)

    @staticmethod
    def _write_files(target: Path, data: dict[str, bytes], items: Any, mode: int) -> None:
        paths = {i.key: i.path for i in items} if items else {k: k for k in data}
        for key, rel in paths.items():
            if key in data:
                path = target / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data[key])
                path.chmod(mode)

    # ------------------------------------------------------------------ pods

    def _watch_loop(self) -> None:
        api = _api(self.node_kubeconfig)
        core = client.CoreV1Api(api)
        selector = f"spec.nodeName={self.node_name}"
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(
                    core.list_pod_for_all_namespaces, field_selector=selector, timeout_seconds=30
                ):
                    if self._stop.is_set():
                        return
                    self._wait_thawed()  # a frozen node handles nothing; it catches up after
                    self._on_pod_event(event["type"], event["object"])
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("pod watch ended: %s; re-listing", exc)
                    self._stop.wait(0.5)

    def _on_pod_event(self, kind: str, pod: Any) -> None:
        uid = pod.metadata.uid
        with self._lock:
            known = self.pods.get(uid)
        if kind == "DELETED" or pod.metadata.deletion_timestamp is not None:
            if known is not None and not known.stopping.is_set():
                known.stopping.set()
                threading.Thread(target=self._terminate, args=(known, pod), daemon=True).start()
            elif known is None and kind != "DELETED":
                threading.Thread(target=self._delete_now, args=(pod,), daemon=True).start()
            return
        if known is None and pod.status.phase not in ("Succeeded", "Failed"):
            with self._lock:
                self.pods[uid] = _Pod(
                    uid, pod.metadata.namespace, pod.metadata.name,
                    self.state / "pods" / uid, pod.spec.restart_policy or "Always", [],
                )  # fmt: skip
            threading.Thread(target=self._run_pod, args=(pod,), daemon=True).start()

    def _retry_pod(self, namespace: str, name: str, uid: str) -> None:
        if self._stop.is_set():
            return
        core = client.CoreV1Api(_api(self.node_kubeconfig))
        try:
            pod = core.read_namespaced_pod(name, namespace)
        except ApiException:
            return  # gone: nothing to start
        if pod.metadata.uid == uid:
            self._on_pod_event("MODIFIED", pod)

    def _run_pod(self, pod: Any) -> None:
        api = _api(self.node_kubeconfig)
        core = client.CoreV1Api(api)
        with self._lock:
            run = self.pods[pod.metadata.uid]
        try:
            run.directory.mkdir(parents=True, exist_ok=True)
            # Volumes first: a pod that cannot start yet (its Secret is created
            # later) must not report an IP it gives back (a pod's IP cannot change).
            volumes = self._materialize(core, pod, run.directory)
            if run.net is None:
                hostname = pod.spec.hostname or pod.metadata.name
                subdomain = pod.spec.subdomain
                fqdn = (
                    f"{hostname}.{subdomain}.{run.namespace}.svc.{CLUSTER_DOMAIN}"
                    if subdomain
                    else None
                )
                run.net = self.network.attach(run.uid, hostname, fqdn, run.namespace)
            for spec in pod.spec.containers:
                run.containers.append(self._prepare(core, pod, run, spec, volumes))
        except Exception as exc:
            log.warning("pod %s/%s cannot start: %s", run.namespace, run.name, exc)
            for c in run.containers:
                c.waiting = "CreateContainerConfigError"
            self._report(core, run, pod, message=str(exc))
            time.sleep(1)
            with self._lock:
                self.pods.pop(run.uid, None)  # retried on the next event, or below
            self.network.detach(run.uid)
            # Like a real kubelet retrying a volume it cannot set up yet (a Secret
            # that another component creates later): try again without waiting
            # for an event that may never come.
            retry = threading.Timer(
                POD_START_RETRY_S, self._retry_pod, args=(run.namespace, run.name, run.uid)
            )
            retry.daemon = True
            retry.start()
            return
        self._supervise(core, run, pod)

    def _prepare(
        self, core: client.CoreV1Api, pod: Any, run: _Pod, spec: Any, volumes: dict[str, str]
    ) -> _Container:
        mounts, binds = {}, {}
        for m in spec.volume_mounts or []:
            if m.name in volumes:
                source = volumes[m.name] + (f"/{m.sub_path}" if m.sub_path else "")
                if m.mount_path.startswith(_BIND_PREFIXES):
                    binds[source] = m.mount_path
                else:
                    mounts[m.mount_path] = source

        # The image's own files first: a volume mounted over an image path wins.
        host_path = path_rewriter({**image_paths(), **mounts})

        fields = {
            "status.podIP": run.ip,
            "status.podIPs": run.ip,
            "status.hostIP": GATEWAY,
            "metadata.name": run.name,
            "metadata.namespace": run.namespace,
            "metadata.uid": run.uid,
            "spec.nodeName": self.node_name,
            "spec.serviceAccountName": pod.spec.service_account_name or "default",
        }
        env: dict[str, str] = {
            "KUBERNETES_SERVICE_HOST": KUBERNETES_SERVICE_IP,
            "KUBERNETES_SERVICE_PORT": "443",
            "KUBERNETES_SERVICE_PORT_HTTPS": "443",
            "KUBERNETES_PORT": f"tcp://{KUBERNETES_SERVICE_IP}:443",
        }
        for var in spec.env or []:
            if var.value_from is None:
                value = _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), var.value or "")
            elif var.value_from.field_ref is not None:
                value = fields.get(var.value_from.field_ref.field_path, "")
            elif var.value_from.config_map_key_ref is not None:
                ref = var.value_from.config_map_key_ref
                value = (core.read_namespaced_config_map(ref.name, run.namespace).data or {})[
                    ref.key
                ]
            elif var.value_from.secret_key_ref is not None:
                ref = var.value_from.secret_key_ref
                raw = (core.read_namespaced_secret(ref.name, run.namespace).data or {})[ref.key]
                value = base64.b64decode(raw).decode()
            else:
                value = ""
            env[var.name] = host_path(value)
        argv = [
            host_path(_VAR.sub(lambda m: env.get(m.group(1), m.group(0)), a))
            for a in [*(spec.command or []), *(spec.args or [])]
        ]
        if not argv:
            raise ValueError(f"container {spec.name} has no command (images are not run here)")
        if "/" not in argv[0]:
            argv[0] = str(VENV_BIN / argv[0]) if (VENV_BIN / argv[0]).exists() else argv[0]
        cwd = host_path(spec.working_dir) if spec.working_dir else str(run.directory)
        # $(VAR) above sees only the pod's own variables, as in Kubernetes.
        env = {**image_env(run.directory), **env}
        return _Container(spec.name, spec, argv, env, cwd, binds)

    def _start(self, run: _Pod, c: _Container) -> None:
        env = c.env
        with open(run.directory / f"{c.name}.log", "ab") as log_file:
            log_file.write(f"--- start #{c.restarts + 1} at {_now()} on {run.ip}\n".encode())
            log_file.flush()
            assert run.net is not None
            c.process = subprocess.Popen(
                self.network.wrap(run.net, c.argv, c.binds), stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=c.cwd, start_new_session=True,
            )  # fmt: skip
        c.started_at = _now()
        c.ready = False
        c.waiting = None

    def _exec_argv(self, run: _Pod, argv: list[str]) -> list[str]:
        return self.network.exec_argv(run.net, argv) if run.net is not None else argv

    def _supervise(self, core: client.CoreV1Api, run: _Pod, pod: Any) -> None:
        backoff: dict[str, float] = {c.name: 0.2 for c in run.containers}
        next_start: dict[str, float] = {c.name: 0.0 for c in run.containers}
        probes = _ProbeClock(lambda argv: self._exec_argv(run, argv))
        for c in run.containers:
            self._start(run, c)
            probes.started(c)
        while not run.stopping.is_set() and not self._stop.is_set():
            self._wait_thawed()
            now = time.monotonic()
            with run.lock:
                for c in run.containers:
                    if c.done:
                        continue
                    proc = c.process
                    if proc is not None and proc.poll() is not None:
                        code = proc.returncode
                        c.last_exit = {
                            "exitCode": code if code >= 0 else 128 - code,
                            "reason": "Completed" if code == 0 else "Error",
                            "startedAt": c.started_at,
                            "finishedAt": _now(),
                        }
                        c.process = None
                        c.ready = False
                        restart = run.restart_policy == "Always" or (
                            run.restart_policy == "OnFailure" and code != 0
                        )
                        if restart:
                            c.waiting = (
                                "CrashLoopBackOff" if c.restarts > 0 else "ContainerCreating"
                            )
                            next_start[c.name] = now + backoff[c.name]
                            backoff[c.name] = min(5.0, backoff[c.name] * 2)
                        else:
                            c.done = True
                    elif proc is None and now >= next_start[c.name]:
                        c.restarts += 1
                        self._start(run, c)
                        probes.started(c)
                    elif proc is not None:
                        ready, alive = probes.check(c, run.ip, now)
                        if now < self._not_ready_until.get(run.uid, 0.0):
                            ready = False  # a readiness stall the test asked for
                        if ready is not None:
                            c.ready = ready
                            if ready:
                                backoff[c.name] = 0.2
                        if alive is False:
                            log.info("liveness probe failed: restarting %s/%s", run.name, c.name)
                            proc.kill()
            self._report(core, run, pod)
            if all(c.done for c in run.containers):
                return
            run.stopping.wait(0.1)

    def _report(self, core: client.CoreV1Api, run: _Pod, pod: Any, message: str = "") -> None:
        statuses = []
        for c in run.containers:
            if c.process is not None:
                state: dict[str, Any] = {"running": {"startedAt": c.started_at}}
            elif c.done and c.last_exit is not None:
                state = {"terminated": c.last_exit}
            else:
                state = {
                    "waiting": {"reason": c.waiting or "ContainerCreating", "message": message}
                }
            statuses.append(
                {
                    "name": c.name,
                    "image": c.spec.image or "",
                    "imageID": f"process://{VENV_BIN}",
                    "containerID": f"process://{c.process.pid}" if c.process else None,
                    "ready": c.ready,
                    "started": c.process is not None,
                    "restartCount": c.restarts,
                    "state": state,
                    "lastState": {"terminated": c.last_exit} if c.last_exit else {},
                }
            )
        all_ready = bool(run.containers) and all(c.ready for c in run.containers)
        if run.containers and all(c.done for c in run.containers):
            failed = any((c.last_exit or {}).get("exitCode", 1) != 0 for c in run.containers)
            phase = "Failed" if failed else "Succeeded"
        else:
            phase = "Running" if any(c.process for c in run.containers) else "Pending"
        ready = "True" if all_ready else "False"
        status = {
            "phase": phase,
            "hostIP": GATEWAY,
            "hostIPs": [{"ip": GATEWAY}],
            **({"podIP": run.ip, "podIPs": [{"ip": run.ip}]} if run.ip else {}),
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": ready},
                {"type": "Ready", "status": ready},
            ],
            "containerStatuses": statuses,
        }
        if status == run.last_status:
            return
        now = _now()
        body = {
            "status": {
                **status,
                "startTime": pod.status.start_time.strftime("%Y-%m-%dT%H:%M:%SZ")
                if pod.status.start_time
                else now,
                "conditions": [{**c, "lastTransitionTime": now} for c in status["conditions"]],
            }
        }
        try:
            core.patch_namespaced_pod_status(run.name, run.namespace, body)
            run.last_status = status
        except ApiException as exc:
            if exc.status != 404:
                log.warning("status of %s/%s: %s", run.namespace, run.name, exc.status)

    def _terminate(self, run: _Pod, pod: Any) -> None:
        grace = pod.metadata.deletion_grace_period_seconds
        grace_s = 30.0 if grace is None else float(grace)
        with run.lock:
            procs = [c.process for c in run.containers if c.process is not None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.network.detach(run.uid)
        self._delete_now(pod)
        with self._lock:
            self.pods.pop(run.uid, None)

    def _delete_now(self, pod: Any) -> None:
        core = client.CoreV1Api(_api(self.node_kubeconfig))
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(
                pod.metadata.name,
                pod.metadata.namespace,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0,
                    preconditions=client.V1Preconditions(uid=pod.metadata.uid),
                ),
            )

    # ------------------------------------------------------------------ test helpers

    def _find(self, pod: Any, name: str | None = None) -> _Pod:
        if name is not None:
            namespace = str(pod)
        else:
            namespace, name = pod.metadata.namespace, pod.metadata.name
        with self._lock:
            found = [p for p in self.pods.values() if (p.namespace, p.name) == (namespace, name)]
        if not found:
            raise LookupError(f"pod {namespace}/{name} does not run on this node")
        return found[-1]

    def _signal(self, pod: Any, name: str | None, sig: int, container: str | None) -> int:
        run = self._find(pod, name)
        with run.lock:
            c = next(c for c in run.containers if container in (None, c.name))
            if c.process is None:
                raise LookupError(f"container {c.name} of {run.name} is not running")
            os.kill(c.process.pid, sig)
            return c.process.pid

    def crash_pod(self, pod: Any, name: str | None = None, container: str | None = None) -> int:
        """SIGKILL the container's process (a V1Pod, or namespace and name): it restarts."""
        return self._signal(pod, name, signal.SIGKILL, container)

    def pause_pod(self, pod: Any, name: str | None = None, container: str | None = None) -> int:
        return self._signal(pod, name, signal.SIGSTOP, container)

    def resume_pod(self, pod: Any, name: str | None = None, container: str | None = None) -> int:
        return self._signal(pod, name, signal.SIGCONT, container)

    def cut_pod_network(self, pod: Any, name: str | None = None) -> None:
        """The pod's link goes down: no packet in or out until `restore_pod_network`."""
        run = self._find(pod, name)
        assert run.net is not None
        self.network.cut(run.net)

    def restore_pod_network(self, pod: Any, name: str | None = None) -> None:
        run = self._find(pod, name)
        assert run.net is not None
        self.network.restore(run.net)

    def stall_readiness(self, pod: Any, seconds: float, name: str | None = None) -> None:
        """The pod's readiness probe fails for `seconds` (the process runs on):
        a slow /readyz under load, a probe timeout."""
        run = self._find(pod, name)
        self._not_ready_until[run.uid] = time.monotonic() + seconds

    def host_address(self) -> str:
        """An address of this machine that pods reach (for test processes outside the cluster)."""
        return self.network.host_address()

    def pod_dir(self, namespace: str, name: str) -> Path:
        return self._find(namespace, name).directory


class _ProbeClock:
    """When each container's probes run next, and their consecutive results."""

    def __init__(self, exec_argv: Any = None) -> None:
        self.exec_argv = exec_argv or (lambda argv: argv)
        self._due: dict[tuple[str, str], float] = {}
        self._failures: dict[tuple[str, str], int] = {}

    def started(self, c: _Container) -> None:
        now = time.monotonic()
        for kind in ("readiness", "liveness"):
            probe = getattr(c.spec, f"{kind}_probe")
            delay = (probe.initial_delay_seconds or 0) if probe is not None else 0
            self._due[(c.name, kind)] = now + delay
            self._failures[(c.name, kind)] = 0

    def check(self, c: _Container, ip: str, now: float) -> tuple[bool | None, bool | None]:
        """(ready or None if not due, alive or None if not due / no liveness probe)."""
        results: list[bool | None] = []
        for kind in ("readiness", "liveness"):
            probe = getattr(c.spec, f"{kind}_probe")
            key = (c.name, kind)
            if probe is None:
                results.append(True if kind == "readiness" else None)
                continue
            if now < self._due[key]:
                results.append(None)
                continue
            self._due[key] = now + (probe.period_seconds or 10)
            ok = _run_probe(probe, ip, c, self.exec_argv)
            if ok:
                self._failures[key] = 0
                results.append(True)
            else:
                self._failures[key] += 1
                threshold = probe.failure_threshold or 3
                if kind == "readiness":
                    results.append(False)
                else:
                    results.append(False if self._failures[key] >= threshold else None)
        return results[0], results[1]


def _run_probe(probe: Any, ip: str, c: _Container, exec_argv: Any) -> bool:
    timeout = probe.timeout_seconds or 1
    try:
        if probe.http_get is not None:
            port = _port_of(probe.http_get.port, c.spec)
            https = str(probe.http_get.scheme or "HTTP").upper() == "HTTPS"
            url = f"{'https' if https else 'http'}://{ip}:{port}{probe.http_get.path or '/'}"
            # A kubelet's HTTPS probe does not verify the certificate (InsecureSkipVerify).
            unverified = ssl._create_unverified_context() if https else None
            with urllib.request.urlopen(url, timeout=timeout, context=unverified) as response:
                return 200 <= int(response.status) < 400
        if probe.tcp_socket is not None:
            port = _port_of(probe.tcp_socket.port, c.spec)
            with socket.create_connection((ip, port), timeout=timeout):
                return True
        if probe._exec is not None:
            done = subprocess.run(
                exec_argv(list(probe._exec.command)), timeout=timeout, capture_output=True,
                env=c.env,
            )  # fmt: skip
            return done.returncode == 0
    except (OSError, urllib.error.URLError, subprocess.TimeoutExpired, ValueError):
        return False
    return True


def _port_of(port: Any, spec: Any) -> int:
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in spec.ports or []:
        if p.name == port:
            return int(p.container_port)
    raise ValueError(f"no container port named {port}")
