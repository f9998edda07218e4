"""The BrokerGroup status and the Events a pass emits (pure).

Status is rebuilt from facts on every pass; only `lastFailover` and
condition transition times carry over from the previous status. Events
are derived by comparing the previous status with the new one, so a pass
that runs twice (kopf retry, an operator replica taking over) emits nothing
the second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from brokergroup_operator import conditions as cond
from brokergroup_operator.labels import broker_ids_by_pod
from brokergroup_operator.model import LABEL_ROLE, GroupView, PodFacts, Role, selector_string


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class StatusInput:
    group: str
    generation: int
    replicas: int
    min_in_sync_replicas: int
    update_revision: str
    current_revision: str
    pods: tuple[PodFacts, ...]
    view: GroupView | None
    previous: dict[str, Any]
    now_iso: str
    now_ms: int
    master_lost_at_ms: int | None = None
    plan_reason: str | None = None
    blocked: tuple[str, str] | None = None
    storage: tuple[str, str, str] | None = None
    """The StorageResized condition (volumes.py); None keeps the previous one."""


def build_status(inp: StatusInput) -> tuple[dict[str, Any], list[Event]]:
    view = inp.view
    prev = inp.previous or {}
    pods = sorted(inp.pods, key=lambda p: p.ordinal)
    ready = sum(1 for p in pods if p.ready and not p.deleting)
    status: dict[str, Any] = {
        "observedGeneration": inp.generation,
        "replicas": len(pods),
        "readyReplicas": ready,
        "selector": selector_string(inp.group),
        "ready": f"{ready}/{inp.replicas}",
        "currentRevision": current_revision(inp, pods),
        "updateRevision": inp.update_revision,
    }
    events: list[Event] = []
    if view is None:
        facts = cond.GroupFacts(
            generation=inp.generation,
            replicas=inp.replicas,
            pods=len(pods),
            ready_pods=ready,
            master_alive=False,
            master_pod_ready=False,
            master_labelled=False,
            sync_state_set_size=0,
            min_in_sync_replicas=inp.min_in_sync_replicas,
            outdated_pods=sum(1 for p in pods if p.revision != inp.update_revision),
            plan_reason=inp.plan_reason,
            blocked=inp.blocked,
            storage=inp.storage,
        )
        status["conditions"] = cond.conditions(facts, prev.get("conditions") or [], inp.now_iso)
        status["inSync"] = "?"
        return status, events
    ids = broker_ids_by_pod(pods, view)
    pod_of = {bid: name for name, bid in ids.items()}
    master_id = view.live_master
    master_pod = next(
        (p for p in pods if master_id is not None and ids.get(p.name) == master_id), None
    )
    known = known_broker_ids(prev)
    rows = []
    for pod in pods:
        bid = ids.get(pod.name, known.get(pod.name))
        row = view.broker(bid) if bid is not None else None
        rows.append(
            {
                "pod": pod.name,
                "brokerId": bid,
                "address": pod.address,
                "role": None
                if bid is None
                else str(Role.MASTER if bid == master_id else Role.SLAVE),
                "alive": bool(row and row.alive),
                "inactiveReason": None if row is None or row.alive else row.inactive_reason,
                "inSync": bid is not None and bid in view.sync_state_set,
                "maxOffset": row.max_offset if row else 0,
                "ready": pod.ready,
            }
        )
    # Pods that are gone (scaled down) stay listed until their ids are cleaned
    # from the controller, so the scale planner still knows which ids to clean.
    present = {p.name for p in pods}
    for name, bid in sorted(known.items()):
        row = view.broker(bid)
        if name not in present and row is not None and bid not in ids.values():
            rows.append(
                {
                    "pod": name,
                    "brokerId": bid,
                    "address": row.address,
                    "role": None,
                    "alive": row.alive,
                    "inactiveReason": None if row.alive else row.inactive_reason,
                    "inSync": bid in view.sync_state_set,
                    "maxOffset": row.max_offset,
                    "ready": False,
                }
            )
    status.update(
        {
            "master": None
            if master_id is None
            else {
                "brokerId": master_id,
                "pod": pod_of.get(master_id),
                "address": view.master_address,
            },
            "masterEpoch": view.master_epoch,
            "syncStateSet": sorted(view.sync_state_set),
            "syncStateSetEpoch": view.sync_state_set_epoch,
            "inSync": f"{len(view.sync_state_set)}/{inp.replicas}",
            "brokers": rows,
            "lastFailover": prev.get("lastFailover"),
        }
    )
    prev_master = (prev.get("master") or {}).get("brokerId")
    prev_epoch = int(prev.get("masterEpoch") or 0)
    if master_id is not None and view.master_epoch > prev_epoch and master_id != prev_master:
        events.append(
            Event(
                "MasterElected",
                f"broker {master_id} ({pod_of.get(master_id, '?')}) is master at epoch "
                f"{view.master_epoch} (was {prev_master if prev_master is not None else 'none'})",
            )
        )
        if prev_master is not None or prev_epoch > 0:
            status["lastFailover"] = {
                "at": inp.now_iso,
                "from": prev_master,
                "to": master_id,
                "durationMs": None
                if inp.master_lost_at_ms is None
                else max(0, inp.now_ms - inp.master_lost_at_ms),
            }
    prev_set = prev.get("syncStateSet")
    if prev_set is not None and sorted(prev_set) != sorted(view.sync_state_set):
        events.append(
            Event(
                "SyncStateSetChanged",
                f"SyncStateSet {sorted(prev_set)} → {sorted(view.sync_state_set)} "
                f"at epoch {view.sync_state_set_epoch}",
            )
        )
    facts = cond.GroupFacts(
        generation=inp.generation,
        replicas=inp.replicas,
        pods=len(pods),
        ready_pods=ready,
        master_alive=master_id is not None,
        not_alive=tuple(
            (row.broker_id, row.inactive_reason)
            for row in sorted(view.brokers, key=lambda r: r.broker_id)
            if not row.alive and row.inactive_reason
        ),
        master_pod_ready=master_pod is not None and master_pod.ready,
        master_labelled=master_pod is not None
        and master_pod.labels.get(LABEL_ROLE) == str(Role.MASTER),
        sync_state_set_size=len(view.sync_state_set),
        min_in_sync_replicas=inp.min_in_sync_replicas,
        outdated_pods=sum(1 for p in pods if p.revision != inp.update_revision),
        plan_reason=inp.plan_reason,
        blocked=inp.blocked,
        storage=inp.storage,
    )
    status["conditions"] = cond.conditions(facts, prev.get("conditions") or [], inp.now_iso)
    return status, events


def current_revision(inp: StatusInput, pods: list[PodFacts]) -> str:
    """The revision every pod runs once a roll is done.

    With OnDelete updates the StatefulSet controller never moves its own
    status.currentRevision (it does so only for RollingUpdate), so it would
    name the first template for ever. The operator's roll is what completes
    an update: when every replica's pod runs updateRevision, that is the
    current one; until then the previous status' value holds."""
    live = [p for p in pods if not p.deleting]
    if (
        inp.update_revision
        and len(live) == inp.replicas
        and all(p.revision == inp.update_revision for p in live)
    ):
        return inp.update_revision
    return str((inp.previous or {}).get("currentRevision") or "") or inp.current_revision


def known_broker_ids(previous: dict[str, Any]) -> dict[str, int]:
    """Pod name → BrokerId as remembered in the previous status."""
    result: dict[str, int] = {}
    for row in previous.get("brokers") or []:
        if isinstance(row, dict) and row.get("pod") and isinstance(row.get("brokerId"), int):
            result[str(row["pod"])] = int(row["brokerId"])
    return result
