"""Replicated produce benchmark (DESIGN.md §9 "Replicated produce").

    .venv/bin/python bench/produce.py --quick                 # < 60 s
    .venv/bin/python bench/produce.py                         # 20 s window, + inflight-4 variant
    .venv/bin/python bench/produce.py --producers 2 --batch 64 --inflight 8 --seconds 30
    .venv/bin/python bench/produce.py --profile               # + py-spy of the master
    .venv/bin/python bench/produce.py --tls                   # plaintext, then TLS

What it does
------------
1. Ceilings first, on an idle machine, in the same run: the disk write
   ceiling (`store.ceiling.measure_disk_ceiling`, sequential 1 MiB writes +
   fdatasync, in the directory the brokers' stores live in) and the loopback
   TCP ceiling (`bench/_common.loopback_tcp_ceiling`).
2. 3 controllers + 3 brokers as real processes (tests/integration
   `BrokerGroupHarness`) on loopback block 127.0.40.0/24 (controllers .1-.3,
   brokers .10-.12). Every broker setting is at its default
   (allAckInSyncStateSet=true, SYNC_FLUSH, 1 GiB segments) -- the harness's
   fast test timeouts are reset to the defaults too. `--flush ASYNC_FLUSH`
   is an extra variant, never the headline.
3. Waits for a master holding its lease and a SyncStateSet of 3.
4. `--producers` producer *processes* (separate from the brokers, so where
   the CPU goes is visible per process), each with one pipelined connection
   to the master and `--inflight` batches of `--batch` 1 KiB messages in
   flight. Each batch's ack latency is send() -> acknowledged response (the
   broker acks only when the batch is durable on every SyncStateSet member
   and covered by confirmOffset). After `--warmup` seconds the steady window
   of `--seconds` starts; only batches acknowledged inside it count.
5. CPU per process over the window from /proc/<pid>/stat (100% = one core;
   the machine has `os.cpu_count()` cores) and the whole machine's busy and
   iowait share from /proc/stat.

Latency: per batch (every batch is acknowledged as a whole), and per message
(each message weighted by its batch; with equal batches the percentiles are
the same values, reported separately so a reader need not know that).

Output: a human summary, bench/results/produce.json, and as the LAST stdout
line one JSON object with msgs_per_s, mb_per_s (1 KiB bodies), p50_ms,
p99_ms, ceiling_mb_per_s (the smaller of disk/3 and loopback/3: every body
byte is written by 3 replicas to one shared disk and crosses loopback 3
times), the disk and loopback ceilings, config and CPU per process.

TLS (`--tls`, issue 36): the same run twice on fresh clusters, plaintext then TLS on the
data path: the brokers' client protocol and remoting ports enforcing TLS (the producers verify
the master against a CA made for the run) and HA replication over mutual TLS (every broker
holds a certificate of that CA). The controllers' API stays HTTP here: it is off the produce
path (heartbeats and elections only). The comparison (msg/s, p50, p99, CPU per message, both
ways) goes to bench/results/produce_tls.json, not produce.json.

Every process this script starts is stopped by PID (SIGTERM, then SIGKILL),
also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import (  # noqa: E402
    loopback_tcp_ceiling,
    percentile,
    print_last_line,
    summarize,
    write_result,
)

BLOCK = 40  # 127.0.40.0/24: not the local runtime's 127.0.0.x/127.0.1.x, not the test blocks
BODY_BYTES = 1024
TOPIC = "BenchProduce"
REPLICAS = 3

#: The harness's FAST_SETTINGS put back to BrokerConfig's defaults: the bench
#: measures the shipped configuration, not the test one.
DEFAULT_SETTINGS: dict[str, str] = {
    "heartbeatIntervalMs": "500",
    "heartbeatTimeoutMs": "2000",
    "masterLeaseMs": "1500",
    "haMaxTimeSlaveNotCatchUpMs": "5000",
    "slaveTimeoutMs": "3000",
    "syncStateSetCheckIntervalMs": "500",
    "mappedFileSizeCommitLog": str(1 << 30),
    "controllerRequestTimeoutMs": "1000",
    "watchTimeoutMs": "10000",
    "flushIntervalMs": "500",
    "flushDiskType": "SYNC_FLUSH",
    "allAckInSyncStateSet": "true",
}


# ============================================================== producer worker


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    from brokergroup_broker.protocol.client import BrokerConnection, ClientConfig
    from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage
    from brokergroup_remoting.keys import read_key_file
    from brokergroup_remoting.tls import client_context

    tls = client_context(Path(args.ca_file)) if args.ca_file else None
    conn = await BrokerConnection.connect(
        args.address,
        ClientConfig(max_in_flight=max(args.inflight, 1), tls=tls),
        credentials=read_key_file(args.key_file) if args.key_file else None,
    )
    body = bytes(os.urandom(BODY_BYTES))
    batch = [ProduceMessage(TOPIC, body) for _ in range(args.batch)]
    start = args.start_at
    window_start = start + args.warmup
    window_end = window_start + args.seconds
    latencies: list[float] = []  # seconds, batches acked inside the window
    errors: dict[str, int] = {}
    sent_batches = 0
    # Wait for the common start so all producers load the broker together.
    await asyncio.sleep(max(0.0, start - time.time()))

    async def lane() -> None:
        nonlocal sent_batches
        while time.time() < window_end:
            t0 = time.perf_counter()
            w0 = time.time()
            try:
                await conn.send(TOPIC, batch)
            except BrokerError as exc:
                errors[exc.code.name] = errors.get(exc.code.name, 0) + 1
                await asyncio.sleep(0.01)
                continue
            except (OSError, TimeoutError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                raise
            t1 = time.perf_counter()
            sent_batches += 1
            w1 = w0 + (t1 - t0)
            if window_start <= w1 < window_end:
                latencies.append(t1 - t0)

    try:
        await asyncio.gather(*(lane() for _ in range(args.inflight)))
    finally:
        await conn.close()
    return {"latencies": latencies, "errors": errors, "batches_total": sent_batches}


def worker_main(args: argparse.Namespace) -> int:
    result = asyncio.run(_worker(args))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


# ============================================================== CPU accounting

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After "pid (comm)": state is fields[0]; utime, stime are fields 11, 12.
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def _machine_cpu() -> tuple[float, float, float]:
    """(total, idle, iowait) jiffies from /proc/stat."""
    parts = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [float(v) for v in parts]
    return sum(values[:8]), values[3], values[4]


def _all_procs() -> dict[int, tuple[str, float]]:
    """pid -> (command name, CPU seconds) of every process on the machine."""
    out: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        comm = text[text.find("(") + 1 : text.rfind(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[int(entry.name)] = (comm, (int(fields[11]) + int(fields[12])) / _CLK_TCK)
    return out


@dataclass
class CpuSample:
    at: float
    procs: dict[str, float | None]
    machine: tuple[float, float, float]
    everyone: dict[int, tuple[str, float]]
    own_pids: set[int]


def sample_cpu(pids: dict[str, int]) -> CpuSample:
    return CpuSample(
        time.perf_counter(),
        {n: _proc_cpu_s(p) for n, p in pids.items()},
        _machine_cpu(),
        _all_procs(),
        set(pids.values()),
    )


def cpu_between(a: CpuSample, b: CpuSample) -> dict[str, Any]:
    elapsed = b.at - a.at
    per: dict[str, float | None] = {}
    for name, start in a.procs.items():
        end = b.procs.get(name)
        per[name] = (
            None if start is None or end is None else round((end - start) / elapsed * 100, 1)
        )
    # Everything else on the machine (other users, kernel threads): the bench shares
    # 2 cores with them, so say how much they took.
    ours = a.own_pids
    others: dict[str, float] = {}
    for pid, (comm, end_s) in b.everyone.items():
        if pid in ours or pid == os.getpid():
            continue
        start_s = a.everyone.get(pid, (comm, 0.0))[1]
        if end_s - start_s > 0:
            others[comm] = others.get(comm, 0.0) + end_s - start_s
    other_total = sum(others.values()) / elapsed * 100
    top_others = sorted(others.items(), key=lambda kv: -kv[1])[:5]
    total = b.machine[0] - a.machine[0]
    idle = b.machine[1] - a.machine[1]
    iowait = b.machine[2] - a.machine[2]
    return {
        "per_process_pct_of_one_core": per,
        "machine_busy_pct": round((total - idle - iowait) / total * 100, 1) if total else None,
        "machine_iowait_pct": round(iowait / total * 100, 1) if total else None,
        "cores": os.cpu_count(),
        "bench_processes_pct": round(sum(v for v in per.values() if v is not None), 1),
        "other_processes_pct": round(other_total, 1),
        "top_other_processes_pct": {k: round(v / elapsed * 100, 1) for k, v in top_others},
    }


# ============================================================== orchestration


def stop_pid(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def measure_ceilings(directory: Path, quick: bool) -> dict[str, Any]:
    from brokergroup_broker.store.ceiling import measure_disk_ceiling

    disk = measure_disk_ceiling(
        directory,
        seq_total_bytes=(64 if quick else 256) << 20,
        small_ops=200 if quick else 1000,
    )
    loop = loopback_tcp_ceiling(
        f"127.0.{BLOCK}.1",
        round_trips=500 if quick else 2000,
        stream_bytes=(128 if quick else 512) << 20,
    )
    return {"disk": disk.as_dict(), "loopback": loop.to_json()}


def tls_material(directory: Path) -> dict[str, Path]:
    """A CA and one certificate naming every address of the block (each broker presents it
    on its ports and its HA link), written under `directory`."""
    import datetime

    from brokergroup_remoting.certificates import issue, make_ca

    now = datetime.datetime.now(datetime.UTC)
    ca = make_ca("brokergroup bench CA", now=now)
    names = [f"127.0.{BLOCK}.{i}" for i in range(1, 64)]
    directory.mkdir(parents=True, exist_ok=True)
    files = {name: directory / name for name in ("ca.crt", "ca.key", "server.crt", "server.key")}
    ca.write(files["ca.crt"], files["ca.key"])
    issue(ca, "bench-broker", names, now=now).write(files["server.crt"], files["server.key"])
    return files


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.integration.broker_harness import BrokerGroupHarness

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-produce-"))
    base.mkdir(parents=True, exist_ok=True)
    print(f"workdir {base}", flush=True)
    ceilings = measure_ceilings(base, args.quick)
    disk_mb = ceilings["disk"]["seq_write_fdatasync_mb_s"]
    loop_mb = ceilings["loopback"]["stream_mb_per_s"]
    print(
        f"ceilings: disk seq write+fdatasync {disk_mb:.0f} MB/s, "
        f"4 KiB write+fdatasync {ceilings['disk']['small_write_fdatasync_ops_s']:.0f}/s; "
        f"loopback TCP {loop_mb:.0f} MB/s, rtt p50 {ceilings['loopback']['rtt_p50_us']} us",
        flush=True,
    )
    settings = {**DEFAULT_SETTINGS, "flushDiskType": args.flush}
    tls_files = tls_material(base / "tls") if args.tls_on else None

    class Group(BrokerGroupHarness):
        def command(self, slot: int, extra_settings: Any = None) -> list[str]:
            cmd = super().command(slot, extra_settings)
            if tls_files is None:
                return cmd
            # Client-facing ports enforce TLS; certificate + CA: HA is mutual TLS.
            return [*cmd, "--remoting-tls-mode", "enforcing",
                    "--tls-cert-file", str(tls_files["server.crt"]),
                    "--tls-key-file", str(tls_files["server.key"]),
                    "--tls-ca-file", str(tls_files["ca.crt"])]  # fmt: skip

    group = Group(
        base / "group", block=BLOCK, replicas=REPLICAS, settings=settings, client_auth=True
    )
    producers: list[subprocess.Popen[bytes]] = []
    profilers: list[subprocess.Popen[bytes]] = []
    try:
        t_start = time.monotonic()
        group.start_all()
        master = group.wait_for_master(timeout_s=60)
        group.wait_for_sync_state_set(REPLICAS, timeout_s=60)
        ready_s = time.monotonic() - t_start
        address = group.brokers[master].address
        print(f"master slot {master} at {address}; SyncStateSet of 3 after {ready_s:.1f}s")

        start_at = time.time() + 1.5  # producer interpreters start meanwhile
        for _ in range(args.producers):
            cmd = [
                sys.executable, __file__, "--worker",
                "--address", address,
                "--key-file", str(group.client_key_file),
                *(["--ca-file", str(tls_files["ca.crt"])] if tls_files else []),
                "--batch", str(args.batch),
                "--inflight", str(args.inflight),
                "--warmup", str(args.warmup),
                "--seconds", str(args.seconds),
                "--start-at", str(start_at),
            ]  # fmt: skip
            producers.append(
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            )
        pids: dict[str, int] = {}
        for slot, broker in group.brokers.items():
            assert broker.process is not None
            role = "master" if slot == master else f"slave{slot}"
            pids[f"broker{slot}_{role}"] = broker.process.pid
        for node_id, node in group.controllers.nodes.items():
            if node.process is not None:
                pids[f"controller{node_id}"] = node.process.pid
        for i, proc in enumerate(producers):
            pids[f"producer{i}"] = proc.pid

        window_start = start_at + args.warmup
        time.sleep(max(0.0, window_start - time.time()))
        before = sample_cpu(pids)
        if args.profile:
            slave = next(n for n in pids if n.startswith("broker") and "slave" in n)
            for name, suffix in ((f"broker{master}_master", "master"), (slave, "slave")):
                profilers.append(
                    subprocess.Popen(
                        [
                            str(Path(sys.executable).parent / "py-spy"),
                            "record",
                            "--pid",
                            str(pids[name]),
                            "--duration",
                            str(max(1, int(args.seconds) - 1)),
                            "--rate",
                            "100",
                            "--format",
                            "raw",
                            "--nonblocking",
                            "--output",
                            f"{args.profile_out}.{suffix}.txt",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        time.sleep(max(0.0, window_start + args.seconds - time.time()))
        after = sample_cpu(pids)
        cpu = cpu_between(before, after)

        results: list[dict[str, Any]] = []
        for proc in producers:
            out, _ = proc.communicate(timeout=args.warmup + args.seconds + 60)
            if proc.returncode != 0:
                raise RuntimeError(f"producer {proc.pid} failed with {proc.returncode}")
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        for profiler in profilers:
            profiler.wait(timeout=60)
        status = group.status(master)
    except BaseException:
        print(group.logs(tail_lines=30), file=sys.stderr)
        raise
    finally:
        for profiler in profilers:
            stop_pid(profiler)
        for proc in producers:
            stop_pid(proc)
        group.stop_all()
        if not args.dir and not args.keep:
            shutil.rmtree(base, ignore_errors=True)

    latencies_ms = sorted(x * 1000 for r in results for x in r["latencies"])
    batches = len(latencies_ms)
    msgs = batches * args.batch
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    msgs_per_s = msgs / args.seconds
    bench_cpu_pct = cpu["bench_processes_pct"]
    mb_per_s = msgs_per_s * BODY_BYTES / 1e6
    ceiling_mb = min(disk_mb / REPLICAS, loop_mb / REPLICAS)
    per_batch = summarize(latencies_ms, digits=2)
    # Each message is acknowledged with its batch, so every message of a batch has the
    # batch's latency: one sample per message (not per batch). Batches all hold
    # args.batch messages here, so the percentiles equal the per-batch ones.
    per_message = summarize([x for x in latencies_ms for _ in range(args.batch)], digits=2)
    per_message["count"] = msgs
    from brokergroup_broker import kernels
    from brokergroup_remoting import event_loop

    result: dict[str, Any] = {
        "benchmark": "produce",
        # The loop the brokers and controllers ran on (they read the same environment).
        "eventLoop": event_loop.configured().value,
        "kernels": kernels.configured().value,  # BROKERGROUP_NATIVE, read the same way
        "msgs_per_s": round(msgs_per_s),
        "mb_per_s": round(mb_per_s, 1),
        "p50_ms": round(percentile(latencies_ms, 50), 2) if latencies_ms else None,
        "p99_ms": round(percentile(latencies_ms, 99), 2) if latencies_ms else None,
        "ceiling_mb_per_s": round(ceiling_mb, 1),
        "disk_ceiling_mb_per_s": disk_mb,
        "loopback_ceiling_mb_per_s": loop_mb,
        "target": {"msgs_per_s": 50_000, "p99_ms": 20},
        "meets_target": bool(
            latencies_ms and msgs_per_s >= 50_000 and percentile(latencies_ms, 99) <= 20
        ),
        # The machine is shared: CPU time per message of the bench's own processes is the
        # number that does not move with other users' load.
        "cpu_us_per_msg": round(bench_cpu_pct / 100 * 1e6 / msgs_per_s, 1) if msgs else None,
        "latency_ms_per_batch": per_batch,
        "latency_ms_per_message": per_message,
        "errors": errors,
        "config": {
            "replicas": REPLICAS,
            "producers": args.producers,
            "batch": args.batch,
            "inflight_per_producer": args.inflight,
            "messages_in_flight": args.producers * args.inflight * args.batch,
            "body_bytes": BODY_BYTES,
            "warmup_s": args.warmup,
            "window_s": args.seconds,
            "broker_settings": settings,
            "quick": args.quick,
            "tls": args.tls_on,
        },
        "cpu": cpu,
        "ceilings": ceilings,
        "master_status": {
            k: status.get(k) for k in ("maxOffset", "confirmOffset", "syncStateSet", "slaves")
        }
        if status
        else None,
    }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run, < 60 s")
    parser.add_argument("--producers", type=int, default=2, help="producer processes")
    parser.add_argument("--batch", type=int, default=128, help="messages per batch")
    parser.add_argument("--inflight", type=int, default=2, help="batches in flight per producer")
    parser.add_argument(
        "--variant-inflight",
        type=int,
        nargs="*",
        default=None,
        help="after the headline, the same run again (fresh cluster) with these in-flight "
        "depths; summaries go under 'variants' (default: 4 for a full run, none with --quick)",
    )
    parser.add_argument("--seconds", type=float, default=None, help="steady window length")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before the window")
    parser.add_argument("--flush", choices=("SYNC_FLUSH", "ASYNC_FLUSH"), default="SYNC_FLUSH")
    parser.add_argument("--dir", default=None, help="work directory (kept)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results")
    parser.add_argument("--profile", action="store_true", help="py-spy record the master")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="run plaintext, then TLS (client port enforcing, HA mutual TLS) on a fresh "
        "cluster; the comparison goes to bench/results/produce_tls.json",
    )
    parser.add_argument(
        "--flush-off-loop-ab",
        type=int,
        default=0,
        metavar="PAIRS",
        help="PAIRS pairs of runs, the broker's periodic flush on the event loop and off it "
        "(BROKERGROUP_FLUSH_OFF_LOOP=0/1), alternating which goes first; every run's numbers "
        "and ceilings and each side's medians go to bench/results/produce_flush_off_loop.json",
    )
    parser.add_argument(
        "--profile-out", default="/tmp/produce-profile", help="prefix of the py-spy raw files"
    )
    # Internal: a producer process.
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--key-file", help=argparse.SUPPRESS)
    parser.add_argument("--ca-file", help=argparse.SUPPRESS)
    parser.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seconds is None:
        args.seconds = 8.0 if args.quick else 20.0
    if args.warmup is None:
        args.warmup = 3.0 if args.quick else 5.0
    if args.worker:
        return worker_main(args)
    if args.variant_inflight is None:
        args.variant_inflight = [] if args.quick or args.tls else [4]
    args.tls_on = False
    if args.flush_off_loop_ab:
        return flush_off_loop_ab(args)
    result = run(args)
    print(
        f"replicated produce: {result['msgs_per_s']} msgs/s, {result['mb_per_s']} MB/s "
        f"(ceiling {result['ceiling_mb_per_s']} MB/s), batch p50 {result['p50_ms']} ms, "
        f"p99 {result['p99_ms']} ms, errors {result['errors']}"
    )
    print(f"cpu: {json.dumps(result['cpu'])}")
    variants: dict[str, Any] = {}
    for depth in args.variant_inflight:
        # Same settings (3 replicas, allAck, SYNC_FLUSH), fresh cluster, deeper pipeline:
        # more messages in flight trade latency (Little's law) for throughput.
        v_args = argparse.Namespace(**{**vars(args), "inflight": depth, "profile": False})
        v = run(v_args)
        variants[f"inflight_{depth}"] = {
            k: v[k]
            for k in (
                "msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg", "meets_target",
                "ceiling_mb_per_s", "errors",
            )
        } | {
            "messages_in_flight": args.producers * depth * args.batch,
            "cpu": v["cpu"],
        }  # fmt: skip
        print(
            f"variant inflight {depth}: {v['msgs_per_s']} msgs/s, p50 {v['p50_ms']} ms, "
            f"p99 {v['p99_ms']} ms, {v['cpu_us_per_msg']} us CPU/msg"
        )
    if variants:
        result["variants"] = variants
    name = "produce"
    if args.tls:
        name, result = "produce_tls", compare_tls(result, run(argparse.Namespace(
            **{**vars(args), "tls_on": True, "profile": False})))  # fmt: skip
    if not args.no_write:
        path = write_result(name, result)
        print(f"wrote {path}")
    print_last_line(result)
    return 0


#: The broker's switch for its periodic flush (brokergroup_broker.core.broker).
FLUSH_OFF_LOOP_ENV = "BROKERGROUP_FLUSH_OFF_LOOP"


def flush_off_loop_ab(args: argparse.Namespace) -> int:
    """Alternating pairs, flush on the loop ("0") and off it ("1"), one fresh group each;
    the brokers inherit the switch from this process's environment (broker_harness)."""
    keys = ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg", "errors")
    runs: list[dict[str, Any]] = []
    one = argparse.Namespace(**{**vars(args), "variant_inflight": [], "profile": False})
    try:
        for pair in range(args.flush_off_loop_ab):
            for off in (False, True) if pair % 2 == 0 else (True, False):
                os.environ[FLUSH_OFF_LOOP_ENV] = "1" if off else "0"
                r = run(one)
                runs.append(
                    {"pair": pair + 1, "flush_off_loop": off}
                    | {k: r[k] for k in keys}
                    | {"cpu": r["cpu"], "ceilings": r["ceilings"]}
                )
                print(
                    f"pair {pair + 1} flush {'off' if off else 'on'} the loop: "
                    f"{r['msgs_per_s']} msgs/s, p99 {r['p99_ms']} ms",
                    flush=True,
                )
    finally:
        os.environ.pop(FLUSH_OFF_LOOP_ENV, None)

    def median_of(off: bool, key: str) -> float | None:
        values = [r[key] for r in runs if r["flush_off_loop"] is off and r[key] is not None]
        return statistics.median(values) if values else None

    result = {
        "benchmark": "produce_flush_off_loop",
        "command": "bench/produce.py"
        + (" --quick" if args.quick else "")
        + f" --flush-off-loop-ab {args.flush_off_loop_ab}",
        "median": {
            side: {k: median_of(off, k) for k in ("msgs_per_s", "p99_ms", "cpu_us_per_msg")}
            for side, off in (("flush_on_loop", False), ("flush_off_loop", True))
        },
        "runs": runs,
    }
    if not args.no_write:
        print(f"wrote {write_result('produce_flush_off_loop', result)}")
    print(json.dumps(result["median"]))
    return 0


def compare_tls(plain: dict[str, Any], sealed: dict[str, Any]) -> dict[str, Any]:
    """The cost of TLS: both runs' headline numbers and the ratios."""
    keys = ("msgs_per_s", "mb_per_s", "p50_ms", "p99_ms", "cpu_us_per_msg", "errors")
    both = {"plaintext": {k: plain[k] for k in keys}, "tls": {k: sealed[k] for k in keys}}
    for side, run_result in (("plaintext", plain), ("tls", sealed)):
        both[side]["cpu"] = run_result["cpu"]
    print(
        f"TLS: {sealed['msgs_per_s']} msgs/s (plaintext {plain['msgs_per_s']}), p99 "
        f"{sealed['p99_ms']} ms (plaintext {plain['p99_ms']}), CPU/msg {sealed['cpu_us_per_msg']} "
        f"us (plaintext {plain['cpu_us_per_msg']})"
    )
    return {
        "benchmark": "produce_tls",
        "msgs_per_s": sealed["msgs_per_s"],
        "p99_ms": sealed["p99_ms"],
        "plaintext_msgs_per_s": plain["msgs_per_s"],
        "plaintext_p99_ms": plain["p99_ms"],
        "tls_msgs_per_s_ratio": round(sealed["msgs_per_s"] / plain["msgs_per_s"], 3)
        if plain["msgs_per_s"]
        else None,
        "tls_p99_delta_ms": round(sealed["p99_ms"] - plain["p99_ms"], 2)
        if sealed["p99_ms"] is not None and plain["p99_ms"] is not None
        else None,
        "runs": both,
        "what_tls_covers": "client protocol and remoting ports enforcing TLS (producers verify "
        "the master against the run's CA), HA replication over mutual TLS; the controllers' "
        "API stays HTTP (off the produce path)",
        "config": sealed["config"],
        "ceilings": plain["ceilings"],
    }


if __name__ == "__main__":
    sys.exit(main())
