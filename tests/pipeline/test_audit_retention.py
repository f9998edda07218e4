"""The audit through Spark on replicas whose retention deleted different prefixes
(issue 33 item 2; docs/audit.md "Retention"; stores from tests/unit/retention_stores.py,
written by the broker's store code).

Broker 1 deleted 2 segments, broker 2 deleted 4, broker 3 (a slave one segment behind)
deleted 3; the ack log has every stored message:

- the acknowledgements below 2 segments (what every replica retains) are one EXPIRED
  finding, not ACKED_MISSING; those between are found on broker 1, which still holds
  them; nothing costs data and `brokergroup audit` exits 0;
- summary.json and retention.parquet say what each replica deleted, why and when;
  report.html has the retention tables;
- an acknowledgement below the reference's first segment that its holder does not hold
  as acknowledged is ACKED_MISSING on that holder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from brokergroup_audit.inputs import acknowledged
from brokergroup_audit.job import run_audit
from tests.unit.retention_stores import GROUP, SEG, Master, build_master, replica, retire

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]

DELETED = {1: 2, 2: 4, 3: 3}


def _stores(tmp_path: Path) -> tuple[Path, Master, dict[int, list[dict[str, object]]]]:
    master = build_master(tmp_path / "master", 5)
    root = tmp_path / "stores"
    lines = {}
    for b, k in DELETED.items():
        path = replica(master, root / GROUP / f"broker-{b}", b, behind=b == 3)
        lines[b] = retire(path, k, 1000 * b)
    return root, master, lines


def test_expired_acknowledgements_and_what_each_replica_deleted(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, master, lines = _stores(tmp_path)
    acks = acknowledged(master.acks, [GROUP])
    expired = [a for a in acks if a["physicalOffset"] < 2 * SEG]
    result = run_audit(spark, str(root), acks=acks)
    # (By value: the audit before this change had no EXPIRED and said ACKED_MISSING.)
    assert [f.kind.value for f in result.findings] == ["EXPIRED"]
    (f,) = result.findings
    assert (f.group, f.broker_id, f.physical_offset) == (GROUP, None, 0)
    assert f.detail == (
        f"{len(expired)} acknowledged messages (ack lines 1..{expired[-1]['ackLine']}, "
        f"offsets 0..{expired[-1]['physicalOffset']}, acknowledged {expired[0]['ackTimeMs']}.."
        f"{expired[-1]['ackTimeMs']}) are below every replica's log start ({2 * SEG}): deleted "
        f"by retention; broker 1 [0, {2 * SEG}) expired; broker 2 [0, {2 * SEG}) expired; "
        f"[{2 * SEG}, {3 * SEG}) disk; [{3 * SEG}, {4 * SEG}) forced; broker 3 [0, {2 * SEG}) "
        f"expired; [{2 * SEG}, {3 * SEG}) disk"
    )
    s = result.summary
    assert (s["acknowledged"], s["expiredAcknowledged"], s["dataCostingFindings"]) == (
        len(acks), len(expired), 0
    )  # fmt: skip
    assert [(r["brokerId"], r["minOffset"], r["reference"]) for r in s["replicas"]] == [
        (1, 2 * SEG, True), (2, 4 * SEG, False), (3, 3 * SEG, False)
    ]  # fmt: skip
    (g,) = s["retention"]
    assert (g["group"], g["expiredBelow"]) == (GROUP, 2 * SEG)
    assert g["expiredAcknowledged"] == {
        "count": len(expired),
        "ackLines": [1, expired[-1]["ackLine"]],
        "physicalOffsets": [0, expired[-1]["physicalOffset"]],
        "ackTimeMs": [expired[0]["ackTimeMs"], expired[-1]["ackTimeMs"]],
    }
    assert g["holders"] == [{"brokerId": 1, "fromOffset": 2 * SEG, "toOffset": None}]
    assert [(r["brokerId"], r["deletedBytes"], [(d["fromOffset"], d["toOffset"], d["reason"],
             d["segments"], d["firstAtMs"], d["lastAtMs"]) for d in r["deleted"]],
             r["unlogged"], r["pending"], r["problems"]) for r in g["replicas"]] == [
        (1, 2 * SEG, [(0, 2 * SEG, "expired", 2, 1000, 1001)], [], [], []),
        (2, 4 * SEG, [(0, 2 * SEG, "expired", 2, 2000, 2001), (2 * SEG, 3 * SEG, "disk", 1, 2002,
         2002), (3 * SEG, 4 * SEG, "forced", 1, 2003, 2003)], [], [], []),
        (3, 3 * SEG, [(0, 2 * SEG, "expired", 2, 3000, 3001), (2 * SEG, 3 * SEG, "disk", 1, 3002,
         3002)], [], [], []),
    ]  # fmt: skip
    assert result.deletions == [{"group": GROUP, "brokerId": b, **line}
                                for b in (1, 2, 3) for line in lines[b]]  # fmt: skip

    # The CLI: exit 0, the expired line, the same summary and every deletion in Parquet.
    ack_log = tmp_path / "acks.jsonl"
    ack_log.write_text("".join(json.dumps(a) + "\n" for a in master.acks))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit", str(root), "--acks",
         str(ack_log), "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"  {GROUP}: {len(expired)} acknowledged messages expired (below every replica's log "
        f"start {2 * SEG}: deleted by retention, not lost)"
    ) in done.stdout.splitlines()
    written = json.loads((out / "summary.json").read_text())
    assert written["retention"] == s["retention"]
    assert [x["kind"] for x in written["findings"]] == ["EXPIRED"]
    assert pq.read_table(out / "retention.parquet").to_pylist() == result.deletions
    report = (out / "report.html").read_text()
    assert "<h2>Retention</h2>" in report and "[8192, 12288) disk" in report


def test_an_ack_below_the_references_log_is_judged_on_the_replica_that_holds_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Broker 1 is the reference (the longest log, with broker 2, and the lower id) and
    # deleted 4 segments; broker 3 (a slave one segment behind) deleted only 3, so the
    # acknowledgements in [3 SEG, 4 SEG) are broker 3's to answer.
    master = build_master(tmp_path / "master", 5)
    root = tmp_path / "stores"
    for b, k, late in ((1, 4, False), (2, 5, False), (3, 3, True)):
        retire(replica(master, root / GROUP / f"broker-{b}", b, behind=late), k, 1000 * b)
    acks = acknowledged(master.acks, [GROUP])
    held_by_3 = [a for a in acks if 3 * SEG <= a["physicalOffset"] < 4 * SEG]
    wrong = dict(held_by_3[1], bodyCrc=held_by_3[1]["bodyCrc"] ^ 1)
    result = run_audit(spark, str(root), acks=[wrong if a is held_by_3[1] else a for a in acks])
    assert [(f.kind.value, f.broker_id, f.physical_offset) for f in result.findings] == [
        ("ACKED_MISSING", 3, wrong["physicalOffset"]),
        ("EXPIRED", None, 0),
    ]
    s = result.summary
    assert s["retention"][0]["holders"] == [
        {"brokerId": 3, "fromOffset": 3 * SEG, "toOffset": 4 * SEG},
        {"brokerId": 1, "fromOffset": 4 * SEG, "toOffset": None},
    ]
    assert s["expiredAcknowledged"] == len([a for a in acks if a["physicalOffset"] < 3 * SEG])
