"""kopf registrations: each one parses its cause and calls the module that owns
the work, nothing more.

- create/update/resume of a BrokerGroup wake its pass; a daemon per group
  runs the passes (reconcile.reconcile_group) and waits between them
  (role_follower.wait_for_change: the controller's watch, the group's wake
  event, the resync timer);
- delete: lifecycle.clean_up, retried with kopf.TemporaryError until
  ownership.cleanup_step releases the finalizer;
- pod events: pod_reports.pod_changed (liveness reports, wake the group);
- login, startup and cleanup: the connection, the runtime in kopf's memo,
  letting go of every group when the operator is uninstalled.

`kopf run -m brokergroup_operator.handlers` works too: the startup handler
builds the runtime from the environment (docs/kubernetes.md).

The controller elects; the operator never does. Its only election-related
call is the admin ElectMaster of a switchover it plans or a user asks for
(switchover.py).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from brokergroup_operator import metrics
from brokergroup_operator.controller_link import ensure_controller_link
from brokergroup_operator.kube import Kube, load_configuration
from brokergroup_operator.lifecycle import FINALIZER, clean_up, forget, let_go_if_uninstalled
from brokergroup_operator.model import APP_NAME, LABEL_NAME
from brokergroup_operator.ownership import Release, owns
from brokergroup_operator.pod_reports import pod_changed
from brokergroup_operator.reconcile import reconcile_group
from brokergroup_operator.role_follower import wait_for_change
from brokergroup_operator.runtime import PostEvent, Runtime
from brokergroup_operator.settings import OperatorSettings
from brokergroup_operator.spec import API_GROUP
from brokergroup_operator.tls_material import ensure_controller_tls
from brokergroup_operator.user_sync import USER_RESYNC_S, reconcile_user, remove_user
from brokergroup_operator.users import USER_PLURAL

log = logging.getLogger("brokergroup_operator")

registry = kopf.OperatorRegistry()
GROUP_RESOURCE = (API_GROUP, "v1alpha1", "brokergroups")
USER_RESOURCE = (API_GROUP, "v1alpha1", USER_PLURAL)


def runtime_of(memo: Any) -> Runtime:
    rt = getattr(memo, "runtime", None)
    if not isinstance(rt, Runtime):
        raise kopf.PermanentError("operator started without its runtime in memo")
    return rt


def kopf_poster(body: Any) -> PostEvent:
    def post(kind: str, reason: str, message: str) -> None:
        kopf.event(body, type=kind, reason=reason, message=message)
        log.info("%s %s: %s", reason, (body.get("metadata") or {}).get("name"), message)

    return post


@kopf.on.login(registry=registry)
def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    """In-cluster ServiceAccount, else KUBECONFIG as it is now (kopf's own
    login_via_client reads the kubernetes package's import-time default)."""
    cfg = load_configuration()
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
        "authorization"
    )
    scheme, _sep, token = (header or "").partition(" ")
    if not token:
        scheme, token = "", scheme
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        username=cfg.username or None,
        password=cfg.password or None,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        trust_env=settings.networking.trust_env,
    )


@kopf.on.startup(registry=registry)
async def configure(settings: kopf.OperatorSettings, memo: Any, **_: Any) -> None:
    """Also makes plain `kopf run -m brokergroup_operator.handlers` work: without a
    runtime in memo (the `brokergroup operator` command puts one there), build it
    from the environment (docs/kubernetes.md)."""
    if not isinstance(getattr(memo, "runtime", None), Runtime):
        import os

        from brokergroup_operator.kube import load_kube_config

        env_settings = OperatorSettings.from_env(os.environ)
        memo.runtime = Runtime(settings=env_settings, kube=Kube(load_kube_config()))
    await runtime_of(memo).ensure_secrets()  # a problem is retried and reported per group
    # The controllers' certificate (tls.controllers.mode): they wait for it to start.
    await ensure_controller_tls(runtime_of(memo))
    await ensure_controller_link(runtime_of(memo))  # HTTPS to the controllers' API
    settings.persistence.finalizer = FINALIZER
    settings.peering.lifetime = int(getattr(memo, "peering_lifetime_s", 15))
    # Named namespaces need no watch of CRDs and namespaces (cluster-wide reads
    # the chart's namespaced RBAC does not grant): kopf serves the named ones.
    settings.scanning.disabled = not getattr(memo, "clusterwide", True)
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 60
    settings.networking.request_timeout = 30


@kopf.on.cleanup(registry=registry)
async def close(memo: Any, **_: Any) -> None:
    rt = getattr(memo, "runtime", None)
    if isinstance(rt, Runtime):
        try:
            await let_go_if_uninstalled(rt)
        finally:
            await rt.close()


def group_is_mine(spec: kopf.Spec, memo: Any, **_: Any) -> bool:
    """kopf filter: handlers, daemon and finalizer only for this operator's groups,
    so a group of another release is never touched (not even its finalizer)."""
    return owns(runtime_of(memo).settings.operator_id, spec)


@kopf.on.create(*GROUP_RESOURCE, registry=registry, when=group_is_mine)
@kopf.on.update(*GROUP_RESOURCE, registry=registry, when=group_is_mine)
@kopf.on.resume(*GROUP_RESOURCE, registry=registry, when=group_is_mine)
async def group_changed(name: str, namespace: str | None, memo: Any, **_: Any) -> None:
    """Wake the group's pass (it validates and reports a bad spec on the object)."""
    runtime_of(memo).memory((str(namespace), name)).wake.set()


@kopf.on.delete(*GROUP_RESOURCE, registry=registry, when=group_is_mine)
async def group_deleted(
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: Any,
    runtime: Any,
    **_: Any,
) -> None:
    """Pods first, then the group's ids in the controller (lifecycle.clean_up)."""
    ns = str(namespace)
    rt = runtime_of(memo)
    step = await clean_up(rt, body, runtime.total_seconds())
    if not isinstance(step, Release):
        raise kopf.TemporaryError(step.reason, delay=step.delay_s)
    if step.left_behind:
        kopf.warn(body, reason="CleanupIncomplete", message=step.left_behind)
        log.warning("BrokerGroup %s/%s: %s", ns, name, step.left_behind)
    forget(rt, ns, name)


@kopf.daemon(*GROUP_RESOURCE, registry=registry, cancellation_timeout=5.0, when=group_is_mine)
async def follow_controller(
    stopped: kopf.DaemonStopped,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: Any,
    **_: Any,
) -> None:
    """Wake on controller epoch changes, pod events, spec changes or the resync timer."""
    ns = str(namespace)
    rt = runtime_of(memo)
    mem = rt.memory((ns, name))
    post = kopf_poster(body)
    metrics.GROUPS_FOLLOWED.inc()
    try:
        while not stopped:
            mem.wake.clear()
            try:
                await reconcile_group(rt, body, post)
            except Exception as exc:  # a pass failing must not end the daemon
                metrics.RECONCILE_ERRORS.labels(ns, name).inc()
                log.warning("reconcile of %s/%s failed: %s", ns, name, exc)
            await wait_for_change(rt, body, mem, stopped)
    finally:
        # Stopped: deleted, no longer this operator's, or this replica stepped
        # down. Its gauges would otherwise stay at their last values for ever.
        metrics.GROUPS_FOLLOWED.dec()
        metrics.forget_group(ns, name)


@kopf.on.event("", "v1", "pods", labels={LABEL_NAME: APP_NAME}, registry=registry)
async def pod_event(
    event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    """Report a broker inactive the moment its pod goes; wake its group's pass."""
    await pod_changed(runtime_of(memo), str(namespace), str(event.get("type")), body)


# ------------------------------------------------------------ BrokerGroupUser (user_sync.py)


@kopf.on.create(*USER_RESOURCE, registry=registry)
@kopf.on.update(*USER_RESOURCE, registry=registry)
@kopf.on.resume(*USER_RESOURCE, registry=registry)
async def user_changed(body: kopf.Body, memo: Any, **_: Any) -> None:
    """Secret, controller registration, status (user_sync.reconcile_user)."""
    await reconcile_user(runtime_of(memo), body, kopf_poster)


@kopf.timer(*USER_RESOURCE, registry=registry, interval=USER_RESYNC_S, initial_delay=USER_RESYNC_S)
async def user_resync(body: kopf.Body, memo: Any, **_: Any) -> None:
    """The same again, now and then (an idempotent PUT)."""
    await reconcile_user(runtime_of(memo), body, kopf_poster)


@kopf.on.delete(*USER_RESOURCE, registry=registry)
async def user_deleted(body: kopf.Body, memo: Any, runtime: Any, **_: Any) -> None:
    """The user removed from the controllers (its Secret goes with its owner)."""
    left = await remove_user(runtime_of(memo), body, runtime.total_seconds(), kopf_poster)
    if left is not None:
        kopf.warn(body, reason="CleanupIncomplete", message=left)
