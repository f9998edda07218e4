"""The produce hot path's fast codecs are equivalent to the reference ones.

- `encode_run` (store) lays a batch out byte for byte like `encode_batch` on the
  equivalent `MessageInput`s, blank records and offsets included, and rejects
  the same batches.
- `decode_send_batch` (protocol) accepts exactly the frames `decode_request`
  accepts and yields the same messages; `SendRunResult` encodes to the same
  bytes as the equivalent `SendResult`.
- `scan_records`' inline fast path gives the same result (records, end, stop,
  detail) as the per-record reference walk over `_check_record`, on valid logs,
  their prefixes and randomly corrupted copies.
- `MessageStore.put_run` leaves the same log and consume queues as `put_messages`.
- Drop-behind (`page_cache_window_bytes`) never changes what is read back.
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from brokergroup_broker.protocol.codec import (
    Frame,
    ProtocolError,
    decode_request,
    decode_send_batch,
    encode_request,
)
from brokergroup_broker.protocol.messages import (
    ProduceMessage,
    RequestCode,
    SendMessagesRequest,
    SendResult,
    SendRunResult,
    SentMessage,
)
from brokergroup_broker.protocol.response_codec import encode_response
from brokergroup_broker.store import MessageStore, StoreConfig
from brokergroup_broker.store.errors import MessageInvalid
from brokergroup_broker.store.message import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_BYTES,
    PROPERTY_TAGS,
    STOREHOSTADDRESS_V6_FLAG,
    MessageInput,
    RecordIndex,
    decode_properties,
    message_length,
    tags_code,
)
from brokergroup_broker.store.message_encode import encode_batch, encode_run
from brokergroup_broker.store.message_scan import ScanResult, ScanStop, scan_records
from brokergroup_broker.topics import MAX_TOPIC_BYTES

STORE_V4 = ("192.168.1.7", 10911)
HOSTS = [("10.0.0.1", 1234), ("::1", 99), ("127.0.40.10", 10911)]

_text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]))
_props = st.dictionaries(_text.filter(bool), _text.filter(bool), max_size=3)
_maybe_props = st.one_of(st.none(), _props, st.fixed_dictionaries({"TAGS": _text.filter(bool)}))


# ------------------------------------------------------------------ encode_run


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=12),
    props=st.one_of(st.none(), st.lists(_maybe_props, min_size=12, max_size=12)),
    topic=st.sampled_from(["T", "orders", "BenchProduce", "t" * 127]),
    queue_id=st.integers(0, 7),
    flag=st.integers(-5, 5),
    born_host=st.sampled_from(HOSTS),
    store_host=st.sampled_from(HOSTS),
    segment_bytes=st.sampled_from([1024, 4096, 1 << 30]),
    start=st.integers(0, 5000),
    first_qo=st.integers(0, 1000),
)
def test_encode_run_matches_encode_batch(
    bodies: list[bytes],
    props: list[dict[str, str] | None] | None,
    topic: str,
    queue_id: int,
    flag: int,
    born_host: tuple[str, int],
    store_host: tuple[str, int],
    segment_bytes: int,
    start: int,
    first_qo: int,
) -> None:
    # A log ends only where its segment has no room left or room for a blank record.
    left = segment_bytes - start % segment_bytes
    assume(left == segment_bytes or left >= END_FILE_MIN_BLANK_LENGTH)
    per_msg = props[: len(bodies)] if props is not None else None
    inputs = [
        MessageInput(
            topic,
            queue_id,
            body,
            dict(per_msg[i] or {}) if per_msg is not None else {},
            flag,
            777,
            born_host,
        )
        for i, body in enumerate(bodies)
    ]
    max_bytes = 600
    kwargs = {
        "start_offset": start,
        "segment_bytes": segment_bytes,
        "store_host": store_host,
        "store_timestamp_ms": 1234,
        "max_message_bytes": max_bytes,
    }
    try:
        ref = encode_batch(inputs, queue_offset_of=lambda _k: first_qo, **kwargs)  # type: ignore[arg-type]
    except MessageInvalid:
        with pytest.raises(MessageInvalid):
            encode_run(
                topic, queue_id, bodies, per_msg, flag=flag, born_timestamp_ms=777,
                born_host=born_host, first_queue_offset=first_qo, **kwargs,  # type: ignore[arg-type]
            )  # fmt: skip
        return
    run = encode_run(
        topic, queue_id, bodies, per_msg, flag=flag, born_timestamp_ms=777,
        born_host=born_host, first_queue_offset=first_qo, **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip
    assert run.data == bytes(ref.data)
    assert run.physical_offsets == [m.physical_offset for m in ref.messages]
    assert run.sizes == [m.size for m in ref.messages]
    assert [first_qo + i for i in range(len(bodies))] == [m.queue_offset for m in ref.messages]
    codes = run.tags_codes if run.tags_codes is not None else [0] * len(bodies)
    assert codes == [r.tags_code for r in ref.index]


def test_encode_run_rejects_like_encode_batch() -> None:
    common = {
        "flag": 0, "born_timestamp_ms": 1, "born_host": STORE_V4, "start_offset": 0,
        "segment_bytes": 1 << 20, "store_host": STORE_V4, "store_timestamp_ms": 1,
        "first_queue_offset": 0, "max_message_bytes": 1 << 16,
    }  # fmt: skip
    with pytest.raises(MessageInvalid):
        encode_run("", 0, [b"x"], None, **common)  # type: ignore[arg-type]
    with pytest.raises(MessageInvalid):
        encode_run("T", -1, [b"x"], None, **common)  # type: ignore[arg-type]
    with pytest.raises(MessageInvalid):
        encode_run("T", 0, [b"x"], [{"a\x01": "b"}], **common)  # type: ignore[arg-type]
    with pytest.raises(MessageInvalid):
        encode_run("T", 0, [b"x" * (1 << 16)], None, **common)  # type: ignore[arg-type]


# ------------------------------------------------------------------ protocol


_produce = st.builds(
    ProduceMessage,
    st.just("T"),
    st.binary(max_size=64),
    st.one_of(st.none(), _text),
    st.one_of(st.none(), _text),
    st.one_of(st.just({}), st.dictionaries(_text, _text, max_size=3)),
)


@settings(max_examples=200, deadline=None)
@given(
    msgs=st.lists(_produce, min_size=1, max_size=10),
    queue_id=st.one_of(st.none(), st.integers(0, 100)),
    mutate=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_decode_send_batch_matches_decode_request(
    msgs: list[ProduceMessage],
    queue_id: int | None,
    mutate: list[tuple[int, int]],
    cut: int | None,
) -> None:
    frame_bytes = encode_request(7, SendMessagesRequest("T", queue_id, tuple(msgs)))
    body = bytearray(frame_bytes[12:])
    for at, value in mutate:
        body[at % len(body)] = value
    if cut is not None:
        body = body[: cut % (len(body) + 1)]
    frame = Frame(7, RequestCode.SEND_MESSAGES, 0, bytes(body))
    try:
        ref = decode_request(frame)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            decode_send_batch(frame)
        return
    batch = decode_send_batch(frame)
    assert isinstance(ref, SendMessagesRequest)
    assert (batch.topic, batch.queue_id) == (ref.topic, ref.queue_id)
    assert batch.messages() == tuple(
        ProduceMessage(m.topic, m.body, m.key, m.tags, dict(m.properties)) for m in ref.messages
    )
    if not mutate and cut is None:
        assert batch.messages() == tuple(msgs)
    expected_props = [
        m.store_properties() if (m.key is not None or m.tags is not None or m.properties) else None
        for m in ref.messages
    ]
    got = batch.store_properties()
    assert (got if got is not None else [None] * len(ref.messages)) == [
        p or None for p in expected_props
    ]


@given(
    queue_id=st.integers(0, 1000),
    first=st.integers(0, 1 << 40),
    phys=st.lists(st.integers(0, 1 << 50), max_size=20),
    epoch=st.integers(0, 1 << 20),
)
def test_send_run_result_encodes_like_send_result(
    queue_id: int, first: int, phys: list[int], epoch: int
) -> None:
    run = SendRunResult(queue_id, first, phys, epoch)
    ref = SendResult(tuple(SentMessage(queue_id, first + i, p) for i, p in enumerate(phys)), epoch)
    assert encode_response(3, run) == encode_response(3, ref)
    assert run.to_send_result() == ref


# ------------------------------------------------------------------ scan_records


def _check_record(
    buf: bytes, pos: int, total: int, phys: int, verify_crc: bool
) -> RecordIndex | tuple[ScanStop, str]:
    """The store's per-record check before the one decoder (issue 18 item 3), kept here as
    the reference: structure, position and CRC of one complete message record."""
    (_, _, crc, queue_id, _, queue_offset, phys_field, sys_flag, _) = struct.unpack_from(
        ">iiiiiqqiq", buf, pos
    )
    if phys_field != phys:
        return ScanStop.BAD_PHYSICAL_OFFSET, f"record at {phys} says physicalOffset {phys_field}"
    p = pos + 48 + (20 if sys_flag & BORNHOST_V6_FLAG else 8) + 8
    p += (20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8) + 16
    end = pos + total
    (body_len,) = struct.unpack_from(">i", buf, p - 4)
    if body_len < 0 or p + body_len + 3 > end:
        return ScanStop.BAD_STRUCTURE, f"bodyLength {body_len} at {phys} overruns totalSize {total}"
    body_at = p
    p += body_len
    topic_len = buf[p]
    if topic_len == 0 or topic_len > MAX_TOPIC_BYTES or p + 1 + topic_len + 2 > end:
        return ScanStop.BAD_STRUCTURE, f"topicLength {topic_len} at {phys}"
    topic_at = p + 1
    p = topic_at + topic_len
    (props_len,) = struct.unpack_from(">h", buf, p)
    if props_len < 0 or message_length(sys_flag, body_len, topic_len, props_len) != total:
        return ScanStop.BAD_STRUCTURE, "lengths"
    if verify_crc:
        actual = zlib.crc32(buf[body_at : body_at + body_len]) & 0x7FFFFFFF
        if actual != crc:
            return ScanStop.BAD_CRC, f"record at {phys}: bodyCRC {crc}, computed {actual}"
    try:
        topic = buf[topic_at : topic_at + topic_len].decode()
    except UnicodeDecodeError:
        return ScanStop.BAD_STRUCTURE, f"record at {phys}: topic is not UTF-8"
    tcode = 0
    if props_len > 0:
        props = buf[p + 2 : p + 2 + props_len]
        if b"TAGS\x01" in props:
            tcode = tags_code(decode_properties(props).get(PROPERTY_TAGS))
    return RecordIndex(topic, queue_id, queue_offset, phys, total, tcode)


def _reference_scan(
    buf: bytes, base_offset: int, segment_bytes: int, verify_crc: bool, max_record_bytes: int | None
) -> ScanResult:
    """scan_records before its fast path: every record through _check_record."""
    n = len(buf)
    pos = 0
    size_limit = max_record_bytes if max_record_bytes is not None else segment_bytes
    records: list[RecordIndex] = []
    while True:
        if pos == n:
            return ScanResult(base_offset + pos, records, ScanStop.END, "")
        phys = base_offset + pos
        space = segment_bytes - phys % segment_bytes
        if n - pos < 8:
            stop = ScanStop.ZEROS if not any(buf[pos:n]) else ScanStop.PARTIAL
            return ScanResult(phys, records, stop, f"{n - pos} header bytes at {phys}")
        total, magic = struct.unpack_from(">ii", buf, pos)
        if magic == BLANK_MAGIC_CODE:
            if total != space:
                return ScanResult(
                    phys, records, ScanStop.BAD_BLANK,
                    f"blank at {phys} claims {total} bytes, segment has {space} left",
                )  # fmt: skip
            if n - pos < total:
                return ScanResult(phys, records, ScanStop.PARTIAL, f"blank at {phys}")
            pos += total
            continue
        if magic != MESSAGE_MAGIC_CODE:
            if total == 0 and magic == 0:
                return ScanResult(phys, records, ScanStop.ZEROS, f"zeros at {phys}")
            return ScanResult(
                phys, records, ScanStop.BAD_MAGIC, f"magic {magic & 0xFFFFFFFF:#010x} at {phys}"
            )
        if (
            total < MIN_RECORD_BYTES
            or total + END_FILE_MIN_BLANK_LENGTH > space
            or total > size_limit
        ):
            return ScanResult(
                phys, records, ScanStop.BAD_SIZE,
                f"totalSize {total} at {phys} with {space} bytes left in the segment",
            )  # fmt: skip
        if n - pos < total:
            return ScanResult(
                phys, records, ScanStop.PARTIAL, f"{n - pos} of {total} bytes at {phys}"
            )
        record = _check_record(buf, pos, total, phys, verify_crc)
        if not isinstance(record, RecordIndex):
            stop, detail = record
            return ScanResult(phys, records, stop, detail)
        records.append(record)
        pos += total


def _log(rng: random.Random, base: int, segment_bytes: int) -> bytes:
    inputs = [
        MessageInput(
            rng.choice(["T", "orders"]),
            rng.randrange(3),
            rng.randbytes(rng.randrange(0, 200)),
            rng.choice([{}, {}, {"TAGS": "a"}, {"KEYS": "k1"}]),
            0,
            5,
            rng.choice(HOSTS),
        )
        for _ in range(rng.randrange(1, 15))
    ]
    return bytes(
        encode_batch(
            inputs,
            start_offset=base,
            segment_bytes=segment_bytes,
            store_host=rng.choice(HOSTS),
            store_timestamp_ms=9,
            queue_offset_of=lambda _k: 0,
            max_message_bytes=segment_bytes - 8,
        ).data
    )


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 1 << 30),
    segment_bytes=st.sampled_from([512, 2048, 1 << 20]),
    mutations=st.integers(0, 3),
    verify=st.booleans(),
)
def test_scan_fast_path_matches_reference(
    seed: int, segment_bytes: int, mutations: int, verify: bool
) -> None:
    rng = random.Random(seed)
    base = rng.randrange(0, 4) * segment_bytes + rng.choice([0, 0, 100])
    data = bytearray(_log(rng, base, segment_bytes))  # starts at a record boundary
    for _ in range(mutations):
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    cut = rng.choice([len(data), rng.randrange(len(data) + 1)])
    buf = bytes(data[:cut])
    limit = rng.choice([None, 150])
    got = scan_records(buf, base, segment_bytes, verify_crc=verify, max_record_bytes=limit)
    ref = _reference_scan(buf, base, segment_bytes, verify, limit)
    # Where, what and why it stopped; the detail's words are the one decoder's own now
    # (one "field lengths do not add up" rule where the old walk named the first field).
    assert (got.end, got.records, got.stop) == (ref.end, ref.records, ref.stop)
    view = scan_records(memoryview(buf), base, segment_bytes, verify_crc=verify,
                        max_record_bytes=limit)  # fmt: skip
    assert view == got


# ------------------------------------------------------------------ store


def test_put_run_matches_put_messages(tmp_path: Path) -> None:
    config = StoreConfig(commit_log_segment_bytes=4096, page_cache_window_bytes=0)
    rng = random.Random(5)
    batches = [
        [rng.randbytes(rng.randrange(0, 700)) for _ in range(rng.randrange(1, 9))]
        for _ in range(30)
    ]
    host = ("127.0.40.10", 10911)
    with (
        MessageStore.open(tmp_path / "a", config) as a,
        MessageStore.open(tmp_path / "b", config) as b,
    ):
        for i, bodies in enumerate(batches):
            props: list[dict[str, str] | None] | None = (
                None if i % 3 else [{"TAGS": "x"} if j % 2 else None for j in range(len(bodies))]
            )
            run = a.put_run("T", i % 2, bodies, props, store_host=host, born_host=host, now_ms=i)
            ref = b.put_messages(
                [
                    MessageInput(
                        "T", i % 2, body, dict((props[j] if props else None) or {}), 0, i, host
                    )
                    for j, body in enumerate(bodies)
                ],
                host,
                i,
            )
            assert run.physical_offsets == [m.physical_offset for m in ref.messages]
            assert run.first_queue_offset == ref.messages[0].queue_offset
            assert run.end_offset == ref.end_offset
        assert a.max_offset == b.max_offset
        assert a.read_bytes(0, 1 << 20) == b.read_bytes(0, 1 << 20)
        for qid in (0, 1):
            assert a.queue_offset_range("T", qid) == b.queue_offset_range("T", qid)
            got = a.get_messages("T", qid, 0, 1000, a.max_offset)
            want = b.get_messages("T", qid, 0, 1000, b.max_offset)
            assert got == want


def test_drop_behind_keeps_reads_correct(tmp_path: Path) -> None:
    config = StoreConfig(commit_log_segment_bytes=1 << 22, page_cache_window_bytes=1 << 16)
    host = ("127.0.40.10", 10911)
    bodies = [bytes([i % 251]) * 1000 for i in range(64)]
    with MessageStore.open(tmp_path / "s", config) as store:
        for _ in range(200):  # ~13 MB over 4 MiB segments: several drops, segment rolls
            store.put_run("T", 0, bodies, None, store_host=host, born_host=host, now_ms=1)
        assert store.commitlog._cache_dropped > 0
        msgs = store.get_messages("T", 0, 0, 200, store.max_offset)
        assert [m.body for m in msgs] == (bodies * 4)[:200]
        store.truncate(store.max_offset - 5000)
        assert store.commitlog._cache_dropped <= store.max_offset
