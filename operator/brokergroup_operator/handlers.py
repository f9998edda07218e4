"""kopf handlers: thin shells around the pure planners.

One reconcile pass per BrokerGroup (`reconcile_group`): read the pods, the
StatefulSet and the controller's view once; patch labels (the client
Service follows the master); take at most one disruptive step (a user's
switchover, a scale step, or a rolling-update step); re-apply owned objects
when the spec changed; write status and Events. The pass is idempotent, so a
kopf retry or a second operator replica taking over does no harm.

A switchover, whatever its answer, is the pass's disruptive step (one that
got no answer may still be committed). A pod deletion or a StatefulSet
shrink is taken only after re-reading the controller: masterEpoch unchanged
and the same plan from the fresh view (planner.confirm_step).

Who runs a pass:
- a daemon per BrokerGroup, woken by the controller's watch (long-poll on
  the epochs), by pod events of the group, by spec changes, and at least
  every `resync_s`;
- pod events also feed the liveness decision (report a broker inactive at
  once when its pod is deleted, not ready or its container terminated).

The controller elects; the operator never does. Its only election-related
call is the admin ElectMaster of a switchover it plans or a user asks for.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import kopf

from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_operator import metrics
from brokergroup_operator.conditions import READY
from brokergroup_operator.kube import Kube, load_configuration
from brokergroup_operator.labels import label_patches
from brokergroup_operator.liveness import liveness_decision
from brokergroup_operator.model import (
    APP_NAME,
    LABEL_GROUP,
    LABEL_NAME,
    LABEL_ROLE,
    SWITCHOVER_ANNOTATION,
    GroupView,
    PodFacts,
    selector_string,
)
from brokergroup_operator.ownership import Release, cleanup_step, groups_to_let_go, owns
from brokergroup_operator.planner import (
    CleanBrokerIds,
    RestartPod,
    RollStep,
    ScaleStep,
    ScaleTo,
    Switchover,
    Wait,
    check_switchover,
    confirm_step,
    plan_roll,
    plan_scale,
)
from brokergroup_operator.release_secret import OperatorSecrets, ReleaseSecretError
from brokergroup_operator.resources import (
    API_GROUP,
    OBSOLETE_SERVICES,
    RESTARTED_AT_ANNOTATION,
    GroupContext,
    SpecError,
    owned_objects,
)
from brokergroup_operator.settings import OperatorSettings, SettingsError
from brokergroup_operator.status import StatusInput, build_status, known_broker_ids

log = logging.getLogger("brokergroup_operator")

registry = kopf.OperatorRegistry()
GROUP_RESOURCE = (API_GROUP, "v1alpha1", "brokergroups")
FINALIZER = "brokergroup.io/cleanup"

PostEvent = Callable[[str, str, str], None]
GroupKey = tuple[str, str]


@dataclass
class GroupMemory:
    """What the operator remembers about one group between passes (not state
    anyone depends on: a fresh operator rebuilds it from the cluster)."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    view: GroupView | None = None
    master_lost_at_ms: int | None = None
    applied: tuple[int, int, str] | None = None
    addresses: tuple[str, ...] = ()
    applied_at: float = 0.0


@dataclass
class Runtime:
    settings: OperatorSettings
    kube: Kube
    clients: dict[tuple[tuple[str, ...], str | None], ControllerClient] = field(
        default_factory=dict
    )
    pods: dict[tuple[str, str], PodFacts] = field(default_factory=dict)
    groups: dict[GroupKey, GroupMemory] = field(default_factory=dict)
    namespaces: tuple[str, ...] = ()
    """The namespaces this operator watches (empty: every namespace)."""
    secrets: OperatorSecrets | None = field(default=None, repr=False)
    """The admin token, broker credential root and HA secret (None until loaded)."""
    secrets_problem: str | None = None
    """Why they could not be loaded (the groups say so: Ready=False, SecretMissing)."""

    async def ensure_secrets(self) -> str | None:
        """Load the secrets once: the release Secret (created once when the chart
        brings none, never rotated) or the files. Retried by every pass until it
        works; returns the problem, None when loaded."""
        if self.secrets is not None:
            return None
        ref = None
        try:
            ref = self.settings.release_secret_ref()
            if ref is None:
                self.secrets = self.settings.secrets_from_files()
                if self.secrets is None:
                    raise SettingsError(
                        "no BROKERGROUP_RELEASE_SECRET and no BROKERGROUP_TOKEN_FILE"
                    )
            else:
                data = await self.kube.ensure_release_secret(
                    *ref, self.settings.release_secret_managed
                )
                self.secrets = OperatorSecrets.from_release_data(data)
        except (ReleaseSecretError, SettingsError) as exc:
            where = "its secret files" if ref is None else f"the release Secret {'/'.join(ref)}"
            self.secrets_problem = f"the operator could not create or read {where}: {exc}"
            log.warning("%s", self.secrets_problem)
            return self.secrets_problem
        self.secrets_problem = None
        return None

    def context(self, body: Mapping[str, Any]) -> GroupContext:
        return context_of(body, self.settings, self.secrets)

    def controller(self, addresses: tuple[str, ...]) -> ControllerClient:
        token = self.secrets.admin_token if self.secrets else None
        key = (addresses, token)
        if key not in self.clients:
            self.clients[key] = ControllerClient(
                list(addresses), token, request_timeout_s=self.settings.controller_timeout_s
            )
        return self.clients[key]

    def memory(self, key: GroupKey) -> GroupMemory:
        if key not in self.groups:
            self.groups[key] = GroupMemory()
        return self.groups[key]

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()
        self.clients.clear()


def now_ms() -> int:
    return int(time.time() * 1000)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def context_of(
    body: Mapping[str, Any], settings: OperatorSettings, secrets: OperatorSecrets | None = None
) -> GroupContext:
    meta = body.get("metadata") or {}
    return GroupContext(
        name=str(meta["name"]),
        namespace=str(meta["namespace"]),
        uid=str(meta.get("uid", "")),
        spec=dict(body.get("spec") or {}),
        default_image=settings.image,
        controller_addresses=settings.controller_addresses,
        secrets=secrets,
        restarted_at=str((meta.get("annotations") or {}).get(RESTARTED_AT_ANNOTATION) or ""),
    )


async def read_view(client: ControllerClient, ctx: GroupContext) -> GroupView | None:
    try:
        info = await client.replica_info(ctx.namespace, ctx.name)
    except ControllerError as exc:
        if exc.code is ErrorCode.BROKER_SET_NOT_FOUND:
            return None
        raise
    return GroupView.from_replica_info(info)


async def reconcile_group(rt: Runtime, body: Mapping[str, Any], post: PostEvent) -> None:
    """One pass; passes of one group never overlap (one disruptive step at a time)."""
    await rt.ensure_secrets()
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
    blocked = await why_blocked(rt, ctx)
    if blocked is not None:
        # Say so on the object (Ready=False with the reason, one Event per new
        # reason) instead of leaving pods silently Pending; the next spec change
        # or resync tries again.
        await _report_blocked(rt, ctx, body, pods, sts, previous, blocked, post)
        return
    controller = rt.controller(ctx.addresses)
    try:
        view = await read_view(controller, ctx)
    except (ControllerUnavailable, ControllerError) as exc:
        log.warning("controller unreachable for %s/%s: %s", *key, exc)
        view = None

    # 1. Labels first: the client Service follows the master as soon as possible.
    if view is not None:
        if view.live_master is None and mem.master_lost_at_ms is None:
            mem.master_lost_at_ms = now_ms()
        for pod, patch in label_patches(pods, view):
            await rt.kube.patch_pod_labels(ctx.namespace, pod.name, patch, pod.uid)
            metrics.LABEL_PATCHES.labels(patch.get(LABEL_ROLE) or "none").inc()
            pod.labels.update({k: v for k, v in patch.items() if v is not None})
            for k, v in patch.items():
                if v is None:
                    pod.labels.pop(k, None)
        mem.view = view

    # 2. At most one disruptive step per pass.
    sts_spec = (sts or {}).get("spec") or {}
    sts_status = (sts or {}).get("status") or {}
    current_replicas = int(sts_spec.get("replicas", 0)) if sts else 0
    sts_replicas = current_replicas if sts else ctx.replicas
    plan_reason: str | None = None
    acted = False
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    wanted = annotations.get(SWITCHOVER_ANNOTATION)
    if wanted is not None and view is not None:
        acted = await user_switchover(rt, ctx, controller, view, str(wanted), post)
    known = known_broker_ids(previous)

    def scale_plan(v: GroupView) -> ScaleStep:
        return plan_scale(
            pods,
            v,
            desired_replicas=ctx.replicas,
            current_replicas=current_replicas,
            known_broker_ids=known,
            min_in_sync_replicas=ctx.min_in_sync_replicas,
        )

    if sts and view is not None and not acted:
        step = scale_plan(view)
        if isinstance(step, ScaleTo) and step.replicas < current_replicas:
            refusal = await _confirm(controller, ctx, view, step, scale_plan)
            if refusal is not None:
                post("Normal", "StepSkipped", f"scale-down step skipped: {refusal}")
                acted = True
                mem.wake.set()  # plan again at once from the fresh facts
                step = Wait(refusal)
        if isinstance(step, ScaleTo):
            sts_replicas = step.replicas
            post("Normal", "Scaling", f"{step.reason}: {current_replicas} → {step.replicas}")
        elif isinstance(step, Switchover):
            await switchover(rt, ctx, controller, step, post, cause="scale-down")
            acted = True
        elif isinstance(step, CleanBrokerIds):
            try:
                removed = await controller.clean_broker_data(
                    ctx.namespace, ctx.name, step.broker_ids, force=False
                )
            except (ControllerError, ControllerUnavailable) as exc:
                # e.g. BROKER_STILL_ALIVE: the next pass plans again from fresh facts.
                post("Warning", "BrokerIdsNotCleaned", f"{list(step.broker_ids)}: {exc}")
            else:
                post("Normal", "BrokerIdsCleaned", f"{step.reason}: removed {removed}")
        elif isinstance(step, Wait):
            plan_reason = step.reason
    elif not sts:
        sts_replicas = ctx.replicas
    update_revision = str(sts_status.get("updateRevision") or "")
    if (
        sts
        and view is not None
        and not acted
        and update_revision
        and sts_replicas == current_replicas
    ):

        def roll_plan(v: GroupView) -> RollStep:
            return plan_roll(
                pods,
                v,
                replicas=current_replicas,
                update_revision=update_revision,
                min_in_sync_replicas=ctx.min_in_sync_replicas,
                paused=bool((ctx.spec.get("rollout") or {}).get("paused", False)),
                known_broker_ids=known,
            )

        roll = roll_plan(view)
        if isinstance(roll, RestartPod):
            pod = next(p for p in pods if p.name == roll.pod)
            refusal = await _confirm(controller, ctx, view, roll, roll_plan)
            if refusal is not None:
                what = f"restart of {roll.pod} (broker {roll.broker_id})"
                post("Normal", "StepSkipped", f"{what} skipped: {refusal}")
                plan_reason = refusal
                mem.wake.set()  # plan again at once from the fresh facts
            else:
                post(
                    "Normal",
                    "RollingUpdate",
                    f"restarting {roll.pod} (broker {roll.broker_id}): {roll.reason}",
                )
                await rt.kube.delete_pod(ctx.namespace, pod.name, pod.uid)
                metrics.POD_RESTARTS.inc()
        elif isinstance(roll, Switchover):
            post(
                "Normal",
                "RollingUpdate",
                f"switching the master over {roll.from_broker_id} → {roll.to_broker_id} "
                f"before restarting it",
            )
            await switchover(rt, ctx, controller, roll, post, cause="rolling-update")
            acted = True
        elif isinstance(roll, Wait):
            plan_reason = roll.reason

    # 3. Owned objects: on a spec change, a scale step, a restart request (an annotation:
    # the generation stays), or every apply_interval_s.
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    applied_key = (generation, sts_replicas, ctx.restarted_at)
    if (
        sts is None
        or mem.applied != applied_key
        or time.monotonic() - mem.applied_at > rt.settings.apply_interval_s
    ):
        for obj in owned_objects(ctx, sts_replicas):
            await rt.kube.apply(obj)
        for obsolete in OBSOLETE_SERVICES:
            await rt.kube.delete_service(ctx.namespace, obsolete.format(group=ctx.name))
        mem.applied = applied_key
        mem.applied_at = time.monotonic()

    # 4. Status and Events.
    status, events = build_status(
        _status_input(
            ctx,
            body,
            sts,
            pods,
            previous,
            view=view,
            master_lost_at_ms=mem.master_lost_at_ms,
            plan_reason=plan_reason,
        )
    )
    if view is not None and view.live_master is not None:
        mem.master_lost_at_ms = None
        metrics.MASTER_EPOCH.labels(*key).set(view.master_epoch)
        metrics.SYNC_STATE_SET_SIZE.labels(*key).set(len(view.sync_state_set))
    failover = status.get("lastFailover") or {}
    if failover.get("durationMs") is not None:
        metrics.LAST_FAILOVER_MS.labels(*key).set(failover["durationMs"])
    for event in events:
        post(event.type, event.reason, event.message)
    if _status_changed(previous, status):
        await rt.kube.patch_group_status(ctx.namespace, ctx.name, status)
    metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)


async def why_blocked(rt: Runtime, ctx: GroupContext) -> tuple[str, str] | None:
    """(reason, message) when the group cannot run as specified, else None."""
    if rt.secrets_problem is not None:
        return ("SecretMissing", f"{rt.secrets_problem}. Broker pods cannot start")
    try:
        ctx.validate()
    except SpecError as exc:
        return ("InvalidSpec", str(exc))
    return None


async def _report_blocked(
    rt: Runtime,
    ctx: GroupContext,
    body: Mapping[str, Any],
    pods: tuple[PodFacts, ...],
    sts: Mapping[str, Any] | None,
    previous: dict[str, Any],
    blocked: tuple[str, str],
    post: PostEvent,
) -> None:
    status, _events = build_status(
        _status_input(ctx, body, sts, pods, previous, view=None, blocked=blocked)
    )
    before = {c.get("type"): c for c in previous.get("conditions") or []}.get(READY) or {}
    if (before.get("reason"), before.get("message")) != blocked:
        post("Warning", *blocked)
    if _status_changed(previous, status):
        await rt.kube.patch_group_status(ctx.namespace, ctx.name, status)


def _status_input(
    ctx: GroupContext,
    body: Mapping[str, Any],
    sts: Mapping[str, Any] | None,
    pods: tuple[PodFacts, ...],
    previous: dict[str, Any],
    **facts: Any,
) -> StatusInput:
    sts_status = (sts or {}).get("status") or {}
    return StatusInput(
        group=ctx.name,
        generation=int((body.get("metadata") or {}).get("generation") or 0),
        replicas=ctx.replicas,
        min_in_sync_replicas=ctx.min_in_sync_replicas,
        update_revision=str(sts_status.get("updateRevision") or ""),
        current_revision=str(sts_status.get("currentRevision") or ""),
        pods=pods,
        previous=previous,
        now_iso=now_iso(),
        now_ms=now_ms(),
        **facts,
    )


def _status_changed(previous: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    return any(previous.get(k) != v for k, v in status.items())


async def _confirm(
    controller: ControllerClient,
    ctx: GroupContext,
    planned: GroupView,
    step: RestartPod | ScaleTo,
    replan: Callable[[GroupView], object],
) -> str | None:
    """Re-read the controller just before a disruptive step (KafkaRoller's
    re-check): why not to take it, or None."""
    try:
        fresh = await read_view(controller, ctx)
    except (ControllerUnavailable, ControllerError) as exc:
        log.warning("re-read before a step of %s/%s failed: %s", ctx.namespace, ctx.name, exc)
        fresh = None
    return confirm_step(planned, fresh, step, None if fresh is None else replan(fresh))


class SwitchoverOutcome(StrEnum):
    ELECTED = "elected"
    REFUSED = "refused by the controller"
    UNKNOWN = "outcome unknown"


async def switchover(
    rt: Runtime,
    ctx: GroupContext,
    controller: ControllerClient,
    step: Switchover,
    post: PostEvent,
    *,
    cause: str,
) -> SwitchoverOutcome:
    """One admin ElectMaster. Whatever it answers, the pass takes no other
    disruptive step after it: a refusal is re-planned from fresh facts, and an
    election that got no answer may still be committed (the next pass reads
    the controller before doing anything else)."""
    try:
        info = await controller.elect_master(
            ctx.namespace, ctx.name, designated_broker_id=step.to_broker_id
        )
    except ControllerUnavailable as exc:
        post(
            "Warning",
            "SwitchoverOutcomeUnknown",
            f"{step.from_broker_id} → {step.to_broker_id}: no answer ({exc}); "
            "the next pass reads the controller before any other step",
        )
        rt.memory((ctx.namespace, ctx.name)).wake.set()
        return SwitchoverOutcome.UNKNOWN
    except ControllerError as exc:
        post("Warning", "SwitchoverFailed", f"{step.from_broker_id} → {step.to_broker_id}: {exc}")
        return SwitchoverOutcome.REFUSED
    metrics.SWITCHOVERS.labels(cause).inc()
    post(
        "Normal",
        "Switchover",
        f"{step.reason}: master {step.from_broker_id} → {info.master_broker_id} "
        f"at epoch {info.master_epoch}",
    )
    rt.memory((ctx.namespace, ctx.name)).wake.set()
    return SwitchoverOutcome.ELECTED


async def user_switchover(
    rt: Runtime,
    ctx: GroupContext,
    controller: ControllerClient,
    view: GroupView,
    wanted: str,
    post: PostEvent,
) -> bool:
    """`brokergroup kube switchover` sets the annotation; this honours it once.
    True when an ElectMaster was sent (the pass's one disruptive step)."""
    done: bool = False
    if not wanted.isdigit():
        post(
            "Warning", "SwitchoverRefused", f"{SWITCHOVER_ANNOTATION}={wanted!r} is not a BrokerId"
        )
    else:
        target = int(wanted)
        refusal = check_switchover(view, target)
        if refusal is not None:
            post("Warning", "SwitchoverRefused", refusal)
        elif view.master_broker_id is not None:
            step = Switchover(view.master_broker_id, target, "requested by the user")
            await switchover(rt, ctx, controller, step, post, cause="user")
            done = True
        else:
            post("Warning", "SwitchoverRefused", "no master to switch over from")
    await rt.kube.patch_group_annotations(ctx.namespace, ctx.name, {SWITCHOVER_ANNOTATION: None})
    return done


# ---------------------------------------------------------------- kopf wiring


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
    """Pods first, then the group's ids in the controller: no orphans either side,
    for at most cleanup_timeout_s (ownership.cleanup_step); then release anyway."""
    ns = str(namespace)
    rt = runtime_of(memo)
    await rt.ensure_secrets()  # the admin token cleans the group's ids
    ctx = rt.context(body)
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
    step = cleanup_step(
        pods_left=pods_left,
        ids_cleaned=ids_cleaned,
        problem=problem,
        elapsed_s=runtime.total_seconds(),
        timeout_s=rt.settings.cleanup_timeout_s,
    )
    if not isinstance(step, Release):
        raise kopf.TemporaryError(step.reason, delay=step.delay_s)
    if step.left_behind:
        kopf.warn(body, reason="CleanupIncomplete", message=step.left_behind)
        log.warning("BrokerGroup %s/%s: %s", ns, name, step.left_behind)
    rt.groups.pop((ns, name), None)
    metrics.forget_group(ns, name)


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


async def wait_for_change(
    rt: Runtime, body: Mapping[str, Any], mem: GroupMemory, stopped: kopf.DaemonStopped
) -> None:
    ctx = rt.context(body)
    view = mem.view
    waiters: list[Awaitable[Any]] = [mem.wake.wait(), stopped.wait(rt.settings.resync_s)]
    if view is not None:
        waiters.append(
            rt.controller(ctx.addresses).watch(
                ctx.namespace,
                ctx.name,
                view.master_epoch,
                view.sync_state_set_epoch,
                rt.settings.watch_timeout_ms,
            )
        )
    tasks = [asyncio.ensure_future(w) for w in waiters]
    try:
        await asyncio.wait(tasks, timeout=rt.settings.resync_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@kopf.on.event("", "v1", "pods", labels={LABEL_NAME: APP_NAME}, registry=registry)
async def pod_event(
    event: kopf.RawEvent, body: kopf.Body, namespace: str | None, memo: Any, **_: Any
) -> None:
    """Report a broker inactive the moment its pod goes; wake its group's pass."""
    ns = str(namespace)
    rt = runtime_of(memo)
    meta = body.get("metadata") or {}
    group = (meta.get("labels") or {}).get(LABEL_GROUP)
    if not group:
        return
    pod_key = (ns, str(meta.get("name")))
    before = rt.pods.get(pod_key)
    after = None if event.get("type") == "DELETED" else PodFacts.from_pod(dict(body))
    if after is None:
        final = PodFacts.from_pod(dict(body))
        if before is None or final.uid != before.uid or final.process_ended:
            before = final  # the object's last state: the kubelet's last word on the process
    if after is None:
        rt.pods.pop(pod_key, None)
    else:
        rt.pods[pod_key] = after
    decision = liveness_decision(before, after)
    mem = rt.memory((ns, group))
    if decision is not None:
        view = mem.view
        if view is not None and view.live_master == decision.broker_id:
            mem.master_lost_at_ms = mem.master_lost_at_ms or now_ms()
        addresses = mem.addresses
        if not addresses:  # no pass of this group yet (operator just started)
            try:
                owner = await rt.kube.read_group(ns, group)
                if owns(rt.settings.operator_id, owner.get("spec") or {}):
                    addresses = rt.context(owner).addresses
            except Exception as exc:
                log.warning("cannot read BrokerGroup %s/%s: %s", ns, group, exc)
        if addresses:
            try:
                await rt.controller(addresses).report_inactive(
                    ns,
                    group,
                    decision.broker_id,
                    decision.text,
                    process_gone=decision.process_gone,
                    incarnation=decision.incarnation,
                    symptom_only=decision.symptom_only,
                )
                metrics.INACTIVE_REPORTS.labels(str(decision.reason)).inc()
                log.info(
                    "reported broker %s of %s/%s inactive: %s",
                    decision.broker_id,
                    ns,
                    group,
                    decision.text,
                )
            except (ControllerError, ControllerUnavailable) as exc:
                log.warning("report inactive of broker %s failed: %s", decision.broker_id, exc)
    mem.wake.set()
