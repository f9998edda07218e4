"""spec.tls on a real API server (issue 36 item 2, cluster tier): the operator makes the
cluster CA and the group's server certificate, the broker pods mount them and serve them on
their RocketMQ remoting port (enforcing: TLS only), verified for a pod's stable name
against the trust bundle; a forced renewal (the brokergroup.io/force-renew annotation)
rolls every pod onto a new certificate through the planner, slaves first and one
switchover for the master: the master role moves once.

The group also runs with `spec.tls.httpPort`: every pod runs the operator's command with
`--http-tls`, the process kubelet's readiness and liveness probes reach /readyz and
/healthz with `scheme: HTTPS` (so Available itself says they answer over HTTPS), the port
answers HTTPS verified against the bundle for the pod's stable name, and a plaintext
request on it gets no HTTP answer; after the renewal's roll the port serves the new
certificate.
"""

from __future__ import annotations

import base64
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.cluster.operator_env import OperatorEnv, apply_crds, wait_for
from tests.integration.rocketmq_brokers import find_home

pytestmark = pytest.mark.cluster

GROUP = "tls"
REMOTING_PORT = 10914
#: A stock broker's listenPort (its only client port).
STOCK_REMOTING_PORT = 10911
HTTP_PORT = 10913
FORCE = "brokergroup.io/force-renew"
DIGEST = "brokergroup.io/tls-digest"


class TlsEnv(OperatorEnv):
    def operator_env(self) -> dict[str, str]:
        return {
            **super().operator_env(),
            "BROKERGROUP_CLUSTER_CA_SECRET": f"{self.namespace}/brokergroup-cluster-ca",
            "BROKERGROUP_TLS_CHECK_SECONDS": "1",
        }


@pytest.fixture
def env(k8s_cluster: Any, tmp_path: Path) -> Iterator[OperatorEnv]:
    """tier_env's namespace, controllers and operator, the operator with a cluster CA."""
    kubeconfig = str(k8s_cluster.kubeconfig)
    apply_crds(kubeconfig)
    namespace = f"tls-{uuid.uuid4().hex[:8]}"
    e = TlsEnv(kubeconfig, namespace, tmp_path, tuple(k8s_cluster.host_addresses(3)))
    e.core.create_namespace({"metadata": {"name": namespace}})
    e.start()
    try:
        yield e
    finally:
        e.close()
        e.core.delete_namespace(namespace)


def _secret(env: OperatorEnv, name: str) -> dict[str, bytes]:
    data = env.core.read_namespaced_secret(name, env.namespace).data or {}
    return {k: base64.b64decode(v) for k, v in data.items()}


def _served(
    env: OperatorEnv, pod: Any, bundle: Path, port: int = REMOTING_PORT, group: str = GROUP
) -> x509.Certificate:
    """The certificate the pod's `port` presents, verified against `bundle` for the pod's
    stable name (the wildcard of the headless Service)."""
    context = ssl.create_default_context(cafile=str(bundle))
    host = f"{pod.metadata.name}.{group}-headless.{env.namespace}.svc"
    with (
        socket.create_connection((pod.status.pod_ip, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _https_get(env: OperatorEnv, pod: Any, bundle: Path, path: str) -> tuple[int, bytes]:
    """GET `path` on the pod's HTTP port over HTTPS, verified against `bundle` for the
    pod's stable name: (status, body)."""
    context = ssl.create_default_context(cafile=str(bundle))
    host = f"{pod.metadata.name}.{GROUP}-headless.{env.namespace}.svc"
    with (
        socket.create_connection((pod.status.pod_ip, HTTP_PORT), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=host) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def _plain_http_unanswered(pod: Any) -> bool:
    """HTTPS only: a plaintext request on the HTTP port gets no HTTP answer (the TLS
    server reads it as a bad handshake and closes, perhaps after an alert record)."""
    with socket.create_connection((pod.status.pod_ip, HTTP_PORT), timeout=5) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        try:
            while chunk := raw.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    return not answer.startswith(b"HTTP/")


def _plaintext_refused(pod: Any) -> bool:
    """Enforcing: a plaintext remoting frame gets the connection closed, no answer."""
    with socket.create_connection((pod.status.pod_ip, REMOTING_PORT), timeout=5) as raw:
        raw.sendall(b"\x00\x00\x00\x10\x00\x00\x00\x0c{}" + b"\x00" * 10)
        try:
            return raw.recv(1) == b""
        except ConnectionResetError:
            return True


def _pods_on(env: OperatorEnv, digest: str) -> bool:
    pods = [p for p in env.pods(GROUP) if p.metadata.deletion_timestamp is None]
    return len(pods) == 3 and all(
        (p.metadata.annotations or {}).get(DIGEST) == digest for p in pods
    )


def test_certificates_made_mounted_served_and_a_forced_renewal_rolls_once(
    env: OperatorEnv, tmp_path: Path
) -> None:
    env.create_group(
        GROUP, 3, ha={"minInSyncReplicas": 2}, tls={"mode": "enforcing", "httpPort": True}
    )
    env.wait_available(GROUP, 3, 150)
    status = wait_for("status.tls", lambda: env.group(GROUP)["status"].get("tls"), 30)
    ca = _secret(env, "brokergroup-cluster-ca")
    leaf = _secret(env, f"{GROUP}-tls")
    bundle = tmp_path / "ca.crt"
    bundle.write_text(
        env.core.read_namespaced_config_map(f"{GROUP}-tls-trust", env.namespace).data["ca.crt"]
    )
    assert bundle.read_bytes() == ca["ca-bundle.crt"]
    issued = x509.load_pem_x509_certificate(leaf["tls.crt"])
    issued.verify_directly_issued_by(x509.load_pem_x509_certificate(ca["ca.crt"]))
    sts = env.apps.read_namespaced_stateful_set(GROUP, env.namespace)
    volumes = {v.name: v for v in sts.spec.template.spec.volumes}
    assert volumes["tls"].secret.secret_name == f"{GROUP}-tls"
    assert sts.spec.template.metadata.annotations[DIGEST] == status["digest"]
    broker = sts.spec.template.spec.containers[0]
    assert "--http-tls" in broker.command
    assert broker.readiness_probe.http_get.scheme == "HTTPS"
    for pod in env.pods(GROUP):
        assert _served(env, pod, bundle).serial_number == issued.serial_number
        assert _plaintext_refused(pod)
        assert _served(env, pod, bundle, HTTP_PORT).serial_number == issued.serial_number
        assert _https_get(env, pod, bundle, "/readyz")[0] == 200
        code, metrics = _https_get(env, pod, bundle, "/metrics")
        assert code == 200 and b"brokergroup_broker" in metrics
        assert _plain_http_unanswered(pod)

    before = env.group(GROUP)["status"]
    epoch, master = before["masterEpoch"], env.master_pod(GROUP).metadata.name
    env.patch_group(GROUP, {"metadata": {"annotations": {FORCE: "renew-1"}}})
    renewed = wait_for(
        "the renewal recorded",
        lambda: (
            (t := env.group(GROUP)["status"].get("tls") or {}).get("renewedFor") == "renew-1" and t
        ),
        30,
    )
    assert renewed["digest"] != status["digest"]
    wait_for(
        "every pod rolled onto the new certificate", lambda: _pods_on(env, renewed["digest"]), 240
    )
    after = env.wait_available(GROUP, 3, 120)["status"]
    new_leaf = x509.load_pem_x509_certificate(_secret(env, f"{GROUP}-tls")["tls.crt"])
    assert new_leaf.serial_number != issued.serial_number
    for pod in env.pods(GROUP):
        assert _served(env, pod, bundle).serial_number == new_leaf.serial_number
        assert _served(env, pod, bundle, HTTP_PORT).serial_number == new_leaf.serial_number
    # One switchover (the planner's, before the old master's restart): the epoch moved once.
    assert after["masterEpoch"] == epoch + 1, (epoch, after["masterEpoch"], env.group_events(GROUP))
    assert env.master_pod(GROUP).metadata.name != master
    reasons = [r for r, _ in env.group_events(GROUP)]
    assert reasons.count("CertificateIssued") == 2, reasons


def test_a_stock_rocketmq_group_serves_its_certificate(env: OperatorEnv, tmp_path: Path) -> None:
    """spec.engine rocketmq with spec.tls permissive: the operator issues the group's
    certificate and the stock RocketMQ 5.3 broker (a JVM the process kubelet runs from the
    cached jars) serves it on its remoting port through RocketMQ's TlsSystemConfig, verified
    for the pod's stable name. (Until 5ef7638 the operator refused every such group as
    InvalidSpec.)"""
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    name = "stock-tls"
    env.create_group(
        name, 1, engine="rocketmq", tls={"mode": "permissive"},
        rocketmq={"heapSize": "256m", "mappedFileSizeCommitLog": 16 << 20,
                  "proxy": {"enabled": False}},
        ha={"minInSyncReplicas": 1, "heartbeatTimeoutMs": 5000},
    )  # fmt: skip
    env.wait_available(name, 1, 180)
    leaf = _secret(env, f"{name}-tls")
    bundle = tmp_path / "stock-ca.crt"
    bundle.write_text(
        env.core.read_namespaced_config_map(f"{name}-tls-trust", env.namespace).data["ca.crt"]
    )
    issued = x509.load_pem_x509_certificate(leaf["tls.crt"])
    (pod,) = env.pods(name)
    served = _served(env, pod, bundle, STOCK_REMOTING_PORT, group=name)
    assert served.serial_number == issued.serial_number


def test_chart_tls_values_render_the_controllers_flags_volume_and_operator_settings() -> None:
    """`helm template` with tls.controllers.mode enforcing: the controllers serve their
    certificate Secret, the operator is told where the CA and that Secret live."""
    from tests.cluster.test_chart import _render

    default = _render()
    controller = default[("StatefulSet", "rel-brokergroup-controller")]["spec"]["template"]
    assert "--remoting-tls-mode" not in controller["spec"]["containers"][0]["command"][2]
    operator = default[("Deployment", "rel-brokergroup-operator")]["spec"]["template"]
    env = {e["name"]: e.get("value") for e in operator["spec"]["containers"][0]["env"]}
    assert env["BROKERGROUP_CLUSTER_CA_SECRET"] == "mq/rel-brokergroup-cluster-ca"
    assert env["BROKERGROUP_CLUSTER_CA_MANAGED"] == "true"
    assert "BROKERGROUP_CONTROLLER_TLS" not in env

    on = _render("tls.controllers.mode=enforcing", "tls.clusterCa.existingSecret=myca")
    controller = on[("StatefulSet", "rel-brokergroup-controller")]["spec"]["template"]["spec"]
    script = controller["containers"][0]["command"][2]
    assert (
        "--remoting-tls-mode enforcing --tls-cert-file /etc/brokergroup/tls/tls.crt "
        "--tls-key-file /etc/brokergroup/tls/tls.key" in script
    )
    volumes = {v["name"]: v for v in controller["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "rel-brokergroup-controller-tls"
    operator = on[("Deployment", "rel-brokergroup-operator")]["spec"]["template"]
    env = {e["name"]: e.get("value") for e in operator["spec"]["containers"][0]["env"]}
    assert env["BROKERGROUP_CLUSTER_CA_SECRET"] == "mq/myca"
    assert env["BROKERGROUP_CLUSTER_CA_MANAGED"] == "false"
    assert env["BROKERGROUP_CONTROLLER_TLS_SECRET"] == "mq/rel-brokergroup-controller-tls"
    assert env["BROKERGROUP_CONTROLLER_TLS_NAMES"].split(",")[:2] == [
        "rel-brokergroup-namesrv",
        "rel-brokergroup-namesrv.mq",
    ]
    release = on[("Role", "rel-brokergroup-release")]["rules"]
    assert {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["myca", "rel-brokergroup-controller-tls"],
        "verbs": ["get", "patch"],
    } in release
