"""Controller benchmark (DESIGN.md §9 "Controller"): committed requests/s through
the HTTP API on 3 real nodes, and leader SIGKILL → new leader serving a
committed write, over several trials. Prints the loopback ceiling measured in
the same run (a no-op aiohttp server driven the same way).

    .venv/bin/python bench/controller.py --quick     # < 60 s
    .venv/bin/python bench/controller.py             # longer, more trials

Writes bench/results/controller.json; the last stdout line is one JSON object
with `committed_per_s` and `leader_failover_s` (p50 of the trials).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from controller_harness import ControllerCluster  # noqa: E402

from brokergroup_controller.client import ControllerClient, ControllerUnavailable  # noqa: E402
from brokergroup_controller.errors import ControllerError  # noqa: E402

BLOCK = 9  # 127.0.9.0/24: the top test block; do not run the bench while tests use it
C = "BenchCluster"

NOOP_SERVER = """
import sys
from aiohttp import web
async def ok(request):
    await request.read()
    return web.json_response({"code": "SUCCESS"})
app = web.Application()
app.router.add_post("/noop", ok)
web.run_app(app, host=sys.argv[1], port=int(sys.argv[2]), print=None, access_log=None)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def loopback_ceiling(callers: int, duration_s: float) -> float:
    """Requests/s of a no-op aiohttp POST handler, same client shape, same machine."""
    host, port = f"127.0.{BLOCK}.100", 9878
    proc = subprocess.Popen([sys.executable, "-c", NOOP_SERVER, host, str(port)])
    try:
        async with aiohttp.ClientSession() as session:
            url = f"http://{host}:{port}/noop"
            for _ in range(200):
                try:
                    async with session.post(url, json={}) as r:
                        await r.read()
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            done = 0
            stop_at = time.monotonic() + duration_s

            async def caller() -> None:
                nonlocal done
                while time.monotonic() < stop_at:
                    async with session.post(url, json={"clusterName": C, "brokerId": 1}) as r:
                        await r.read()
                    done += 1

            started = time.monotonic()
            await asyncio.gather(*(caller() for _ in range(callers)))
            return done / (time.monotonic() - started)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


async def throughput(cluster: ControllerCluster, callers: int, duration_s: float) -> dict[str, Any]:
    """Every request is a committed RegisterBroker (the address flips each time)."""
    async with ControllerClient(
        cluster.api_addresses, cluster.token, request_timeout_s=10
    ) as client:
        for w in range(callers):
            await client.apply_broker_id(C, f"tp-{w}", 1, "rc", f"10.9.{w % 250}.1:10911")
        latencies: list[float] = []
        failures = 0
        stop_at = time.monotonic() + duration_s

        async def caller(w: int) -> None:
            nonlocal failures
            n = 0
            while time.monotonic() < stop_at:
                n += 1
                t0 = time.perf_counter()
                try:
                    await client.register_broker(
                        C, f"tp-{w}", 1, f"10.9.{w % 250}.{n % 2 + 1}:10911"
                    )
                except (ControllerError, ControllerUnavailable):
                    failures += 1
                    continue
                latencies.append(time.perf_counter() - t0)

        started = time.monotonic()
        await asyncio.gather(*(caller(w) for w in range(callers)))
        elapsed = time.monotonic() - started
    return {
        "committed": len(latencies),
        "failures": failures,
        "elapsed_s": round(elapsed, 3),
        "committed_per_s": round(len(latencies) / elapsed, 1),
        "latency_ms_p50": round(percentile(latencies, 0.5) * 1000, 2),
        "latency_ms_p99": round(percentile(latencies, 0.99) * 1000, 2),
    }


async def failover_trial(cluster: ControllerCluster, trial: int) -> dict[str, Any]:
    """SIGKILL the leader; time until a write *issued after the kill* commits."""
    leader = await asyncio.to_thread(cluster.wait_for_leader, 60.0)
    for node_id in cluster.nodes:
        await asyncio.to_thread(cluster.wait_ready, node_id, 60.0)
    async with ControllerClient(
        cluster.api_addresses, cluster.token, request_timeout_s=0.5
    ) as client:
        await client.apply_broker_id(C, f"fo-{trial}", 1, "rc", "10.9.250.1:10911")
        killed_at = time.monotonic()
        cluster.kill(leader)
        attempts = 0
        while True:
            attempts += 1
            try:
                await client.register_broker(
                    C, f"fo-{trial}", 1, f"10.9.250.{attempts % 200 + 2}:10911"
                )
                break
            except (ControllerUnavailable, ControllerError):
                if time.monotonic() - killed_at > 30:
                    raise
        failover_s = time.monotonic() - killed_at
        new_leader_api = client.leader_address
    cluster.start(leader)
    return {
        "trial": trial,
        "killed": cluster.nodes[leader].raft_address,
        "new_leader_api": new_leader_api,
        "failover_s": round(failover_s, 3),
        "attempts": attempts,
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="finish in under a minute")
    parser.add_argument("--callers", type=int, default=None, help="concurrent async callers")
    parser.add_argument("--no-fsync", action="store_true", help="raftFsync=false (not power-safe)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "controller.json"))
    args = parser.parse_args()
    callers = args.callers or (64 if args.quick else 128)
    duration_s = 6.0 if args.quick else 20.0
    trials = 5 if args.quick else 15
    bench_started = time.monotonic()
    load_at_start = os.getloadavg()[0]

    ceiling = await loopback_ceiling(callers, 3.0 if args.quick else 6.0)
    print(f"loopback ceiling (no-op aiohttp POST, {callers} callers): {ceiling:,.0f} req/s")

    config = {"raftFsync": not args.no_fsync}
    with (
        tempfile.TemporaryDirectory(prefix="bench-controller-") as tmp,
        ControllerCluster(Path(tmp), block=BLOCK, config=config, log_level="WARNING") as cluster,
    ):
        cluster.start_all()
        await asyncio.to_thread(cluster.wait_for_leader, 60.0)
        tp = await throughput(cluster, callers, duration_s)
        print(
            f"committed: {tp['committed_per_s']:,.0f} req/s with {callers} callers "
            f"(p50 {tp['latency_ms_p50']} ms, p99 {tp['latency_ms_p99']} ms, "
            f"{tp['failures']} failures)"
        )
        results = []
        for trial in range(trials):
            result = await failover_trial(cluster, trial)
            results.append(result)
            print(
                f"failover trial {trial}: {result['failover_s']:.3f} s (killed {result['killed']})"
            )
    failovers = [r["failover_s"] for r in results]
    summary: dict[str, Any] = {
        "benchmark": "controller",
        "quick": args.quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            # Other work on the same machine skews every number: record it.
            "load_avg_1m_at_start": round(load_at_start, 2),
        },
        "nodes": 3,
        "raft_fsync": not args.no_fsync,
        "callers": callers,
        "loopback_noop_per_s": round(ceiling, 1),
        "throughput": tp,
        "committed_per_s": tp["committed_per_s"],
        "failover_trials": results,
        "leader_failover_s": round(statistics.median(failovers), 3),
        "leader_failover_p50_s": round(statistics.median(failovers), 3),
        "leader_failover_max_s": round(max(failovers), 3),
        "targets": {"committed_per_s": 1000, "leader_failover_s": 1.0},
        "bench_wall_s": round(time.monotonic() - bench_started, 1),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(summary, indent=2) + "\n")
    print(
        json.dumps(
            {
                "committed_per_s": summary["committed_per_s"],
                "leader_failover_s": summary["leader_failover_s"],
                "leader_failover_max_s": summary["leader_failover_max_s"],
                "loopback_noop_per_s": summary["loopback_noop_per_s"],
                "trials": len(results),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
