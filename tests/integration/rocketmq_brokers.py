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

Each JVM gets -Xmx256m, the serial collector and one loopback address; only processes this
harness started are signalled, by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from brokergroup_remoting.net import Credentials

#: The cache directory's version (tools/rocketmq/fetch.sh); server/VERSION names the servers'.
VERSION = "5.3.1"
JVM_OPTIONS = ["-Xms128m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k"]


@dataclass(frozen=True)
class RocketMQHome:
    server_lib: Path
    namesrv_jar: Path


def _cache_home() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    default = Path(root) / "brokergroup" / "rocketmq" / VERSION
    return Path(os.environ.get("BROKERGROUP_ROCKETMQ_HOME", default))


def find_home() -> RocketMQHome | str:
    """The jars, or why they cannot be used (the skip reason)."""
    if shutil.which("java") is None:
        return "java is not installed: stock RocketMQ brokers cannot run"
    lib = _cache_home() / "server" / "lib"
    if not (lib / ".complete").exists():
        return f"RocketMQ {VERSION} server jars not cached in {lib}: run make rocketmq-servers"
    candidates = sorted(lib.glob("rocketmq-namesrv-*.jar"))
    if not candidates:
        return f"no rocketmq-namesrv jar in {lib}: stock brokers need a name server"
    return RocketMQHome(lib, candidates[-1])


def _java(
    home: RocketMQHome, main: str, args: list[str], *, cwd: Path, log: Path, extra_cp: str = ""
) -> subprocess.Popen[bytes]:
    cp = f"{home.server_lib}/*" + (f":{extra_cp}" if extra_cp else "")
    env = {**os.environ, "ROCKETMQ_HOME": str(cwd)}
    out = open(log, "ab")  # noqa: SIM115  # the child owns it from here
    try:
        return subprocess.Popen(
            ["java", *JVM_OPTIONS, f"-Duser.home={cwd}", "-Drocketmq.client.logUseSlf4j=false",
             "-cp", cp, main, *args],
            cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
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
        conf.write_text(f"listenPort={self.port}\nbindAddress={self.host}\n")
        self.process = _java(
            self.home, "org.apache.rocketmq.namesrv.NamesrvStartup", ["-c", str(conf)],
            cwd=self.base_dir, log=self.base_dir / "namesrv.log", extra_cp=str(self.home.namesrv_jar),
        )  # fmt: skip

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

    def config_text(self) -> str:
        store = self.base_dir / "store"
        values = {
            "brokerClusterName": self.cluster,
            "brokerName": self.name,
            "brokerId": "-1",
            "enableControllerMode": "true",
            "controllerAddr": self.controllers,
            "namesrvAddr": self.namesrv,
            "brokerIP1": self.host,
            # The HA address slaves dial (the name server hands it out); the default is the
            # machine's first non-loopback address.
            "brokerIP2": self.host,
            "bindAddress": self.host,
            "listenPort": str(self.port),
            "haListenPort": str(self.port + 1),
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            "mappedFileSizeCommitLog": str(16 * 1024 * 1024),
            "timerWheelEnable": "false",
            "flushDiskType": "ASYNC_FLUSH",
            # Faster than the defaults so a test sees a failover in seconds, not tens.
            "brokerHeartbeatInterval": "500",
            "controllerHeartBeatTimeoutMills": "3000",
            "syncBrokerMetadataPeriod": "1000",
            "syncControllerMetadataPeriod": "2000",
            "checkSyncStateSetPeriod": "1000",
            # The broker signs what it sends with these (AclClientRPCHook) and first stores
            # them as a local user, which needs a metadata provider even with
            # authenticationEnabled=false (AuthenticationMetadataManagerImpl.initUser).
            "authenticationMetadataProvider": (
                "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
            ),
            "authConfigPath": str(self.base_dir / "auth"),
            "innerClientAuthenticationCredentials": json.dumps(
                {
                    "accessKey": self.credentials.access_key,
                    "secretKey": self.credentials.secret_key,
                },
                separators=(",", ":"),
            ),
            **self.settings,
        }
        return "".join(f"{k}={v}\n" for k, v in values.items())

    def start(self) -> None:
        if self.running():
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        conf = self.base_dir / "broker.conf"
        conf.write_text(self.config_text())
        with open(self.log_path, "ab") as log:
            log.write(f"--- start at {time.time():.3f}\n".encode())
        self.process = _java(
            self.home, "org.apache.rocketmq.broker.BrokerStartup", ["-c", str(conf)],
            cwd=self.base_dir, log=self.log_path,
        )  # fmt: skip

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
        try:
            text = (self.base_dir / "store" / "brokerIdentity").read_text().strip()
        except OSError:
            return None
        return int(text.rsplit("#", 1)[1]) if text.count("#") == 2 else None


def mqadmin(home: RocketMQHome, base_dir: Path, credentials: Credentials, *args: str) -> str:
    """Run one mqadmin command (MQAdminStartup) signing with `credentials`; its output."""
    conf = base_dir / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    # AclUtils.getAclRPCHook reads ${ROCKETMQ_HOME}/conf/tools.yml.
    (conf / "tools.yml").write_text(
        f"accessKey: {credentials.access_key}\nsecretKey: {credentials.secret_key}\n"
    )
    result = subprocess.run(
        ["java", *JVM_OPTIONS, f"-Duser.home={base_dir}", "-cp", f"{home.server_lib}/*",
         "org.apache.rocketmq.tools.command.MQAdminStartup", *args],
        cwd=base_dir, env={**os.environ, "ROCKETMQ_HOME": str(base_dir)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return result.stdout + result.stderr
