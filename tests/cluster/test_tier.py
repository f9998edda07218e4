"""Smoke tests of the cluster tier itself (issue 10 item 4), on a real API server.

- A StatefulSet with a volumeClaimTemplate gets Running, Ready pods with
  distinct pod IPs, each with its own provisioned volume, bound to node-1.
- Deleting a pod brings it back (the StatefulSet controller recreates it, the
  process kubelet finishes the deletion) on a new IP with its volume's data.
- Crashing a pod's process restarts the container: same pod, same IP,
  restartCount 1.
- A CRD with a CEL rule rejects a bad object with the rule's message.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cluster.conftest import K8sCluster
from tests.cluster.tier.kubelet import image_env

pytestmark = pytest.mark.cluster

SCRIPT = (
    'echo "$POD_NAME $POD_IP" >> "$DATA_DIR/incarnations"; env > "$DATA_DIR/env"; '
    'exec python3 -m http.server --bind "$POD_IP" 8080 --directory "$DATA_DIR"'
)


def _statefulset(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "web",
                            "image": "brokergroup:test",
                            "command": ["sh", "-c", SCRIPT],
                            "env": [
                                {"name": "DATA_DIR", "value": "/data"},
                                {
                                    "name": "POD_IP",
                                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
                                },
                                {
                                    "name": "POD_NAME",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                                },
                            ],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {
                                "httpGet": {"path": "/incarnations", "port": "http"},
                                "periodSeconds": 1,
                            },
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "10Mi"}},
                    },
                }
            ],
        },
    }


def _wait(what: str, probe: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}; last {last!r}")


def _ready_pods(core: client.CoreV1Api, namespace: str, n: int) -> list[Any] | None:
    pods = core.list_namespaced_pod(namespace).items
    ready = [
        p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and p.status.phase == "Running"
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    return sorted(ready, key=lambda p: p.metadata.name) if len(ready) == n else None


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=2) as response:
        return str(response.read().decode())


def test_statefulset_pods_volumes_new_ip_on_recreate_and_crash_restart(
    k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exported where the tests run: no real pod would see it.
    monkeypatch.setenv("BROKERGROUP_TIER_HOST_ONLY", "1")
    api = k8s_cluster.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"clusterIP": "None", "selector": {"app": "web"}, "ports": [{"port": 8080}]},
        },
    )
    apps.create_namespaced_stateful_set(namespace, _statefulset("web", 3))
    pods = _wait("3 Ready pods", lambda: _ready_pods(core, namespace, 3))
    ips = [p.status.pod_ip for p in pods]
    assert len(set(ips)) == 3, ips
    assert all(p.spec.node_name == "node-1" for p in pods)
    for pod in pods:
        assert _get(f"http://{pod.status.pod_ip}:8080/incarnations") == (
            f"{pod.metadata.name} {pod.status.pod_ip}\n"
        )
    env = dict(
        line.split("=", 1) for line in _get(f"http://{ips[0]}:8080/env").splitlines() if "=" in line
    )
    pod_vars = {"DATA_DIR", "POD_IP", "POD_NAME", "KUBERNETES_SERVICE_HOST",
                "KUBERNETES_SERVICE_PORT", "KUBERNETES_SERVICE_PORT_HTTPS", "KUBERNETES_PORT"}  # fmt: skip
    # The image's ENV (and the tiers' JVM tuning, which the process kubelet passes on).
    image_vars = set(image_env(Path("/")))
    assert {"PATH", "HOME", "LANG", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"} <= image_vars
    shell_vars = {"PWD", "SHLVL", "OLDPWD", "_"}
    assert pod_vars | image_vars <= set(env) <= pod_vars | image_vars | shell_vars, sorted(env)
    assert env["POD_IP"] == ips[0] and env["KUBERNETES_SERVICE_PORT"] == "443"
    claims = core.list_namespaced_persistent_volume_claim(namespace).items
    assert sorted(c.metadata.name for c in claims) == ["data-web-0", "data-web-1", "data-web-2"]
    assert all(c.status.phase == "Bound" for c in claims)

    old = pods[1]
    core.delete_namespaced_pod(old.metadata.name, namespace)

    def recreated() -> Any:
        found = _ready_pods(core, namespace, 3)
        if not found:
            return None
        new = next(p for p in found if p.metadata.name == old.metadata.name)
        return new if new.metadata.uid != old.metadata.uid else None

    new = _wait("web-1 recreated", recreated)
    assert new.status.pod_ip != old.status.pod_ip
    assert _get(f"http://{new.status.pod_ip}:8080/incarnations") == (
        f"web-1 {old.status.pod_ip}\nweb-1 {new.status.pod_ip}\n"
    )

    crashed = pods[0]
    k8s_cluster.crash_pod(crashed)

    def restarted() -> Any:
        pod = core.read_namespaced_pod(crashed.metadata.name, namespace)
        status = pod.status.container_statuses or []
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
        return pod if status and status[0].restart_count == 1 and ready else None

    after = _wait("web-0 restarted in place", restarted)
    assert after.metadata.uid == crashed.metadata.uid
    assert after.status.pod_ip == crashed.status.pod_ip
    assert _get(f"http://{after.status.pod_ip}:8080/incarnations").splitlines() == [
        f"web-0 {crashed.status.pod_ip}",
        f"web-0 {crashed.status.pod_ip}",
    ]


def test_a_cel_rule_rejects_a_bad_object_with_its_message(
    k8s_cluster: K8sCluster, namespace: str
) -> None:
    api = k8s_cluster.api()
    ext = client.ApiextensionsV1Api(api)
    group = f"tier{namespace.replace('-', '')}.example.io"
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": f"widgets.{group}"},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "properties": {
                                            "replicas": {"type": "integer"},
                                            "maxReplicas": {"type": "integer"},
                                        },
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "self.replicas <= self.maxReplicas",
                                                "message": "replicas must not exceed maxReplicas",
                                            }
                                        ],
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }
    )
    objects = client.CustomObjectsApi(api)

    def create(replicas: int) -> Any:
        return objects.create_namespaced_custom_object(
            group, "v1", namespace, "widgets",
            {
                "apiVersion": f"{group}/v1", "kind": "Widget",
                "metadata": {"name": f"w{replicas}"},
                "spec": {"replicas": replicas, "maxReplicas": 3},
            },
        )  # fmt: skip

    def established() -> bool:
        try:
            create(1)
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise

    _wait("the CRD established", established, 30)
    with pytest.raises(ApiException) as refused:
        create(5)
    assert refused.value.status == 422
    assert "replicas must not exceed maxReplicas" in str(refused.value.body)
    ext.delete_custom_resource_definition(f"widgets.{group}")
