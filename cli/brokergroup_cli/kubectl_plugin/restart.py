"""`kubectl brokergroup restart GROUP`: a rolling restart through the operator's
safe roll, as `kubectl rollout restart` does for a Deployment.

The plugin writes `kubectl.kubernetes.io/restartedAt=<now>` on the
BrokerGroup; the operator copies it into the pod template, so the StatefulSet
gets a new revision and the operator's roll planner restarts every pod the
usual way (slaves first, each back in the SyncStateSet before the next, then
a switchover, the old master last; docs/kubernetes.md "Rolling update").
`--wait` follows the roll until every pod runs the new revision and is ready
(`roll_progress`, pure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from brokergroup_cli.kubectl_plugin.names import (
    RESTARTED_AT_ANNOTATION,
    REVISION_LABEL,
    pod_selector,
)


class RollApi(Protocol):
    def annotate_group(self, name: str, annotations: Mapping[str, str | None]) -> None: ...
    def read_group(self, name: str) -> dict[str, Any]: ...
    def read_stateful_set(self, name: str) -> dict[str, Any] | None: ...
    def list_pods(self, selector: str) -> list[dict[str, Any]]: ...


def restarted_at(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def roll_progress(
    revision_before: str | None,
    stateful_set: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    replicas: int,
) -> tuple[bool, str]:
    """(done, what the roll is at): done when the StatefulSet has a new revision and
    `replicas` live pods run it, all ready."""
    revision = ((stateful_set or {}).get("status") or {}).get("updateRevision")
    if not revision or revision == revision_before:
        return False, "waiting for the operator to update the StatefulSet"
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    updated = [
        p
        for p in live
        if ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL) == revision
    ]
    ready = [p for p in updated if _ready(p)]
    text = f"{len(ready)}/{replicas} pods ready on revision {revision}"
    return len(ready) == replicas and len(live) == replicas, text


def restart(
    kube: RollApi,
    name: str,
    wait_s: float,
    say: Callable[[str], None],
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = 1.0,
) -> tuple[bool, str]:
    group = kube.read_group(name)
    replicas = int((group.get("spec") or {}).get("replicas") or 0)
    sts = kube.read_stateful_set(name)
    revision_before = ((sts or {}).get("status") or {}).get("updateRevision")
    stamp = restarted_at(now())
    kube.annotate_group(name, {RESTARTED_AT_ANNOTATION: stamp})
    say(f"bg/{name} restart requested ({RESTARTED_AT_ANNOTATION}={stamp})")
    if wait_s <= 0:
        return True, (
            "the operator restarts the slaves first, then switches over and restarts the "
            f"old master; follow with `kubectl brokergroup status {name}`"
        )
    deadline = clock() + wait_s
    last = ""
    while clock() < deadline:
        done, last = roll_progress(
            revision_before,
            kube.read_stateful_set(name),
            kube.list_pods(pod_selector(name)),
            replicas,
        )
        if done:
            return True, f"bg/{name} restarted: {last}"
        sleep(poll_s)
    return False, f"the roll did not finish within {wait_s:g} s ({last})"
