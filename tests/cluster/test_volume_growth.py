"""Volumes that grow (issue 33 item 4, Must show "The cluster tier"), on a real API server.

A group made with 1Gi volumes of a StorageClass that allows expansion has
spec.storage.size raised to 2Gi: the operator patches each broker's PVC to 2Gi (the
StatefulSet keeps its immutable claim template), says Resizing on StorageResized and
posts VolumeExpansion. The tier has no CSI resizer, so the test acts as one (and as the
kubelet): the PVs grow, one claim waits in FileSystemResizePending (the condition says
so), then every claim holds 2Gi and the condition is True with a VolumesResized Event.
Lowering the size back is refused (ShrinkRefused, a Warning Event) and nothing shrinks.
A group on a class without allowVolumeExpansion says StorageClassNotExpandable in the
condition and a Warning Event, and its claims stay as they are. Both groups keep serving.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.cluster.conftest import K8sCluster
from tests.cluster.operator_env import OperatorEnv, tier_env, wait_for
from tests.cluster.tier.kubelet import PROVISIONER

pytestmark = pytest.mark.cluster


def storage_class(env: OperatorEnv, expandable: bool) -> str:
    """A class of the tier's provisioner, named for this test, deleted with the env."""
    name = f"{'grow' if expandable else 'fixed'}-{uuid.uuid4().hex[:6]}"
    client.StorageV1Api(env.api).create_storage_class(
        {
            "metadata": {"name": name},
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
            "allowVolumeExpansion": expandable,
        }
    )
    return name


def claims(env: OperatorEnv, group: str) -> dict[str, Any]:
    found = env.core.list_namespaced_persistent_volume_claim(
        env.namespace, label_selector=f"brokergroup.io/group={group}"
    ).items
    return {c.metadata.name: c for c in found}


def requests(env: OperatorEnv, group: str) -> dict[str, str]:
    return {n: c.spec.resources.requests["storage"] for n, c in claims(env, group).items()}


def storage_resized(env: OperatorEnv, group: str) -> tuple[str, str, str] | None:
    for c in (env.group(group).get("status") or {}).get("conditions") or []:
        if c["type"] == "StorageResized":
            return c["status"], c["reason"], c["message"]
    return None


def wait_reason(env: OperatorEnv, group: str, reason: str) -> tuple[str, str, str]:
    def probe() -> tuple[str, str, str] | None:
        found = storage_resized(env, group)
        return found if found is not None and found[1] == reason else None

    return wait_for(f"bg/{group} StorageResized {reason}", probe, 60)


def wait_event(env: OperatorEnv, reason: str, message: str) -> None:
    """kopf posts Events after the pass that decided them."""
    wait_for(
        f"Event {reason}: {message}",
        lambda: (reason, message) in env.group_events("orders"),
        30,
    )


def resize_as_csi(env: OperatorEnv, claim: Any, capacity: str, pending_fs: bool) -> None:
    """What an external resizer and the kubelet write: the PV's capacity, then the
    claim's status (capacity once the filesystem grew, else FileSystemResizePending)."""
    env.core.patch_persistent_volume(
        claim.spec.volume_name, {"spec": {"capacity": {"storage": capacity}}}
    )
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "FileSystemResizePending",
                "status": "True",
                "message": "Waiting for user to (re-)start a pod to finish file system resize",
            }
        ]
        if pending_fs
        else None,
    }
    if not pending_fs:
        status["capacity"] = {"storage": capacity}
    env.core.patch_namespaced_persistent_volume_claim_status(
        claim.metadata.name, env.namespace, {"status": status}
    )


def test_raising_storage_size_grows_the_volumes(k8s_cluster: K8sCluster, tmp_path: Path) -> None:
    with tier_env(k8s_cluster, "grow", tmp_path) as env:
        grow = storage_class(env, expandable=True)
        try:
            env.create_group("orders", 3, storage={"size": "1Gi", "storageClassName": grow})
            env.wait_available("orders", 3)
            names = [f"data-orders-{i}" for i in range(3)]
            assert requests(env, "orders") == dict.fromkeys(names, "1Gi")
            assert storage_resized(env, "orders") == (
                "True", "Resized", "3 data volume(s) hold 1Gi"
            )  # fmt: skip

            env.patch_group("orders", {"spec": {"storage": {"size": "2Gi"}}})
            wait_for(
                "every claim to request 2Gi",
                lambda: requests(env, "orders") == dict.fromkeys(names, "2Gi"),
            )
            _, _, message = wait_reason(env, "orders", "Resizing")
            assert message == (
                "growing the volumes to 2Gi: data-orders-0 1Gi → 2Gi, "
                "data-orders-1 1Gi → 2Gi, data-orders-2 1Gi → 2Gi"
            )
            sts = env.apps.read_namespaced_stateful_set("orders", env.namespace)
            (template,) = sts.spec.volume_claim_templates
            assert template.spec.resources.requests["storage"] == "1Gi"  # immutable, kept
            wait_event(
                env,
                "VolumeExpansion",
                "growing data-orders-0 1Gi → 2Gi, data-orders-1 1Gi → 2Gi, data-orders-2 1Gi → 2Gi",
            )

            live = claims(env, "orders")
            resize_as_csi(env, live["data-orders-0"], "2Gi", pending_fs=True)
            for name in names[1:]:
                resize_as_csi(env, live[name], "2Gi", pending_fs=False)
            _, _, message = wait_reason(env, "orders", "FileSystemResizePending")
            assert message.startswith(
                "the volumes hold 2Gi; the filesystem of data-orders-0 grows when its pod restarts"
            )
            resize_as_csi(env, claims(env, "orders")["data-orders-0"], "2Gi", pending_fs=False)
            assert wait_reason(env, "orders", "Resized") == (
                "True", "Resized", "3 data volume(s) hold 2Gi"
            )  # fmt: skip
            wait_event(env, "VolumesResized", "3 data volume(s) hold 2Gi")

            env.patch_group("orders", {"spec": {"storage": {"size": "1Gi"}}})
            _, _, message = wait_reason(env, "orders", "ShrinkRefused")
            assert message.startswith(
                "spec.storage.size 1Gi is below what the volumes hold (data-orders-0 requests "
                "2Gi, data-orders-1 requests 2Gi, data-orders-2 requests 2Gi): volumes cannot "
                "shrink"
            )
            wait_event(env, "ShrinkRefused", message)
            assert requests(env, "orders") == dict.fromkeys(names, "2Gi")
            env.wait_available("orders", 3)
        finally:
            client.StorageV1Api(env.api).delete_storage_class(grow)


def test_a_class_without_expansion_says_why(k8s_cluster: K8sCluster, tmp_path: Path) -> None:
    with tier_env(k8s_cluster, "fixed", tmp_path) as env:
        fixed = storage_class(env, expandable=False)
        try:
            env.create_group("orders", 1, storage={"size": "1Gi", "storageClassName": fixed})
            env.wait_available("orders", 1)
            env.patch_group("orders", {"spec": {"storage": {"size": "2Gi"}}})
            status, _, message = wait_reason(env, "orders", "StorageClassNotExpandable")
            assert (status, message) == (
                "False",
                f"cannot grow the volumes to 2Gi: data-orders-0's '{fixed}' has no "
                "allowVolumeExpansion: true (the StorageClass does not allow volume expansion)",
            )
            wait_event(env, "StorageClassNotExpandable", message)
            assert requests(env, "orders") == {"data-orders-0": "1Gi"}
            env.wait_available("orders", 1)
        finally:
            client.StorageV1Api(env.api).delete_storage_class(fixed)
