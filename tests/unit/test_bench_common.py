"""The benchmarks' percentile and summary helpers (bench/_common.py).

How: nearest-rank percentiles on small hand-checked inputs, then a
hypothesis run against a naive reference (sort, take the ceil(q·n)-th
value); `summarize` on empty and non-empty samples. Nothing here measures
time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.unit.bench_modules import load_bench_module

common = load_bench_module("_common")

samples = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=200
)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(common.percentile([], 50))


@pytest.mark.parametrize("q", [-1, 100.5])
def test_percentile_rejects_q_outside_0_100(q: float) -> None:
    with pytest.raises(ValueError):
        common.percentile([1.0], q)


def test_percentile_nearest_rank_hand_checked() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]  # order does not matter
    assert common.percentile(values, 0) == 1.0
    assert common.percentile(values, 20) == 1.0
    assert common.percentile(values, 21) == 2.0
    assert common.percentile(values, 50) == 3.0
    assert common.percentile(values, 100) == 5.0


def test_p99_of_twenty_samples_is_their_maximum() -> None:
    values = [float(i) for i in range(1, 21)]
    assert common.percentile(values, 99) == 20.0
    assert common.percentile(values, 50) == 10.0


def test_percentile_does_not_reorder_its_input() -> None:
    values = [3.0, 1.0, 2.0]
    common.percentile(values, 50)
    assert values == [3.0, 1.0, 2.0]


@given(samples, st.floats(min_value=0, max_value=100))
def test_percentile_matches_naive_reference(values: list[float], q: float) -> None:
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    assert common.percentile(values, q) == ordered[rank - 1]


@given(samples, st.floats(min_value=0, max_value=100), st.floats(min_value=0, max_value=100))
def test_percentile_is_monotonic_in_q_and_a_measured_value(
    values: list[float], q1: float, q2: float
) -> None:
    low, high = sorted((q1, q2))
    assert common.percentile(values, low) <= common.percentile(values, high)
    assert common.percentile(values, q1) in values


def test_summarize_empty() -> None:
    summary = common.summarize([])
    assert summary["count"] == 0
    assert all(summary[k] is None for k in ("min", "p50", "p90", "p99", "max", "mean"))


def test_summarize_values() -> None:
    summary = common.summarize([0.5, 0.1, 0.3, 0.2, 0.4], digits=3)
    assert summary == {
        "count": 5,
        "min": 0.1,
        "p50": 0.3,
        "p90": 0.5,
        "p99": 0.5,
        "max": 0.5,
        "mean": 0.3,
    }


@given(samples)
def test_summarize_is_ordered(values: list[float]) -> None:
    s = common.summarize(values, digits=12)
    assert s["count"] == len(values)
    assert s["min"] <= s["p50"] <= s["p90"] <= s["p99"] <= s["max"]


def test_write_result_adds_machine_and_time(tmp_path: Path) -> None:
    path = common.write_result("x", {"p50_s": 0.1}, results_dir=tmp_path)
    assert path == tmp_path / "x.json"

    body = json.loads(path.read_text())
    assert body["p50_s"] == 0.1
    assert "cpus" in body["machine"] and body["measuredAt"].endswith("Z")


def test_results_hold_no_absolute_machine_paths(tmp_path: Path) -> None:
    repo = common.RESULTS_DIR.parents[1]
    data = {"dir": str(repo / "bench" / "results"), "work": ["/tmp/bench-x-123"], "n": 1}
    path = common.write_result("paths", data, results_dir=tmp_path)
    text = path.read_text()
    assert '"/' not in text
    body = json.loads(text)
    assert body["dir"] == "bench/results" and body["work"] == ["<tmp>/bench-x-123"]
    assert body["n"] == 1
