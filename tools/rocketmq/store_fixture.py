#!/usr/bin/env python3
"""Make tests/fixtures/rocketmq/store-3replicas: a store written by stock RocketMQ 5.3.1.

JDK only (stdlib Python drives `java`): a name server, one DLedger controller and three
brokers in controller mode (brokerName broker-a, brokerId assigned by the controller),
all on loopback, each broker advertising its own 127.0.0.x; the jars are the ones
`tools/rocketmq/fetch.sh server` puts in <home>/server/lib. StoreFixtureProducer.java (stock
DefaultMQProducer) writes normal, compressed, delay, timer and batch messages and an ack
line per SEND_OK. The master is killed with SIGKILL twice while the producer runs between
rounds; each time the controller elects a new master, the killed broker is restarted and
rejoins. At the end (delays delivered) everything stops with SIGTERM and the small part of
each store the audit reads is copied out:

    store-3replicas/broker-n{1,2,3}/{commitlog/,checkpoint,epochFileCheckpoint[.bak],brokerIdentity}
    store-3replicas/acks.jsonl       the producer's ack log
    store-3replicas/run.json         kills (broker, epoch before/after), phases, versions

Usage: tools/rocketmq/store_fixture.py OUT_DIR [--lib DIR] [--work DIR]
Run it under `flock /tmp/bg-heavy.lock` on a shared machine (five JVMs, -Xmx256m each).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSION = "5.3.1"
NAMESRV = "127.0.0.1:29876"
CONTROLLER = "127.0.0.1:29878"
#: (dir name, advertised address, listen port); HA listens on port + 1, the fast channel on port - 2.
BROKERS = [("broker-n1", "127.0.0.2", 21911), ("broker-n2", "127.0.0.3", 22911),
           ("broker-n3", "127.0.0.4", 23911)]  # fmt: skip
JVM = ["-Xms128m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m", "-XX:+UseSerialGC",
       "--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
       "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED"]  # fmt: skip
SEGMENT_BYTES = 256 * 1024
ROUNDS = (0, 150, 300, 450)  # messages [0,150) then kill, [150,300) then kill, [300,450)


def default_lib() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    home = Path(
        os.environ.get("BROKERGROUP_ROCKETMQ_HOME", cache / f"brokergroup/rocketmq/{VERSION}")
    )
    return home / "server/lib"


class Cluster:
    def __init__(self, lib: Path, work: Path) -> None:
        self.lib, self.work = lib, work
        self.cp = f"{work / 'classes'}:{lib}/*"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = dict(os.environ, ROCKETMQ_HOME=str(work))

    def java(self, name: str, main: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.work / "logs" / f"{name}.out").open("ab")
        p = subprocess.Popen(
            ["java", *JVM, f"-Duser.home={self.work}", "-cp", self.cp, main, *args],
            stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.work,
        )  # fmt: skip
        self.procs[name] = p
        return p

    def conf(self, name: str, values: dict[str, object]) -> Path:
        path = self.work / "conf" / f"{name}.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def start_namesrv(self) -> None:
        conf = self.conf(
            "namesrv", {"listenPort": NAMESRV.split(":")[1], "bindAddress": "127.0.0.1"}
        )
        self.java("namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf))

    def start_controller(self) -> None:
        store = self.work / "data/controller"
        conf = self.conf("controller", {
            "controllerType": "DLedger", "controllerDLegerGroup": "g1",
            # The DLedger controller serves brokers on its DLedger peer port (its remoting
            # server is the DLedger server's); listenPort only moves the unused default.
            "controllerDLegerPeers": f"n0-{CONTROLLER}", "controllerDLegerSelfId": "n0",
            "listenPort": 29879, "bindAddress": "127.0.0.1",
            "controllerStorePath": store, "configStorePath": store / "controller.properties",
            "mappedFileSize": 4 << 20, "enableElectUncleanMaster": "false",
            "notifyBrokerRoleChanged": "true",
        })  # fmt: skip
        self.java("controller", "org.apache.rocketmq.controller.ControllerStartup", "-c", str(conf))

    def start_broker(self, name: str) -> None:
        _, ip, port = next(b for b in BROKERS if b[0] == name)
        store = self.work / "data" / name
        conf = self.conf(name, {
            "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": -1,
            "brokerRole": "SLAVE", "namesrvAddr": NAMESRV, "brokerIP1": ip, "brokerIP2": ip,
            "bindAddress": ip, "listenPort": port, "haListenPort": port + 1,
            "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
            "enableControllerMode": "true", "controllerAddr": CONTROLLER,
            "allAckInSyncStateSet": "true", "minInSyncReplicas": 1,
            "flushDiskType": "SYNC_FLUSH", "mappedFileSizeCommitLog": SEGMENT_BYTES,
            "mappedFileSizeConsumeQueue": 6000, "mappedFileSizeTimerLog": 1 << 20,
            "timerWheelEnable": "true", "maxHashSlotNum": 5000, "maxIndexNum": 20000,
            "autoCreateTopicEnable": "false", "waitTimeMillsInSendQueue": 3000,
            "diskMaxUsedSpaceRatio": 98, "syncBrokerMemberGroupPeriod": 1000,
        })  # fmt: skip
        self.java(name, "org.apache.rocketmq.broker.BrokerStartup", "-c", str(conf))

    def admin(self, *args: str) -> str:
        out = subprocess.run(
            ["java", "-Xmx128m", f"-Duser.home={self.work}", "-cp", self.cp,
             "org.apache.rocketmq.tools.command.MQAdminStartup", *args, "-n", NAMESRV],
            capture_output=True, text=True, env=self.env, timeout=60, check=False,
        )  # fmt: skip
        return out.stdout + out.stderr

    def sync_state(self) -> dict[str, object]:
        out = self.admin("getSyncStateSet", "-a", CONTROLLER, "-b", "broker-a")
        state: dict[str, object] = {"inSync": []}
        for line in out.splitlines():
            parts = line.strip().split("\t")
            if len(parts) == 2 and parts[0].startswith("#"):
                state[parts[0][1:]] = parts[1]
            elif parts[0] == "InSyncReplica:" and len(parts) == 2:
                state["inSync"].append(parts[1])  # type: ignore[union-attr]
        return state

    def wait_in_sync(self, count: int, min_epoch: int, timeout_s: float = 120) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.sync_state()
            addr = str(s.get("MasterAddr", ""))
            if (
                addr not in ("", "null")
                and int(str(s.get("MasterEpoch", 0))) >= min_epoch
                and int(str(s.get("SyncStateSetNums", 0))) >= count
            ):
                return s
            time.sleep(1)
        raise SystemExit(f"no master with {count} in sync at epoch >= {min_epoch}: {s}")

    def master_name(self, s: dict[str, object]) -> str:
        port = int(str(s["MasterAddr"]).rsplit(":", 1)[1])
        return next(name for name, _, p in BROKERS if p == port)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        p = self.procs.pop(name)
        p.send_signal(sig)
        p.wait(timeout=60)

    def stop_all(self) -> None:
        for name in list(self.procs):
            if self.procs[name].poll() is None:
                self.stop(name)


def produce(c: Cluster, start: int, end: int, acks: Path) -> None:
    subprocess.run(
        ["java", "-Xmx128m", f"-Duser.home={c.work}", "-cp", c.cp, "StoreFixtureProducer",
         NAMESRV, str(start), str(end), str(acks)],
        check=True, env=c.env, timeout=900,
    )  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--lib", type=Path, default=default_lib())
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    if not (args.lib / "rocketmq-broker-5.3.1.jar").is_file():
        print(f"no RocketMQ {VERSION} server jars in {args.lib}: run tools/rocketmq/fetch.sh server",
              file=sys.stderr)  # fmt: skip
        return 3
    work = (args.work or args.out.with_name(args.out.name + ".work")).resolve()
    shutil.rmtree(work, ignore_errors=True)
    for d in ("classes", "conf", "logs", "data"):
        (work / d).mkdir(parents=True)
    subprocess.run(["javac", "-nowarn", "-d", str(work / "classes"), "-cp", f"{args.lib}/*",
                    str(HERE / "StoreFixtureProducer.java")], check=True)  # fmt: skip
    c = Cluster(args.lib, work)
    acks = work / "acks.jsonl"
    run: dict[str, object] = {"rocketmq": VERSION, "segmentBytes": SEGMENT_BYTES, "kills": []}
    try:
        c.start_namesrv()
        c.start_controller()
        time.sleep(3)
        for name, _, _ in BROKERS:
            c.start_broker(name)
            time.sleep(2)
        s = c.wait_in_sync(3, 1)
        print("in sync:", s, flush=True)
        master = str(s["MasterAddr"])
        print(
            c.admin("updateTopic", "-b", master, "-t", "FixtureC", "-r", "4", "-w", "4"), flush=True
        )
        for r in range(len(ROUNDS) - 1):
            produce(c, ROUNDS[r], ROUNDS[r + 1], acks)
            if r == len(ROUNDS) - 2:
                break
            victim = c.master_name(s)
            epoch = int(str(s["MasterEpoch"]))
            c.stop(victim, signal.SIGKILL)
            print(f"killed {victim} (master at epoch {epoch})", flush=True)
            after = c.wait_in_sync(1, epoch + 1)
            print("new master:", after, flush=True)
            c.start_broker(victim)
            s = c.wait_in_sync(3, epoch + 1)
            run["kills"].append(  # type: ignore[union-attr]
                {"broker": victim, "epochBefore": epoch, "epochAfter": int(str(s["MasterEpoch"])),
                 "newMaster": c.master_name(s), "afterMessage": ROUNDS[r + 1]}
            )  # fmt: skip
        time.sleep(15)  # delay level 3 is 10 s, timers 3 s: let every one be delivered
        final = c.wait_in_sync(3, 1)
        run["final"] = final
        master = c.master_name(final)
        for name, _, _ in BROKERS:  # slaves first, then the master
            if name != master:
                c.stop(name)
        c.stop(master)
    finally:
        c.stop_all()
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for name, _, _ in BROKERS:
        src, dst = work / "data" / name, out / name
        shutil.copytree(src / "commitlog", dst / "commitlog")
        for f in ("checkpoint", "epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity"):
            if (src / f).is_file():
                shutil.copy2(src / f, dst / f)
    shutil.copy2(acks, out / "acks.jsonl")
    (out / "run.json").write_text(json.dumps(run, indent=2, default=str) + "\n")
    print(f"store in {out}; work dir (logs, full stores) {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
