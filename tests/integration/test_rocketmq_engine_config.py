"""The stock broker reads the operator's broker.conf as meant (issue 20 item 4).

rocketmq_config.broker_properties writes RocketMQ's property names by hand; a misspelt name
would be ignored by BrokerStartup without a word and the broker would run on its default
(ASYNC_FLUSH, allAckInSyncStateSet=false, ...). So the stock 5.3 broker itself reads the
generated file, with the launcher's per-pod lines, through `BrokerStartup -c <file> -p`,
which prints every config field it knows with its value and exits: every generated property
must come back with the value written, except the few fields -p does not print (named
below, with why). Skips with the reason where Java or the jars are missing.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from brokergroup_operator.rocketmq_config import (
    MAIN_CLASS,
    broker_properties,
    render,
    volume_properties,
)
from tests.integration.rocketmq_brokers import find_home

#: Fields -p does not print: BrokerIdentity's (BrokerConfig's superclass; -p prints declared
#: fields only) and AuthConfig's in 5.3.3's BrokerStartup.
NOT_PRINTED = {
    "brokerClusterName",
    "brokerName",
    "brokerId",
    "authConfigPath",
    "authenticationMetadataProvider",
    "innerClientAuthenticationCredentials",
}
PRINTED = re.compile(r" - ([A-Za-z0-9]+)=(.*)$")
#: -p only prints: a small heap and no JIT tiers are plenty.
JVM_OPTIONS = ["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


def test_every_generated_property_reaches_the_stock_brokers_config(tmp_path: Path) -> None:
    home = find_home()
    if isinstance(home, str):
        pytest.skip(home)
    spec = {
        "rocketmq": {"flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": 8 << 20},
        "ha": {
            "allAckInSyncStateSet": True,
            "inSyncReplicas": 2,
            "minInSyncReplicas": 2,
            "haMaxTimeSlaveNotCatchUpMs": 7000,
            "heartbeatIntervalMs": 400,
            "heartbeatTimeoutMs": 2500,
        },
    }
    props = broker_properties(
        cluster_name="ns",
        broker_name="orders",
        spec=spec,
        controller_addresses=("c0.ctl.ns.svc:9878", "c1.ctl.ns.svc:9878"),
    )
    # Every value differs from the stock default, or this test could not see it missed.
    assert props["flushDiskType"] == "SYNC_FLUSH" and props["allAckInSyncStateSet"] == "true"
    # The launcher's lines, its volumes in tmp_path (-p only reads, but keep the files here).
    per_pod = {
        **{k: v.replace("/data", str(tmp_path)).replace("/tmp", str(tmp_path))
           for k, v in volume_properties().items()},
        "brokerIP1": "10.244.0.7",
        "brokerIP2": "10.244.0.7",
    }  # fmt: skip
    conf = tmp_path / "broker.conf"
    conf.write_text(render(props) + "".join(f"{k}={v}\n" for k, v in per_pod.items()))
    result = subprocess.run(
        ["java", *JVM_OPTIONS, f"-Duser.home={tmp_path}", f"-Drocketmq.home.dir={tmp_path}",
         "-cp", f"{home.server_lib}/*", MAIN_CLASS, "-c", str(conf), "-p"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "ROCKETMQ_HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    printed: dict[str, str] = {}
    for line in result.stdout.splitlines():
        if m := PRINTED.search(line):
            printed.setdefault(m.group(1), m.group(2))
    assert "flushDiskType" in printed, result.stdout[-2000:]
    wanted = {**props, **per_pod}
    unseen = sorted(set(wanted) - set(printed) - NOT_PRINTED)
    assert unseen == [], f"not broker settings (misspelt?): {unseen}"
    differing = {k: (v, printed[k]) for k, v in wanted.items() if k in printed and printed[k] != v}
    assert differing == {}
