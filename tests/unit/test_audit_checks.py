"""The audit's pure decisions (pipeline/brokergroup_audit/checks.py), one planted
defect per finding kind, each asserting the exact finding the audit would report
(kind, group, broker, offset and detail), plus the clean case next to it.

Spark only groups records (job.py); whether a group of facts is a finding, and
what the finding says, is decided here, so these tests cover the rules without a
Spark session. tests/pipeline runs the same rules on real stores.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from brokergroup_audit import checks
from brokergroup_audit.checks import (
    AgreementSpan,
    Copy,
    Finding,
    FindingKind,
    ReplicaFacts,
    StoredRecord,
)
from brokergroup_audit.cli import absolute_paths
from brokergroup_audit.fastscan import scan_slice
from brokergroup_audit.inputs import acknowledged
from brokergroup_audit.source import CommitLogDataSource
from brokergroup_audit.stores import find_replicas
from brokergroup_broker.store.message import MessageInput
from brokergroup_broker.store.message_encode import encode_batch

G = "broker-a"
SEG = 8192


def _replica(
    broker_id: int,
    end: int,
    confirm: int | None,
    epochs: tuple[tuple[int, int], ...] = ((1, 0),),
    min_offset: int = 0,
) -> ReplicaFacts:
    return ReplicaFacts(G, broker_id, epochs, min_offset, end, confirm)


# -- DIVERGENCE ------------------------------------------------------------------


def test_a_short_replica_does_not_hide_divergence_between_the_others() -> None:
    # Brokers 1 and 2 confirmed up to 5000; broker 3 only up to 1000. At 3000 the
    # first two differ: compared per pair, broker 3 is simply not asked about 3000.
    spans = [
        checks.agreement_span(r)
        for r in (_replica(1, 6000, 5000), _replica(2, 5000, 5000), _replica(3, 1000, 1000))
    ]
    assert spans == [
        AgreementSpan(G, 1, 0, 5000),
        AgreementSpan(G, 2, 0, 5000),
        AgreementSpan(G, 3, 0, 1000),
    ]
    copies = [Copy(1, 111, 343), Copy(2, 222, 343)]
    assert checks.divergence(G, 3000, copies, spans) == Finding(
        FindingKind.DIVERGENCE, G, None, 3000,
        "2 of 2 replicas that confirmed this offset hold a record here; "
        "broker 1: 343 bytes crc 111, broker 2: 343 bytes crc 222",
    )  # fmt: skip
    # Below every replica's confirmed end, a missing copy diverges too.
    assert checks.divergence(G, 500, [Copy(1, 7, 343), Copy(3, 7, 343)], spans) == Finding(
        FindingKind.DIVERGENCE, G, None, 500,
        "2 of 3 replicas that confirmed this offset hold a record here (none on broker 2); "
        "broker 1: 343 bytes crc 7, broker 3: 343 bytes crc 7",
    )  # fmt: skip


def test_agreeing_copies_and_unconfirmed_offsets_are_not_divergence() -> None:
    spans = [
        checks.agreement_span(r)
        for r in (_replica(1, 6000, 5000), _replica(2, 5000, 4000), _replica(3, 1000, None))
    ]
    assert spans[2] == AgreementSpan(G, 3, 0, 1000)  # no checkpoint: its whole log
    assert checks.divergence(G, 3000, [Copy(1, 5, 343), Copy(2, 5, 343)], spans) is None
    # 4500: only broker 1 confirmed it; broker 2's different copy there is its own tail.
    assert checks.divergence(G, 4500, [Copy(1, 5, 343), Copy(2, 6, 343)], spans) is None
    # A copy from a replica that has not confirmed the offset does not count.
    assert (
        checks.divergence(G, 2000, [Copy(1, 5, 343), Copy(2, 5, 343), Copy(3, 9, 1)], spans) is None
    )


# -- CORRUPT_RECORD / TORN_COMMITTED / TORN_TAIL / UNCOMMITTED_TAIL ----------------


def test_a_torn_record_below_confirm_costs_data() -> None:
    found = checks.damage(G, 2, 1200, "PARTIAL", "torn last record (60 bytes) at 1200", 5000)
    assert found == Finding(
        FindingKind.TORN_COMMITTED, G, 2, 1200,
        "PARTIAL: torn last record (60 bytes) at 1200 (below confirmOffset 5000)",
    )  # fmt: skip
    assert found.kind.costs_data


def test_a_torn_record_at_or_past_confirm_is_a_crash_tail() -> None:
    found = checks.damage(G, 2, 5000, "PARTIAL", "torn last record (60 bytes) at 5000", 5000)
    assert found == Finding(
        FindingKind.TORN_TAIL, G, 2, 5000, "PARTIAL: torn last record (60 bytes) at 5000"
    )
    assert not found.kind.costs_data


def test_other_damage_costs_data_below_confirm_only() -> None:
    below = checks.damage(G, 1, 1188, "BAD_MAGIC", "343 bytes unreadable at 1188", 5000)
    assert below == Finding(
        FindingKind.CORRUPT_RECORD, G, 1, 1188, "BAD_MAGIC: 343 bytes unreadable at 1188"
    )
    above = checks.damage(G, 1, 6000, "BAD_MAGIC", "343 bytes unreadable at 6000", 5000)
    assert above == Finding(
        FindingKind.UNCOMMITTED_TAIL, G, 1, 6000, "BAD_MAGIC: 343 bytes unreadable at 6000"
    )
    # Without a checkpoint the replica confirmed every whole record it holds; nothing
    # vouches for a torn last one (issue 21 item 3: a cut record at the tail is a torn tail).
    assert checks.damage(G, 1, 6000, "BAD_MAGIC", "x", None).kind is FindingKind.CORRUPT_RECORD
    assert checks.damage(G, 1, 6000, "PARTIAL", "torn", None).kind is FindingKind.TORN_TAIL


def test_a_zeroed_tail_below_confirm_costs_data() -> None:
    # A zero-filled tail reads as no records: the valid log ends before confirmOffset.
    found = checks.short_of_checkpoint(_replica(3, 4000, 5000))
    assert found == Finding(
        FindingKind.TORN_COMMITTED, G, 3, 4000,
        "valid records end at 4000 but broker 3's checkpoint says it confirmed up to 5000: "
        "1000 bytes are zeroed or missing",
    )  # fmt: skip
    assert checks.short_of_checkpoint(_replica(3, 5000, 5000)) is None
    assert checks.short_of_checkpoint(_replica(3, 4000, None)) is None
    # Already reported as a damaged record where the valid log ends: not twice.
    assert checks.short_of_checkpoint(_replica(3, 4000, 5000), damaged_at=[4000]) is None


def test_a_log_short_of_its_own_fsynced_offset_costs_data_without_acks() -> None:
    # Issue 21 item 3: the store itself proves the loss. Confirmed only to 500 (a lone
    # master between SyncStateSet changes), but its checkpoint's recoverOffset says every
    # byte below 3000 was fsynced; the log now ends at 1000.
    r = ReplicaFacts(G, 1, ((1, 0),), 0, 1000, 500, recover_offset=3000)
    assert r.durable_end == 3000
    assert checks.short_of_checkpoint(r) == Finding(
        FindingKind.TORN_COMMITTED, G, 1, 1000,
        "valid records end at 1000 but broker 1's checkpoint says it fsynced up to 3000 "
        "(recoverOffset): 2000 bytes are zeroed or missing",
    )  # fmt: skip
    assert checks.short_of_checkpoint(ReplicaFacts(G, 1, ((1, 0),), 0, 3000, 500, 3000)) is None
    # Damage between the two marks was fsynced: it costs data.
    assert checks.damage(G, 1, 2000, "BAD_MAGIC", "x", r.durable_end).kind is (
        FindingKind.CORRUPT_RECORD
    )


def test_the_recover_offset_comes_from_the_store_checkpoint(tmp_path: Path) -> None:
    store = tmp_path / "broker-a" / "0"
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / f"{0:020d}").write_bytes(bytes(4096))
    (store / "storeCheckpoint").write_text("recoverOffset=3000\nconfirmOffset=500\n")
    (replica,) = find_replicas(tmp_path)
    assert (replica.confirm_offset, replica.recover_offset) == (500, 3000)


# -- ACKED_MISSING ---------------------------------------------------------------

ACK = {
    "ackLine": 9, "group": G, "topic": "T", "queueId": 2, "queueOffset": 41,
    "physicalOffset": 14000, "key": "p0-41", "bodyCrc": 0x9ABCDEF0, "ackTimeMs": 1700,
    "masterEpoch": 3,
}  # fmt: skip


def test_an_acknowledged_record_at_its_offset_is_found() -> None:
    # The ack carries the full CRC32, the record RocketMQ's 31-bit one.
    assert checks.acked_missing(G, 1, ACK, StoredRecord("T", 2, 41, "p0-41", 0x1ABCDEF0)) is None


def test_an_acknowledged_record_missing_is_reported() -> None:
    assert checks.acked_missing(G, 1, ACK, None) == Finding(
        FindingKind.ACKED_MISSING, G, 1, 14000,
        "ack line 9: T/2 queue offset 41 key p0-41 acknowledged at 1700: no record at that offset",
    )  # fmt: skip


# A RocketMQ delay message: acknowledged as FixtureC/1 but parked in SCHEDULE_TOPIC_XXXX
# queue 1 (delay level 2) at that queue's offset 7, with REAL_TOPIC/REAL_QID.
DELAY_ACK = {
    "ackLine": 4, "group": G, "topic": "FixtureC", "queueId": 1, "queueOffset": 7,
    "physicalOffset": 14000, "key": "k-3", "bodyCrc": 0x9ABCDEF0, "ackTimeMs": 1700,
    "masterEpoch": None, "msgId": "7F000001000018B4AAC2",
}  # fmt: skip


def test_a_delay_message_is_found_through_its_real_topic_and_queue() -> None:
    parked = StoredRecord(
        "SCHEDULE_TOPIC_XXXX", 1, 7, "k-3", 0x1ABCDEF0,
        real_topic="FixtureC", real_queue_id=1, uniq_key="7F000001000018B4AAC2",
    )  # fmt: skip
    assert checks.acked_missing(G, 1, DELAY_ACK, parked) is None
    # Parked for another queue, or another client message id: not this acknowledgement.
    for other in (
        replace(parked, real_queue_id=2),
        replace(parked, real_topic=None, real_queue_id=None),
        replace(parked, uniq_key="7F000001000018B4AAC3"),
    ):
        assert checks.acked_missing(G, 1, DELAY_ACK, other) is not None


def test_a_rocketmq_ack_line_locates_its_record_by_offset_msg_id() -> None:
    # The stock client's SendResult: offsetMsgId = store host (4 + 4 bytes) + commit log
    # offset (8 bytes), hex; a batch joins its members' ids with commas (one line each).
    line = {
        "topic": "FixtureC", "queueId": 1, "queueOffset": 7, "key": "k-3", "bodyCrc": 1,
        "msgId": "7F000001000018B4AAC2", "offsetMsgId": "7F0000020000559F00000000000A1B2C",
    }  # fmt: skip
    (ack,) = acknowledged([line], [G])
    assert (ack["physicalOffset"], ack["msgId"]) == (0xA1B2C, "7F000001000018B4AAC2")
    v6 = "00000000000000000000000000000001" + "0000559F" + "00000000000A1B2C"
    assert acknowledged([{**line, "offsetMsgId": v6}], [G])[0]["physicalOffset"] == 0xA1B2C
    with pytest.raises(ValueError, match="offsetMsgId"):
        acknowledged([{**line, "offsetMsgId": "7F00,zz"}], [G])


def test_another_record_at_an_acknowledged_offset_is_reported() -> None:
    other = StoredRecord("T", 2, 41, "p0-41", 0x12345678)  # same place, other body
    assert checks.acked_missing(G, 1, ACK, other) == Finding(
        FindingKind.ACKED_MISSING, G, 1, 14000,
        "ack line 9: T/2 queue offset 41 key p0-41 acknowledged at 1700: a different record "
        f"is there (T/2 queue offset 41, key p0-41, crc {0x12345678})",
    )  # fmt: skip
    moved = StoredRecord("T", 2, 42, "p0-41", 0x1ABCDEF0)
    assert checks.acked_missing(G, 1, ACK, moved) is not None


# -- DUPLICATE / DUPLICATE_QUEUE_OFFSET ------------------------------------------


def test_a_key_stored_twice_is_a_duplicate() -> None:
    found = checks.duplicate(G, 2, "T", "p1-33", [40564, 40221])
    assert found == Finding(
        FindingKind.DUPLICATE, G, 2, 40221, "topic T key p1-33 stored 2 times at [40221, 40564]"
    )
    assert not found.kind.costs_data
    assert checks.duplicate(G, 2, "T", "p1-33", [40221]) is None


def test_two_records_on_one_queue_slot_cost_data() -> None:
    found = checks.duplicate_queue_offset(G, 2, "T", 2, 417, [143703, 143360])
    assert found == Finding(
        FindingKind.DUPLICATE_QUEUE_OFFSET, G, 2, 143360,
        "T/2 queue offset 417 used by 2 records at [143360, 143703]",
    )  # fmt: skip
    assert found.kind.costs_data
    assert checks.duplicate_queue_offset(G, 2, "T", 2, 417, [143360]) is None


# -- EPOCH_CONFLICT / UNCOMMITTED_TAIL (lineage) ----------------------------------


def test_one_epoch_with_two_start_offsets_is_a_conflict() -> None:
    replicas = [
        _replica(1, 9000, 9000, ((1, 0), (3, 3070000))),
        _replica(2, 9000, 9000, ((1, 0), (3, 3071774))),
    ]
    assert checks.epoch_conflicts(replicas) == [
        Finding(
            FindingKind.EPOCH_CONFLICT, G, 2, 3071774,
            "epoch 3 starts at 3071774 on broker 2 but at 3070000 on broker 1",
        )
    ]  # fmt: skip


def test_an_older_epochs_tail_past_the_reference_lineage_is_uncommitted() -> None:
    ref = _replica(2, 8000, 8000, ((1, 0), (2, 5000)))
    old = _replica(1, 6000, 5000, ((1, 0),))
    assert checks.reference_replica([old, ref]) is ref
    assert checks.uncommitted_tails([old, ref], ref) == [
        Finding(
            FindingKind.UNCOMMITTED_TAIL, G, 1, 5000,
            "1000 bytes past 5000 belong to an older epoch than the reference broker 2's; "
            "they will be truncated",
        )
    ]  # fmt: skip


def test_a_log_ending_where_the_next_epoch_starts_truncated_nothing() -> None:
    # Issue 21 item 3: the killed master (broker 1, still at epoch 1) ends exactly where
    # epoch 2 starts: the failover truncated 0 bytes, not "unknown".
    ref = _replica(2, 8000, 8000, ((1, 0), (2, 5000)))
    old = _replica(1, 5000, 5000, ((1, 0),))
    (f,) = checks.failovers([old, ref], [], {})
    assert (f.epoch, f.start_offset, f.truncated_bytes) == (2, 5000, 0)
    assert f.truncated_source == "broker 1's log still holds them"
    # A replica of the new lineage says nothing about the old tail: unknown.
    (f,) = checks.failovers([_replica(1, 8000, 8000, ((1, 0), (2, 5000))), ref], [], {})
    assert f.truncated_bytes is None


def test_a_record_cut_mid_way_at_the_tail_is_a_torn_tail() -> None:
    # A preallocated (zero-filled) segment: the last record's totalSize is intact but its
    # second half never reached the disk, so its lengths no longer add up.
    batch = [MessageInput("T", 0, bytes([i]) * 300, {"KEYS": f"k{i}"}) for i in range(4)]
    encoded = encode_batch(
        batch, start_offset=0, segment_bytes=SEG, store_host=("127.0.0.1", 10911),
        store_timestamp_ms=77, queue_offset_of=lambda _k: 0, max_message_bytes=SEG - 8,
    )  # fmt: skip
    data = bytearray(encoded.data) + bytes(SEG - len(encoded.data))
    last = 3 * (len(encoded.data) // 4)
    data[last + 100 : len(encoded.data)] = bytes(len(encoded.data) - last - 100)
    scan = scan_slice(bytes(data), 0, SEG, 0, SEG, first_is_boundary=True, max_record_bytes=SEG)
    assert len(scan.records) == 3
    assert [(p.offset, p.stop.name) for p in scan.problems] == [(last, "PARTIAL")]
    # The same damage followed by another record is no tail: a damaged structure.
    after = encode_batch(
        batch[:1], start_offset=len(encoded.data), segment_bytes=SEG,
        store_host=("127.0.0.1", 10911), store_timestamp_ms=77,
        queue_offset_of=lambda _k: 0, max_message_bytes=SEG - 8,
    ).data  # fmt: skip
    data[len(encoded.data) : len(encoded.data) + len(after)] = after
    scan = scan_slice(bytes(data), 0, SEG, 0, SEG, first_is_boundary=True, max_record_bytes=SEG)
    assert [(p.offset, p.stop.name) for p in scan.problems] == [(last, "BAD_STRUCTURE")]


def test_the_exit_code_follows_data_costing_findings() -> None:
    tail = checks.damage(G, 1, 6000, "PARTIAL", "torn", 5000)
    torn = checks.damage(G, 1, 100, "PARTIAL", "torn", 5000)
    assert checks.exit_code([tail]) == 0
    assert checks.exit_code([tail, torn]) == 1


# -- Paths leave the driver absolute ---------------------------------------------


def test_relative_paths_are_made_absolute_on_the_driver(tmp_path: Path) -> None:
    args = argparse.Namespace(
        store_root="stores", acks="run/acks.jsonl", events=None, out="audit-out",
        master="spark://h:7077", split_mib=64, quiet=True,
    )  # fmt: skip
    resolved = absolute_paths(args, tmp_path)
    assert (resolved.store_root, resolved.acks, resolved.events, resolved.out) == (
        str(tmp_path / "stores"), str(tmp_path / "run/acks.jsonl"), None,
        str(tmp_path / "audit-out"),
    )  # fmt: skip
    assert (resolved.master, resolved.split_mib) == ("spark://h:7077", 64)
    assert args.store_root == "stores"  # the caller's namespace is left alone
    assert absolute_paths(resolved, Path("/elsewhere")).store_root == str(tmp_path / "stores")


def test_the_commitlog_source_refuses_a_relative_root() -> None:
    with pytest.raises(ValueError, match="must be absolute"):
        CommitLogDataSource({"path": "stores"}).reader(None)


# -- Retention: a replica that deleted its log's prefix (issue 33 item 2) --------------


def test_a_replica_whose_retention_dropped_old_epochs_has_no_uncommitted_tail() -> None:
    # Broker 2 deleted [0, 8192) and with it epoch 1's entry (RocketMQ's
    # truncatePrefixByOffset drops entries that end at or below the new minimum): it holds
    # nothing of epoch 1, so it differs from the reference nowhere.
    ref = _replica(1, 9000, 9000, ((1, 0), (2, 5000)))
    trimmed = _replica(2, 9000, 9000, ((2, 5000),), min_offset=8192)
    assert checks.uncommitted_tails([ref, trimmed], ref) == []
    # An older epoch's tail past the reference's epoch start still counts, from where the
    # replica's log starts.
    stale = _replica(3, 6000, 5000, ((1, 0),), min_offset=4096)
    assert checks.uncommitted_tails([ref, stale], ref) == [
        Finding(
            FindingKind.UNCOMMITTED_TAIL, G, 3, 5000,
            "1000 bytes past 5000 belong to an older epoch than the reference broker 1's; "
            "they will be truncated",
        )
    ]  # fmt: skip


def test_a_replica_that_deleted_a_failovers_offset_says_nothing_about_its_tail() -> None:
    ref = _replica(1, 20000, 20000, ((1, 0), (2, 5000), (3, 12000)))
    trimmed = _replica(2, 20000, 20000, ((3, 12000),), min_offset=16384)
    failed_over = checks.failovers([ref, trimmed], [], {})
    assert [(f.epoch, f.start_offset, f.truncated_bytes) for f in failed_over] == [
        (2, 5000, None),
        (3, 12000, None),
    ]
