"""Tag subscriptions (RocketMQ's ExpressionType TAG): `*` or "TagA || TagB" (pure).

FilterAPI.buildSubscriptionData: an empty expression or exactly `*` takes every message;
otherwise the text is split on `||` (Java's String.split: trailing empty parts dropped, no
part left is an error), each part trimmed, empty parts skipped; the tags' codes are Java's
String.hashCode, the value the consume queue holds as each entry's tagsCode
(store/message.py `tags_code`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from brokergroup_broker.filter.errors import FilterRefused
from brokergroup_broker.store.message import PROPERTY_TAGS, java_string_hash

#: SubscriptionData.SUB_ALL.
SUB_ALL = "*"


@dataclass(frozen=True)
class TagFilter:
    """A TAG subscription: every message (`tags` None) or those whose TAGS is one of
    `tags`. `matches_tag_hash` is the consume queue check (isMatchedByConsumeQueue: no
    record is read for a miss); `matches` re-checks the real tag, so two tags with one
    hash ("Aa" and "BB") are told apart before a body is sent (RocketMQ's broker leaves
    that to the client's PullAPIWrapper.processPullResult, which re-checks tagsSet)."""

    expression: str
    tags: frozenset[str] | None
    codes: frozenset[int]
    expression_type: str = "TAG"

    @property
    def matches_all(self) -> bool:
        return self.tags is None

    def matches_tag_hash(self, tags_code: int) -> bool:
        return self.tags is None or tags_code in self.codes

    def matches(self, properties: Mapping[str, str]) -> bool:
        return self.tags is None or properties.get(PROPERTY_TAGS) in self.tags


def compile_tags(expression: str | None) -> TagFilter:
    """A TAG subscription's filter; FilterRefused when the text has no part at all."""
    text = expression or ""
    if text in ("", SUB_ALL):
        return TagFilter(SUB_ALL, None, frozenset())
    parts = text.split("||")
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings
        parts.pop()
    if not parts:
        raise FilterRefused(f"tag expression {text!r} has no tag (subString split error)")
    tags = frozenset(p.strip() for p in parts if p.strip())
    return TagFilter(text, tags, frozenset(map(java_string_hash, tags)))
