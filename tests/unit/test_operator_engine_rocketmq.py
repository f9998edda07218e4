"""The objects a BrokerGroup of `spec.engine: rocketmq` owns (issue 20 item 4; containers.py).

Only what runs in the pods differs from the built-in engine: the ConfigMap holds the stock
broker's broker.conf (rocketmq_config.py), the container runs the JVM from the RocketMQ
image with TCP probes, a read-only root filesystem and an emptyDir for tmp and logs, and the
group's Secret carries the group's RocketMQ broker pair. Everything the planners, the role
labels and the clients rely on (names, labels, selectors, the master Service, the PVC, the
StatefulSet's OnDelete/Parallel policies) is the same as the built-in engine's, checked
here object by object.
"""

from __future__ import annotations

from typing import Any

import pytest

from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_operator.model import Engine, group_labels
from brokergroup_operator.objects import owned_objects
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.spec import GroupContext, SpecError
from tests.unit.operator_worlds import APIS, group_context

PAIR = '{"accessKey":"bg-0123456789","secretKey":"s3cr3t-s3cr3t"}'
SECRETS = OperatorSecrets("admin", "root-" * 8, "ha-" * 11, PAIR)


def _ctx(
    engine: str = "rocketmq", secrets: OperatorSecrets | None = SECRETS, **spec: Any
) -> GroupContext:
    return group_context(engine, secrets, **spec)


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        out.setdefault(o["kind"], []).append(o)
    return out


def test_the_config_map_holds_the_stock_brokers_config() -> None:
    ctx = _ctx(rocketmq={"flushDiskType": "ASYNC_FLUSH"})
    (cm,) = [
        c for c in _by_kind(owned_objects(ctx, 3))["ConfigMap"] if c["data"].get("broker.conf")
    ]
    assert list(cm["data"]) == ["broker.conf"]
    conf = dict(line.split("=", 1) for line in cm["data"]["broker.conf"].splitlines())
    assert conf["brokerClusterName"] == "prod" and conf["brokerName"] == "orders"
    assert conf["enableControllerMode"] == "true"
    assert conf["controllerAddr"] == (
        "bg-controller-0.bg-controller.ops.svc:9879;bg-controller-1.bg-controller.ops.svc:9879"
    )
    assert conf["flushDiskType"] == "ASYNC_FLUSH"
    assert "innerClientAuthenticationCredentials" not in conf  # a secret: never in a ConfigMap
    assert "s3cr3t" not in cm["data"]["broker.conf"]


def test_the_pods_run_the_jvm_read_only_and_non_root() -> None:
    (sts,) = _by_kind(owned_objects(_ctx(rocketmq={"heapSize": "512m"}), 3))["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "brokergroup-rocketmq:5.3.3"
    assert container["command"][:2] == ["sh", "-c"]
    script = container["command"][2]
    assert "exec java -Xms512m -Xmx512m" in script and "BrokerStartup" in script
    assert "mqbroker" not in script and "runbroker" not in script
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert container["readinessProbe"]["tcpSocket"] == {"port": 10911}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts == {
        "/data": "data",
        "/etc/rocketmq/config": "config",
        "/etc/rocketmq/secrets": "secrets",
        "/etc/rocketmq/client": "client-pair",
        "/tmp": "tmp",
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    # The client pair (the stock proxy's users) from an optional volume: a user's own
    # Secret without it still starts the brokers.
    assert volumes["client-pair"]["secret"]["items"] == [
        {"key": "rocketmq-client-credentials", "path": "rocketmq-client-credentials"}
    ]
    assert volumes["client-pair"]["secret"]["optional"] is True
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
    assert volumes["secrets"]["secret"]["items"] == [
        {"key": "rocketmq-credentials", "path": "rocketmq-credentials"}
    ]
    assert {e["name"] for e in container["env"]} == {"POD_IP", "POD_NAME"}


def test_the_group_secret_carries_the_groups_broker_pair_for_both_engines() -> None:
    group_secret, _client = _by_kind(owned_objects(_ctx(), 3))["Secret"]
    pair = derive_rocketmq_pair(SECRETS.broker_credential_root or "", Role.BROKER, "prod", "orders")
    assert group_secret["stringData"]["rocketmq-credentials"] == pair.to_json() != PAIR
    # The built-in engine's brokers sign their registrations with the same pair
    # (test_operator_group_rocketmq_pairs.py).
    builtin, _client = _by_kind(owned_objects(_ctx("brokergroup"), 3))["Secret"]
    assert builtin["stringData"]["rocketmq-credentials"] == pair.to_json()


def test_what_planners_and_clients_rely_on_is_the_same_for_both_engines() -> None:
    everything = owned_objects(_ctx(), 3)
    # The group's stock proxy is its own (rocketmq_proxy.py, test_operator_rocketmq_proxy.py).
    stock = _by_kind([o for o in everything if o["metadata"]["name"] != "orders-proxy"])
    kept = [o for objects in stock.values() for o in objects]
    assert sorted(o["kind"] for o in everything if o not in kept) == [
        "ConfigMap", "Deployment", "Service",
    ]  # fmt: skip
    builtin = _by_kind(owned_objects(_ctx("brokergroup"), 3))
    assert stock.keys() == builtin.keys()
    for kind in stock:
        assert [o["metadata"] for o in stock[kind]] == [o["metadata"] for o in builtin[kind]]
    s, b = stock["StatefulSet"][0]["spec"], builtin["StatefulSet"][0]["spec"]
    for key in ("replicas", "serviceName", "podManagementPolicy", "updateStrategy", "selector"):
        assert s[key] == b[key], key
    assert s["volumeClaimTemplates"] == b["volumeClaimTemplates"]
    assert s["template"]["metadata"]["labels"] == group_labels("orders")
    # The master Service: role=master, the client port (10911 for both engines).
    master_stock = next(x for x in stock["Service"] if x["metadata"]["name"] == "orders")
    master_builtin = next(x for x in builtin["Service"] if x["metadata"]["name"] == "orders")
    assert master_stock["spec"]["selector"] == master_builtin["spec"]["selector"]
    assert master_stock["spec"]["ports"] == master_builtin["spec"]["ports"][:1]
    # The built-in broker's remoting port has a number of its own (10914): only its
    # NetworkPolicy admits it (test_operator_master_endpoint.py).
    stock_policy, builtin_policy = stock["NetworkPolicy"][0], builtin["NetworkPolicy"][0]
    assert stock_policy["spec"]["ingress"][0] == builtin_policy["spec"]["ingress"][0]


def test_a_config_change_makes_a_new_pod_template() -> None:
    """The config hash annotation: a changed broker.conf rolls the pods (slaves first)."""

    def annotations(**spec: Any) -> dict[str, str]:
        (sts,) = _by_kind(owned_objects(_ctx(**spec), 3))["StatefulSet"]
        return dict(sts["spec"]["template"]["metadata"]["annotations"])

    assert annotations() == annotations()
    assert annotations() != annotations(rocketmq={"autoCreateTopicEnable": True})


@pytest.mark.parametrize(
    ("ctx", "message"),
    [
        (lambda: _ctx(config={"maxTopics": 5}), "spec.config holds settings of the built-in"),
        (lambda: _ctx(rocketmq={"flushDiskType": "NEVER"}), "spec.rocketmq.flushDiskType"),
        (
            lambda: _ctx("brokergroup", rocketmq={"heapSize": "1g"}),
            "set spec.engine to rocketmq",
        ),
        (lambda: _ctx("kafka"), "spec.engine must be one of brokergroup, rocketmq"),
        (
            lambda: _ctx(secrets=OperatorSecrets("admin", "r" * 32, "h" * 32)),
            "lacks rocketmq-credentials",
        ),
    ],
)
def test_the_operator_refuses_what_the_crd_refuses(ctx: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ctx().validate()


def test_engine_defaults_to_the_built_in_broker() -> None:
    assert _ctx("").engine is Engine.BROKERGROUP
    ctx = GroupContext("g", "ns", "u", {}, "brokergroup:dev", APIS, SECRETS)
    assert ctx.engine is Engine.BROKERGROUP and ctx.image == "brokergroup:dev"
