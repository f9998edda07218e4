"""Chaos benchmark (issue "Chaos"; DESIGN.md §8, §9): the long run of
`brokergroup chaos` over several seeds, merged into one summary.

    .venv/bin/python bench/chaos.py --quick        # 1 seed × 10 windows, ~1.5 min
    .venv/bin/python bench/chaos.py                # 3 seeds × 34 windows (102), ~15 min
    .venv/bin/python bench/chaos.py --seeds 5 --windows 40 --out /tmp/chaos
    .venv/bin/python bench/chaos.py --lock /tmp/brokergroup-net.lock   # one seed per hold

Each seed runs on fresh local runtimes: the defaults (allAckInSyncStateSet
true, SYNC_FLUSH) for every fault but the power-loss one, whose share of
the windows runs on a second runtime with ASYNC_FLUSH; every
fault type in a shuffled order, normal and fault windows alternating (2 s /
3 s), then a drain of every replica and the checker
(brokergroup_cli/chaos/checker.py: the final master's log against the
history, bodies by CRC, each slave's log against the master's; sends retried
up to 3 attempts, settled as failed only if every attempt failed). After
each seed the seeds so far are merged into OUT/merged-so-far.json, so a run
cut short still leaves its numbers.
Writes bench/results/chaos.json (keys `windows`, `seeds`, `lost`,
`duplicated`, `order_violations`, per fault type `p50_s`/`p99_s`) and
bench/results/chaos.png (the first seed's latency over time, fault windows
shaded); per-seed reports stay in --out. Prints the ceiling it ran against:
heartbeat timeout, lease, Raft timeouts and the loopback round trip.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, holding, loopback_tcp_ceiling, print_last_line, write_result

from brokergroup_broker.core.config import BrokerConfig
from brokergroup_cli.chaos import faults as fault_kinds
from brokergroup_cli.chaos.checker import Findings, accumulate, check
from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.report import summarize, table
from brokergroup_cli.chaos.runner import Schedule, read_history
from brokergroup_controller.server import ControllerConfig


def merge(results: list[Findings]) -> Findings:
    out = Findings(operations=0, acknowledged=0, failed=0, indeterminate=0)
    for f in results:
        accumulate(out, f)
    return out


def ceiling() -> dict[str, Any]:
    broker = BrokerConfig()
    controller = ControllerConfig(node_id=1, peers=("127.0.0.1:9880",), data_dir="")
    return {
        "heartbeatTimeoutMs": broker.heartbeat_timeout_ms,
        "heartbeatIntervalMs": broker.heartbeat_interval_ms,
        "masterLeaseMs": broker.master_lease_ms,
        "raftMinTimeoutMs": controller.raft_min_timeout_ms,
        "raftMaxTimeoutMs": controller.raft_max_timeout_ms,
        "loopback": loopback_tcp_ceiling().to_json(),
    }


def recheck_unavailability(out_root: Path, result: Path) -> int:
    """Unavailability from each seed's history.jsonl and faults.jsonl, judged by the
    current checker, into `result` (data findings need the read-back, which is not
    kept: they stay as the run judged them)."""
    merged = Findings(operations=0, acknowledged=0, failed=0, indeterminate=0)
    for seed_dir in sorted(out_root.glob("seed-*")):
        operations, windows = read_history(seed_dir)
        judged = check(operations, [], windows)
        merged.faults += judged.faults
        merged.unexpected_unavailability += judged.unexpected_unavailability
    summary = json.loads(result.read_text())
    again = summarize(merged, seeds=[], windows=0, skipped={}, not_recovered=[], reads=0)
    if again["faults"].keys() != summary["faults"].keys():
        raise SystemExit(f"{out_root} holds other faults than {result}")
    summary["faults"] = again["faults"]
    summary["unexpected_unavailability"] = again["unexpected_unavailability"]
    summary["targets_met"] = summary["data_safe"] and all(
        f["target_met"] is not False for f in again["faults"].values()
    )
    summary["unavailability_rechecked"] = (
        "from each seed's history.jsonl and faults.jsonl by the checker at "
        f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} (bench/chaos.py "
        "--recheck-unavailability)"
    )
    result.write_text(json.dumps(summary, indent=2) + "\n")
    log(table(summary))
    return 0


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 seed × 10 windows")
    parser.add_argument("--seeds", type=int, default=None, help="runs (default 3)")
    parser.add_argument("--windows", type=int, default=None, help="per seed (default 34)")
    parser.add_argument("--first-seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="per-seed reports")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--lock", type=Path, default=None, help="flock this file per seed")
    parser.add_argument(
        "--recheck-unavailability", type=Path, default=None, metavar="OUT",
        help="judge the unavailability of a finished run's seeds (OUT/seed-*/) again with "
        "the current checker and update bench/results/chaos.json; runs nothing",
    )  # fmt: skip
    args = parser.parse_args()
    if args.recheck_unavailability is not None:
        return recheck_unavailability(args.recheck_unavailability, RESULTS_DIR / "chaos.json")
    seeds_n = args.seeds or (1 if args.quick else 3)
    windows = args.windows or (10 if args.quick else 34)
    first = args.first_seed if args.first_seed is not None else random.randrange(1 << 30)
    seeds = [first + i for i in range(seeds_n)]
    out_root = args.out or Path(tempfile.mkdtemp(prefix="bg-chaos-bench-"))
    ceil = ceiling()
    log(
        "ceiling: heartbeatTimeoutMs {heartbeatTimeoutMs}, masterLeaseMs {masterLeaseMs}, Raft "
        "election {raftMinTimeoutMs}-{raftMaxTimeoutMs} ms".format(**ceil)
        + ", loopback RTT p50 {rtt_p50_us} µs".format(**ceil["loopback"])
    )
    started = time.monotonic()
    findings: list[Findings] = []
    skipped: dict[str, str] = {}
    not_recovered: list[str] = []
    reads = 0
    seed_s: list[float] = []

    def merged_summary(done: list[int]) -> dict[str, Any]:
        merged = merge(findings)
        summary = summarize(
            merged,
            seeds=done,
            windows=len(merged.faults),
            skipped=skipped,
            not_recovered=not_recovered,
            reads=reads,
        )
        summary["benchmark"] = "chaos"
        summary["quick"] = args.quick
        summary["wall_s"] = round(time.monotonic() - started, 1)
        summary["seed_s"] = seed_s  # each seed's own run (wall_s also holds --lock waits)
        summary["send_attempts"] = Schedule.send_attempts
        summary["checker"] = (
            "final read-back of every replica (key and body CRC, slaves against the final "
            "master); a send settles as failed only if every attempt failed"
        )
        summary["ceiling"] = ceil
        summary["settings"] = (
            "defaults (allAckInSyncStateSet true, SYNC_FLUSH, no unclean election); the "
            "power-loss fault's windows on a second runtime with flushDiskType=ASYNC_FLUSH"
        )
        return summary

    for n, seed in enumerate(seeds):
        log(f"seed {seed}: {windows} windows of {', '.join(fault_kinds.ALL_FAULTS)}")
        schedule = Schedule(faults=fault_kinds.ALL_FAULTS, windows=windows, seed=seed)
        with holding(args.lock):
            began = time.monotonic()
            result = run_chaos(schedule, out_root / f"seed-{seed}", progress=log)
            seed_s.append(round(time.monotonic() - began, 1))
        log(table(result.summary))
        findings.append(result.findings)
        skipped |= result.run.skipped
        not_recovered += [f"seed {seed} {w}" for w in result.run.not_recovered]
        reads += result.run.reads
        # The seeds so far, merged: what is left if a long run is cut short.
        partial = out_root / "merged-so-far.json"
        partial.write_text(json.dumps(merged_summary(seeds[: n + 1]), indent=2) + "\n")
        log(f"seeds so far merged in {partial}")
    summary = merged_summary(seeds)
    log(table(summary))
    if not args.no_write:
        png = out_root / f"seed-{seeds[0]}" / "latency.png"
        if png.exists():
            shutil.copyfile(png, RESULTS_DIR / "chaos.png")
            summary["plot"] = "chaos.png (first seed)"
        log(f"wrote {write_result('chaos', summary)}")
    print_last_line({k: v for k, v in summary.items() if k not in ("ceiling", "samples")})
    return 0 if summary["data_safe"] else 1


if __name__ == "__main__":
    sys.exit(main())
