"""Topic creation for the stock workload: `mqadmin updateTopic`, signed with a pair
(conf/tools.yml under its own ROCKETMQ_HOME), retried while the brokers come up; over TLS
when given the client's TLS options (a runtime with local.tls: chaos/client_tls.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from brokergroup_cli.chaos.targets.base import TargetError
from brokergroup_cli.local.rocketmq_stock import (
    JVM_OPTIONS,
    MQADMIN_MAIN,
    RocketMQHome,
    java_argv,
    java_env,
    tools_yml,
    write_owner_only,
)


def update_topic(
    home: RocketMQHome,
    work: Path,
    namesrv: str,
    topic: str,
    queues: int,
    *,
    brokers: list[str] | None = None,
    pair: tuple[str, str] | None = None,
    timeout_s: float = 120.0,
    jvm_options: tuple[str, ...] = (),
) -> None:
    """`updateTopic` on each of `brokers` (`-b`), or on the cluster's masters (`-c`);
    `jvm_options`: more JVM options (`ClientTls.stock_jvm_options`: TLS)."""
    (work / "conf").mkdir(parents=True, exist_ok=True)
    if pair is not None:
        write_owner_only(work / "conf" / "tools.yml", tools_yml(*pair))
    where = [["-b", b] for b in brokers] if brokers else [["-c", "DefaultCluster"]]
    deadline = time.monotonic() + timeout_s
    for target in where:
        out = ""
        while True:
            args = ["updateTopic", *target, "-t", topic, "-r", str(queues), "-w", str(queues),
                    "-n", namesrv]  # fmt: skip
            done = subprocess.run(
                java_argv(home, MQADMIN_MAIN, args, user_home=work,
                          jvm_options=(*JVM_OPTIONS, *jvm_options)),
                cwd=work, env=java_env(work),
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            out = done.stdout + done.stderr
            if "success" in out:
                break
            if time.monotonic() > deadline:
                raise TargetError(f"updateTopic {topic} {' '.join(target)} failed: {out[-800:]}")
            time.sleep(1.0)
