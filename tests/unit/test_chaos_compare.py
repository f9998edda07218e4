"""The pure parts of issue 37 items 2-4: per-window recovery rows and the attribution
of lost, duplicated and reordered keys to windows (chaos/report.py), the side-by-side
comparison of targets with its README table and inline SVG, and the named scenarios'
schedules (chaos/scenarios.py). Inputs are hand-built histories whose right answer is
written out in each test."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults, scenarios
from brokergroup_cli.chaos.checker import (
    OK,
    FaultResult,
    FaultWindow,
    Findings,
    Operation,
    ReadRecord,
    check,
)
from brokergroup_cli.chaos.report import (
    compare,
    compare_markdown,
    summarize,
    svg_bars,
    window_rows,
    with_reused_offsets,
    write_compare_html,
)

W1 = FaultWindow("kill-master", 10.0, 13.0, "SIGKILL master")
W2 = FaultWindow("partition-bridge", 20.0, 23.0, "bridge")


def _op(key: str, invoke: float, complete: float, outcome: str = OK) -> Operation:
    return Operation(key.split("-")[0], int(key.split("-")[1]), key, invoke, complete, outcome, 0)


OPS = [
    _op("p0-0", 9.0, 9.1),  # before W1: a loss of it belongs to W1
    _op("p0-1", 11.0, 14.2),  # in W1, acked after it: the first ack after W1 ends at 14.2
    _op("p0-2", 15.0, 15.1),  # between W1 and W2: belongs to W2
    _op("p0-3", 24.0, 24.5),  # after W2: first ack after W2 (0.5 s after its end... 1.5)
    _op("p0-4", 30.0, 30.1),  # after the last window: attributed to none
]


def _findings(**kw: object) -> Findings:
    base = Findings(
        operations=len(OPS), acknowledged=len(OPS), failed=0, indeterminate=0,
        faults=[FaultResult(W1, 2.5), FaultResult(W2, 0.75)],
    )  # fmt: skip
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def test_window_rows_recovery_times_and_attribution() -> None:
    findings = _findings(
        lost=["p0-0", "p0-2", "p0-4"], duplicated=["p0-1", "p0-1"],
        order_violations=[(0, "p0-3", "p0-2")],
    )  # fmt: skip
    rows = window_rows(findings, OPS, [W1, W2], [16.0, None])
    assert [(r["fault"], r["unavailable_s"], r["first_ack_s"], r["sss_full_s"]) for r in rows] == [
        ("kill-master", 2.5, 1.2, 3.0),
        ("partition-bridge", 0.75, 1.5, None),
    ]
    assert [(r["lost"], r["duplicated"], r["reordered"]) for r in rows] == [
        (["p0-0"], ["p0-1"], []),
        (["p0-2"], [], ["p0-2"]),
    ]  # p0-4 (sent after the last window) is in no window


def test_summarize_carries_rows_and_per_fault_percentiles() -> None:
    s = summarize(
        _findings(lost=["p0-0"]), seeds=[5], windows=2, skipped={}, not_recovered=[], reads=0,
        operations=OPS, windows_run=[W1, W2], healthy_s=[16.0, 23.5],
    )  # fmt: skip
    assert [r["window"] for r in s["recovery"]] == [1, 2]
    km = s["faults"]["kill-master"]
    assert (km["lost"], km["first_ack_p50_s"], km["sss_full_p99_s"]) == (1, 1.2, 3.0)
    assert s["faults"]["partition-bridge"]["sss_full_p50_s"] == 0.5


def _summary(seed: int, lost: list[str]) -> dict[str, object]:
    return summarize(
        _findings(lost=lost), seeds=[seed], windows=2, skipped={}, not_recovered=[], reads=0,
        operations=OPS, windows_run=[W1, W2], healthy_s=[16.0, 23.5],
    )  # fmt: skip


def test_compare_puts_targets_side_by_side_and_names_the_losing_window(tmp_path: Path) -> None:
    doc = compare({"local": [_summary(1, []), _summary(2, [])],
                   "rocketmq": [_summary(1, ["p0-2"]), _summary(2, [])]})  # fmt: skip
    assert doc["targets"] == ["local", "rocketmq"]
    assert doc["faults"]["kill-master"]["local"]["windows"] == 2
    assert doc["faults"]["partition-bridge"]["rocketmq"]["lost"] == 1
    assert doc["faults"]["partition-bridge"]["local"]["lost"] == 0
    assert [(b["target"], b["seed"], b["window"], b["fault"]) for b in doc["bad_windows"]] == [
        ("rocketmq", 1, 2, "partition-bridge")
    ]
    assert doc["totals"] == {"local": {"windows": 4, "lost": 0},
                             "rocketmq": {"windows": 4, "lost": 1}}  # fmt: skip
    table = compare_markdown(doc).splitlines()
    assert table[0].startswith("| fault | target | windows | lost |")
    assert "| partition-bridge | rocketmq | 2 | 1 |" in "\n".join(table)
    svg = svg_bars(doc, "unavailable_p50_s", "unavailable_p99_s", "u")
    assert svg.startswith("<svg") and svg.count("<rect") >= 4 + 2  # 4 bars + 2 legend keys
    page = tmp_path / "c.html"
    write_compare_html(doc, page, note="3 seeds")
    text = page.read_text()
    assert "<svg" in text and "rocketmq" in text and "seeds [1, 2]" in text
    assert "no scenario ran" in text
    scenario = scenarios.get("two-masters-isolated-room")
    doc["scenarios"] = {scenario.name: {"rocketmq": [scenarios.outcome(scenario, _summary(1, ["p0-2"])) | {"seed": 1}]}}  # fmt: skip
    write_compare_html(doc, page)
    row = page.read_text().split("two-masters-isolated-room</td>")[1].split("</tr>")[0]
    assert row.startswith("<td>apache/rocketmq#7017</td><td>rocketmq</td><td>1</td><td>1</td>")


def test_every_scenario_is_a_runnable_schedule_of_known_faults() -> None:
    assert len(scenarios.SCENARIOS) == 9
    covered = {n for s in scenarios.SCENARIOS.values() for n in s.issues}
    assert covered == {7017, 6662, 7689, 10666, 4771, 9804, 9984, 9897, 9845, 7923}
    for scenario in scenarios.SCENARIOS.values():
        schedule = scenario.schedule(seed=3, producers=2)
        assert schedule.windows == len(scenario.steps) * scenario.repeat == len(schedule.sequence)
        assert schedule.producers == 2 and schedule.seed == 3
        for fault, normal_s, fault_s in schedule.sequence:
            assert faults.is_known(fault), fault
            assert fault in schedule.faults and normal_s > 0 and fault_s > 0
    with pytest.raises(ValueError, match="known: "):
        scenarios.get("no-such-defect")


def test_scenario_outcome_reports_the_watched_figures() -> None:
    scenario = scenarios.get("two-masters-isolated-room")
    out = scenarios.outcome(scenario, _summary(4, ["p0-0"]))
    assert out["issues"] == ["apache/rocketmq#7017"]
    assert (out["lost"], out["duplicated"], out["reordered"]) == (1, 0, 0)
    assert out["unavailable_max_s"] == 2.5 and out["unavailable_total_s"] == 3.25


class _FakeTarget:
    """Healthy at the second look after each heal (one revive in between)."""

    def __init__(self) -> None:
        self.looks = 0
        self.revived = 0

    def revive(self) -> None:
        self.revived += 1

    def healthy(self) -> bool:
        self.looks += 1
        return self.looks % 2 == 0


def test_a_scenario_runs_its_steps_in_order_with_their_timings_and_records_recovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio
    import random

    from brokergroup_cli.chaos import runner
    from brokergroup_cli.chaos.faults import Injected

    injected: list[str] = []
    healed: list[str] = []

    def inject(fault: str, rt: object, rng: random.Random) -> Injected:
        injected.append(fault)
        return Injected(f"did {fault}", lambda: healed.append(fault))

    monkeypatch.setattr(faults, "inject", inject)  # what the runner calls
    steps = (("a", 0.0, 0.01), ("b", 0.0, 0.0), ("c", 0.0, 0.0))
    schedule = runner.Schedule(faults=("a", "b", "c"), windows=5, seed=1, sequence=steps)
    run = runner.Run(skipped={"c": "not here"})
    clock = runner._Clock()
    asyncio.run(
        runner.fault_windows(
            _FakeTarget(), schedule, ["a", "b"], random.Random(1), clock, run, lambda _: None,  # type: ignore[arg-type]
        )
    )  # fmt: skip
    # a, b, (c skipped), a, b: in the scenario's order, never shuffled
    assert injected == healed == ["a", "b", "a", "b"]
    assert [w.fault for w in run.windows] == ["a", "b", "a", "b"]
    assert run.windows[0].end_s - run.windows[0].start_s >= 0.01  # the step's own fault_s
    assert len(run.healthy_s) == 4 and all(h is not None for h in run.healthy_s)
    assert all(h >= w.end_s for h, w in zip(run.healthy_s, run.windows, strict=True))  # type: ignore[operator]


def _placed(key: str, invoke: float, complete: float, queue_offset: int) -> Operation:
    return Operation(key.split("-")[0], int(key.split("-")[1]), key, invoke, complete, OK, 0,
                     queue_offset)  # fmt: skip


PLACED = [
    _placed("p0-0", 9.0, 9.1, 0),
    _placed("p1-0", 9.5, 9.6, 1),
    _placed("p1-1", 15.0, 15.1, 1),  # position 1 again, between W1 and W2: W2's
    _placed("p0-1", 16.0, 16.1, 0),  # and position 0
    _placed("p0-2", 30.0, 30.1, 2),
]


def _placed_summary() -> dict[str, object]:
    read = [ReadRecord(o.key, 0, o.queue_offset or 0) for o in PLACED]
    findings = check(PLACED, read, [W1, W2])
    return summarize(
        findings, seeds=[7], windows=2, skipped={}, not_recovered=[], reads=len(read),
        operations=PLACED, windows_run=[W1, W2], healthy_s=[16.0, 23.5],
    )  # fmt: skip


def test_reused_offsets_are_counted_attributed_and_compared() -> None:
    s = _placed_summary()
    assert s["reused_offsets"] == 2 and s["data_safe"] is False
    assert [r["reused"] for r in s["recovery"]] == [[], ["p0-1", "p1-1"]]
    assert s["samples"]["reused_offsets"] == [[0, 0, "p0-0", "p0-1"], [0, 1, "p1-0", "p1-1"]]
    doc = compare({"rocketmq": [s]})
    assert doc["faults"]["partition-bridge"]["rocketmq"]["reused_offsets"] == 2
    assert doc["faults"]["kill-master"]["rocketmq"]["reused_offsets"] == 0
    assert [(b["window"], b["reused_offsets"]) for b in doc["bad_windows"]] == [(2, 2)]
    assert "| partition-bridge | rocketmq | 1 | 0 | 0 | 0 | 2 |" in compare_markdown(doc)


def test_a_summary_checked_before_reused_offsets_gets_them_from_its_history() -> None:
    fresh = _placed_summary()
    old = {k: v for k, v in fresh.items() if k != "reused_offsets"}
    old["recovery"] = [{k: v for k, v in r.items() if k != "reused"} for r in fresh["recovery"]]
    old["data_safe"] = old["targets_met"] = True
    old["samples"] = {k: v for k, v in fresh["samples"].items() if k != "reused_offsets"}
    # Not known: a dash in the comparison, not a zero.
    assert (
        compare({"rocketmq": [old]})["faults"]["kill-master"]["rocketmq"]["reused_offsets"] is None
    )
    filled = with_reused_offsets(old, PLACED, [W1, W2])
    assert filled == fresh
    assert with_reused_offsets(fresh, [], []) is fresh  # already checked: untouched
