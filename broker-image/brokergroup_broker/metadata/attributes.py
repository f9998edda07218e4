"""Topic and group attributes as RocketMQ keeps them (common/attribute: AttributeParser,
AttributeUtil.alterCurrentAttributes, TopicAttributes, SubscriptionGroupAttributes).

A request carries a modification, `+key=value,+key2=value2,-key3` (AttributeParser); the
stored attributes are plain `key -> value`. Creating an entry takes only `+` keys; updating
adds or changes `+` keys and deletes `-` keys (which must exist); a key that is not
changeable may be set only on creation. Only the keys RocketMQ 5.3 knows are accepted
(TopicAttributes.ALL; SubscriptionGroupAttributes.ALL is empty), with their values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .errors import BadMetadata

#: Attributes one entry holds at most, and their lengths.
MAX_ATTRIBUTES = 16
MAX_ATTRIBUTE_KEY = 64
MAX_ATTRIBUTE_VALUE = 256


@dataclass(frozen=True)
class AttributeRule:
    changeable: bool
    values: frozenset[str]


#: TopicAttributes.ALL of RocketMQ 5.3.1 (reserve.time needs the tiered store: refused, as
#: a broker without it refuses it; MIXED: enableMixedMessageType is off).
TOPIC_ATTRIBUTES: Mapping[str, AttributeRule] = {
    "queue.type": AttributeRule(False, frozenset({"BatchCQ", "SimpleCQ"})),
    "cleanup.policy": AttributeRule(False, frozenset({"DELETE", "COMPACTION"})),
    "message.type": AttributeRule(
        True, frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION"})
    ),
}
#: SubscriptionGroupAttributes.ALL: none.
GROUP_ATTRIBUTES: Mapping[str, AttributeRule] = {}


def parse_modification(text: str | None) -> dict[str, str]:
    """AttributeParser.parseToMap: `+k=v,-k2` → {"+k": "v", "-k2": ""}."""
    if not text:
        return {}
    result: dict[str, str] = {}
    for kv in text.split(","):
        if "=" in kv:
            key, _, value = kv.partition("=")
            value = value.split("=", 1)[0]  # Java's split("=")[1]
            if "+" not in key:
                raise BadMetadata(f"add/alter attribute format is wrong: {key[:MAX_ATTRIBUTE_KEY]}")
        else:
            key, value = kv, ""
            if "-" not in key:
                raise BadMetadata(f"delete attribute format is wrong: {key[:MAX_ATTRIBUTE_KEY]}")
        if key in result:
            raise BadMetadata(f"key duplication: {key[:MAX_ATTRIBUTE_KEY]}")
        result[key] = value
        if len(result) > MAX_ATTRIBUTES:
            raise BadMetadata(f"more than {MAX_ATTRIBUTES} attributes")
    return result


def alter(
    current: Mapping[str, str],
    modification: Mapping[str, str],
    *,
    create: bool,
    rules: Mapping[str, AttributeRule],
) -> dict[str, str]:
    """AttributeUtil.alterCurrentAttributes: the attributes after `modification`."""
    result = dict(current)
    seen: set[str] = set()
    for key, value in modification.items():
        sign, real = key[:1], key[1:]
        rule = rules.get(real)
        if rule is None:
            raise BadMetadata(f"unsupported key: {real[:MAX_ATTRIBUTE_KEY]}")
        if real in seen:
            raise BadMetadata(f"alter duplication key. key: {real}")
        seen.add(real)
        if sign == "+":
            if not create and not rule.changeable:
                raise BadMetadata(f"attempt to update an unchangeable attribute. key: {real}")
            if value not in rule.values:
                raise BadMetadata(
                    f"value is not in set: {sorted(rule.values)}, key: {real}, "
                    f"value: {value[:MAX_ATTRIBUTE_VALUE]}"
                )
            result[real] = value
        elif sign == "-" and not create:
            if real not in result:
                raise BadMetadata(f"attempt to delete a nonexistent key: {real}")
            if not rule.changeable:
                raise BadMetadata(f"attempt to delete an unchangeable attribute. key: {real}")
            del result[real]
        elif create:
            raise BadMetadata(f"only add attribute is supported while creating topic. key: {real}")
        else:
            raise BadMetadata(f"wrong format key: {real}")
    return result


def check_stored(value: object, what: str, rules: Mapping[str, AttributeRule]) -> dict[str, str]:
    """Stored attributes (a file, a peer's snapshot): a map of known keys to their values."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_ATTRIBUTES:
        raise BadMetadata(f"{what}.attributes is not a map of at most {MAX_ATTRIBUTES} entries")
    for key, item in value.items():
        rule = rules.get(key)
        if rule is None or not isinstance(item, str) or item not in rule.values:
            raise BadMetadata(f"{what}.attributes has {str(key)[:MAX_ATTRIBUTE_KEY]!r}: not an "
                              "attribute RocketMQ knows with a value it allows")  # fmt: skip
    return dict(value)
