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

An accessKey has one holder per namespace (users.access_key_holder, over a fresh list of the
namespace's BrokerGroupUsers): an object that does not hold its key is Ready=False
AccessKeyInUse with a Warning Event (posted when it becomes so, not at every resync), and
neither its Secret nor the controllers are written. Deleting it touches nothing. Deleting
the holder hands the key over: when another object claims it, that one is reconciled at
once (its PUT replaces the SecretKey and policies; no DELETE, so the key never goes missing
between the two), else the user is DELETEd and the namespace listed again, so an object
created while the DELETE was on its way is registered after it, not wiped by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from brokergroup_controller.client import ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_operator.controller_link import ensure_controller_link
from brokergroup_operator.runtime import PostEvent, Runtime, now_iso
from brokergroup_operator.users import (
    KEY_IN_USE,
    KeyClaim,
    UserPlan,
    UserSpecError,
    access_key_holder,
    key_claim,
    key_in_use_message,
    plan_user,
    ready_condition,
    user_secret,
)

log = logging.getLogger("brokergroup_operator")

#: The user is PUT again this often (idempotent): a controller whose users were wiped, or
#: a registration lost with its answer, gets it back.
USER_RESYNC_S = 60.0
RETRY_S = 5.0

EventsOf = Callable[[Mapping[str, Any]], PostEvent]
"""The Event poster of one BrokerGroupUser object (handlers.kopf_poster)."""


def no_events(_body: Mapping[str, Any]) -> PostEvent:
    return lambda _kind, _reason, _message: None


def _ready_reason(body: Mapping[str, Any]) -> str | None:
    conditions = (body.get("status") or {}).get("conditions") or ()
    return next((c.get("reason") for c in conditions if c.get("type") == "Ready"), None)


async def _namespace_users(rt: Runtime, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The namespace's BrokerGroupUsers as the API server has them now, `body` as given."""
    meta = body.get("metadata") or {}
    listed = await rt.kube.list_users(str(meta.get("namespace") or ""))
    return [u for u in listed if (u.get("metadata") or {}).get("name") != meta.get("name")] + [body]


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


async def reconcile_user(
    rt: Runtime, body: Mapping[str, Any], events: EventsOf = no_events
) -> None:
    """Secret, controller, status; raises kopf.TemporaryError to be retried."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return  # the delete handler's (remove_user)
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
    holder = access_key_holder(plan.access_key, await _namespace_users(rt, body))
    if holder is not None and holder.name != plan.name:
        message = key_in_use_message(plan.access_key, holder)
        if _ready_reason(body) != KEY_IN_USE:
            events(body)("Warning", KEY_IN_USE, message)
        log.warning("BrokerGroupUser %s/%s: %s", plan.namespace, plan.name, message)
        fields = {"accessKey": plan.access_key, "clusterName": plan.cluster_name}
        await _write_status(rt, body, False, KEY_IN_USE, message, **fields)
        return  # the timer looks again; the holder's deletion hands the key over at once
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


async def unregister(rt: Runtime, plan: UserPlan) -> None:
    """DELETE the user from the controllers."""
    await ensure_controller_link(rt)
    client = rt.controller(rt.settings.controller_addresses)
    await client.request("DELETE", plan.controller_path, idempotent=True)


def _successor(
    plan: UserPlan, users: list[Mapping[str, Any]]
) -> tuple[KeyClaim | None, Mapping[str, Any] | None]:
    """The object that holds the key once `plan.name` is gone, and its body."""
    holder = access_key_holder(plan.access_key, users, leaving=plan.name)
    if holder is None:
        return None, None
    body = next(u for u in users if (u.get("metadata") or {}).get("name") == holder.name)
    return holder, body


async def _hand_over(
    rt: Runtime, plan: UserPlan, successor: Mapping[str, Any], events: EventsOf
) -> None:
    """Register the next holder of the key now (its own timer would in a minute). A failure
    is its status's and its timer's: the deletion of the old holder does not wait for it."""
    name = (successor.get("metadata") or {}).get("name")
    message = (
        f"BrokerGroupUser {plan.name}, which held accessKey {plan.access_key}, is deleted: "
        f"{name} holds it now"
    )
    events(successor)("Normal", "AccessKeyTakenOver", message)
    log.info("BrokerGroupUser %s/%s: %s", plan.namespace, name, message)
    try:
        await reconcile_user(rt, successor, events)
    except kopf.TemporaryError as exc:
        log.warning("BrokerGroupUser %s/%s not registered yet: %s", plan.namespace, name, exc)


async def remove_user(
    rt: Runtime, body: Mapping[str, Any], elapsed_s: float, events: EventsOf = no_events
) -> str | None:
    """The delete handler's step: kopf.TemporaryError while the controllers are
    unreachable and the cleanup timeout has not passed; then what was left behind (the
    handler warns with it), None when the user is gone or held by another object."""
    name = (body.get("metadata") or {}).get("name")
    await rt.ensure_secrets()
    root = rt.secrets.broker_credential_root if rt.secrets else ""
    try:
        plan = plan_user(body, root or "unused: only the access key is read")
    except UserSpecError:
        return None  # it never named a valid user: nothing was registered
    mine = key_claim(body, even_if_deleted=True)
    users = await _namespace_users(rt, body)
    holder, successor = _successor(plan, users)
    if holder is not None and mine is not None and holder.order() < mine.order():
        return None  # a duplicate: the user is the holder's, left as it is
    try:
        if successor is None:
            await unregister(rt, plan)
            holder, successor = _successor(plan, await _namespace_users(rt, body))
    except (ControllerUnavailable, ControllerError) as exc:
        if elapsed_s < rt.settings.cleanup_timeout_s:
            raise kopf.TemporaryError(f"user {name}: {exc}", delay=RETRY_S) from exc
        message = f"the controllers may still hold user {name}: {exc}"
        log.warning("BrokerGroupUser %s", message)
        return message
    if successor is not None:
        await _hand_over(rt, plan, successor, events)
    return None
