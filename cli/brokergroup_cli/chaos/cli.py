"""`brokergroup chaos`: a fault schedule against a local runtime, then the checker.

    brokergroup chaos [--faults LIST] [--windows N] [--seed S] [--out DIR] [--json]

Starts its own `local` runtime (in --dir, default a temp dir; its own
address lane, --lane), runs the schedule, writes OUT/history.jsonl
(the acknowledgement log), faults.jsonl, summary.json, latency.png and
report.html, prints a per-fault table (with --json: the summary as the last
stdout line), and exits 1 when anything acknowledged was lost, reordered or
misplaced, something never sent was read, a body read back (from any replica)
is not the one sent, or a replica does not hold what the final master holds.

`--set local.tls=permissive|enforcing` runs the local targets with TLS on every port:
the run's probes, clients and read-back then use TLS too, verified against the runtime's
CA (chaos/client_tls.py), and summary.json's `tlsMode` names the mode the run ran under.
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from brokergroup_cli.chaos import faults as fault_kinds
from brokergroup_cli.chaos import scenarios
from brokergroup_cli.chaos.checker import Findings, check
from brokergroup_cli.chaos.client_tls import DISABLED, target_refusal
from brokergroup_cli.chaos.report import summarize, table, write_all
from brokergroup_cli.chaos.runner import Run, Schedule, run_schedule, write_history
from brokergroup_cli.chaos.stock_run import run_stock_schedule
from brokergroup_cli.chaos.targets import (
    TARGETS,
    WORKLOADS,
    check_choice,
    default_workload,
    make_target,
)
from brokergroup_cli.chaos.targets.local import LocalTarget

DEFAULT_LANE = 0


@dataclass
class ChaosResult:
    summary: dict[str, Any]
    findings: Findings
    run: Run


@dataclass(frozen=True)
class Phase:
    """One runtime of a run: its faults, windows and `local up` settings."""

    schedule: Schedule
    settings: tuple[str, ...]
    broker_disk_bytes: int | None
    label: str


#: The power-loss fault needs ASYNC_FLUSH; every other fault runs on the default SYNC_FLUSH.
ASYNC_FLUSH_SETTING = "flushDiskType=ASYNC_FLUSH"


def plan_phases(schedule: Schedule, settings: tuple[str, ...]) -> list[Phase]:
    """Split a schedule by the runtime each fault needs: the power-loss fault's
    windows (their share of the rotation) on an ASYNC_FLUSH runtime, the rest
    on the defaults — so the default configuration is what most windows test."""
    async_faults = tuple(f for f in schedule.faults if fault_kinds.needs_async_flush((f,)))
    sync_faults = tuple(f for f in schedule.faults if f not in async_faults)
    async_windows = 0
    if async_faults:
        share = schedule.windows * len(async_faults) / len(schedule.faults)
        async_windows = schedule.windows if not sync_faults else max(1, round(share))
    phases: list[Phase] = []
    if sync_faults and schedule.windows - async_windows > 0:
        disk = None
        extra = list(settings)
        if (
            fault_kinds.needs_broker_disks(sync_faults)
            and fault_kinds.unavailable_reason(fault_kinds.FILL_MASTER_DISK) is None
        ):
            disk = fault_kinds.BROKER_DISK_BYTES
            extra.append(f"mappedFileSizeCommitLog={16 * 1024 * 1024}")  # fits the small disk
        phases.append(
            Phase(
                replace(schedule, faults=sync_faults, windows=schedule.windows - async_windows),
                tuple(extra),
                disk,
                "defaults" if not settings else "settings",
            )
        )
    if async_windows:
        phases.append(
            Phase(
                replace(
                    schedule, faults=async_faults, windows=async_windows,
                    client_prefix="a" if phases else "",
                ),
                (*settings, ASYNC_FLUSH_SETTING),
                None,
                "ASYNC_FLUSH",
            )
        )  # fmt: skip
    return phases


def run_chaos(
    schedule: Schedule,
    out_dir: Path,
    *,
    runtime_dir: Path | None = None,
    lane: int = DEFAULT_LANE,
    settings: tuple[str, ...] = (),
    progress: Any = None,
    keep: bool = False,
    scenario: scenarios.Scenario | None = None,
    target: str = "local",
    workload: str | None = None,
) -> ChaosResult:
    """The library entry the tests use: run each phase on a fresh runtime,
    check the merged history, write the reports. `target`: `local` (default),
    `local-rocketmq` or `rocketmq`; `workload`: `own` or `stock` (default:
    `own` for `local`, else `stock`)."""
    workload = workload or default_workload(target)
    refusal = check_choice(target, workload) or target_refusal(target, settings)
    if refusal is not None:
        raise ValueError(refusal)
    say = progress or (lambda line: None)
    started = time.monotonic()
    run = Run()
    phases = plan_phases(schedule, settings)
    tls_modes: list[str] = []
    for n, phase in enumerate(phases):
        root = (
            (runtime_dir / f"phase-{n}")
            if runtime_dir
            else Path(tempfile.mkdtemp(prefix="bg-chaos-"))
        )
        runtime = make_target(
            target, root, lane=lane, settings=phase.settings,
            broker_disk_bytes=phase.broker_disk_bytes,
        )  # fmt: skip
        ok = False
        try:
            say(
                f"phase {n + 1}/{len(phases)} ({phase.label}): {target} up in {root} "
                f"(lane {lane}, {workload} workload), "
                f"{phase.schedule.windows} windows of {', '.join(phase.schedule.faults)}"
            )
            runtime.up()
            # What the runtime runs (its status), not what was asked: the report's TLS.
            tls_modes.append(runtime.tls().mode if isinstance(runtime, LocalTarget) else DISABLED)
            # A later phase's clock continues where the previous one ended (one timeline).
            timed = replace(phase.schedule, start_s=run.ended_s + 1.0 if n else 0.0)
            if workload == "stock":
                run.extend(asyncio.run(run_stock_schedule(runtime, timed, root / "workload", say)))
            else:
                assert isinstance(runtime, LocalTarget)
                run.extend(asyncio.run(run_schedule(runtime, timed, say)))
            ok = True
        finally:
            say(f"stopping the {target} target")
            runtime.down()
            if ok and not keep and runtime_dir is None:
                shutil.rmtree(root, ignore_errors=True)
    findings = check(
        run.operations, run.read_back, run.windows, consumed=run.consumed,
        replica_reads=run.replica_reads, replicas_read=run.replicas_read,
    )  # fmt: skip
    summary = summarize(
        findings,
        seeds=[schedule.seed],
        windows=len(run.windows),
        skipped=run.skipped,
        not_recovered=run.not_recovered,
        reads=run.reads,
        operations=run.operations,
        windows_run=run.windows,
        healthy_s=run.healthy_s,
    )
    if scenario is not None:
        summary["scenario"] = scenarios.outcome(scenario, summary)
    summary["phases"] = [
        {"label": p.label, "faults": list(p.schedule.faults), "windows": p.schedule.windows,
         "settings": list(p.settings), "tlsMode": mode}
        for p, mode in zip(phases, tls_modes, strict=True)
    ]  # fmt: skip
    # The TLS every phase's runtime ran (local.tls: disabled, permissive or enforcing); the
    # run's own clients, probes and read-back used TLS whenever it was not disabled.
    summary["tlsMode"] = ",".join(dict.fromkeys(tls_modes)) or DISABLED
    summary["target"], summary["workload"] = target, workload
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
    parser.add_argument(
        "--scenario", choices=scenarios.names(), default=None,
        help="a named schedule reproducing a RocketMQ controller-mode defect's conditions "
        "(chaos/scenarios.py); replaces --faults/--windows",
    )  # fmt: skip
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
        help="extra `local up --set` (e.g. allAckInSyncStateSet=false, local.tls=enforcing)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the runtime dir")
    parser.add_argument(
        "--target", choices=TARGETS, default="local",
        help="local (default): `local up`; local-rocketmq: `local up --engine rocketmq`; "
        "rocketmq: a plain Apache RocketMQ 5.3 controller-mode group",
    )  # fmt: skip
    parser.add_argument(
        "--workload", choices=WORKLOADS, default=None,
        help="own: brokergroup's clients (local only, its default); stock: the stock "
        "RocketMQ Java client (the default of the other targets)",
    )  # fmt: skip
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    chosen = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    unknown = [f for f in chosen if not fault_kinds.is_known(f)]
    if unknown or not chosen:
        print(
            f"brokergroup chaos: unknown fault(s) {unknown}; known: "
            f"{', '.join(fault_kinds.ALL_FAULTS)}",
            file=sys.stderr,
        )
        return 2
    refusal = check_choice(args.target, args.workload or default_workload(args.target))
    if refusal is not None:
        print(f"brokergroup chaos: {refusal}", file=sys.stderr)
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
    scenario = scenarios.get(args.scenario) if args.scenario else None
    settings = tuple(args.set)
    if scenario is not None:
        schedule = scenario.schedule(seed, producers=args.producers)
        settings = (*scenario.settings, *settings)
    refusal = target_refusal(args.target, settings)
    if refusal is not None:
        print(f"brokergroup chaos: {refusal}", file=sys.stderr)
        return 2

    def progress(line: str) -> None:
        if not args.json:
            print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)
        else:
            print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)

    result = run_chaos(
        schedule, args.out, runtime_dir=args.dir, lane=args.lane,
        settings=settings, progress=progress, keep=args.keep, scenario=scenario,
        target=args.target, workload=args.workload,
    )  # fmt: skip
    if args.json:
        print(table(result.summary), file=sys.stderr)
        print(json.dumps(result.summary, separators=(",", ":")))
    else:
        print(table(result.summary))
        print(f"reports in {args.out}/ (summary.json, report.html, latency.png, history.jsonl)")
    return 0 if result.summary["data_safe"] else 1
