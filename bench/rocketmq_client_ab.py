"""RocketMQ against brokergroup with the same stock Java client, repeated and alternated
(issue 38 "Must show"): `bench/rocketmq_client.py --only <side> --kills 0` run `--reps` times
per side, the side that goes first alternating (R B, B R, R B, ...), each run under
`flock /tmp/bg-heavy.lock`; the medians decide, and every run's `other_busy_cores` is kept so
a reader can see whether the machine was quiet (the issue asks for ≤ 0.1).

    .venv/bin/python bench/rocketmq_client_ab.py --reps 3
    .venv/bin/python bench/rocketmq_client_ab.py --combine quiet_ab   # from finished runs

Each run writes bench/results/<prefix>_r<i>_<side>.json (rocketmq_client.py's own file); the
combined bench/results/rocketmq_client_ab.json carries every run's figures and the medians,
and the per-run files are removed after they are folded in.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import RESULTS_DIR, print_last_line, write_result  # noqa: E402

SIDES = ("rocketmq", "brokergroup")
#: The issue's bar: brokergroup's median msg/s at least this many times RocketMQ's, at no
#: higher a p99, for each load, on a machine whose other processes use at most QUIET_CORES.
TARGET_RATIO = 1.5
QUIET_CORES = 0.1
LOADS = {"single": "", "batch": "batch_"}


def order(rep: int) -> tuple[str, str]:
    """Odd repetitions start with RocketMQ, even ones with brokergroup."""
    return SIDES if rep % 2 == 1 else (SIDES[1], SIDES[0])


def run_name(prefix: str, rep: int, side: str) -> str:
    return f"{prefix}_r{rep}_{side}"


def run_side(prefix: str, rep: int, side: str, seconds: int | None) -> None:
    cmd = [sys.executable, str(ROOT / "bench" / "rocketmq_client.py"), "--only", side,
           "--kills", "0", "--name", run_name(prefix, rep, side)]  # fmt: skip
    if seconds is not None:
        cmd += ["--seconds", str(seconds)]
    subprocess.run(["flock", "/tmp/bg-heavy.lock", *cmd], check=False, timeout=3600)


def figures(side: str, result: dict[str, Any]) -> dict[str, Any]:
    """One side's run: msg/s, p99, server CPU per message and other_busy_cores per load."""
    raw = result.get("sides", {}).get(side, {})
    out: dict[str, Any] = {
        "measuredAt": result.get("measuredAt"),
        "acked_lost": raw.get("acked_lost"),
        "ceiling": result.get("ceiling"),  # loopback TCP, measured in the same run
    }
    for load, key in LOADS.items():
        window = raw.get(load, {})
        out[load] = {
            "msgs_per_s": raw.get(f"{key}msgs_per_s"),
            "p99_ms": raw.get(f"{key}p99_ms"),
            "server_cpu_ms_per_msg": raw.get(f"{key}server_cpu_ms_per_msg"),
            "other_busy_cores": window.get("other_busy_cores"),
            "machine_busy_cores": window.get("machine_busy_cores"),
        }
    return out


def median_of(runs: list[dict[str, Any]], load: str, field: str) -> float | None:
    values = [r[load][field] for r in runs if r[load].get(field) is not None]
    return round(statistics.median(values), 4) if values else None


def combine(prefix: str, reps: int) -> dict[str, Any]:
    """Fold the finished runs into one summary: per side and load the medians, then the
    ratio of the medians and whether the issue's bar is met (and on a quiet machine)."""
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    sequence: list[str] = []
    for rep in range(1, reps + 1):
        for side in order(rep):
            path = RESULTS_DIR / f"{run_name(prefix, rep, side)}.json"
            if not path.exists():
                continue
            runs[side].append({"rep": rep, **figures(side, json.loads(path.read_text()))})
            sequence.append(f"{rep}:{side}")
    medians = {
        side: {
            load: {
                f: median_of(rs, load, f) for f in ("msgs_per_s", "p99_ms", "server_cpu_ms_per_msg")
            }
            for load in LOADS
        }
        for side, rs in runs.items()
    }
    verdict: dict[str, Any] = {}
    for load in LOADS:
        r, b = medians["rocketmq"][load], medians["brokergroup"][load]
        ratio = (
            round(b["msgs_per_s"] / r["msgs_per_s"], 3)
            if r["msgs_per_s"] and b["msgs_per_s"]
            else None
        )
        p99_ok = None if r["p99_ms"] is None or b["p99_ms"] is None else b["p99_ms"] <= r["p99_ms"]
        verdict[load] = {"ratio": ratio, "p99_not_higher": p99_ok,
                         "met": bool(ratio and ratio >= TARGET_RATIO and p99_ok)}  # fmt: skip
    others = [
        run[load]["other_busy_cores"]
        for rs in runs.values() for run in rs for load in LOADS
        if run[load]["other_busy_cores"] is not None
    ]  # fmt: skip
    return {
        "benchmark": "rocketmq_client_ab",
        "reps": reps,
        "order": sequence,
        "runs": runs,
        "medians": medians,
        "verdict": verdict,
        "target_ratio": TARGET_RATIO,
        "other_busy_cores_max": max(others) if others else None,
        "quiet": bool(others) and max(others) <= QUIET_CORES,
        "acked_lost": sum(run["acked_lost"] or 0 for rs in runs.values() for run in rs),
        "command": f"bench/rocketmq_client_ab.py --reps {reps}",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="runs per side (alternating first side)")
    ap.add_argument("--seconds", type=int, default=None, help="measured seconds per load")
    ap.add_argument("--prefix", default="rocketmq_client_ab_run")
    ap.add_argument("--combine", metavar="PREFIX", help="fold finished runs only; runs nothing")
    ap.add_argument("--keep-runs", action="store_true", help="keep the per-run result files")
    args = ap.parse_args()
    prefix = args.combine or args.prefix
    if args.combine is None:
        for rep in range(1, args.reps + 1):
            for side in order(rep):
                run_side(prefix, rep, side, args.seconds)
    summary = combine(prefix, args.reps)
    if not any(summary["runs"].values()):
        print(f"no finished runs named {prefix}_r*_<side>.json in {RESULTS_DIR}", file=sys.stderr)
        return 1
    write_result("rocketmq_client_ab", summary)
    if not args.keep_runs:
        for path in RESULTS_DIR.glob(f"{prefix}_r*_*.json"):
            path.unlink()
    print_last_line(
        {k: summary[k] for k in ("medians", "verdict", "other_busy_cores_max", "quiet")}
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
