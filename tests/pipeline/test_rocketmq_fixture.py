"""A store written by RocketMQ 5.3.3 itself (../shared/fixtures/rocketmq-5.3-store/):
two replicas, one failover, two epochs, one compressed body, zero-filled segment
tails. Every manifest entry must come back from the `commitlog` Spark source with
the same topic, queue, offsets, key and body CRC on both replicas, and the two
replicas must audit clean (one failover listed, at epoch 2's start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from brokergroup_audit.job import run_audit

pytestmark = pytest.mark.pipeline


def test_every_manifest_entry_comes_back_identical(
    spark: SparkSession, rocketmq_store: Path
) -> None:
    manifest = [
        json.loads(line) for line in (rocketmq_store / "manifest.jsonl").read_text().splitlines()
    ]
    expected = sorted(
        (m["commitLogOffset"], m["topic"], m["queueId"], m["queueOffset"], m["key"],
         m["bodyCrc32"], m["storedSize"], m["epoch"])
        for m in manifest
    )  # fmt: skip
    # Small splits: every 1 MiB segment is cut into 5 slices read by different tasks.
    df = spark.read.format("commitlog").option("splitBytes", str(200_000)).load(str(rocketmq_store))
    rows = df.collect()
    assert {r["problem"] for r in rows} == {None}
    for broker_id in (1, 2):
        got = sorted(
            (r["physicalOffset"], r["topic"], r["queueId"], r["queueOffset"], r["keys"],
             r["bodyCRC"], r["size"], r["epoch"])
            for r in rows
            if r["brokerId"] == broker_id
        )  # fmt: skip
        assert got == expected
    compressed = next(m for m in manifest if m["storedBodyCompressed"])
    assert any(
        r["physicalOffset"] == compressed["commitLogOffset"]
        and r["bodyCRC"] == compressed["bodyCrc32"]
        for r in rows
    )


def test_the_two_replicas_audit_clean(spark: SparkSession, rocketmq_store: Path) -> None:
    result = run_audit(spark, str(rocketmq_store))
    s = result.summary
    assert result.findings == []
    assert [(r["group"], r["brokerId"], r["records"], r["endOffset"]) for r in s["replicas"]] == [
        ("broker-a", 1, 1200, 2_785_610),
        ("broker-a", 2, 1200, 2_785_610),
    ]
    assert [(f["epoch"], f["startOffset"], f["previousEpoch"]) for f in s["failovers"]] == [
        (2, 1_680_940, 1)
    ]
