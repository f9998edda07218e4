"""RocketMQ's SQL92 message selector (brokergroup_broker.filter, docs/filters.md).

The evaluator is checked against a reference written here independently: hypothesis builds
expression trees (comparisons, BETWEEN, IN, IS [NOT] NULL, AND/OR/NOT, properties used as
conditions, unary minus; string, Integer, Long and Double constants), prints each as SQL
text (every operand parenthesised, so the printed tree is the parsed one), and a direct
interpreter of the tree, following the Java classes of org.apache.rocketmq.filter.expression
line by line over tagged values, must agree with the compiled filter on generated
properties (missing ones, numbers, non-numbers, NaN, blanks). Then: what the parser refuses
(syntax, RocketMQ's type rules, size and depth) and RocketMQ's grammar quirks kept.
"""

from __future__ import annotations

import math
import struct
import unicodedata
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.filter import (
    MAX_DEPTH,
    MAX_EXPRESSION_CHARS,
    FilterRefused,
    compile_filter,
)

# ------------------------------------------------------------------ the reference
# A value is None or (kind, python value); kinds: I Integer, L Long, D Double, S String,
# B Boolean. Raising Boom stands for a Java exception: the message does not match.


class Boom(Exception):
    pass


@dataclass(frozen=True)
class Tree:
    op: str
    args: tuple[Any, ...] = ()


def lit(kind: str, value: object) -> Tree:
    return Tree("lit", ((kind, value),))


def sql(t: Tree) -> str:
    """The tree as selector text, every operand in parentheses."""
    a = t.args
    if t.op == "lit":
        kind, v = a[0]
        if kind == "S":
            return "'" + str(v).replace("'", "''") + "'"
        if kind == "B":
            return "NULL" if v is None else ("TRUE" if v else "FALSE")
        if kind == "L":
            return f"{v}L"
        return repr(v) if kind == "D" else str(v)
    if t.op == "prop":
        return str(a[0])
    if t.op == "cast":
        return sql(a[0])
    if t.op == "neg":
        return f"-({sql(a[0])})"
    if t.op == "not":
        return f"NOT ({sql(a[0])})"
    if t.op in ("AND", "OR", "=", "<>", ">", ">=", "<", "<="):
        return f"({sql(a[0])}) {t.op} ({sql(a[1])})"
    if t.op in ("isnull", "isnotnull"):
        return f"({sql(a[0])}) IS {'NOT ' if t.op == 'isnotnull' else ''}NULL"
    if t.op in ("between", "notbetween"):
        word = "NOT BETWEEN" if t.op == "notbetween" else "BETWEEN"
        return f"({sql(a[0])}) {word} ({sql(a[1])}) AND ({sql(a[2])})"
    if t.op in ("in", "notin"):
        items = ", ".join("'" + s.replace("'", "''") + "'" for s in a[1])
        return f"{a[0]} {'NOT IN' if t.op == 'notin' else 'IN'} ({items})"
    raise AssertionError(t.op)


def parse_int(s: str, bits: int) -> int:
    """Integer/Long.parseInt: Character.digit takes any (BMP) Unicode decimal digit, so
    Integer.valueOf("\u0663") is 3 (checked on a JDK 17)."""
    digits = s[1:] if s[:1] in "+-" else s
    values = [unicodedata.decimal(c, None) if ord(c) <= 0xFFFF else None for c in digits]
    if not digits or None in values:
        raise Boom("NumberFormatException")
    v = 0
    for d in values:
        assert d is not None
        v = v * 10 + d
    v = -v if s[0] == "-" else v
    if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
        raise Boom("NumberFormatException")
    return v


def parse_double(s: str) -> float:
    s = s.strip(" \t\n")
    try:
        if s in ("NaN", "Infinity", "-Infinity", "+Infinity"):
            return float(s)
        # Java's FloatingDecimal reads ASCII digits only (Double.valueOf("\u0663") throws).
        if not s.isascii() or any(c.isalpha() and c not in "eE" for c in s) or "_" in s:
            raise ValueError
        return float(s)
    except ValueError:
        raise Boom("NumberFormatException") from None


def bits(d: float) -> int:
    return 0x7FF8000000000000 if math.isnan(d) else struct.unpack(">q", struct.pack(">d", d))[0]


def cmp_same(kind: str, x: Any, y: Any) -> int:
    if kind == "D":
        assert isinstance(x, float) and isinstance(y, float)
        if x < y:
            return -1
        if x > y:
            return 1
        return (bits(x) > bits(y)) - (bits(x) < bits(y))
    if kind == "S":
        assert isinstance(x, str) and isinstance(y, str)
        return 0 if x == y else (-1 if x.encode("utf-16-be") < y.encode("utf-16-be") else 1)
    return int((x > y) - (x < y))


def jcompare(lv: tuple[str, Any], rv: tuple[str, Any]) -> int:
    """ComparisonExpression.__compare with convertStringExpressions."""
    (lk, x), (rk, y) = lv, rv
    if lk == rk:
        return cmp_same(lk, x, y)
    num = {"I": 0, "L": 1, "D": 2}
    if lk == "B":
        if rk == "S":
            raise Boom("ClassCastException")
        return -1
    if lk in num and rk in num:
        if "D" in (lk, rk):
            return cmp_same("D", float(x), float(y))
        return cmp_same("I", x, y)
    if lk in num and rk == "S":
        conv = {"I": lambda s: parse_int(s, 32), "L": lambda s: parse_int(s, 64), "D": parse_double}
        return cmp_same(lk, x, conv[lk](y))
    if lk == "S":
        if rk == "B":
            return cmp_same("B", str(x).lower() == "true", y)
        conv = {"I": lambda s: parse_int(s, 32), "L": lambda s: parse_int(s, 64), "D": parse_double}
        return cmp_same(rk, conv[rk](x), y)
    return -1


def ev(t: Tree, props: dict[str, str]) -> tuple[str, Any] | None:
    a = t.args
    if t.op == "lit":
        v = a[0]
        return None if v[1] is None else v
    if t.op == "prop":
        s = props.get(a[0])
        return None if s is None else ("S", s)
    if t.op == "cast":
        v = ev(a[0], props)
        return None if v is None else ("B", v[1] if v[0] == "B" else False)
    if t.op == "neg":
        v = ev(a[0], props)
        return (v[0], -v[1]) if v is not None and v[0] in "ILD" else None
    if t.op == "not":
        v = ev(a[0], props)
        return None if v is None else ("B", not v[1])
    if t.op in ("AND", "OR"):
        stop = t.op == "OR"
        left = ev(a[0], props)
        if left is not None and left[1] is stop:
            return ("B", stop)
        right = ev(a[1], props)
        if right is not None and right[1] is stop:
            return ("B", stop)
        return None if left is None or right is None else ("B", not stop)
    if t.op in ("=", "<>", "isnull", "isnotnull"):
        if t.op in ("isnull", "isnotnull"):
            lv, rv = ev(a[0], props), None
        else:
            lv, rv = ev(a[0], props), ev(a[1], props)
        if (lv is None) != (rv is None):
            out = None if lv is None else ("B", False)
        elif lv is None:
            out = ("B", True)
        else:
            assert rv is not None
            out = ("B", jcompare(lv, rv) == 0)
        if t.op in ("<>", "isnotnull"):
            return None if out is None else ("B", not out[1])
        return out
    if t.op in (">", ">=", "<", "<="):
        lv = ev(a[0], props)
        if lv is None:
            return None
        rv = ev(a[1], props)
        if rv is None:
            return None
        if lv[0] == rv[0] == "S":
            c = cmp_same("D", parse_double(lv[1]), parse_double(rv[1]))
        else:
            c = jcompare(lv, rv)
        return ("B", {">": c > 0, ">=": c >= 0, "<": c < 0, "<=": c <= 0}[t.op])
    if t.op == "between":
        return ev(Tree("AND", (Tree(">=", (a[0], a[1])), Tree("<=", (a[0], a[2])))), props)
    if t.op == "notbetween":
        return ev(Tree("OR", (Tree("<", (a[0], a[1])), Tree(">", (a[0], a[2])))), props)
    if t.op in ("in", "notin"):
        s = props.get(a[0])
        return None if s is None else ("B", (s in a[1]) != (t.op == "notin"))
    raise AssertionError(t.op)


def reference_matches(t: Tree, props: dict[str, str]) -> bool:
    try:
        return ev(t, props) == ("B", True)
    except Boom:
        return False


# ------------------------------------------------------------------ generated trees

NAMES = ["a", "b", "c"]
PROP = st.sampled_from(NAMES).map(lambda n: Tree("prop", (n,)))
INT = st.integers(0, 60).map(lambda v: lit("I", v))
LONG = st.integers(1 << 31, 1 << 40).map(lambda v: lit("L", v))
DOUBLE = st.sampled_from([0.5, 2.5, 3.0, 1e3, 7.25, 1e-3]).map(lambda v: lit("D", v))
NUMBER = st.one_of(INT, LONG, DOUBLE)
STRING = st.sampled_from(["x", "y", "3", "it's", "", "٣"]).map(lambda v: lit("S", v))
ORDERABLE = st.one_of(PROP, NUMBER, NUMBER.map(lambda n: Tree("neg", (n,))),
                      PROP.map(lambda p: Tree("neg", (p,))))  # fmt: skip


def conditions(inner: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    # A TRUE/FALSE constant left of `=` with a non-condition constant right is refused
    # (checkEqualOperandCompatability), and NULL beside `=` always: not generated here.
    # A property as a condition (cast) prints as the bare name, which beside `=` is the
    # property itself: casts stand only where a condition is needed.
    condition = inner.filter(lambda t: t.op not in ("lit", "cast"))
    equal_operand = st.one_of(PROP, NUMBER, STRING, condition)
    right_operand = st.one_of(equal_operand, st.sampled_from([lit("B", True), lit("B", False)]))
    bounds = st.tuples(NUMBER, NUMBER).map(
        lambda p: p if cmp_same("D", float(p[0].args[0][1]), float(p[1].args[0][1])) <= 0
        else (p[1], p[0])
    )  # fmt: skip
    return st.one_of(
        st.builds(lambda o, x, y: Tree(o, (x, y)), st.sampled_from(["=", "<>"]),
                  equal_operand, right_operand),
        st.builds(lambda o, x, y: Tree(o, (x, y)), st.sampled_from([">", ">=", "<", "<="]),
                  ORDERABLE, ORDERABLE),
        st.builds(lambda o, v, b: Tree(o, (v, *b)), st.sampled_from(["between", "notbetween"]),
                  st.one_of(PROP, NUMBER), bounds),
        st.builds(lambda o, p, items: Tree(o, (p.args[0], frozenset(items))),
                  st.sampled_from(["in", "notin"]), PROP,
                  st.lists(st.sampled_from(["x", "y", "3", "true"]), min_size=1, max_size=3)),
        st.builds(lambda o, v: Tree(o, (v,)), st.sampled_from(["isnull", "isnotnull"]),
                  st.one_of(PROP, condition)),
        st.builds(lambda o, x, y: Tree(o, (x, y)), st.sampled_from(["AND", "OR"]), inner, inner),
        inner.map(lambda c: Tree("not", (c,))),
    )  # fmt: skip


BASE = st.one_of(
    PROP.map(lambda p: Tree("cast", (p,))),
    st.sampled_from([lit("B", True), lit("B", False), lit("B", None)]),
)
CONDITION = st.recursive(BASE, conditions, max_leaves=12)
VALUES = st.sampled_from(
    ["3", "-2", "0", "3000000000", "2.5", "1e3", " 7 ", "NaN", "x", "y", "true", "TRUE",
     "", "٣", "+5", "0.5", "-0.0", "Infinity"]
)  # fmt: skip
PROPERTIES = st.dictionaries(st.sampled_from(NAMES), VALUES, max_size=3)


@settings(max_examples=600, deadline=None)
@given(CONDITION, st.lists(PROPERTIES, min_size=1, max_size=6))
def test_evaluator_agrees_with_the_reference_interpreter(
    tree: Tree, messages: list[dict[str, str]]
) -> None:
    text = sql(tree)
    compiled = compile_filter("SQL92", text)
    for props in messages:
        assert compiled.matches(props) == reference_matches(tree, props), (text, props)


# ------------------------------------------------------------------ fixed cases


def matches(expression: str, **props: str) -> bool:
    return compile_filter("SQL92", expression).matches(props)


def test_the_issue_selector_and_rocketmq_null_rules() -> None:
    sel = "a BETWEEN 3 AND 7 AND b = 'x'"
    assert [matches(sel, a=str(i), b="x") for i in range(1, 10)] == [
        False, False, True, True, True, True, True, False, False,
    ]  # fmt: skip
    assert not matches(sel, a="5")  # b missing: unknown, not a match
    assert not matches(sel, a="5.5", b="x")  # Integer.valueOf("5.5") throws: no match
    assert matches("a IS NULL") and not matches("a IS NULL", a="")
    assert matches("a IS NOT NULL", a="") and not matches("a IS NOT NULL")
    assert not matches("a <> 'x'") and matches("a <> 'x'", a="y")  # null <> is unknown
    assert matches("NOT (a IN ('x', 'y'))", a="z") and not matches("NOT (a IN ('x'))")
    assert matches("a = b")  # both missing: Java's equal(null, null) is TRUE
    assert matches("'x' = a", a="x") and not matches("'x' = a")
    assert matches("a > 2", a="10") and not matches("a > 2", a="x")
    assert matches("a > b", a="10", b="9.5")  # two Strings compare as Doubles
    assert matches("TAGS = 'TagA' AND KEYS IS NOT NULL", TAGS="TagA", KEYS="k1")
    assert matches("a = TRUE", a="TRUE") and not matches("a = TRUE", a="yes")
    assert matches("x = 3000000000", x="3000000000") and not matches("x = 3", x="3000000000")
    assert matches("a CONTAINS 'b'", a="abc") and not matches("a NOT CONTAINS 'b'")


def test_not_binds_tightest_as_in_rocketmq() -> None:
    # (NOT a) = 'x': a Boolean compared with a String throws in Java; never a match.
    assert not matches("NOT a = 'x'", a="y") and not matches("NOT a = 'x'", a="x")
    assert matches("NOT (a = 'x')", a="y")
    assert matches("NOT a", a="anything") and not matches("NOT a")  # a String is not TRUE
    assert matches("a OR b = 1 AND c = 2", a="z") is False  # a as a condition is FALSE
    assert matches("b = 1 AND c = 2 OR d IS NULL")  # AND before OR


def test_keywords_are_case_insensitive_and_comments_skipped() -> None:
    assert matches("a between 1 and 3 /* block */ and b in ('q') -- line\n", a="2", b="q")
    assert matches("a Is Not Null", a="1")


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("", "can't be null"),
        ("a >", "expected a literal"),
        ("a = 1 b", "expected the end"),
        ("a = 'x", "unexpected character"),
        ("a != 1", "unexpected character"),
        ("a > 'x'", "cannot be compared"),
        ("a > TRUE", "cannot be compared"),
        ("a > (b = 1)", "cannot be compared"),
        ("a = NULL", "'NULL' cannot be compared"),
        ("TRUE = 1", "cannot be compared with"),
        ("a BETWEEN 5 AND 3", "must less than or equal"),
        ("a BETWEEN NULL AND 3", "can not be null"),
        ("1 IN ('a')", "Expected a property"),
        ("a IN (1)", "expected string"),
        ("NOT 1", "will not result in a boolean"),
        ("1", "will not result in a boolean"),
        ("a AND 'x'", "will not result in a boolean"),
        ("a = 0.0", "less than"),
        ("a = 1e400", "greater than"),
        ("a = 9223372036854775808", "beyond Long.MAX_VALUE"),
        ("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), "deeper than"),
        ("a = 1" + " = TRUE" * MAX_DEPTH, "deeper than"),
        ("a = 1 AND " * 500 + "a = 1", f"at most {MAX_EXPRESSION_CHARS}"),
    ],
)
def test_refusals_say_why(expression: str, reason: str) -> None:
    with pytest.raises(FilterRefused, match=reason.replace("(", r"\(")):
        compile_filter("SQL92", expression)


def test_long_flat_chains_within_the_bounds_compile_and_evaluate() -> None:
    chain = " AND ".join(f"a{i} IS NULL" for i in range(200))  # 200 terms, one level
    assert len(chain) <= MAX_EXPRESSION_CHARS
    assert matches(chain) and not matches(chain, a7="1")


def test_unknown_expression_type_is_refused() -> None:
    with pytest.raises(FilterRefused, match="not supported"):
        compile_filter("CLASS", "x")
