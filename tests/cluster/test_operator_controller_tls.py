"""The controllers' API over HTTPS only, on a real API server (issue 36 items 1-2, cluster
tier; docs/security.md "TLS on Kubernetes"): the three controllers run `--api-tls` with a
certificate of the release's cluster CA (a CA the test brings in the cluster CA Secret, as
the chart's tls.controllers.httpsApi makes the operator's own); the operator runs with
BROKERGROUP_CONTROLLER_API_TLS, so it reaches them verifying the cluster CA and presenting a
certificate it signs. A group with spec.tls comes up Available with both slaves in the
SyncStateSet: its brokers applied for their ids, registered and heartbeat over mutual TLS
(`--controller-tls`), replicated over mutual-TLS HA, and the operator read the group's
epochs over HTTPS for the status it wrote. A group without spec.tls is refused with the
reason, and plain HTTP gets no answer from the API.

On the code before (operator without the HTTPS client), the operator's every controller
call failed, and the group never reached Available.
"""

from __future__ import annotations

import datetime
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_remoting.certificates import issue, make_ca
from tests.cluster.operator_env import OperatorEnv, apply_crds, wait_for

pytestmark = pytest.mark.cluster

CA_SECRET = "brokergroup-cluster-ca"


class HttpsEnv(OperatorEnv):
    def operator_env(self) -> dict[str, str]:
        return {
            **super().operator_env(),
            "BROKERGROUP_CLUSTER_CA_SECRET": f"{self.namespace}/{CA_SECRET}",
            "BROKERGROUP_CLUSTER_CA_MANAGED": "false",
            "BROKERGROUP_CONTROLLER_API_TLS": "true",
            "BROKERGROUP_TLS_CHECK_SECONDS": "5",
        }


@pytest.fixture
def env(k8s_cluster: Any, tmp_path: Path) -> Iterator[OperatorEnv]:
    kubeconfig = str(k8s_cluster.kubeconfig)
    apply_crds(kubeconfig)
    namespace = f"api-tls-{uuid.uuid4().hex[:8]}"
    hosts = tuple(k8s_cluster.host_addresses(3))
    e = HttpsEnv(kubeconfig, namespace, tmp_path, hosts)
    now = datetime.datetime.now(datetime.UTC)
    ca = make_ca("test cluster CA", now=now, valid_days=30)
    leaf = issue(ca, "controllers", list(hosts), now=now, valid_days=30)
    files = {"ca.crt": ca.cert_pem, "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(0o600)
    e.controllers.extra_args = (
        "--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-key-file", str(tmp_path / "tls.key"),
        "--tls-ca-file", str(tmp_path / "ca.crt"), "--api-tls",
    )  # fmt: skip
    e.controllers.ca_file = tmp_path / "ca.crt"
    e.core.create_namespace({"metadata": {"name": namespace}})
    e.core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": CA_SECRET},
            "stringData": {
                "ca.crt": ca.cert_pem.decode(),
                "ca.key": ca.key_pem.decode(),
                "ca-bundle.crt": ca.cert_pem.decode(),
            },
        },
    )
    e.start()
    try:
        yield e
    finally:
        e.close()
        e.core.delete_namespace(namespace)


def _ready(env: OperatorEnv, name: str) -> tuple[str, str, str] | None:
    for c in (env.group(name).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == "False" and c.get("reason"):
            return (str(c["status"]), str(c["reason"]), str(c.get("message")))
    return None


def test_https_api_end_to_end(env: OperatorEnv) -> None:
    host = env.controllers.hosts[0]
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://{host}:9878/healthz", timeout=3).read()

    env.create_group("secure", replicas=3, tls={"mode": "enforcing"})
    env.wait_available("secure", 3, timeout_s=150)

    def status_follows_controllers() -> bool:
        # Two reads of moving values (a loaded machine may elect again between them): wait
        # until the operator's status shows what the controllers say, over HTTPS, verified.
        info = env.controllers.replica_info(env.namespace, "secure")
        status = env.group("secure").get("status") or {}
        return sorted(info["syncStateSet"]) == sorted(status.get("syncStateSet") or []) and (
            status.get("masterEpoch") == info["masterEpoch"]
        )

    wait_for("bg/secure status = the controllers' replica info", status_follows_controllers, 60)

    env.create_group("plain", replicas=1)
    ready = wait_for("bg/plain refused", lambda: _ready(env, "plain"), 60)
    assert ready[1] == "InvalidSpec", ready
    assert "needs spec.tls" in ready[2], ready
    assert not env.pods("plain")
