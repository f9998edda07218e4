"""The cluster tier's pod network, Service DNS and ClusterIP routing (issue 10 item 3).

- Two StatefulSet pods both bind 0.0.0.0:8080: each pod has its own network
  namespace and address.
- From inside a pod, through the pod's resolv.conf: a headless Service's pod
  names (`web-0.web`), the headless Service itself, a ClusterIP Service by
  short and full name and `kubernetes.default.svc` resolve to the addresses
  the API holds; an unknown name does not resolve; the pod has its own
  hostname; the ClusterIP Service spreads connections over both pods; the
  in-cluster kubernetes client authenticates as the pod's ServiceAccount
  through the `kubernetes` Service.
- A recreated pod's new address is served by DNS and the ClusterIP keeps
  answering; a cut pod is unreachable until restored.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

import dns.message
import dns.query
import dns.rdatatype
import pytest
from kubernetes import client

from tests.cluster.conftest import K8sCluster
from tests.cluster.test_tier import _ready_pods, _wait
from tests.cluster.tier.podnet import DNS_SERVICE_IP, KUBERNETES_SERVICE_IP

pytestmark = pytest.mark.cluster

# Answers with its own hostname on 0.0.0.0:8080 (both pods bind the same port).
SERVER = (
    "import http.server, socket\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = socket.gethostname().encode()\n"
    "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers(); self.wfile.write(body)\n"
    "    def log_message(self, *a): pass\n"
    "http.server.ThreadingHTTPServer(('0.0.0.0', 8080), H).serve_forever()\n"
)

CLIENT = (
    "import json, socket, urllib.request\n"
    "from kubernetes import client, config\n"
    "out = {}\n"
    "for name in NAMES:\n"
    "    try:\n"
    "        infos = socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)\n"
    "        out[name] = sorted({i[4][0] for i in infos})\n"
    "    except socket.gaierror as e:\n"
    "        out[name] = 'gaierror %d' % e.errno\n"
    "out['hostname'] = socket.gethostname()\n"
    "get = lambda u: urllib.request.urlopen(u, timeout=5).read().decode()\n"
    "out['via_service'] = sorted({get('http://web-svc/') for _ in range(30)})\n"
    "out['by_name'] = get('http://web-0.web:8080/')\n"
    "config.load_incluster_config()\n"
    "review = client.AuthenticationV1Api().create_self_subject_review(\n"
    "    {'apiVersion': 'authentication.k8s.io/v1', 'kind': 'SelfSubjectReview'})\n"
    "out['user'] = review.status.user_info.username\n"
    "print('RESULT ' + json.dumps(out), flush=True)\n"
)


def _web(namespace: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    labels = {"app": "web"}
    headless = {
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 8080}]},
    }
    service = {
        "metadata": {"name": "web-svc"},
        "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    statefulset = {
        "metadata": {"name": "web"},
        "spec": {
            "serviceName": "web",
            "replicas": 2,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "web",
                            "image": "brokergroup:test",
                            "command": ["python3", "-c", SERVER],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {
                                "tcpSocket": {"port": "http"},
                                "periodSeconds": 1,
                            },
                        }
                    ],
                },
            },
        },
    }
    return headless, service, statefulset


def _cluster_dns(name: str) -> list[str]:
    query = dns.message.make_query(name, dns.rdatatype.A)
    response = dns.query.udp(query, DNS_SERVICE_IP, timeout=2)
    return sorted(r.address for rrset in response.answer for r in rrset)


def _hostname_at(url: str) -> str:
    with urllib.request.urlopen(url, timeout=3) as response:
        return str(response.read().decode())


def test_pod_dns_cluster_ips_and_in_cluster_auth(k8s_cluster: K8sCluster, namespace: str) -> None:
    api = k8s_cluster.api()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    headless, service, statefulset = _web(namespace)
    core.create_namespaced_service(namespace, headless)
    cluster_ip = core.create_namespaced_service(namespace, service).spec.cluster_ip
    apps.create_namespaced_stateful_set(namespace, statefulset)
    pods = _wait("2 Ready web pods", lambda: _ready_pods(core, namespace, 2))
    ip = {p.metadata.name: p.status.pod_ip for p in pods}
    assert len(set(ip.values())) == 2, ip
    for name, address in ip.items():  # own namespace, own hostname, same port
        assert _hostname_at(f"http://{address}:8080/") == name

    # EndpointSlices follow readiness a moment later; the client starts once DNS has both.
    both = sorted(ip.values())
    _wait("both pods in DNS", lambda: _cluster_dns(f"web.{namespace}.svc.cluster.local") == both)

    # The ClusterIP Service has EndpointSlices of its own, which may lag the headless one's.
    def via_cluster_ip() -> set[str]:
        try:
            return {_hostname_at(f"http://{cluster_ip}/") for _ in range(20)}
        except OSError:  # not proxied yet
            return set()

    _wait("the ClusterIP to reach both pods", lambda: via_cluster_ip() == set(ip))
    names = [
        "web-0.web",
        "web-1.web",
        "web",
        "web-svc",
        f"web-svc.{namespace}.svc.cluster.local",
        "kubernetes.default.svc",
        "no-such-service",
    ]
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "client"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "client",
                        "image": "brokergroup:test",
                        "command": ["python3", "-c", f"NAMES = {names!r}\n{CLIENT}"],
                    }
                ],
            },
        },
    )
    done = _wait(
        "the client pod to finish",
        lambda: (
            (p := core.read_namespaced_pod("client", namespace)).status.phase
            in ("Succeeded", "Failed")
            and p
        ),
        90,
    )
    log = (k8s_cluster.kubelet.pod_dir(namespace, "client") / "client.log").read_text()
    assert done.status.phase == "Succeeded", log
    result = json.loads(next(line for line in log.splitlines() if line.startswith("RESULT "))[7:])
    assert result == {
        "web-0.web": [ip["web-0"]],
        "web-1.web": [ip["web-1"]],
        "web": sorted(ip.values()),
        "web-svc": [cluster_ip],
        f"web-svc.{namespace}.svc.cluster.local": [cluster_ip],
        "kubernetes.default.svc": [KUBERNETES_SERVICE_IP],
        "no-such-service": f"gaierror {socket.EAI_NONAME}",
        "hostname": "client",
        "via_service": ["web-0", "web-1"],
        "by_name": "web-0",
        "user": f"system:serviceaccount:{namespace}:default",
    }

    # A recreated pod: a new address in DNS; the ClusterIP still answers.
    old = next(p for p in pods if p.metadata.name == "web-0")
    core.delete_namespaced_pod("web-0", namespace)

    def recreated() -> Any:
        found = _ready_pods(core, namespace, 2)
        new = next((p for p in found or [] if p.metadata.name == "web-0"), None)
        return new if new is not None and new.metadata.uid != old.metadata.uid else None

    new_ip = _wait("web-0 recreated", recreated).status.pod_ip
    assert new_ip != old.status.pod_ip
    fqdn = f"web-0.web.{namespace}.svc.cluster.local"
    _wait(f"{fqdn} → {new_ip}", lambda: _cluster_dns(fqdn) == [new_ip])
    seen = {_hostname_at(f"http://{cluster_ip}/") for _ in range(30)}
    assert seen == {"web-0", "web-1"}

    # A cut pod: unreachable until its link comes back.
    k8s_cluster.kubelet.cut_pod_network(namespace, "web-1")
    with pytest.raises((urllib.error.URLError, OSError)):
        _hostname_at(f"http://{ip['web-1']}:8080/")
    k8s_cluster.kubelet.restore_pod_network(namespace, "web-1")
    assert _hostname_at(f"http://{ip['web-1']}:8080/") == "web-1"
