"""Volumes that grow (issue 33 item 4): the pure decision over a group's data PVCs.

Raising spec.storage.size grows each bound claim in use whose StorageClass has
allowVolumeExpansion: true (patches in ordinal order, to the spec's size); a class that
does not allow it, a missing class, no class, or a size below the claims' is refused
with the reason on StorageResized and a Warning Event, once; the claims' own conditions
(Resizing, FileSystemResizePending, ControllerResizeError) say how far a resize is. The
StatefulSet keeps its live claim template (immutable), and the status carries the
condition, keeping the previous one when a pass could not read the claims. Over random
claims: a patch never shrinks a claim and only grows a bound one its class allows.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_operator.conditions import STORAGE_RESIZED
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.spec import GroupContext, SpecError
from brokergroup_operator.status import Event, StatusInput, build_status
from brokergroup_operator.volumes import (
    ClaimFacts,
    ClaimPatch,
    Condition,
    QuantityError,
    Reason,
    claims_in_use,
    parse_quantity,
    plan_volumes,
    refused_condition,
    volume_events,
)
from brokergroup_operator.workload import stateful_set


def bound(i: int, requested: str, capacity: str | None = None, **kw: Any) -> ClaimFacts:
    return ClaimFacts(
        name=f"data-bg-{i}",
        phase=kw.pop("phase", "Bound"),
        storage_class=kw.pop("storage_class", "fast"),
        requested=requested,
        capacity=capacity if capacity is not None else requested,
        **kw,
    )


def three(requested: str = "1Gi", **kw: Any) -> list[ClaimFacts]:
    return [bound(i, requested, **kw) for i in range(3)]


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("10Gi", 10 * 2**30),
        ("1536Mi", 1536 * 2**20),
        ("1.5Gi", 3 * 2**29),
        ("500M", 500 * 10**6),
        ("2k", 2000),
        ("1073741824", 2**30),
        ("1e9", 10**9),
        ("1E3", 1000),
        ("100m", Decimal("0.1")),
    ],
)
def test_quantities_read_as_kubernetes_does(text: str, number: int | Decimal) -> None:
    assert parse_quantity(text) == number


@pytest.mark.parametrize("text", ["", "Gi", "10GB", "ten", "1.2.3Gi", "10 Gi"])
def test_a_bad_quantity_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_raising_the_size_grows_every_bound_claim_of_an_expandable_class() -> None:
    plan = plan_volumes("2Gi", three(), {"fast": True})
    assert plan.patches == tuple(ClaimPatch(f"data-bg-{i}", "2Gi", "1Gi") for i in range(3))
    assert plan.condition == Condition(
        False,
        Reason.RESIZING,
        "growing the volumes to 2Gi: data-bg-0 1Gi → 2Gi, data-bg-1 1Gi → 2Gi, data-bg-2 1Gi → 2Gi",
    )
    events = volume_events(None, plan.patches, plan.condition)
    assert events == [
        Event(
            "VolumeExpansion",
            "growing data-bg-0 1Gi → 2Gi, data-bg-1 1Gi → 2Gi, data-bg-2 1Gi → 2Gi",
        )
    ]


def test_the_same_size_in_other_units_is_no_change() -> None:
    plan = plan_volumes("1024Mi", three("1Gi"), {})
    assert plan.patches == ()
    assert plan.condition == Condition(True, Reason.RESIZED, "3 data volume(s) hold 1024Mi")


def test_a_class_without_volume_expansion_is_refused_once() -> None:
    plan = plan_volumes("2Gi", three(), {"fast": False})
    assert plan.patches == ()
    message = (
        "cannot grow the volumes to 2Gi: data-bg-0's 'fast' has no allowVolumeExpansion: "
        "true, data-bg-1's 'fast' has no allowVolumeExpansion: true, data-bg-2's 'fast' has "
        "no allowVolumeExpansion: true (the StorageClass does not allow volume expansion)"
    )
    assert plan.condition == Condition(False, Reason.STORAGE_CLASS_NOT_EXPANDABLE, message)
    assert volume_events(None, (), plan.condition) == [
        Event("StorageClassNotExpandable", message, "Warning")
    ]
    previous = {"type": STORAGE_RESIZED, "status": "False", "reason": "StorageClassNotExpandable"}
    assert volume_events({**previous, "message": message}, (), plan.condition) == []


def test_a_missing_class_and_no_class_are_refused() -> None:
    missing = plan_volumes("2Gi", three(), {})
    assert (missing.patches, missing.condition.reason) == ((), Reason.STORAGE_CLASS_NOT_FOUND)
    assert "data-bg-0's 'fast' does not exist" in missing.condition.message
    none = plan_volumes("2Gi", three(storage_class=None), {})
    assert (none.patches, none.condition.reason) == ((), Reason.NO_STORAGE_CLASS)
    assert none.condition.message.startswith("cannot grow the volumes to 2Gi: data-bg-0 has no")


def test_a_class_that_cannot_be_read_is_left_to_the_api_server() -> None:
    plan = plan_volumes("2Gi", three(), {"fast": None})
    assert [p.claim for p in plan.patches] == ["data-bg-0", "data-bg-1", "data-bg-2"]
    refused = refused_condition("2Gi", {"data-bg-1": "403 only dynamically provisioned pvc…"})
    assert refused == Condition(
        False,
        Reason.EXPANSION_REFUSED,
        "the API server refused growing the volumes to 2Gi: data-bg-1: 403 only "
        "dynamically provisioned pvc…",
    )
    grown = plan.patches[::2]  # the other two were taken
    assert [e.reason for e in volume_events(None, grown, refused)] == [
        "VolumeExpansion",
        "ExpansionRefused",
    ]


def test_a_lower_size_is_refused_and_nothing_shrinks() -> None:
    claims = [bound(0, "2Gi"), bound(1, "2Gi"), bound(2, "1Gi")]
    plan = plan_volumes("1Gi", claims, {"fast": True})
    assert plan.patches == ()
    assert plan.condition == Condition(
        False,
        Reason.SHRINK_REFUSED,
        "spec.storage.size 1Gi is below what the volumes hold (data-bg-0 requests 2Gi, "
        "data-bg-1 requests 2Gi): volumes cannot shrink; they stay as they are. Set "
        "spec.storage.size back to at least that",
    )
    assert volume_events(None, (), plan.condition)[0].type == "Warning"


def test_a_size_between_grows_the_smaller_and_refuses_the_larger() -> None:
    claims = [bound(0, "3Gi"), bound(1, "1Gi")]
    plan = plan_volumes("2Gi", claims, {"fast": True})
    assert plan.patches == (ClaimPatch("data-bg-1", "2Gi", "1Gi"),)
    assert plan.condition.reason is Reason.SHRINK_REFUSED
    assert plan.condition.message.endswith("; also Resizing: data-bg-1 1Gi → 2Gi")


def test_an_unbound_claim_waits_and_a_new_one_is_made_at_its_size() -> None:
    pending_small = bound(2, "1Gi", phase="Pending")
    pending_small = ClaimFacts(**{**pending_small.__dict__, "capacity": None})
    plan = plan_volumes("2Gi", [bound(0, "2Gi"), pending_small], {"fast": True})
    assert plan.patches == ()
    assert plan.condition == Condition(
        False,
        Reason.WAITING_FOR_BINDING,
        "growing the volumes to 2Gi once bound: data-bg-2 is Pending",
    )
    fresh = ClaimFacts("data-bg-0", "Pending", "fast", "2Gi")
    assert plan_volumes("2Gi", [fresh], {}).condition.status is True


def test_the_claims_conditions_say_how_far_the_resize_is() -> None:
    resizing = bound(0, "2Gi", "1Gi", conditions=(("Resizing", ""),))
    pending_fs = bound(1, "2Gi", "1Gi", conditions=(("FileSystemResizePending", "wait"),))
    done = bound(2, "2Gi", "2Gi")
    plan = plan_volumes("2Gi", [resizing, pending_fs, done], {"fast": True})
    assert plan.patches == ()
    assert plan.condition == Condition(
        False,
        Reason.RESIZING,
        "growing the volumes to 2Gi: data-bg-0 1Gi → 2Gi; also FileSystemResizePending: data-bg-1",
    )
    only_fs = plan_volumes("2Gi", [pending_fs, done], {}).condition
    assert only_fs.reason is Reason.FILE_SYSTEM_RESIZE_PENDING
    assert "`kubectl brokergroup restart`" in only_fs.message
    failed = bound(0, "2Gi", "1Gi", conditions=(("ControllerResizeError", "quota exceeded"),))
    assert plan_volumes("2Gi", [failed], {}).condition == Condition(
        False, Reason.RESIZE_FAILED, "growing the volumes to 2Gi failed: data-bg-0: quota exceeded"
    )
    infeasible = bound(0, "2Gi", "1Gi", allocated_status="ControllerResizeInfeasible")
    assert plan_volumes("2Gi", [infeasible], {}).condition.reason is Reason.RESIZE_FAILED


def test_the_end_of_a_resize_is_one_event() -> None:
    done = plan_volumes("2Gi", three("2Gi"), {}).condition
    resizing = {"type": STORAGE_RESIZED, "status": "False", "reason": "Resizing", "message": "…"}
    assert volume_events(resizing, (), done) == [
        Event("VolumesResized", "3 data volume(s) hold 2Gi")
    ]
    settled = {"type": STORAGE_RESIZED, "status": "True", "reason": "Resized", "message": "…"}
    assert volume_events(settled, (), done) == []
    assert volume_events(None, (), done) == []  # a new group grew nothing


def test_claims_in_use_are_the_groups_ordinals_below_replicas() -> None:
    pvcs = [
        {"metadata": {"name": n}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
        for n in ("data-bg-2", "data-bg-0", "data-bg-3", "data-bgx-1", "other-bg-1")
    ]
    claims = claims_in_use("bg", 3, [ClaimFacts.from_pvc(p) for p in pvcs])
    assert [c.name for c in claims] == ["data-bg-0", "data-bg-2"]


def test_claim_facts_from_a_pvc() -> None:
    pvc = {
        "metadata": {"name": "data-bg-0"},
        "spec": {"storageClassName": "fast", "resources": {"requests": {"storage": "2Gi"}}},
        "status": {
            "phase": "Bound",
            "capacity": {"storage": "1Gi"},
            "conditions": [
                {"type": "Resizing", "status": "False"},
                {"type": "FileSystemResizePending", "status": "True", "message": "restart"},
            ],
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
        },
    }
    assert ClaimFacts.from_pvc(pvc) == ClaimFacts(
        "data-bg-0",
        "Bound",
        "fast",
        "2Gi",
        "1Gi",
        (("FileSystemResizePending", "restart"),),
        "NodeResizePending",
    )


SECRETS = OperatorSecrets("admin", "root-" * 8, "ha-" * 11)


def _ctx(**storage: Any) -> GroupContext:
    return GroupContext("bg", "ns", "u", {"storage": storage}, "img", ("c:1",), SECRETS)


def test_the_statefulset_keeps_its_live_claim_template() -> None:
    """Its volumeClaimTemplates are immutable: a raised size is applied to the claims,
    never to the template the StatefulSet was created with."""
    live = stateful_set(_ctx(size="1Gi", storageClassName="fast"), 3)
    grown = stateful_set(_ctx(size="2Gi", storageClassName="fast"), 3, live)
    assert grown["spec"]["volumeClaimTemplates"] == live["spec"]["volumeClaimTemplates"]
    (claim,) = live["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    new = stateful_set(_ctx(size="2Gi"), 3)["spec"]["volumeClaimTemplates"][0]["spec"]
    assert new == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}}


@pytest.mark.parametrize("size", ["0", "ten", "10GB", ""])
def test_a_bad_size_is_a_spec_error(size: str) -> None:
    ctx = GroupContext("bg", "ns", "u", {"storage": {"size": size}}, "img", ("c:1",))
    with pytest.raises(SpecError, match=r"spec\.storage\.size must be a positive quantity"):
        ctx.validate()


def _status(storage: tuple[str, str, str] | None, previous: dict[str, Any]) -> list[dict[str, Any]]:
    status, _events = build_status(
        StatusInput(
            group="bg",
            generation=2,
            replicas=3,
            min_in_sync_replicas=1,
            update_revision="r1",
            current_revision="r1",
            pods=(),
            view=None,
            previous=previous,
            now_iso="2025-01-01T00:00:10Z",
            now_ms=0,
            storage=storage,
        )
    )
    return [c for c in status["conditions"] if c["type"] == STORAGE_RESIZED]


def test_the_status_carries_storage_resized_and_keeps_it_when_not_read() -> None:
    resizing = ("False", "Resizing", "growing the volumes to 2Gi: data-bg-0 1Gi → 2Gi")
    (first,) = _status(resizing, {})
    assert (first["status"], first["reason"], first["message"]) == resizing
    assert first["lastTransitionTime"] == "2025-01-01T00:00:10Z"
    previous = {"conditions": [{**first, "lastTransitionTime": "2025-01-01T00:00:00Z"}]}
    (kept,) = _status(None, previous)
    assert kept == previous["conditions"][0]
    (same,) = _status(("False", "Resizing", "growing: data-bg-1"), previous)
    assert same["lastTransitionTime"] == "2025-01-01T00:00:00Z"  # the status held
    assert _status(None, {}) == []


QUANTITIES = st.sampled_from(["512Mi", "1Gi", "1536Mi", "2Gi", "2048Mi", "3Gi", "4G"])


@st.composite
def claim_sets(draw: st.DrawFn) -> list[ClaimFacts]:
    claims = []
    for i in range(draw(st.integers(0, 4))):
        requested = draw(QUANTITIES)
        claims.append(
            ClaimFacts(
                f"data-bg-{i}",
                draw(st.sampled_from(["Bound", "Pending"])),
                draw(st.sampled_from(["fast", "slow", "gone", None])),
                requested,
                draw(st.one_of(st.none(), QUANTITIES)),
                draw(
                    st.sampled_from([(), (("Resizing", ""),), (("FileSystemResizePending", ""),)])
                ),
            )
        )
    return claims


@settings(max_examples=300, deadline=None)
@given(claim_sets(), QUANTITIES, st.sampled_from([True, False, None]))
def test_a_patch_only_grows_a_bound_claim_its_class_allows(
    claims: list[ClaimFacts], size: str, fast: bool | None
) -> None:
    expandable = {"fast": fast, "slow": False}
    plan = plan_volumes(size, claims, expandable)
    by_name = {c.name: c for c in claims}
    for patch in plan.patches:
        claim = by_name[patch.claim]
        assert parse_quantity(patch.storage) > parse_quantity(claim.requested)
        assert claim.phase == "Bound"
        assert claim.storage_class == "fast" and fast is not False
    if not plan.condition.status:
        assert plan.condition.message
    else:
        assert plan.patches == ()
        assert all(parse_quantity(c.requested) == parse_quantity(size) for c in claims)
