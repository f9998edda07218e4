"""The same chaos schedule against each target, side by side (issue 37 items 4-5).

    .venv/bin/python bench/chaos_compare.py --quick         # local only, 1 seed, 1 window/fault
    .venv/bin/python bench/chaos_compare.py                 # every target, 3 seeds, 30 windows
                                                            #   per fault type: hours (see below)
    .venv/bin/python bench/chaos_compare.py --targets local,rocketmq --windows-per-fault 5 \
        --seeds 3 --budget-s 3000 --lock /tmp/bg-heavy.lock --scenarios all

Each (target, seed) runs `brokergroup chaos --target T --seed S --faults F --windows N`
as its own process on fresh runtimes (the targets: `local`, `local-rocketmq` and
`rocketmq`, chaos/targets/); the same seed gives every target the same fault order
and the same random choices inside the faults. Then each named scenario
(chaos/scenarios.py: RocketMQ's controller-mode defects) per target and seed, with
`--scenario`. Every run's summary.json (per-window rows: unavailability, recovery
times, keys lost/duplicated/reordered there) goes into report.compare, which puts the
targets side by side per fault type; written after every run, so a run cut short by
`--budget-s` (no new run starts after it) still leaves its numbers, and says how many
windows ran per target. A target the `chaos` command cannot run here (not built yet,
no Java) is recorded with the command's own reason.

Writes bench/results/chaos_compare.json (`--result NAME`: NAME.json; the comparison,
per-scenario outcomes,
windows run, wall time, the machine's busy cores and how many were not this run's,
and the expected time of the full run from the measured seconds per window) and
bench/results/chaos_compare.html (report.write_compare_html: one page, inline SVG).
`owner_drops` counts, per target and fault type, the windows whose note says what the
owner rules dropped (an address-pair fault on a stock target: proof its links were cut)
and the packets.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS_DIR, holding, write_result
from _cpu import cpu_window, take_sample

from brokergroup_cli.chaos import faults as fault_kinds
from brokergroup_cli.chaos import scenarios
from brokergroup_cli.chaos.report import (
    compare,
    compare_markdown,
    with_reused_offsets,
    write_compare_html,
)
from brokergroup_cli.chaos.runner import read_history

TARGETS = ("local", "local-rocketmq", "rocketmq")
#: The fault types compared: the ones every target can take the same way (no tmpfs disk,
#: no power-loss tail cut, which needs a store layout per engine), OpenChaos's four new.
FAULTS = (
    fault_kinds.KILL_MASTER,
    fault_kinds.KILL_SLAVE,
    fault_kinds.KILL_CONTROLLER_LEADER,
    fault_kinds.KILL_MASTER_AND_CONTROLLER_LEADER,
    fault_kinds.PAUSE_MASTER,
    fault_kinds.PARTITION_MASTER,
    fault_kinds.LAGGING_KILL,
    fault_kinds.PARTITION_BRIDGE,
    fault_kinds.PARTITION_RING,
    fault_kinds.LOSSY_LINK,
    fault_kinds.PAUSE_CONTROLLER_LEADER,
)


def log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)


def chaos_command(target: str, seed: int, out: Path, args: list[str], lane: int) -> list[str]:
    command = [sys.executable, "-m", "brokergroup_cli.main", "chaos", "--json", "--lane", str(lane)]
    if target != "local":  # `local` is the command's default (and works before --target)
        command += ["--target", target]
    return [*command, "--seed", str(seed), "--out", str(out), *args]


def target_support() -> str | None:
    """Why `brokergroup chaos` here cannot take `--target` (None: it can)."""
    done = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "chaos", "--help"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return (
        None if "--target" in done.stdout else "this checkout's `brokergroup chaos` has no --target"
    )


def run_one(command: list[str], timeout_s: float) -> tuple[dict[str, Any] | None, str]:
    """(summary, why not) of one `brokergroup chaos` process."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout_s:.0f} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode in (0, 1) and lines:  # 1: the run lost data — still a result
        return json.loads(lines[-1]), ""
    tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return None, f"exit {done.returncode}: {tail[:300]}"


def read_summary(run_dir: Path) -> dict[str, Any]:
    """A finished run's summary.json; one checked before the checker named reused offsets
    gets them from the run's own history."""
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    if (run_dir / "history.jsonl").exists():
        summary = with_reused_offsets(summary, *read_history(run_dir))
    return summary


def rebuild(out_root: Path, results: Path) -> int:
    """Judge a finished run's per-run summaries (OUT/<target>/seed-*/, OUT/<target>/
    <scenario>-<seed>/) again into `results` and its HTML: the comparison, windows run and
    seconds per window from each run's own `wall_s` (start to report, no lock wait);
    what the run recorded about itself (runs not run, busy cores) is kept."""
    doc = json.loads(results.read_text())
    runs: dict[str, list[dict[str, Any]]] = {}
    scenario_runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    wall: dict[str, float] = {}
    windows_run: dict[str, int] = {}
    for target_dir in sorted(p for p in out_root.iterdir() if p.is_dir()):
        target = target_dir.name
        for run_dir in sorted(target_dir.iterdir()):
            path = run_dir / "summary.json"
            if not path.exists():
                continue
            summary = read_summary(run_dir)
            wall[target] = wall.get(target, 0.0) + float(summary.get("wall_s", 0.0))
            windows_run[target] = windows_run.get(target, 0) + int(summary.get("windows", 0))
            if "scenario" in summary:
                seed = summary["seeds"][0]
                scenario_runs.setdefault(summary["scenario"]["name"], {}).setdefault(
                    target, []
                ).append(summary["scenario"] | {"seed": seed, "windows": summary["windows"]})
            else:
                runs.setdefault(target, []).append(summary)
    keep = {k: doc[k] for k in doc if k not in ("targets", "seeds", "faults", "bad_windows",
                                                 "totals", "machine", "measuredAt",
                                                 "owner_drops")}  # fmt: skip
    fresh = compare(runs) | {"owner_drops": owner_drops(runs)}
    mean = sum(wall.values()) / sum(windows_run.values()) if windows_run else None
    full = keep["full_run"]
    full["expected_hours"] = None if mean is None else round(full["windows"] * mean / 3600, 1)
    out = (
        fresh
        | keep
        | {
            "scenarios": scenario_runs,
            "windows_run": windows_run,
            "seconds_per_window": {t: round(wall[t] / n, 1) for t, n in windows_run.items() if n},
            "rebuilt": f"from {out_root.name} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        }
    )
    write_result(results.stem, out, results.parent)
    note = (
        f"{sum(windows_run.values())} windows run ({windows_run}), seeds "
        f"{out['schedule']['seeds']}; the full run (~{full['expected_hours']} h) was not"
    )
    write_compare_html(out, results.with_suffix(".html"), note=note)
    print(compare_markdown(out))
    return 0


_OWNER_DROPS = re.compile(r"owner rules dropped (\d+) packets")


def owner_drops(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, int]]]:
    """Per target and fault type: windows, those whose note names owner drops, those with
    none dropped, and the packets (faults.py `_noting_drops`)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for target, summaries in runs.items():
        for summary in summaries:
            for row in summary.get("recovery", []):
                cell = out.setdefault(target, {}).setdefault(
                    row["fault"], {"windows": 0, "noted": 0, "zero": 0, "packets": 0}
                )
                cell["windows"] += 1
                found = _OWNER_DROPS.search(row.get("note") or "")
                if found is not None:
                    cell["noted"] += 1
                    cell["zero"] += int(found.group(1)) == 0
                    cell["packets"] += int(found.group(1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="local, 1 seed, 1 window/fault")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument("--windows-per-fault", type=int, default=None, help="default 30")
    parser.add_argument("--seeds", type=int, default=None, help="default 3")
    parser.add_argument("--first-seed", type=int, default=None)
    parser.add_argument("--scenarios", default="", help="'all' or comma-separated names")
    parser.add_argument(
        "--scenario-seeds", type=int, default=3, help="seeds per scenario (the first N)"
    )
    parser.add_argument("--budget-s", type=float, default=None, help="start no run after it")
    parser.add_argument("--lock", type=Path, default=None, help="flock this file per run")
    parser.add_argument("--out", type=Path, default=None, help="per-run reports")
    parser.add_argument("--lane", type=int, default=0, choices=(0, 1), help="address lane")
    parser.add_argument(
        "--workload",
        choices=("stock", "own", "default"),
        default="stock",
        help="the clients of every run: the stock RocketMQ Java client (default: the same "
        "workload on every target), brokergroup's own (local only), or each target's default",
    )
    parser.add_argument("--run-timeout-s", type=float, default=3600.0)
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--result", default="chaos_compare", metavar="NAME",
        help="write bench/results/NAME.{json,html} (default chaos_compare): a partial re-run "
        "under a name of its own keeps a fuller run's file",
    )  # fmt: skip
    parser.add_argument(
        "--rebuild", type=Path, default=None, metavar="OUT",
        help="rebuild bench/results/NAME.{json,html} (--result) from a finished run's OUT; "
        "runs nothing",
    )  # fmt: skip
    args = parser.parse_args()
    if args.rebuild is not None:
        return rebuild(args.rebuild, RESULTS_DIR / f"{args.result}.json")
    targets = ["local"] if args.quick else [t for t in args.targets.split(",") if t]
    chosen = tuple(f for f in args.faults.split(",") if f)
    unknown = [f for f in chosen if not fault_kinds.is_known(f)]
    if unknown:
        parser.error(f"unknown faults {unknown}")
    per_fault = args.windows_per_fault or (1 if args.quick else 30)
    seeds_n = args.seeds or (1 if args.quick else 3)
    first = args.first_seed if args.first_seed is not None else random.randrange(1 << 30)
    seeds = [first + i for i in range(seeds_n)]
    wanted = scenarios.names() if args.scenarios == "all" else [
        s for s in args.scenarios.split(",") if s
    ]  # fmt: skip
    for name in wanted:
        scenarios.get(name)  # a clear error for a misspelt name, before anything runs
    out_root = args.out or Path(tempfile.mkdtemp(prefix="bg-chaos-compare-"))
    started = time.monotonic()
    before = take_sample({os.getpid(): "bench"})
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
    scenario_runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    not_run: list[dict[str, Any]] = []
    wall: dict[str, float] = dict.fromkeys(targets, 0.0)
    windows_run: dict[str, int] = dict.fromkeys(targets, 0)
    planned = len(targets) * len(seeds) * (1 + len(wanted))
    cut_short = False

    def over_budget() -> bool:
        return args.budget_s is not None and time.monotonic() - started > args.budget_s

    def write(final: bool) -> dict[str, Any]:
        doc = compare({t: r for t, r in runs.items() if r})
        doc["owner_drops"] = owner_drops(runs)
        after = take_sample({os.getpid(): "bench"})
        window = cpu_window(before, after)
        per_window_s = {t: round(wall[t] / windows_run[t], 1) for t in targets if windows_run[t]}
        mean_window_s = (
            sum(wall.values()) / sum(windows_run.values()) if sum(windows_run.values()) else None
        )
        full_windows = 30 * len(chosen) * len(TARGETS) * 3
        doc |= {
            "schedule": {"faults": list(chosen), "windows_per_fault": per_fault, "seeds": seeds},
            "targets_requested": targets,
            "windows_run": windows_run,
            "windows_planned_per_target": per_fault * len(chosen) * len(seeds),
            "runs_planned": planned,
            "cut_short_by_budget": cut_short,
            "finished": final,
            "not_run": not_run,
            "scenarios": scenario_runs,
            "wall_s": round(time.monotonic() - started, 1),
            "seconds_per_window": per_window_s,
            "full_run": {
                "windows": full_windows,
                "expected_hours": None
                if mean_window_s is None
                else round(full_windows * mean_window_s / 3600, 1),
                "basis": "30 windows x fault types x 3 targets x 3 seeds at the mean seconds "
                "per window measured in this run (each run's start, drain and check included)",
            },
            "machine_busy_cores": round(window.machine_busy_cores, 2),
            "other_busy_cores": round(
                max(0.0, window.machine_busy_cores - sum(window.cores().values())), 2
            ),
            "other_busy_cores_note": "the machine's busy cores minus this benchmark's process "
            "tree; the detached `local up` supervisors and their children count as other, so "
            "this is an upper bound",
            "loadavg": os.getloadavg(),
            "out": out_root.name,  # the run directory by name: no machine path in results
        }
        if not args.no_write:
            write_result(args.result, doc)
            note = (
                f"{sum(windows_run.values())} windows run ({windows_run}), seeds {seeds}, "
                f"{doc['wall_s']} s; {'cut short by the budget; ' if cut_short else ''}"
                f"the full run (~{doc['full_run']['expected_hours']} h) was not"
            )
            write_compare_html(doc, RESULTS_DIR / f"{args.result}.html", note=note)
        return doc

    jobs: list[tuple[str, int, str | None]] = [(t, s, None) for s in seeds for t in targets] + [
        (t, s, name) for name in wanted for s in seeds[: args.scenario_seeds] for t in targets
    ]
    no_target = target_support()
    for target, seed, scenario in jobs:
        if target != "local" and no_target is not None:
            not_run.append({"target": target, "seed": seed, "scenario": scenario, "why": no_target})
            continue
        if over_budget():
            cut_short = True
            log("budget spent: no more runs")
            break
        label = f"{target} seed {seed}" + (f" scenario {scenario}" if scenario else "")
        out = out_root / target / (f"{scenario}-{seed}" if scenario else f"seed-{seed}")
        extra = (
            ["--scenario", scenario]
            if scenario
            else ["--faults", ",".join(chosen), "--windows", str(per_fault * len(chosen))]
        )
        if args.workload != "default":
            extra = [*extra, "--workload", args.workload]
        command = chaos_command(target, seed, out, extra, args.lane)
        log(f"{label}: {' '.join(command[3:])}")
        done = out / "summary.json"
        if done.exists():  # a resumed run: this one finished before
            summary, why, took = read_summary(out), "", 0.0
            log(f"{label}: already run, its summary.json taken")
        else:
            with holding(args.lock):
                t0 = time.monotonic()  # the lock's wait is not the run's
                summary, why = run_one(command, args.run_timeout_s)
                took = time.monotonic() - t0
        if summary is None:
            log(f"{label}: not run: {why}")
            not_run.append({"target": target, "seed": seed, "scenario": scenario, "why": why})
            continue
        wall[target] += float(summary.get("wall_s") or took)  # the run's own, start to report
        windows_run[target] += int(summary.get("windows", 0))
        if scenario:
            outcome = summary.get("scenario") or {}
            scenario_runs.setdefault(scenario, {}).setdefault(target, []).append(
                outcome | {"seed": seed, "windows": summary.get("windows")}
            )
        else:
            runs[target].append(summary)
        log(
            f"{label}: {summary.get('windows')} windows in {took:.0f} s, lost "
            f"{summary.get('lost')}, duplicated {summary.get('duplicated')}, order violations "
            f"{summary.get('order_violations')}"
        )
        write(final=False)
    doc = write(final=True)
    print(compare_markdown(doc))
    print(json.dumps({"windows_run": doc["windows_run"], "totals": doc["totals"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
