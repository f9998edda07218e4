"""Server-side message filters: RocketMQ's TAG and SQL92 subscriptions (pure).

The one entry point is `compile_filter(expression_type, expression)`, which answers a
`MessageFilter` or raises `FilterRefused` with the reason. A filter is asked twice per
message, as RocketMQ's MessageFilter is: `matches_tag_hash(tagsCode)` on the consume queue
entry, before the record is read (a miss costs no commit log read), then
`matches(properties)` on the stored message's properties (the real TAGS for a tag
subscription, which settles a hash collision; the SQL92 condition for SQL92, evaluated on
every property the record carries, system ones such as TAGS and KEYS included, as
MessageEvaluationContext does). Pulls (remoting_front/pulls.py), and any other read path,
use exactly this API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.filter.errors import FilterRefused
from brokergroup_broker.filter.java_values import EvaluationError
from brokergroup_broker.filter.sql_nodes import MAX_DEPTH, Node
from brokergroup_broker.filter.sql_parser import MAX_EXPRESSION_CHARS, parse
from brokergroup_broker.filter.tags import SUB_ALL, TagFilter, compile_tags

#: ExpressionType's names.
TAG = "TAG"
SQL92 = "SQL92"

__all__ = [
    "MAX_DEPTH",
    "MAX_EXPRESSION_CHARS",
    "SQL92",
    "SUB_ALL",
    "TAG",
    "FilterRefused",
    "MessageFilter",
    "SqlFilter",
    "TagFilter",
    "compile_filter",
    "is_tag_type",
]


class MessageFilter(Protocol):
    """What a read path asks of a subscription's filter."""

    @property
    def expression_type(self) -> str: ...

    @property
    def expression(self) -> str: ...

    @property
    def matches_all(self) -> bool:
        """Every message matches (TAG `*`): a read path may skip the filter."""
        ...

    def matches_tag_hash(self, tags_code: int) -> bool: ...

    def matches(self, properties: Mapping[str, str]) -> bool: ...


@dataclass(frozen=True)
class SqlFilter:
    """A compiled SQL92 subscription. It cannot judge a consume queue entry (RocketMQ
    would consult its optional bloom-filter bit map there; none is kept here), so every
    entry's record is read and `matches` decides: True only when the condition is TRUE
    (unknown and a Java exception both mean no match)."""

    expression: str
    condition: Node
    expression_type: str = SQL92
    matches_all = False

    def matches_tag_hash(self, tags_code: int) -> bool:
        return True

    def matches(self, properties: Mapping[str, str]) -> bool:
        try:
            return self.condition.evaluate(properties) is True
        except EvaluationError:
            return False


def is_tag_type(expression_type: str | None) -> bool:
    """ExpressionType.isTagType: no type, an empty one or TAG."""
    return not expression_type or expression_type == TAG


def compile_filter(expression_type: str | None, expression: str | None) -> MessageFilter:
    """FilterAPI.build + FilterFactory: a TAG (or untyped) subscription's tag filter, or a
    SQL92 one's compiled condition; FilterRefused for anything else."""
    if is_tag_type(expression_type):
        return compile_tags(expression)
    if expression_type != SQL92:
        raise FilterRefused(
            f"expression type {expression_type!r} is not supported (only {TAG} and {SQL92})"
        )
    if not expression:
        raise FilterRefused(f"Expression can't be null! {SQL92}")
    return SqlFilter(expression, parse(expression))
