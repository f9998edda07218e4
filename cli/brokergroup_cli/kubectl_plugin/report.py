"""`kubectl brokergroup report GROUP`: one tarball for a bug report, like
`kubectl cnpg report cluster`.

What goes in, under `brokergroup-report-<namespace>-<group>-<UTC time>/`:

- `brokergroup.json` and `status.txt` (the `status` view);
- `objects/<kind>.json`: what the group owns and runs (StatefulSet,
  ControllerRevisions, pods, Services, ConfigMap, PVCs, PDB, NetworkPolicy),
  selected by the group's labels;
- `events.json`: the namespace's Events about the group and those objects;
- `logs/<pod>/<container>.log` (and `.previous.log` after a restart);
- `secrets/<name>.json`: the Secrets the pods mount, with every value
  replaced by `<redacted>`;
- `errors.txt`: what could not be read (missing RBAC, no previous log).

Redaction: besides blanking the Secrets' values, every value of those
Secrets (as text and as base64) is cut out of every file, so a token a log
line or an annotation happened to carry does not leave the cluster.
Collection (`collect`) is the I/O; `archive_members` and `redact` are pure.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from brokergroup_cli.kubectl_plugin.kube import KubeError
from brokergroup_cli.kubectl_plugin.names import KIND, pod_selector
from brokergroup_cli.kubectl_plugin.view import group_status, render_text

REDACTED = "<redacted>"
#: Kinds collected by the group's labels (besides the pods), in the archive's order.
OBJECT_KINDS = (
    "statefulsets",
    "controllerrevisions",
    "services",
    "configmaps",
    "persistentvolumeclaims",
    "poddisruptionbudgets",
    "networkpolicies",
)
#: Shorter secret values are not cut out of the text: "1" or "true" would maul every file.
MIN_REDACTED_LENGTH = 6


class ReportApi(Protocol):
    namespace: str

    def read_group(self, name: str) -> dict[str, Any]: ...
    def list_pods(self, selector: str) -> list[dict[str, Any]]: ...
    def list_objects(self, kind: str, selector: str) -> list[dict[str, Any]]: ...
    def namespace_events(self) -> list[dict[str, Any]]: ...
    def read_secret(self, name: str) -> dict[str, Any]: ...
    def pod_log(self, pod: str, container: str, *, previous: bool) -> str: ...


@dataclass
class Collected:
    """Everything read from the cluster, unredacted (it never leaves this process)."""

    group: dict[str, Any]
    pods: list[dict[str, Any]]
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)
    """`<pod>/<container>.log` or `.previous.log` → text."""
    errors: list[str] = field(default_factory=list)


def secret_names(group: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The group's credential Secret (its own, or `<name>-credentials` the operator
    writes) and every Secret a pod mounts."""
    own = ((group.get("spec") or {}).get("controller") or {}).get("secretName")
    names = {str(own or f"{(group.get('metadata') or {}).get('name')}-credentials")}
    for pod in pods:
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            secret = volume.get("secret") or {}
            if secret.get("secretName"):
                names.add(str(secret["secretName"]))
            for source in (volume.get("projected") or {}).get("sources") or []:
                if (source.get("secret") or {}).get("name"):
                    names.add(str(source["secret"]["name"]))
    return sorted(names)


def _involves(event: Mapping[str, Any], wanted: set[tuple[str, str]]) -> bool:
    obj = event.get("involvedObject") or event.get("regarding") or {}
    return (str(obj.get("kind")), str(obj.get("name"))) in wanted


def collect(kube: ReportApi, name: str) -> Collected:
    """Read everything the report holds; a failed read is written down, not fatal."""
    group = kube.read_group(name)
    selector = pod_selector(name)
    errors: list[str] = []
    try:
        pods = kube.list_pods(selector)
    except KubeError as exc:
        pods, errors = [], [str(exc)]
    found = Collected(group=group, pods=pods, errors=errors)
    wanted = {(KIND, name)} | {("Pod", str(p["metadata"]["name"])) for p in pods}
    for kind in OBJECT_KINDS:
        try:
            found.objects[kind] = kube.list_objects(kind, selector)
        except KubeError as exc:
            found.errors.append(str(exc))
            continue
        for obj in found.objects[kind]:
            wanted.add((str(obj.get("kind") or _KIND_OF[kind]), str(obj["metadata"]["name"])))
    try:
        events = [e for e in kube.namespace_events() if _involves(e, wanted)]
        events.sort(key=_event_time)
        found.events = events
    except KubeError as exc:
        found.errors.append(str(exc))
    for secret in secret_names(group, pods):
        try:
            found.secrets.append(kube.read_secret(secret))
        except KubeError as exc:
            found.errors.append(str(exc))
    for pod in pods:
        pod_name = str(pod["metadata"]["name"])
        spec = pod.get("spec") or {}
        statuses = {
            str(s.get("name")): s
            for s in [
                *((pod.get("status") or {}).get("containerStatuses") or []),
                *((pod.get("status") or {}).get("initContainerStatuses") or []),
            ]
        }
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            cname = str(container["name"])
            try:
                found.logs[f"{pod_name}/{cname}.log"] = kube.pod_log(
                    pod_name, cname, previous=False
                )
            except KubeError as exc:
                found.errors.append(str(exc))
            if int((statuses.get(cname) or {}).get("restartCount") or 0) > 0:
                try:
                    found.logs[f"{pod_name}/{cname}.previous.log"] = kube.pod_log(
                        pod_name, cname, previous=True
                    )
                except KubeError as exc:
                    found.errors.append(str(exc))
    return found


_KIND_OF = {
    "statefulsets": "StatefulSet",
    "controllerrevisions": "ControllerRevision",
    "services": "Service",
    "configmaps": "ConfigMap",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "poddisruptionbudgets": "PodDisruptionBudget",
    "networkpolicies": "NetworkPolicy",
}


def _event_time(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def secret_values(secrets: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every value of the Secrets, as text and as its base64, longest first."""
    values: set[str] = set()
    for secret in secrets:
        for encoded in (secret.get("data") or {}).values():
            values.add(str(encoded))
            with contextlib.suppress(ValueError):  # UnicodeDecodeError is one
                values.add(base64.b64decode(str(encoded)).decode())
        for plain in (secret.get("stringData") or {}).values():
            values.add(str(plain))
            values.add(base64.b64encode(str(plain).encode()).decode())
    kept = {v.strip() for v in values} | values
    return sorted((v for v in kept if len(v) >= MIN_REDACTED_LENGTH), key=lambda v: (-len(v), v))


def redact(text: str, values: Sequence[str]) -> str:
    for value in values:
        text = text.replace(value, REDACTED)
    return text


def redacted_secret(secret: Mapping[str, Any]) -> dict[str, Any]:
    """The Secret's shape (name, type, keys) with no value and no last-applied copy."""
    meta = dict(secret.get("metadata") or {})
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    meta["annotations"] = annotations
    meta.pop("managedFields", None)
    return {
        "apiVersion": secret.get("apiVersion", "v1"),
        "kind": "Secret",
        "metadata": meta,
        "type": secret.get("type"),
        "data": {k: REDACTED for k in sorted((secret.get("data") or {}).keys())},
    }


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"


def archive_members(found: Collected, prefix: str) -> dict[str, str]:
    """Path in the tarball → redacted text (pure)."""
    values = secret_values(found.secrets)
    members: dict[str, str] = {
        "brokergroup.json": _json(found.group),
        "status.txt": render_text(group_status(found.group)) + "\n",
        "objects/pods.json": _json(found.pods),
    }
    for kind, objects in found.objects.items():
        members[f"objects/{kind}.json"] = _json(objects)
    members["events.json"] = _json(found.events)
    for secret in found.secrets:
        members[f"secrets/{secret['metadata']['name']}.json"] = _json(redacted_secret(secret))
    for path, text in found.logs.items():
        members[f"logs/{path}"] = text
    if found.errors:
        members["errors.txt"] = "".join(f"{e}\n" for e in found.errors)
    return {f"{prefix}/{path}": redact(text, values) for path, text in members.items()}


def report_name(namespace: str, name: str, now: datetime) -> str:
    return f"brokergroup-report-{namespace}-{name}-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def write_tarball(members: Mapping[str, str], path: str, now: datetime) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            info.mtime = int(now.timestamp())
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
