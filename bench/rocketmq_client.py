"""The stock RocketMQ Java client against RocketMQ 5.3 and against brokergroup (issue 19 item 7).

    .venv/bin/python bench/rocketmq_client.py --quick        # 2 kills a side, short loads
    .venv/bin/python bench/rocketmq_client.py                # 10 kills a side
    .venv/bin/python bench/rocketmq_client.py --only rocketmq --kills 12 --dir /tmp/rc --keep
    .venv/bin/python bench/rocketmq_client.py --only brokergroup --failover-only --kills 12
    .venv/bin/python bench/rocketmq_client.py --only brokergroup --engine rocketmq --failover-only

One program, tools/rocketmq/StockClient.java (rocketmq-client 5.3.1 from Maven Central with
default settings, compiled by tools/rocketmq/stock_client.py against the jars
tools/rocketmq/fetch.sh caches outside the repository), drives both sides in the same run on
the same machine:

- **rocketmq**: a stock RocketMQ 5.3 controller-mode group (tools/rocketmq/stock_client.py
  RocketMQGroup): a name server, one DLedger controller, three brokers of one broker set,
  allAckInSyncStateSet=true, SYNC_FLUSH, everything else at RocketMQ's defaults.
- **brokergroup**: `brokergroup local up` (three controllers serving the name server on 9876,
  three brokers with their RocketMQ remoting port), every setting at its default; the client
  signs with the runtime's key pair (AclClientRPCHook). Routes name the runtime's stable
  master address (its forwarder, `masterAddress`) as brokerId 0, so the client follows a new
  master without its 30 s route refresh. `--engine rocketmq`: the same runtime with stock
  RocketMQ 5.3 brokers under the brokergroup controller.

Per side:
1. load: 16 threads of single sends, then 4 threads of batches of 128 (1 KiB bodies); msg/s
   and the p99 of a send call; every SEND_OK's msgId/queue/offset goes to an acks file.
2. failover: one thread of sync sends with default client settings runs throughout; per kill
   the group is first healthy (a master with all three in sync, and a SEND_OK since the last
   kill), then the master is SIGKILLed by PID and the time from the kill to the first SEND_OK
   stamped after it is the failover time. RocketMQ's killed broker is started again by this
   script; brokergroup's supervisor restarts its own.
3. verify: a DefaultLitePullConsumer reads the topics from the first offset; every SEND_OK
   message (load and failover) must come back with its body: `acked_lost`. Matched by the
   body's unique id; consumed msgIds that differ from SendResult's are counted apart
   (`msgIdDiffers`: a stock 5.3 broker stores a batch's messages under the batch's UNIQ_KEY).

Prints the ceiling (loopback TCP) measured in the same run. Writes
bench/results/rocketmq_client.json; the last stdout line is one JSON object. Run it under
`flock /tmp/bg-heavy.lock` (up to seven JVMs).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools" / "rocketmq"))

from _common import loopback_tcp_ceiling, print_last_line, summarize, write_result  # noqa: E402
from _cpu import Sample, cpu_window, load_report, take_sample  # noqa: E402
from _profile import start_profile, top_functions  # noqa: E402
from stock_client import RocketMQGroup, StockClient, missing  # noqa: E402

SINGLE_THREADS = 16
BATCH_THREADS = 4
BATCH_SIZE = 128
BODY_BYTES = 1024
LOAD_TOPIC = "BenchTopic"
FAILOVER_TOPIC = "FailoverTopic"
#: A stock client refreshes routes every 30 s (pollNameServerInterval); give it two rounds
#: plus the broker's own recovery before a kill counts as "no SEND_OK".
FAILOVER_TIMEOUT_S = 120.0
HEALTHY_TIMEOUT_S = 240.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class FailoverLog:
    """The failover mode's result log: `ok|err <currentTimeMillis> ...` per send, stamped when
    the send returned. One thread sends one message at a time, so a send started when the line
    before it was stamped: a SEND_OK counts after a kill only if its send started after it (a
    send in flight at the kill may still be answered by the old master)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def first_ok_after(self, t_ms: int) -> int | None:
        try:
            text = self.path.read_text()
        except OSError:
            return None
        started = None
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            if (
                parts[0] == "ok"
                and parts[2] == "SEND_OK"
                and started is not None
                and started > t_ms
            ):
                return int(parts[1])
            started = int(parts[1])
        return None


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll_s)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


# ---- the two sides -------------------------------------------------------------------------


class RocketMQSide:
    name = "rocketmq"
    verify_consumer = "lite"

    def __init__(self, work: Path) -> None:
        self.group = RocketMQGroup(work / "group")
        self.epoch = 0

    def start(self) -> StockClient:
        self.group.start()
        state = self.group.wait_in_sync(3, 1)
        self.epoch = int(state["MasterEpoch"])
        self.state = state
        log(f"rocketmq: master {state['MasterAddr']} epoch {self.epoch}, 3 in sync")
        self.group.create_topic(LOAD_TOPIC, 8)
        self.group.create_topic(FAILOVER_TOPIC, 4)
        return StockClient(self.group.namesrv, self.group.work / "client")

    def healthy(self) -> bool:
        state = self.group.wait_in_sync(3, self.epoch, timeout_s=HEALTHY_TIMEOUT_S)
        self.epoch = int(state["MasterEpoch"])
        self.state = state
        return True

    def cpu_roles(self) -> dict[int, str]:
        """The group's JVMs by role (name server, controller, broker-n1..3)."""
        return {p.pid: name for name, p in self.group.procs.items() if p.poll() is None}

    def master_role(self) -> str:
        return self.group.master_name(self.state)

    def group_commit(self) -> dict[str, int] | None:
        return None  # a stock broker's group commit is its own thread, not counted

    def kill_master(self) -> str:
        victim = self.group.master_name(self.state)
        self.group.kill(victim)
        return victim

    def after_failover(self, victim: str) -> None:
        self.group.start_broker(victim)
        self.epoch += 1

    def stop(self) -> None:
        self.group.stop()


class BrokergroupSide:
    name = "brokergroup"
    # The broker port's first version serves push consumers; a lite pull consumer receives
    # nothing from it yet (tests/integration/test_stock_client_local.py).
    verify_consumer = "push"

    def __init__(self, work: Path, engine: str = "builtin") -> None:
        from brokergroup_cli.chaos.runtime import Addresses, LocalRuntime

        self.runtime = LocalRuntime(work / "local", Addresses(lane=1), engine=engine)

    def start(self) -> StockClient:
        self.runtime.up()
        # The group's client pair (`local status --json` accessKey): brokers take no other.
        keys = json.loads((self.runtime.root / "client-keys.json").read_text())
        namesrv = ";".join(f"{h}:9876" for h in self.runtime.addresses.controller_hosts)
        self.healthy()
        return StockClient(
            namesrv, self.runtime.root / "client", keys["accessKey"], keys["secretKey"]
        )

    def _info(self) -> dict[str, Any] | None:
        info = self.runtime.replica_info()
        if info is None:
            return None
        data = info.get("data", info)
        return data if isinstance(data, dict) else None

    def healthy(self) -> bool:
        def check() -> dict[str, Any] | None:
            info = self._info()
            if info is None or not info.get("masterAlive") or info.get("masterAddress") is None:
                return None
            alive = [b for b in info.get("brokers", []) if b.get("alive")]
            if len(alive) < 3 or len(info.get("syncStateSet", [])) < 3:
                return None
            return info

        self.info = wait_for(check, HEALTHY_TIMEOUT_S, "brokergroup healthy", poll_s=0.2)
        return True

    def create_topic(self, topic: str, queues: int) -> None:
        """`mqadmin updateTopic` on the group, as the chaos tool's local target makes one."""
        from brokergroup_cli.chaos.targets.local import create_topic

        create_topic(self.runtime, topic, queues)

    def cpu_roles(self) -> dict[int, str]:
        """The runtime's tree: the supervisor (with the master forwarder), its controllers and
        brokers (a broker's own children count as that broker)."""
        from brokergroup_cli.local.state import ChildKind

        state = self.runtime.state()
        roles = {state.supervisor_pid: "supervisor"} if state.supervisor_pid else {}
        for child in self.runtime.live_children(ChildKind.CONTROLLER):
            roles[child.pid or 0] = f"controller-{child.index}"
        for child in self.runtime.live_children(ChildKind.BROKER):
            roles[child.pid or 0] = f"broker-{child.host}"
        return roles

    def master_role(self) -> str:
        return "broker-" + str(self.info["masterAddress"]).rsplit(":", 1)[0]

    def group_commit(self) -> dict[str, int] | None:
        """The master's /v1/status `groupCommit`: fdatasyncs on its loop and in its thread,
        and moves to the thread (store/group_commit.py)."""
        host = str(self.info["masterAddress"]).rsplit(":", 1)[0]
        counts = (self.runtime.broker_status(host) or {}).get("groupCommit")
        return counts if isinstance(counts, dict) else None

    def kill_master(self) -> str:
        host = str(self.info["masterAddress"]).rsplit(":", 1)[0]
        child = self.runtime.broker_on(host)
        self.runtime.signal(child, signal.SIGKILL)
        return host

    def after_failover(self, victim: str) -> None:
        pass  # the local supervisor restarts the broker

    def stop(self) -> None:
        self.runtime.down()


# ---- one side's run ------------------------------------------------------------------------


def cpu_line(side: str, label: str, load: dict[str, Any]) -> str:
    """One log line: CPU per message (client, server), then cores per role over the window."""
    cores = " ".join(f"{role} {c:.2f}" for role, c in load["cpu"].items())
    return (
        f"{side} cpu {label}: client {load['client_cpu_ms_per_msg']} ms/msg, server "
        f"{load['server_cpu_ms_per_msg']} ms/msg (kernel {load['server_kernel_cpu_ms_per_msg']}) "
        f"at {load['msgs_per_s']} msg/s; machine busy "
        f"{load['machine_busy_cores']} cores ({load['other_busy_cores']} not ours) over "
        f"{load['cpuWindowS']} s; cores: {cores}"
        f" (master {load['master']})"
    )


def run_sides(
    sides: list[tuple[str, Callable[[Path], Any]]],
    run: Callable[[Any, Path], dict[str, Any]],
    args: argparse.Namespace,
    work: Path,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Start each side named by `--only` (all by default) in a directory of its own, `run`
    it and stop it: (results, errors) by side name. A side that cannot run is reported and
    the other still runs; its stores and logs stay for a look, the rest go unless --keep."""
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    try:
        for name, make in sides:
            if args.only not in (None, name):
                continue
            side_dir = work / name
            side_dir.mkdir(parents=True, exist_ok=True)
            side = make(side_dir)
            try:
                results[name] = run(side, side_dir)
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {e}"[:2000]
                log(f"{name} failed: {errors[name]}")
            finally:
                side.stop()
                if name in errors:
                    log(f"{name}: its stores and logs stay in {side_dir}")
                elif not args.keep:
                    shutil.rmtree(side_dir, ignore_errors=True)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    return results, errors


def start_profiles(
    side: Any, seconds: float, prefix: Path
) -> dict[str, tuple[subprocess.Popen[bytes], Path]]:
    """py-spy on the master broker and on one slave over the measured window (--profile)."""
    master = side.master_role()
    brokers = [(pid, role) for pid, role in side.cpu_roles().items() if role.startswith("broker-")]
    chosen = {"master": next((p for p, r in brokers if r == master), None)}
    chosen["slave"] = next((p for p, r in brokers if r != master), None)
    return {
        role: (start_profile(pid, seconds, out), out)
        for role, pid in chosen.items()
        if pid
        for out in [prefix.with_name(f"{prefix.name}-{role}.pyspy")]
    }


def run_side(side: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    client: StockClient = side.start()
    out: dict[str, Any] = {}
    acks: list[Path] = []
    loads = (("single", SINGLE_THREADS, 1), ("batch", BATCH_THREADS, BATCH_SIZE))
    for label, threads, batch in () if args.failover_only else loads:
        path = work / f"{side.name}-{label}.acks"
        samples: dict[str, Sample] = {}
        commits: dict[str, dict[str, int] | None] = {}
        profilers: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

        def sample(
            event: str,
            client_pid: int,
            samples: dict[str, Sample] = samples,
            commits: dict[str, dict[str, int] | None] = commits,
            label: str = label,
            profilers: dict[str, tuple[subprocess.Popen[bytes], Path]] = profilers,
        ) -> None:
            # The program's markers bound its measured window: CPU is sampled at both.
            if event in ("measuring", "measured"):
                samples[event] = take_sample({**side.cpu_roles(), client_pid: "client"})
                commits[event] = side.group_commit()
            if event == "measuring" and args.profile and side.name == "brokergroup":
                profilers.update(start_profiles(side, args.seconds, work / label))

        summary = client.run_events(
            "load", work / f"{side.name}-{label}.stderr", sample,
            topic=LOAD_TOPIC, threads=threads, batch=batch, size=BODY_BYTES,
            seconds=args.seconds, warmup_s=args.warmup, acks=path, run=f"{side.name}-{label}",
            timeout_s=args.seconds + args.warmup + 180,
        )[-1]  # fmt: skip
        if len(samples) != 2:
            raise RuntimeError(f"{side.name} load {label}: no measured-window markers {samples}")
        window = cpu_window(samples["measuring"], samples["measured"])
        summary |= load_report(window, int(summary["messages"])) | {"master": side.master_role()}
        first, last = commits.get("measuring"), commits.get("measured")
        if first is not None and last is not None:  # where the window's fdatasyncs ran
            summary["groupCommit"] = {k: last[k] - first.get(k, 0) for k in last}
        for role, (profiler, out_file) in profilers.items():
            profiler.wait(timeout=120)
            if out_file.exists():
                summary[f"{role}Profile"] = top_functions(out_file.read_text())
        log(f"{side.name} load {label}: {summary}")
        log(cpu_line(side.name, label, summary))
        out[label] = summary
        acks.append(path)
    verify_load: dict[str, Any] = {"acked": 0, "lost": 0, "badBody": 0, "msgIdDiffers": 0}
    if acks:
        verify_load = client.run(
            "verify",
            topic=LOAD_TOPIC,
            acks=",".join(map(str, acks)),
            idle_s=30,
            timeout_s=900,
            consumer=side.verify_consumer,
        )[-1]
        log(f"{side.name} verify load: {verify_load}")

    fo_acks, fo_log, stop = (work / f"{side.name}-failover.{x}" for x in ("acks", "log", "stop"))
    sender = client.start(
        "failover", work / f"{side.name}-failover.out", topic=FAILOVER_TOPIC, acks=fo_acks,
        log=fo_log, stop=stop, seconds=24 * 3600, run=f"{side.name}-fo",
    )  # fmt: skip
    results = FailoverLog(fo_log)
    trials: list[dict[str, Any]] = []
    try:
        for kill in range(args.kills):
            side.healthy()
            since = int(time.time() * 1000)
            wait_for(lambda s=since: results.first_ok_after(s), HEALTHY_TIMEOUT_S,
                     f"{side.name}: a SEND_OK before kill {kill + 1}")  # fmt: skip
            t_kill = int(time.time() * 1000)
            victim = side.kill_master()
            try:
                first = wait_for(lambda t=t_kill: results.first_ok_after(t),
                                 FAILOVER_TIMEOUT_S, "first SEND_OK after the kill", 0.1)  # fmt: skip
                seconds = (first - t_kill) / 1000
            except TimeoutError:
                first, seconds = None, None
            trials.append(
                {"kill": kill + 1, "victim": victim, "killedAtMs": t_kill, "firstSendOkMs": first,
                 "firstSendOkS": seconds}
            )  # fmt: skip
            log(
                f"{side.name} kill {kill + 1}/{args.kills}: {victim}, first SEND_OK after {seconds} s"
            )
            side.after_failover(victim)
        side.healthy()
    finally:
        stop.touch()
        try:
            sender.wait(timeout=120)
        except Exception:
            sender.kill()
            sender.wait()
    verify_fo = client.run(
        "verify",
        topic=FAILOVER_TOPIC,
        acks=fo_acks,
        idle_s=30,
        timeout_s=900,
        consumer=side.verify_consumer,
    )[-1]
    log(f"{side.name} verify failover: {verify_fo}")
    times = [t["firstSendOkS"] for t in trials if t["firstSendOkS"] is not None]
    single, batch = out.get("single", {}), out.get("batch", {})
    out |= {
        "msgs_per_s": single.get("msgs_per_s"),
        "p99_ms": single.get("p99_ms"),
        "batch_msgs_per_s": batch.get("msgs_per_s"),
        "batch_p99_ms": batch.get("p99_ms"),
        "client_cpu_ms_per_msg": single.get("client_cpu_ms_per_msg"),
        "server_cpu_ms_per_msg": single.get("server_cpu_ms_per_msg"),
        "server_kernel_cpu_ms_per_msg": single.get("server_kernel_cpu_ms_per_msg"),
        "batch_client_cpu_ms_per_msg": batch.get("client_cpu_ms_per_msg"),
        "batch_server_cpu_ms_per_msg": batch.get("server_cpu_ms_per_msg"),
        "batch_server_kernel_cpu_ms_per_msg": batch.get("server_kernel_cpu_ms_per_msg"),
        "failover": summarize(times),
        "failoverTimeouts": sum(1 for t in trials if t["firstSendOkS"] is None),
        "trials": trials,
        "verifyLoad": verify_load,
        "verifyFailover": verify_fo,
        "acked": verify_load["acked"] + verify_fo["acked"],
        "msgIdDiffers": verify_load["msgIdDiffers"] + verify_fo["msgIdDiffers"],
        "acked_lost": verify_load["lost"]
        + verify_fo["lost"]
        + verify_load["badBody"]
        + verify_fo["badBody"],
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 kills a side, 5 s loads")
    ap.add_argument("--kills", type=int, default=None)
    ap.add_argument("--seconds", type=int, default=None, help="measured seconds per load")
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="seconds of load before measuring, so both sides' JITs are warm (10; --quick 3)",
    )
    ap.add_argument("--only", choices=("rocketmq", "brokergroup"), default=None)
    ap.add_argument(
        "--dir", type=Path, default=None, help="where the sides run (default: a temp dir)"
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep the sides' stores and logs (several GB after a full run); without it "
        "a side that ran is removed at its end, from --dir too",
    )
    ap.add_argument(
        "--engine",
        choices=("builtin", "rocketmq"),
        default="builtin",
        help="the brokergroup side's brokers (`local up --engine`)",
    )
    ap.add_argument(
        "--failover-only", action="store_true", help="skip the loads: only the kills and verify"
    )
    ap.add_argument("--name", default=None, help="result file name (default: by the options)")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="py-spy brokergroup's master and one slave over each load's measured window",
    )
    args = ap.parse_args()
    args.kills = args.kills if args.kills is not None else (2 if args.quick else 10)
    args.seconds = args.seconds if args.seconds is not None else (5 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (3 if args.quick else 10)
    reason = missing(servers=args.only != "brokergroup" or args.engine == "rocketmq")
    if reason is not None:
        print(reason, file=sys.stderr)
        return 3
    loop = loopback_tcp_ceiling()
    log(f"ceiling: loopback TCP {loop.to_json()}")
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-rocketmq-client-"))
    work.mkdir(parents=True, exist_ok=True)
    sides: list[tuple[str, Callable[[Path], Any]]] = [
        ("rocketmq", RocketMQSide),
        ("brokergroup", lambda path: BrokergroupSide(path, str(args.engine))),
    ]
    results, errors = run_sides(
        sides, lambda side, side_dir: run_side(side, args, side_dir), args, work
    )

    def pick(side: str, key: str) -> Any:
        return results.get(side, {}).get(key)

    def fo(side: str, q: str) -> Any:
        return (results.get(side, {}).get("failover") or {}).get(q)

    lost = [results[s]["acked_lost"] for s in results]
    from brokergroup_broker import kernels
    from brokergroup_remoting import event_loop

    summary: dict[str, Any] = {
        "benchmark": "rocketmq_client",
        # The loop brokergroup's processes ran on (the local supervisor passes its own on).
        "brokergroupEventLoop": event_loop.configured().value,
        # The brokers' kernels: compiled or the Python references (BROKERGROUP_NATIVE).
        "brokergroupKernels": kernels.configured().value,
        "quick": args.quick,
        "kills": args.kills,
        "loadSeconds": None if args.failover_only else args.seconds,
        "warmupSeconds": None if args.failover_only else args.warmup,
        "brokergroupEngine": args.engine,
        "brokergroupMasterAddress": "the local runtime's forwarder (stable master address)",
        "client": "org.apache.rocketmq:rocketmq-client:5.3.1 (tools/rocketmq/StockClient.java)",
        "rocketmq_msgs_per_s": pick("rocketmq", "msgs_per_s"),
        "rocketmq_p99_ms": pick("rocketmq", "p99_ms"),
        "rocketmq_batch_msgs_per_s": pick("rocketmq", "batch_msgs_per_s"),
        "rocketmq_batch_p99_ms": pick("rocketmq", "batch_p99_ms"),
        "rocketmq_client_cpu_ms_per_msg": pick("rocketmq", "client_cpu_ms_per_msg"),
        "rocketmq_server_cpu_ms_per_msg": pick("rocketmq", "server_cpu_ms_per_msg"),
        "rocketmq_server_kernel_cpu_ms_per_msg": pick("rocketmq", "server_kernel_cpu_ms_per_msg"),
        "rocketmq_batch_client_cpu_ms_per_msg": pick("rocketmq", "batch_client_cpu_ms_per_msg"),
        "rocketmq_batch_server_cpu_ms_per_msg": pick("rocketmq", "batch_server_cpu_ms_per_msg"),
        "rocketmq_failover_p50_s": fo("rocketmq", "p50"),
        "rocketmq_failover_p99_s": fo("rocketmq", "p99"),
        "brokergroup_msgs_per_s": pick("brokergroup", "msgs_per_s"),
        "brokergroup_p99_ms": pick("brokergroup", "p99_ms"),
        "brokergroup_batch_msgs_per_s": pick("brokergroup", "batch_msgs_per_s"),
        "brokergroup_batch_p99_ms": pick("brokergroup", "batch_p99_ms"),
        "brokergroup_client_cpu_ms_per_msg": pick("brokergroup", "client_cpu_ms_per_msg"),
        "brokergroup_server_cpu_ms_per_msg": pick("brokergroup", "server_cpu_ms_per_msg"),
        "brokergroup_server_kernel_cpu_ms_per_msg": pick(
            "brokergroup", "server_kernel_cpu_ms_per_msg"
        ),
        "brokergroup_batch_client_cpu_ms_per_msg": pick(
            "brokergroup", "batch_client_cpu_ms_per_msg"
        ),
        "brokergroup_batch_server_cpu_ms_per_msg": pick(
            "brokergroup", "batch_server_cpu_ms_per_msg"
        ),
        "brokergroup_failover_p50_s": fo("brokergroup", "p50"),
        "brokergroup_failover_p99_s": fo("brokergroup", "p99"),
        "acked_lost": sum(lost) if lost else None,
        "errors": errors,
        "ceiling": {"loopback": loop.to_json()},
    }
    name = "rocketmq_client"
    if args.failover_only or args.engine != "builtin" or args.only is not None or not args.kills:
        # A partial run keeps its own file: the full comparison stays in rocketmq_client.json.
        name += f"_{args.only or 'both'}_{args.engine}" + (
            "_failover" if args.failover_only else "" if args.kills else "_loads"
        )
    write_result(args.name or name, {**summary, "sides": results})
    print_last_line(summary)
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
