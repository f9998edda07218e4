"""OpenChaos's faults against a real local runtime (issue 37 item 2; docs/reliability.md
"Chaos"): a bridge partition, a majorities ring, random packet loss on the master's link
to a slave, and a SIGSTOPped controller leader — one window each, on the default
settings. Nothing acknowledged may be lost, reordered or misplaced, the group must
recover after each window (fault end -> SyncStateSet full again), and every rule the
faults added (policy-routing blackholes, iptables/tc) must be gone afterwards.

How it could fail: the checker reads every replica back and compares it with the
acknowledged history (tests/unit/test_chaos_checker.py), and the negative control next
door (test_chaos_openchaos_negative.py) shows the same faults do lose data, and are
caught, under unsafe settings."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults
from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.runner import Schedule

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(400)]

NEW = (
    faults.PARTITION_BRIDGE,
    faults.PARTITION_RING,
    faults.LOSSY_LINK,
    faults.PAUSE_CONTROLLER_LEADER,
)


def _leftover_rules() -> list[str]:
    rules = subprocess.run(["ip", "rule", "show"], capture_output=True, text=True).stdout
    out = [line for line in rules.splitlines() if "blackhole" in line and "127.0.1." in line]
    tables = subprocess.run(["iptables", "-S", "OUTPUT"], capture_output=True, text=True)
    out += [line for line in tables.stdout.splitlines() if "bgchaos" in line]
    return out


def test_openchaos_faults_once_each_lose_nothing_and_leave_no_rules(tmp_path: Path) -> None:
    for fault in NEW:
        reason = faults.unavailable_reason(fault)
        if reason is not None:
            pytest.skip(f"{fault}: {reason}")
    schedule = Schedule(faults=NEW, windows=len(NEW), seed=37, normal_s=1.0, fault_s=3.0)
    result = run_chaos(schedule, tmp_path / "out", runtime_dir=tmp_path / "rt", lane=1)
    s = result.summary
    assert s["acknowledged"] > 50, s
    assert (
        s["lost"], s["order_violations"], s["misplaced"], s["unexpected"], s["corrupt"],
        s["replica_mismatches"], s["reused_offsets"],
    ) == (0, 0, 0, 0, 0, 0, 0), s  # fmt: skip
    assert set(s["faults"]) == set(NEW), s["faults"]
    assert not s["not_recovered"], s
    # Recovery per window: the SyncStateSet was full again, and a write acknowledged, after each.
    recovery = s["recovery"]
    assert [r["fault"] for r in recovery] == [w.fault for w in result.run.windows]
    for r in recovery:
        assert r["sss_full_s"] is not None and r["sss_full_s"] >= 0, r
        assert r["first_ack_s"] is not None and r["first_ack_s"] >= 0, r
    assert _leftover_rules() == []
