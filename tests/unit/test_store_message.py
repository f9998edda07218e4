"""DESIGN.md §3.1 "Records use RocketMQ's v1 message layout": the codec and the scanner.

Checks field offsets against RocketMQ's constants (MessageDecoder positions,
magic codes, sysFlag bits, property separators, UtilAll.crc32 masking), round
trips through encode/decode with hypothesis, and feeds `scan_records` whole
input, every prefix, trailing garbage and random bytes: it returns a result
naming why it stopped and never raises (STYLE.md §2).
"""

from __future__ import annotations

import struct
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.store.message import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    STOREHOSTADDRESS_V6_FLAG,
    MessageInput,
    body_crc,
    decode_properties,
    encode_properties,
    java_string_hash,
    message_length,
)
from brokergroup_broker.store.message_encode import encode_batch, encode_message
from brokergroup_broker.store.message_scan import ScanStop, decode_record, scan_records

STORE = ("192.168.1.7", 10911)


def _encode(msg: MessageInput, qo: int = 5, phys: int = 0) -> bytes:
    return encode_message(
        msg, queue_offset=qo, physical_offset=phys, store_host=STORE, store_timestamp_ms=1234
    )


def test_magic_codes_and_flags_are_rocketmqs() -> None:
    assert MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194
    assert (BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG) == (16, 32)


def test_field_positions_match_messagedecoder() -> None:
    msg = MessageInput(
        "TopicA", 3, b"hello", {"TAGS": "t1", "KEYS": "k"}, flag=9,
        born_timestamp_ms=777, born_host=("10.1.2.3", 4567),
    )  # fmt: skip
    rec = _encode(msg, qo=42, phys=8192)
    assert struct.unpack_from(">i", rec, 0)[0] == len(rec)
    assert struct.unpack_from(">i", rec, 4)[0] == MESSAGE_MAGIC_CODE
    assert struct.unpack_from(">i", rec, 8)[0] == zlib.crc32(b"hello") & 0x7FFFFFFF
    assert struct.unpack_from(">i", rec, 12)[0] == 3  # queueId
    assert struct.unpack_from(">i", rec, 16)[0] == 9  # flag (MESSAGE_FLAG_POSITION)
    assert struct.unpack_from(">q", rec, 20)[0] == 42  # QUEUE_OFFSET_POSITION
    assert struct.unpack_from(">q", rec, 28)[0] == 8192  # MESSAGE_PHYSIC_OFFSET_POSITION
    assert struct.unpack_from(">i", rec, 36)[0] == 0  # SYSFLAG_POSITION: IPv4 both
    assert struct.unpack_from(">q", rec, 40)[0] == 777
    assert rec[48:52] == bytes([10, 1, 2, 3]) and struct.unpack_from(">i", rec, 52)[0] == 4567
    assert struct.unpack_from(">q", rec, 56)[0] == 1234  # MESSAGE_STORE_TIMESTAMP_POSITION
    assert rec[64:68] == bytes([192, 168, 1, 7])
    assert struct.unpack_from(">i", rec, 84)[0] == 5  # BODY_SIZE_POSITION
    assert rec[88:93] == b"hello"
    assert rec[93] == len("TopicA") and rec[94:100] == b"TopicA"
    props = b"TAGS\x01t1\x02KEYS\x01k\x02"
    assert struct.unpack_from(">h", rec, 100)[0] == len(props)
    assert rec[102:] == props
    assert len(rec) == message_length(0, 5, 6, len(props))


def test_crc_is_masked_to_a_non_negative_java_int() -> None:
    for body in (b"", b"a", bytes(range(256)) * 3):
        assert body_crc(body) == zlib.crc32(body) & 0x7FFFFFFF


def test_java_string_hash_matches_java() -> None:
    # Values of "x".hashCode() in Java.
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("TagA || TagB") == java_string_hash("TagA || TagB")
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_string_hash("\u00e9t\u00e9") == 0xE9 * 961 + ord("t") * 31 + 0xE9


def test_properties_round_trip_and_java_split_rules() -> None:
    props = {"KEYS": "k1 k2", "TAGS": "t", "UNIQ_KEY": "ABC"}
    assert decode_properties(encode_properties(props)) == props
    assert encode_properties({}) == b""
    # Java's split drops items without exactly one name/value separator.
    assert decode_properties(b"a\x01b\x02broken\x02c\x01\x02") == {"a": "b"}


def test_ipv6_hosts_set_sysflag_bits_and_round_trip() -> None:
    msg = MessageInput("T", 0, b"x", born_host=("::1", 7))
    rec = encode_message(
        msg, queue_offset=0, physical_offset=0, store_host=("fe80::2", 9), store_timestamp_ms=1
    )
    decoded = decode_record(rec)
    assert decoded.sys_flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG) == 48
    assert decoded.born_host == ("::1", 7) and decoded.store_host == ("fe80::2", 9)
    assert scan_records(rec, 0, 1 << 20).stop is ScanStop.END


messages = st.builds(
    MessageInput,
    topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True),
    queue_id=st.integers(0, 1000),
    body=st.binary(max_size=300),
    properties=st.dictionaries(
        st.text(
            st.characters(blacklist_characters="\x00\x01\x02", codec="utf-8"),
            min_size=1,
            max_size=8,
        ),
        st.text(
            st.characters(blacklist_characters="\x00\x01\x02", codec="utf-8"),
            min_size=1,
            max_size=20,
        ),
        max_size=4,
    ),
    flag=st.integers(-(2**31), 2**31 - 1),
    born_timestamp_ms=st.integers(0, 2**62),
    born_host=st.tuples(st.sampled_from(["127.0.0.1", "10.0.0.9", "::1"]), st.integers(0, 65535)),
)


@settings(max_examples=200, deadline=None)
@given(msg=messages, qo=st.integers(0, 2**40), phys=st.integers(0, 2**40))
def test_round_trip(msg: MessageInput, qo: int, phys: int) -> None:
    rec = _encode(msg, qo, phys)
    got = decode_record(rec)
    assert (got.topic, got.queue_id, got.queue_offset, got.physical_offset) == (
        msg.topic, msg.queue_id, qo, phys,
    )  # fmt: skip
    assert (got.body, got.properties, got.flag, got.born_timestamp_ms) == (
        msg.body, msg.properties, msg.flag, msg.born_timestamp_ms,
    )  # fmt: skip
    assert got.born_host == msg.born_host and got.store_host == STORE
    assert got.size == len(rec) and got.body_crc == body_crc(msg.body)


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(messages, min_size=1, max_size=12), seg=st.integers(600, 3000))
def test_batch_encoder_equals_reference_and_scans_back(batch: list[MessageInput], seg: int) -> None:
    start = seg * 3 + 17
    enc = encode_batch(
        batch, start_offset=start, segment_bytes=seg, store_host=STORE, store_timestamp_ms=1234,
        queue_offset_of=lambda key: 7, max_message_bytes=seg - 8,
    )  # fmt: skip
    for m, app in zip(batch, enc.messages, strict=True):
        o = app.physical_offset - start
        ref = _encode(m, app.queue_offset, app.physical_offset)
        assert bytes(enc.data[o : o + app.size]) == ref
    res = scan_records(enc.data, start, seg)
    assert res.stop is ScanStop.END and res.end == start + len(enc.data)
    assert [r.physical_offset for r in res.records] == [m.physical_offset for m in enc.messages]
    # Every prefix scans cleanly to a record boundary: PARTIAL or END, never a crash.
    bounds = {start} | {r.physical_offset + r.size for r in res.records}
    for cut in range(0, len(enc.data), max(1, len(enc.data) // 40)):
        part = scan_records(enc.data[:cut], start, seg)
        assert part.stop in (ScanStop.END, ScanStop.PARTIAL, ScanStop.ZEROS)
        assert part.end <= start + cut
        assert part.end in bounds or part.end % seg == 0  # a record or a blank ends there


def test_blank_record_fills_the_segment_tail() -> None:
    seg = 1024
    msgs = [MessageInput("T", 0, b"b" * 300) for _ in range(4)]
    enc = encode_batch(
        msgs, start_offset=0, segment_bytes=seg, store_host=STORE, store_timestamp_ms=1,
        queue_offset_of=lambda key: 0, max_message_bytes=seg - 8,
    )  # fmt: skip
    size = enc.messages[0].size
    per_segment = (seg - 8) // size
    blank_at = per_segment * size
    assert struct.unpack_from(">ii", enc.data, blank_at) == (seg - blank_at, BLANK_MAGIC_CODE)
    assert enc.data[blank_at + 8 : seg] == bytes(seg - blank_at - 8)
    assert enc.messages[per_segment].physical_offset == seg
    assert [m.queue_offset for m in enc.messages] == [0, 1, 2, 3]


def test_corruption_is_named() -> None:
    rec = bytearray(_encode(MessageInput("T", 0, b"payload"), phys=0))
    rec[90] ^= 0xFF
    assert scan_records(rec, 0, 1 << 20).stop is ScanStop.BAD_CRC
    assert scan_records(rec, 0, 1 << 20, verify_crc=False).stop is ScanStop.END
    assert scan_records(_encode(MessageInput("T", 0, b"p"), phys=64), 0, 1 << 20).stop is (
        ScanStop.BAD_PHYSICAL_OFFSET
    )
    assert scan_records(bytes(64), 0, 1 << 20).stop is ScanStop.ZEROS
    assert scan_records(b"\x00\x00\x01\x00garbage!", 0, 1 << 20).stop is ScanStop.BAD_MAGIC
    blank = struct.pack(">ii", 100, BLANK_MAGIC_CODE)
    assert scan_records(blank + bytes(92), 0, 4096).stop is ScanStop.BAD_BLANK


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400), base=st.integers(0, 10_000))
def test_scanner_never_raises_on_garbage(data: bytes, base: int) -> None:
    good = _encode(MessageInput("T", 1, b"ok"), phys=base)
    for buf in (data, good + data):
        res = scan_records(buf, base, 1 << 16)
        assert base <= res.end <= base + len(buf)
