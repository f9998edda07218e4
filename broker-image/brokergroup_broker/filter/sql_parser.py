"""RocketMQ's SQL92 message selector: tokens and a recursive-descent parser with its
grammar (filter/src/main/java/org/apache/rocketmq/filter/parser/SelectorParser.jj) and the
type rules its expression constructors enforce (pure).

Grammar, loosest first (each binary level left-associative):

    selector   := or
    or         := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ( '=' comparison | '<>' comparison | IS NULL | IS NOT NULL )*
    comparison := unary ( ('>'|'>='|'<'|'<=') unary
                        | [NOT] (CONTAINS|STARTSWITH|ENDSWITH) string
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (',' string)* ')' )*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := literal | identifier | '(' or ')'
    literal    := string | decimal | floating | TRUE | FALSE | NULL

Keywords are case-insensitive; identifiers ([A-Za-z_$][A-Za-z0-9_$]*) name properties, case
kept. Strings are single-quoted, '' is a quote. Decimals are Integer when they fit, else
Long (an `L` suffix allowed; past Long.MAX_VALUE refused); floating literals are Doubles
(RocketMQ refuses one over Double.MAX_VALUE or under Double.MIN_VALUE, which includes 0.0).
Comments: `-- ...` to a line end, `/* ... */`.

NOT binds tightest, as in RocketMQ: `NOT a = 'x'` is `(NOT a) = 'x'`, which never matches
(write `NOT (a = 'x')`). The type rules (ComparisonExpression, SelectorParser's
asBooleanExpression) refuse: a non-condition where AND, OR, NOT or the whole selector needs
one (a property becomes a condition); a String, TRUE/FALSE/NULL or a condition beside
`>`, `>=`, `<`, `<=` (and so in BETWEEN); NULL beside `=` or `<>`; TRUE/FALSE = a non-condition
constant; constant BETWEEN bounds that are NULL or out of order; IN after anything but a
property.

One deliberate difference: RocketMQ's parser stops after the first complete expression and
ignores what follows (`a = 1 b = 2` is taken as `a = 1`); here text after the expression is
refused, since it is a typo far more often than intended. Size is bounded
(`MAX_EXPRESSION_CHARS`, `MAX_DEPTH` nesting levels of the compiled expression).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from brokergroup_broker.filter.errors import FilterRefused
from brokergroup_broker.filter.java_values import (
    INT64_MAX,
    EvaluationError,
    JLong,
    Value,
    compare,
    is_number,
)
from brokergroup_broker.filter.sql_nodes import (
    MAX_DEPTH,
    BooleanCast,
    Constant,
    Equal,
    In,
    Logic,
    Negate,
    Node,
    Not,
    Ordering,
    Property,
    StringTest,
)

#: The longest expression compiled (a subscription's subString is bounded the same in the
#: heartbeat: remoting_front/consumers.py).
MAX_EXPRESSION_CHARS = 4096

KEYWORDS = frozenset({
    "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
    "CONTAINS", "STARTSWITH", "ENDSWITH",
})  # fmt: skip

_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\n\r\f]+)
  | (?P<line_comment>--[^\n\r]*(?:\r\n|\n|\r))
  | (?P<block_comment>/\*[^*]*\*+(?:[^*/][^*]*\*+)*/)
  | (?P<floating>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<decimal>0|[1-9][0-9]*[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
  | (?P<symbol><>|>=|<=|[=><(),+-])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: (
        str  # keyword (its upper-case text), "id", "string", "decimal", "floating", a symbol, "end"
    )
    text: str
    position: int


def tokenize(text: str) -> list[Token]:
    """The tokens of `text`, ending with an "end" token; FilterRefused at a character no
    token starts with (JavaCC's longest match: a floating literal before a decimal)."""
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise FilterRefused(
                f"Invalid MessageSelector: unexpected character {text[position]!r} "
                f"at column {position + 1}"
            )
        kind = match.lastgroup
        assert kind is not None
        value = match.group()
        if kind == "word":
            upper = value.upper()
            tokens.append(Token(upper if upper in KEYWORDS else "id", value, position))
        elif kind == "symbol":
            tokens.append(Token(value, value, position))
        elif kind not in ("space", "line_comment", "block_comment"):
            tokens.append(Token(kind, value, position))
        position = match.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def parse(text: str) -> Node:
    """The compiled condition of a SQL92 selector; FilterRefused with the reason."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise FilterRefused(
            f"SQL92 expression of {len(text)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    return _Parser(tokenize(text)).selector()


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens
        self._at = 0
        self._nesting = 0

    # ------------------------------------------------------------------ token access

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._at + ahead, len(self._tokens) - 1)]

    def _take(self, kind: str) -> Token:
        token = self._peek()
        if token.kind != kind:
            raise self._unexpected(f"expected {kind}")
        self._at += 1
        return token

    def _unexpected(self, wanted: str) -> FilterRefused:
        token = self._peek()
        seen = "the end" if token.kind == "end" else repr(token.text)
        return FilterRefused(
            f"Invalid MessageSelector: {wanted}, found {seen} at column {token.position + 1}"
        )

    # ------------------------------------------------------------------ grammar

    def selector(self) -> Node:
        node = _as_condition(self._or())
        if self._peek().kind != "end":
            raise self._unexpected("expected the end of the expression")
        return node

    def _or(self) -> Node:
        operands = [self._and()]
        while self._peek().kind == "OR":
            self._at += 1
            operands.append(self._and())
        return _logic(False, operands)

    def _and(self) -> Node:
        operands = [self._equality()]
        while self._peek().kind == "AND":
            self._at += 1
            operands.append(self._equality())
        return _logic(True, operands)

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            kind = self._peek().kind
            if kind in ("=", "<>"):
                self._at += 1
                equal = _equal(left, self._comparison())
                left = equal if kind == "=" else Not(equal)
            elif kind == "IS" and self._peek(1).kind == "NULL":
                self._at += 2
                left = Equal(left, Constant(None))
            elif kind == "IS" and self._peek(1).kind == "NOT" and self._peek(2).kind == "NULL":
                self._at += 3
                left = Not(Equal(left, Constant(None)))
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            kind = self._peek().kind
            if kind in (">", ">=", "<", "<="):
                self._at += 1
                left = _ordering(kind, left, self._unary())
                continue
            negated = kind == "NOT"
            operator = self._peek(1).kind if negated else kind
            if operator not in ("CONTAINS", "STARTSWITH", "ENDSWITH", "BETWEEN", "IN"):
                return left
            self._at += 2 if negated else 1
            if operator == "BETWEEN":
                low = self._unary()
                self._take("AND")
                high = self._unary()
                left = _between(left, low, high, negated)
            elif operator == "IN":
                left = self._in(left, negated)
            else:
                left = StringTest(operator, left, self._string(), negated)

    def _in(self, left: Node, negated: bool) -> Node:
        self._take("(")
        values = [self._string()]
        while self._peek().kind == ",":
            self._at += 1
            values.append(self._string())
        self._take(")")
        if not isinstance(left, Property):
            raise FilterRefused(f"Expected a property for In expression, got: {_show(left)}")
        return In(left, frozenset(values), negated)

    def _unary(self) -> Node:
        kind = self._peek().kind
        if kind not in ("+", "-", "NOT", "("):
            return self._primary()
        self._nesting += 1
        if self._nesting > MAX_DEPTH:
            raise FilterRefused(f"SQL92 expression nests deeper than {MAX_DEPTH} levels")
        try:
            if kind == "(":
                return self._primary()
            self._at += 1
            operand = self._unary()
            if kind == "+":
                return operand
            if kind == "-":
                return Negate(operand)
            return Not(_as_condition(operand))
        finally:
            self._nesting -= 1

    def _primary(self) -> Node:
        token = self._peek()
        kind = token.kind
        if kind == "(":
            self._at += 1
            inner = self._or()
            self._take(")")
            return inner
        if kind == "id":
            self._at += 1
            return Property(token.text)
        if kind == "string":
            return Constant(self._string())
        self._at += 1
        if kind == "decimal":
            return Constant(_decimal(token.text))
        if kind == "floating":
            return Constant(_floating(token.text))
        if kind in ("TRUE", "FALSE"):
            return Constant(kind == "TRUE")
        if kind == "NULL":
            return Constant(None)
        self._at -= 1
        raise self._unexpected("expected a literal, a property or '('")

    def _string(self) -> str:
        return self._take("string").text[1:-1].replace("''", "'")


# ---------------------------------------------------------------------- constructors


def _show(node: Node) -> str:
    if isinstance(node, Constant):
        value = node.value
        if value is None:
            return "NULL"
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return repr(value) if isinstance(value, float) else str(int(value))
    if isinstance(node, Property):
        return node.name
    return "a condition"


def _decimal(text: str) -> Value:
    """ConstantExpression.createFromDecimal: Integer if it fits, else Long."""
    value = int(text.rstrip("lL"))
    if value > INT64_MAX:
        raise FilterRefused(f"decimal literal {text} is beyond Long.MAX_VALUE")
    return value if value < (1 << 31) else JLong(value)


def _floating(text: str) -> float:
    """ConstantExpression.createFloat."""
    value = float(text)
    if value > 1.7976931348623157e308:
        raise FilterRefused(f"{text} is greater than {1.7976931348623157e308!r}")
    if value < 5e-324:
        raise FilterRefused(f"{text} is less than {5e-324!r} (Double.MIN_VALUE)")
    return value


def _as_condition(node: Node) -> Node:
    """SelectorParser.asBooleanExpression."""
    if node.boolean:
        return node
    if isinstance(node, Property):
        return BooleanCast(node)
    raise FilterRefused(f"Expression will not result in a boolean value: {_show(node)}")


def _logic(conjunction: bool, operands: list[Node]) -> Node:
    if len(operands) == 1:
        return operands[0]
    conditions = [_as_condition(o) for o in operands]
    flat: list[Node] = []
    for c in conditions:  # a parenthesised chain of the same kind joins this one
        if isinstance(c, Logic) and c.conjunction == conjunction:
            flat.extend(c.operands)
        else:
            flat.append(c)
    return Logic(conjunction, tuple(flat))


def _check_orderable(node: Node) -> None:
    """ComparisonExpression.checkLessThanOperand."""
    if isinstance(node, Constant):
        if not is_number(node.value):
            raise FilterRefused(f"Value '{_show(node)}' cannot be compared.")
    elif node.boolean:
        raise FilterRefused("Value 'a condition' cannot be compared.")


def _ordering(symbol: str, left: Node, right: Node) -> Node:
    _check_orderable(left)
    _check_orderable(right)
    return Ordering(symbol, left, right)


def _equal(left: Node, right: Node) -> Node:
    """ComparisonExpression.createEqual: checkEqualOperand on both sides, then
    checkEqualOperandCompatability."""
    for side in (left, right):
        if isinstance(side, Constant) and side.value is None:
            raise FilterRefused("'NULL' cannot be compared.")
    constants = isinstance(left, Constant) and isinstance(right, Constant)
    if constants and left.boolean and not right.boolean:
        raise FilterRefused(f"'{_show(left)}' cannot be compared with '{_show(right)}'")
    return Equal(left, right)


def _between(value: Node, low: Node, high: Node, negated: bool) -> Node:
    """createBetween (value >= low AND value <= high, constant bounds checked first) and
    createNotBetween (value < low OR value > high)."""
    if negated:
        return Logic(False, (_ordering("<", value, low), _ordering(">", value, high)))
    if isinstance(low, Constant) and isinstance(high, Constant):
        if low.value is None or high.value is None:
            raise FilterRefused("Illegal values of between, values can not be null!")
        try:
            order = compare(high.value, low.value)
        except EvaluationError as exc:
            raise FilterRefused(f"Illegal values of between: {exc}") from exc
        if order < 0:
            raise FilterRefused(
                f"Illegal values of between, left value({_show(low)}) must less than or "
                f"equal to right value({_show(high)})"
            )
    return Logic(True, (_ordering(">=", value, low), _ordering("<=", value, high)))
