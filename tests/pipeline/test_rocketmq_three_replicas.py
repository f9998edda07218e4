"""A store written by stock RocketMQ 5.3.1 brokers in controller mode
(tests/fixtures/rocketmq/store-3replicas/, made by tools/rocketmq/store_fixture.py): three
replicas, the master SIGKILLed twice (so three epochs), normal, compressed (> 4 KiB),
delay, timer and batch messages, and the producer's ack log (SendResult as the stock
client returns it: msgId, offsetMsgId, topic, queueId, queueOffset).

The audit must find every acknowledged message (0 lost): the delay and timer messages
through the REAL_TOPIC/REAL_QID of the copy RocketMQ parks in SCHEDULE_TOPIC_XXXX /
rmq_sys_wheel_timer (before issue 21 they came back ACKED_MISSING and the audit exited 1),
the rest at their offsetMsgId. It must see both failovers at the epochs the run recorded,
and an acknowledgement that names another queue must still be reported (the match is not
vacuous)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from brokergroup_audit import checks
from brokergroup_audit.checks import FindingKind
from brokergroup_audit.inputs import acknowledged, read_json_lines
from brokergroup_audit.job import run_audit

pytestmark = pytest.mark.pipeline

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rocketmq" / "store-3replicas"
PARKED = {"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rmq3") / "store-3replicas"
    shutil.copytree(FIXTURE, out)
    return out


def _acks(store: Path) -> list[dict[str, Any]]:
    return acknowledged(read_json_lines(str(store / "acks.jsonl")), ["broker-a"])


def test_every_acknowledgement_is_found_and_both_failovers_are_seen(
    spark: SparkSession, store: Path
) -> None:
    lines = read_json_lines(str(store / "acks.jsonl"))
    kinds = {k: sum(1 for a in lines if a["kind"] == k) for k in ("delay", "timer", "batch")}
    assert min(kinds.values()) > 0, kinds
    assert any(a["bodyLen"] > 4096 for a in lines)  # compressed by the client
    run = json.loads((store / "run.json").read_text())

    result = run_audit(spark, str(store), acks=_acks(store))
    s = result.summary
    costly = [f for f in result.findings if f.kind.costs_data]
    assert costly == []
    assert checks.exit_code(result.findings) == 0
    assert s["acknowledged"] == len(lines)
    assert [(r["group"], r["brokerId"]) for r in s["replicas"]] == [
        ("broker-a", 1), ("broker-a", 2), ("broker-a", 3)
    ]  # fmt: skip
    assert [f["epoch"] for f in s["failovers"]] == [k["epochAfter"] for k in run["kills"]]
    # Every replica ends where the reference does (all three were back in sync at the end).
    assert len({r["endOffset"] for r in s["replicas"]}) == 1

    # The delay and timer acknowledgements were matched on their parked copies.
    rows = (
        spark.read.format("commitlog")
        .load(str(store))
        .filter(F.col("brokerId") == 1)
        .select("physicalOffset", "topic", "realTopic", "realQueueId", "uniqKey")
        .collect()
    )
    at = {r["physicalOffset"]: r for r in rows}
    for a in _acks(store):
        if lines[a["ackLine"] - 1]["kind"] in ("delay", "timer"):
            held = at[a["physicalOffset"]]
            assert held["topic"] in PARKED
            assert (held["realTopic"], held["realQueueId"]) == (a["topic"], a["queueId"])
            assert held["uniqKey"] == a["msgId"]


def test_an_acknowledgement_for_another_queue_is_still_lost(
    spark: SparkSession, store: Path
) -> None:
    acks = _acks(store)
    lines = read_json_lines(str(store / "acks.jsonl"))
    delay = next(a for a in acks if lines[a["ackLine"] - 1]["kind"] == "delay")
    normal = next(a for a in acks if lines[a["ackLine"] - 1]["kind"] == "normal")
    wrong = [
        {**delay, "queueId": (delay["queueId"] + 1) % 4},
        {**normal, "msgId": "7F0000010000000000000000DEADBEEF"},
    ]
    result = run_audit(spark, str(store), acks=wrong)
    assert [(f.kind, f.physical_offset) for f in result.findings if f.kind.costs_data] == [
        (FindingKind.ACKED_MISSING, a["physicalOffset"])
        for a in sorted(wrong, key=lambda a: a["physicalOffset"])
    ]
