"""kopf handlers at handler level (DESIGN.md §5): one reconcile pass against
a recording Kubernetes fake and a scripted controller view.

kopf's own runner needs an API server (the cluster tier runs it for real,
tests/cluster/); here the pass itself is checked: owned objects applied on
a new group, labels demoted before the promotion, at most one disruptive
step per pass and none repeated on a second pass, the switchover
annotation honoured once (and refused with a reason), pod deletion reported
to the controller at once, and the delete handler cleaning the group's ids
only after its pods are gone."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import kopf
import pytest

from brokergroup_controller.api import BrokerLiveness, ReplicaInfo
from brokergroup_controller.client import ControllerUnavailable
from brokergroup_operator import handlers
from brokergroup_operator.model import SWITCHOVER_ANNOTATION
from brokergroup_operator.reconcile import reconcile_group
from brokergroup_operator.release_secret import (
    RELEASE_SECRET_KEYS,
    OperatorSecrets,
    ReleaseSecretError,
    plan_release_secret,
)
from brokergroup_operator.runtime import Runtime
from brokergroup_operator.settings import OperatorSettings


class FakeKube:
    def __init__(self, pods: list[dict[str, Any]], sts: dict[str, Any] | None) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.sts = sts
        self.calls: list[tuple[Any, ...]] = []
        self.status: dict[str, Any] | None = None
        self.group: dict[str, Any] = {}
        self.release_secret: dict[str, str] | None = None
        self.release_secret_forbidden = False
        self.claims: dict[str, dict[str, Any]] = {}
        self.expandable: dict[str, bool | None] = {}
        """StorageClass name → allowVolumeExpansion (None: may not read it)."""
        self.refuse_growth: str | None = None

    async def ensure_release_secret(self, ns: str, name: str, managed: bool) -> dict[str, str]:
        """What Kube.ensure_release_secret does, on a dict (the same pure plan)."""
        if self.release_secret_forbidden:
            raise ReleaseSecretError("403 Forbidden")
        plan = plan_release_secret(self.release_secret, managed, lambda: f"random-{name}")
        self.release_secret = {**(self.release_secret or {}), **plan.add}
        self.calls.append(("release-secret", f"{ns}/{name}", sorted(plan.add)))
        return dict(self.release_secret)

    async def delete_service(self, ns: str, name: str) -> None:
        self.calls.append(("delete-service", name))

    async def read_stateful_set(self, ns: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.sts)

    async def list_pods(self, ns: str, selector: str) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.pods.values()))

    async def patch_pod_labels(
        self, ns: str, name: str, labels: dict[str, Any], uid: str = ""
    ) -> None:
        assert uid == self.pods[name]["metadata"]["uid"], "labels patched on another incarnation"
        self.calls.append(("label", name, dict(labels)))
        meta = self.pods[name]["metadata"].setdefault("labels", {})
        for k, v in labels.items():
            if v is None:
                meta.pop(k, None)
            else:
                meta[k] = v

    async def delete_pod(self, ns: str, name: str, uid: str) -> None:
        self.calls.append(("delete", name))
        self.pods[name]["metadata"]["deletionTimestamp"] = "now"

    async def apply(self, obj: dict[str, Any]) -> None:
        self.calls.append(("apply", obj["kind"], obj["metadata"]["name"]))
        if obj["kind"] == "StatefulSet":
            self.sts = self.sts or {"spec": {}, "status": {}}
            live = self.sts["spec"].get("volumeClaimTemplates")
            if live is not None and live != obj["spec"]["volumeClaimTemplates"]:
                # What the API server answers: the claim template is immutable.
                raise ValueError("422 StatefulSet.apps is invalid: spec: Forbidden")
            self.sts["spec"]["replicas"] = obj["spec"]["replicas"]

    async def patch_group_status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        self.calls.append(("status",))
        self.status = status

    async def patch_group_annotations(
        self, ns: str, name: str, annotations: dict[str, Any]
    ) -> None:
        self.calls.append(("annotate", dict(annotations)))

    async def read_group(self, ns: str, name: str) -> dict[str, Any]:
        return self.group

    async def delete_stateful_set(self, ns: str, name: str) -> None:
        self.calls.append(("delete-sts", name))

    async def list_claims(self, ns: str, selector: str) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.claims.values()))

    async def storage_classes_expandable(self, names: set[str]) -> dict[str, bool | None]:
        self.calls.append(("read-classes", sorted(names)))
        return {n: self.expandable[n] for n in names if n in self.expandable}

    async def grow_claim(self, ns: str, name: str, storage: str) -> str | None:
        self.calls.append(("grow", name, storage))
        if self.refuse_growth is not None:
            return self.refuse_growth
        self.claims[name]["spec"]["resources"]["requests"]["storage"] = storage
        return None


class FakeController:
    def __init__(self, info: ReplicaInfo) -> None:
        self.info = info
        self.calls: list[tuple[Any, ...]] = []

    async def replica_info(self, cluster: str, broker: str) -> ReplicaInfo:
        return self.info

    async def elect_master(
        self, cluster: str, broker: str, *, designated_broker_id: int
    ) -> ReplicaInfo:
        self.calls.append(("elect", designated_broker_id))
        return ReplicaInfo(
            cluster,
            broker,
            designated_broker_id,
            None,
            self.info.master_epoch + 1,
            frozenset({designated_broker_id}),
            self.info.sync_state_set_epoch + 1,
        )

    async def switchover(
        self, cluster: str, broker: str, *, eligible_broker_ids: frozenset[int]
    ) -> ReplicaInfo:
        """The controller's pick is its own ranking; this fake takes the lowest id."""
        self.calls.append(("switchover", sorted(eligible_broker_ids)))
        return await self.elect_master(
            cluster, broker, designated_broker_id=min(eligible_broker_ids)
        )

    async def report_inactive(
        self,
        cluster: str,
        broker: str,
        broker_id: int,
        reason: str,
        *,
        process_gone: bool = False,
        incarnation: str = "",
        symptom_only: bool = False,
    ) -> ReplicaInfo:
        self.calls.append(("inactive", broker_id, reason, process_gone, incarnation, symptom_only))
        return self.info

    async def clean_broker_data(
        self, cluster: str, broker: str, ids: Any, force: bool = False
    ) -> list[int]:
        self.calls.append(("clean", ids, force))
        return [1, 2, 3]


def pod(i: int, revision: str = "r1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"bg-{i}",
            "uid": f"u{i}",
            "labels": {
                "app.kubernetes.io/name": "brokergroup",
                "brokergroup.io/group": "bg",
                "controller-revision-hash": revision,
                **(labels or {}),
            },
        },
        "status": {"podIP": f"10.0.0.{i}", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def info(master: int, epoch: int = 1, sss: frozenset[int] = frozenset({1, 2, 3})) -> ReplicaInfo:
    rows = tuple(BrokerLiveness(i + 1, f"10.0.0.{i}:10911", True, max_offset=10) for i in range(3))
    return ReplicaInfo("ns", "bg", master, f"10.0.0.{master - 1}:10911", epoch, sss, epoch, 4, rows)


def group(
    annotations: dict[str, str] | None = None, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "bg",
            "namespace": "ns",
            "uid": "g1",
            "generation": 1,
            "annotations": annotations or {},
        },
        "spec": {"replicas": 3, "ha": {"minInSyncReplicas": 1}},
        "status": status or {},
    }


def runtime(kube: FakeKube, controller: FakeController) -> Runtime:
    settings = OperatorSettings(controller_addresses=("c:9878",), image="img")
    secrets = OperatorSecrets("admin-token", "broker-credential-root-0123", "ha-secret")
    rt = Runtime(settings=settings, kube=kube, secrets=secrets)  # type: ignore[arg-type]
    rt.controller = lambda addresses: controller  # type: ignore[method-assign,assignment,return-value]
    return rt


class Events(list[tuple[str, str, str]]):
    def __call__(self, kind: str, reason: str, message: str) -> None:
        self.append((kind, reason, message))


async def test_new_group_applies_everything_and_writes_status() -> None:
    kube = FakeKube([], None)
    events = Events()
    ctl = FakeController(info(1))
    await reconcile_group(runtime(kube, ctl), group(), events)
    assert [c for c in kube.calls if c[0] == "apply"] == [
        ("apply", "Secret", "bg-credentials"),
        ("apply", "ConfigMap", "bg-config"),
        ("apply", "Service", "bg-headless"),
        ("apply", "Service", "bg"),
        ("apply", "PodDisruptionBudget", "bg"),
        ("apply", "NetworkPolicy", "bg"),
        ("apply", "StatefulSet", "bg"),
    ]
    # The read Service of earlier versions answered NOT_MASTER: it goes away.
    assert ("delete-service", "bg-read") in kube.calls
    assert kube.sts == {"spec": {"replicas": 3}, "status": {}}
    assert kube.status is not None and kube.status["replicas"] == 0


async def test_failover_relabels_demote_first_and_records_it() -> None:
    pods = [
        pod(0, labels={"brokergroup.io/role": "master", "brokergroup.io/broker-id": "1"}),
        pod(1, labels={"brokergroup.io/role": "slave", "brokergroup.io/broker-id": "2"}),
        pod(2, labels={"brokergroup.io/role": "slave", "brokergroup.io/broker-id": "3"}),
    ]
    kube = FakeKube(pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1"}})
    rt = runtime(kube, FakeController(info(2, epoch=2, sss=frozenset({2}))))
    events = Events()
    previous = {"master": {"brokerId": 1}, "masterEpoch": 1, "syncStateSet": [1, 2, 3]}
    await reconcile_group(rt, group(status=previous), events)
    labels = [c for c in kube.calls if c[0] == "label"]
    assert labels == [
        ("label", "bg-0", {"brokergroup.io/role": "slave"}),
        ("label", "bg-1", {"brokergroup.io/role": "master"}),
    ]
    assert [e[1] for e in events] == ["MasterElected", "SyncStateSetChanged"]
    assert kube.status is not None and kube.status["lastFailover"]["from"] == 1
    assert kube.status["lastFailover"]["to"] == 2
    kube.calls.clear()
    events.clear()
    await reconcile_group(rt, group(status=kube.status), events)
    assert [c for c in kube.calls if c[0] in ("label", "delete")] == [] and events == []


async def test_rolling_update_deletes_one_slave_per_pass() -> None:
    pods = [pod(i, revision="r0") for i in range(3)]
    kube = FakeKube(
        pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1", "currentRevision": "r0"}}
    )
    rt = runtime(kube, FakeController(info(1)))
    events = Events()
    await reconcile_group(rt, group(), events)
    assert [c for c in kube.calls if c[0] == "delete"] == [("delete", "bg-2")]
    assert ("Normal", "RollingUpdate", "restarting bg-2 (broker 3): outdated slave") in events
    await reconcile_group(rt, group(), events)  # bg-2 is still being deleted: wait
    assert [c for c in kube.calls if c[0] == "delete"] == [("delete", "bg-2")]


async def test_switchover_annotation_is_honoured_once() -> None:
    pods = [pod(i) for i in range(3)]
    kube = FakeKube(pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1"}})
    ctl = FakeController(info(1))
    events = Events()
    await reconcile_group(runtime(kube, ctl), group({SWITCHOVER_ANNOTATION: "3"}), events)
    assert ctl.calls == [("elect", 3)]
    assert ("annotate", {SWITCHOVER_ANNOTATION: None}) in kube.calls
    assert ("Normal", "Switchover", "requested by the user: master 1 → 3 at epoch 2") in events


async def test_switchover_to_an_out_of_sync_broker_is_refused() -> None:
    kube = FakeKube(
        [pod(i) for i in range(3)], {"spec": {"replicas": 3}, "status": {"updateRevision": "r1"}}
    )
    ctl = FakeController(info(1, sss=frozenset({1, 2})))
    events = Events()
    await reconcile_group(runtime(kube, ctl), group({SWITCHOVER_ANNOTATION: "3"}), events)
    assert ctl.calls == []
    assert (
        "Warning",
        "SwitchoverRefused",
        "broker 3 is not in the SyncStateSet [1, 2]: it may miss acknowledged messages",
    ) in events
    assert ("annotate", {SWITCHOVER_ANNOTATION: None}) in kube.calls


async def test_pod_deletion_is_reported_at_once() -> None:
    kube = FakeKube([], None)
    kube.group = group()
    ctl = FakeController(info(1))
    rt = runtime(kube, ctl)
    memo = kopf.Memo(runtime=rt)
    body = pod(0, labels={"brokergroup.io/broker-id": "1", "brokergroup.io/role": "master"})
    await handlers.pod_event(
        event={"type": "MODIFIED", "object": body}, body=kopf.Body(body), namespace="ns", memo=memo
    )
    assert ctl.calls == []
    gone = copy.deepcopy(body)
    gone["metadata"]["deletionTimestamp"] = "2026-11-23T04:00:00Z"
    await handlers.pod_event(
        event={"type": "MODIFIED", "object": gone}, body=kopf.Body(gone), namespace="ns", memo=memo
    )
    await handlers.pod_event(
        event={"type": "DELETED", "object": gone}, body=kopf.Body(gone), namespace="ns", memo=memo
    )
    # Deleting, and even gone, is no proof the process ended (issue 17 item 5):
    # only a terminated container is. Both name the pod's uid as the incarnation.
    assert ctl.calls == [
        ("inactive", 1, "pod deleted (bg-0)", False, "u0", False),
        ("inactive", 1, "pod deleted (bg-0)", False, "u0", False),
    ]
    crashed = pod(1, labels={"brokergroup.io/broker-id": "2"})
    await handlers.pod_event(
        event={"type": "MODIFIED", "object": crashed}, body=kopf.Body(crashed),
        namespace="ns", memo=memo,
    )  # fmt: skip
    crashed = copy.deepcopy(crashed)
    crashed["status"]["phase"] = "Failed"
    crashed["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    await handlers.pod_event(
        event={"type": "DELETED", "object": crashed}, body=kopf.Body(crashed),
        namespace="ns", memo=memo,
    )  # fmt: skip
    assert ctl.calls[2:] == [("inactive", 2, "pod deleted (bg-1)", True, "u1", False)]


async def test_delete_waits_for_pods_then_cleans_ids() -> None:
    kube = FakeKube([pod(0)], None)
    ctl = FakeController(info(1))
    memo = kopf.Memo(runtime=runtime(kube, ctl))
    with pytest.raises(kopf.TemporaryError):
        await handlers.group_deleted(
            body=kopf.Body(group()), name="bg", namespace="ns", memo=memo, runtime=timedelta(0)
        )
    assert ctl.calls == []
    kube.pods.clear()
    await handlers.group_deleted(
        body=kopf.Body(group()), name="bg", namespace="ns", memo=memo, runtime=timedelta(0)
    )
    assert ctl.calls == [("clean", None, True)]


class GoneController(FakeController):
    async def clean_broker_data(
        self, cluster: str, broker: str, ids: Any, force: bool = False
    ) -> list[int]:
        self.calls.append(("clean", ids, force))
        raise ControllerUnavailable("no controller answered (c:9878: connection refused)")


async def test_delete_gives_up_after_the_cleanup_timeout_and_says_what_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 22 item 4: with the controller gone (uninstalled first) the finalizer
    used to retry for ever; now it retries for cleanup_timeout_s, then releases."""
    warnings: list[tuple[str, str]] = []
    monkeypatch.setattr(
        kopf, "warn", lambda body, *, reason, message: warnings.append((reason, message))
    )
    kube = FakeKube([], None)
    ctl = GoneController(info(1))
    memo = kopf.Memo(runtime=runtime(kube, ctl))
    ran = group(status={"brokers": [{"pod": "bg-0", "brokerId": 1}], "masterEpoch": 1})
    with pytest.raises(kopf.TemporaryError) as retry:
        await handlers.group_deleted(
            body=kopf.Body(ran), name="bg", namespace="ns", memo=memo, runtime=timedelta(0)
        )
    assert str(retry.value).startswith("cleaning the BrokerIds from the controller")
    await handlers.group_deleted(
        body=kopf.Body(ran), name="bg", namespace="ns", memo=memo, runtime=timedelta(hours=1)
    )
    assert warnings == [
        (
            "CleanupIncomplete",
            "gave up cleaning after 120s and released the finalizer; left behind: the group's "
            "BrokerIds in the controller (clean them with `brokergroup admin clean-broker-data` "
            "once it is reachable); last error: controller unavailable: no controller answered "
            "(c:9878: connection refused)",
        )
    ]


async def test_a_group_that_never_registered_is_released_at_once_without_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deleted while the release Secret is missing (SecretMissing): no admin token to
    ask the controllers with, so the finalizer used to wait the whole cleanup timeout
    (120 s). Its status names no BrokerId, no master: nothing of it is in the
    controllers, so it is released at once, with no CleanupIncomplete Event."""
    warnings: list[tuple[str, str]] = []
    monkeypatch.setattr(
        kopf, "warn", lambda body, *, reason, message: warnings.append((reason, message))
    )
    kube = FakeKube([], None)
    kube.release_secret_forbidden = True
    ctl = GoneController(info(1))
    rt = runtime(kube, ctl)
    rt.secrets = None
    rt.settings = OperatorSettings(
        controller_addresses=("c:9878",), image="img", release_secret="mq/rel-secrets"
    )
    blocked = {"observedGeneration": 1, "replicas": 0, "ready": "0/3", "inSync": "?"}
    await handlers.group_deleted(
        body=kopf.Body(group(status=blocked)), name="bg", namespace="ns",
        memo=kopf.Memo(runtime=rt), runtime=timedelta(0),
    )  # fmt: skip
    assert ("delete-sts", "bg") in kube.calls
    assert warnings == []


async def test_a_group_that_cannot_run_says_why_on_the_object() -> None:
    """Issue 22 item 2 with issue 17 item 4: when the operator cannot create or
    read the release Secret (here its RBAC refuses), no group can get its
    credentials: Ready=False, SecretMissing, one Event, nothing applied; the
    next pass tries again and the group recovers once the Secret can be read."""
    kube = FakeKube([], None)
    kube.release_secret_forbidden = True
    events = Events()
    rt = runtime(kube, FakeController(info(1)))
    rt.secrets = None
    rt.settings = OperatorSettings(
        controller_addresses=("c:9878",), image="img", release_secret="mq/rel-secrets"
    )
    await reconcile_group(rt, group(), events)
    message = (
        "the operator could not create or read the release Secret mq/rel-secrets: "
        "403 Forbidden. Broker pods cannot start"
    )
    assert events == [("Warning", "SecretMissing", message)]
    assert [c for c in kube.calls if c[0] == "apply"] == []
    assert kube.status is not None
    ready = kube.status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"], ready["message"]) == (
        "Ready",
        "False",
        "SecretMissing",
        message,
    )
    await reconcile_group(rt, group(status=kube.status), events)  # no second Event
    assert len(events) == 1
    bad = group()
    bad["spec"]["config"] = {"maxPullMessages": "lots"}
    await reconcile_group(rt, bad, events)
    assert events[1] == (
        "Warning",
        "SecretMissing",
        message,
    )
    # Allowed again: the release Secret is created (every key, once) and the group runs.
    kube.release_secret_forbidden = False
    await reconcile_group(rt, group(status=kube.status), events)
    assert ("release-secret", "mq/rel-secrets", sorted(RELEASE_SECRET_KEYS)) in kube.calls
    assert ("apply", "Secret", "bg-credentials") in kube.calls
    await reconcile_group(rt, bad, events)
    assert events[-1] == (
        "Warning",
        "InvalidSpec",
        "spec.config.maxPullMessages must be a number, got 'lots'",
    )


def test_a_group_of_another_release_is_not_this_operators() -> None:
    """Issue 22 item 2: kopf's filter (handlers, daemon and finalizer)."""
    settings = OperatorSettings(operator_id="mq/rel-brokergroup")
    memo = kopf.Memo(runtime=Runtime(settings=settings, kube=FakeKube([], None)))  # type: ignore[arg-type]
    mine = [
        handlers.group_is_mine(spec=spec, memo=memo)
        for spec in (
            {},
            {"controller": {"release": "mq/rel-brokergroup"}},
            {"controller": {"release": "other/rel2-brokergroup"}},
        )
    ]
    assert mine == [True, True, False]


class SwitchoverKube:
    """The BrokerGroup as `brokergroup kube switchover` sees it; the operator's
    side is played by `on_annotate` (honour or refuse)."""

    def __init__(self, honour: bool) -> None:
        self.body: dict[str, Any] = {
            "metadata": {"annotations": {}},
            "status": {"masterEpoch": 3, "master": {"brokerId": 1}},
        }
        self.honour = honour

    async def read_group(self, ns: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.body)

    async def patch_group_annotations(
        self, ns: str, name: str, annotations: dict[str, Any]
    ) -> None:
        # The operator acts at once: consumes the annotation, maybe moves the master.
        if self.honour:
            self.body["status"] = {"masterEpoch": 4, "master": {"brokerId": 2, "pod": "bg-1"}}


def claim(i: int, requested: str, capacity: str, storage_class: str = "fast") -> dict[str, Any]:
    return {
        "metadata": {"name": f"data-bg-{i}"},
        "spec": {
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": requested}},
        },
        "status": {"phase": "Bound", "capacity": {"storage": capacity}},
    }


def sized_group(size: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body = group(status=status)
    body["metadata"]["generation"] = 2
    body["spec"]["storage"] = {"size": size, "storageClassName": "fast"}
    return body


def grown_world(expandable: bool) -> tuple[FakeKube, Runtime]:
    """A running group made with 1Gi volumes of class `fast`; its StatefulSet holds the
    claim template it was made with."""
    from brokergroup_operator.workload import stateful_set

    kube = FakeKube([pod(i) for i in range(3)], None)
    rt = runtime(kube, FakeController(info(1)))
    made = stateful_set(rt.context(sized_group("1Gi")), 3)
    kube.sts = {"spec": made["spec"], "status": {"updateRevision": "r1"}}
    kube.claims = {f"data-bg-{i}": claim(i, "1Gi", "1Gi") for i in range(3)}
    kube.expandable = {"fast": expandable}
    return kube, rt


def storage_condition(kube: FakeKube) -> tuple[str, str, str]:
    assert kube.status is not None
    (found,) = [c for c in kube.status["conditions"] if c["type"] == "StorageResized"]
    return found["status"], found["reason"], found["message"]


async def test_a_raised_size_grows_the_claims_and_reports_until_done() -> None:
    """Issue 33 item 4: the claims grow, the StatefulSet's immutable claim template is
    applied as it is (the API server refuses a change), the condition follows the
    resize and the Events say what was grown and when it is done, once each."""
    kube, rt = grown_world(expandable=True)
    events = Events()
    await reconcile_group(rt, sized_group("2Gi"), events)
    assert [c for c in kube.calls if c[0] in ("grow", "read-classes")] == [
        ("read-classes", ["fast"]),
        ("grow", "data-bg-0", "2Gi"),
        ("grow", "data-bg-1", "2Gi"),
        ("grow", "data-bg-2", "2Gi"),
    ]
    assert ("apply", "StatefulSet", "bg") in kube.calls
    resizing = (
        "growing the volumes to 2Gi: data-bg-0 1Gi → 2Gi, data-bg-1 1Gi → 2Gi, data-bg-2 1Gi → 2Gi"
    )
    assert storage_condition(kube) == ("False", "Resizing", resizing)
    assert [e for e in events if e[1].startswith("Volume")] == [
        ("Normal", "VolumeExpansion", resizing.replace("growing the volumes to 2Gi: ", "growing "))
    ]

    kube.calls.clear()
    events.clear()
    await reconcile_group(rt, sized_group("2Gi", kube.status), events)  # the volume plugin works
    assert [c for c in kube.calls if c[0] == "grow"] == [] and events == []
    assert storage_condition(kube)[1] == "Resizing"

    for i in range(3):  # what a CSI resizer and the kubelet report when done
        kube.claims[f"data-bg-{i}"]["status"]["capacity"]["storage"] = "2Gi"
    await reconcile_group(rt, sized_group("2Gi", kube.status), events)
    assert storage_condition(kube) == ("True", "Resized", "3 data volume(s) hold 2Gi")
    assert events == [("Normal", "VolumesResized", "3 data volume(s) hold 2Gi")]
    events.clear()
    await reconcile_group(rt, sized_group("2Gi", kube.status), events)
    assert events == []


async def test_a_class_without_expansion_says_why_once_and_grows_nothing() -> None:
    kube, rt = grown_world(expandable=False)
    events = Events()
    await reconcile_group(rt, sized_group("2Gi"), events)
    await reconcile_group(rt, sized_group("2Gi", kube.status), events)
    assert [c for c in kube.calls if c[0] == "grow"] == []
    status, reason, message = storage_condition(kube)
    assert (status, reason) == ("False", "StorageClassNotExpandable")
    assert [e for e in events if e[0] == "Warning"] == [
        ("Warning", "StorageClassNotExpandable", message)
    ]
    assert kube.status is not None
    available = {c["type"]: c for c in kube.status["conditions"]}["Available"]
    assert available["status"] == "True"  # the group keeps serving on the volumes it has


async def test_a_refused_growth_is_reported_without_an_event_per_pass() -> None:
    kube, rt = grown_world(expandable=True)
    kube.expandable = {"fast": None}  # may not read StorageClasses: the API server decides
    kube.refuse_growth = "403 only dynamically provisioned pvc can be resized"
    events = Events()
    await reconcile_group(rt, sized_group("2Gi"), events)
    await reconcile_group(rt, sized_group("2Gi", kube.status), events)
    assert storage_condition(kube)[1] == "ExpansionRefused"
    assert [e[1] for e in events if e[1] != "MasterElected"] == ["ExpansionRefused"]
