"""The BrokerGroup API's names the plugin uses (docs/kubernetes.md).

The operator's package defines the same strings (brokergroup_operator.model,
.spec); nothing outside the operator may import it, so they are written
again here and tests/unit/test_kubectl_plugin.py checks both agree.
"""

from __future__ import annotations

API_GROUP = "brokergroup.io"
VERSION = "v1alpha1"
PLURAL = "brokergroups"
KIND = "BrokerGroup"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_GROUP = "brokergroup.io/group"
LABEL_ROLE = "brokergroup.io/role"
LABEL_BROKER_ID = "brokergroup.io/broker-id"
APP_NAME = "brokergroup"
REVISION_LABEL = "controller-revision-hash"
SWITCHOVER_ANNOTATION = "brokergroup.io/switchover-to"
#: The key `kubectl rollout restart` writes; on a BrokerGroup the operator copies it
#: into the pod template, which makes a new StatefulSet revision and so a safe roll.
RESTARTED_AT_ANNOTATION = "kubectl.kubernetes.io/restartedAt"
CLIENT_PORT = 10911

#: Events the operator posts for a user's switchover request.
SWITCHOVER_DONE = "Switchover"
SWITCHOVER_REFUSED = ("SwitchoverRefused", "SwitchoverFailed")


def pod_selector(group: str) -> str:
    return f"{LABEL_NAME}={APP_NAME},{LABEL_GROUP}={group}"
