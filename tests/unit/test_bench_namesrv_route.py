"""bench/namesrv_route.py's pure summaries: the name server over the echo floor per phase,
and a fresh JVM's runs folded into one record (failed runs named, never averaged in)."""

from __future__ import annotations

from tests.unit.bench_modules import load_bench_module

bench = load_bench_module("namesrv_route")


def probe(p50: float, p99: float, top: float) -> dict[str, float]:
    return {"p50": p50, "p99": p99, "max": top}


def test_ratios_divide_the_name_server_by_the_floor_of_the_same_phase() -> None:
    phases = {
        "burn": {
            "namesrv_connect": probe(4.0, 20.0, 300.0),
            "echo_connect": probe(8.0, 25.0, 30.0),
            "namesrv_warm": probe(3.0, 20.0, 27.0),
            "echo_warm": probe(3.0, 0.0, 27.0),
        }
    }
    assert bench.ratios(phases) == {
        "burn": {
            "connect_p50": 0.5,
            "connect_p99": 0.8,
            "connect_max": 10.0,
            "warm_p50": 1.0,
            "warm_max": 1.0,  # warm_p99 left out: a zero floor divides nothing
        }
    }


def test_java_summary_keeps_failed_runs_apart() -> None:
    ok = {
        "jvmToMainMs": 230,
        "startMs": 368.87,
        "firstLookupMs": 1149.38,
        "firstFound": True,
        "prewarmMs": 0.0,
        "warmMs": [4.0, 2.0, 6.0],
        "wallMs": 5792.4,
    }
    failed = {"error": "timed out after 120 s", "wallMs": 120_000.0}
    summary = bench.java_summary([ok, failed])
    assert summary["runs"] == 2
    assert summary["firstLookupMs"] == [1149.4]
    assert summary["wallMs"] == [5792]
    assert summary["warmLookupMs"]["count"] == 3
    assert summary["warmLookupMs"]["p50"] == 4.0
    assert summary["errors"] == ["timed out after 120 s"]
