"""The audit's duplicate checks on a store written with the broker's own encoder.

- a message stored twice (same topic, key and body; a producer retry) is one
  DUPLICATE at both offsets, in order;
- two records on one queue slot (topic, queueId, queueOffset) is one
  DUPLICATE_QUEUE_OFFSET;
- a key hash that collides for every record (`repeated` with a constant hash) finds
  exactly the same groups: the hash only picks candidates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from brokergroup_audit.checks import FindingKind
from brokergroup_audit.job import repeated, run_audit
from brokergroup_broker.store.message_encode import encode_run

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]

SEGMENT_BYTES = 1 << 20


def _write(store: Path, runs: list[tuple[str, int, list[tuple[str, bytes]]]]) -> list[int]:
    """Runs of (topic, first queue offset, [(key, body)]) appended to one segment;
    returns every record's physical offset in order."""
    (store / "commitlog").mkdir(parents=True)
    (store / ".broker.meta").write_text("clusterName=C\nbrokerName=dup\nbrokerId=1\n")
    data = bytearray()
    offsets: list[int] = []
    for topic, first_qo, messages in runs:
        run = encode_run(
            topic, 0, [b for _, b in messages], [{"KEYS": k} for k, _ in messages],
            flag=0, born_timestamp_ms=1, born_host=("127.0.0.1", 1), start_offset=len(data),
            segment_bytes=SEGMENT_BYTES, store_host=("127.0.0.1", 10911), store_timestamp_ms=2,
            first_queue_offset=first_qo, max_message_bytes=1 << 20,
        )  # fmt: skip
        offsets.extend(run.physical_offsets)
        data += run.data
    (store / "commitlog" / f"{0:020d}").write_bytes(bytes(data))
    return offsets


def test_duplicates_and_reused_queue_offsets_are_reported_exactly(
    spark: SparkSession, tmp_path: Path
) -> None:
    root = tmp_path / "stores"
    offsets = _write(
        root / "dup" / "broker-1",
        [
            ("Orders", 0, [("k0", b"a"), ("k1", b"b"), ("k2", b"c")]),
            # A retry of k1 (same body) and a k2 with another body (not a duplicate).
            ("Orders", 3, [("k1", b"b"), ("k2", b"other")]),
            # Another topic reuses k1 and its body: not a duplicate either.
            ("Audit", 0, [("k1", b"b")]),
            # A second writer on Orders' queue slot 4.
            ("Orders", 4, [("k9", b"z")]),
        ],
    )
    result = run_audit(spark, str(root))
    found = [
        (f.kind, f.physical_offset, f.detail)
        for f in result.findings
        if f.kind in (FindingKind.DUPLICATE, FindingKind.DUPLICATE_QUEUE_OFFSET)
    ]
    assert found == [
        (
            FindingKind.DUPLICATE,
            offsets[1],
            f"topic Orders key k1 stored 2 times at {[offsets[1], offsets[3]]}",
        ),
        (
            FindingKind.DUPLICATE_QUEUE_OFFSET,
            offsets[4],
            f"Orders/0 queue offset 4 used by 2 records at {[offsets[4], offsets[6]]}",
        ),
    ]
    assert result.summary["findingCounts"]["DUPLICATE"] == 1


def test_a_colliding_key_hash_only_adds_candidates(spark: SparkSession) -> None:
    rows = spark.createDataFrame(
        [("g", "t", "k1", 10), ("g", "t", "k2", 20), ("g", "t", "k1", 30), ("g", "u", "k1", 40)],
        "group STRING, topic STRING, keys STRING, physicalOffset BIGINT",
    )
    key = ["group", "topic", "keys"]
    expected = [("g", "t", "k1", 2, [10, 30])]
    assert [tuple(r) for r in repeated(rows, key, F.xxhash64(*key))] == expected
    # Every record on one hash: all are candidates, the key itself still decides.
    assert [tuple(r) for r in repeated(rows, key, F.lit(7).cast("long"))] == expected
