"""Pod events → "report this broker inactive" decisions (pure).

The controller would notice a dead broker after its heartbeat timeout; the
operator sees the pod go first and tells the controller at once
(`POST /v1/brokers/inactive`), so an election starts without that wait.

A report is made on a *transition*, once: the pod got a deletion timestamp
or vanished, its Ready condition went from True to False, or its broker
container terminated (a new restart count, or a terminated state).

Only the kubelet's word says the process ended (`process_gone`, which lets
a new master skip the wait for the old lease): a terminated container, or
pod phase Failed/Succeeded. A pod that vanished is no proof: a force delete
removes the object while the process may still run, and so does the
node-lifecycle controller for a node that stopped answering (issue 17 item
5). "Not ready" is a symptom, not an end (`symptom_only`): the controller
acts on it only once the broker's heartbeats stop too, so a readiness blip
costs no election (item 9). Every report names the pod's uid as the
broker's incarnation: the broker sends the same uid in its heartbeats, and
the controller ignores a report about an incarnation it no longer hears. A pod
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

    #: Set when the kubelet said the broker process ended (a terminated
    #: container, phase Failed/Succeeded). A pod that is being deleted, not
    #: ready, or gone from the API may still acknowledge until its lease ends.
    process_gone: bool = False
    #: The pod's uid: the broker incarnation the report is about.
    incarnation: str = ""
    #: Not ready: the controller waits for the heartbeats to stop too.
    symptom_only: bool = False


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
        # Reported again when the object is gone, but still not as ended:
        # only the kubelet's last word about the process says that.
        return ReportInactive(
            broker_id, seen.name, InactiveReason.POD_DELETED, seen.process_ended, seen.uid
        )
    if after.broker_terminated and not (before is not None and before.broker_terminated):
        return ReportInactive(
            broker_id, after.name, InactiveReason.CONTAINER_TERMINATED, True, after.uid
        )
    if (
        before is not None
        and after.restart_count > before.restart_count
        and not before.broker_terminated  # else already reported: this is the new process
    ):
        return ReportInactive(
            broker_id, after.name, InactiveReason.CONTAINER_TERMINATED, True, after.uid
        )
    if before is not None and before.ready and not after.ready:
        return ReportInactive(
            broker_id, after.name, InactiveReason.POD_NOT_READY, False, after.uid, True
        )
    return None
