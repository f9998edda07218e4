"""The chart's broker and controller monitors (templates/broker-monitoring.yaml): rendered
only when metrics.serviceMonitor/podMonitor are enabled, scraping the brokers' port named
"http" (the name the operator gives it on the broker pods and the headless Service) in the
watched namespaces and the controller's "api"; the port named "https" (a group with
spec.tls.httpPort) with scheme https, the cluster CA's bundle and the target's address
rewritten to the pod's stable name, which the group's certificate names (checked by
applying the rendered relabeling to a target's labels and matching the result against
certificates.server_names); the scrape NetworkPolicy and the Grafana dashboard ConfigMap
only on request. `helm template`, no cluster."""

from __future__ import annotations

import fnmatch
import json
import re
from typing import Any

import pytest

from brokergroup_operator.certificates import server_names
from brokergroup_operator.model import HTTP_PORT
from brokergroup_operator.networking import services
from brokergroup_operator.objects import owned_objects
from brokergroup_operator.spec import GroupContext
from tests.cluster.test_chart import CHART, _render
from tests.unit.test_operator_owned_objects_golden import APIS, NO_PAIR, WITH_PAIR

MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")
#: What the https endpoint adds to the http one (templates/broker-monitoring.yaml).
HTTPS_SCRAPE: dict[str, Any] = {
    "scheme": "https",
    "tlsConfig": {"ca": {"secret": {"name": "rel-brokergroup-cluster-ca", "key": "ca-bundle.crt"}}},
    "relabelings": [
        {
            "sourceLabels": [
                "__meta_kubernetes_pod_name",
                "__meta_kubernetes_pod_label_brokergroup_io_group",
                "__meta_kubernetes_namespace",
                "__address__",
            ],
            "separator": ";",
            "regex": "(.+);(.+);(.+);.*:([0-9]+)",
            "targetLabel": "__address__",
            "replacement": "$1.$2-headless.$3.svc:$4",
        }
    ],
}


def _of_kind(objs: dict[tuple[str, str], dict[str, Any]], *kinds: str) -> list[tuple[str, str]]:
    return sorted(key for key in objs if key[0] in kinds)


def test_no_monitor_dashboard_or_scrape_policy_by_default() -> None:
    objs = _render()
    assert _of_kind(objs, *MONITOR_KINDS) == []
    assert ("ConfigMap", "rel-brokergroup-dashboard") not in objs
    assert ("NetworkPolicy", "rel-brokergroup-broker-metrics") not in objs


def test_service_monitors_scrape_brokers_http_and_controller_api() -> None:
    objs = _render("metrics.serviceMonitor.enabled=true", "operator.watchNamespaces={a,b}")
    assert _of_kind(objs, *MONITOR_KINDS) == [
        ("ServiceMonitor", "rel-brokergroup-brokers"),
        ("ServiceMonitor", "rel-brokergroup-controller"),
        ("ServiceMonitor", "rel-brokergroup-operator"),
    ]
    brokers = objs[("ServiceMonitor", "rel-brokergroup-brokers")]["spec"]
    assert brokers["namespaceSelector"] == {"matchNames": ["a", "b"]}
    assert brokers["selector"] == {"matchLabels": {"app.kubernetes.io/name": "brokergroup"}}
    assert brokers["endpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "30s"},
        {"port": "https", "path": "/metrics", "interval": "30s", **HTTPS_SCRAPE},
    ]
    assert brokers["podTargetLabels"] == [
        "brokergroup.io/group", "brokergroup.io/role", "brokergroup.io/broker-id",
    ]  # fmt: skip
    controller = objs[("ServiceMonitor", "rel-brokergroup-controller")]["spec"]
    assert controller["endpoints"] == [{"port": "api", "path": "/metrics", "interval": "30s"}]
    everywhere = _render("metrics.serviceMonitor.enabled=true", "operator.clusterWide=true")
    assert everywhere[("ServiceMonitor", "rel-brokergroup-brokers")]["spec"][
        "namespaceSelector"
    ] == {"any": True}


def test_pod_monitors_only_when_enabled() -> None:
    objs = _render("metrics.podMonitor.enabled=true")
    assert _of_kind(objs, *MONITOR_KINDS) == [
        ("PodMonitor", "rel-brokergroup-brokers"),
        ("PodMonitor", "rel-brokergroup-controller"),
        ("PodMonitor", "rel-brokergroup-operator"),
    ]
    brokers = objs[("PodMonitor", "rel-brokergroup-brokers")]["spec"]
    assert brokers["namespaceSelector"] == {"matchNames": ["mq"]}
    assert brokers["podMetricsEndpoints"] == [
        {"port": "http", "path": "/metrics", "interval": "30s"},
        {"port": "https", "path": "/metrics", "interval": "30s", **HTTPS_SCRAPE},
    ]


def test_the_https_scrape_verifies_each_pod_for_a_name_its_certificate_carries() -> None:
    """Prometheus's relabeling (regex fully anchored, `$n` groups) applied to a target of
    the headless Service: the address becomes the pod's stable name with the port kept,
    and the group's certificate names it (its wildcard), so verifying against the CA
    bundle needs no per-group serverName. Another CA Secret by value."""
    relabel = HTTPS_SCRAPE["relabelings"][0]
    labels = {
        "__meta_kubernetes_pod_name": "orders-1",
        "__meta_kubernetes_pod_label_brokergroup_io_group": "orders",
        "__meta_kubernetes_namespace": "prod",
        "__address__": f"10.0.3.7:{HTTP_PORT}",
    }
    value = relabel["separator"].join(labels[k] for k in relabel["sourceLabels"])
    match = re.fullmatch(relabel["regex"], value)
    assert match is not None
    address = re.sub(r"\$(\d)", lambda m: match.group(int(m.group(1))), relabel["replacement"])
    assert address == f"orders-1.orders-headless.prod.svc:{HTTP_PORT}"
    host = address.rpartition(":")[0]
    names = server_names("orders", "prod")
    assert any(fnmatch.fnmatchcase(host, n) and n.count(".") == host.count(".") for n in names)
    assert not any(
        fnmatch.fnmatchcase(host, n) and n.count(".") == host.count(".")
        for n in server_names("billing", "prod")
    )
    own = _render(
        "metrics.podMonitor.enabled=true",
        "metrics.brokerTls.caSecret=my-ca",
        "metrics.brokerTls.caKey=ca.crt",
    )
    endpoint = own[("PodMonitor", "rel-brokergroup-brokers")]["spec"]["podMetricsEndpoints"][1]
    assert endpoint["tlsConfig"] == {"ca": {"secret": {"name": "my-ca", "key": "ca.crt"}}}


def test_https_port_of_a_group_with_spec_tls_http_port() -> None:
    """The operator names the HTTP port "https" on the pods and the headless Service of a
    group with spec.tls.httpPort, the name the monitors' https endpoint scrapes."""
    ctx = GroupContext(
        "orders",
        "prod",
        "uid-1",
        {"engine": "brokergroup", "tls": {"httpPort": True}},
        "brokergroup:dev",
        APIS,
        WITH_PAIR,
    )
    assert {"name": "https", "port": HTTP_PORT} in [
        {"name": p["name"], "port": p["port"]} for p in services(ctx)[0]["spec"]["ports"]
    ]
    assert {"name": "https", "containerPort": HTTP_PORT, "protocol": "TCP"} in ctx_pod_ports(ctx)


def test_the_monitored_port_and_labels_are_the_operators() -> None:
    """The built-in broker's pods and headless Service carry the port "http" (the broker's
    HTTP port) and the label the monitors select by."""
    ctx = GroupContext(
        "orders", "prod", "uid-1", {"engine": "brokergroup"}, "brokergroup:dev", APIS, NO_PAIR
    )
    headless = services(ctx)[0]
    assert {"name": "http", "port": HTTP_PORT} in [
        {"name": p["name"], "port": p["port"]} for p in headless["spec"]["ports"]
    ]
    assert headless["metadata"]["labels"]["app.kubernetes.io/name"] == "brokergroup"
    pod = ctx_pod_ports(ctx)
    assert {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"} in pod


def ctx_pod_ports(ctx: GroupContext) -> list[dict[str, Any]]:
    sts = next(o for o in owned_objects(ctx, 1) if o["kind"] == "StatefulSet")
    return list(sts["spec"]["template"]["spec"]["containers"][0]["ports"])


def test_scrape_policy_and_dashboard_on_request() -> None:
    objs = _render(
        "metrics.dashboard.enabled=true",
        "metrics.scrapeFrom[0].namespaceSelector.matchLabels.team=monitoring",
    )
    policy = objs[("NetworkPolicy", "rel-brokergroup-broker-metrics")]
    assert policy["metadata"]["namespace"] == "mq"
    assert policy["spec"]["ingress"] == [
        {
            "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
            "ports": [{"port": "http", "protocol": "TCP"}, {"port": "https", "protocol": "TCP"}],
        }
    ]
    dashboard = objs[("ConfigMap", "rel-brokergroup-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = json.loads((CHART / "dashboards" / "brokergroup.json").read_text())
    assert json.loads(dashboard["data"]["brokergroup.json"]) == shipped
    exprs = [t["expr"] for p in shipped["panels"] for t in p["targets"]]
    for metric in (
        "brokergroup_broker_put_messages_total",
        "brokergroup_broker_commit_round_seconds_bucket",
        "brokergroup_broker_slave_lag_bytes",
        "brokergroup_broker_consumer_lag_messages",
        "brokergroup_broker_disk_usage_ratio",
    ):
        assert any(metric in e for e in exprs), metric


@pytest.mark.parametrize("bad", ["metrics.dashboard.nosuch=1", "metrics.scrapeFrom=x"])
def test_schema_refuses_bad_monitoring_values(bad: str) -> None:
    from tests.cluster.test_chart import _helm

    result = _helm("template", "rel", str(CHART), "--set", bad, check=False)
    assert result.returncode != 0
