"""Which operator a BrokerGroup belongs to, and how long its cleanup may take (pure).

Two releases must never fight over a group (issue 22 item 2): each group has
exactly one operator.
- By default, the operator whose namespaces hold the group (the chart's
  operator watches its release namespace unless told otherwise, and the
  chart refuses to install a second operator whose namespaces overlap).
- Explicitly, `spec.controller.release: <namespace>/<release>`: only the
  operator with that identity (BROKERGROUP_OPERATOR_ID) touches the group;
  every other operator that sees it leaves it alone, finalizer included.

The cleanup a deleted group's finalizer runs (delete the pods, clean the
BrokerIds from the controller) is bounded (issue 22 item 4): after
`cleanup_timeout_s` it gives up, releases the finalizer and says in a
Warning Event what it left behind, so `kubectl delete bg` and namespace
deletion always end, also when the controller is already gone. A group no
broker of which ever registered with the controllers (`ever_registered`: its
status names no BrokerId, no master, no master epoch; e.g. one that never ran
because the release Secret is missing) has nothing there to clean: once its
pods are gone it is released at once, whether or not the controllers could be
asked. And when the operator itself is uninstalled, it lets go of its groups on the way out
(`groups_to_let_go`): they run on unmanaged and can be deleted at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


def release_of(spec: Mapping[str, Any]) -> str:
    """The release a group names in spec.controller.release ('' = none)."""
    return str((spec.get("controller") or {}).get("release") or "")


def owns(operator_id: str, spec: Mapping[str, Any]) -> bool:
    """Whether the operator `operator_id` may act on a group with this spec."""
    wanted = release_of(spec)
    return not wanted or wanted == operator_id


def groups_to_let_go(
    groups: Sequence[Mapping[str, Any]], operator_id: str, finalizer: str
) -> list[Mapping[str, Any]]:
    """On `helm uninstall` (the operator's Deployment is gone): this operator's
    groups that still carry its finalizer. Nobody would ever remove it, so
    `kubectl delete bg` and namespace deletion would hang for good."""
    return [
        g
        for g in groups
        if owns(operator_id, g.get("spec") or {})
        and finalizer in ((g.get("metadata") or {}).get("finalizers") or [])
    ]


@dataclass(frozen=True)
class Retry:
    """Cleanup still has work and time: try again after `delay_s`."""

    reason: str
    delay_s: float


@dataclass(frozen=True)
class Release:
    """Let the group go; `left_behind` (if any) goes into a Warning Event."""

    left_behind: str | None = None


def ever_registered(status: Mapping[str, Any]) -> bool:
    """Whether a broker of the group may have registered with the controllers, as far
    as its status tells: a row of status.brokers with a BrokerId, a master, or a master
    epoch above 0. The operator writes these from the controllers' view and patches the
    status as a merge, so a pass without that view (controllers unreachable) keeps
    them; a group that never ran (no release Secret, an invalid spec) has none."""
    rows = status.get("brokers") or []
    named = any(isinstance(r, Mapping) and isinstance(r.get("brokerId"), int) for r in rows)
    epoch = status.get("masterEpoch")
    return named or bool(status.get("master")) or (isinstance(epoch, int) and epoch > 0)


def cleanup_step(
    *,
    pods_left: int,
    ids_cleaned: bool,
    registered: bool,
    problem: str | None,
    elapsed_s: float,
    timeout_s: float,
) -> Retry | Release:
    """The finalizer's decision after one cleanup attempt.

    pods_left: broker pods still present; ids_cleaned: the controller forgot the
    group's BrokerIds (or never knew them); registered: a broker of the group may
    have registered with the controllers (`ever_registered`; when none did there is
    nothing to clean there, so no reason to wait for them); problem: why the last
    attempt failed (controller unreachable, API error), if it did."""
    if pods_left == 0 and (ids_cleaned or not registered):
        return Release()
    if elapsed_s < timeout_s:
        if pods_left:
            return Retry(f"waiting for {pods_left} broker pod(s) to go", 2.0)
        return Retry(f"cleaning the BrokerIds from the controller: {problem}", 5.0)
    left = []
    if pods_left:
        left.append(f"{pods_left} broker pod(s) still terminating")
    if not ids_cleaned:
        left.append(
            "the group's BrokerIds in the controller (clean them with "
            "`brokergroup admin clean-broker-data` once it is reachable)"
        )
    why = f"; last error: {problem}" if problem else ""
    return Release(
        f"gave up cleaning after {timeout_s:.0f}s and released the finalizer; "
        f"left behind: {', '.join(left)}{why}"
    )
