"""The plugin's only door to the API server (the official kubernetes client,
as the operator uses it; synchronous: a CLI has nothing else to do meanwhile).

Objects come back as plain JSON-shaped dicts (`sanitize_for_serialization`),
so everything above this module is pure over dicts. API errors surface as
`KubeError` with the status and the server's message.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from brokergroup_cli.kubectl_plugin.names import API_GROUP, KIND, PLURAL, VERSION


class KubeError(RuntimeError):
    """An API call failed; `status` is the HTTP status (0: no answer, not shown)."""

    def __init__(self, what: str, status: int, reason: str) -> None:
        super().__init__(f"{what}: {f'{status} ' if status else ''}{reason}".strip())
        self.status = status


def _error(what: str, exc: ApiException) -> KubeError:
    message = str(exc.reason or "")
    body = exc.body
    if isinstance(body, bytes | str) and body:
        with contextlib.suppress(ValueError, AttributeError):
            message = str(json.loads(body).get("message") or message)
    return KubeError(what, int(exc.status or 0), message)


def load_api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """--kubeconfig, KUBECONFIG, ~/.kube/config (as kubectl), else in-cluster credentials."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    except (config.ConfigException, OSError) as exc:
        if path or context:
            raise KubeError(f"kubeconfig {path or '~/.kube/config'}", 0, str(exc)) from exc
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as inner:
            raise KubeError("no cluster", 0, f"{exc}; not in a pod either ({inner})") from inner
    return client.ApiClient(configuration)


def current_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The kubeconfig context's namespace (what kubectl uses without -n), else `default`."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        contexts, current = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError):
        return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), current)
    return str(((chosen or {}).get("context") or {}).get("namespace") or "default")


class Kube:
    """The calls the plugin makes, in one namespace."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.api = api_client
        self.namespace = namespace
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)

    def _plain(self, obj: Any) -> dict[str, Any]:
        result: dict[str, Any] = self.api.sanitize_for_serialization(obj)
        return result

    def read_group(self, name: str) -> dict[str, Any]:
        try:
            body: dict[str, Any] = self.custom.get_namespaced_custom_object(  # type: ignore[assignment]
                API_GROUP, VERSION, self.namespace, PLURAL, name
            )
        except ApiException as exc:
            raise _error(f"reading bg/{name} in {self.namespace}", exc) from exc
        return body

    def annotate_group(self, name: str, annotations: Mapping[str, str | None]) -> None:
        try:
            self.custom.patch_namespaced_custom_object(
                API_GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                name,
                {"metadata": {"annotations": dict(annotations)}},
            )
        except ApiException as exc:
            raise _error(f"annotating bg/{name}", exc) from exc

    def list_pods(self, selector: str) -> list[dict[str, Any]]:
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        except ApiException as exc:
            raise _error("listing pods", exc) from exc
        return [self._plain(p) for p in pods.items]

    def read_stateful_set(self, name: str) -> dict[str, Any] | None:
        try:
            return self._plain(self.apps.read_namespaced_stateful_set(name, self.namespace))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise _error(f"reading statefulset/{name}", exc) from exc

    def group_events(self, name: str) -> list[dict[str, Any]]:
        """Events whose object is the BrokerGroup (kopf posts core/v1 Events)."""
        selector = f"involvedObject.kind={KIND},involvedObject.name={name}"
        try:
            events = self.core.list_namespaced_event(self.namespace, field_selector=selector)
        except ApiException as exc:
            raise _error(f"listing events of bg/{name}", exc) from exc
        return [self._plain(e) for e in events.items]

    def namespace_events(self) -> list[dict[str, Any]]:
        try:
            events = self.core.list_namespaced_event(self.namespace)
        except ApiException as exc:
            raise _error("listing events", exc) from exc
        return [self._plain(e) for e in events.items]

    def list_objects(self, kind: str, selector: str) -> list[dict[str, Any]]:
        """Objects of one kind the report collects, by label selector."""
        calls: dict[str, Callable[..., Any]] = {
            "services": self.core.list_namespaced_service,
            "configmaps": self.core.list_namespaced_config_map,
            "persistentvolumeclaims": self.core.list_namespaced_persistent_volume_claim,
            "statefulsets": self.apps.list_namespaced_stateful_set,
            "controllerrevisions": self.apps.list_namespaced_controller_revision,
            "poddisruptionbudgets": self.policy.list_namespaced_pod_disruption_budget,
            "networkpolicies": self.networking.list_namespaced_network_policy,
        }
        try:
            items = calls[kind](self.namespace, label_selector=selector).items
        except ApiException as exc:
            raise _error(f"listing {kind}", exc) from exc
        return [self._plain(o) for o in items]

    def read_secret(self, name: str) -> dict[str, Any]:
        try:
            return self._plain(self.core.read_namespaced_secret(name, self.namespace))
        except ApiException as exc:
            raise _error(f"reading secret/{name}", exc) from exc

    def pod_log(self, pod: str, container: str, *, previous: bool) -> str:
        try:
            text = self.core.read_namespaced_pod_log(
                pod, self.namespace, container=container, previous=previous
            )
        except ApiException as exc:
            raise _error(f"logs of {pod}/{container}", exc) from exc
        return str(text)
