"""The audit knows retention (issue 33 item 2; docs/audit.md "Retention").

Stores are written by the broker's own store code and lose their first segments as the
broker's retention deletes them (tests/unit/retention_stores.py: retention.log lines,
segments unlinked, consume queues and epoch entries trimmed). Over which prefix each
of three replicas deleted (hypothesis), and whether a replica is a slave one segment
behind (its last segment full, ending in its blank record):

- the source reads every retained record of every replica, fast path and general
  reader alike, in order, with its epoch, and no damage (the log starts at the first
  remaining segment, whose size is known even when it is the only one left);
- an acknowledgement below what every replica retains is EXPIRED, one that a replica
  still holds is found on that replica (never ACKED_MISSING), and the pure checks
  see no divergence, uncommitted tail or epoch conflict between replicas that deleted
  different prefixes;
- what each replica deleted, why and when, is read back from its retention.log.
"""

from __future__ import annotations

import tempfile
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyarrow import fs

from brokergroup_audit import checks, retention
from brokergroup_audit.checks import Copy, Finding, FindingKind, ReplicaFacts, StoredRecord
from brokergroup_audit.inputs import ACK_SCHEMA, acknowledged
from brokergroup_audit.retention import DeletedRange, Deletion
from brokergroup_audit.source import read_slice, slices
from brokergroup_audit.stores import Replica, blank_end, find_replicas
from brokergroup_broker.store.record_columns import scan_columns
from tests.unit.retention_stores import (
    GROUP,
    REASONS,
    SEG,
    Master,
    build_master,
    replica,
    retire,
)

FULL_SEGMENTS = 5


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Master:
    return build_master(tmp_path_factory.mktemp("retention") / "master", FULL_SEGMENTS)


def _rows(r: Replica, root: Path, split: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for part in slices(str(root), [r], split, SEG):
        out += read_slice(part).to_pylist()
    return out


def _merged(k: int, first_at_ms: int) -> list[DeletedRange]:
    """What retire(k) deleted, merged by hand: adjacent segments of one reason."""
    out: list[DeletedRange] = []
    for j in range(k):
        reason, at = REASONS[j % len(REASONS)], first_at_ms + j
        if out and out[-1].reason == reason:
            d = out[-1]
            out[-1] = DeletedRange(d.from_offset, (j + 1) * SEG, reason, d.segments + 1,
                                   d.first_at_ms, at)  # fmt: skip
        else:
            out.append(DeletedRange(j * SEG, (j + 1) * SEG, reason, 1, at, at))
    return out


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    deleted=st.lists(st.integers(0, FULL_SEGMENTS), min_size=3, max_size=3),
    behind=st.lists(st.booleans(), min_size=3, max_size=3),
    split=st.sampled_from([SEG, 1000, 300]),
)
@example(deleted=[0, 2, 5], behind=[False, False, False], split=SEG)  # ref keeps epoch 1
@example(deleted=[5, 5, 4], behind=[True, False, True], split=1000)  # one full segment left
def test_each_replica_deleting_its_own_prefix(
    master: Master, deleted: list[int], behind: list[bool], split: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ends, kept = {}, {}
        for broker_id, (k, late) in enumerate(zip(deleted, behind, strict=True), 1):
            files = FULL_SEGMENTS + (0 if late else 1)
            kept[broker_id] = min(k, files - 1) * SEG
            path = replica(master, root / GROUP / f"broker-{broker_id}", broker_id, behind=late)
            retire(path, kept[broker_id] // SEG, 1000 * broker_id)
            ends[broker_id] = FULL_SEGMENTS * SEG if late else None
        found = find_replicas(root)
        assert [(r.broker_id, r.min_offset, r.segment_bytes) for r in found] == [
            (b, kept[b], SEG) for b in (1, 2, 3)
        ]

        # Every retained record, in order, with its epoch; no damage.
        rows = {r.broker_id: _rows(r, root, split) for r in found}
        for r in found:
            end = ends[r.broker_id]
            expected = [
                (a["physicalOffset"], a["size"], a["topic"], a["queueId"], a["queueOffset"],
                 a["key"], a["bodyCrc"], 2 if a["physicalOffset"] >= master.epoch2_at else 1,
                 None)
                for a in master.acks
                if a["physicalOffset"] >= r.min_offset and (end is None or a["physicalOffset"] < end)
            ]  # fmt: skip
            assert [
                (x["physicalOffset"], x["size"], x["topic"], x["queueId"], x["queueOffset"],
                 x["keys"], x["bodyCRC"], x["epoch"], x["problem"])
                for x in rows[r.broker_id]
            ] == expected, r.name  # fmt: skip
            for seg in r.segments:  # the general reader agrees (no damage anywhere)
                data = Path(seg.path).read_bytes()
                scan = scan_columns(data, seg.start, seg.start + SEG, seg.start,
                                    seg.start + len(data), first_is_boundary=True,
                                    max_record_bytes=SEG)  # fmt: skip
                assert scan.problems == []
                assert [int(x) for x in scan.records.physical_offset] == [
                    x["physicalOffset"] for x in rows[r.broker_id]
                    if seg.start <= x["physicalOffset"] < seg.start + SEG
                ]  # fmt: skip

        # Replicas that deleted different prefixes agree where both hold the log.
        # (A log that stops right after a segment's blank ends at the segment end.)
        facts = [
            ReplicaFacts(
                GROUP, r.broker_id, r.epochs, r.min_offset,
                blank_end(fs.LocalFileSystem(), r, max(
                    (x["physicalOffset"] + x["size"] for x in rows[r.broker_id]),
                    default=r.min_offset)),
                r.confirm_offset, r.recover_offset,
            )
            for r in found
        ]  # fmt: skip
        assert [f.end_offset for f in facts] == [
            FULL_SEGMENTS * SEG if late else master.end for late in behind
        ]
        ref = checks.reference_replica(facts)
        assert checks.uncommitted_tails(facts, ref) == []
        assert checks.epoch_conflicts(facts) == []
        assert [checks.short_of_checkpoint(f) for f in facts] == [None, None, None]
        spans = [checks.agreement_span(f) for f in facts]
        copies: dict[int, list[Copy]] = {}
        for b, held in rows.items():
            for x in held:
                copies.setdefault(x["physicalOffset"], []).append(
                    Copy(b, x["recordCrc"], x["size"], x["problem"])
                )
        assert [
            d for at, c in copies.items() if (d := checks.divergence(GROUP, at, c, spans))
        ] == []
        assert [f.truncated_bytes for f in checks.failovers(facts, [], {})] == [
            None for e in ref.epochs[1:]
        ]

        # Acknowledgements: expired below every replica's start, else found on its holder.
        acks = acknowledged(master.acks, [GROUP])
        below = retention.expired_below(facts)
        assert below == min(kept.values())
        gone, live = retention.split_expired(pa.Table.from_pylist(acks, schema=ACK_SCHEMA),
                                             {GROUP: below})  # fmt: skip
        assert gone.column("ackLine").to_pylist() == [
            a["ackLine"] for a in acks if a["physicalOffset"] < below
        ]
        assert retention.expired_by_group(gone).get(GROUP) == retention.expired_acks(acks, below)
        holders = retention.holders(facts, ref)
        at = {(b, x["physicalOffset"]): x for b, held in rows.items() for x in held}
        verdicts = []
        for ack in acks:
            if ack["physicalOffset"] < below:
                continue
            holder = retention.holder_of(holders, ack["physicalOffset"])
            assert holder is not None
            y = at.get((holder, ack["physicalOffset"]))
            stored = None if y is None else StoredRecord(
                y["topic"], y["queueId"], y["queueOffset"], y["keys"], y["bodyCRC"]
            )  # fmt: skip
            verdicts.append(checks.acked_missing(GROUP, holder, ack, stored))
        held_anywhere = {x for b, x in at}
        assert [v is None for v in verdicts] == [
            a["physicalOffset"] in held_anywhere for a in acks if a["physicalOffset"] >= below
        ]
        assert live.num_rows == len(verdicts)

        # What each replica deleted, from its retention.log.
        for r in found:
            kept_r = retention.replica_retention(
                GROUP, r.broker_id, r.min_offset, r.deletions, r.retention_problems
            )
            first_at = 1000 * r.broker_id
            assert (list(kept_r.deleted), kept_r.unlogged, kept_r.pending, kept_r.problems) == (
                _merged(r.min_offset // SEG, first_at),
                (),
                (),
                (),
            )


def _deletion(start: int, reason: str = "expired", at_ms: int = 7) -> Deletion:
    return Deletion(at_ms, f"{start:020d}", start, start + SEG, reason, start + SEG)


def test_retention_log_lines_that_are_not_deletions_are_named_and_skipped() -> None:
    good = '{"atMs":5,"segment":"00000000000000004096","fromOffset":4096,"toOffset":8192,"reason":"disk","newMinOffset":8192}'
    text = "\n".join(
        [
            good,
            "not json",
            good.replace('"disk"', '"tired"'),
            good.replace('"fromOffset":4096', '"fromOffset":0'),
            good.replace('"atMs":5', '"atMs":-5'),
            '["a list"]',
            good[:40],  # a crash mid-append: no newline after it
        ]
    )
    deletions, problems = retention.parse_retention_log(text, "retention.log")
    assert deletions == [Deletion(5, "00000000000000004096", 4096, 8192, "disk", 8192)]
    assert [p.split(": ", 1)[0] for p in problems] == [
        f"retention.log:{n}" for n in (2, 3, 4, 5, 6, 7)
    ]
    assert problems[1] == "retention.log:3: reason 'tired' is not one of expired, disk, forced"
    assert problems[-1] == "retention.log:7: torn last line (no newline)"


def test_a_gap_in_the_log_a_repeated_line_and_a_pending_deletion() -> None:
    # retention.log.1 rotated away the lines for [0, 8192); [8192, 12288) was logged twice
    # (a crash between the line and the unlink, deleted again after the restart); the
    # segment at 16384 was logged and is still there (a crash again).
    lines = [_deletion(8192, at_ms=10), _deletion(8192, "disk", at_ms=20), _deletion(12288, "disk"),
             _deletion(16384, at_ms=30)]  # fmt: skip
    r = retention.replica_retention(GROUP, 2, 16384, lines)
    assert r.deleted == (DeletedRange(8192, 16384, "disk", 2, 7, 20),)
    assert r.unlogged == ((0, 8192),)
    assert r.pending == (lines[3],)
    assert r.describe() == "broker 2 [8192, 16384) disk; [0, 8192) not in its retention.log"


def _facts(broker_id: int, min_offset: int, end: int) -> ReplicaFacts:
    return ReplicaFacts(GROUP, broker_id, ((1, 0),), min_offset, end, end)


def test_holders_cover_every_retained_offset_once() -> None:
    # Broker 3 is the reference from 12288 up; below it broker 1 holds [4096, 20000) and
    # broker 2 [0, 8192) (a slave that stopped early), so broker 2 answers only below 4096.
    one, two, three = _facts(1, 4096, 20000), _facts(2, 0, 8192), _facts(3, 12288, 20000)
    assert retention.expired_below([one, two, three]) == 0
    assert retention.holders([one, two, three], three) == [
        retention.Holder(2, 0, 4096),
        retention.Holder(1, 4096, 12288),
        retention.Holder(3, 12288, retention.OPEN_END),
    ]
    # Nobody holds [8192, 12288) without broker 1: it is judged on the reference.
    assert retention.holders([two, three], three) == [
        retention.Holder(2, 0, 8192),
        retention.Holder(3, 8192, retention.OPEN_END),
    ]
    # An empty replica retains nothing: it does not lower what every replica retains.
    assert retention.expired_below([_facts(1, 0, 0), three]) == 12288


def test_the_expired_finding_names_the_acks_and_what_each_replica_deleted() -> None:
    acks = [{"ackLine": n, "physicalOffset": 100 * n, "ackTimeMs": 1000 + n} for n in (4, 2, 9)]
    assert retention.expired_acks(acks, 500) == retention.ExpiredAcks(2, 2, 4, 200, 400, 1002, 1004)
    gone = retention.expired_acks(acks, 5000)
    assert gone is not None
    deleted = [
        retention.replica_retention(GROUP, 2, 8192, [_deletion(0), _deletion(4096, "forced")]),
        retention.replica_retention(GROUP, 1, 4096, []),
    ]
    assert retention.expired_finding(GROUP, 4096, gone, deleted) == Finding(
        FindingKind.EXPIRED, GROUP, None, 200,
        "3 acknowledged messages (ack lines 2..9, offsets 200..900, acknowledged 1002..1009) "
        "are below every replica's log start (4096): deleted by retention; broker 1 [0, 4096) "
        "not in its retention.log; broker 2 [0, 4096) expired; [4096, 8192) forced",
    )  # fmt: skip
    assert not FindingKind.EXPIRED.costs_data


def test_bodies_are_what_the_master_acknowledged(master: Master) -> None:
    # The fixture's own check: the ack log's CRCs are the stored bodies' (so a found
    # verdict above compares real content).
    (first,) = [a for a in master.acks if a["physicalOffset"] == 0]
    assert first["bodyCrc"] == zlib.crc32(bytes([0]) * 150)
