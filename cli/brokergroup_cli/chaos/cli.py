"""`brokergroup chaos`: a fault schedule against a local runtime, then the checker.

    brokergroup chaos [--faults LIST] [--windows N] [--seed S] [--out DIR] [--json]

Starts its own `local` runtime (in --dir, default a temp dir; its own
address lane, --lane), runs the schedule, writes OUT/history.jsonl
(the acknowledgement log), faults.jsonl, summary.json, latency.png and
report.html, prints a per-fault table (with --json: the summary as the last
stdout line), and exits 1 when anything acknowledged was lost, reordered or
misplaced, or something never sent was read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brokergroup_cli.chaos import faults as fault_kinds
from brokergroup_cli.chaos.checker import Findings, check
from brokergroup_cli.chaos.report import summarize, table, write_all
from brokergroup_cli.chaos.runner import Run, Schedule, run_schedule, write_history
from brokergroup_cli.chaos.runtime import Addresses, LocalRuntime

DEFAULT_LANE = 0


@dataclass
class ChaosResult:
    summary: dict[str, Any]
    findings: Findings
    run: Run


def run_chaos(
    schedule: Schedule,
    out_dir: Path,
    *,
    runtime_dir: Path | None = None,
    lane: int = DEFAULT_LANE,
    settings: tuple[str, ...] = (),
    progress: Any = None,
    keep: bool = False,
) -> ChaosResult:
    """The library entry the tests use: run, check, write the reports."""
    say = progress or (lambda line: None)
    extra = list(settings)
    if fault_kinds.needs_async_flush(schedule.faults):
        extra.append("flushDiskType=ASYNC_FLUSH")
    disk = (
        fault_kinds.BROKER_DISK_BYTES if fault_kinds.needs_broker_disks(schedule.faults) else None
    )
    if disk is not None and fault_kinds.unavailable_reason(fault_kinds.FILL_MASTER_DISK) is None:
        extra.append(f"mappedFileSizeCommitLog={16 * 1024 * 1024}")  # fits the small disk
    else:
        disk = None
    root = runtime_dir or Path(tempfile.mkdtemp(prefix="bg-chaos-"))
    runtime = LocalRuntime(root, Addresses(lane), settings=tuple(extra), broker_disk_bytes=disk)
    started = time.monotonic()
    ok = False
    try:
        say(f"local up in {root} (lane {lane}), faults: {', '.join(schedule.faults)}")
        runtime.up()
        run = asyncio.run(run_schedule(runtime, schedule, say))
        ok = True
    finally:
        say("stopping the runtime (local down)")
        runtime.down()
        if ok and not keep and runtime_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    findings = check(run.operations, run.read_back, run.windows, consumed=run.consumed)
    summary = summarize(
        findings,
        seeds=[schedule.seed],
        windows=len(run.windows),
        skipped=run.skipped,
        not_recovered=run.not_recovered,
        reads=run.reads,
    )
    summary["settings"] = extra
    summary["wall_s"] = round(time.monotonic() - started, 1)
    write_history(run, out_dir)
    write_all(out_dir, summary, run.operations, findings)
    return ChaosResult(summary, findings, run)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chaos",
        help="inject faults into a local runtime and check nothing acknowledged is lost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--faults",
        default=",".join(fault_kinds.ALL_FAULTS),
        help=f"comma-separated (default: all): {', '.join(fault_kinds.ALL_FAULTS)}",
    )
    parser.add_argument("--windows", type=int, default=20, help="fault windows (default 20)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("chaos-out"), help="report directory")
    parser.add_argument("--json", action="store_true", help="last stdout line: the summary")
    parser.add_argument("--dir", type=Path, default=None, help="runtime dir (default: temp)")
    parser.add_argument(
        "--lane", type=int, default=DEFAULT_LANE, choices=(0, 1),
        help="address lane in 127.0.1.0/24 (two runs at once need two lanes)",
    )  # fmt: skip
    parser.add_argument("--normal-s", type=float, default=2.0)
    parser.add_argument("--fault-s", type=float, default=3.0)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="extra `local up --set` (e.g. allAckInSyncStateSet=false)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the runtime dir")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    chosen = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = [f for f in chosen if f not in fault_kinds.ALL_FAULTS]
    if unknown or not chosen:
        print(
            f"brokergroup chaos: unknown fault(s) {unknown}; known: "
            f"{', '.join(fault_kinds.ALL_FAULTS)}",
            file=sys.stderr,
        )
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    schedule = Schedule(
        faults=chosen,
        windows=args.windows,
        seed=seed,
        normal_s=args.normal_s,
        fault_s=args.fault_s,
        producers=args.producers,
    )

    def progress(line: str) -> None:
        if not args.json:
            print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)
        else:
            print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    result = run_chaos(
        schedule, args.out, runtime_dir=args.dir, lane=args.lane,
        settings=tuple(args.set), progress=progress, keep=args.keep,
    )  # fmt: skip
    if args.json:
        print(table(result.summary), file=sys.stderr)
        print(json.dumps(result.summary, separators=(",", ":")))
    else:
        print(table(result.summary))
        print(f"reports in {args.out}/ (summary.json, report.html, latency.png, history.jsonl)")
    return 0 if result.summary["data_safe"] else 1
