"""Limits, refusals and encode rules of the remoting codec (docs/rocketmq-compatibility.md).

Each limit in RemotingLimits is exceeded by one and met exactly, in both serializations
where it applies, and the error must name the fault, the value and the limit. Framing
limits must be enforced from the first 8 bytes, before the rest of the frame is buffered.
A failed stream decoder keeps failing (the connection must close). Encoding refuses what
the wire cannot carry with LocalProtocolError, before a byte is produced.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_remoting import (
    DEFAULT_LIMITS,
    FLAG_RESPONSE,
    FrameDecoder,
    FrameFault,
    LanguageCode,
    LocalProtocolError,
    RemoteProtocolError,
    RemotingCommand,
    RemotingLimits,
    ResponseCode,
    SerializeType,
    decode,
    encode,
    header_json,
    request,
    response_to,
)

BOTH = list(SerializeType)


def _cmd(serialize_type: SerializeType, **changes: object) -> RemotingCommand:
    base = request(310, 9, {"topic": "T", "queueId": "1"}, b"body", serialize_type=serialize_type)
    return RemotingCommand(**{**base.__dict__, **changes})


def _refused(frame: bytes, limits: RemotingLimits) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as caught:
        decode(frame, limits)
    return caught.value


def test_defaults_follow_rocketmq_frame_max_length() -> None:
    assert (
        DEFAULT_LIMITS.max_frame_bytes == 16 * 1024 * 1024
    )  # com.rocketmq.remoting.frameMaxLength


@pytest.mark.parametrize("serialize_type", BOTH)
def test_frame_limit_counts_the_length_field_and_is_checked_from_8_bytes(
    serialize_type: SerializeType,
) -> None:
    frame = encode(_cmd(serialize_type))
    assert decode(frame, RemotingLimits(max_frame_bytes=len(frame))) == _cmd(serialize_type)
    error = _refused(frame, RemotingLimits(max_frame_bytes=len(frame) - 1))
    assert (error.fault, error.value, error.limit) == (
        FrameFault.FRAME_TOO_LONG,
        len(frame),
        len(frame) - 1,
    )
    decoder = FrameDecoder(RemotingLimits(max_frame_bytes=len(frame) - 1))
    decoder.feed(frame[:8])  # nothing more arrives: the bound is decided on the prefix alone
    with pytest.raises(RemoteProtocolError, match="total frame length over the limit"):
        decoder.next_command()


@pytest.mark.parametrize("serialize_type", BOTH)
def test_header_and_body_limits(serialize_type: SerializeType) -> None:
    cmd = _cmd(serialize_type)
    frame = encode(cmd)
    header_length = struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF
    assert decode(frame, RemotingLimits(max_header_bytes=header_length, max_body_bytes=4)) == cmd
    error = _refused(frame, RemotingLimits(max_header_bytes=header_length - 1))
    assert (error.fault, error.value, error.limit) == (
        FrameFault.HEADER_TOO_LONG,
        header_length,
        header_length - 1,
    )
    error = _refused(frame, RemotingLimits(max_body_bytes=3))
    assert (error.fault, error.value, error.limit) == (FrameFault.BODY_TOO_LONG, 4, 3)


@pytest.mark.parametrize("serialize_type", BOTH)
def test_ext_field_limits(serialize_type: SerializeType) -> None:
    cmd = _cmd(serialize_type, ext_fields=(("k1", "v"), ("key2", "value"), ("k3", "")))
    frame = encode(cmd)
    assert (
        decode(frame, RemotingLimits(max_ext_fields=3, max_ext_key_bytes=4, max_ext_value_bytes=5))
        == cmd
    )
    error = _refused(frame, RemotingLimits(max_ext_fields=2))
    assert (error.fault, error.value, error.limit) == (FrameFault.TOO_MANY_EXT_FIELDS, 3, 2)
    error = _refused(frame, RemotingLimits(max_ext_key_bytes=3))
    assert (error.fault, error.value, error.limit) == (FrameFault.EXT_KEY_TOO_LONG, 4, 3)
    error = _refused(frame, RemotingLimits(max_ext_value_bytes=4))
    assert (error.fault, error.value, error.limit) == (FrameFault.EXT_VALUE_TOO_LONG, 5, 4)


@pytest.mark.parametrize("serialize_type", BOTH)
def test_remark_limit_counts_utf8_bytes(serialize_type: SerializeType) -> None:
    cmd = _cmd(serialize_type, remark="é" * 3, flag=FLAG_RESPONSE)
    frame = encode(cmd)
    assert decode(frame, RemotingLimits(max_remark_bytes=6)) == cmd
    error = _refused(frame, RemotingLimits(max_remark_bytes=5))
    assert (error.fault, error.value, error.limit) == (FrameFault.REMARK_TOO_LONG, 6, 5)
    assert "remark longer than the limit: remark (got 6, limit 5)" in str(error)


def _frame(type_and_length: int, header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), type_and_length) + header + body


def test_framing_refusals() -> None:
    assert _refused(struct.pack(">ii", 3, 0), DEFAULT_LIMITS).fault is FrameFault.FRAME_TOO_SHORT
    assert _refused(struct.pack(">ii", -1, 0), DEFAULT_LIMITS).fault is FrameFault.FRAME_TOO_SHORT
    assert (
        _refused(_frame(2 << 24 | 2, b"{}"), DEFAULT_LIMITS).fault
        is FrameFault.UNKNOWN_SERIALIZE_TYPE
    )
    assert (
        _refused(struct.pack(">ii", 6, 3) + b"{}", DEFAULT_LIMITS).fault
        is FrameFault.HEADER_BEYOND_FRAME
    )
    whole = encode(_cmd(SerializeType.JSON))
    assert _refused(whole[:-1], DEFAULT_LIMITS).fault is FrameFault.FRAME_TRUNCATED
    assert _refused(whole + b"x", DEFAULT_LIMITS).fault is FrameFault.FRAME_TRAILING_BYTES
    assert _refused(whole[:5], DEFAULT_LIMITS).fault is FrameFault.FRAME_TRUNCATED


@pytest.mark.parametrize(
    ("header", "fault"),
    [
        (b"[1]", FrameFault.BAD_JSON),
        (b"{", FrameFault.BAD_JSON),
        (b"[" * 100_000, FrameFault.BAD_JSON),  # nesting deeper than the parser's recursion
        (b'{"code":"10"}', FrameFault.BAD_FIELD),
        (b'{"opaque":1}', FrameFault.BAD_FIELD),  # no code
        (b'{"code":true}', FrameFault.BAD_FIELD),
        (b'{"code":2147483648}', FrameFault.BAD_FIELD),
        (b'{"code":1,"extFields":{"a":1}}', FrameFault.BAD_FIELD),
        (b'{"code":1,"extFields":[]}', FrameFault.BAD_FIELD),
        (b'{"code":1,"remark":5}', FrameFault.BAD_FIELD),
        (b'{"code":1,"language":"COBOL"}', FrameFault.UNKNOWN_LANGUAGE),
        (b'{"code":1,"remark":"\xff"}', FrameFault.BAD_UTF8),
        # JSON escapes can spell a lone UTF-16 surrogate, which no UTF-8 text can carry.
        (b'{"code":1,"remark":"\\ud800"}', FrameFault.BAD_UTF8),
        (b'{"code":1,"extFields":{"\\udfff":"v"}}', FrameFault.BAD_UTF8),
        (b'{"code":1,"extFields":{"k":"a\\ud83d"}}', FrameFault.BAD_UTF8),
    ],
)
def test_json_header_refusals(header: bytes, fault: FrameFault) -> None:
    assert _refused(_frame(len(header), header), DEFAULT_LIMITS).fault is fault


def test_json_header_reads_what_other_clients_write() -> None:
    # A Go client writes the language as a name; fastjson also takes its number; unknown
    # members and serializeTypeCurrentRPC are ignored (the frame's type byte decides).
    header = b'{"code":105,"language":9,"opaque":3,"flag":0,"extFields":{"topic":"T"},"x":[1],"serializeTypeCurrentRPC":"ROCKETMQ"}'
    cmd = decode(_frame(len(header), header))
    assert (cmd.code, cmd.language, cmd.opaque, cmd.fields(), cmd.serialize_type) == (
        105,
        LanguageCode.GO,
        3,
        {"topic": "T"},
        SerializeType.JSON,
    )


def _binary(
    code: int = 10, language: int = 0, remark: bytes = b"", ext: bytes = b"", tail: bytes = b""
) -> bytes:
    header = struct.pack(">hbhii", code, language, 0, 1, 0)
    header += struct.pack(">i", len(remark)) + remark + struct.pack(">i", len(ext)) + ext + tail
    return _frame(1 << 24 | len(header), header)


def _pair(key: bytes, value: bytes) -> bytes:
    return struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value


@pytest.mark.parametrize(
    ("frame", "fault"),
    [
        (_frame(1 << 24 | 3, b"\x00\x0a\x00"), FrameFault.HEADER_TRUNCATED),
        (_binary(language=99), FrameFault.UNKNOWN_LANGUAGE),
        (_binary(tail=b"\x00"), FrameFault.HEADER_TRAILING_BYTES),
        (_binary(ext=_pair(b"k", b"v")[:-1]), FrameFault.HEADER_TRUNCATED),
        (_binary(ext=struct.pack(">h", -1) + struct.pack(">i", 0)), FrameFault.BAD_FIELD),
        (_binary(ext=struct.pack(">h", 1) + b"k" + struct.pack(">i", -5)), FrameFault.BAD_FIELD),
        (_binary(ext=b"\x00"), FrameFault.HEADER_TRUNCATED),
        (_binary(ext=_pair(b"\xff", b"v")), FrameFault.BAD_UTF8),
        (_binary(remark=b"\xc3"), FrameFault.BAD_UTF8),
    ],
)
def test_rocketmq_header_refusals(frame: bytes, fault: FrameFault) -> None:
    assert _refused(frame, DEFAULT_LIMITS).fault is fault


def test_rocketmq_negative_lengths_are_refused() -> None:
    header = struct.pack(">hbhiii", 10, 0, 0, 1, 0, -1) + struct.pack(">i", 0)
    assert (
        _refused(_frame(1 << 24 | len(header), header), DEFAULT_LIMITS).fault
        is FrameFault.BAD_FIELD
    )
    header = struct.pack(">hbhiii", 10, 0, 0, 1, 0, 0) + struct.pack(">i", -4)
    assert (
        _refused(_frame(1 << 24 | len(header), header), DEFAULT_LIMITS).fault
        is FrameFault.BAD_FIELD
    )


def test_rocketmq_empty_strings_round_trip_as_length_zero() -> None:
    cmd = request(10, 1, {"k": ""}, serialize_type=SerializeType.ROCKETMQ)
    assert decode(encode(cmd)) == cmd
    assert (
        decode(
            encode(
                RemotingCommand(code=10, opaque=1, remark="", serialize_type=SerializeType.ROCKETMQ)
            )
        ).remark
        is None
    )


def test_failed_decoder_stays_failed() -> None:
    decoder = FrameDecoder()
    good = encode(_cmd(SerializeType.JSON))
    decoder.feed(good + struct.pack(">ii", 3, 0) + good)
    assert decoder.next_command() == _cmd(SerializeType.JSON)
    with pytest.raises(RemoteProtocolError) as first:
        decoder.next_command()
    with pytest.raises(RemoteProtocolError) as again:
        decoder.next_command()
    assert again.value is first.value and first.value.fault is FrameFault.FRAME_TOO_SHORT


def test_encode_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError, match="code 200050 does not fit"):
        encode(request(200050, 1, serialize_type=SerializeType.ROCKETMQ))  # POP_MESSAGE
    assert decode(encode(request(200050, 1))).code == 200050  # JSON carries any int
    with pytest.raises(LocalProtocolError, match="opaque"):
        encode(request(10, 2**31))
    with pytest.raises(LocalProtocolError, match="key of 32768 bytes"):
        encode(request(10, 1, {"k" * 32768: "v"}, serialize_type=SerializeType.ROCKETMQ))


@pytest.mark.parametrize("serialize_type", BOTH)
def test_encode_refuses_text_utf8_cannot_carry(serialize_type: SerializeType) -> None:
    with pytest.raises(LocalProtocolError, match="not UTF-8 encodable"):
        encode(request(10, 1, {"k": "\ud800"}, serialize_type=serialize_type))


def test_limits_validate_themselves() -> None:
    with pytest.raises(ValueError, match="24-bit"):
        RemotingLimits(max_header_bytes=1 << 24)
    with pytest.raises(ValueError, match="signed short"):
        RemotingLimits(max_ext_key_bytes=40000)


@pytest.mark.parametrize("serialize_type", BOTH)
def test_response_to_keeps_opaque_and_serialization(serialize_type: SerializeType) -> None:
    req = request(105, 77, {"topic": "T"}, serialize_type=serialize_type, oneway=False)
    answer = response_to(
        req, ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server for the topic: T"
    )
    assert (answer.opaque, answer.serialize_type, answer.flag, answer.ext_fields) == (
        77,
        serialize_type,
        FLAG_RESPONSE,
        None,
    )
    assert decode(encode(answer)) == answer


def test_json_escapes_match_fastjson() -> None:
    # Expected text printed by fastjson 1.2.83 (the jar tools/rocketmq/fetch.sh caches) for
    # JSON.toJSONString of {"k": "\u001b\u007f\u2028\u2029/\u0000\u00a0<>&'"}: upper-case hex,
    # DEL and the two line separators escaped, "/" and other non-ASCII written as they are.
    header = encode(request(1, 0, {"k": "\u001b\u007f\u2028\u2029/\u0000\u00a0<>&'"}))[8:]
    assert header.startswith(
        b'{"code":1,"extFields":{"k":"\\u001B\\u007F\\u2028\\u2029/\\u0000\xc2\xa0<>&\'"},'
    )


def test_json_quote_fast_path_agrees_with_escaping_for_every_character() -> None:
    # `_quote` skips the per-character walk when its pattern finds nothing to escape; both
    # work character by character, so agreeing on every single character is agreeing.
    for code in range(0x10000):
        ch = chr(code)
        assert header_json._quote(ch) == f'"{header_json._escaped(ch)}"', hex(code)


@given(st.text())
def test_json_quote_fast_path_agrees_on_text(text: str) -> None:
    assert header_json._quote(text) == f'"{header_json._escaped(text)}"'
