"""The event loop alone, A/B alternating (issue 38 item 1): the same benchmark run with
`BROKERGROUP_EVENT_LOOP=asyncio` and `=uvloop` in turn (ABBA order per pair), nothing else
changed, each run under `flock /tmp/bg-heavy.lock`.

    .venv/bin/python bench/event_loop_ab.py produce --pairs 2
    .venv/bin/python bench/event_loop_ab.py rocketmq_client --pairs 2

- `produce`: bench/produce.py --quick (the project's own pipelined batch producer; 3
  replicas, allAck, SYNC_FLUSH): msg/s, p99, server CPU µs per message.
- `rocketmq_client`: bench/rocketmq_client.py --only brokergroup --kills 0 --quick (the stock
  Java client: 16 threads of single sends, 4 threads of 128-message batches): msg/s, p99
  and server CPU ms per message for both loads.

Every run records `other_busy_cores` (CPU of processes that are not the benchmark's: this
machine is shared, so a pair whose two runs saw very different values says little).
Writes bench/results/event_loop_ab_<bench>.json with every run and the medians per loop.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import print_last_line, write_result  # noqa: E402

LOOPS = ("asyncio", "uvloop")


def command(bench: str) -> list[str]:
    if bench == "produce":
        return [sys.executable, str(ROOT / "bench" / "produce.py"), "--quick", "--no-write"]
    return [sys.executable, str(ROOT / "bench" / "rocketmq_client.py"), "--only", "brokergroup",
            "--kills", "0", "--quick", "--name", "event_loop_ab_scratch"]  # fmt: skip


def metrics(bench: str, last: dict[str, Any]) -> dict[str, Any]:
    if bench == "produce":
        cpu = last.get("cpu", {})
        return {
            "msgs_per_s": last.get("msgs_per_s"),
            "p99_ms": last.get("p99_ms"),
            "cpu_us_per_msg": last.get("cpu_us_per_msg"),
            "other_busy_cores": round(cpu.get("other_processes_pct", 0) / 100, 3),
        }
    side = last.get("sides", {}).get("brokergroup", {})
    return {
        "msgs_per_s": last.get("brokergroup_msgs_per_s"),
        "p99_ms": last.get("brokergroup_p99_ms"),
        "server_cpu_ms_per_msg": last.get("brokergroup_server_cpu_ms_per_msg"),
        "batch_msgs_per_s": last.get("brokergroup_batch_msgs_per_s"),
        "batch_p99_ms": last.get("brokergroup_batch_p99_ms"),
        "batch_server_cpu_ms_per_msg": last.get("brokergroup_batch_server_cpu_ms_per_msg"),
        "other_busy_cores": side.get("single", {}).get("other_busy_cores"),
        "batch_other_busy_cores": side.get("batch", {}).get("other_busy_cores"),
        "acked_lost": last.get("acked_lost"),
    }


def run_once(bench: str, loop: str, log_dir: Path, index: int) -> dict[str, Any]:
    env = {**os.environ, "BROKERGROUP_EVENT_LOOP": loop}
    log = log_dir / f"{bench}-{index}-{loop}.log"
    with log.open("w") as out:
        subprocess.run(
            ["flock", "/tmp/bg-heavy.lock", *command(bench)],
            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=1800, check=False,
        )  # fmt: skip
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    if not lines:
        return {"loop": loop, "error": f"no result line (log {log})"}
    last = json.loads(lines[-1])
    if bench == "rocketmq_client":  # its sides are in the file it wrote, not the last line
        scratch = ROOT / "bench" / "results" / "event_loop_ab_scratch.json"
        if scratch.exists():
            last = json.loads(scratch.read_text())
            scratch.unlink()
    return {"loop": loop, "at": time.strftime("%H:%M:%S"), **metrics(bench, last)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bench", choices=("produce", "rocketmq_client"))
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    log_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"event-loop-ab-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        order = LOOPS if pair % 2 == 0 else LOOPS[::-1]
        for loop in order:
            result = run_once(args.bench, loop, log_dir, len(runs))
            print(json.dumps(result), flush=True)
            runs.append(result)
    medians: dict[str, dict[str, float]] = {}
    for loop in LOOPS:
        mine = [r for r in runs if r["loop"] == loop and "error" not in r]
        keys = {k for r in mine for k, v in r.items() if isinstance(v, int | float)}
        medians[loop] = {
            k: statistics.median(r[k] for r in mine if r.get(k) is not None)
            for k in sorted(keys)
            if any(r.get(k) is not None for r in mine)
        }
    summary = {"benchmark": f"event_loop_ab_{args.bench}", "pairs": args.pairs,
               "median": medians, "runs": runs, "logs": str(log_dir)}  # fmt: skip
    write_result(f"event_loop_ab_{args.bench}", summary)
    print_last_line({"benchmark": summary["benchmark"], "median": medians})
    return 0


if __name__ == "__main__":
    sys.exit(main())
