"""The report lines of RocketMQ's benchmark programs (tools/rocketmq/benchmark_programs.py).

bench/rocketmq_benchmark.py reads Producer's and Consumer's own periodic lines; these are the
lines their `printf` formats write (example/.../benchmark/Producer.java doPrintStats and
Consumer.java printStats at rocketmq-all-5.3.1), including `%7.3f`'s padding and a NaN
average when no message completed in the window. Other lines are not reports.
"""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parents[2] / "tools" / "rocketmq"


def _module() -> Any:
    """tools/rocketmq/benchmark_programs.py (stdlib only; not a package)."""
    sys.path.insert(0, str(TOOLS))
    try:
        return importlib.import_module("benchmark_programs")
    finally:
        sys.path.remove(str(TOOLS))


def test_producer_and_consumer_reports_are_read_as_printed() -> None:
    parse = _module().parse_report
    producer = (
        "Current Time: 2026-11-29 00:50:40,123 | Send TPS: 1558 | Max RT(ms): 1020 | "
        "Average RT(ms):  10.272 | Send Failed: 0 | Response Failed: 3"
    )
    assert parse(producer) == {
        "tps": 1558.0,
        "max_rt_ms": 1020.0,
        "avg_rt_ms": 10.272,
        "failed": 0.0,
        "response_failed": 3.0,
    }
    complete = (
        "[Complete] Send Total: 9000 | Send TPS: 1500 | Max RT(ms): 900 | "
        "Average RT(ms):   9.500 | Send Failed: 2 | Response Failed: 0"
    )
    assert parse(complete)["failed"] == 2.0
    consumer = (
        "Current Time: 2026-11-29 00:51:00,001 | Consume TPS: 1286 | AVG(B2C) RT(ms):  14.006 | "
        "AVG(S2C) RT(ms):   3.500 | MAX(B2C) RT(ms): 120 | MAX(S2C) RT(ms): 80 | Consume Fail: 0"
    )
    assert parse(consumer) == {
        "tps": 1286.0,
        "avg_b2c_ms": 14.006,
        "avg_s2c_ms": 3.5,
        "max_b2c_ms": 120.0,
        "max_s2c_ms": 80.0,
        "failed": 0.0,
    }
    idle = parse(producer.replace(" 10.272", "    NaN"))
    assert idle is not None and math.isnan(idle["avg_rt_ms"])
    assert parse("topic: BenchTopic, threadCount: 16, messageSize: 1024") is None
    assert parse("Consumer Started.") is None


def test_mean_of_leaves_out_windows_without_a_value() -> None:
    mean_of = _module().mean_of
    reports = [{"avg_rt_ms": 10.0}, {"avg_rt_ms": float("nan")}, {"avg_rt_ms": 12.0}]
    assert mean_of(reports, "avg_rt_ms") == 11.0
    assert mean_of([], "avg_rt_ms") is None
