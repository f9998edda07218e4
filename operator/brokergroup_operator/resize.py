"""Grow the group's data volumes when spec.storage.size is raised (volumes.py decides).

Each pass reads the group's data PVCs and, for the claims that would grow, whether
their StorageClass allows expansion; then it patches the claims the plan grows and
posts the Events. The StorageResized condition it returns goes into the status
(status_writer). A claim the API server refuses to grow (its resize admission, when
the StorageClass could not be read first) says so in the condition; the next pass
tries again, without a new Event while the answer stays the same.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from brokergroup_operator.conditions import STORAGE_RESIZED
from brokergroup_operator.model import selector_string
from brokergroup_operator.runtime import PostEvent, Runtime
from brokergroup_operator.spec import GroupContext
from brokergroup_operator.volumes import (
    DEFAULT_SIZE,
    ClaimFacts,
    ClaimPatch,
    QuantityError,
    claims_in_use,
    parse_quantity,
    plan_volumes,
    refused_condition,
    volume_events,
)

log = logging.getLogger("brokergroup_operator")


async def grow_volumes(
    rt: Runtime, ctx: GroupContext, previous: Mapping[str, Any], post: PostEvent
) -> tuple[str, str, str] | None:
    """One pass over the data claims: the StorageResized condition, or None when the
    claims could not be read (the previous condition stays)."""
    size = str((ctx.spec.get("storage") or {}).get("size") or DEFAULT_SIZE)
    pvcs = await rt.kube.list_claims(ctx.namespace, selector_string(ctx.name))
    if pvcs is None:
        log.warning("%s/%s: may not list PersistentVolumeClaims: volumes are not grown",
                    ctx.namespace, ctx.name)  # fmt: skip
        return None
    claims = claims_in_use(ctx.name, ctx.replicas, [ClaimFacts.from_pvc(p) for p in pvcs])
    try:
        wanted = parse_quantity(size)
        classes = {
            c.storage_class
            for c in claims
            if c.storage_class and parse_quantity(c.requested) < wanted
        }
        expandable = await rt.kube.storage_classes_expandable(classes) if classes else {}
        plan = plan_volumes(size, claims, expandable)
    except QuantityError as exc:  # spec.validate checks the size; a claim's cannot be bad
        log.warning("%s/%s: %s", ctx.namespace, ctx.name, exc)
        return None
    grown: list[ClaimPatch] = []
    refusals: dict[str, str] = {}
    for patch in plan.patches:
        refusal = await rt.kube.grow_claim(ctx.namespace, patch.claim, patch.storage)
        if refusal is None:
            grown.append(patch)
        else:
            refusals[patch.claim] = refusal
    condition = refused_condition(size, refusals) if refusals else plan.condition
    before = {c.get("type"): c for c in previous.get("conditions") or []}.get(STORAGE_RESIZED)
    for event in volume_events(before, grown, condition):
        post(event.type, event.reason, event.message)
    return condition.as_tuple()
