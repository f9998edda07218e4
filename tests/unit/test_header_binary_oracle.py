"""The ROCKETMQ header decoder against its earlier, plainer self (issue 38: every request's
header is decoded on the master's one loop, so its pair loop was rewritten for speed).

`_reference_decode` is the decoder as it was before (each check a call into header_limits,
each string through `_text`; the message helpers it shares are the module's own); hypothesis builds headers from pairs whose lengths may lie
(negative, past the end, over the limits), with bad UTF-8 and trailing bytes, under small
limits, and the two must agree on everything: the command, or the fault, detail, value and
limit of the refusal.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_remoting.codes import LanguageCode, SerializeType
from brokergroup_remoting.command import RemotingCommand, RemotingLimits
from brokergroup_remoting.errors import FrameFault, RemoteProtocolError

# Its message helpers are shared: only the pair loop was rewritten.
from brokergroup_remoting.header_binary import _text, _truncated, decode_binary_header
from brokergroup_remoting.header_limits import (
    check_ext_count,
    check_ext_pair,
    check_not_negative,
    check_remark,
)

_FIXED = struct.Struct(">hbhii")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


def _reference_decode(header: bytes, body: bytes, limits: RemotingLimits) -> RemotingCommand:
    end = len(header)
    if end < _FIXED.size + 8:
        raise _truncated("fixed fields", 0, _FIXED.size + 8, end)
    code, language, version, opaque, flag = _FIXED.unpack_from(header, 0)
    try:
        language_code = LanguageCode(language)
    except ValueError:
        raise RemoteProtocolError(
            FrameFault.UNKNOWN_LANGUAGE, f"language byte {language}"
        ) from None
    at = _FIXED.size
    (remark_length,) = _INT.unpack_from(header, at)
    at += 4
    check_not_negative("remark length", remark_length)
    check_remark(remark_length, limits)
    if at + remark_length + 4 > end:
        raise _truncated("remark", at, remark_length + 4, end)
    remark = _text(header[at : at + remark_length], "remark") if remark_length else None
    at += remark_length
    (ext_length,) = _INT.unpack_from(header, at)
    at += 4
    check_not_negative("extFields length", ext_length)
    ext_end = at + ext_length
    if ext_end > end:
        raise _truncated("extFields", at, ext_length, end)
    if ext_end < end:
        raise RemoteProtocolError(
            FrameFault.HEADER_TRAILING_BYTES,
            f"{end - ext_end} bytes after extFields",
            value=end - ext_end,
        )
    pairs: list[tuple[str, str]] = []
    while at < ext_end:
        check_ext_count(len(pairs) + 1, limits)
        if at + 2 > ext_end:
            raise _truncated("extFields key length", at, 2, ext_end)
        (key_length,) = _SHORT.unpack_from(header, at)
        at += 2
        check_not_negative("extFields key length", key_length)
        if at + key_length + 4 > ext_end:
            raise _truncated("extFields key", at, key_length + 4, ext_end)
        key_at = at
        at += key_length
        (value_length,) = _INT.unpack_from(header, at)
        at += 4
        check_not_negative("extFields value length", value_length)
        check_ext_pair(key_length, value_length, limits)
        if at + value_length > ext_end:
            raise _truncated("extFields value", at, value_length, ext_end)
        pairs.append(
            (
                _text(header[key_at : key_at + key_length], "extFields key"),
                _text(header[at : at + value_length], "extFields value"),
            )
        )
        at += value_length
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=language_code,
        version=version,
        remark=remark,
        ext_fields=tuple(pairs) if pairs else None,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def _outcome(decode, header: bytes, limits: RemotingLimits):  # type: ignore[no-untyped-def]
    try:
        return ("ok", decode(header, b"body", limits))
    except RemoteProtocolError as exc:
        return ("refused", exc.fault, exc.detail, exc.value, exc.limit)


_text_bytes = st.one_of(
    st.text(max_size=12).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=12),  # mostly not UTF-8
)


@st.composite
def _pair(draw: st.DrawFn) -> bytes:
    key, value = draw(_text_bytes), draw(_text_bytes)
    # The lengths are usually true; sometimes they lie (negative, short, long).
    key_length = draw(st.one_of(st.just(len(key)), st.integers(-3, 40)))
    value_length = draw(st.one_of(st.just(len(value)), st.integers(-3, 40)))
    return _SHORT.pack(key_length) + key + _INT.pack(value_length) + value


@st.composite
def _header(draw: st.DrawFn) -> bytes:
    fixed = _FIXED.pack(
        draw(st.integers(-0x8000, 0x7FFF)),
        draw(st.sampled_from([0, 1, 2, 11, 12, 99, -1])),  # some unknown languages
        draw(st.integers(-0x8000, 0x7FFF)),
        draw(st.integers(-(2**31), 2**31 - 1)),
        draw(st.integers(0, 3)),
    )
    remark = draw(_text_bytes)
    remark_length = draw(st.one_of(st.just(len(remark)), st.integers(-2, 30)))
    ext = b"".join(draw(st.lists(_pair(), max_size=6)))
    ext_length = draw(st.one_of(st.just(len(ext)), st.integers(-2, len(ext) + 8)))
    tail = draw(st.sampled_from([b"", b"\x00", b"xyz"]))
    cut = draw(st.one_of(st.none(), st.integers(0, 60)))
    header = fixed + _INT.pack(remark_length) + remark + _INT.pack(ext_length) + ext + tail
    return header if cut is None else header[:cut]


@settings(max_examples=1500, deadline=None)
@given(
    _header(),
    st.builds(
        RemotingLimits,
        max_ext_fields=st.integers(1, 8),
        max_ext_key_bytes=st.integers(0, 16),
        max_ext_value_bytes=st.integers(0, 16),
        max_remark_bytes=st.integers(0, 16),
    ),
)
def test_the_decoder_agrees_with_the_reference_on_any_header(
    header: bytes, limits: RemotingLimits
) -> None:
    assert _outcome(decode_binary_header, header, limits) == _outcome(
        _reference_decode, header, limits
    )


def test_the_generator_reaches_every_pair_refusal() -> None:
    # A guard on the property above: the pair loop's refusals are all reachable by it.
    limits = RemotingLimits(max_ext_fields=1, max_ext_key_bytes=2, max_ext_value_bytes=2)

    def header(ext: bytes) -> bytes:
        return _FIXED.pack(1, 0, 1, 1, 0) + _INT.pack(0) + _INT.pack(len(ext)) + ext

    ok = _SHORT.pack(1) + b"k" + _INT.pack(1) + b"v"
    cases = {
        FrameFault.TOO_MANY_EXT_FIELDS: ok + ok,
        FrameFault.EXT_KEY_TOO_LONG: _SHORT.pack(3) + b"kkk" + _INT.pack(1) + b"v",
        FrameFault.EXT_VALUE_TOO_LONG: _SHORT.pack(1) + b"k" + _INT.pack(3) + b"vvv",
        FrameFault.BAD_FIELD: _SHORT.pack(-1) + _INT.pack(1) + b"v",
        FrameFault.BAD_UTF8: _SHORT.pack(1) + b"k" + _INT.pack(1) + b"\xff",
        FrameFault.HEADER_TRUNCATED: _SHORT.pack(1) + b"k" + _INT.pack(2) + b"v",
    }
    for fault, ext in cases.items():
        new = _outcome(decode_binary_header, header(ext), limits)
        assert new == _outcome(_reference_decode, header(ext), limits)
        assert new[:2] == ("refused", fault), (fault, new)
