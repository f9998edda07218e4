"""`record_columns.scan_columns`, the audit's vectorised reader of the v1 layout, against
the record-by-record `scan_records` / `decode_record` of message.py (STYLE.md §2: clever
code checked against the naive reference on random inputs).

- random batches (IPv4/IPv6 born hosts, properties with KEYS, blanks at segment ends):
  the same records, fields and CRCs, however the segment is cut into slices;
- a zero-filled tail and a torn last record are clean ends, not problems that cost data;
- a flipped body byte is one BAD_CRC record, a flipped magic byte one unreadable region,
  and the reader resynchronises at the next record in both cases.
"""

from __future__ import annotations

import zlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.store.message import MessageInput
from brokergroup_broker.store.message_encode import encode_batch
from brokergroup_broker.store.message_scan import ScanStop, decode_record, scan_records
from brokergroup_broker.store.record_columns import gather, scan_columns

SEG = 4096
STORE = ("10.0.0.1", 10911)


def _log(bodies: list[bytes], v6: list[bool]) -> bytes:
    batch = [
        MessageInput(
            f"T{i % 3}", i % 4, b, {"KEYS": f"k{i}"} if i % 2 else {},
            born_host=("::1", 5) if v6[i % len(v6)] else ("127.0.0.1", 5),
        )
        for i, b in enumerate(bodies)
    ]  # fmt: skip
    encoded = encode_batch(
        batch, start_offset=0, segment_bytes=SEG, store_host=STORE, store_timestamp_ms=77,
        queue_offset_of=lambda _k: 0, max_message_bytes=SEG - 8,
    )  # fmt: skip
    return bytes(encoded.data)


def _scan_all(data: bytes, split: int) -> tuple[list[tuple[int, ...]], list[tuple[int, str]]]:
    """Every segment of `data`, cut into slices of `split` bytes, scanned slice by slice."""
    rows: list[tuple[int, ...]] = []
    problems: list[tuple[int, str]] = []
    for seg_start in range(0, len(data), SEG):
        seg = data[seg_start : seg_start + SEG]
        for own in range(0, len(seg), split):
            scan = scan_columns(
                seg, seg_start, seg_start + SEG, seg_start + own,
                seg_start + min(len(seg), own + split),
                first_is_boundary=own == 0, max_record_bytes=SEG,
            )  # fmt: skip
            r = scan.records
            a = np.frombuffer(seg, np.uint8)
            tdata, toff = gather(a, r.topic_at, r.topic_len)
            for k in range(len(r)):
                rows.append(
                    (int(r.physical_offset[k]), int(r.size[k]), int(r.queue_id[k]),
                     int(r.queue_offset[k]), int(r.body_crc[k]), int(r.store_timestamp_ms[k]),
                     int(r.crc_ok[k]), bytes(tdata[toff[k] : toff[k + 1]]).__hash__())
                )  # fmt: skip
            problems += [(p.offset, p.stop.name) for p in scan.problems]
    return sorted(rows), sorted(problems)


def _reference(data: bytes) -> list[tuple[int, ...]]:
    result = scan_records(data, 0, SEG)
    assert result.stop is ScanStop.END
    out = []
    for rec in result.records:
        m = decode_record(data, rec.physical_offset)
        out.append(
            (m.physical_offset, m.size, m.queue_id, m.queue_offset, zlib.crc32(m.body),
             m.store_timestamp_ms, 1, m.topic.encode().__hash__())
        )  # fmt: skip
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(min_size=0, max_size=900), min_size=1, max_size=40),
    st.lists(st.booleans(), min_size=1, max_size=3),
    st.sampled_from([SEG, 1000, 97]),
)
def test_same_records_as_the_record_by_record_scanner(
    bodies: list[bytes], v6: list[bool], split: int
) -> None:
    data = _log(bodies, v6)
    rows, problems = _scan_all(data, split)
    assert problems == []
    assert rows == _reference(data)


def test_zero_tail_and_torn_last_record_are_clean_ends() -> None:
    data = _log([b"x" * 100] * 5, [False])
    whole = _reference(data)
    rows, problems = _scan_all(data + bytes(1000), 300)  # preallocated zeros
    assert rows == whole and problems == []
    torn = data + data[:60]  # the next record's first 60 bytes (phys field differs: torn)
    rows, problems = _scan_all(torn, SEG)
    assert rows == whole
    assert [p[1] for p in problems] == ["PARTIAL"]


def test_flipped_bytes_cost_one_record_each() -> None:
    data = bytearray(_log([bytes([i]) * 200 for i in range(8)], [False]))
    ref = _reference(bytes(data))
    second, fifth = ref[1][0], ref[4][0]
    data[second + 100] ^= 0x01  # a body byte: the record stays, its CRC fails
    data[fifth + 5] ^= 0x01  # a magic byte: the record is unreadable
    rows, problems = _scan_all(bytes(data), 500)
    assert [r[0] for r in rows] == [r[0] for r in ref if r[0] != fifth]
    assert [r[6] for r in rows if r[0] == second] == [0]
    assert problems == [(fifth, "BAD_MAGIC")]
