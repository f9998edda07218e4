"""Topic and group names: RocketMQ's rules, in one place (pure; DESIGN.md §3.4b).

Every front end (the broker's remoting port, the name server) and the broker's store check a
name here before any table is touched or any byte is written:

- a topic is 1..127 characters from `[%|a-zA-Z0-9_-]` (TopicValidator: VALID_CHAR_BIT_MAP,
  TOPIC_MAX_LENGTH). The characters are ASCII, so characters and bytes are the same count:
  the v1 record keeps a topic's length in one byte.
- a consumer or producer group is 1..255 characters from the same set
  (Validators.checkGroup: CHARACTER_MAX_LENGTH, isTopicOrGroupIllegal), and — here, not in
  RocketMQ — a consumer group's retry topic (`%RETRY%` + group) and dead-letter topic
  (`%DLQ%` + group) must be topics too, so a consumer group is at most 120 characters. A
  longer one would make the broker announce a topic every name server refuses (RocketMQ's
  own name server refuses the whole registration then; docs/rocketmq-compatibility.md).

`topic_error` / `group_error` say why a name breaks its rule (None: it follows it);
`topic_name` / `group_name` read a header field by the rule and raise `BadField`
(SYSTEM_ERROR with the reason, as TopicValidator.validateTopic answers); `check_topic` /
`check_group` check a value from a body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from brokergroup_remoting.fields import BadField, quoted

#: TopicValidator.TOPIC_MAX_LENGTH.
TOPIC_MAX_LENGTH = 127
#: Validators.CHARACTER_MAX_LENGTH: a producer group's bound.
GROUP_MAX_LENGTH = 255
#: MixAll.RETRY_GROUP_TOPIC_PREFIX and DLQ_GROUP_TOPIC_PREFIX.
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: The longest consumer group whose retry and dead-letter topics are still topics (120).
CONSUMER_GROUP_MAX_LENGTH = TOPIC_MAX_LENGTH - max(
    len(RETRY_GROUP_TOPIC_PREFIX), len(DLQ_GROUP_TOPIC_PREFIX)
)
CHARSET = "[%|a-zA-Z0-9_-]"
TOPIC_RULE = f"1..{TOPIC_MAX_LENGTH} characters from {CHARSET} (RocketMQ's topic rule)"
GROUP_RULE = (
    f"1..{CONSUMER_GROUP_MAX_LENGTH} characters from {CHARSET} (RocketMQ's group rule, and "
    f"its {RETRY_GROUP_TOPIC_PREFIX} and {DLQ_GROUP_TOPIC_PREFIX} topics within "
    f"{TOPIC_MAX_LENGTH} characters)"
)
PRODUCER_GROUP_RULE = f"1..{GROUP_MAX_LENGTH} characters from {CHARSET} (RocketMQ's group rule)"

_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
_INVALID_CHAR = re.compile(r"[^%|a-zA-Z0-9_-]")


def _name_error(kind: str, name: str, max_length: int, rule: str) -> str | None:
    if _VALID.fullmatch(name) is not None:
        if len(name) <= max_length:
            return None
        return f"{kind} {quoted(name, 20)} is {len(name)} characters long; use {rule}"
    if not name:
        return f"the {kind} name is empty; use {rule}"
    bad = sorted(set(_INVALID_CHAR.findall(name)))
    shown = ", ".join(quoted(c) for c in bad[:5])
    return f"{kind} {quoted(name)} contains {shown}, not allowed; use {rule}"


def topic_error(topic: str) -> str | None:
    """Why `topic` is not a topic name, or None when it is."""
    return _name_error("topic", topic, TOPIC_MAX_LENGTH, TOPIC_RULE)


def group_error(group: str) -> str | None:
    """Why `group` is not a consumer group name (its retry and DLQ topics included)."""
    return _name_error("group", group, CONSUMER_GROUP_MAX_LENGTH, GROUP_RULE)


def producer_group_error(group: str) -> str | None:
    """Why `group` is not a producer group name (no retry topic: RocketMQ's 255)."""
    return _name_error("producer group", group, GROUP_MAX_LENGTH, PRODUCER_GROUP_RULE)


def is_topic(name: str) -> bool:
    return topic_error(name) is None


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def check_topic(value: object, what: str = "topic") -> str:
    """`value` (from a body) if it is a topic name; BadField naming `what` otherwise."""
    if not isinstance(value, str):
        raise BadField(f"{what} is not a string")
    error = topic_error(value)
    if error is not None:
        raise BadField(f"{what}: {error}")
    return value


def check_group(value: object, what: str = "group") -> str:
    """`value` (from a body) if it is a consumer group name; BadField otherwise."""
    if not isinstance(value, str):
        raise BadField(f"{what} is not a string")
    error = group_error(value)
    if error is not None:
        raise BadField(f"{what}: {error}")
    return value


def _field(fields: Mapping[str, str], name: str) -> str:
    value = fields.get(name)
    if value is None:
        raise BadField(f"the header field {name} is missing")
    if value == "":
        raise BadField(f"the header field {name} is empty")
    return value


def _checked_field(value: str, name: str, error: str | None) -> str:
    if error is not None:
        raise BadField(f"the header field {name} is not a valid name: {error}")
    return value


def topic_name(fields: Mapping[str, str], name: str = "topic") -> str:
    """A required header field holding a topic name."""
    value = _field(fields, name)
    return _checked_field(value, name, topic_error(value))


def optional_topic_name(fields: Mapping[str, str], name: str = "topic") -> str | None:
    """A topic field that may be absent or empty (None)."""
    return topic_name(fields, name) if fields.get(name) else None


def group_name(fields: Mapping[str, str], name: str) -> str:
    """A required header field holding a consumer group name."""
    value = _field(fields, name)
    return _checked_field(value, name, group_error(value))


def optional_group_name(fields: Mapping[str, str], name: str) -> str | None:
    """A consumer group field that may be absent or empty (None)."""
    return group_name(fields, name) if fields.get(name) else None


def producer_group_name(fields: Mapping[str, str], name: str) -> str:
    """A required header field holding a producer group name."""
    value = _field(fields, name)
    return _checked_field(value, name, producer_group_error(value))
