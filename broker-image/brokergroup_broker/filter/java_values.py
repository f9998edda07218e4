"""The values a SQL92 filter computes with, as RocketMQ's filter module (Java) has them
(pure).

A property's value is a String (or null when the message lacks it); constants are
Integer, Long, Double, Boolean or String. Here: None, `str`, `bool`, `float` (Double),
`int` (Integer) and `JLong` (Long): the Integer/Long difference matters, because a String
compared with an Integer is read by Integer.valueOf (which refuses "3000000000") and with
a Long by Long.valueOf. `compare` is ComparisonExpression.__compare with its string
conversions on (SelectorParser.parse sets CONVERT_STRING_EXPRESSIONS); any Java exception
it would throw is `EvaluationError`, and a filter that throws does not match the message
(ExpressionMessageFilter.isMatchedByCommitLog).
"""

from __future__ import annotations

import re
import struct

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


class JLong(int):
    """A Java Long (a plain `int` is a Java Integer)."""

    __slots__ = ()


Value = None | bool | int | float | str


class EvaluationError(Exception):
    """What a Java exception during evaluation becomes: the message does not match."""


def is_number(value: object) -> bool:
    """Java's `instanceof Number` (a Boolean is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _java_integer(text: str, low: int, high: int, kind: str) -> int:
    """Integer.parseInt / Long.parseLong, radix 10: an optional sign and at least one
    decimal digit (Character.digit: any BMP decimal digit), within range."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not all(ord(c) <= 0xFFFF and c.isdecimal() for c in body):
        raise EvaluationError(f'NumberFormatException: For input string: "{text}" ({kind})')
    value = int(body) * (-1 if text[0] == "-" else 1)
    if not low <= value <= high:
        raise EvaluationError(f'NumberFormatException: For input string: "{text}" ({kind})')
    return value


def java_integer(text: str) -> int:
    return _java_integer(text, INT32_MIN, INT32_MAX, "Integer")


def java_long(text: str) -> JLong:
    return JLong(_java_integer(text, INT64_MIN, INT64_MAX, "Long"))


_DECIMAL = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)
_HEX = re.compile(
    r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?"
)


def java_double(text: str) -> float:
    """Double.valueOf: leading and trailing characters up to U+0020 trimmed, then a
    decimal or hexadecimal floating literal (with an optional f/d suffix), NaN or
    Infinity."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    core = text[start:end]
    if _DECIMAL.fullmatch(core):
        digits = core.rstrip("fFdD") if core[-1:] in "fFdD" and "Infinity" not in core else core
        return float(digits)
    hexa = _HEX.fullmatch(core)
    if hexa:
        return float.fromhex(hexa.group(1) + "0x" + hexa.group(2))
    raise EvaluationError(f'NumberFormatException: For input string: "{text}" (Double)')


def java_boolean(text: str) -> bool:
    """Boolean.valueOf: "true" in any case, anything else false."""
    return len(text) == 4 and text.isascii() and text.lower() == "true"


def _double_bits(value: float) -> int:
    """Double.doubleToLongBits as a signed long (every NaN the one canonical NaN)."""
    if value != value:
        return 0x7FF8000000000000
    return int(struct.unpack(">q", struct.pack(">d", value))[0])


def double_compare(a: float, b: float) -> int:
    """Double.compare: -0.0 below 0.0, NaN above everything and equal to itself."""
    if a < b:
        return -1
    if a > b:
        return 1
    bits_a, bits_b = _double_bits(a), _double_bits(b)
    return (bits_a > bits_b) - (bits_a < bits_b)


def _kind(value: Value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, JLong):
        return "long"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    return "str"


def _same_kind(lv: Value, rv: Value, kind: str) -> int:
    if kind == "double":
        assert isinstance(lv, float) and isinstance(rv, float)
        return double_compare(lv, rv)
    if kind == "str":
        # String.compareTo is over UTF-16 code units; only its sign is used.
        a, b = str(lv).encode("utf-16-be"), str(rv).encode("utf-16-be")
        return (a > b) - (a < b)
    assert lv is not None and rv is not None and not isinstance(lv, str | float)
    assert not isinstance(rv, str | float)
    return (lv > rv) - (lv < rv)


def compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare(lv, rv, convertStringExpressions=true): both non-null.
    Values of two kinds are brought to one (a number widened, a String parsed as the other
    side's type); a pair it has no rule for compares as -1."""
    lk, rk = _kind(lv), _kind(rv)
    if lk == rk:
        return _same_kind(lv, rv, lk)
    if lk == "bool":
        if rk == "str":  # Boolean.valueOf((String) lv): lv is the Boolean
            raise EvaluationError("ClassCastException: Boolean cannot be cast to String")
        return -1
    if lk == "str":
        assert isinstance(lv, str)
        if rk == "bool":
            return _same_kind(java_boolean(lv), rv, "bool")
        if rk == "int":
            return _same_kind(java_integer(lv), rv, "int")
        if rk == "long":
            return _same_kind(java_long(lv), rv, "long")
        return _same_kind(java_double(lv), rv, "double")
    if rk == "str":
        assert isinstance(rv, str)
        parse = {"int": java_integer, "long": java_long, "double": java_double}[lk]
        return _same_kind(lv, parse(rv), lk)
    if rk == "bool":
        return -1
    # Two number kinds: Integer and Long compare exactly, with a Double as doubles.
    if lk == "double" or rk == "double":
        assert is_number(lv) and is_number(rv)
        return double_compare(float(lv), float(rv))  # type: ignore[arg-type]
    return _same_kind(int(lv), int(rv), "int")  # type: ignore[arg-type]


def negate(value: Value) -> Value:
    """UnaryExpression.createNegate: a number negated in its own type; anything else null."""
    if not is_number(value):
        return None
    if isinstance(value, JLong):
        return JLong(-value)
    return -value  # type: ignore[operator]
