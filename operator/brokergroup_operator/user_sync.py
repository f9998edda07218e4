"""What the kopf handlers of BrokerGroupUser do (handlers.py registers them; users.py
decides, this shell writes).

- create/update/resume, and a timer (USER_RESYNC_S): the user's Secret applied, the user
  PUT to the release's controllers (`/v1/clusters/<cluster>/users/<accessKey>`,
  idempotent), status.conditions Ready says how that went. A spec the operator cannot
  realise is Ready=False InvalidSpec and is not retried until it changes; a controller
  that cannot be reached is retried (kopf.TemporaryError).
- delete (kopf's finalizer, held while the user may still be registered): the user
  DELETEd from the controllers, retried while they are unreachable for at most
  BROKERGROUP_CLEANUP_TIMEOUT_SECONDS, then released with a Warning (the Secret goes with
  its owner, the garbage collector's work).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from brokergroup_controller.client import ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_operator.controller_link import ensure_controller_link
from brokergroup_operator.runtime import Runtime, now_iso
from brokergroup_operator.users import (
    UserPlan,
    UserSpecError,
    plan_user,
    ready_condition,
    user_secret,
)

log = logging.getLogger("brokergroup_operator")

#: The user is PUT again this often (idempotent): a controller whose users were wiped, or
#: a registration lost with its answer, gets it back.
USER_RESYNC_S = 60.0
RETRY_S = 5.0


async def _write_status(
    rt: Runtime, body: Mapping[str, Any], ok: bool, reason: str, message: str, **fields: Any
) -> None:
    meta = body.get("metadata") or {}
    previous = dict(body.get("status") or {})
    generation = int(meta.get("generation") or 0)
    status = {
        **fields,
        "observedGeneration": generation,
        "conditions": [ready_condition(ok, reason, message, generation, previous, now_iso())],
    }
    await rt.kube.patch_user_status(str(meta["namespace"]), str(meta["name"]), status)


async def reconcile_user(rt: Runtime, body: Mapping[str, Any]) -> None:
    """Secret, controller, status; raises kopf.TemporaryError to be retried."""
    meta = body.get("metadata") or {}
    problem = await rt.ensure_secrets()
    if problem is not None or rt.secrets is None or not rt.secrets.broker_credential_root:
        why = problem or "the release has no broker credential root to derive SecretKeys from"
        await _write_status(rt, body, False, "SecretMissing", why)
        raise kopf.TemporaryError(why, delay=RETRY_S * 2)
    try:
        plan = plan_user(body, rt.secrets.broker_credential_root)
    except UserSpecError as exc:
        await _write_status(rt, body, False, "InvalidSpec", str(exc))
        return  # a new spec (an update) tries again
    await rt.kube.apply(user_secret(plan, str(meta.get("uid") or "")))
    fields = {
        "accessKey": plan.access_key,
        "clusterName": plan.cluster_name,
        "secretName": plan.secret_name,
    }
    try:
        await register(rt, plan)
    except (ControllerUnavailable, ControllerError) as exc:
        reason = "ControllerUnavailable" if isinstance(exc, ControllerUnavailable) else "Refused"
        message = f"the controllers did not take the user {plan.access_key}: {exc}"
        await _write_status(rt, body, False, reason, message, **fields)
        raise kopf.TemporaryError(message, delay=RETRY_S) from exc
    rights = len(plan.entries)
    await _write_status(
        rt,
        body,
        True,
        "Registered",
        f"user {plan.access_key} of cluster {plan.cluster_name} with {rights} policy entr"
        f"{'y' if rights == 1 else 'ies'}; its pair is in Secret {plan.secret_name}",
        **fields,
    )


async def register(rt: Runtime, plan: UserPlan) -> None:
    await ensure_controller_link(rt)
    client = rt.controller(rt.settings.controller_addresses)
    await client.request("PUT", plan.controller_path, body=plan.controller_body(), idempotent=True)


async def unregister(rt: Runtime, body: Mapping[str, Any]) -> bool:
    """DELETE the user; False when the object never named a valid user (nothing to do)."""
    root = rt.secrets.broker_credential_root if rt.secrets else ""
    try:
        plan = plan_user(body, root or "unused: only the access key is read")
    except UserSpecError:
        return False
    await ensure_controller_link(rt)
    client = rt.controller(rt.settings.controller_addresses)
    await client.request("DELETE", plan.controller_path, idempotent=True)
    return True


async def remove_user(rt: Runtime, body: Mapping[str, Any], elapsed_s: float) -> str | None:
    """The delete handler's step: kopf.TemporaryError while the controllers are
    unreachable and the cleanup timeout has not passed; then what was left behind (the
    handler warns with it), None when the user is gone."""
    name = (body.get("metadata") or {}).get("name")
    await rt.ensure_secrets()
    try:
        await unregister(rt, body)
    except (ControllerUnavailable, ControllerError) as exc:
        if elapsed_s < rt.settings.cleanup_timeout_s:
            raise kopf.TemporaryError(f"user {name}: {exc}", delay=RETRY_S) from exc
        message = f"the controllers may still hold user {name}: {exc}"
        log.warning("BrokerGroupUser %s", message)
        return message
    return None
