"""Request header fields read as RocketMQ reads them, and the one refusal (pure).

A Java server decodes a request's extFields into its CommandCustomHeader with
`Integer.parseInt`, `Long.parseLong` and `Boolean.parseBoolean`
(RemotingCommand.decodeCommandCustomHeader); a field it cannot parse, or a @CFNotNull field
that is absent, throws RemotingCommandException, which NettyRemotingAbstract answers
SYSTEM_ERROR with the reason. A processor that refuses a request on its merits throws
AbortProcessException(code, remark). Here those are `BadField` and `RequestRefused`: every
front end (broker, name server, controller) reads its headers with these functions and
raises these exceptions, and the transport (`net`) answers them in one place.

Java's number syntax, checked against the JDK (tests/unit/test_remoting_fields.py): an
optional `+` or `-`, then one or more decimal digits — any character `Character.digit(c, 10)`
accepts, which is Unicode's decimal digits (Nd) of the Basic Multilingual Plane, so
`"١٢"` (Arabic-Indic) and `"０７"` (fullwidth) are 12 and 7, while `"²"` (a superscript, not
Nd), `"--1"`, `" 5"` and `"0x1"` are not numbers — and the value within the type's range.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import TypeVar

from brokergroup_remoting.codes import ResponseCode
from brokergroup_remoting.errors import RemotingError

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: The default bound on a name-like text field (RocketMQ's CHARACTER_MAX_LENGTH).
MAX_TEXT_BYTES = 255
#: Characters of a raw value a refusal quotes (a remark is not an echo service).
_QUOTE = 40

T = TypeVar("T")


class RequestRefused(RemotingError):
    """A request answered with `code` and `remark` instead of its handler's answer
    (RocketMQ's AbortProcessException). Raise it anywhere below a handler."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = int(code)
        self.remark = remark


class BadField(RequestRefused):
    """A header field or body a peer of this protocol would not send
    (RemotingCommandException): SYSTEM_ERROR, or the code the server answers bad requests
    with (the controller port: CONTROLLER_INVALID_REQUEST)."""

    def __init__(self, remark: str) -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, remark)


def java_integer(raw: str, *, bits: int = 64) -> int | None:
    """`Integer.parseInt(raw)` (bits=32) or `Long.parseLong(raw)` (bits=64); None where Java
    throws NumberFormatException."""
    digits = raw[1:] if raw[:1] in ("+", "-") else raw
    if digits.isascii() and 0 < len(digits) <= 19:
        # What clients send (every request has a few): ASCII digits that int() reads as Java
        # does; isdigit() on ASCII is 0-9 only, so no "_", space or sign slips into int().
        if not digits.isdigit():
            return None
        value = int(raw)
        return value if -(1 << (bits - 1)) <= value < (1 << (bits - 1)) else None
    if not digits:
        return None
    value = 0
    for ch in digits:
        # Java reads UTF-16 units: a digit outside the BMP is a surrogate pair, not a digit.
        if ord(ch) > 0xFFFF or not ch.isdecimal():
            return None
        value = value * 10 + unicodedata.decimal(ch)
        if value > (1 << (bits - 1)):  # beyond either end: stop before the string does
            return None
    if raw[:1] == "-":
        value = -value
    if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
        return None
    return value


def java_boolean(raw: str | None) -> bool:
    """`Boolean.parseBoolean(raw)`: "true" in any case is true, anything else false."""
    return raw is not None and len(raw) == 4 and raw.lower() == "true"


def quoted(raw: str, limit: int = _QUOTE) -> str:
    """A client-chosen value fit for a remark or a log line: cut, and without control
    characters (a newline in it must not forge a second log line)."""
    cut = raw[:limit]
    safe = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in cut)
    return repr(safe) + ("…" if len(raw) > limit else "")


# ------------------------------------------------------------------- text


def text(fields: Mapping[str, str], name: str, *, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """A required text field of 1..max_bytes UTF-8 bytes."""
    value = fields.get(name)
    if value is None:
        raise BadField(f"the header field {name} is missing")
    if value == "":
        raise BadField(f"the header field {name} is empty")
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise BadField(f"the header field {name} is over {max_bytes} bytes")
    return value


def optional_text(
    fields: Mapping[str, str], name: str, *, max_bytes: int = MAX_TEXT_BYTES
) -> str | None:
    """A text field that may be absent or empty (None)."""
    return text(fields, name, max_bytes=max_bytes) if fields.get(name) else None


# ------------------------------------------------------------------- numbers


def _number(name: str, raw: str, bits: int, low: int, high: int) -> int:
    value = java_integer(raw, bits=bits)
    if value is None:
        kind = "an int" if bits == 32 else "a long"  # Java's overflow is no number either
        raise BadField(f"the header field {name} is not a number ({kind}): {quoted(raw)}")
    if not low <= value <= high:
        raise BadField(f"the header field {name} is {value}, outside [{low}, {high}]")
    return value


def _required(fields: Mapping[str, str], name: str) -> str:
    raw = fields.get(name)
    if raw is None:
        raise BadField(f"the header field {name} is missing")
    return raw


def int32(
    fields: Mapping[str, str], name: str, *, low: int = INT32_MIN, high: int = INT32_MAX
) -> int:
    """A required Integer field, within [low, high]."""
    return _number(name, _required(fields, name), 32, low, high)


def int64(
    fields: Mapping[str, str], name: str, *, low: int = INT64_MIN, high: int = INT64_MAX
) -> int:
    """A required Long field, within [low, high]."""
    return _number(name, _required(fields, name), 64, low, high)


def optional_int32(
    fields: Mapping[str, str],
    name: str,
    default: T,
    *,
    low: int = INT32_MIN,
    high: int = INT32_MAX,
) -> int | T:
    """An Integer field that may be absent (`default`); present, it must parse. An empty
    value counts as absent: older clients write unset fields that way."""
    raw = fields.get(name)
    return default if raw is None or raw == "" else _number(name, raw, 32, low, high)


def optional_int64(
    fields: Mapping[str, str],
    name: str,
    default: T,
    *,
    low: int = INT64_MIN,
    high: int = INT64_MAX,
) -> int | T:
    """A Long field that may be absent (`default`); see `optional_int32`."""
    raw = fields.get(name)
    return default if raw is None or raw == "" else _number(name, raw, 64, low, high)


def boolean(fields: Mapping[str, str], name: str) -> bool:
    """A boolean field; absent is false (a primitive boolean's default)."""
    return java_boolean(fields.get(name))


def optional_boolean(fields: Mapping[str, str], name: str) -> bool | None:
    """A Boolean field that may be absent (None)."""
    raw = fields.get(name)
    return None if raw is None else java_boolean(raw)
