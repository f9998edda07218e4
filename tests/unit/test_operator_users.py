"""BrokerGroupUser's pure part (operator users.py; issue 36 item 3): the spec's ACL 2.0
entries expanded one resource each in the controller's canonical form, the derived
SecretKey (stable across passes, new for a re-created user or a rotation, never in a repr),
the Secret's content and owner, refusals naming the field, and the CRD's schema and the
chart's copy agreeing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from brokergroup_operator.users import (
    ROTATE_ANNOTATION,
    UserSpecError,
    plan_user,
    ready_condition,
    user_secret,
)

ROOT = Path(__file__).resolve().parents[2]
KEY_ROOT = "r" * 32


def body(spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "orders-app", "namespace": "prod", "uid": "u-1", **meta},
        "spec": spec,
    }


def test_entries_expand_per_resource_in_order() -> None:
    plan = plan_user(
        body(
            {
                "policies": [
                    {"resources": ["Topic:orders", "Group:billing"], "actions": ["Pub", "Sub"]},
                    {"resources": ["Topic:audit-*"], "actions": ["Sub"], "decision": "Deny"},
                    {"resources": ["*"], "actions": ["get"], "sourceIps": ["10.0.0.0/8"]},
                ]
            }
        ),
        KEY_ROOT,
    )
    assert (plan.access_key, plan.cluster_name, plan.secret_name) == (
        "orders-app",
        "prod",
        "orders-app-rocketmq-user",
    )
    assert plan.controller_path == "/v1/clusters/prod/users/orders-app"
    sent = plan.controller_body()
    assert sent["userStatus"] == "enable"
    assert sent["policies"] == [
        {
            "resource": "Topic:orders",
            "actions": ["Pub", "Sub"],
            "decision": "Allow",
            "sourceIps": [],
        },
        {
            "resource": "Group:billing",
            "actions": ["Pub", "Sub"],
            "decision": "Allow",
            "sourceIps": [],
        },
        {"resource": "Topic:audit-*", "actions": ["Sub"], "decision": "Deny", "sourceIps": []},
        {"resource": "*", "actions": ["Get"], "decision": "Allow", "sourceIps": ["10.0.0.0/8"]},
    ]


def test_secret_key_stable_and_rotated() -> None:
    first = plan_user(body({}), KEY_ROOT).secret_key
    assert plan_user(body({}), KEY_ROOT).secret_key == first  # every pass writes the same
    assert len(first) == 43 and first.isascii()
    recreated = plan_user(body({}, uid="u-2"), KEY_ROOT).secret_key
    rotated = plan_user(body({}, annotations={ROTATE_ANNOTATION: "1"}), KEY_ROOT).secret_key
    other_root = plan_user(body({}), "s" * 32).secret_key
    assert len({first, recreated, rotated, other_root}) == 4
    assert first not in repr(plan_user(body({}), KEY_ROOT))


def test_secret_holds_the_pair_owned_by_the_user() -> None:
    plan = plan_user(body({"accessKey": "ak_1", "secretName": "app-pair"}), KEY_ROOT)
    secret = user_secret(plan, "u-1")
    assert secret["metadata"]["name"] == "app-pair"
    assert secret["metadata"]["namespace"] == "prod"
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("BrokerGroupUser", "orders-app", "u-1")
    data = secret["stringData"]
    assert (data["accessKey"], data["secretKey"]) == ("ak_1", plan.secret_key)
    assert json.loads(data["rocketmq-credentials"]) == {
        "accessKey": "ak_1",
        "secretKey": plan.secret_key,
    }


@pytest.mark.parametrize(
    ("spec", "meta", "words"),
    [
        ({"clusterName": "other"}, {}, "spec.clusterName 'other'"),
        ({"accessKey": "has space"}, {}, "spec.accessKey"),
        ({}, {"name": "dotted.name"}, "spec.accessKey (default metadata.name)"),
        ({"bogus": 1}, {}, "unknown field(s) ['bogus']"),
        ({"policies": [{"resources": ["Queue:q"], "actions": ["Pub"]}]}, {}, "spec.policies[0]"),
        ({"policies": [{"resources": ["Topic:t"], "actions": ["Fly"]}]}, {}, "unknown action"),
        ({"policies": [{"resources": [], "actions": ["Pub"]}]}, {}, "at least one resource"),
        (
            {"policies": [{"resources": ["Topic:t"], "actions": ["Pub"], "x": 1}]},
            {},
            "unknown field(s) ['x']",
        ),
        (
            {"policies": [{"resources": ["Topic:t"], "actions": ["Pub"], "sourceIps": ["nope"]}]},
            {},
            "CIDR",
        ),
        ({"userStatus": "paused"}, {}, "spec.userStatus"),
    ],
)
def test_refusals_name_the_field(spec: dict[str, Any], meta: dict[str, Any], words: str) -> None:
    with pytest.raises(UserSpecError) as info:
        plan_user(body(spec, **meta), KEY_ROOT)
    assert words in str(info.value)


def test_disabled_user() -> None:
    assert plan_user(body({"userStatus": "disable"}), KEY_ROOT).controller_body()["userStatus"] == (
        "disable"
    )


def test_ready_condition_keeps_transition_time() -> None:
    first = ready_condition(True, "Registered", "ok", 1, {}, "2026-01-01T00:00:00Z")
    again = ready_condition(
        True, "Registered", "ok", 2, {"conditions": [first]}, "2026-02-01T00:00:00Z"
    )
    assert again["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = ready_condition(
        False, "Refused", "no", 2, {"conditions": [again]}, "2026-03-01T00:00:00Z"
    )
    assert (flipped["status"], flipped["lastTransitionTime"]) == ("False", "2026-03-01T00:00:00Z")


def test_crd_structural_and_chart_copy_same() -> None:
    path = "brokergroup.io_brokergroupusers.yaml"
    text = (ROOT / "crds" / path).read_text()
    assert (ROOT / "charts" / "brokergroup" / "crds" / path).read_text() == text
    crd = yaml.safe_load(text)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "x-kubernetes-preserve-unknown-fields" not in json.dumps(crd)
    spec = schema["properties"]["spec"]["properties"]
    from brokergroup_operator.users import ENTRY_FIELDS, SPEC_FIELDS

    assert sorted(spec) == sorted(SPEC_FIELDS)
    assert sorted(spec["policies"]["items"]["properties"]) == sorted(ENTRY_FIELDS)
    actions = spec["policies"]["items"]["properties"]["actions"]["items"]["enum"]
    from brokergroup_remoting.authorization import Action

    assert actions == [a.value for a in Action]
