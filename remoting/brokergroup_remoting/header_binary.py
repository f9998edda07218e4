"""The ROCKETMQ header serialization (SerializeType.ROCKETMQ, RocketMQSerializable.java).

Big-endian: ``short code | byte language | short version | int opaque | int flag |
int remarkLength | remark | int extFieldsLength | (short keyLength | key | int valueLength |
value)*``, strings UTF-8. Java reads a zero-length string as null (so an empty extFields value
arrives at a Java server as absent); here it decodes as "" and encodes back to length 0, the
same bytes. An empty extFields map is length 0 too, so it decodes as None, as in Java. Java does not check that the pairs end where extFieldsLength says or that the
header ends where the frame's header length says; we refuse both, since a frame that lies
about one length cannot be trusted about the others.
"""

from __future__ import annotations

import struct

from brokergroup_remoting.codes import LanguageCode, SerializeType
from brokergroup_remoting.command import RemotingCommand, RemotingLimits
from brokergroup_remoting.errors import FrameFault, LocalProtocolError, RemoteProtocolError
from brokergroup_remoting.header_limits import (
    check_ext_count,
    check_ext_pair,
    check_not_negative,
    check_remark,
)

_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    """The header bytes RocketMQSerializable.rocketMQProtocolEncode writes for `cmd`."""
    for name in ("code", "version"):
        value = getattr(cmd, name)
        if not -0x8000 <= value <= 0x7FFF:
            raise LocalProtocolError(
                f"{name} {value} does not fit the ROCKETMQ header's short (use JSON)"
            )
    for name in ("opaque", "flag"):
        value = getattr(cmd, name)
        if not -(2**31) <= value < 2**31:
            raise LocalProtocolError(f"{name} {value} does not fit a Java int")
    parts = [_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag)]
    remark = cmd.remark.encode("utf-8") if cmd.remark else b""
    parts += [_INT.pack(len(remark)), remark]
    ext: list[bytes] = []
    for key, value in cmd.ext_fields or ():
        k, v = key.encode("utf-8"), value.encode("utf-8")
        if len(k) > 0x7FFF:
            raise LocalProtocolError(f"extFields key of {len(k)} bytes over a short's 32767")
        ext += [_SHORT.pack(len(k)), k, _INT.pack(len(v)), v]
    ext_bytes = b"".join(ext)
    parts += [_INT.pack(len(ext_bytes)), ext_bytes]
    return b"".join(parts)


def _truncated(what: str, at: int, need: int, end: int) -> RemoteProtocolError:
    return RemoteProtocolError(
        FrameFault.HEADER_TRUNCATED,
        f"{what} needs {need} bytes at offset {at}, header ends at {end}",
    )


def _bad_utf8(what: str, exc: UnicodeDecodeError) -> RemoteProtocolError:
    return RemoteProtocolError(FrameFault.BAD_UTF8, f"{what}: {exc.reason}")


def _text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad_utf8(what, exc) from exc


def decode_binary_header(header: bytes, body: bytes, limits: RemotingLimits) -> RemotingCommand:
    """A command from a ROCKETMQ header; every length checked before it is used."""
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
    # The checks below run in the order of the ones in header_limits, which raise; on the
    # happy path only the comparisons run (this loop is on every request's path).
    pairs: list[tuple[str, str]] = []
    max_pairs = limits.max_ext_fields
    max_key = limits.max_ext_key_bytes
    max_value = limits.max_ext_value_bytes
    short_at = _SHORT.unpack_from
    int_at = _INT.unpack_from
    while at < ext_end:
        if len(pairs) >= max_pairs:
            check_ext_count(len(pairs) + 1, limits)
        if at + 2 > ext_end:
            raise _truncated("extFields key length", at, 2, ext_end)
        (key_length,) = short_at(header, at)
        at += 2
        if key_length < 0:
            check_not_negative("extFields key length", key_length)
        if at + key_length + 4 > ext_end:
            raise _truncated("extFields key", at, key_length + 4, ext_end)
        key_at = at
        at += key_length
        (value_length,) = int_at(header, at)
        at += 4
        if value_length < 0:
            check_not_negative("extFields value length", value_length)
        if key_length > max_key or value_length > max_value:
            check_ext_pair(key_length, value_length, limits)
        value_end = at + value_length
        if value_end > ext_end:
            raise _truncated("extFields value", at, value_length, ext_end)
        try:
            key = header[key_at : key_at + key_length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad_utf8("extFields key", exc) from exc
        try:
            value = header[at:value_end].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _bad_utf8("extFields value", exc) from exc
        pairs.append((key, value))
        at = value_end
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
