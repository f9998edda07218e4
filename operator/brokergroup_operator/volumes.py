"""Volumes that grow: what raising spec.storage.size does to a group's data PVCs (pure).

A StatefulSet's volumeClaimTemplates are immutable, so the PVCs are the source of truth
(as CloudNativePG keeps them): the operator patches `spec.resources.requests.storage` of
each existing data claim, and the StatefulSet keeps the claim template it was created
with (workload.stateful_set; a claim a later scale-up creates from it is grown by the
next pass, once bound). The StorageClass decides whether a claim may grow, as Strimzi's
PvcReconciler checks it: `allowVolumeExpansion: true`, else the group says why and
nothing is patched. Volumes never shrink: a size below a claim's is refused and the
claims stay as they are.

`plan_volumes` takes the facts of one pass (the wanted size, the claims in use with
their requests, capacities and conditions, what each StorageClass allows) and returns
the patches to make and the `StorageResized` condition (conditions.STORAGE_RESIZED); `volume_events` derives the
Events from the previous condition, so a pass that runs twice emits nothing again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from brokergroup_operator.status import Event

DATA_VOLUME = "data"
"""The StatefulSet's volume claim template (PVCs `data-<group>-<ordinal>`)."""
DEFAULT_SIZE = "10Gi"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    """Not a Kubernetes resource quantity."""


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes resource quantity ("10Gi", "1500M", "1e9", "1.5Gi") as a number of
    bytes (apimachinery's resource.Quantity grammar)."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity")
    number, exponent, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise QuantityError(f"{text!r} is not a quantity") from None
    if exponent:
        return value.scaleb(int(exponent[1:]))
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    return value.scaleb(_DECIMAL[suffix or ""])


class ClaimCondition(StrEnum):
    """PersistentVolumeClaim status condition types of a resize."""

    RESIZING = "Resizing"
    FILE_SYSTEM_RESIZE_PENDING = "FileSystemResizePending"
    CONTROLLER_RESIZE_ERROR = "ControllerResizeError"
    NODE_RESIZE_ERROR = "NodeResizeError"


_FAILED = (ClaimCondition.CONTROLLER_RESIZE_ERROR, ClaimCondition.NODE_RESIZE_ERROR)
#: PVC status.allocatedResourceStatuses values that mean the resize cannot finish.
_INFEASIBLE = ("ControllerResizeInfeasible", "NodeResizeInfeasible")


@dataclass(frozen=True)
class ClaimFacts:
    """One data PVC as read in this pass."""

    name: str
    phase: str
    """Pending, Bound or Lost."""
    storage_class: str | None
    """spec.storageClassName (the cluster default is filled in when the claim is made)."""
    requested: str
    """spec.resources.requests.storage as the API server holds it."""
    capacity: str | None = None
    """status.capacity.storage (None until bound)."""
    conditions: tuple[tuple[str, str], ...] = ()
    """(type, message) of the status conditions that are True."""
    allocated_status: str | None = None
    """status.allocatedResourceStatuses.storage (e.g. ControllerResizeInProgress)."""

    @classmethod
    def from_pvc(cls, pvc: Mapping[str, Any]) -> ClaimFacts:
        meta = pvc.get("metadata") or {}
        spec = pvc.get("spec") or {}
        status = pvc.get("status") or {}
        return cls(
            name=str(meta.get("name") or ""),
            phase=str(status.get("phase") or "Pending"),
            storage_class=spec.get("storageClassName") or None,
            requested=str(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
            capacity=(status.get("capacity") or {}).get("storage"),
            conditions=tuple(
                (str(c.get("type")), str(c.get("message") or ""))
                for c in status.get("conditions") or []
                if str(c.get("status")) == "True"
            ),
            allocated_status=(status.get("allocatedResourceStatuses") or {}).get("storage"),
        )

    def has(self, kind: ClaimCondition) -> bool:
        return any(t == kind for t, _ in self.conditions)

    def message(self, kind: ClaimCondition) -> str:
        return next((m for t, m in self.conditions if t == kind), "")


class Reason(StrEnum):
    """The StorageResized condition's reasons, the refusals first."""

    SHRINK_REFUSED = "ShrinkRefused"
    NO_STORAGE_CLASS = "NoStorageClass"
    STORAGE_CLASS_NOT_FOUND = "StorageClassNotFound"
    STORAGE_CLASS_NOT_EXPANDABLE = "StorageClassNotExpandable"
    EXPANSION_REFUSED = "ExpansionRefused"
    RESIZE_FAILED = "ResizeFailed"
    RESIZING = "Resizing"
    WAITING_FOR_BINDING = "WaitingForBinding"
    FILE_SYSTEM_RESIZE_PENDING = "FileSystemResizePending"
    RESIZED = "Resized"


#: Reasons that need someone to act (a Warning Event each time one appears).
REFUSALS = frozenset(
    {
        Reason.SHRINK_REFUSED,
        Reason.NO_STORAGE_CLASS,
        Reason.STORAGE_CLASS_NOT_FOUND,
        Reason.STORAGE_CLASS_NOT_EXPANDABLE,
        Reason.EXPANSION_REFUSED,
        Reason.RESIZE_FAILED,
    }
)
_ORDER = tuple(Reason)


@dataclass(frozen=True)
class Condition:
    status: bool
    reason: Reason
    message: str

    def as_tuple(self) -> tuple[str, str, str]:
        """(status, reason, message) as conditions.evaluate holds them."""
        return ("True" if self.status else "False", str(self.reason), self.message)


@dataclass(frozen=True)
class ClaimPatch:
    """Grow one claim: its spec.resources.requests.storage becomes `storage`."""

    claim: str
    storage: str
    was: str


@dataclass(frozen=True)
class VolumePlan:
    patches: tuple[ClaimPatch, ...]
    condition: Condition


def claim_name(group: str, ordinal: int) -> str:
    return f"{DATA_VOLUME}-{group}-{ordinal}"


def claims_in_use(group: str, replicas: int, pvcs: Sequence[ClaimFacts]) -> list[ClaimFacts]:
    """The data claims of ordinals below `replicas`, by ordinal. A claim a scale-down
    kept (deleteClaimOnScaleDown false) grows when a scale-up uses it again."""
    by_name = {c.name: c for c in pvcs}
    wanted = (claim_name(group, i) for i in range(replicas))
    return [by_name[name] for name in wanted if name in by_name]


def plan_volumes(
    size: str,
    claims: Sequence[ClaimFacts],
    expandable: Mapping[str, bool | None],
) -> VolumePlan:
    """What to do about the claims in use for spec.storage.size `size`.

    `expandable`: StorageClass name → its allowVolumeExpansion; a class missing from
    the mapping does not exist; None: it could not be read (no RBAC to read
    StorageClasses: the patch is tried and the API server's resize admission decides).
    """
    wanted = parse_quantity(size)
    found: dict[Reason, list[str]] = {}
    patches: list[ClaimPatch] = []

    def note(reason: Reason, text: str) -> None:
        found.setdefault(reason, []).append(text)

    for claim in claims:
        requested = parse_quantity(claim.requested)
        if requested > wanted:
            note(Reason.SHRINK_REFUSED, f"{claim.name} requests {claim.requested}")
            continue
        if requested < wanted:
            problem = _class_problem(claim, expandable)
            if problem is not None:
                note(*problem)
            elif claim.phase != "Bound":
                # Only a bound claim's request may change (API validation).
                note(Reason.WAITING_FOR_BINDING, f"{claim.name} is {claim.phase}")
            else:
                patches.append(ClaimPatch(claim.name, size, claim.requested))
                note(Reason.RESIZING, f"{claim.name} {claim.requested} → {size}")
            continue
        _note_progress(claim, note)
    return VolumePlan(tuple(patches), _condition(size, len(claims), found))


def _class_problem(
    claim: ClaimFacts, expandable: Mapping[str, bool | None]
) -> tuple[Reason, str] | None:
    if claim.storage_class is None:
        return Reason.NO_STORAGE_CLASS, f"{claim.name} has no StorageClass"
    if claim.storage_class not in expandable:
        return (
            Reason.STORAGE_CLASS_NOT_FOUND,
            f"{claim.name}'s {claim.storage_class!r} does not exist",
        )
    if expandable[claim.storage_class] is False:
        return (
            Reason.STORAGE_CLASS_NOT_EXPANDABLE,
            f"{claim.name}'s {claim.storage_class!r} has no allowVolumeExpansion: true",
        )
    return None


def _note_progress(claim: ClaimFacts, note: Any) -> None:
    """A claim that requests the size already: grown, or how far its resize is."""
    failed = [m for kind in _FAILED if claim.has(kind) for m in [claim.message(kind)]]
    if failed or claim.allocated_status in _INFEASIBLE:
        why = "; ".join(m for m in failed if m) or str(claim.allocated_status)
        note(Reason.RESIZE_FAILED, f"{claim.name}: {why}")
        return
    if claim.capacity is None:
        return  # not provisioned yet: it is made with the size it requests
    if parse_quantity(claim.capacity) >= parse_quantity(claim.requested):
        return
    if claim.has(ClaimCondition.FILE_SYSTEM_RESIZE_PENDING):
        note(Reason.FILE_SYSTEM_RESIZE_PENDING, f"{claim.name}")
    else:
        note(Reason.RESIZING, f"{claim.name} {claim.capacity} → {claim.requested}")


def _condition(size: str, count: int, found: Mapping[Reason, list[str]]) -> Condition:
    if not found:
        return Condition(True, Reason.RESIZED, f"{count} data volume(s) hold {size}")
    first = min(found, key=_ORDER.index)
    what = ", ".join(found[first])
    lead = {
        Reason.SHRINK_REFUSED: (
            f"spec.storage.size {size} is below what the volumes hold ({what}): volumes "
            "cannot shrink; they stay as they are. Set spec.storage.size back to at least that"
        ),
        Reason.NO_STORAGE_CLASS: f"cannot grow the volumes to {size}: {what}",
        Reason.STORAGE_CLASS_NOT_FOUND: f"cannot grow the volumes to {size}: {what}",
        Reason.STORAGE_CLASS_NOT_EXPANDABLE: (
            f"cannot grow the volumes to {size}: {what} (the StorageClass does not "
            "allow volume expansion)"
        ),
        Reason.RESIZE_FAILED: f"growing the volumes to {size} failed: {what}",
        Reason.RESIZING: f"growing the volumes to {size}: {what}",
        Reason.WAITING_FOR_BINDING: f"growing the volumes to {size} once bound: {what}",
        Reason.FILE_SYSTEM_RESIZE_PENDING: (
            f"the volumes hold {size}; the filesystem of {what} grows when its pod restarts "
            "(`kubectl brokergroup restart` rolls the group safely)"
        ),
    }[first]
    others = [r for r in found if r is not first]
    if others:
        lead += "; also " + "; ".join(f"{r}: {', '.join(found[r])}" for r in others)
    return Condition(False, first, lead)


def refused_condition(size: str, refusals: Mapping[str, str]) -> Condition:
    """The condition when the API server refused growing claims (claim → its answer),
    e.g. its resize admission for a class that does not allow expansion."""
    what = "; ".join(f"{name}: {why}" for name, why in sorted(refusals.items()))
    return Condition(
        False,
        Reason.EXPANSION_REFUSED,
        f"the API server refused growing the volumes to {size}: {what}",
    )


def volume_events(
    previous: Mapping[str, Any] | None, grown: Sequence[ClaimPatch], condition: Condition
) -> list[Event]:
    """The Events of this pass: the claims it grew (the patches the API server took); a
    refusal when it first appears or its message changes; the end of a resize. A
    previous condition the same as this one emits nothing again."""
    events = []
    if grown:
        what = ", ".join(f"{p.claim} {p.was} → {p.storage}" for p in grown)
        events.append(Event("VolumeExpansion", f"growing {what}"))
    before = previous or {}
    same = (before.get("reason"), before.get("message")) == (
        str(condition.reason),
        condition.message,
    )
    if condition.reason in REFUSALS and not same:
        events.append(Event(str(condition.reason), condition.message, "Warning"))
    grew = (Reason.RESIZING, Reason.FILE_SYSTEM_RESIZE_PENDING, Reason.WAITING_FOR_BINDING)
    if condition.status and before.get("reason") in grew:
        events.append(Event("VolumesResized", condition.message))
    return events
