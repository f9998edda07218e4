"""How a BrokerGroup is reached (pure): its Services and its NetworkPolicy.

The headless Service `<bg>-headless` gives the pods stable names (published before
they are ready); the master Service `<bg>` selects the pod labelled role=master, the
address the name servers give stock clients for brokerId 0. The NetworkPolicy `<bg>`
admits HA replication and the HTTP port only from the group's own pods, and clients on
the client ports (own protocol, RocketMQ remoting).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from brokergroup_operator.containers import http_port_name
from brokergroup_operator.model import (
    CLIENT_PORT,
    GRPC_PORT,
    GRPC_SERVICE_PORT,
    HA_PORT,
    HTTP_PORT,
    LABEL_ROLE,
    REMOTING_PORT,
    Engine,
    Role,
    group_labels,
)
from brokergroup_operator.spec import GroupContext

# Services earlier versions created and this one deletes. `<bg>-read` selected
# role=slave, but a slave answers NOT_MASTER to offset queries and consumer
# offsets, so a consumer could not use it (docs/kubernetes.md "Reads").
OBSOLETE_SERVICES = ("{group}-read",)


def _ports(names: Sequence[str]) -> list[dict[str, Any]]:
    numbers = {
        "client": CLIENT_PORT,
        "ha": HA_PORT,
        "http": HTTP_PORT,
        "https": HTTP_PORT,
        "remoting": REMOTING_PORT,
    }
    return [
        {"name": n, "port": numbers[n], "targetPort": numbers[n], "protocol": "TCP"} for n in names
    ]


_GRPC_SERVICE_PORT = {
    "name": "grpc",
    "port": GRPC_SERVICE_PORT,
    "targetPort": GRPC_PORT,
    "protocol": "TCP",
}


def services(ctx: GroupContext) -> list[dict[str, Any]]:
    """The headless Service (stable pod names) and the master Service `<bg>`. The master
    Service is the address the name servers give stock clients as brokerId 0 (the
    controller's --namesrv-master-address-template): it serves the port the master
    registered with them under the same number, so the template's `{port}` is right: the
    built-in broker's remoting port, a stock broker's listen port (= the client port)."""
    selector = group_labels(ctx.name)
    builtin_remoting = ctx.engine is Engine.BROKERGROUP and ctx.remoting_on
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": ctx.object_meta(ctx.headless_name),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": selector,
                # The HTTP port is named `https` when it serves HTTPS (spec.tls.httpPort),
                # as on the pod: the chart's monitors pick the scheme by the name.
                "ports": _ports(
                    ["client", "ha"]
                    if ctx.engine is Engine.ROCKETMQ
                    else ["client", "ha", http_port_name(ctx)]
                ),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": ctx.object_meta(ctx.name),
            "spec": {
                "selector": {**selector, LABEL_ROLE: str(Role.MASTER)},
                # The built-in broker's gRPC port is the group's stable gRPC endpoint
                # (`<bg>:8081`, the RocketMQ proxy's port; docs/grpc.md).
                "ports": (
                    [*_ports(["client", "remoting"]), _GRPC_SERVICE_PORT]
                    if builtin_remoting
                    else _ports(["client"])
                ),
            },
        },
    ]


def network_policy(ctx: GroupContext) -> dict[str, Any]:
    selector = {"matchLabels": group_labels(ctx.name)}
    client_ports = [CLIENT_PORT]
    if ctx.engine is Engine.BROKERGROUP and ctx.remoting_on:
        client_ports += [REMOTING_PORT, GRPC_PORT]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": ctx.object_meta(ctx.name),
        "spec": {
            "podSelector": selector,
            "policyTypes": ["Ingress"],
            "ingress": [
                # HA replication: only the group's own brokers.
                {
                    "from": [{"podSelector": selector}],
                    "ports": [{"port": HA_PORT, "protocol": "TCP"}],
                },
                # Clients (the built-in broker's own protocol and its RocketMQ remoting
                # port; a stock broker's remoting port is the client port): from anywhere,
                # both authenticate before they parse a request (docs/security.md).
                {"ports": [{"port": port, "protocol": "TCP"} for port in client_ports]},
                # The HTTP port (status, consumer offsets: the group's broker credential)
                # only from the group's own brokers, which read each other's consumer
                # offsets. The kubelet's /healthz and /readyz probes come from the node,
                # which most CNIs (Calico, Cilium, the default kubenet) do not filter with
                # NetworkPolicy, so probes keep working; on a CNI that does, allow the
                # node addresses here.
                {
                    "from": [{"podSelector": selector}],
                    "ports": [{"port": HTTP_PORT, "protocol": "TCP"}],
                },
            ],
        },
    }
