"""Pod events → "report this broker inactive" decisions (pure).

The controller would notice a dead broker after its heartbeat timeout; the
operator sees the pod go first and tells the controller at once
(`POST /v1/brokers/inactive`), so an election starts without that wait.

A report is made on a *transition*, once: the pod got a deletion timestamp
or vanished, its Ready condition went from True to False, or its broker
container terminated (a new restart count, or a terminated state). A pod
that was never labelled with a BrokerId is not reported: nothing is known
about which broker it held. A starting pod that is not yet ready is not a
transition and is not reported (it would flap a broker that is registering).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from brokergroup_operator.model import PodFacts


class InactiveReason(StrEnum):
    POD_DELETED = "pod deleted"
    POD_NOT_READY = "pod not ready"
    CONTAINER_TERMINATED = "broker container terminated"


@dataclass(frozen=True)
class ReportInactive:
    broker_id: int
    pod: str
    reason: InactiveReason

    @property
    def text(self) -> str:
        return f"{self.reason} ({self.pod})"

    #: Set when the broker process certainly ended: its container terminated
    #: or its pod no longer exists. A pod that is only being deleted or not
    #: ready may still acknowledge writes until its lease runs out.
    process_gone: bool = False


def liveness_decision(before: PodFacts | None, after: PodFacts | None) -> ReportInactive | None:
    """Compare the last seen state of a pod with the new one (None: absent)."""
    seen = after if after is not None else before
    if seen is None:
        return None
    broker_id = seen.labelled_broker_id
    if broker_id is None and before is not None:
        broker_id = before.labelled_broker_id
    if broker_id is None:
        return None
    if before is not None and after is not None and before.uid and after.uid != before.uid:
        # A new incarnation under the same name: judge it on its own.
        before = None
    was_deleting = before is not None and before.deleting
    if after is None or after.deleting:
        if was_deleting and after is not None:
            return None
        # Reported again when the object is gone: only then is the process
        # certainly ended, which ends a new master's wait for its lease.
        return ReportInactive(
            broker_id, seen.name, InactiveReason.POD_DELETED, process_gone=after is None
        )
    if after.broker_terminated and not (before is not None and before.broker_terminated):
        return ReportInactive(
            broker_id, after.name, InactiveReason.CONTAINER_TERMINATED, process_gone=True
        )
    if (
        before is not None
        and after.restart_count > before.restart_count
        and not before.broker_terminated  # else already reported: this is the new process
    ):
        return ReportInactive(
            broker_id, after.name, InactiveReason.CONTAINER_TERMINATED, process_gone=True
        )
    if before is not None and before.ready and not after.ready:
        return ReportInactive(broker_id, after.name, InactiveReason.POD_NOT_READY)
    return None
