"""A BrokerGroup's workload (pure): the StatefulSet with its pod template and volume
claims, the ConfigMap its pods read and the PodDisruptionBudget.

StatefulSet `<bg>`: Parallel pod management, OnDelete updates (the operator, not the
StatefulSet controller, decides which pod restarts next), preferred anti-affinity that
spreads the brokers over nodes unless the spec sets its own affinity. The pod template
carries digests of the broker config and of the group Secret the operator writes, and
the BrokerGroup's restartedAt: any of them changing makes a new revision, which the
operator rolls (slaves first). What runs in the pods is the engine's (containers.py).
Its volume claim template is immutable once made: a live StatefulSet's is applied back
as it is, and a raised spec.storage.size grows the claims themselves (volumes.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brokergroup_operator.containers import (
    config_data,
    config_hash,
    config_map_name,
    engine_container,
    engine_volumes,
)
from brokergroup_operator.group_secrets import credentials_hash
from brokergroup_operator.model import group_labels
from brokergroup_operator.spec import RESTARTED_AT_ANNOTATION, GroupContext
from brokergroup_operator.volumes import DATA_VOLUME, DEFAULT_SIZE

CONFIG_HASH_ANNOTATION = "brokergroup.io/config-hash"
# spec.tls: a digest of the server certificate and the CAs trusted (certificates.py): a
# renewed certificate or a renewed CA makes a new revision, rolled slaves first.
TLS_DIGEST_ANNOTATION = "brokergroup.io/tls-digest"
# A digest of what the group's Secret holds: a rotated broker credential root changes it,
# so the pods roll (one at a time, slaves first) and pick up their new credentials.
CREDENTIALS_HASH_ANNOTATION = "brokergroup.io/credentials-hash"


def config_map(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": ctx.object_meta(config_map_name(ctx)),
        "data": config_data(ctx),
    }


def live_claim_storage(sts: Mapping[str, Any] | None) -> tuple[str, str | None] | None:
    """(storage request, storageClassName) of a live StatefulSet's data claim template,
    or None when there is none."""
    for claim in ((sts or {}).get("spec") or {}).get("volumeClaimTemplates") or []:
        if (claim.get("metadata") or {}).get("name") == DATA_VOLUME:
            spec = claim.get("spec") or {}
            size = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
            return (str(size), spec.get("storageClassName") or None) if size else None
    return None


def stateful_set(
    ctx: GroupContext, replicas: int, live: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`live`: the StatefulSet as it exists; its claim template is kept (immutable:
    the API server refuses any change to it)."""
    spec = ctx.spec
    template = spec.get("template") or {}
    storage = spec.get("storage") or {}
    # A removed replica's volume may hold the only other copy of what it
    # acknowledged: kept on scale-down unless the spec opts in (issue 17 item 1).
    when_deleted = "Delete" if storage.get("deleteClaim", True) else "Retain"
    when_scaled = "Delete" if storage.get("deleteClaimOnScaleDown", False) else "Retain"
    pod_labels = {**(template.get("labels") or {}), **group_labels(ctx.name)}
    pod_annotations = {
        **(template.get("annotations") or {}),
        CONFIG_HASH_ANNOTATION: config_hash(ctx),
    }
    credentials = credentials_hash(ctx)
    # With the user's own Secret (None here) they roll the pods when they change it.
    if credentials is not None:
        pod_annotations[CREDENTIALS_HASH_ANNOTATION] = credentials
    if ctx.restarted_at:
        pod_annotations[RESTARTED_AT_ANNOTATION] = ctx.restarted_at
    if ctx.tls_digest:
        pod_annotations[TLS_DIGEST_ANNOTATION] = ctx.tls_digest
    pod_spec: dict[str, Any] = {
        # A broker never talks to Kubernetes: no ServiceAccount token in its pods.
        "automountServiceAccountToken": False,
        "containers": [engine_container(ctx)],
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
        "volumes": engine_volumes(ctx),
    }
    pod_spec["affinity"] = spread_over_nodes(ctx.name)
    for key in ("affinity", "tolerations", "nodeSelector", "priorityClassName"):
        if template.get(key):
            pod_spec[key] = template[key]
    size, storage_class = live_claim_storage(live) or (
        str(storage.get("size", DEFAULT_SIZE)),
        storage.get("storageClassName") or None,
    )
    claim: dict[str, Any] = {
        "metadata": {"name": DATA_VOLUME, "labels": group_labels(ctx.name)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }
    if storage_class:
        claim["spec"]["storageClassName"] = storage_class
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": ctx.object_meta(ctx.name),
        "spec": {
            "replicas": replicas,
            "serviceName": ctx.headless_name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": when_deleted,
                "whenScaled": when_scaled,
            },
            "selector": {"matchLabels": group_labels(ctx.name)},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [claim],
        },
    }


def spread_over_nodes(group: str) -> dict[str, Any]:
    """Preferred (not required) pod anti-affinity by node: one node's loss takes
    one replica where there are enough nodes, and a single-node cluster still
    schedules every pod. spec.template.affinity replaces it."""
    return {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": group_labels(group)},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        }
    }


def disruption_budget(ctx: GroupContext) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": ctx.object_meta(ctx.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": group_labels(ctx.name)}},
    }
