"""The Kubernetes objects a BrokerGroup owns, built from its spec (pure).

StatefulSet `<bg>`, ConfigMap `<bg>-config` and PodDisruptionBudget `<bg>`
(workload.py), headless Service `<bg>-headless`, master Service `<bg>` (role=master)
and NetworkPolicy `<bg>` (HA port only from the group's own pods; networking.py),
Secret `<bg>-credentials` (the group's broker and client credentials, its RocketMQ key
pairs and the HA secret, unless spec.controller.secretName names the user's own) and
Secret `<bg>-rocketmq-client` (the group's RocketMQ client pair alone, for applications
to mount; group_secrets.py). Every object carries the group's labels and an owner
reference to the BrokerGroup (spec.py), so deleting the group garbage-collects them.

`spec.engine: rocketmq` changes only what runs in the pods (stock RocketMQ 5.3
brokers, containers.py and rocketmq_config.py): the ConfigMap holds broker.conf, the
container runs the JVM, which signs with the group's broker pair from the Secret. Names,
labels, the master Service, the StatefulSet's policies and the broker set's key
(cluster = namespace, brokerName = group) are the same, so the planners and the
role labels work on both engines unchanged. It adds the group's stock RocketMQ proxy
(ConfigMap, Service and Deployment `<bg>-proxy`, rocketmq_proxy.py): the gRPC endpoint of
the RocketMQ 5 SDKs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brokergroup_operator.group_secrets import client_secret, group_secret
from brokergroup_operator.networking import network_policy, services
from brokergroup_operator.rocketmq_proxy import proxy_objects
from brokergroup_operator.spec import GroupContext
from brokergroup_operator.workload import config_map, disruption_budget, stateful_set


def owned_objects(
    ctx: GroupContext, replicas: int, live_sts: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Everything the group owns, in the order to apply them (`live_sts`: the
    StatefulSet as it exists, whose immutable claim template is kept)."""
    secret = group_secret(ctx)
    for_clients = client_secret(ctx)
    return [
        *([] if secret is None else [secret]),
        *([] if for_clients is None else [for_clients]),
        config_map(ctx),
        *services(ctx),
        disruption_budget(ctx),
        network_policy(ctx),
        stateful_set(ctx, replicas, live_sts),
        *proxy_objects(ctx),
    ]
