"""The compiled SQL92 expression: one node class per kind of RocketMQ's filter
expressions, each evaluating as its Java class does (pure).

Three-valued: a node answers True, False, None (SQL's unknown: a missing property) or, for
the value nodes, a number or a String (java_values.py). The rules, from
org.apache.rocketmq.filter.expression:

- AND / OR (LogicExpression) short-circuit left to right: AND is False at the first False
  operand, else None if one was None, else True; OR the other way round. A chain of them is
  one node here (the same answer and the same evaluation order as Java's left-nested
  pairs), so a long chain costs no recursion.
- NOT None is None (UnaryExpression.createNOT); a property used as a condition is None when
  missing and False otherwise (createBooleanCast: a String is not a Boolean).
- `=` (ComparisonExpression.doCreateEqual): None when only the left side is null, False
  when only the right side is, True when both are; else compare(...) == 0. `<>` is NOT `=`.
  IS NULL is `= NULL` through the same rule (never None).
- `>`, `>=`, `<`, `<=`: None when either side is null; two Strings are compared as
  Doubles (an unparsable one throws); else compare(...).
- IN / NOT IN: None for a null or non-String value, else membership (XOR NOT).
- CONTAINS / STARTSWITH / ENDSWITH (and NOT ...): False for an empty search text, a null
  or a non-String value, else the String test (XOR NOT).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from brokergroup_broker.filter.errors import FilterRefused
from brokergroup_broker.filter.java_values import (
    EvaluationError,
    Value,
    compare,
    java_double,
    negate,
)

Properties = Mapping[str, str]


#: Levels of nesting a compiled expression may have (AND/OR chains count one level), so
#: evaluating one never recurses deeper than this.
MAX_DEPTH = 64


class Node:
    """An expression node; `depth` is set as it is built (from its operands', no
    recursion), and a node deeper than MAX_DEPTH cannot be built."""

    #: Java's `instanceof BooleanExpression` (what may stand as a condition).
    boolean = False
    depth = 1

    def __post_init__(self) -> None:
        below = 0
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            for operand in value if isinstance(value, tuple) else (value,):
                if isinstance(operand, Node):
                    below = max(below, operand.depth)
        if below + 1 > MAX_DEPTH:
            raise FilterRefused(f"SQL92 expression nests deeper than {MAX_DEPTH} levels")
        object.__setattr__(self, "depth", below + 1)

    def evaluate(self, properties: Properties) -> Value:
        raise NotImplementedError


@dataclass(frozen=True)
class Constant(Node):
    """A literal. TRUE, FALSE and NULL are BooleanConstantExpressions (conditions); a
    number or a String is not."""

    value: Value

    @property
    def boolean(self) -> bool:  # type: ignore[override]
        return self.value is None or isinstance(self.value, bool)

    def evaluate(self, properties: Properties) -> Value:
        return self.value


@dataclass(frozen=True)
class Property(Node):
    name: str

    def evaluate(self, properties: Properties) -> Value:
        return properties.get(self.name)


@dataclass(frozen=True)
class Negate(Node):
    operand: Node

    def evaluate(self, properties: Properties) -> Value:
        return negate(self.operand.evaluate(properties))


@dataclass(frozen=True)
class BooleanCast(Node):
    """A property standing as a condition."""

    operand: Node
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        value = self.operand.evaluate(properties)
        if value is None:
            return None
        return value if isinstance(value, bool) else False


@dataclass(frozen=True)
class Not(Node):
    operand: Node
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        value = self.operand.evaluate(properties)
        return None if value is None else not value


@dataclass(frozen=True)
class Logic(Node):
    """AND (`conjunction`) or OR over two or more conditions, in order."""

    conjunction: bool
    operands: tuple[Node, ...]
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        decisive = not self.conjunction  # AND stops at False, OR at True
        unknown = False
        for operand in self.operands:
            value = operand.evaluate(properties)
            if value is None:
                unknown = True
            elif value is decisive:
                return decisive
        return None if unknown else not decisive


@dataclass(frozen=True)
class Equal(Node):
    left: Node
    right: Node
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        lv = self.left.evaluate(properties)
        rv = self.right.evaluate(properties)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return compare(lv, rv) == 0


#: The ordering comparisons, by symbol: what the sign of compare(...) answers.
ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


@dataclass(frozen=True)
class Ordering(Node):
    symbol: str
    left: Node
    right: Node
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        lv = self.left.evaluate(properties)
        if lv is None:
            return None
        rv = self.right.evaluate(properties)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            try:
                order = compare(java_double(lv), java_double(rv))
            except EvaluationError as exc:
                raise EvaluationError(
                    f"It's illegal to compare string by '{self.symbol}'. lv={lv}, rv={rv}"
                ) from exc
        else:
            order = compare(lv, rv)
        return bool(ORDERINGS[self.symbol](order))


@dataclass(frozen=True)
class In(Node):
    operand: Property
    values: frozenset[str]
    negated: bool
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        value = self.operand.evaluate(properties)
        if not isinstance(value, str):
            return None
        return (value in self.values) != self.negated


#: The String tests, by keyword.
STRING_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda value, search: search in value,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


@dataclass(frozen=True)
class StringTest(Node):
    keyword: str
    operand: Node
    search: str
    negated: bool
    boolean = True

    def evaluate(self, properties: Properties) -> Value:
        if not self.search:
            return False
        value = self.operand.evaluate(properties)
        if not isinstance(value, str):
            return False
        return bool(STRING_TESTS[self.keyword](value, self.search)) != self.negated
