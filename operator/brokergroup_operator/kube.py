"""The thin Kubernetes client layer of the operator (the only module that
talks to the API server besides kopf itself).

The official `kubernetes` client is synchronous; every call runs in a worker
thread so kopf's event loop never blocks. Owned objects are written with
server-side apply (field manager `brokergroup-operator`, conflicts forced:
the operator owns these fields), which makes "ensure it looks like this"
one idempotent call however often a handler runs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from brokergroup_operator.release_secret import (
    MANAGED_LABEL,
    ReleaseSecretError,
    plan_release_secret,
)
from brokergroup_operator.spec import API_GROUP

FIELD_MANAGER = "brokergroup-operator"
PLURAL = "brokergroups"
VERSION = "v1alpha1"


def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """In-cluster credentials in a pod, else --kubeconfig, KUBECONFIG, ~/.kube/config.

    KUBECONFIG is read now, not when the kubernetes package was imported.
    """
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        path = kubeconfig or os.environ.get("KUBECONFIG") or None
        config.load_kube_config(config_file=path, client_configuration=configuration)
    return configuration


def load_kube_config(kubeconfig: str | None = None) -> client.ApiClient:
    return client.ApiClient(load_configuration(kubeconfig))


def default_namespace(kubeconfig: str | None = None) -> str:
    """The current kubeconfig context's namespace, else `default`."""
    try:
        _, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (config.ConfigException, OSError):
        return "default"
    return str(((current or {}).get("context") or {}).get("namespace") or "default")


class Kube:
    """Async façade over the synchronous client; one per operator process."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.storage = client.StorageV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._dynamic: DynamicClient | None = None
        self._lock = threading.Lock()

    def _dyn(self) -> DynamicClient:
        with self._lock:
            if self._dynamic is None:
                self._dynamic = DynamicClient(self.api)
            return self._dynamic

    async def apply(self, obj: Mapping[str, Any]) -> None:
        def call() -> None:
            dyn = self._dyn()
            resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            dyn.server_side_apply(
                resource,
                body=dict(obj),
                namespace=obj["metadata"].get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )

        await asyncio.to_thread(call)

    async def ensure_release_secret(
        self, namespace: str, name: str, managed: bool
    ) -> dict[str, str]:
        """The release Secret's decoded data, after creating it or adding missing keys
        (release_secret.py; present values are never changed). Two operator replicas
        may race: a create that finds the Secret, or a patch whose resourceVersion
        moved, reads again."""

        def call() -> dict[str, str]:
            for _attempt in range(5):
                secret: Any
                try:
                    secret = self.core.read_namespaced_secret(name, namespace)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    secret = None
                data = (
                    None
                    if secret is None
                    else {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
                )
                key, value = MANAGED_LABEL
                plan = plan_release_secret(data, managed, lambda: secrets.token_urlsafe(32))
                if not plan.add:
                    assert data is not None
                    return data
                try:
                    if plan.create:
                        body = client.V1Secret(
                            metadata=client.V1ObjectMeta(name=name, labels={key: value}),
                            type="Opaque",
                            string_data=dict(plan.add),
                        )
                        self.core.create_namespaced_secret(namespace, body)
                    else:
                        assert secret is not None
                        patch = {
                            "metadata": {"resourceVersion": secret.metadata.resource_version},
                            "stringData": dict(plan.add),
                        }
                        self.core.patch_namespaced_secret(name, namespace, patch)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            raise ReleaseSecretError("it kept changing under us (5 attempts)")

        try:
            return await asyncio.to_thread(call)
        except ApiException as exc:  # e.g. 403: the RBAC does not let this identity
            raise ReleaseSecretError(f"{exc.status} {exc.reason}") from exc

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        def call() -> list[dict[str, Any]]:
            result = self.core.list_namespaced_pod(namespace, label_selector=selector)
            return [self.api.sanitize_for_serialization(p) for p in result.items]

        return await asyncio.to_thread(call)

    async def patch_pod_labels(
        self, namespace: str, name: str, labels: Mapping[str, str | None], uid: str = ""
    ) -> None:
        """Patch only the incarnation the labels were decided for: the uid in the
        body is a precondition, so a pod recreated under the same name meanwhile
        is refused rather than half-labelled."""
        meta: dict[str, Any] = {"labels": dict(labels)}
        if uid:
            meta["uid"] = uid
        try:
            await asyncio.to_thread(
                self.core.patch_namespaced_pod, name, namespace, {"metadata": meta}
            )
        except ApiException as exc:
            # Gone (404) or replaced: the API server answers a uid mismatch with
            # 422 "metadata.uid … field is immutable". The next pass sees the new pod.
            replaced = exc.status == 422 and "uid" in str(exc.body or "")
            if exc.status not in (404, 409) and not replaced:
                raise

    async def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            await asyncio.to_thread(self.core.delete_namespaced_pod, name, namespace, body=options)
        except ApiException as exc:
            if exc.status not in (404, 409):
                raise

    async def list_claims(self, namespace: str, selector: str) -> list[dict[str, Any]] | None:
        """The PVCs the selector picks; None when this identity may not list them (a
        chart's RBAC from before volumes could grow)."""

        def call() -> list[dict[str, Any]] | None:
            try:
                found = self.core.list_namespaced_persistent_volume_claim(
                    namespace, label_selector=selector
                )
            except ApiException as exc:
                if exc.status == 403:
                    return None
                raise
            return [self.api.sanitize_for_serialization(c) for c in found.items]

        return await asyncio.to_thread(call)

    async def storage_classes_expandable(self, names: set[str]) -> dict[str, bool | None]:
        """StorageClass name → its allowVolumeExpansion; a class that does not exist is
        left out; None when this identity may not read StorageClasses (cluster-scoped:
        the chart's namespaced RBAC does not grant them)."""
        result: dict[str, bool | None] = {}
        for name in sorted(names):
            found = await _presence(_no_namespace(self.storage.read_storage_class), name, "")
            if found is None:
                result[name] = None
            elif found is not False:
                result[name] = bool(found.allow_volume_expansion)
        return result

    async def grow_claim(self, namespace: str, name: str, storage: str) -> str | None:
        """Patch a PVC's storage request; the API server's refusal (e.g. its resize
        admission: the class does not allow expansion), or None when taken."""
        patch = {"spec": {"resources": {"requests": {"storage": storage}}}}
        try:
            await asyncio.to_thread(
                self.core.patch_namespaced_persistent_volume_claim, name, namespace, patch
            )
        except ApiException as exc:
            if exc.status not in (403, 422):
                raise
            return f"{exc.status} {_api_message(exc)}"
        return None

    async def read_secret_data(self, namespace: str, name: str) -> dict[str, bytes] | None:
        """A Secret's decoded data, None when it does not exist (the cluster CA's and the
        controllers' certificate Secrets: `get` by name only, in the release namespace)."""
        try:
            secret = await asyncio.to_thread(self.core.read_namespaced_secret, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}

    async def read_certificate(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A cert-manager Certificate (cert-manager.io/v1), None when it does not exist."""
        try:
            found = await asyncio.to_thread(
                self.custom.get_namespaced_custom_object,
                "cert-manager.io",
                "v1",
                namespace,
                "certificates",
                name,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(found)  # type: ignore[call-overload,no-any-return]

    async def read_stateful_set(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            sts = await asyncio.to_thread(self.apps.read_namespaced_stateful_set, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        result: dict[str, Any] = self.api.sanitize_for_serialization(sts)
        return result

    async def delete_stateful_set(self, namespace: str, name: str) -> None:
        await _delete(
            self.apps.delete_namespaced_stateful_set,
            name,
            namespace,
            propagation_policy="Background",
        )

    async def deployment_exists(self, namespace: str, name: str) -> bool | None:
        """False when gone or being deleted; None when this identity may not look."""
        found = await _presence(self.apps.read_namespaced_deployment, name, namespace)
        if found is None or found is False:
            return found
        return found.metadata is not None and found.metadata.deletion_timestamp is None

    async def list_groups(self, namespace: str | None) -> list[dict[str, Any]]:
        def call() -> list[dict[str, Any]]:
            found: Any
            if namespace is None:
                found = self.custom.list_cluster_custom_object(API_GROUP, VERSION, PLURAL)
            else:
                found = self.custom.list_namespaced_custom_object(
                    API_GROUP, VERSION, namespace, PLURAL
                )
            return [dict(g) for g in found.get("items") or []]

        return await asyncio.to_thread(call)

    async def list_users(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's BrokerGroupUsers (users.access_key_holder decides over them)."""

        def call() -> list[dict[str, Any]]:
            found: Any = self.custom.list_namespaced_custom_object(
                API_GROUP, VERSION, namespace, "brokergroupusers"
            )
            return [dict(u) for u in found.get("items") or []]

        return await asyncio.to_thread(call)

    async def remove_group_finalizer(self, group: Mapping[str, Any], finalizer: str) -> bool:
        """Remove one finalizer, only from the version read (JSON patch `test`)."""
        meta = group.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if finalizer not in finalizers:
            return False
        i = finalizers.index(finalizer)
        patch = [
            {"op": "test", "path": f"/metadata/finalizers/{i}", "value": finalizer},
            {"op": "remove", "path": f"/metadata/finalizers/{i}"},
        ]
        try:
            await asyncio.to_thread(
                self.custom.patch_namespaced_custom_object,
                API_GROUP,
                VERSION,
                meta["namespace"],
                PLURAL,
                meta["name"],
                patch,
                _content_type="application/json-patch+json",
            )
        except ApiException as exc:
            if exc.status in (404, 409, 422):
                return False
            raise
        return True

    async def post_group_event(
        self, group: Mapping[str, Any], kind: str, reason: str, message: str
    ) -> None:
        meta = group.get("metadata") or {}
        now = datetime.now(UTC)
        event: Any = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": f"{API_GROUP}/{VERSION}",
                "kind": "BrokerGroup",
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": "brokergroup-operator"},
        }
        await asyncio.to_thread(self.core.create_namespaced_event, meta["namespace"], event)

    async def delete_deployment(self, namespace: str, name: str) -> None:
        await _delete(
            self.apps.delete_namespaced_deployment, name, namespace, propagation_policy="Background"
        )

    async def delete_service(self, namespace: str, name: str) -> None:
        await _delete(self.core.delete_namespaced_service, name, namespace)

    async def patch_group_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await asyncio.to_thread(
            self.custom.patch_namespaced_custom_object_status,
            API_GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"status": status},
        )

    async def patch_user_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """status of a BrokerGroupUser (users.py)."""
        await asyncio.to_thread(
            self.custom.patch_namespaced_custom_object_status,
            API_GROUP,
            VERSION,
            namespace,
            "brokergroupusers",
            name,
            {"status": status},
        )

    async def patch_group_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        await asyncio.to_thread(
            self.custom.patch_namespaced_custom_object,
            API_GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"metadata": {"annotations": dict(annotations)}},
        )

    async def read_group(self, namespace: str, name: str) -> dict[str, Any]:
        result = await asyncio.to_thread(
            self.custom.get_namespaced_custom_object, API_GROUP, VERSION, namespace, PLURAL, name
        )
        return dict(result)  # type: ignore[call-overload,no-any-return]

    async def ensure_peering(self, name: str, namespace: str | None) -> None:
        """Create kopf's peering object if missing (KopfPeering or ClusterKopfPeering)."""
        body: dict[str, Any] = {
            "apiVersion": "kopf.dev/v1",
            "kind": "KopfPeering" if namespace else "ClusterKopfPeering",
            "metadata": {"name": name},
        }
        try:
            if namespace:
                body["metadata"]["namespace"] = namespace
                await asyncio.to_thread(
                    self.custom.create_namespaced_custom_object,
                    "kopf.dev",
                    "v1",
                    namespace,
                    "kopfpeerings",
                    body,
                )
            else:
                await asyncio.to_thread(
                    self.custom.create_cluster_custom_object,
                    "kopf.dev",
                    "v1",
                    "clusterkopfpeerings",
                    body,
                )
        except ApiException as exc:
            if exc.status != 409:
                raise


async def _presence(read: Any, name: str, namespace: str) -> Any:
    """The object, False when it does not exist, None when this identity may not read it."""
    try:
        return await asyncio.to_thread(read, name, namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        if exc.status == 403:
            return None
        raise


def _no_namespace(read: Any) -> Any:
    """A cluster-scoped read in _presence's (name, namespace) shape."""
    return lambda name, _namespace: read(name)


def _api_message(exc: ApiException) -> str:
    """The API server's Status message, else the HTTP reason."""
    try:
        message = json.loads(exc.body or "").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or exc.reason)


async def _delete(call: Any, name: str, namespace: str, **options: Any) -> None:
    """Delete; already gone is done."""
    try:
        await asyncio.to_thread(call, name, namespace, **options)
    except ApiException as exc:
        if exc.status != 404:
            raise
