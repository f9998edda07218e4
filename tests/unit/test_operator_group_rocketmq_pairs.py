"""Per-group RocketMQ key pairs in the objects a BrokerGroup owns (issue 19 item 4, DESIGN.md
§11 "client key pairs per BrokerGroup"; group_secrets.py).

The release's own pair (`rocketmq-credentials` of the release Secret) is the controllers'
admin pair: it never reaches a group's Secret. The group Secret `<bg>-credentials` holds the
group's broker pair under `rocketmq-credentials` (what stock brokers sign with, what built-in
brokers register with) and its client pair under `rocketmq-client-credentials`; the Secret
`<bg>-rocketmq-client` holds the client pair alone, for applications. Both pairs are derived
from the broker credential root with cluster = namespace and brokerName = group, the same
(cluster, brokerName) as the group's controller API tokens, and the controllers' own check
(`RocketMQKeys`) recognises them as the group's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from brokergroup_broker.core import cli_broker
from brokergroup_broker.core.remoting_keys import pair_mismatch
from brokergroup_controller.credentials import (
    Principal,
    RocketMQKeyPair,
    RocketMQKeys,
    Role,
    derive_rocketmq_pair,
)
from brokergroup_operator.model import group_labels
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_remoting.keys import read_key_file
from tests.unit.operator_worlds import group_objects

RELEASE_PAIR = RocketMQKeyPair("bg-release-0123456789", "release-s3cr3t-release-s3cr3t")
ROOT = "root-of-the-release-" * 2
SECRETS = OperatorSecrets("admin-token", ROOT, "ha-" * 11, RELEASE_PAIR.to_json())
BROKER_PAIR = derive_rocketmq_pair(ROOT, Role.BROKER, "prod", "orders")
CLIENT_PAIR = derive_rocketmq_pair(ROOT, Role.CLIENT, "prod", "orders")
ENGINES = ("brokergroup", "rocketmq")


def _objects(
    engine: str = "brokergroup", secrets: OperatorSecrets | None = SECRETS, **spec: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return group_objects(engine, secrets, **spec)


def _pair(line: str) -> RocketMQKeyPair:
    data = json.loads(line)
    return RocketMQKeyPair(data["accessKey"], data["secretKey"])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_group_secret_holds_the_groups_own_pairs_never_the_release_pair(engine: str) -> None:
    objects = _objects(engine)
    data = objects[("Secret", "orders-credentials")]["stringData"]
    assert _pair(data["rocketmq-credentials"]) == BROKER_PAIR
    assert _pair(data["rocketmq-client-credentials"]) == CLIENT_PAIR
    # One line each: a stock broker's properties file takes the broker pair verbatim.
    assert "\n" not in data["rocketmq-credentials"] + data["rocketmq-client-credentials"]
    rendered = json.dumps(list(objects.values()))
    assert RELEASE_PAIR.access_key not in rendered
    assert RELEASE_PAIR.secret_key not in rendered
    assert ROOT not in rendered


def test_the_controllers_check_recognises_the_pairs_as_the_groups() -> None:
    """What the name server and the controller remoting port do with a signature: the
    SecretKey they recompute from the AccessKey is the one in the Secret, and the
    principal is the group's broker or client, never the admin."""
    data = _objects()[("Secret", "orders-credentials")]["stringData"]
    keys = RocketMQKeys(RELEASE_PAIR, ROOT)
    for key, role in (("rocketmq-credentials", Role.BROKER), ("rocketmq-client-credentials", Role.CLIENT)):  # fmt: skip
        pair = _pair(data[key])
        assert keys.secret_for(pair.access_key) == pair.secret_key
        assert keys.principal(pair.access_key) == Principal(role, ("prod", "orders"))
    # The same brokerName in another namespace (another cluster) is another group.
    elsewhere = derive_rocketmq_pair(ROOT, Role.BROKER, "staging", "orders")
    assert _pair(data["rocketmq-credentials"]) != elsewhere


@pytest.mark.parametrize("engine", ENGINES)
def test_the_client_secret_holds_the_client_pair_alone(engine: str) -> None:
    objects = _objects(engine)
    secret = objects[("Secret", "orders-rocketmq-client")]
    assert secret["type"] == "Opaque"
    assert secret["stringData"] == {
        "accessKey": CLIENT_PAIR.access_key,
        "secretKey": CLIENT_PAIR.secret_key,
        "rocketmq-credentials": CLIENT_PAIR.to_json(),
    }
    meta = secret["metadata"]
    assert meta["namespace"] == "prod"
    assert group_labels("orders").items() <= meta["labels"].items()
    (owner,) = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "BrokerGroup",
        "orders",
        "uid-1",
        True,
    )
    # No broker credential of any kind: an application mounting it cannot register a
    # broker, act as one on the controllers, or replicate.
    text = json.dumps(secret)
    group = objects[("Secret", "orders-credentials")]["stringData"]
    for key in ("broker-credential", "client-credential", "ha-secret"):
        assert group[key] not in text
    assert BROKER_PAIR.secret_key not in text and BROKER_PAIR.access_key not in text
    # No pod of the group mounts it.
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    assert "orders-rocketmq-client" not in json.dumps(pod)


def test_the_client_secret_is_applied_after_the_group_secret() -> None:
    names = [name for kind, name in _objects() if kind == "Secret"]
    assert names == ["orders-credentials", "orders-rocketmq-client"]


def test_no_pairs_without_the_release_pair_or_with_the_users_own_secret() -> None:
    """Without the release pair the controllers open no RocketMQ port: no pairs, no client
    Secret (as before). With spec.controller.secretName the operator writes no group Secret:
    the user's holds the pair (`brokergroup admin derive-credential --rocketmq`)."""
    bare = _objects(secrets=OperatorSecrets("admin-token", ROOT, "ha-" * 11))
    data = bare[("Secret", "orders-credentials")]["stringData"]
    assert "rocketmq-credentials" not in data and "rocketmq-client-credentials" not in data
    assert ("Secret", "orders-rocketmq-client") not in bare
    for engine in ENGINES:
        own = _objects(engine, controller={"secretName": "mine"})
        assert [name for kind, name in own if kind == "Secret"] == []


def test_stock_brokers_mount_the_groups_broker_and_client_pairs_only() -> None:
    objects = _objects("rocketmq")
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    volumes = [v for v in pod["volumes"] if "secret" in v]
    assert [v["secret"]["secretName"] for v in volumes] == ["orders-credentials"] * 2
    # The broker pair to sign with; the client pair only as a user for the stock proxy.
    assert [v["secret"]["items"] for v in volumes] == [
        [{"key": "rocketmq-credentials", "path": "rocketmq-credentials"}],
        [{"key": "rocketmq-client-credentials", "path": "rocketmq-client-credentials"}],
    ]


def test_built_in_brokers_are_started_with_both_pairs_of_their_own_group(tmp_path: Path) -> None:
    """The pod's secret volume, written out as the kubelet would, read back through the
    paths of the broker command (parsed by the real broker CLI): the broker key file is the
    group's broker pair and the client key file its client pair, for the --cluster-name and
    --broker-name the same command gives (what the broker checks at start)."""
    objects = _objects()
    data = objects[("Secret", "orders-credentials")]["stringData"]
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"]]
    root = tmp_path / "pod"
    for item in volume["secret"]["items"]:
        target = root / mount["mountPath"].lstrip("/") / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[item["key"]])
    parser = argparse.ArgumentParser()
    cli_broker.register(parser.add_subparsers())
    args = parser.parse_args(pod["containers"][0]["command"][1:])
    assert (args.cluster_name, args.broker_name) == ("prod", "orders")
    for path, role, expected in (
        (args.remoting_key_file, Role.BROKER, BROKER_PAIR),
        (args.remoting_client_key_file, Role.CLIENT, CLIENT_PAIR),
    ):
        assert path is not None, role
        pair = read_key_file(str(root / str(path).lstrip("/")))
        assert (pair.access_key, pair.secret_key) == (expected.access_key, expected.secret_key)
        assert pair_mismatch(pair, role, args.cluster_name, args.broker_name) is None


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rotated_root_changes_the_pod_template_so_the_brokers_roll(engine: str) -> None:
    """docs/kubernetes.md: a new broker credential root rewrites every group's Secret and
    its brokers roll. The roll follows the StatefulSet's revision, so the pod template must
    change with the Secret's content, and only with it; the template names no secret."""

    def template(secrets: OperatorSecrets, **spec: Any) -> dict[str, Any]:
        sts = _objects(engine, secrets, **spec)[("StatefulSet", "orders")]
        result: dict[str, Any] = sts["spec"]["template"]
        return result

    rotated = OperatorSecrets(
        "admin-token", "another-root-of-it-" * 2, "ha-" * 11, SECRETS.rocketmq_credentials
    )
    new_ha = OperatorSecrets("admin-token", ROOT, "ah-" * 11, SECRETS.rocketmq_credentials)
    assert template(SECRETS) == template(SECRETS)
    assert template(rotated) != template(SECRETS)
    assert template(new_ha) != template(SECRETS)
    text = json.dumps(template(SECRETS))
    group_data = _objects(engine)[("Secret", "orders-credentials")]["stringData"]
    for value in group_data.values():
        assert value not in text
    own = template(SECRETS, controller={"secretName": "mine"})
    assert own == template(rotated, controller={"secretName": "mine"})  # the user's to roll


@pytest.mark.parametrize(
    ("client_key", "expected"),
    [
        ("client pair", (BROKER_PAIR, CLIENT_PAIR)),
        (None, (BROKER_PAIR, None)),
        ("broker pair", "--remoting-client-key-file"),
    ],
)
def test_a_users_own_secret_gives_the_brokers_its_client_pair_if_it_has_one(
    tmp_path: Path, client_key: str | None, expected: Any
) -> None:
    """spec.controller.secretName: the operator cannot read the user's Secret, so its
    optional rocketmq-client-credentials key is mounted through an optional volume of its
    own and the broker is told the file may be missing. Written out as the kubelet would (a
    missing key of an optional volume is no file), then read by the real broker CLI: the
    client pair when the Secret has it, the broker pair alone when not, and a clear refusal
    when the key holds the wrong role's pair."""
    user_secret = {
        "broker-credential": "x",
        "ha-secret": "y",
        "rocketmq-credentials": BROKER_PAIR.to_json(),
    }
    if client_key is not None:
        pair = CLIENT_PAIR if client_key == "client pair" else BROKER_PAIR
        user_secret["rocketmq-client-credentials"] = pair.to_json()
    objects = _objects(controller={"secretName": "mine"})
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    root = tmp_path / "pod"
    for volume in (v for v in pod["volumes"] if "secret" in v):
        assert volume["secret"]["secretName"] == "mine"
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        for item in volume["secret"]["items"]:
            if item["key"] not in user_secret:
                assert volume["secret"].get("optional") is True, item  # else: no pod
                continue
            target = root / mount["mountPath"].lstrip("/") / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(user_secret[item["key"]])
    parser = argparse.ArgumentParser()
    cli_broker.register(parser.add_subparsers())
    args = parser.parse_args(container["command"][1:])
    for name in ("remoting_key_file", "remoting_client_key_file"):
        setattr(args, name, root / str(getattr(args, name)).lstrip("/"))
    pairs = cli_broker._remoting_pairs(args)
    if isinstance(expected, str):
        assert isinstance(pairs, str) and pairs.startswith(expected), pairs
        assert "client" in pairs and BROKER_PAIR.secret_key not in pairs
        return
    assert not isinstance(pairs, str), pairs
    got = tuple(None if p is None else (p.access_key, p.secret_key) for p in pairs)
    assert got == tuple(None if p is None else (p.access_key, p.secret_key) for p in expected)


def test_an_optional_client_key_needs_the_client_key_file() -> None:
    parser = argparse.ArgumentParser()
    cli_broker.register(parser.add_subparsers())
    command = "broker --cluster-name prod --broker-name orders --data-dir /d"
    command += " --controller-addresses c:9878 --remoting-key-file /k"
    args = parser.parse_args([*command.split(), "--remoting-client-key-optional"])
    assert cli_broker._remoting_pairs(args) == (
        "--remoting-client-key-optional needs --remoting-client-key-file"
    )
