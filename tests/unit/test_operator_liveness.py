"""Pod events → "report broker inactive" (DESIGN.md §5 Pod liveness).

A report is made once per transition (deleted, gone, Ready True→False, broker
container terminated or restarted); only "gone" and "terminated" say the
process certainly ended, only "terminated" (the kubelet's word: a terminated
container, or phase Failed/Succeeded) says the process certainly ended —
a vanished pod is no proof (issue 17 item 5: a force delete, or a node that
stopped answering); every report names the pod's incarnation (its uid) and
"not ready" is a symptom only (item 9), only for pods labelled with a BrokerId,
never for a starting pod that is not ready yet; replaying the same event
(kopf re-delivers, two replicas) reports nothing the second time."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_operator.liveness import InactiveReason, ReportInactive, liveness_decision
from brokergroup_operator.model import LABEL_BROKER_ID, PodFacts

BASE = PodFacts("bg-1", 1, "uid-a", "10.0.0.5", ready=True, labels={LABEL_BROKER_ID: "2"})


def report(reason: InactiveReason, *, gone: bool = False, uid: str = "uid-a") -> ReportInactive:
    return ReportInactive(
        2,
        "bg-1",
        reason,
        process_gone=gone,
        incarnation=uid,
        symptom_only=reason is InactiveReason.POD_NOT_READY,
    )


def test_each_transition_reports_once() -> None:
    deleting = replace(BASE, deleting=True)
    assert liveness_decision(BASE, deleting) == report(InactiveReason.POD_DELETED)
    assert liveness_decision(deleting, deleting) is None
    # Gone after deleting: reported again; the kubelet never said it ended.
    assert liveness_decision(deleting, None) == report(InactiveReason.POD_DELETED)
    assert liveness_decision(BASE, None) == report(InactiveReason.POD_DELETED)
    not_ready = replace(BASE, ready=False)
    assert liveness_decision(BASE, not_ready) == report(InactiveReason.POD_NOT_READY)
    assert liveness_decision(not_ready, not_ready) is None
    crashed = replace(BASE, broker_terminated=True, ready=False)
    assert liveness_decision(BASE, crashed) == report(
        InactiveReason.CONTAINER_TERMINATED, gone=True
    )
    # The kubelet shows the terminated state, then the restarted container:
    # only the first is a report (the second would mark the new process dead).
    back = replace(BASE, restart_count=1, ready=False)
    assert liveness_decision(crashed, back) is None
    restarted = replace(BASE, restart_count=1)  # crash and restart between two events
    assert liveness_decision(BASE, restarted) == report(
        InactiveReason.CONTAINER_TERMINATED, gone=True
    )


def test_a_vanished_pod_is_no_proof_that_its_process_ended() -> None:
    """Issue 17 item 5 (§3.3 "Fencing"): a force delete, or a pod on a node
    that stopped answering, vanishes while its process may still run: only
    the kubelet's own word (a terminated container, phase Failed/Succeeded)
    waives the new master's wait for the old lease."""
    force_deleted = liveness_decision(BASE, None)
    assert force_deleted is not None and not force_deleted.process_gone
    terminated_then_gone = replace(BASE, broker_terminated=True, ready=False)
    assert liveness_decision(terminated_then_gone, None) == report(
        InactiveReason.POD_DELETED, gone=True
    )
    for phase in ("Failed", "Succeeded"):
        ended = replace(BASE, phase=phase, ready=False)
        assert liveness_decision(ended, None) == report(InactiveReason.POD_DELETED, gone=True)
    running = replace(BASE, phase="Running", deleting=True)
    assert liveness_decision(running, None) == report(InactiveReason.POD_DELETED)


def test_reports_name_the_incarnation_they_are_about() -> None:
    """The old pod's report names the old uid, so a controller that already
    hears the new pod's broker can tell it is stale."""
    old = replace(BASE, uid="uid-old")
    assert liveness_decision(old, None) == report(InactiveReason.POD_DELETED, uid="uid-old")


def test_unlabelled_and_starting_pods_are_not_reported() -> None:
    fresh = replace(BASE, uid="uid-b", ready=False, labels={})
    assert liveness_decision(None, fresh) is None
    assert liveness_decision(BASE, fresh) is None  # new incarnation, not ready yet: no transition
    assert liveness_decision(None, replace(BASE, ready=False)) is None
    assert liveness_decision(None, None) is None


@settings(max_examples=300)
@given(
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.integers(0, 3),
)
def test_replaying_an_event_reports_nothing(
    r1: bool, d1: bool, t1: bool, c1: int, labelled: bool, r2: bool, d2: bool, t2: bool, c2: int
) -> None:
    labels = {LABEL_BROKER_ID: "3"} if labelled else {}
    before = PodFacts("bg-0", 0, "u", "1.2.3.4", r1, d1, "", t1, c1, labels)
    after = PodFacts("bg-0", 0, "u", "1.2.3.4", r2, d2, "", t2, max(c1, c2), labels)
    decision = liveness_decision(before, after)
    if decision is not None:
        assert labelled and decision.broker_id == 3
    assert liveness_decision(after, after) is None
    if decision is not None:
        assert decision.incarnation == "u"
        assert decision.symptom_only == (decision.reason is InactiveReason.POD_NOT_READY)
