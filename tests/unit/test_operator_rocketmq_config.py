"""The broker config of `spec.engine: rocketmq` (issue 20 item 4; rocketmq_config.py).

What a stock RocketMQ 5.3 broker in controller mode needs from the spec: the broker set's
key (cluster = namespace, brokerName = group, as the built-in engine, so the operator's
controller lookups stay the same), controller mode with every controller node's remoting
port by its stable name, the name servers, the store on the PVC, the HA settings mapped to
RocketMQ's names, and the CRD's rules again for spec.rocketmq. The launcher script is
checked by running it with /bin/sh on files in tmp_path (java replaced by `echo`, so the
generated file and argv are read back). tests/integration/test_rocketmq_engine_config.py
has the stock broker itself read the file.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from brokergroup_operator.rocketmq_config import (
    CREDENTIALS_KEY,
    HA_PROPERTIES,
    RocketMQSettings,
    RocketMQSpecError,
    broker_properties,
    controller_addr,
    java_command,
    launch_script,
    namesrv_addr,
    render,
)

ROOT = Path(__file__).resolve().parents[2]
APIS = (
    "bg-controller-0.bg-controller.ns.svc.cluster.local:9878",
    "bg-controller-1.bg-controller.ns.svc.cluster.local:9878",
    "bg-controller-2.bg-controller.ns.svc.cluster.local:9878",
)


def _props(spec: dict[str, Any] | None = None) -> dict[str, str]:
    return broker_properties(
        cluster_name="ns", broker_name="orders", spec=spec or {}, controller_addresses=APIS
    )


def test_controller_mode_with_stable_controller_names_and_every_name_server() -> None:
    props = _props()
    assert props["brokerClusterName"] == "ns" and props["brokerName"] == "orders"
    assert props["enableControllerMode"] == "true" and props["brokerId"] == "-1"
    assert props["controllerAddr"] == (
        "bg-controller-0.bg-controller.ns.svc.cluster.local:9879;"
        "bg-controller-1.bg-controller.ns.svc.cluster.local:9879;"
        "bg-controller-2.bg-controller.ns.svc.cluster.local:9879"
    )
    assert props["namesrvAddr"] == props["controllerAddr"].replace(":9879", ":9876")
    # Paths are the launcher's (the pod's volumes), not the ConfigMap's.
    assert not {"storePathRootDir", "storePathCommitLog", "authConfigPath"} & set(props)


def test_safe_defaults_differ_from_rocketmqs_where_loss_is_at_stake() -> None:
    props = _props()
    assert props["allAckInSyncStateSet"] == "true"  # RocketMQ: false
    assert props["flushDiskType"] == "SYNC_FLUSH"  # RocketMQ: ASYNC_FLUSH
    assert props["autoCreateTopicEnable"] == "false"  # RocketMQ: true
    assert props["mappedFileSizeCommitLog"] == str(1 << 30)


def test_spec_rocketmq_and_spec_ha_reach_the_broker_by_rocketmqs_names() -> None:
    props = _props(
        {
            "rocketmq": {
                "flushDiskType": "ASYNC_FLUSH",
                "autoCreateTopicEnable": True,
                "mappedFileSizeCommitLog": 4 << 20,
                "topicQueueNums": 4,
            },
            "ha": {
                "allAckInSyncStateSet": False,
                "inSyncReplicas": 2,
                "minInSyncReplicas": 2,
                "haMaxTimeSlaveNotCatchUpMs": 7000,
                "heartbeatIntervalMs": 400,
                "heartbeatTimeoutMs": 2500,
                "masterLeaseMs": 1500,  # no stock equivalent: not passed
                "slaveTimeoutMs": 3000,
            },
        }
    )
    assert props["flushDiskType"] == "ASYNC_FLUSH"
    assert props["autoCreateTopicEnable"] == "true"
    assert props["mappedFileSizeCommitLog"] == str(4 << 20)
    assert props["defaultTopicQueueNums"] == "4"
    assert props["allAckInSyncStateSet"] == "false"
    assert (props["inSyncReplicas"], props["minInSyncReplicas"]) == ("2", "2")
    assert props["haMaxTimeSlaveNotCatchup"] == "7000"
    assert props["brokerHeartbeatInterval"] == "400"
    assert props["controllerHeartBeatTimeoutMills"] == "2500"
    assert not {"masterLeaseMs", "slaveTimeoutMs"} & set(props)


def test_every_mapped_ha_field_is_a_field_of_spec_ha() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "brokergroup.io_brokergroups.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(HA_PROPERTIES) <= set(spec["properties"]["ha"]["properties"])
    # The CRD's spec.rocketmq defaults are RocketMQSettings' defaults.
    rocketmq = spec["properties"]["rocketmq"]["properties"]
    defaults = RocketMQSettings()
    assert {k: v["default"] for k, v in rocketmq.items() if "default" in v} == {
        "autoCreateTopicEnable": defaults.auto_create_topic_enable,
        "flushDiskType": defaults.flush_disk_type,
        "mappedFileSizeCommitLog": defaults.mapped_file_size_commit_log,
        "heapSize": defaults.heap_size,
        "topicQueueNums": defaults.topic_queue_nums,
        "timerWheelEnable": defaults.timer_wheel_enable,
        "aclEnabled": defaults.acl_enabled,
    }


@pytest.mark.parametrize(
    ("rocketmq", "message"),
    [
        ({"flushDiskType": "SOMETIMES"}, "spec.rocketmq.flushDiskType must be one of"),
        ({"autoCreateTopicEnable": "yes"}, "spec.rocketmq.autoCreateTopicEnable"),
        ({"mappedFileSizeCommitLog": 4096}, "spec.rocketmq.mappedFileSizeCommitLog"),
        ({"mappedFileSizeCommitLog": True}, "spec.rocketmq.mappedFileSizeCommitLog"),
        ({"heapSize": "1024"}, "spec.rocketmq.heapSize"),
        ({"heapSize": "0g"}, "spec.rocketmq.heapSize"),
        ({"heapSize": "1g -XX:+Evil"}, "spec.rocketmq.heapSize"),
        ({"topicQueueNums": 0}, "spec.rocketmq.topicQueueNums"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(rocketmq: dict[str, Any], message: str) -> None:
    with pytest.raises(RocketMQSpecError, match=message):
        _props({"rocketmq": rocketmq})


def test_controller_addresses_must_be_host_port_and_repeats_collapse() -> None:
    assert controller_addr(["a:9878", "a:9999", "b:9878"]) == "a:9879;b:9879"
    assert namesrv_addr(["10.0.0.1:9878"]) == "10.0.0.1:9876"
    with pytest.raises(RocketMQSpecError, match="not host:port"):
        controller_addr(["justahost"])


def test_render_refuses_what_a_properties_file_would_misread() -> None:
    assert render({"a": "1", "b": "x;y:z"}) == "a=1\nb=x;y:z\n"
    for bad in ("x\ny=1", "c:\\temp", " padded"):
        with pytest.raises(RocketMQSpecError):
            render({"k": bad})


def test_java_command_uses_the_images_jars_and_no_script() -> None:
    argv = java_command("512m", "/tmp/broker.conf")
    assert argv[0] == "java" and "-Xmx512m" in argv and "-Xms512m" in argv
    assert argv[argv.index("-cp") + 1] == "/opt/rocketmq/lib/*"
    assert argv[-3:] == ["org.apache.rocketmq.broker.BrokerStartup", "-c", "/tmp/broker.conf"]
    assert not any(a.endswith(".sh") or "mqbroker" in a for a in argv)


def test_launch_script_writes_the_pods_file_and_execs_the_jvm(tmp_path: Path) -> None:
    """Run the script with /bin/sh, its paths moved under tmp_path and `java` an echo."""
    config, secrets, tmp = tmp_path / "config", tmp_path / "secrets", tmp_path / "tmp"
    for d in (config, secrets, tmp):
        d.mkdir()
    (config / "broker.conf").write_text(render(_props()))
    (secrets / CREDENTIALS_KEY).write_text('{"accessKey":"ak-123456","secretKey":"sk-abcdef"}')
    moved = {"/etc/rocketmq/config": config, "/etc/rocketmq/secrets": secrets, "/tmp": tmp}
    script = re.sub(
        r"(?<![\w/])(/etc/rocketmq/config|/etc/rocketmq/secrets|/tmp)(?=[/\s]|$)",
        lambda m: str(moved[m.group(1)]),
        launch_script("256m"),
    ).replace("exec java", "exec echo java")
    out = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"PATH": os.environ["PATH"], "POD_IP": "10.244.0.7"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split()[0] == "java" and out.split()[-1] == f"{tmp}/broker.conf"
    written = tmp / "broker.conf"
    assert written.stat().st_mode & 0o077 == 0  # it holds the secret key: owner only
    lines = dict(line.split("=", 1) for line in written.read_text().splitlines() if "=" in line)
    assert lines["brokerIP1"] == lines["brokerIP2"] == "10.244.0.7"
    assert lines["innerClientAuthenticationCredentials"] == (
        '{"accessKey":"ak-123456","secretKey":"sk-abcdef"}'
    )
    assert lines["brokerName"] == "orders"
    # The identity file (brokerIdentity) and the commit log live on the PVC (/data), the
    # auth store on the emptyDir: both moved with their volumes, as the kubelet moves them.
    assert lines["storePathRootDir"] == "/data/rocketmq"  # /data is not moved in this test
    assert lines["storePathCommitLog"] == "/data/rocketmq/commitlog"
    assert lines["authConfigPath"] == f"{tmp}/rocketmq-auth"
