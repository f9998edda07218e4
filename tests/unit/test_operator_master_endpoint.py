"""The stable master endpoint of a BrokerGroup for stock RocketMQ clients (issue 19 item 5,
issue 20 item 4; networking.py).

The name servers name the group's master Service `<bg>` as brokerId 0 (the controller's
`--namesrv-master-address-template`, default `{broker}.{cluster}.svc:{port}`), where
`{port}` is the port of the master's own registered remoting address. So:
- the master Service serves that port under the same number (targetPort = port), for the
  built-in broker its remoting port (client port + 3 = 10914), for a stock broker its
  listen port (10911, already the client port);
- the NetworkPolicy admits it;
- built-in brokers open the remoting port: the group Secret carries the group's key pairs,
  the pods mount it, and the broker command names it and the name servers (every
  controller node's stable name, port 9876), so the brokers register there.
The commands are parsed with the real broker CLI.
"""

from __future__ import annotations

import argparse
from typing import Any

from brokergroup_broker.core import cli_broker
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator.release_secret import OperatorSecrets
from tests.unit.operator_worlds import group_objects

PAIR = '{"accessKey":"bg-0123456789","secretKey":"s3cr3t-s3cr3t-s3cr3t"}'
SECRETS = OperatorSecrets("admin", "root-" * 8, "ha-" * 11, PAIR)
NAMESRVS = "bg-controller-0.bg-controller.ops.svc:9876;bg-controller-1.bg-controller.ops.svc:9876"


def _objects(
    engine: str = "brokergroup", secrets: OperatorSecrets | None = SECRETS, **spec: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return group_objects(engine, secrets, **spec)


def _broker_args(command: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_broker.register(parser.add_subparsers())
    return parser.parse_args(command[1:])


def _container(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    return dict(pod["containers"][0])


def test_built_in_brokers_open_the_remoting_port_and_register_with_the_name_servers() -> None:
    objects = _objects()
    secret = objects[("Secret", "orders-credentials")]
    # The group's broker pair (test_operator_group_rocketmq_pairs.py), never the release's.
    assert (
        secret["stringData"]["rocketmq-credentials"]
        == derive_rocketmq_pair("root-" * 8, Role.BROKER, "prod", "orders").to_json()
    )
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["items"] == [
        {"key": "broker-credential", "path": "broker-credential"},
        {"key": "ha-secret", "path": "ha-secret"},
        {"key": "rocketmq-credentials", "path": "rocketmq-credentials"},
        {"key": "rocketmq-client-credentials", "path": "rocketmq-client-credentials"},
    ]
    container = _container(objects)
    args = _broker_args(container["command"])
    assert str(args.remoting_key_file) == "/etc/brokergroup/secrets/rocketmq-credentials"
    assert (
        str(args.remoting_client_key_file) == "/etc/brokergroup/secrets/rocketmq-client-credentials"
    )
    assert args.namesrv_addresses == NAMESRVS
    # The CLI's default remoting port (client port + 3), advertised on the pod IP.
    assert (args.client_port, args.remoting_port, args.advertise_address) == (
        10911,
        None,
        "$(POD_IP)",
    )
    assert {"name": "remoting", "containerPort": 10914, "protocol": "TCP"} in container["ports"]


def test_the_master_service_serves_the_registered_remoting_port_under_its_own_number() -> None:
    builtin = _objects()[("Service", "orders")]["spec"]
    assert builtin["selector"]["brokergroup.io/role"] == "master"
    assert builtin["ports"] == [
        {"name": "client", "port": 10911, "targetPort": 10911, "protocol": "TCP"},
        {"name": "remoting", "port": 10914, "targetPort": 10914, "protocol": "TCP"},
        # The RocketMQ 5 SDKs' stable endpoint: the master's gRPC port (docs/grpc.md).
        {"name": "grpc", "port": 8081, "targetPort": 10915, "protocol": "TCP"},
    ]
    # A stock broker registers its listen port: the client port, already served.
    stock = _objects("rocketmq")[("Service", "orders")]["spec"]
    assert stock["ports"] == [
        {
            "name": "client",
            "port": rmq.LISTEN_PORT,
            "targetPort": rmq.LISTEN_PORT,
            "protocol": "TCP",
        }
    ]


def test_the_network_policy_admits_clients_on_the_remoting_port() -> None:
    ingress = _objects()[("NetworkPolicy", "orders")]["spec"]["ingress"]
    clients = ingress[1]
    assert "from" not in clients
    assert clients["ports"] == [
        {"port": 10911, "protocol": "TCP"},
        {"port": 10914, "protocol": "TCP"},
        {"port": 10915, "protocol": "TCP"},  # gRPC, signed like the remoting port
    ]
    # The HTTP port (status, consumer offsets) only from the group's own pods.
    assert ingress[2]["ports"] == [{"port": 10913, "protocol": "TCP"}]
    assert ingress[2]["from"] == ingress[0]["from"]


def test_without_a_key_pair_the_remoting_port_stays_closed() -> None:
    """An operator given no RocketMQ key pair (no release Secret key, no file) still runs
    built-in groups, as before: nothing unsigned is ever opened."""
    bare = OperatorSecrets("admin", "root-" * 8, "ha-" * 11)
    objects = _objects(secrets=bare)
    assert "rocketmq-credentials" not in objects[("Secret", "orders-credentials")]["stringData"]
    args = _broker_args(_container(objects)["command"])
    assert (
        args.remoting_key_file,
        args.remoting_client_key_file,
        args.namesrv_addresses,
        args.insecure_no_remoting_auth,
    ) == (None, None, "", False)
    assert [p["name"] for p in _objects(secrets=bare)[("Service", "orders")]["spec"]["ports"]] == [
        "client"
    ]


def test_the_users_own_secret_must_carry_the_key_pair() -> None:
    """spec.controller.secretName: the operator cannot read it, so the pods mount its
    rocketmq-credentials key as they do for the stock engine (docs/operations.md)."""
    objects = _objects(controller={"secretName": "mine"})
    assert ("Secret", "orders-credentials") not in objects
    pod = objects[("StatefulSet", "orders")]["spec"]["template"]["spec"]
    volume, client_pair = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "mine"
    assert {"key": "rocketmq-credentials", "path": "rocketmq-credentials"} in volume["secret"][
        "items"
    ]
    assert {"key": "rocketmq-client-credentials", "path": "rocketmq-client-credentials"} not in (
        volume["secret"]["items"]
    )  # the user's Secret need not hold the client pair: it has a volume of its own
    assert client_pair["secret"]["secretName"] == "mine"
    assert client_pair["secret"]["optional"] is True
    args = _broker_args(_container(objects)["command"])
    assert args.namesrv_addresses == NAMESRVS
    assert str(args.remoting_client_key_file).startswith("/etc/brokergroup/client-pair/")
    assert args.remoting_client_key_optional
