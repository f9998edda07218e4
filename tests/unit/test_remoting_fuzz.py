"""Structured fuzzing of the remoting codec (hypothesis).

Random bytes seldom pass the first length check, so hypothesis builds *valid* commands in
both serializations (any int code/opaque/flag a header can carry, any language, remarks and
extFields of any text including duplicate keys, any body), then:
- valid commands round-trip: decode(encode(c)) == c, whole and through the stream decoder
  fed in random chunks; with small limits a valid frame decodes iff every measured length
  (frame, header, body, pair count, key, value, remark) is within its limit, else the error
  names that limit's fault;
- JSON headers with members of any JSON type and text with any code point (lone
  surrogates too) decode or raise RemoteProtocolError;
- mutated frames (a length field found by walking the layout set to an edge or any value,
  a random byte flipped, the frame cut short or given trailing bytes) yield commands within
  the limits, a wait for more bytes, or RemoteProtocolError — never another exception.
"""

from __future__ import annotations

import contextlib
import json
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_remoting import (
    FrameDecoder,
    FrameFault,
    LanguageCode,
    RemoteProtocolError,
    RemotingCommand,
    RemotingLimits,
    SerializeType,
    decode,
    encode,
)

SMALL = RemotingLimits(
    max_frame_bytes=1024,
    max_header_bytes=600,
    max_body_bytes=200,
    max_ext_fields=5,
    max_ext_key_bytes=24,
    max_ext_value_bytes=48,
    max_remark_bytes=40,
)
INT32 = st.integers(-(2**31), 2**31 - 1)
SHORT = st.integers(-(2**15), 2**15 - 1)
TEXT = st.text(max_size=30)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    serialize_type = draw(st.sampled_from(SerializeType))
    binary = serialize_type is SerializeType.ROCKETMQ
    pairs = draw(st.lists(st.tuples(TEXT, TEXT), max_size=7))
    # The ROCKETMQ layout writes "" and None alike (length 0); JSON tells them apart.
    ext = draw(st.none() | st.just(tuple(pairs))) if not binary else (tuple(pairs) or None)
    remark = draw(st.none() | st.text(min_size=1 if binary else 0, max_size=50))
    return RemotingCommand(
        code=draw(SHORT if binary else INT32),
        opaque=draw(INT32),
        flag=draw(INT32),
        language=draw(st.sampled_from(LanguageCode)),
        version=draw(SHORT if binary else INT32),
        remark=remark,
        ext_fields=ext,
        body=draw(st.binary(max_size=250)),
        serialize_type=serialize_type,
    )


def _over_limit(cmd: RemotingCommand, frame: bytes) -> set[FrameFault]:
    """Which limits of SMALL the command breaks, measured without the codec."""
    header_length = struct.unpack_from(">i", frame, 4)[0] & 0xFFFFFF
    pairs = cmd.ext_fields or ()
    over = set()
    if len(frame) > SMALL.max_frame_bytes:
        over.add(FrameFault.FRAME_TOO_LONG)
    if header_length > SMALL.max_header_bytes:
        over.add(FrameFault.HEADER_TOO_LONG)
    if len(cmd.body) > SMALL.max_body_bytes:
        over.add(FrameFault.BODY_TOO_LONG)
    if len(pairs) > SMALL.max_ext_fields:
        over.add(FrameFault.TOO_MANY_EXT_FIELDS)
    if any(len(k.encode()) > SMALL.max_ext_key_bytes for k, _ in pairs):
        over.add(FrameFault.EXT_KEY_TOO_LONG)
    if any(len(v.encode()) > SMALL.max_ext_value_bytes for _, v in pairs):
        over.add(FrameFault.EXT_VALUE_TOO_LONG)
    if cmd.remark is not None and len(cmd.remark.encode()) > SMALL.max_remark_bytes:
        over.add(FrameFault.REMARK_TOO_LONG)
    return over


def _chunked(data: bytes, cuts: list[int], limits: RemotingLimits) -> list[RemotingCommand]:
    decoder = FrameDecoder(limits)
    out: list[RemotingCommand] = []
    at = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        decoder.feed(data[at:cut])
        at = max(at, cut)
        out.extend(decoder.commands())
    return out


@settings(max_examples=400, deadline=None)
@given(commands(), st.lists(st.integers(0, 10_000), max_size=6))
def test_valid_commands_round_trip_whole_and_in_chunks(
    cmd: RemotingCommand, cuts: list[int]
) -> None:
    frame = encode(cmd)
    assert decode(frame) == cmd
    assert _chunked(frame + frame, cuts, RemotingLimits()) == [cmd, cmd]


@settings(max_examples=400, deadline=None)
@given(commands())
def test_limits_refuse_exactly_what_is_over_them(cmd: RemotingCommand) -> None:
    frame = encode(cmd)
    over = _over_limit(cmd, frame)
    try:
        decoded = decode(frame, SMALL)
    except RemoteProtocolError as error:
        assert error.fault in over, (error, over)
    else:
        assert not over and decoded == cmd


def _length_offsets(frame: bytes) -> list[tuple[int, str]]:
    """(offset, struct format) of every length field, walking the layout independently."""
    offsets = [(0, ">i"), (4, ">i")]
    if frame[4] != SerializeType.ROCKETMQ:
        return offsets
    at = 8 + 13  # code, language, version, opaque, flag
    offsets.append((at, ">i"))
    at += 4 + struct.unpack_from(">i", frame, at)[0]
    offsets.append((at, ">i"))
    ext_end = at + 4 + struct.unpack_from(">i", frame, at)[0]
    at += 4
    while at < ext_end:
        offsets.append((at, ">h"))
        at += 2 + struct.unpack_from(">h", frame, at)[0]
        offsets.append((at, ">i"))
        at += 4 + struct.unpack_from(">i", frame, at)[0]
    return offsets


def _edge_values(fmt: str) -> st.SearchStrategy[int]:
    bits = 16 if fmt == ">h" else 32
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return st.sampled_from([0, 1, -1, 2, 3, 4, 7, 8, 255, 1 << 24, low, high]) | st.integers(
        low, high
    )


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(encode(draw(commands())))
    how = draw(st.sampled_from(["length", "flip", "cut", "trail"]))
    if how == "length":
        offset, fmt = draw(st.sampled_from(_length_offsets(bytes(frame))))
        delta = draw(st.integers(-3, 3))
        old = struct.unpack_from(fmt, frame, offset)[0]
        new = draw(_edge_values(fmt) | st.just(old + delta))
        bits = 16 if fmt == ">h" else 32
        new = (new + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)
        struct.pack_into(fmt, frame, offset, new)
    elif how == "flip":
        i = draw(st.integers(0, len(frame) - 1))
        frame[i] ^= draw(st.integers(1, 255))
    elif how == "cut":
        del frame[draw(st.integers(0, len(frame) - 1)) :]
    else:
        frame += draw(st.binary(min_size=1, max_size=20))
    return bytes(frame)


def _within(cmd: RemotingCommand, limits: RemotingLimits) -> None:
    pairs = cmd.ext_fields or ()
    assert len(cmd.body) <= limits.max_body_bytes
    assert len(pairs) <= limits.max_ext_fields
    assert all(len(k.encode()) <= limits.max_ext_key_bytes for k, _ in pairs)
    assert all(len(v.encode()) <= limits.max_ext_value_bytes for _, v in pairs)
    assert cmd.remark is None or len(cmd.remark.encode()) <= limits.max_remark_bytes


@settings(max_examples=1500, deadline=None)
@given(
    mutated_frames(),
    st.sampled_from([SMALL, RemotingLimits()]),
    st.lists(st.integers(0, 10_000), max_size=4),
)
def test_mutated_frames_decode_or_raise_only_the_codec_error(
    frame: bytes, limits: RemotingLimits, cuts: list[int]
) -> None:
    # Only the codec's own error may escape; anything else fails the test.
    with contextlib.suppress(RemoteProtocolError):
        _within(decode(frame, limits), limits)
    with contextlib.suppress(RemoteProtocolError):
        for cmd in _chunked(frame, cuts, limits):
            _within(cmd, limits)


# Any code point, lone surrogates (rare in st.characters) given a fair share.
ANY_CHAR = st.characters(exclude_categories=[]) | st.sampled_from(
    ["\ud800", "\udbff", "\udc00", "\udfff"]
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["code", "opaque", "flag", "version", "language", "remark", "extFields", "x"]
        ),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHAR),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(ANY_CHAR, max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
    )
)
def test_any_json_header_decodes_or_raises_only_the_codec_error(members: dict[str, object]) -> None:
    # ensure_ascii spells every non-ASCII character, lone surrogates included, as \\uXXXX.
    header = json.dumps(members, ensure_ascii=True).encode()
    frame = struct.pack(">ii", 4 + len(header), len(header)) + header
    with contextlib.suppress(RemoteProtocolError):
        _within(decode(frame, SMALL), SMALL)
