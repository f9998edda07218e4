"""Which conditions hold (pure): Ready, Available, Progressing, Degraded.

metav1.Condition fields: type, status, observedGeneration,
lastTransitionTime, reason, message. lastTransitionTime changes only when a
condition's status changes, so it tells when the group last became (un)available.

- Available: a live master exists and its pod is ready and labelled master
  (the client Service has an endpoint that accepts writes).
- Progressing: pods are being created, rolled or scaled, or a switchover is
  under way; the message carries the planner's reason when a step waits
  (e.g. a scale-down waiting for the staying replicas to hold
  minInSyncReplicas in-sync members).
- Degraded: no live master, a pod not ready, or the SyncStateSet smaller than
  minInSyncReplicas (writes are refused) or smaller than the replicas.
- StorageResized (volumes.py): every data volume holds spec.storage.size, or why
  not (growing, a filesystem waiting for its pod's restart, a StorageClass that does
  not allow expansion, a size below the volumes'). Not part of Ready: a group with
  volumes smaller than asked still serves. A pass that could not read the claims
  keeps the previous one.
- Ready (what `kubectl wait --for=condition=Ready bg/x` waits on, as for a
  CloudNativePG Cluster): the group is what its spec asks for: Available, every
  replica exists, is ready, runs the current template and is in the
  SyncStateSet. False with the first reason that holds, including a group that
  cannot run at all (`blocked`, e.g. its Secret is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

AVAILABLE = "Available"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
READY = "Ready"
STORAGE_RESIZED = "StorageResized"


@dataclass(frozen=True)
class GroupFacts:
    generation: int
    replicas: int
    pods: int
    ready_pods: int
    master_alive: bool
    master_pod_ready: bool
    master_labelled: bool
    sync_state_set_size: int
    min_in_sync_replicas: int
    outdated_pods: int
    plan_reason: str | None = None
    blocked: tuple[str, str] | None = None
    """(reason, message) when the group cannot run as specified at all."""
    not_alive: tuple[tuple[int, str], ...] = ()
    """(brokerId, why) of the replicas the controller holds not alive (a full disk says
    so here): with no master, what an operator must fix."""
    storage: tuple[str, str, str] | None = None
    """StorageResized as volumes.plan_volumes decided it (None: not read this pass)."""


def _cond(status: bool, reason: str, message: str) -> tuple[str, str, str]:
    return ("True" if status else "False", reason, message)


def evaluate(facts: GroupFacts) -> dict[str, tuple[str, str, str]]:
    """Condition type → (status, reason, message)."""
    why = "; not alive: " + ", ".join(f"{b} ({r})" for b, r in facts.not_alive)
    why = why if facts.not_alive else ""
    if not facts.master_alive:
        available = _cond(False, "NoMaster", f"the controller has no live master{why}")
    elif not facts.master_pod_ready:
        available = _cond(False, "MasterNotReady", "the master's pod is not ready")
    elif not facts.master_labelled:
        available = _cond(False, "MasterNotLabelled", "the master's pod is not labelled yet")
    else:
        available = _cond(True, "MasterReady", "a ready master serves the client Service")
    if facts.pods != facts.replicas:
        why = f": {facts.plan_reason}" if facts.plan_reason else ""
        progressing = _cond(True, "Scaling", f"{facts.pods} of {facts.replicas} pod(s) exist{why}")
    elif facts.outdated_pods:
        reason = facts.plan_reason or "rolling"
        progressing = _cond(
            True, "RollingUpdate", f"{facts.outdated_pods} pod(s) outdated: {reason}"
        )
    elif facts.ready_pods != facts.replicas:
        progressing = _cond(
            True, "PodsStarting", f"{facts.ready_pods} of {facts.replicas} pod(s) ready"
        )
    else:
        progressing = _cond(False, "UpToDate", "every pod runs the current template")
    if not facts.master_alive:
        degraded = _cond(True, "NoMaster", f"no live master: writes are refused{why}")
    elif facts.sync_state_set_size < facts.min_in_sync_replicas:
        degraded = _cond(
            True,
            "BelowMinInSync",
            f"SyncStateSet has {facts.sync_state_set_size} member(s), "
            f"minInSyncReplicas is {facts.min_in_sync_replicas}: writes are refused",
        )
    elif facts.ready_pods < facts.replicas:
        degraded = _cond(
            True, "PodsNotReady", f"{facts.replicas - facts.ready_pods} pod(s) not ready"
        )
    elif facts.sync_state_set_size < facts.replicas:
        degraded = _cond(
            True,
            "SlavesOutOfSync",
            f"{facts.replicas - facts.sync_state_set_size} replica(s) outside the SyncStateSet",
        )
    else:
        degraded = _cond(False, "AllInSync", "every replica is in the SyncStateSet")
    if facts.blocked is not None:
        ready = _cond(False, *facts.blocked)
    elif available[0] != "True":
        ready = _cond(False, available[1], available[2])
    elif progressing[0] == "True":
        ready = _cond(False, progressing[1], progressing[2])
    elif degraded[0] == "True":
        ready = _cond(False, degraded[1], degraded[2])
    else:
        ready = _cond(
            True, "GroupReady", "every replica is ready, up to date and in the SyncStateSet"
        )
    result = {READY: ready, AVAILABLE: available, PROGRESSING: progressing, DEGRADED: degraded}
    if facts.storage is not None:
        result[STORAGE_RESIZED] = facts.storage
    return result


def conditions(
    facts: GroupFacts, previous: Sequence[dict[str, Any]], now_iso: str
) -> list[dict[str, Any]]:
    """metav1.Conditions, keeping lastTransitionTime while a status holds."""
    before = {c.get("type"): c for c in previous}
    result = []
    for kind, (status, reason, message) in evaluate(facts).items():
        old = before.get(kind)
        changed = old is None or old.get("status") != status
        result.append(
            {
                "type": kind,
                "status": status,
                "observedGeneration": facts.generation,
                "lastTransitionTime": now_iso
                if changed or old is None
                else old.get("lastTransitionTime", now_iso),
                "reason": reason,
                "message": message,
            }
        )
    kept = before.get(STORAGE_RESIZED)
    if facts.storage is None and kept is not None:
        result.append(dict(kept))
    return result
