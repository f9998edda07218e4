"""The JSON header serialization (SerializeType.JSON), as fastjson 1.2.83 writes it.

RemotingSerializable.encode(RemotingCommand) is `JSON.toJSONString(cmd)`: fastjson writes a
bean's properties sorted by name and leaves out null ones, so a Java header reads
``{"code":…,"extFields":{…},"flag":…,"language":"JAVA","opaque":…,"remark":…,
"serializeTypeCurrentRPC":"JSON","version":…}`` with no spaces. extFields is a HashMap: its
members come in the JVM's hash order, which we cannot recompute, so a decoded command keeps
them in wire order and writes them back in that order. Enums travel by name.

Decoding is strict where Java's would fail later (a missing or non-integer code) and
lenient where fastjson is (unknown members are ignored, `language` may be a name or its
number, `serializeTypeCurrentRPC` is informational: the frame's type byte decides).

The standard library parses and writes, not orjson: measured on the golden frames (issue 38,
docs/performance.md "JSON headers"), an orjson path that keeps this module's exact results
(a repeated extFields key, a lone surrogate, fastjson's escapes) spent most of what its
parse saves on those checks: 9.8 against 11.1 us per send header, about 1 us of the ~470 us
of server CPU a single send costs, not worth a second parser and its differences.
"""

from __future__ import annotations

import json
import re
from typing import Any

from brokergroup_remoting.codes import LanguageCode, SerializeType
from brokergroup_remoting.command import RemotingCommand, RemotingLimits
from brokergroup_remoting.errors import FrameFault, LocalProtocolError, RemoteProtocolError
from brokergroup_remoting.header_limits import check_ext_count, check_ext_pair, check_remark

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
# fastjson writes these control characters with a short escape, the rest below 0x20 as \\u00XX.
_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


# What `_escaped` rewrites; most header values (ids, offsets, names) hold none of it.
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f\u2028\u2029]')


def _quote(text: str) -> str:
    if _NEEDS_ESCAPE.search(text) is None:
        return f'"{text}"'
    return f'"{_escaped(text)}"'


def _escaped(text: str) -> str:
    out = []
    for ch in text:
        escaped = _SHORT_ESCAPES.get(ch)
        if escaped is not None:
            out.append(escaped)
        elif ch < " " or ch in "\u007f\u2028\u2029":
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def encode_json_header(cmd: RemotingCommand) -> bytes:
    """The header bytes fastjson would write for `cmd` (members in name order)."""
    parts = [f'"code":{cmd.code}']
    if cmd.ext_fields is not None:
        members = ",".join(f"{_quote(k)}:{_quote(v)}" for k, v in cmd.ext_fields)
        parts.append(f'"extFields":{{{members}}}')
    parts.append(f'"flag":{cmd.flag}')
    parts.append(f'"language":"{cmd.language.name}"')
    parts.append(f'"opaque":{cmd.opaque}')
    if cmd.remark is not None:
        parts.append(f'"remark":{_quote(cmd.remark)}')
    parts.append(f'"serializeTypeCurrentRPC":"{SerializeType.JSON.name}"')
    parts.append(f'"version":{cmd.version}')
    for name in ("code", "flag", "opaque", "version"):
        value = getattr(cmd, name)
        if not _INT_MIN <= value <= _INT_MAX:
            raise LocalProtocolError(f"{name} {value} does not fit a Java int")
    return ("{" + ",".join(parts) + "}").encode("utf-8")


def _utf8_length(text: str, what: str) -> int:
    # A JSON escape can spell a lone surrogate (a Java string may hold one); UTF-8 cannot.
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise RemoteProtocolError(FrameFault.BAD_UTF8, f"{what}: {exc.reason}") from exc


def _bad(detail: str) -> RemoteProtocolError:
    return RemoteProtocolError(FrameFault.BAD_FIELD, detail)


def _int_member(obj: dict[str, Any], name: str, default: int | None) -> int:
    value = obj.get(name, default)
    if value is None:
        raise _bad(f"JSON header has no {name!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not _INT_MIN <= value <= _INT_MAX:
        raise _bad(f"JSON header {name!r} is {value!r}, not a Java int")
    return value


def _language(value: object) -> LanguageCode:
    try:
        if isinstance(value, str):
            return LanguageCode[value]
        if isinstance(value, int) and not isinstance(value, bool):
            return LanguageCode(value)
    except (KeyError, ValueError):
        pass
    raise RemoteProtocolError(FrameFault.UNKNOWN_LANGUAGE, f"language {value!r}")


def decode_json_header(header: bytes, body: bytes, limits: RemotingLimits) -> RemotingCommand:
    """A command from a JSON header; every length checked against `limits`."""
    try:
        text = header.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RemoteProtocolError(FrameFault.BAD_UTF8, f"JSON header: {exc.reason}") from exc
    try:
        obj = json.loads(text, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError) as exc:
        raise RemoteProtocolError(FrameFault.BAD_JSON, f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, _Pairs):
        raise RemoteProtocolError(FrameFault.BAD_JSON, f"header is a JSON {type(obj).__name__}")
    members = dict(obj.pairs)
    remark = members.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise _bad(f"remark is {type(remark).__name__}, not a string")
    if remark is not None:
        check_remark(_utf8_length(remark, "remark"), limits)
    ext = members.get("extFields")
    pairs: tuple[tuple[str, str], ...] | None = None
    if ext is not None:
        if not isinstance(ext, _Pairs):
            raise _bad(f"extFields is {type(ext).__name__}, not an object")
        check_ext_count(len(ext.pairs), limits)
        max_key, max_value = limits.max_ext_key_bytes, limits.max_ext_value_bytes
        for key, value in ext.pairs:
            if not isinstance(value, str):
                raise _bad(f"extFields[{key!r}] is {type(value).__name__}, not a string")
            # The common pair inline (a third of a send header's decode CPU, issue 38): ASCII,
            # so its length is its UTF-8 length, and within the limits.
            ascii_pair = key.isascii() and value.isascii()
            if ascii_pair and len(key) <= max_key and len(value) <= max_value:
                continue
            check_ext_pair(
                _utf8_length(key, "extFields key"), _utf8_length(value, "extFields value"), limits
            )
        pairs = tuple(ext.pairs)
    return RemotingCommand(
        code=_int_member(members, "code", None),
        opaque=_int_member(members, "opaque", 0),
        flag=_int_member(members, "flag", 0),
        language=_language(members.get("language", LanguageCode.JAVA.name)),
        version=_int_member(members, "version", 0),
        remark=remark,
        ext_fields=pairs,
        body=body,
        serialize_type=SerializeType.JSON,
    )


class _Pairs:
    """A JSON object as its members in order (keys may repeat)."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs
