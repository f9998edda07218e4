"""One window of every fault against a real local runtime (DESIGN.md §8
chaos/; docs/reliability.md "Chaos"): with the default settings nothing
acknowledged may be lost, reordered or misplaced, and nothing unsent read.

How it could fail: the checker reads every queue back from every replica
(bodies included), compares the final master's log with each acknowledged
key's queue, offset, body and send order, and each slave's with the final
master's (tests/unit/test_chaos_checker.py shows it reports each planted
defect). Faults the machine cannot do (no root: partition, full disk) are
skipped with their reason, which the summary lists.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults
from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.runner import Schedule

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]


def test_every_fault_once_loses_and_reorders_nothing(tmp_path: Path) -> None:
    chosen = faults.ALL_FAULTS
    schedule = Schedule(faults=chosen, windows=len(chosen), seed=7, normal_s=1.0, fault_s=2.0)
    result = run_chaos(schedule, tmp_path / "out", runtime_dir=tmp_path / "rt", lane=1)
    s = result.summary
    assert s["acknowledged"] > 100, s
    assert (
        s["lost"],
        s["order_violations"],
        s["misplaced"],
        s["unexpected"],
        s["unstable_reads"],
        s["corrupt"],
        s["replica_mismatches"],
        s["reused_offsets"],
    ) == (0, 0, 0, 0, 0, 0, 0, 0), s
    # Both slaves were read back, and hold what the master holds.
    assert len({replica for replica, _ in result.run.replicas_read}) >= 2, result.run.replicas_read
    assert s["reads"] > 0, s  # the tailing consumer read during the faults
    ran = set(s["faults"])
    assert ran == set(chosen) - set(s["skipped"]), (ran, s["skipped"])
    assert not s["not_recovered"], s
    for name in (
        "history.jsonl",
        "reads.jsonl",
        "faults.jsonl",
        "summary.json",
        "latency.png",
        "report.html",
    ):
        assert (tmp_path / "out" / name).stat().st_size > 0, name
