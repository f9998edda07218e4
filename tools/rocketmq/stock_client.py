#!/usr/bin/env python3
"""The stock-client program (tools/rocketmq/StockClient.java) and a stock RocketMQ 5.3
controller-mode group, for tests/integration/test_stock_client_*.py and bench/rocketmq_client.py.

    python tools/rocketmq/stock_client.py build      # compiles; prints the classes directory

`build` compiles StockClient.java against the client jars `tools/rocketmq/fetch.sh` caches
(rocketmq-client/acl 5.3.1, outside the repository) into <home>/stockclient/classes, again only
when the source changed. `StockClient.run(mode, **options)` runs one mode and returns its JSON
lines; `StockClient.run_events` does the same and tells the caller of each event line as it
arrives (the load mode's measured-window markers). `RocketMQGroup` runs a name server, one
DLedger controller and three stock brokers in controller mode (allAckInSyncStateSet=true,
SYNC_FLUSH; the server jars of `fetch.sh server`), each JVM a child of this process, signalled
by PID only.

Stdlib only: the benchmark and the tests import it without the project installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "StockClient.java"
#: One file per further mode (`<Name>Mode.java`, class `<Name>Mode` with `static void run()`,
#: reading StockClient.opt): mode `name` runs it, so features add modes without editing
#: StockClient.java.
MODES = HERE / "modes"
CLIENT_VERSION = "5.3.1"
MAIN = "StockClient"
#: Small heaps and the serial collector: up to six JVMs share two cores in a run.
SERVER_JVM = ["-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=512m", "-XX:+UseSerialGC",
              "--add-opens=java.base/java.lang=ALL-UNNAMED",
              "--add-opens=java.base/java.nio=ALL-UNNAMED",
              "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"]  # fmt: skip
CLIENT_JVM = ["-Xms256m", "-Xmx768m", "-XX:+UseSerialGC"]


#: The tests' client deadlines (StockClient.deadline_ms): on a loaded 2-core CI machine a
#: first send (a JVM's route lookup, connection, send, replication) took past RocketMQ's 3 s
#: (`sendDefaultImpl call timeout`, name-server reads timing out at 2-3 s) while what those
#: tests check is content and order; latency belongs to bench/.
TEST_DEADLINE_MS = 20_000


class StockClientMissing(RuntimeError):
    """Java or the cached jars are missing: the reason a test skips."""


def rocketmq_home() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    default = Path(root) / "brokergroup" / "rocketmq" / CLIENT_VERSION
    return Path(os.environ.get("BROKERGROUP_ROCKETMQ_HOME", default))


def missing(*, servers: bool = False) -> str | None:
    """Why the stock client (and, with `servers`, the stock servers) cannot run, or None."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: the stock RocketMQ client cannot run"
    home = rocketmq_home()
    libs = [home / "lib"] + ([home / "server" / "lib"] if servers else [])
    for lib in libs:
        if not (lib / ".complete").exists():
            target = "rocketmq-servers" if lib.parent.name == "server" else "rocketmq-client"
            return f"RocketMQ jars not cached in {lib}: run make {target}"
    return None


def sources() -> list[Path]:
    """StockClient.java and every mode file, in a stable order."""
    return [SOURCE, *sorted(MODES.glob("*Mode.java"))]


def compile_sources(kind: str, java_sources: list[Path], *, quiet: bool = False) -> Path:
    """Compile `java_sources` against the cached client jars into
    `<rocketmq home>/<kind>/<digest of the sources>` (once per source version); that
    classes directory."""
    reason = missing()
    if reason is not None:
        raise StockClientMissing(reason)
    home = rocketmq_home()
    # One directory per source version: worktrees with different sources, and a JVM still
    # running from an older build, never see their classes removed under them.
    digest_of = hashlib.sha256()
    for source in java_sources:
        digest_of.update(source.name.encode() + b"\0" + source.read_bytes())
    digest = digest_of.hexdigest()[:16]
    classes = home / kind / digest
    if not (classes / ".complete").exists():
        building = home / kind / f".{digest}.{os.getpid()}.tmp"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        subprocess.run(
            ["javac", "-nowarn", "-d", str(building), "-cp", f"{home / 'lib'}/*",
             *map(str, java_sources)],
            check=True, timeout=300, stderr=subprocess.DEVNULL if quiet else None,
        )  # fmt: skip
        (building / ".complete").touch()
        try:
            building.rename(classes)
        except OSError:  # another process finished the same build first
            shutil.rmtree(building, ignore_errors=True)
    return classes


def build() -> Path:
    """Compile StockClient.java and the mode files (when a source changed); the classes
    directory."""
    return compile_sources("stockclient", sources())


@dataclass
class StockClient:
    """Runs StockClient modes against one name server address, signing with a key pair."""

    namesrv: str
    work: Path
    access_key: str = ""
    secret_key: str = ""
    classes: Path = field(default_factory=build)
    jvm_options: tuple[str, ...] = ()
    """More JVM options (e.g. `-Dtls.enable=true`: the client's TLS, TlsSystemConfig)."""
    deadline_ms: int | None = None
    """The client's send and name-server/admin call deadlines (sendMsgTimeout,
    mqClientApiTimeout) unless a mode's options name them; None: RocketMQ's 3 s each.
    Benchmarks and chaos runs keep RocketMQ's (their failure times are what they measure);
    the tests' functional checks give a loaded 2-core machine longer (TEST_DEADLINE_MS)."""

    def command(self, mode: str, **options: object) -> list[str]:
        home = rocketmq_home()
        deadlines = (
            {"send_timeout_ms": self.deadline_ms, "api_timeout_ms": self.deadline_ms}
            if self.deadline_ms is not None
            else {}
        )
        opts = {"namesrv": self.namesrv, **deadlines, **options}
        if self.access_key:
            opts |= {"ak": self.access_key, "sk": self.secret_key}
        return ["java", *CLIENT_JVM, *self.jvm_options, f"-Duser.home={self.work}",
                "-cp", f"{self.classes}:{home / 'lib'}/*", MAIN, mode,
                *(f"{k}={v}" for k, v in opts.items())]  # fmt: skip

    def run(self, mode: str, *, timeout_s: float = 300, **options: object) -> list[dict[str, Any]]:
        """One mode to its end: its JSON lines (the summary last). Raises on a failed exit."""
        self.work.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            self.command(mode, **options), capture_output=True, text=True,
            timeout=timeout_s, cwd=self.work, check=False,
        )  # fmt: skip
        return _json_lines(mode, done.returncode, done.stdout, done.stderr)

    def start(
        self, mode: str, output: Path, *, stdout_pipe: bool = False, **options: object
    ) -> subprocess.Popen[bytes]:
        """One mode in the background (stdout+stderr to `output`; with `stdout_pipe`, stdout
        to a pipe the caller reads and only stderr to `output`)."""
        self.work.mkdir(parents=True, exist_ok=True)
        with open(output, "ab") as out:
            return subprocess.Popen(
                self.command(mode, **options),
                stdout=subprocess.PIPE if stdout_pipe else out,
                stderr=out if stdout_pipe else subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.work,
            )  # fmt: skip

    def run_events(
        self,
        mode: str,
        output: Path,
        on_event: Callable[[str, int], None],
        *,
        timeout_s: float = 300,
        **options: object,
    ) -> list[dict[str, Any]]:
        """Like `run`, but calls `on_event(name, pid)` as each `{"event": name}` line arrives
        (the load mode's measured-window markers), while the program still runs; stderr goes
        to `output`. Its JSON lines, the summary last; raises on a failed exit."""
        proc = self.start(mode, output, stdout_pipe=True, **options)
        assert proc.stdout is not None
        # A hung program is killed by its PID: reading its stdout then ends.
        watchdog = threading.Timer(timeout_s, proc.kill)
        watchdog.start()
        text: list[str] = []
        try:
            for raw in proc.stdout:
                line = raw.decode(errors="replace")
                text.append(line)
                if line.startswith('{"event"'):
                    on_event(str(json.loads(line)["event"]), proc.pid)
            returncode = proc.wait()
        finally:
            watchdog.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        return _json_lines(mode, returncode, "".join(text), output.read_text(errors="replace"))


def _json_lines(mode: str, returncode: int, stdout: str, stderr: str) -> list[dict[str, Any]]:
    """A finished mode's JSON lines, the summary last; raises, with both outputs' tails, on
    a failed exit or a missing summary."""
    lines = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
    if returncode != 0 or not lines or "summary" not in lines[-1]:
        raise RuntimeError(
            f"StockClient {mode} exited {returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}"
        )
    return lines


@dataclass(frozen=True)
class StockBrokerSpec:
    name: str
    host: str
    port: int


@dataclass
class RocketMQGroup:
    """A stock RocketMQ 5.3 controller-mode group on loopback: a name server, one DLedger
    controller, three brokers (one broker set broker-a; the controller assigns ids and
    elects). allAckInSyncStateSet=true and SYNC_FLUSH: a SEND_OK is on every in-sync
    replica's disk, the promise brokergroup makes. Everything else at RocketMQ's defaults."""

    work: Path
    host_prefix: str = "127.0.60"
    timer_wheel: bool = True
    """`timerWheelEnable`, written out (RocketMQ 5.3's default, true): timer messages and, with
    timerInterceptDelayLevel off, nothing else use it."""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def namesrv(self) -> str:
        return f"{self.host_prefix}.1:9876"

    @property
    def controller(self) -> str:
        return f"{self.host_prefix}.1:9878"

    @property
    def brokers(self) -> list[StockBrokerSpec]:
        # Ports apart: the HA port (listen + 1) and the fast port (listen - 2) bind 0.0.0.0.
        return [StockBrokerSpec(f"broker-n{i}", f"{self.host_prefix}.{i + 1}", 30911 + 1000 * i)
                for i in (1, 2, 3)]  # fmt: skip

    @property
    def lib(self) -> Path:
        return rocketmq_home() / "server" / "lib"

    def _java(self, name: str, main: str, conf: dict[str, object]) -> None:
        (self.work / "conf").mkdir(parents=True, exist_ok=True)
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        path = self.work / "conf" / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        with open(self.work / "logs" / f"{name}.out", "ab") as log:
            self.procs[name] = subprocess.Popen(
                ["java", *SERVER_JVM, f"-Duser.home={self.work}", "-cp", f"{self.lib}/*",
                 main, "-c", str(path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work,
                env={**os.environ, "ROCKETMQ_HOME": str(self.work)},
            )  # fmt: skip

    def start(self) -> None:
        host, port = self.namesrv.split(":")
        self._java("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup",
                   {"listenPort": port, "bindAddress": host})  # fmt: skip
        store = self.work / "data" / "controller"
        self._java("controller", "org.apache.rocketmq.controller.ControllerStartup", {
            "controllerType": "DLedger", "controllerDLegerGroup": "g1",
            # The DLedger controller serves brokers on its DLedger peer port.
            "controllerDLegerPeers": f"n0-{self.controller}", "controllerDLegerSelfId": "n0",
            "listenPort": 29879, "bindAddress": host,
            "controllerStorePath": store, "configStorePath": store / "controller.properties",
            "mappedFileSize": 4 << 20, "enableElectUncleanMaster": "false",
            "notifyBrokerRoleChanged": "true",
        })  # fmt: skip
        time.sleep(2)
        for broker in self.brokers:
            self.start_broker(broker.name)

    def start_broker(self, name: str) -> None:
        b = next(x for x in self.brokers if x.name == name)
        store = self.work / "data" / name
        self._java(name, "org.apache.rocketmq.broker.BrokerStartup", {
            "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": -1,
            "brokerRole": "SLAVE", "namesrvAddr": self.namesrv, "brokerIP1": b.host,
            "brokerIP2": b.host, "bindAddress": b.host, "listenPort": b.port,
            "haListenPort": b.port + 1, "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "enableControllerMode": "true", "controllerAddr": self.controller,
            "allAckInSyncStateSet": "true", "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": 128 << 20, "autoCreateTopicEnable": "true",
            "timerWheelEnable": str(self.timer_wheel).lower(),
        })  # fmt: skip

    def admin(self, *args: str, timeout_s: float = 60) -> str:
        done = subprocess.run(
            ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             f"-Duser.home={self.work}", "-cp", f"{self.lib}/*",
             "org.apache.rocketmq.tools.command.MQAdminStartup", *args],
            capture_output=True, text=True, timeout=timeout_s, check=False,
            env={**os.environ, "ROCKETMQ_HOME": str(self.work)},
        )  # fmt: skip
        return done.stdout + done.stderr

    def sync_state(self) -> dict[str, Any]:
        """getSyncStateSet from the controller: MasterAddr, MasterEpoch, SyncStateSetNums..."""
        out = self.admin("getSyncStateSet", "-a", self.controller, "-b", "broker-a")
        state: dict[str, Any] = {}
        for line in out.splitlines():
            parts = line.strip().split("\t")
            if len(parts) == 2 and parts[0].startswith("#"):
                state[parts[0][1:]] = parts[1]
        return state

    def wait_in_sync(self, count: int, min_epoch: int, timeout_s: float = 180) -> dict[str, Any]:
        """Until the controller has a master at epoch >= min_epoch with `count` in sync."""
        deadline = time.monotonic() + timeout_s
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = self.sync_state()
            if (
                state.get("MasterAddr", "null") not in ("", "null")
                and int(state.get("MasterEpoch", 0)) >= min_epoch
                and int(state.get("SyncStateSetNums", 0)) >= count
            ):
                return state
            time.sleep(1)
        raise RuntimeError(f"no master with {count} in sync at epoch >= {min_epoch}: {state}")

    def master_name(self, state: dict[str, Any]) -> str:
        host = str(state["MasterAddr"]).rsplit(":", 1)[0]
        return next(b.name for b in self.brokers if b.host == host)

    def create_topic(self, topic: str, queues: int) -> None:
        for b in self.brokers:
            out = self.admin("updateTopic", "-b", f"{b.host}:{b.port}", "-t", topic,
                             "-r", str(queues), "-w", str(queues))  # fmt: skip
            if "success" not in out:
                raise RuntimeError(f"updateTopic {topic} on {b.name} failed:\n{out}")

    def kill(self, name: str) -> None:
        """SIGKILL by PID (a crash: no shutdown hook)."""
        proc = self.procs.pop(name)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop(self) -> None:
        for name in [b.name for b in self.brokers] + ["controller", "namesrv"]:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for name, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=20)
            del self.procs[name]


if __name__ == "__main__":
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: tools/rocketmq/stock_client.py build")
    try:
        print(build())
    except StockClientMissing as e:
        sys.exit(str(e))
