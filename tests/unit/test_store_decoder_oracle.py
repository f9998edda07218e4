"""The store's one v1 decoder against an independent oracle (tests/unit/v1_oracle.py,
issue 18 item 3; STYLE.md §2: clever code checked against a naive reference).

Random logs (IPv4/IPv6 hosts, properties with TAGS and KEYS, several segments with
their blank records) are damaged at random (a cut tail, flipped bytes, a zeroed
range) and read through every entry point of the decoder:

- `scan_records` (recovery, the slave's dispatch, truncation): the same records in
  the same order, the same end offset, and damage told from a clean end;
- `decode_record` (pulls): every field of every valid record;
- `scan_slice` / `scan_columns` (the audit) on the undamaged log: the same records,
  queue offsets and CRCs, whatever the slice size.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.store.message import MessageInput
from brokergroup_broker.store.message_encode import encode_batch
from brokergroup_broker.store.message_scan import decode_record, scan_records
from brokergroup_broker.store.record_columns import gather, scan_columns
from brokergroup_broker.store.record_walk import scan_slice
from tests.unit import v1_oracle

HOSTS = [("10.0.0.1", 1234), ("::1", 99), ("127.0.40.10", 10911), ("fe80::2", 7)]
PROPS = [{}, {}, {"TAGS": "a"}, {"KEYS": "k1 k2"}, {"TAGS": "ünï", "KEYS": "x"}]


def _log(rng: random.Random, base: int, segment_bytes: int) -> bytes:
    inputs = [
        MessageInput(
            rng.choice(["T", "orders", "%RETRY%g"]),
            rng.randrange(4),
            rng.randbytes(rng.randrange(0, 300)),
            rng.choice(PROPS),
            rng.randrange(3),
            rng.randrange(1 << 40),
            rng.choice(HOSTS),
        )
        for _ in range(rng.randrange(1, 25))
    ]
    encoded = encode_batch(
        inputs,
        start_offset=base,
        segment_bytes=segment_bytes,
        store_host=rng.choice(HOSTS),
        store_timestamp_ms=rng.randrange(1 << 40),
        queue_offset_of=lambda _k: rng.randrange(1000),
        max_message_bytes=segment_bytes - 8,
    )
    return bytes(encoded.data)


def _damage(rng: random.Random, data: bytes, kind: int) -> bytes:
    out = bytearray(data)
    if not out:
        return bytes(out)
    if kind == 1:
        del out[rng.randrange(len(out)) :]
    elif kind == 2:
        for _ in range(rng.randrange(1, 4)):
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 3:
        at = rng.randrange(len(out))
        end = min(len(out), at + rng.randrange(1, 64))
        out[at:end] = bytes(end - at)
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 1 << 30),
    segment_bytes=st.sampled_from([1024, 4096, 1 << 20]),
    damage=st.integers(0, 3),
)
def test_scan_records_and_decode_record_agree_with_the_oracle(
    seed: int, segment_bytes: int, damage: int
) -> None:
    rng = random.Random(seed)
    base = rng.randrange(4) * segment_bytes + rng.choice([0, 0, 64])
    data = _damage(rng, _log(rng, base, segment_bytes), damage)
    limit = segment_bytes - 8
    expected = v1_oracle.scan(data, base, segment_bytes, limit)
    got = scan_records(data, base, segment_bytes, verify_crc=True, max_record_bytes=limit)
    assert [
        (r.topic, r.queue_id, r.queue_offset, r.physical_offset, r.size, r.tags_code)
        for r in got.records
    ] == [
        (r.topic, r.queue_id, r.queue_offset, r.physical_offset, r.size, r.tags_code)
        for r in expected.records
    ]
    assert got.end == expected.end
    assert (not got.stop.is_corrupt) == expected.clean, (got.stop, got.detail)
    for r in expected.records:
        m = decode_record(data, r.physical_offset - base)
        assert (
            m.topic, m.queue_id, m.queue_offset, m.physical_offset, m.size, m.body,
            m.properties, m.flag, m.sys_flag, m.born_timestamp_ms, m.store_timestamp_ms,
            m.born_host, m.store_host, m.reconsume_times, m.prepared_transaction_offset,
            m.body_crc,
        ) == (
            r.topic, r.queue_id, r.queue_offset, r.physical_offset, r.size, r.body,
            r.properties, r.flag, r.sys_flag, r.born_timestamp_ms, r.store_timestamp_ms,
            r.born_host, r.store_host, r.reconsume_times, r.prepared_transaction_offset,
            r.body_crc,
        )  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 1 << 30), split=st.sampled_from([97, 1000, 4096]))
def test_the_audit_reads_what_the_oracle_reads(seed: int, split: int) -> None:
    rng = random.Random(seed)
    segment_bytes = 4096
    data = _log(rng, 0, segment_bytes)
    expected = v1_oracle.scan(data, 0, segment_bytes, segment_bytes - 8)
    assert expected.clean
    rows = []
    for seg_start in range(0, len(data), segment_bytes):
        seg = data[seg_start : seg_start + segment_bytes]
        for own in range(0, len(seg), split):
            scan = scan_slice(
                seg, seg_start, seg_start + segment_bytes, seg_start + own,
                seg_start + min(len(seg), own + split),
                first_is_boundary=own == 0, max_record_bytes=segment_bytes - 8,
            )  # fmt: skip
            assert scan.problems == []
            r = scan.records
            topics, at = gather(np.frombuffer(seg, np.uint8), r.topic_at, r.topic_len)
            for k in range(len(r)):
                rows.append(
                    (int(r.physical_offset[k]), int(r.size[k]), int(r.queue_id[k]),
                     int(r.queue_offset[k]), int(r.stored_crc[k]), bool(r.crc_ok[k]),
                     int(r.store_timestamp_ms[k]), bytes(topics[at[k] : at[k + 1]]).decode())
                )  # fmt: skip
    assert sorted(rows) == [
        (r.physical_offset, r.size, r.queue_id, r.queue_offset, r.body_crc, True,
         r.store_timestamp_ms, r.topic)
        for r in expected.records
    ]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 1 << 30), damage=st.integers(0, 3))
def test_both_executors_of_the_rules_accept_the_same_prefix_of_a_damaged_log(
    seed: int, damage: int
) -> None:
    """record_layout's rules run record by record in the store (`scan_records`) and as
    columns in the audit (`scan_columns`): up to where the store stops, both read the
    same records; past it the audit resynchronises, which the store never does."""
    rng = random.Random(seed)
    segment_bytes = 1 << 20
    data = _damage(rng, _log(rng, 0, segment_bytes), damage)
    store = scan_records(data, 0, segment_bytes, verify_crc=True, max_record_bytes=4096)
    audit = scan_columns(data, 0, segment_bytes, 0, len(data), first_is_boundary=True,
                         max_record_bytes=4096)  # fmt: skip
    r = audit.records
    before = [
        (int(r.physical_offset[k]), int(r.size[k]), int(r.queue_id[k]), int(r.queue_offset[k]))
        for k in range(len(r))
        if r.physical_offset[k] < store.end
    ]
    assert before == [
        (x.physical_offset, x.size, x.queue_id, x.queue_offset) for x in store.records
    ]
    assert all(r.crc_ok[k] for k in range(len(r)) if r.physical_offset[k] < store.end)
