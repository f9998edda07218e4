"""The group's lifecycle: its owned objects while it lives, what is cleaned
when it is deleted, and letting go of every group when the operator itself
is uninstalled.

- Owned objects (objects.owned_objects: Secret, ConfigMap, Services, PDB,
  NetworkPolicy, StatefulSet) are applied with server-side apply on a spec
  change, a scale step, a restart request, or every apply_interval_s.
- Deleted: pods first, then the group's BrokerIds in the controller, so no
  side keeps an orphan; for at most cleanup_timeout_s, then the finalizer is
  released anyway with what is left behind (ownership.cleanup_step decides).
  A group no broker of which ever registered (ownership.ever_registered) is
  released as soon as its pods are gone, controllers asked or not.
- Uninstalled (`helm uninstall`, the Deployment gone): every group of this
  operator loses its finalizer, with a Warning Event each.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from brokergroup_controller.client import ControllerUnavailable
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_operator import metrics
from brokergroup_operator.model import selector_string
from brokergroup_operator.networking import OBSOLETE_SERVICES
from brokergroup_operator.objects import owned_objects
from brokergroup_operator.ownership import (
    Release,
    Retry,
    cleanup_step,
    ever_registered,
    groups_to_let_go,
)
from brokergroup_operator.runtime import GroupMemory, Runtime
from brokergroup_operator.settings import SettingsError
from brokergroup_operator.spec import GroupContext

log = logging.getLogger("brokergroup_operator")

FINALIZER = "brokergroup.io/cleanup"


async def apply_owned(
    rt: Runtime,
    ctx: GroupContext,
    body: Mapping[str, Any],
    mem: GroupMemory,
    *,
    replicas: int,
    sts: Mapping[str, Any] | None,
) -> None:
    """Apply the owned objects when they may differ from what was applied last
    (or the StatefulSet `sts` is missing)."""
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    # A restart request is an annotation: the generation stays; so is a renewed
    # certificate (its digest).
    applied_key = (generation, replicas, ctx.restarted_at, ctx.tls_digest)
    if (
        sts is not None
        and mem.applied == applied_key
        and time.monotonic() - mem.applied_at <= rt.settings.apply_interval_s
    ):
        return
    for obj in owned_objects(ctx, replicas, sts):
        await rt.kube.apply(obj)
    for obsolete in OBSOLETE_SERVICES:
        await rt.kube.delete_service(ctx.namespace, obsolete.format(group=ctx.name))
    mem.applied = applied_key
    mem.applied_at = time.monotonic()


async def clean_up(rt: Runtime, body: Mapping[str, Any], elapsed_s: float) -> Release | Retry:
    """One try at cleaning a deleted group: pods, then its ids in the controller."""
    await rt.ensure_secrets()  # the admin token cleans the group's ids
    ctx = rt.context(body)
    ns, name = ctx.namespace, ctx.name
    pods_left, ids_cleaned, problem = 0, False, None
    try:
        await rt.kube.delete_stateful_set(ns, name)
        pods_left = len(await rt.kube.list_pods(ns, selector_string(name)))
    except Exception as exc:  # e.g. a name no label selector can hold
        problem = f"deleting the pods: {exc}"
    if not problem and not pods_left:
        try:
            removed = await rt.controller(ctx.addresses).clean_broker_data(
                ns, name, None, force=True
            )
            log.info("BrokerGroup %s/%s deleted; controller ids %s cleaned", ns, name, removed)
            ids_cleaned = True
        except ControllerError as exc:
            ids_cleaned = exc.code is ErrorCode.BROKER_SET_NOT_FOUND
            problem = str(exc)
        except (ControllerUnavailable, SettingsError) as exc:
            problem = f"controller unavailable: {exc}"
    registered = ever_registered(body.get("status") or {})
    if not ids_cleaned and not registered and not pods_left:
        log.info(
            "BrokerGroup %s/%s deleted; no broker of it ever registered with the "
            "controllers, nothing to clean there (%s)",
            ns,
            name,
            problem,
        )
    return cleanup_step(
        pods_left=pods_left,
        ids_cleaned=ids_cleaned,
        registered=registered,
        problem=problem,
        elapsed_s=elapsed_s,
        timeout_s=rt.settings.cleanup_timeout_s,
    )


def forget(rt: Runtime, namespace: str, name: str) -> None:
    """The group is gone: drop its memory and its metric series."""
    rt.groups.pop((namespace, name), None)
    metrics.forget_group(namespace, name)


async def let_go_if_uninstalled(rt: Runtime) -> list[str]:
    """When this operator's Deployment is gone (`helm uninstall`), remove its
    finalizer from its groups, with a Warning Event each. A restart or an
    upgrade keeps the Deployment, so nothing happens then."""
    namespace, _sep, name = rt.settings.deployment.partition("/")
    if not name or await rt.kube.deployment_exists(namespace, name) is not False:
        return []
    released = []
    for ns in rt.namespaces or (None,):
        groups = await rt.kube.list_groups(ns)
        for group in groups_to_let_go(groups, rt.settings.operator_id, FINALIZER):
            if await rt.kube.remove_group_finalizer(group, FINALIZER):
                meta = group.get("metadata") or {}
                released.append(f"{meta.get('namespace')}/{meta.get('name')}")
                await rt.kube.post_group_event(
                    group,
                    "Warning",
                    "OperatorUninstalled",
                    f"the operator {rt.settings.operator_id or rt.settings.deployment} was "
                    "uninstalled: this group runs on unmanaged (no failover labels, no "
                    "rolls); its finalizer is removed so deleting it does not wait for an "
                    "operator. Its BrokerIds stay in the controller if that still runs.",
                )
    log.warning("operator uninstalled: let go of %s", released)
    return released
