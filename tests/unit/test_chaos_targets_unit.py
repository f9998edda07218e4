"""The pure parts of `brokergroup chaos --target` (issue 37 item 1): which target and
workload pairs run, how a stock workload's send line becomes the checker's operation
(wall-clock ms onto the run's clock, SEND_OK as acknowledged), and that a line the JVM
is still writing is not read half."""

from __future__ import annotations

import json
from pathlib import Path

from brokergroup_cli.chaos.stock_run import _operation, _Tail
from brokergroup_cli.chaos.targets import check_choice, default_workload


def test_targets_and_workloads() -> None:
    assert default_workload("local") == "own"
    assert default_workload("rocketmq") == default_workload("local-rocketmq") == "stock"
    assert check_choice("local", "own") is None
    assert check_choice("local", "stock") is None
    assert check_choice("rocketmq", "stock") is None
    refusal = check_choice("rocketmq", "own")
    assert refusal is not None and "only the stock workload" in refusal
    unknown = check_choice("kafka", "stock")
    assert unknown is not None and "unknown target" in unknown


def test_a_send_line_becomes_an_operation_on_the_runs_clock() -> None:
    line = {"client": "p1", "seq": 7, "key": "p1-7", "invokeMs": 1_000_250,
            "completeMs": 1_000_300, "outcome": "ok", "detail": "SEND_OK", "bodyCrc": 42,
            "queueId": 1, "queueOffset": 9}  # fmt: skip
    op = _operation(line, 1_000.0)
    assert (op.client, op.seq, op.key, op.outcome, op.queue_id, op.queue_offset) == (
        "p1",
        7,
        "p1-7",
        "ok",
        1,
        9,
    )
    assert (round(op.invoke_s, 3), round(op.complete_s, 3), op.error) == (0.25, 0.3, None)
    failed = _operation(line | {"outcome": "indeterminate", "detail": "timeout"}, 1_000.0)
    assert (failed.outcome, failed.error, failed.attempts) == (
        "indeterminate",
        "timeout",
        ("indeterminate",),
    )


def test_tail_reads_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "sends.jsonl"
    tail = _Tail(path)
    assert tail.read() == []  # not written yet
    first = json.dumps({"n": 1})
    path.write_text(first + "\n" + '{"n": ')
    assert tail.read() == [{"n": 1}]
    with open(path, "a") as f:
        f.write("2}\n")
    assert tail.read() == [{"n": 2}]
    assert tail.read() == []
