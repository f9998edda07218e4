"""The audit on stores written by real brokers (tests/pipeline/conftest.py `chaos_store`:
the local runtime, 3 brokers, two master kills while a producer wrote an ack log and
`brokergroup admin events` recorded the controller).

- the clean store: zero loss or divergence findings, every acknowledgement found,
  both failovers listed with their epochs, new/previous masters and unavailability;
- the same store damaged on purpose: one flipped byte in a replica's committed
  region is exactly one divergence at that record's offset; cutting every replica's
  log at an acknowledged record makes exactly the acknowledgements from there on
  lost (and `brokergroup audit` exits 1);
- one replica cut short below its confirmOffset (a torn last record, or a zeroed
  tail): that is a data-costing TORN_COMMITTED finding, and it does not hide a
  divergence between the two other replicas past its end (pairs are compared up to
  the smaller of their own confirmed ends).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from brokergroup_audit.checks import FindingKind
from brokergroup_audit.inputs import acknowledged, read_json_lines
from brokergroup_audit.job import run_audit
from brokergroup_audit.stores import find_replicas
from tests.pipeline.conftest import ChaosStore

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]


def _acks(store: ChaosStore) -> list[dict]:
    return acknowledged(read_json_lines(str(store.acks)), ["broker-a"])


def test_clean_chaos_store_has_no_loss_and_lists_the_failovers(
    spark: SparkSession, chaos_store: ChaosStore
) -> None:
    acks = _acks(chaos_store)
    events = read_json_lines(str(chaos_store.events))
    assert len(acks) >= 1600
    result = run_audit(spark, str(chaos_store.brokers), acks=acks, events=events)
    kinds = {f.kind for f in result.findings}
    assert not any(f.kind.costs_data for f in result.findings), result.findings
    assert FindingKind.ACKED_MISSING not in kinds and FindingKind.DIVERGENCE not in kinds
    s = result.summary
    assert s["acknowledged"] == len(acks)
    failed_over = [f for f in s["failovers"] if f["epoch"] in chaos_store.epochs_after_kills]
    assert [f["epoch"] for f in failed_over] == chaos_store.epochs_after_kills
    assert [f["previousMasterBrokerId"] for f in failed_over] == chaos_store.killed
    for f in failed_over:
        assert f["newMasterBrokerId"] not in (None, f["previousMasterBrokerId"])
        assert f["unavailableMs"] is not None and f["unavailableMs"] >= 0
        assert f["truncatedBytes"] is not None
    # Acknowledged sends carry the master epoch that took them: both epochs appear.
    assert {a["masterEpoch"] for a in acks} >= set(chaos_store.epochs_after_kills)


def _segment_of(replica_dir: str, offset: int) -> tuple[Path, int]:
    segs = sorted(p for p in (Path(replica_dir) / "commitlog").iterdir())
    seg = max((p for p in segs if int(p.name) <= offset), key=lambda p: int(p.name))
    return seg, offset - int(seg.name)


def _flip_body_byte(replica_dir: str, offset: int) -> None:
    """One bit of the body of the record at `offset`: a BAD_CRC record, same size."""
    seg, pos = _segment_of(replica_dir, offset)
    with open(seg, "r+b") as f:
        f.seek(pos + 120)
        byte = f.read(1)
        f.seek(pos + 120)
        f.write(bytes([byte[0] ^ 0x40]))


def test_flipped_byte_and_truncated_range_are_reported_exactly(
    spark: SparkSession, chaos_store: ChaosStore, tmp_path: Path
) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(chaos_store.brokers, root)
    replicas = find_replicas(root)
    assert len(replicas) == 3
    acks = sorted(_acks(chaos_store), key=lambda a: a["physicalOffset"])
    # Cut every replica's log at an acknowledged record two thirds in: exactly the
    # acknowledgements from there on are lost.
    cut = acks[2 * len(acks) // 3]["physicalOffset"]
    for r in replicas:
        for seg in r.segments:
            if seg.start >= cut:
                os.unlink(seg.path)
            elif seg.start + seg.length > cut:
                os.truncate(seg.path, cut - seg.start)
    # Flip one body byte of an acknowledged record well inside the committed region of
    # one replica (not the reference one, so the acks still match).
    victim = acks[len(acks) // 3]
    # (Ties in epoch and length make the lowest brokerId the reference; flip the highest.)
    flipped = max(replicas, key=lambda r: r.broker_id)
    _flip_body_byte(flipped.path, victim["physicalOffset"])

    result = run_audit(spark, str(root), acks=acks)
    divergences = [f for f in result.findings if f.kind is FindingKind.DIVERGENCE]
    assert [d.physical_offset for d in divergences] == [victim["physicalOffset"]], divergences
    lost = sorted(f.physical_offset for f in result.findings if f.kind is FindingKind.ACKED_MISSING)
    expected = sorted(a["physicalOffset"] for a in acks if a["physicalOffset"] >= cut)
    assert lost == expected
    assert len(lost) >= 1

    # The command line: exit 1, the outputs written.
    ack_file = tmp_path / "acks.jsonl"
    ack_file.write_text("".join(json.dumps(a) + "\n" for a in acks))
    out = tmp_path / "out"
    cli = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit", str(root), "--acks",
         str(ack_file), "--events", str(chaos_store.events), "--out", str(out),
         "--master", "local[2]", "--quiet"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert cli.returncode == 1, cli.stdout + cli.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["findingCounts"]["ACKED_MISSING"] == len(expected)
    assert summary["findingCounts"]["DIVERGENCE"] == 1
    for name in ("findings.parquet", "failovers.parquet", "epochs.parquet", "report.html"):
        assert (out / name).stat().st_size > 0
    assert "data:image/png;base64," in (out / "report.html").read_text()


@pytest.mark.parametrize("damage", ["torn", "zeroed"])
def test_a_short_replica_neither_hides_divergence_nor_its_own_loss(
    spark: SparkSession, chaos_store: ChaosStore, tmp_path: Path, damage: str
) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(chaos_store.brokers, root)
    short, reference, flipped = find_replicas(root)  # by brokerId
    acks = sorted(_acks(chaos_store), key=lambda a: a["physicalOffset"])
    cut = acks[len(acks) // 3]["physicalOffset"]
    both_confirmed = min(reference.confirm_offset or 0, flipped.confirm_offset or 0)
    later = [
        a for a in acks if cut < a["physicalOffset"] and a["physicalOffset"] + 400 < both_confirmed
    ]
    assert later, (cut, both_confirmed)
    victim = later[len(later) // 2]
    assert short.confirm_offset is not None and short.confirm_offset > victim["physicalOffset"]
    # The short replica: its log ends at `cut` (plus 10 bytes of a torn record, or zeros).
    for seg in short.segments:
        if seg.start > cut:
            os.unlink(seg.path)
        elif seg.start + seg.length > cut:
            if damage == "torn":
                os.truncate(seg.path, cut - seg.start + 10)
            else:
                with open(seg.path, "r+b") as f:
                    f.seek(cut - seg.start)
                    f.write(bytes(seg.start + seg.length - cut))
    _flip_body_byte(flipped.path, victim["physicalOffset"])

    result = run_audit(spark, str(root))
    costly = sorted(
        (f.kind.value, f.broker_id or 0, f.physical_offset or 0)
        for f in result.findings
        if f.kind.costs_data
    )
    assert costly == sorted(
        [
            ("TORN_COMMITTED", short.broker_id, cut),
            ("DIVERGENCE", 0, victim["physicalOffset"]),
            # The flipped body byte is a BAD_CRC record on its own replica too.
            ("CORRUPT_RECORD", flipped.broker_id, victim["physicalOffset"]),
        ]
    ), result.findings
    divergence = next(f for f in result.findings if f.kind is FindingKind.DIVERGENCE)
    assert divergence.detail.startswith(
        "2 of 2 replicas that confirmed this offset hold a record here; "
    )
    assert f"broker {flipped.broker_id}: " in divergence.detail and "(BAD_CRC)" in divergence.detail
