"""`kubectl brokergroup` without a cluster (issue 22 item 7).

Checked: the API names agree with the operator's; argument parsing of both
entry points (`kubectl-brokergroup`, `brokergroup kube`); TARGET resolution
(BrokerId, pod name through status or label, unknown pod); the switchover
conversation against a fake API whose `annotate` plays the operator — an
"already master" request is refused before anything is written, a refusal
Event ends the command at its first look, an old Event is not mistaken for
the answer; the status view's text (pinned whole) and JSON; the roll's
progress rule and the restart request; the report's members, with every
Secret value cut out of every file.
"""

from __future__ import annotations

import copy
import io
import json
import tarfile
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.kubectl_plugin import names
from brokergroup_cli.kubectl_plugin.cli import build_parser, parse_group
from brokergroup_cli.kubectl_plugin.kube import KubeError
from brokergroup_cli.kubectl_plugin.report import (
    REDACTED,
    Collected,
    archive_members,
    collect,
    write_tarball,
)
from brokergroup_cli.kubectl_plugin.restart import restart, roll_progress
from brokergroup_cli.kubectl_plugin.switchover import TargetError, resolve_target, switchover
from brokergroup_cli.kubectl_plugin.view import group_status, render_text
from brokergroup_cli.main import build_parser as brokergroup_parser
from tests.unit.conftest import Clock


def group_body(
    master: int = 2, epoch: int = 4, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders", "namespace": "shop", "annotations": annotations or {}},
        "spec": {"replicas": 3},
        "status": {
            "ready": "3/3",
            "master": {"brokerId": master, "pod": f"orders-{master - 1}", "address": f"10.0.0.{master}:10911"},
            "masterEpoch": epoch,
            "syncStateSet": [2, 1],
            "syncStateSetEpoch": 6,
            "currentRevision": "orders-a",
            "updateRevision": "orders-b",
            "lastFailover": {"at": "2026-11-25T05:00:00Z", "from": 1, "to": 2, "durationMs": 170},
            "brokers": [
                {"pod": "orders-0", "brokerId": 1, "address": "10.0.0.1:10911", "role": "slave",
                 "alive": True, "inSync": True, "maxOffset": 900, "ready": True},
                {"pod": "orders-1", "brokerId": 2, "address": "10.0.0.2:10911", "role": "master",
                 "alive": True, "inSync": True, "maxOffset": 1000, "ready": True},
                {"pod": "orders-2", "brokerId": 3, "address": "10.0.0.3:10911", "role": "slave",
                 "alive": False, "inSync": False, "maxOffset": 0, "ready": False},
            ],
            "conditions": [{"type": "Available", "status": "True", "reason": "MasterReady",
                            "message": "broker 2 (orders-1) is master"}],
        },
    }  # fmt: skip


def pod(
    name: str, broker_id: str | None = None, revision: str = "r1", ready: bool = True
) -> dict[str, Any]:
    labels = {
        names.LABEL_NAME: "brokergroup",
        names.LABEL_GROUP: "orders",
        names.REVISION_LABEL: revision,
    }
    if broker_id is not None:
        labels[names.LABEL_BROKER_ID] = broker_id
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "broker"}],
                 "volumes": [{"name": "secrets", "secret": {"secretName": "orders-credentials"}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                   "containerStatuses": [{"name": "broker", "restartCount": 1}]},
    }  # fmt: skip


# ---------------------------------------------------------------- names, arguments


def test_names_agree_with_the_operator() -> None:
    from brokergroup_operator import model, spec

    assert (names.API_GROUP, names.KIND) == (spec.API_GROUP, spec.KIND)
    assert names.SWITCHOVER_ANNOTATION == model.SWITCHOVER_ANNOTATION
    assert names.RESTARTED_AT_ANNOTATION == spec.RESTARTED_AT_ANNOTATION
    assert (names.LABEL_NAME, names.LABEL_GROUP, names.LABEL_BROKER_ID, names.LABEL_ROLE) == (
        model.LABEL_NAME, model.LABEL_GROUP, model.LABEL_BROKER_ID, model.LABEL_ROLE,
    )  # fmt: skip
    assert names.pod_selector("orders") == model.selector_string("orders").replace(
        ",app.kubernetes.io/instance=orders", ""
    )


def test_parse_group_accepts_kubectl_spellings() -> None:
    assert [parse_group(r) for r in ("orders", "bg/orders", "brokergroups/orders")] == [
        "orders", "orders", "orders",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="expected NAME or bg/NAME"):
        parse_group("pod/orders-0")


def test_arguments_of_both_entry_points() -> None:
    args = build_parser().parse_args(["switchover", "orders", "orders-1", "-n", "shop"])
    assert (args.group, args.target, args.to, args.namespace, args.wait) == (
        "orders", "orders-1", None, "shop", 30.0,
    )  # fmt: skip
    alias = brokergroup_parser().parse_args(
        ["kube", "switchover", "bg/orders", "--to", "2", "-n", "shop", "--kubeconfig", "k"]
    )
    assert (alias.group, alias.target, alias.to, alias.kubeconfig) == ("bg/orders", None, "2", "k")
    for argv in (["status", "orders", "--json"], ["restart", "orders", "--wait", "60"],
                 ["report", "orders", "-o", "r.tgz"]):  # fmt: skip
        mine = vars(build_parser().parse_args(argv))
        theirs = vars(brokergroup_parser().parse_args(["kube", *argv]))
        shared = {k: v for k, v in mine.items() if k not in ("func", "action")}
        assert {k: theirs[k] for k in shared} == shared


def test_switchover_needs_exactly_one_target(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["switchover", "orders", "2", "--to", "3"])
    assert args.func(args) == 1
    assert "give the target once" in capsys.readouterr().err


# ---------------------------------------------------------------- target resolution


def test_resolve_target() -> None:
    body = group_body()
    labelled = [pod("orders-3", broker_id="7"), pod("orders-4")]
    assert resolve_target("3", body, labelled) == 3
    assert resolve_target("orders-0", body, labelled) == 1
    assert resolve_target("pod/orders-2", body, labelled) == 3
    assert resolve_target("orders-3", body, labelled) == 7  # not in status yet: the label
    with pytest.raises(
        TargetError, match=r"'orders-4' is neither a BrokerId nor a pod of bg/orders"
    ):
        resolve_target("orders-4", body, labelled)
    with pytest.raises(
        TargetError, match=r"pods: orders-0, orders-1, orders-2, orders-3, orders-4"
    ):
        resolve_target("nope", body, labelled)


# ---------------------------------------------------------------- switchover


class FakeApi:
    """A BrokerGroup and its Events; `operator` plays the operator's answer to the
    annotation (it sees the group and the requested BrokerId)."""

    namespace = "shop"

    def __init__(self, body: dict[str, Any], operator: Any = None) -> None:
        self.body = body
        self.events: list[dict[str, Any]] = []
        self.operator = operator
        self.calls: list[str] = []
        self.reads = 0

    def read_group(self, name: str) -> dict[str, Any]:
        self.reads += 1
        return copy.deepcopy(self.body)

    def annotate_group(self, name: str, annotations: Mapping[str, str | None]) -> None:
        self.calls.append(f"annotate {dict(annotations)}")
        self.body["metadata"]["annotations"].update(annotations)
        if self.operator is not None:
            self.operator(self, annotations)

    def list_pods(self, selector: str) -> list[dict[str, Any]]:
        assert selector == names.pod_selector("orders")
        # The operator's master label follows the status, the first `label_lag` lists late.
        self.pod_lists += 1
        labelled = self.body["status"]["master"]["brokerId"]
        if self.pod_lists <= self.label_lag:
            labelled = self.labelled_before
        pods = [pod(f"orders-{i}", str(i + 1)) for i in range(3)]
        for i, p in enumerate(pods):
            p["metadata"]["labels"][names.LABEL_ROLE] = "master" if i + 1 == labelled else "slave"
        return pods

    label_lag = 0
    labelled_before = 0
    pod_lists = 0

    def group_events(self, name: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.events)

    def post(self, reason: str, message: str) -> None:
        n = len(self.events)
        self.events.append({"metadata": {"name": f"kopf-event-{n}"}, "reason": reason,
                            "message": message, "eventTime": f"2026-11-25T05:00:0{n}Z"})  # fmt: skip


def run_switchover(api: FakeApi, target: str, said: list[str], wait_s: float = 30.0) -> Any:
    clock = Clock(0.0)
    return switchover(api, "orders", target, wait_s, said.append, sleep=clock.sleep, clock=clock)


def test_switchover_to_the_master_is_refused_before_asking() -> None:
    api = FakeApi(group_body(master=2))
    said: list[str] = []
    result = run_switchover(api, "orders-1", said)
    assert (result.ok, result.message) == (
        False, "broker 2 (orders-1) is already the master (masterEpoch 4)",
    )  # fmt: skip
    assert api.calls == [] and said == []


def test_a_refusal_ends_the_command_at_the_first_look() -> None:
    def refuse(api: FakeApi, annotations: Mapping[str, str | None]) -> None:
        api.post("SwitchoverRefused", "broker 3 is not alive")
        del api.body["metadata"]["annotations"][names.SWITCHOVER_ANNOTATION]

    api = FakeApi(group_body(master=2), refuse)
    api.post("SwitchoverRefused", "broker 1 is not in the SyncStateSet [2]")  # an old answer
    said: list[str] = []
    result = run_switchover(api, "3", said)
    assert (result.ok, result.message) == (False, "SwitchoverRefused: broker 3 is not alive")
    assert api.calls == ["annotate {'brokergroup.io/switchover-to': '3'}"]
    assert api.reads == 2  # the first read, then one look after the request
    assert said == ["asked the operator to switch bg/orders over to broker 3"]


def test_a_switchover_succeeds_when_the_status_shows_the_new_master() -> None:
    def honour(api: FakeApi, annotations: Mapping[str, str | None]) -> None:
        api.post("Switchover", "requested by the user: master 2 → 1 at epoch 5")
        api.body["status"]["master"] = {"brokerId": 1, "pod": "orders-0", "address": "x"}
        api.body["status"]["masterEpoch"] = 5

    said: list[str] = []
    result = run_switchover(FakeApi(group_body(master=2), honour), "orders-0", said)
    assert (result.ok, result.message) == (True, "broker 1 (orders-0) is master at masterEpoch 5")


def test_a_switchover_waits_for_the_new_master_pod_to_be_labelled() -> None:
    """The status shows the new master a pass before its pod carries the master label (the
    master Service then has no endpoint): the command follows until the label moved. CI
    run 45's test_kubectl_brokergroup read no master label right after a --wait returned;
    the old outcome ended at the first look (api.reads == 2)."""

    def honour(api: FakeApi, annotations: Mapping[str, str | None]) -> None:
        api.post("Switchover", "requested by the user: master 2 → 1 at epoch 5")
        del api.body["metadata"]["annotations"][names.SWITCHOVER_ANNOTATION]  # taken
        api.labelled_before = api.body["status"]["master"]["brokerId"]
        api.body["status"]["master"] = {"brokerId": 1, "pod": "orders-0", "address": "x"}
        api.body["status"]["masterEpoch"] = 5

    api = FakeApi(group_body(master=2), honour)
    api.label_lag = 3  # the target's lookup and two looks after it still see broker 2 labelled
    result = run_switchover(api, "orders-0", [])
    assert (result.ok, result.message) == (True, "broker 1 (orders-0) is master at masterEpoch 5")
    assert api.reads == 4

    stuck = FakeApi(group_body(master=2), honour)
    stuck.label_lag = 1000
    result = run_switchover(stuck, "orders-0", [], wait_s=5.0)
    assert not result.ok
    assert "as master with its pod labelled master yet" in result.message


def test_an_unanswered_request_says_the_operator_did_not_take_it() -> None:
    result = run_switchover(FakeApi(group_body(master=2)), "1", [], wait_s=5.0)
    assert not result.ok
    assert result.message.startswith("no answer within 5 s: the operator has not taken the request")


# ---------------------------------------------------------------- status view


def test_status_text_reuses_the_local_view() -> None:
    assert render_text(group_status(group_body())).splitlines() == [
        "BrokerGroup shop/orders · ready 3/3",
        "master: broker 2 at orders-1 (10.0.0.2:10911)   masterEpoch 4",
        "SyncStateSet: {1, 2}   syncStateSetEpoch 6",
        "revision: orders-a → orders-b",
        "last failover: 1 → 2 at 2026-11-25T05:00:00Z (170 ms)",
        "",
        "POD       ID  ADDRESS         ROLE    ALIVE  IN-SYNC  READY  MAXOFFSET  LAG",
        "orders-0  1   10.0.0.1:10911  slave   yes    yes      yes    900        100",
        "orders-1  2   10.0.0.2:10911  master  yes    yes      yes    1000       0",
        "orders-2  3   10.0.0.3:10911  slave   no     no       no     0          1000",
        "",
        "CONDITION  STATUS  REASON       MESSAGE",
        "Available  True    MasterReady  broker 2 (orders-1) is master",
    ]


def test_status_json_and_a_group_without_status() -> None:
    doc = group_status(group_body()).to_json()
    assert doc["master"] == {"brokerId": 2, "pod": "orders-1", "address": "10.0.0.2:10911"}
    assert [(b["pod"], b["lag"], b["inSyncStateSet"]) for b in doc["brokers"]] == [
        ("orders-0", 100, True), ("orders-1", 0, True), ("orders-2", 1000, False),
    ]  # fmt: skip
    json.dumps(doc)
    empty = group_status({"metadata": {"name": "new", "namespace": "shop"}, "spec": {}})
    assert render_text(empty).splitlines()[:3] == [
        "BrokerGroup shop/new · ready -",
        "master: none          masterEpoch -",
        "SyncStateSet: {}   syncStateSetEpoch -",
    ]


# ---------------------------------------------------------------- restart


def sts(revision: str) -> dict[str, Any]:
    return {"status": {"updateRevision": revision}}


def test_roll_progress() -> None:
    pods = [pod("orders-0", revision="r2"), pod("orders-1", revision="r2"), pod("orders-2")]
    assert roll_progress("r1", sts("r1"), pods, 3) == (
        False, "waiting for the operator to update the StatefulSet",
    )  # fmt: skip
    assert roll_progress("r1", sts("r2"), pods, 3) == (False, "2/3 pods ready on revision r2")
    pods[2] = pod("orders-2", revision="r2", ready=False)
    assert roll_progress("r1", sts("r2"), pods, 3) == (False, "2/3 pods ready on revision r2")
    pods[2] = pod("orders-2", revision="r2")
    assert roll_progress("r1", sts("r2"), pods, 3) == (True, "3/3 pods ready on revision r2")


def test_restart_writes_the_annotation_and_follows_the_roll() -> None:
    class Api(FakeApi):
        def __init__(self) -> None:
            super().__init__(group_body())
            self.revision = "r1"

        def read_stateful_set(self, name: str) -> dict[str, Any]:
            return sts(self.revision)

        def annotate_group(self, name: str, annotations: Mapping[str, str | None]) -> None:
            super().annotate_group(name, annotations)
            self.revision = "r2"

        def list_pods(self, selector: str) -> list[dict[str, Any]]:
            return [pod(f"orders-{i}", revision=self.revision) for i in range(3)]

    api, said, clock = Api(), [], Clock(0.0)
    ok, message = restart(
        api, "orders", 60, said.append,
        now=lambda: datetime(2026, 11, 25, 5, 0, tzinfo=UTC), sleep=clock.sleep, clock=clock,
    )  # fmt: skip
    assert api.calls == ["annotate {'kubectl.kubernetes.io/restartedAt': '2026-11-25T05:00:00Z'}"]
    assert (ok, message) == (True, "bg/orders restarted: 3/3 pods ready on revision r2")


# ---------------------------------------------------------------- report

TOKEN = "bg1.broker.c2hvcA.b3JkZXJz.s3cr3t-mac-0123"
HA = "ha-secret-abcdef"


class ReportApi(FakeApi):
    def list_objects(self, kind: str, selector: str) -> list[dict[str, Any]]:
        if kind == "networkpolicies":
            raise KubeError("listing networkpolicies", 403, "forbidden")
        if kind == "statefulsets":
            return [{"kind": "StatefulSet", "metadata": {"name": "orders"}}]
        return []

    def namespace_events(self) -> list[dict[str, Any]]:
        return [
            {"involvedObject": {"kind": "Pod", "name": "orders-0"}, "reason": "Started",
             "lastTimestamp": "2026-11-25T05:00:02Z", "message": "started"},
            {"involvedObject": {"kind": "BrokerGroup", "name": "orders"}, "reason": "MasterElected",
             "lastTimestamp": "2026-11-25T05:00:01Z", "message": "broker 1"},
            {"involvedObject": {"kind": "Pod", "name": "other-0"}, "reason": "Started",
             "lastTimestamp": "2026-11-25T05:00:00Z", "message": "not ours"},
            {"involvedObject": {"kind": "StatefulSet", "name": "orders"}, "reason": "SuccessfulCreate",
             "lastTimestamp": "2026-11-25T05:00:00Z", "message": "create Pod orders-0"},
        ]  # fmt: skip

    def read_secret(self, name: str) -> dict[str, Any]:
        import base64

        data = {"broker-credential": TOKEN, "ha-secret": HA}
        return {"metadata": {"name": name, "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": json.dumps(data)}},
                "type": "Opaque",
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}  # fmt: skip

    def pod_log(self, pod: str, container: str, *, previous: bool) -> str:
        return f"{pod} {'previous' if previous else 'current'}: token={TOKEN}\n"


def test_report_members_with_secrets_redacted(tmp_path: Path) -> None:
    found = collect(ReportApi(group_body()), "orders")
    assert isinstance(found, Collected)
    assert [e["reason"] for e in found.events] == ["SuccessfulCreate", "MasterElected", "Started"]
    assert found.errors == ["listing networkpolicies: 403 forbidden"]
    members = archive_members(found, "r")
    assert sorted(members) == sorted(
        ["r/brokergroup.json", "r/status.txt", "r/objects/pods.json", "r/events.json",
         "r/errors.txt", "r/secrets/orders-credentials.json"]
        + [f"r/objects/{k}.json" for k in ("statefulsets", "controllerrevisions", "services",
            "configmaps", "persistentvolumeclaims", "poddisruptionbudgets")]
        + [f"r/logs/orders-{i}/broker{p}.log" for i in range(3) for p in ("", ".previous")]
    )  # fmt: skip
    assert members["r/logs/orders-0/broker.log"] == f"orders-0 current: token={REDACTED}\n"
    secret = json.loads(members["r/secrets/orders-credentials.json"])
    assert secret["data"] == {"broker-credential": REDACTED, "ha-secret": REDACTED}
    assert secret["metadata"]["annotations"] == {}
    assert not [p for p, text in members.items() if TOKEN in text or HA in text]
    path = tmp_path / "report.tar.gz"
    write_tarball(members, str(path), datetime(2026, 11, 25, tzinfo=UTC))
    with tarfile.open(path) as tar:
        assert sorted(tar.getnames()) == sorted(members)
        extracted = tar.extractfile("r/status.txt")
        assert extracted is not None
        text = io.TextIOWrapper(extracted).read()
    assert text.startswith("BrokerGroup shop/orders · ready 3/3\n")
