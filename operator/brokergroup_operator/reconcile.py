"""One reconcile pass per BrokerGroup: the order of the parts, nothing else.

Read the pods, the StatefulSet and the controller's view once; then
1. role labels (role_follower): the client Service follows the master first;
2. at most one disruptive step: a user's switchover (switchover), else a
   scale or rolling-update step (rollout);
3. the owned objects when the spec changed (lifecycle);
   (before them, spec.tls's certificates when due: tls_material);
4. the data volumes grown to spec.storage.size (resize);
5. status and Events (status_writer).
A group that cannot run as specified skips 1-3 and says why on its status.
The pass is idempotent, so a kopf retry or a second operator replica taking
over does no harm; passes of one group never overlap.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from brokergroup_controller.client import ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_operator import metrics
from brokergroup_operator.controller_link import ensure_controller_link
from brokergroup_operator.lifecycle import apply_owned
from brokergroup_operator.model import SWITCHOVER_ANNOTATION, PodFacts, selector_string
from brokergroup_operator.resize import grow_volumes
from brokergroup_operator.role_follower import follow_roles, master_found
from brokergroup_operator.rollout import take_step
from brokergroup_operator.runtime import PostEvent, Runtime, read_view
from brokergroup_operator.spec import GroupContext, SpecError
from brokergroup_operator.status import known_broker_ids
from brokergroup_operator.status_writer import why_blocked, write_blocked, write_status
from brokergroup_operator.stock_users_sync import sync_for_pass
from brokergroup_operator.switchover import user_switchover
from brokergroup_operator.tls_material import ensure_controller_tls, group_tls

log = logging.getLogger("brokergroup_operator")


async def reconcile_group(rt: Runtime, body: Mapping[str, Any], post: PostEvent) -> None:
    """One pass; passes of one group never overlap (one disruptive step at a time)."""
    await rt.ensure_secrets()
    await ensure_controller_tls(rt)  # release-wide, when due
    # HTTPS to the controllers' API when the release serves it (a problem is logged; the
    # pass then fails at its first controller call and the next one retries).
    await ensure_controller_link(rt)
    ctx = rt.context(body)
    async with rt.memory((ctx.namespace, ctx.name)).lock:
        await _reconcile(rt, ctx, body, post)


async def _reconcile(
    rt: Runtime, ctx: GroupContext, body: Mapping[str, Any], post: PostEvent
) -> None:
    key = (ctx.namespace, ctx.name)
    mem = rt.memory(key)
    mem.addresses = ctx.addresses
    metrics.RECONCILES.labels(*key).inc()
    started = time.monotonic()
    previous: dict[str, Any] = dict(body.get("status") or {})
    sts = await rt.kube.read_stateful_set(ctx.namespace, ctx.name)
    raw_pods = await rt.kube.list_pods(ctx.namespace, selector_string(ctx.name))
    pods = tuple(PodFacts.from_pod(p) for p in raw_pods)
    blocked = why_blocked(rt, ctx)
    if blocked is not None:
        # Say so on the object (Ready=False with the reason, one Event per new
        # reason) instead of leaving pods silently Pending; the next spec change
        # or resync tries again.
        await write_blocked(rt, ctx, body, pods, sts, previous, blocked, post)
        return
    try:
        # spec.tls: the certificates made or renewed when due, their digest in the
        # context, so the StatefulSet applied below rolls the pods onto a renewed one.
        ctx = await group_tls(rt, ctx, body, raw_pods, mem, post)
    except SpecError as exc:
        await write_blocked(rt, ctx, body, pods, sts, previous, ("TlsUnavailable", str(exc)), post)
        return
    controller = rt.controller(ctx.addresses)
    try:
        view = await read_view(controller, ctx)
    except (ControllerUnavailable, ControllerError) as exc:
        log.warning("controller unreachable for %s/%s: %s", *key, exc)
        view = None

    if view is not None:
        await follow_roles(rt, ctx, mem, pods, view)
        # spec.rocketmq.aclEnabled: the stock brokers' users follow the controllers'.
        live = [b.address for b in view.brokers if b.alive and b.address]
        await sync_for_pass(ctx, controller, live, time.monotonic(), mem.stock_users)

    acted = False
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    wanted = annotations.get(SWITCHOVER_ANNOTATION)
    if wanted is not None and view is not None:
        acted = await user_switchover(rt, ctx, controller, view, str(wanted), post)
    step = await take_step(
        rt, ctx, controller, mem, view, pods, sts, known_broker_ids(previous), post, acted=acted
    )

    await apply_owned(rt, ctx, body, mem, replicas=step.replicas, sts=sts)
    storage = await grow_volumes(rt, ctx, previous, post)

    await write_status(
        rt, ctx, body, mem, pods, sts, previous, view, step.waiting, post, storage=storage
    )
    master_found(mem, view)
    metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
