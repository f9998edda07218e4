"""Server-side failover of stock RocketMQ 5.3 brokers: RocketMQ's own controller against
this project's (issue 20 item 6).

One run, two systems, the same three stock brokers (BrokerStartup, controller mode,
brokerId=-1, `rocketmq_stock.FAST_FAILOVER_SETTINGS`: heartbeat every 500 ms, 3 s timeout)
and the same stock producer (FailoverClient: DefaultMQProducer, default settings) sending
all the time:

- **rocketmq**: RocketMQ's DLedger controller (`ControllerStartup`, three nodes on
  127.0.74.1-3, default controller settings) and its name server, jars from
  `tools/rocketmq/fetch.sh server` (started by `chaos.targets.rocketmq.RocketMQTarget`,
  the chaos tool's plain RocketMQ group);
- **brokergroup**: `brokergroup local up --engine rocketmq` (three controller nodes with the
  name server and the remoting port; the supervisor restarts a killed broker on a new
  address and reports the exit to the controller at once, as it does for its own brokers).

Per kill: wait until the SyncStateSet holds all three brokers, SIGKILL the master (by PID),
then poll the controller leader with CONTROLLER_GET_REPLICA_INFO every 10 ms (this
process's own remoting client, the same code for both systems) until it names another
master at a higher masterEpoch: that interval is the failover time. The killed broker is
restarted (brokergroup: by the supervisor, on a new address) before the next kill. After
the kills the producer stops and a stock consumer reads the topic from the start:
`acked_lost` counts SEND_OK msgIds it never received.

    flock /tmp/bg-heavy.lock .venv/bin/python bench/rocketmq_controller.py [--kills 10] [--quick]

The last stdout line is the JSON summary; the full result goes to
bench/results/rocketmq_controller.json. Ceiling printed: the target (p99 <= 1 s, 0 lost).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import print_last_line, summarize, write_result

from brokergroup_cli.chaos.targets.base import NodeKind
from brokergroup_cli.chaos.targets.rocketmq import RocketMQTarget
from brokergroup_cli.local.procs import send_signal
from brokergroup_cli.local.rocketmq_stock import (
    FAST_FAILOVER_SETTINGS,
    RocketMQHome,
    cache_home,
    find_home,
    java_env,
    mqadmin_argv,
    read_broker_id,
    tools_yml,
)
from brokergroup_remoting import RequestCode, ResponseCode, request
from brokergroup_remoting.net import Credentials, RemotingClient

TOPIC = "BenchFailover"
BROKER_NAME = "broker-a"
POLL_S = 0.01
TARGET_P99_S = 1.0
REPO = Path(__file__).resolve().parents[1]


# -- polling a controller (either system) over the remoting protocol -------------------------


@dataclass
class Replica:
    master: int | None
    epoch: int
    sync_state_set: set[int]


class ControllerPoller:
    def __init__(self, addresses: list[str], credentials: Credentials | None) -> None:
        self.addresses = addresses
        self.credentials = credentials
        self.clients: dict[str, RemotingClient] = {}
        self.leader: str | None = None
        self.last_error = ""

    async def _client(self, address: str) -> RemotingClient:
        client = self.clients.get(address)
        if client is None or client.closed:
            client = await RemotingClient.connect(
                address, credentials=self.credentials, connect_timeout_s=0.5
            )
            self.clients[address] = client
        return client

    async def _call(self, address: str, code: int, fields: dict[str, str] | None) -> Any:
        client = await self._client(address)
        return await client.invoke(request(code, 0, fields), timeout_s=1.0)

    async def find_leader(self) -> str | None:
        for address in self.addresses:
            try:
                answer = await self._call(address, RequestCode.CONTROLLER_GET_METADATA_INFO, None)
            except Exception as exc:  # a node down or slow: ask the next
                self.last_error = f"{address}: {type(exc).__name__} {exc}"
                stale = self.clients.pop(address, None)
                if stale is not None:
                    await stale.close()
                continue
            fields = answer.fields()
            self.last_error = f"{address}: code {answer.code} {fields}"
            # The node that says it leads (its advertised leader address may name another
            # port, e.g. a DLedger peer address).
            if str(fields.get("isLeader", "")).lower() == "true":
                return address
        return None

    async def replica(self) -> Replica | None:
        if self.leader is None:
            self.leader = await self.find_leader()
            if self.leader is None:
                return None
        try:
            answer = await self._call(
                self.leader, RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": BROKER_NAME}
            )
        except Exception:  # the leader died: find the next one
            stale = self.clients.pop(self.leader, None)
            if stale is not None:
                await stale.close()
            self.leader = None
            return None
        if answer.code != ResponseCode.SUCCESS:
            self.leader = None
            return None
        fields = answer.fields()
        master = fields.get("masterBrokerId")
        body = json.loads(answer.body) if answer.body else {}
        return Replica(
            master=int(master) if master not in (None, "", "null") else None,
            epoch=int(fields.get("masterEpoch") or 0),
            sync_state_set={int(x) for x in body.get("syncStateSet", [])},
        )

    async def close(self) -> None:
        for client in self.clients.values():
            await client.close()


async def wait_replica(
    poller: ControllerPoller, check: Callable[[Replica], bool], timeout_s: float
) -> Replica:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replica = await poller.replica()
        if replica is not None and check(replica):
            return replica
        await asyncio.sleep(POLL_S)
    raise TimeoutError(f"controller state not reached within {timeout_s:.0f} s")


# -- processes ----------------------------------------------------------------------------


@dataclass
class Tools:
    home: RocketMQHome
    work: Path
    keys: Credentials
    namesrv: str

    def mqadmin(self, *args: str) -> str:
        (self.work / "conf").mkdir(parents=True, exist_ok=True)
        (self.work / "conf" / "tools.yml").write_text(
            tools_yml(self.keys.access_key, self.keys.secret_key)
        )
        result = subprocess.run(
            mqadmin_argv(self.home, self.work, list(args)), cwd=self.work,
            env=java_env(self.work), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return result.stdout + result.stderr

    def client(self, *args: str) -> list[str]:
        classes = cache_home() / "failover-classes"
        return [
            "java", "-Xmx128m", "-XX:+UseSerialGC", f"-Duser.home={self.work}",
            "-Drocketmq.client.logUseSlf4j=false",
            "-cp", f"{classes}:{cache_home() / 'lib'}/*", "FailoverClient",
            args[0], self.namesrv, self.keys.access_key, self.keys.secret_key, *args[1:],
        ]  # fmt: skip

    def create_topic(self, broker_addresses: list[str]) -> None:
        for address in broker_addresses:
            for _ in range(30):
                out = self.mqadmin(
                    "updateTopic", "-b", address, "-t", TOPIC, "-r", "4", "-w", "4",
                    "-n", self.namesrv,
                )  # fmt: skip
                if "success" in out:
                    break
                time.sleep(1)
            else:
                raise RuntimeError(f"updateTopic on {address}: {out}")


class Load:
    """The stock producer sending until stopped, then a stock consumer checking every ack."""

    def __init__(self, tools: Tools, work: Path) -> None:
        self.tools = tools
        self.work = work
        self.acks = work / "acks.jsonl"
        self.stop_file = work / "stop"
        with open(work / "producer.log", "ab") as log:
            self.producer = subprocess.Popen(
                tools.client("produce", TOPIC, str(self.acks), str(self.stop_file)),
                stdout=log, stderr=log, cwd=work,
            )  # fmt: skip

    def acked(self) -> int:
        try:
            return sum(1 for line in self.acks.read_text().splitlines() if line.endswith("}"))
        except OSError:
            return 0

    def finish(self) -> tuple[int, int]:
        """(acknowledged, acknowledged but never consumed)."""
        self.stop_file.touch()
        self.producer.wait(timeout=120)
        sent = {json.loads(x)["msgId"] for x in self.acks.read_text().splitlines() if x}
        received = self.work / "received.jsonl"
        subprocess.run(
            self.tools.client("consume", TOPIC, "bench-check", str(self.acks), str(received),
                              "180000"),
            capture_output=True, timeout=300, cwd=self.work,
        )  # fmt: skip
        got = set()
        if received.exists():
            got = {json.loads(x)["msgId"] for x in received.read_text().splitlines() if x}
        return len(sent), len(sent - got)


# -- the two systems ----------------------------------------------------------------------


class RocketMQSystem:
    """RocketMQ's DLedger controller (ControllerStartup, three nodes), its name server, three
    stock brokers: `chaos.targets.rocketmq.RocketMQTarget` (the chaos tool's plain RocketMQ
    group, lane 2: 127.0.74.x) with this benchmark's broker settings."""

    name = "rocketmq"

    def __init__(self, home: RocketMQHome, base: Path) -> None:
        self.home = home
        self.base = base
        settings = (
            *(f"{k}={v}" for k, v in FAST_FAILOVER_SETTINGS.items()),
            "flushDiskType=ASYNC_FLUSH",
        )
        self.target = RocketMQTarget(base / "group", lane=2, settings=settings, home=home)
        self.controllers = self.target.controller_addresses
        self.namesrv = self.target.namesrv
        self.keys = Credentials("benchAccessKey", "bench-secret-key-unused-by-rocketmq")
        self.tools = Tools(home, base / "tools", self.keys, self.namesrv)

    def start(self) -> None:
        self.target.up()  # controllers, a leader among them, then the brokers

    def start_brokers(self) -> None:
        pass  # up() started them once the controllers had a leader

    def broker_addresses(self) -> list[str]:
        t = self.target
        return [f"{t.broker_host(s)}:{t.broker_port(s)}" for s in range(t.brokers)]

    def slot_of(self, broker_id: int) -> int:
        return next(
            s
            for s in range(self.target.brokers)
            if read_broker_id(self.target.broker_dir(s) / "store") == broker_id
        )

    def kill(self, broker_id: int) -> int:
        slot = self.slot_of(broker_id)
        node = next(n for n in self.target.nodes(NodeKind.BROKER) if n.index == slot)
        if not self.target.signal(node, signal.SIGKILL):
            raise RuntimeError(f"broker {broker_id} (pid {node.pid}) was not running")
        return slot

    def after_kill(self, slot: int) -> None:
        self.target.procs[f"broker-{slot}"].wait(timeout=15)
        self.target.revive()  # the killed broker again, same address and store

    def close(self) -> None:
        self.target.down()


class BrokergroupSystem:
    """`brokergroup local up --engine rocketmq` in its own directory and ports."""

    name = "brokergroup"

    def __init__(self, home: RocketMQHome, base: Path) -> None:
        self.home = home
        self.root = base / "local"
        self.cli = [sys.executable, "-m", "brokergroup_cli.main", "local"]
        self.settings = [
            "local.controllerApiPort=19878", "local.controllerRaftPort=19880",
            "local.namesrvPort=19876", "local.brokerClientPort=20911",
            "local.controllerRemotingPort=19879", "local.upWaitTimeoutMs=200000",
            "local.restartInitialDelayMs=100", "local.pollIntervalMs=300",
        ]  # fmt: skip
        self.controllers = [f"127.0.1.{i}:19879" for i in (1, 2, 3)]
        self.seen: set[tuple[int, int | None]] = set()
        self.base = base

    def _run(self, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.cli, *args, "--dir", str(self.root)], capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip

    def status(self) -> dict[str, Any]:
        result = self._run("status", "--json")
        data: dict[str, Any] = json.loads(result.stdout)
        for b in [*data["brokers"], *data["controllers"]]:
            if b.get("pid"):
                self.seen.add((b["pid"], None))
        return data

    def start(self) -> None:
        args = ["up", "--detach", "--engine", "rocketmq"]
        for item in self.settings:
            args += ["--set", item]
        up = self._run(*args, timeout_s=300)
        if up.returncode != 0:
            raise RuntimeError(f"local up failed: {up.stdout}\n{up.stderr}")
        status = self.status()
        self.keys = Credentials(status["accessKey"], status["secretKey"])
        self.tools = Tools(self.home, self.base / "tools", self.keys, status["namesrvAddress"])

    def broker_addresses(self) -> list[str]:
        return [b["address"] for b in self.status()["brokers"]]

    def kill(self, broker_id: int) -> int:
        state = json.loads((self.root / "state.json").read_text())
        row = next(b for b in state["brokers"] if b["brokerId"] == broker_id)
        if not send_signal(row["pid"], row["startTicks"], signal.SIGKILL):
            raise RuntimeError(f"broker {broker_id} (pid {row['pid']}) was not running")
        return int(row["index"])

    def after_kill(self, slot: int) -> None:
        pass  # the supervisor restarts it on a new address

    def close(self) -> None:
        self._run("down", timeout_s=120)


def _elected_after(old: int, epoch: int) -> Callable[[Replica], bool]:
    return lambda r: r.master not in (None, old) and r.epoch > epoch


async def measure(system: Any, kills: int, log: Callable[[str], None]) -> dict[str, Any]:
    system.start()
    poller = ControllerPoller(system.controllers, system.keys)
    times: list[float] = []
    try:
        if isinstance(system, RocketMQSystem):
            # A broker that finds no controller leader at start-up gives up on controller
            # mode for good (ReplicasManager: "Failed to start replicasManager").
            deadline = time.monotonic() + 120
            while await poller.find_leader() is None:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"RocketMQ's controllers elected no leader in 120 s ({poller.last_error})"
                    )
                await asyncio.sleep(0.2)
            system.start_brokers()
        await wait_replica(
            poller, lambda r: r.master is not None and len(r.sync_state_set) == 3, 300
        )
        system.tools.create_topic(system.broker_addresses())
        load = Load(system.tools, system.base)
        deadline = time.monotonic() + 90
        while load.acked() < 100 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        for n in range(kills):
            before = await wait_replica(
                poller, lambda r: r.master is not None and len(r.sync_state_set) == 3, 300
            )
            old, epoch = before.master, before.epoch
            assert old is not None
            await asyncio.sleep(1.0)  # a steady second of load before each kill
            slot = system.kill(old)
            t0 = time.monotonic()
            after = await wait_replica(poller, _elected_after(old, epoch), 120)
            elapsed = time.monotonic() - t0
            times.append(elapsed)
            log(f"{system.name} kill {n + 1}/{kills}: broker {old} -> {after.master} in "
                f"{elapsed:.3f} s (epoch {epoch} -> {after.epoch}); {load.acked()} acked")  # fmt: skip
            system.after_kill(slot)
        acked, lost = load.finish()
    finally:
        await poller.close()
        system.close()
    return {"failover_s": summarize(times), "samples_s": [round(t, 4) for t in times],
            "acked": acked, "acked_lost": lost}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="3 kills per system")
    parser.add_argument("--only", choices=("rocketmq", "brokergroup"))
    parser.add_argument("--dir", help="keep the run's files here (default: a temp dir)")
    args = parser.parse_args()
    kills = 3 if args.quick else args.kills
    home = find_home()
    if isinstance(home, str):
        print(f"cannot run: {home}", file=sys.stderr)
        return 2
    if not (cache_home() / "failover-classes" / "FailoverClient.class").exists():
        print(
            "cannot run: FailoverClient is not compiled: run make rocketmq-client", file=sys.stderr
        )
        return 2
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-rmq-ctl-"))
    base.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)

    results: dict[str, Any] = {}
    for cls in (RocketMQSystem, BrokergroupSystem):
        if args.only and cls.name != args.only:
            continue
        work = base / cls.name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        results[cls.name] = asyncio.run(measure(cls(home, work), kills, log))
    rmq = results.get("rocketmq", {}).get("failover_s", {})
    ours = results.get("brokergroup", {}).get("failover_s", {})
    summary = {
        "kills_per_system": kills,
        "rocketmq_controller_p50_s": rmq.get("p50"),
        "rocketmq_controller_p99_s": rmq.get("p99"),
        "brokergroup_controller_p50_s": ours.get("p50"),
        "brokergroup_controller_p99_s": ours.get("p99"),
        "acked_lost": sum(r["acked_lost"] for r in results.values()),
        "acked": sum(r["acked"] for r in results.values()),
        "server_version": home.server_version,
    }
    write_result("rocketmq_controller", {**summary, "systems": results,
                                         "brokerSettings": FAST_FAILOVER_SETTINGS,
                                         "pollIntervalS": POLL_S, "quick": args.quick})  # fmt: skip
    print(f"ceiling (target): brokergroup p99 <= {TARGET_P99_S} s, acked_lost 0")
    print_last_line(summary)
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
