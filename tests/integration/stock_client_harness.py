"""A `brokergroup local` runtime reached only through stock RocketMQ 5.3.1 tools: the client
program tools/rocketmq/StockClient.java (rocketmq-client with AclClientRPCHook) and mqadmin
(rocketmq-tools), both from the jars tools/rocketmq/fetch.sh caches outside the repository.

    with stock_runtime(tmp_path) as rt:               # skips, saying why, without Java/jars
        rt.client.run("send", kind="sync", topic="T", count=10)
        rt.mqadmin("clusterList")
        rt.kill_master()                              # SIGKILL by PID from state.json

The routes come from the runtime's name server (`local status --json`: namesrvAddress,
accessKey, secretKey); nothing here talks to a broker except through those routes.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.procs import send_signal
from tests.integration.local_harness import Runtime, local_runtime, wait_for
from tools.rocketmq.stock_client import (
    CLIENT_JVM,
    TEST_DEADLINE_MS,
    StockClient,
    build,
    missing,
    rocketmq_home,
)

#: The local runtime creates topics on first send (autoCreateTopicEnable); every test
#: still uses its own topic and consumer group.
UP_TIMEOUT_S = 120.0
#: Addresses of their own (the ports stay local_harness's), so these tests and another
#: helper's local runtime on the default test addresses do not collide.
STOCK_SETTINGS = (
    "local.controllerHosts=127.0.1.71,127.0.1.72,127.0.1.73",
    "local.brokerFirstHost=127.0.1.80",
    "local.brokerLastHost=127.0.1.89",
    "local.masterEndpointHost=127.0.1.70",
)


@dataclass
class StockRuntime:
    runtime: Runtime
    client: StockClient
    work: Path
    namesrv: str
    access_key: str
    secret_key: str

    def status(self) -> dict[str, Any]:
        return self.runtime.status()

    def wait_healthy(self, *, min_epoch: int = 0) -> dict[str, Any]:
        """A live master at masterEpoch >= min_epoch with all three brokers in sync."""

        def check() -> dict[str, Any] | None:
            s = self.runtime.status()
            master = s.get("master")
            alive = [b for b in s.get("brokers", []) if b.get("alive")]
            if master is None or s.get("masterEpoch", 0) < min_epoch:
                return None
            if len(alive) < 3 or len(s.get("syncStateSet", [])) < 3:
                return None
            return s

        return wait_for("a master with three in sync", check, UP_TIMEOUT_S, self.runtime)

    def kill_master(self) -> dict[str, Any]:
        """SIGKILL the master's process (by the PID and start time state.json records)."""
        status = self.runtime.status()
        address = status["master"]["address"]
        host = address.rsplit(":", 1)[0]
        for child in self.runtime.state().get("brokers", []):
            if child.get("host") == host and child.get("pid"):
                assert send_signal(child["pid"], child.get("startTicks"), signal.SIGKILL)
                return status
        raise AssertionError(f"no broker process on {host} in state.json")

    def mqadmin(self, *args: str) -> str:
        """`mqadmin ARGS -n NAMESRV`, signing with the runtime's key pair (tools.yml), in the
        work directory (consumerStatus writes a file per client there)."""
        home = self.work / "mqadmin-home"
        (home / "conf").mkdir(parents=True, exist_ok=True)
        (home / "conf" / "tools.yml").write_text(
            f"accessKey: {self.access_key}\nsecretKey: {self.secret_key}\n"
        )
        done = subprocess.run(
            ["java", *CLIENT_JVM, "-XX:TieredStopAtLevel=1", f"-Drocketmq.home.dir={home}",
             f"-Duser.home={self.work}", "-cp", f"{rocketmq_home() / 'lib'}/*",
             "org.apache.rocketmq.tools.command.MQAdminStartup", *args, "-n", self.namesrv],
            capture_output=True, text=True, timeout=180, check=False, cwd=self.work,
        )  # fmt: skip
        return done.stdout + done.stderr


def require_stock_client() -> Path:
    reason = missing()
    if reason is not None:
        pytest.skip(reason)
    return build()


@contextmanager
def stock_runtime(root: Path, extra_settings: tuple[str, ...] = ()) -> Iterator[StockRuntime]:
    """`extra_settings`: more `local up --set` items (e.g. the brokers' retention)."""
    classes = require_stock_client()
    with local_runtime(root / "local", (*STOCK_SETTINGS, *extra_settings)) as rt:
        up = rt.up()
        assert up.returncode == 0, f"local up failed:\n{up.stdout}\n{up.stderr}\n{rt.logs()}"
        status = rt.status()
        stock = StockRuntime(
            runtime=rt,
            client=StockClient(
                status["namesrvAddress"], root / "client", status["accessKey"],
                status["secretKey"], classes, deadline_ms=TEST_DEADLINE_MS,
            ),
            work=root,
            namesrv=status["namesrvAddress"],
            access_key=status["accessKey"],
            secret_key=status["secretKey"],
        )  # fmt: skip
        stock.wait_healthy()
        yield stock
