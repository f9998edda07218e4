"""`spec.engine: rocketmq` runs the stock RocketMQ proxy and its timer wheel (issue 34 item 5,
issue 35 item 3; rocketmq_proxy.py, rocketmq_config.py).

- a group of engine rocketmq owns ConfigMap, Service and Deployment `<bg>-proxy` (none for the
  built-in engine, none with spec.rocketmq.proxy.enabled false); the proxy's pods are outside
  the group's pod selector (the planners, PDB and headless Service never see them) and its
  Service selects exactly them, on the gRPC and remoting ports;
- rmq-proxy.json: cluster mode, cluster = namespace, every node's name server, signing and
  authentication on, no secret in the ConfigMap; the launcher run with /bin/sh adds the
  group's client pair and execs ProxyStartup on the written file (owner-only, valid JSON);
- the brokers keep the group's client pair as their one extra user (initAuthenticationUser,
  RocketMQ's User JSON), which the proxy's signature checks read;
- broker.conf: timerWheelEnable true by default, spec.rocketmq's delay levels, timer and
  transaction-check settings by RocketMQ's names; bad values refused naming the field.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from brokergroup_operator.model import group_labels
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.rocketmq_config import (
    CLIENT_CREDENTIALS_KEY,
    CREDENTIALS_KEY,
    RocketMQSpecError,
    broker_properties,
    launch_script,
    render,
)
from brokergroup_operator.rocketmq_proxy import launch_script as proxy_launch_script
from tests.unit.operator_worlds import APIS, group_objects

ROOT = Path(__file__).resolve().parents[2]
PAIR = '{"accessKey":"bg-0123456789","secretKey":"s3cr3t-s3cr3t"}'
SECRETS = OperatorSecrets("admin", "root-" * 8, "ha-" * 11, PAIR)
CLIENT_PAIR = '{"accessKey":"bg1.client.cHJvZA.b3JkZXJz","secretKey":"c1i3nt-s3cr3t"}'


def _objects(engine: str = "rocketmq", **spec: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return group_objects(engine, SECRETS, **spec)


def _run(script: str, moved: dict[str, Path]) -> str:
    """Run a launcher with /bin/sh, its directories moved under tmp and `java` an echo."""
    pattern = "|".join(re.escape(k) for k in sorted(moved, key=len, reverse=True))
    text = re.sub(
        rf"(?<![\w/])({pattern})(?=[/\s]|$)", lambda m: str(moved[m.group(1)]), script
    ).replace("exec java", "exec echo java")
    return subprocess.run(
        ["/bin/sh", "-c", text],
        env={"PATH": os.environ["PATH"], "POD_IP": "10.244.0.7"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_rocketmq_group_owns_its_proxy_and_a_builtin_group_none() -> None:
    objects = _objects()
    assert [k for k in objects if k[1] == "orders-proxy"] == [
        ("ConfigMap", "orders-proxy"),
        ("Service", "orders-proxy"),
        ("Deployment", "orders-proxy"),
    ]
    assert not [k for k in _objects("brokergroup") if k[1] == "orders-proxy"]
    assert not [
        k for k in _objects(rocketmq={"proxy": {"enabled": False}}) if k[1] == "orders-proxy"
    ]


def test_the_proxy_pods_are_outside_the_groups_selector_and_its_service_selects_them() -> None:
    objects = _objects(rocketmq={"proxy": {"replicas": 2, "heapSize": "384m"}})
    deployment = objects[("Deployment", "orders-proxy")]
    service = objects[("Service", "orders-proxy")]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    group = group_labels("orders")
    assert not group.items() <= pod_labels.items()  # no planner, PDB or Service of the group
    assert deployment["spec"]["selector"]["matchLabels"] == pod_labels
    assert service["spec"]["selector"] == pod_labels
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == [
        ("grpc", 8081),
        ("remoting", 8080),
    ]
    assert deployment["spec"]["replicas"] == 2
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "brokergroup-rocketmq:5.3.3"
    assert "exec java -Xms384m -Xmx384m" in container["command"][2]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["readinessProbe"]["tcpSocket"] == {"port": 8081}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["client-pair"]["secret"]["secretName"] == "orders-credentials"
    assert volumes["client-pair"]["secret"]["items"] == [
        {"key": CLIENT_CREDENTIALS_KEY, "path": CLIENT_CREDENTIALS_KEY}
    ]
    assert volumes["config"]["configMap"]["name"] == "orders-proxy"


def test_the_proxy_config_names_the_name_servers_and_holds_no_secret() -> None:
    data = _objects()[("ConfigMap", "orders-proxy")]["data"]
    assert list(data) == ["rmq-proxy.json"]
    settings = json.loads(data["rmq-proxy.json"])
    assert settings["proxyMode"] == "cluster"
    assert settings["rocketMQClusterName"] == "prod"  # cluster = namespace, as the brokers
    assert settings["namesrvAddr"] == ";".join(
        a.replace(":9878", ":9876") for a in APIS
    )  # every controller node's name server
    assert (settings["grpcServerPort"], settings["remotingListenPort"]) == (8081, 8080)
    assert settings["enableAclRpcHookForClusterMode"] is True
    assert settings["enableTopicMessageTypeCheck"] is False  # topics carry no attributes
    assert settings["authenticationEnabled"] is True
    assert settings["authenticationMetadataProvider"].endswith(
        "ProxyAuthenticationMetadataProvider"
    )
    assert "innerClientAuthenticationCredentials" not in settings
    assert "secretKey" not in data["rmq-proxy.json"]


def test_the_proxy_launcher_adds_the_client_pair_and_runs_the_proxy(tmp_path: Path) -> None:
    config, client, tmp = tmp_path / "proxy", tmp_path / "client", tmp_path / "tmp"
    for d in (config, client, tmp):
        d.mkdir()
    data = _objects()[("ConfigMap", "orders-proxy")]["data"]
    (config / "rmq-proxy.json").write_text(data["rmq-proxy.json"])
    (client / CLIENT_CREDENTIALS_KEY).write_text(CLIENT_PAIR)  # as the kubelet writes it
    moved = {"/etc/rocketmq/proxy": config, "/etc/rocketmq/client": client, "/tmp": tmp}
    out = _run(proxy_launch_script("512m"), moved).split()
    written = tmp / "rmq-proxy.json"
    assert out[0] == "java" and out[-4:] == ["-pc", str(written), "-pm", "cluster"]
    assert "org.apache.rocketmq.proxy.ProxyStartup" in out
    assert written.stat().st_mode & 0o077 == 0  # it holds the secret key: owner only
    settings = json.loads(written.read_text())
    assert json.loads(settings.pop("innerClientAuthenticationCredentials")) == json.loads(
        CLIENT_PAIR
    )
    assert settings == json.loads(data["rmq-proxy.json"])


def test_the_brokers_keep_the_client_pair_as_their_user(tmp_path: Path) -> None:
    config, secrets, client, tmp = (tmp_path / d for d in ("config", "secrets", "client", "tmp"))
    for d in (config, secrets, client, tmp):
        d.mkdir()
    props = broker_properties(
        cluster_name="prod", broker_name="orders", spec={}, controller_addresses=APIS
    )
    (config / "broker.conf").write_text(render(props))
    (secrets / CREDENTIALS_KEY).write_text(PAIR)
    moved = {
        "/etc/rocketmq/config": config,
        "/etc/rocketmq/secrets": secrets,
        "/etc/rocketmq/client": client,
        "/tmp": tmp,
    }
    _run(launch_script("256m"), moved)
    lines = dict(x.split("=", 1) for x in (tmp / "broker.conf").read_text().splitlines())
    assert "initAuthenticationUser" not in lines  # no client pair mounted: no user
    (client / CLIENT_CREDENTIALS_KEY).write_text(CLIENT_PAIR)
    _run(launch_script("256m"), moved)
    lines = dict(x.split("=", 1) for x in (tmp / "broker.conf").read_text().splitlines())
    assert json.loads(lines["initAuthenticationUser"]) == {
        "username": "bg1.client.cHJvZA.b3JkZXJz",
        "password": "c1i3nt-s3cr3t",
    }
    assert lines["innerClientAuthenticationCredentials"] == PAIR


def _props(rocketmq: dict[str, Any]) -> dict[str, str]:
    return broker_properties(
        cluster_name="prod",
        broker_name="orders",
        spec={"rocketmq": rocketmq},
        controller_addresses=APIS,
    )


def test_the_timer_wheel_runs_and_the_shared_settings_reach_broker_conf() -> None:
    assert _props({})["timerWheelEnable"] == "true"
    assert not {"messageDelayLevel", "transactionCheckInterval"} & set(_props({}))
    props = _props(
        {
            "timerWheelEnable": False,
            "messageDelayLevel": "1s 3s 1m 2h 1d",
            "timerMaxDelaySec": 86400,
            "transactionCheckInterval": 5000,
            "transactionCheckMax": 5,
            "transactionTimeOut": 4000,
        }
    )
    assert {
        k: props[k]
        for k in (
            "timerWheelEnable",
            "messageDelayLevel",
            "timerMaxDelaySec",
            "transactionCheckInterval",
            "transactionCheckMax",
            "transactionTimeOut",
        )
    } == {
        "timerWheelEnable": "false",
        "messageDelayLevel": "1s 3s 1m 2h 1d",
        "timerMaxDelaySec": "86400",
        "transactionCheckInterval": "5000",
        "transactionCheckMax": "5",
        "transactionTimeOut": "4000",
    }


@pytest.mark.parametrize(
    ("rocketmq", "message"),
    [
        ({"timerWheelEnable": "yes"}, "spec.rocketmq.timerWheelEnable"),
        ({"messageDelayLevel": "1s 5x"}, "spec.rocketmq.messageDelayLevel"),
        ({"messageDelayLevel": "1s  5s"}, "spec.rocketmq.messageDelayLevel"),
        ({"timerMaxDelaySec": 0}, "spec.rocketmq.timerMaxDelaySec"),
        ({"transactionCheckInterval": True}, "spec.rocketmq.transactionCheckInterval"),
        ({"transactionCheckMax": "15"}, "spec.rocketmq.transactionCheckMax"),
        ({"proxy": {"replicas": 0}}, "spec.rocketmq.proxy.replicas"),
        ({"proxy": {"heapSize": "1g -XX:Evil"}}, "spec.rocketmq.proxy.heapSize"),
        ({"proxy": {"enabled": "no"}}, "spec.rocketmq.proxy.enabled"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(rocketmq: dict[str, Any], message: str) -> None:
    with pytest.raises(RocketMQSpecError, match=message):
        _props(rocketmq)


def test_the_crd_takes_the_same_settings() -> None:
    for path in ("crds", "charts/brokergroup/crds"):
        crd = yaml.safe_load((ROOT / path / "brokergroup.io_brokergroups.yaml").read_text())
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        rocketmq = spec["properties"]["rocketmq"]["properties"]
        assert rocketmq["timerWheelEnable"]["default"] is True
        for key in ("timerMaxDelaySec", "transactionCheckInterval", "transactionCheckMax",
                    "transactionTimeOut"):  # fmt: skip
            assert rocketmq[key]["type"] == "integer" and rocketmq[key]["minimum"] == 1, key
        pattern = rocketmq["messageDelayLevel"]["pattern"]
        assert re.fullmatch(pattern.strip("^$"), "1s 5s 10m 2h")
        proxy = rocketmq["proxy"]["properties"]
        assert (proxy["enabled"]["default"], proxy["replicas"]["default"]) == (True, 1)
        assert proxy["heapSize"]["default"] == "512m"
