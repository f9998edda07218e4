"""`kubectl brokergroup switchover GROUP TARGET` (and `brokergroup kube switchover`).

The plugin asks; the operator decides and the controller elects. The request
is the annotation `brokergroup.io/switchover-to=<BrokerId>` on the
BrokerGroup; the operator answers with one Event on it — `Switchover`,
`SwitchoverRefused` (the reason: not registered, not alive, outside the
SyncStateSet, already the master) or `SwitchoverFailed` (the controller's
error) — and removes the annotation. So the command:

1. resolves TARGET (a BrokerId, or a pod name through the status rows or the
   pod's `brokergroup.io/broker-id` label) — `resolve_target`, pure;
2. refuses at once a target the status already shows as the live master;
3. notes the group's Events, sets the annotation, then follows the object
   and its new Events: a refusal or failure ends the command with the
   operator's message, a success once the status shows the target as master
   at a higher masterEpoch (`outcome`, pure).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from brokergroup_cli.kubectl_plugin.names import (
    LABEL_BROKER_ID,
    LABEL_ROLE,
    SWITCHOVER_ANNOTATION,
    SWITCHOVER_DONE,
    SWITCHOVER_REFUSED,
    pod_selector,
)


class TargetError(ValueError):
    """TARGET names no broker of the group (the message lists what it could be)."""


class GroupApi(Protocol):
    def read_group(self, name: str) -> dict[str, Any]: ...
    def annotate_group(self, name: str, annotations: Mapping[str, str | None]) -> None: ...
    def list_pods(self, selector: str) -> list[dict[str, Any]]: ...
    def group_events(self, name: str) -> list[dict[str, Any]]: ...


def resolve_target(target: str, group: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    """A BrokerId as given, or the BrokerId of the named pod (`NAME` or `pod/NAME`)."""
    text = target.strip()
    if text.isdigit():
        return int(text)
    name = text.removeprefix("pod/").removeprefix("pods/")
    for row in (group.get("status") or {}).get("brokers") or []:
        if row.get("pod") == name and isinstance(row.get("brokerId"), int):
            return int(row["brokerId"])
    for pod in pods:
        meta = pod.get("metadata") or {}
        label = (meta.get("labels") or {}).get(LABEL_BROKER_ID)
        if meta.get("name") == name and label is not None and str(label).isdigit():
            return int(label)
    known = sorted(
        {str(r.get("pod")) for r in (group.get("status") or {}).get("brokers") or []}
        | {str((p.get("metadata") or {}).get("name")) for p in pods}
    )
    group_name = (group.get("metadata") or {}).get("name")
    raise TargetError(
        f"{target!r} is neither a BrokerId nor a pod of bg/{group_name} with a BrokerId "
        f"(pods: {', '.join(known) or 'none'})"
    )


def already_master(group: Mapping[str, Any], broker_id: int) -> str | None:
    """The refusal when the status already shows this broker as the live master."""
    master = (group.get("status") or {}).get("master") or {}
    if master.get("brokerId") == broker_id:
        where = f" ({master['pod']})" if master.get("pod") else ""
        epoch = (group.get("status") or {}).get("masterEpoch")
        return f"broker {broker_id}{where} is already the master (masterEpoch {epoch})"
    return None


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str


def new_switchover_events(
    events: Iterable[Mapping[str, Any]], seen: frozenset[str]
) -> list[Mapping[str, Any]]:
    """The operator's switchover Events not in `seen` (names), oldest first."""
    reasons = {SWITCHOVER_DONE, *SWITCHOVER_REFUSED}
    fresh = [
        e
        for e in events
        if e.get("reason") in reasons and (e.get("metadata") or {}).get("name") not in seen
    ]
    fresh.sort(
        key=lambda e: (
            str(e.get("eventTime") or e.get("firstTimestamp") or ""),
            str((e.get("metadata") or {}).get("creationTimestamp") or ""),
        )
    )
    return fresh


def labelled_master(pods: Iterable[Mapping[str, Any]]) -> int | None:
    """The BrokerId of the pod labelled master (what the master Service selects), if any."""
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_ROLE) == "master" and str(labels.get(LABEL_BROKER_ID)).isdigit():
            return int(labels[LABEL_BROKER_ID])
    return None


def outcome(
    broker_id: int,
    epoch_before: int,
    group: Mapping[str, Any],
    fresh_events: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> Outcome | None:
    """Done (and how) or None (keep following). A refusal wins over everything:
    the operator said no, whatever the status shows meanwhile. Done means the status
    shows the new master at a newer masterEpoch *and* its pod carries the master label:
    the operator writes the status and moves the label in one pass, status first, and a
    client of the master Service still reached no master in between."""
    for event in fresh_events:
        if event.get("reason") in SWITCHOVER_REFUSED:
            return Outcome(False, f"{event.get('reason')}: {event.get('message')}")
    status = group.get("status") or {}
    master = status.get("master") or {}
    epoch = int(status.get("masterEpoch") or 0)
    if (
        master.get("brokerId") == broker_id
        and epoch > epoch_before
        and labelled_master(pods) == broker_id
    ):
        where = f" ({master['pod']})" if master.get("pod") else ""
        return Outcome(True, f"broker {broker_id}{where} is master at masterEpoch {epoch}")
    return None


def switchover(
    kube: GroupApi,
    name: str,
    target: str,
    wait_s: float,
    say: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = 0.5,
) -> Outcome:
    """Ask the operator to move the master to TARGET; follow it until `wait_s` ends."""
    group = kube.read_group(name)
    broker_id = resolve_target(target, group, kube.list_pods(pod_selector(name)))
    refusal = already_master(group, broker_id)
    if refusal is not None:
        return Outcome(False, refusal)
    epoch_before = int((group.get("status") or {}).get("masterEpoch") or 0)
    seen = frozenset(str((e.get("metadata") or {}).get("name")) for e in kube.group_events(name))
    kube.annotate_group(name, {SWITCHOVER_ANNOTATION: str(broker_id)})
    say(f"asked the operator to switch bg/{name} over to broker {broker_id}")
    if wait_s <= 0:
        return Outcome(True, "not waiting (--wait 0)")
    deadline = clock() + wait_s
    while True:
        sleep(poll_s)
        group = kube.read_group(name)
        result = outcome(
            broker_id,
            epoch_before,
            group,
            new_switchover_events(kube.group_events(name), seen),
            kube.list_pods(pod_selector(name)),
        )
        if result is not None:
            return result
        if clock() >= deadline:
            pending = SWITCHOVER_ANNOTATION in (
                (group.get("metadata") or {}).get("annotations") or {}
            )
            return Outcome(
                False,
                f"no answer within {wait_s:g} s: "
                + (
                    "the operator has not taken the request (is it running and watching "
                    "this namespace?)"
                    if pending
                    else "the operator took the request but the status does not show "
                    f"broker {broker_id} as master with its pod labelled master yet "
                    f"(kubectl describe bg/{name})"
                ),
            )
