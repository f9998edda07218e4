"""Stock RocketMQ 5.3 processes on loopback for integration tests: brokers in controller
mode (org.apache.rocketmq.broker.BrokerStartup), a name server and mqadmin.

    home = find_home()                                # or the reason to skip
    ns = StockNameServer(home, tmp_path / "ns", host="127.0.40.9")
    broker = StockBroker(home, tmp_path / "b1", host="127.0.40.10", port=21011,
                         controllers="127.0.40.1:9879;…", namesrv=ns.address, credentials=keys)
    broker.start(); broker.kill(); broker.start()     # SIGKILL by PID, same store

The jars come from `tools/rocketmq/fetch.sh server` (`make rocketmq-servers`, cached outside
the repository; the version it fetched is in server/VERSION). The brokers need a name server
only for what controller mode gets from it: a slave learns its master's HA address from its
registration's answer. Without Java or the jars the tests skip, saying why.

The command lines and broker.conf are the product's (`brokergroup_cli.local.rocketmq_stock`,
what `local up --engine rocketmq` runs); this harness only starts and signals the processes.
Each JVM gets -Xmx256m, the serial collector and one loopback address; only processes this
harness started are signalled, by PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from brokergroup_cli.local.rocketmq_stock import (
    NAMESRV_MAIN,
    RocketMQHome,
    StockBrokerConfig,
    find_home,
    java_argv,
    java_env,
    mqadmin_argv,
    namesrv_properties,
    read_broker_id,
    tools_yml,
)
from brokergroup_remoting.net import Credentials

__all__ = ["RocketMQHome", "StockBroker", "StockNameServer", "find_home", "mqadmin", "tail"]


def _java(argv: list[str], *, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "ab")  # noqa: SIM115  # the child owns it from here
    try:
        return subprocess.Popen(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=java_env(cwd),
        )  # fmt: skip
    finally:
        out.close()


def _stop(process: subprocess.Popen[bytes] | None, sig: int) -> None:
    if process is None or process.poll() is not None:
        return
    os.kill(process.pid, sig)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=15)


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


@dataclass
class StockNameServer:
    home: RocketMQHome
    base_dir: Path
    host: str
    port: int = 9876
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        conf = self.base_dir / "namesrv.conf"
        conf.write_text(namesrv_properties(self.host, self.port))
        argv = java_argv(
            self.home, NAMESRV_MAIN, ["-c", str(conf)], user_home=self.base_dir,
            extra_cp=str(self.home.namesrv_jar),
        )  # fmt: skip
        self.process = _java(argv, cwd=self.base_dir, log=self.base_dir / "namesrv.log")

    def stop(self) -> None:
        _stop(self.process, signal.SIGTERM)


@dataclass
class StockBroker:
    """One stock broker in controller mode (brokerId=-1: the controller assigns its id)."""

    home: RocketMQHome
    base_dir: Path
    host: str
    port: int
    controllers: str
    namesrv: str
    credentials: Credentials
    cluster: str = "DefaultCluster"
    name: str = "broker-a"
    settings: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "broker.log"

    def config(self) -> StockBrokerConfig:
        return StockBrokerConfig(
            base_dir=self.base_dir,
            host=self.host,
            port=self.port,
            controllers=self.controllers,
            namesrv=self.namesrv,
            access_key=self.credentials.access_key,
            secret_key=self.credentials.secret_key,
            cluster=self.cluster,
            name=self.name,
            settings=tuple(self.settings.items()),
        )

    def start(self) -> None:
        if self.running():
            return
        config = self.config()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        config.write()
        with open(self.log_path, "ab") as log:
            log.write(f"--- start at {time.time():.3f}\n".encode())
        self.process = _java(config.argv(self.home), cwd=self.base_dir, log=self.log_path)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL by PID (no shutdown hook runs, as in a crash)."""
        _stop(self.process, signal.SIGKILL)

    def stop(self) -> None:
        _stop(self.process, signal.SIGTERM)

    def broker_id(self) -> int | None:
        """The BrokerId the controller gave it, from the file it persisted
        (store/brokerIdentity: `clusterName#brokerName#brokerId`)."""
        return read_broker_id(self.base_dir / "store")


def mqadmin(home: RocketMQHome, base_dir: Path, credentials: Credentials, *args: str) -> str:
    """Run one mqadmin command (MQAdminStartup) signing with `credentials`; its output."""
    conf = base_dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "tools.yml").write_text(tools_yml(credentials.access_key, credentials.secret_key))
    result = subprocess.run(
        mqadmin_argv(home, base_dir, list(args)), cwd=base_dir, env=java_env(base_dir),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return result.stdout + result.stderr
