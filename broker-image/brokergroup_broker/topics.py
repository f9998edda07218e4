"""Topic names (DESIGN.md §3.4b): RocketMQ's TopicValidator rule, in one place.

A topic names a directory of consume queues and travels in one length byte
of the v1 record, so a name is 1..127 characters from `[%|a-zA-Z0-9_-]`
(ASCII: characters and bytes are the same count). Every request that carries
a topic is checked with `topic_error` before anything is written; the store
checks again before it appends, so no caller can put an unindexable record
into the commit log.
"""

from __future__ import annotations

import re

MAX_TOPIC_BYTES = 127
TOPIC_RULE = f"1..{MAX_TOPIC_BYTES} characters from [%|a-zA-Z0-9_-] (RocketMQ's topic rule)"
_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
_INVALID_CHAR = re.compile(r"[^%|a-zA-Z0-9_-]")


class TopicInvalid(ValueError):
    """A topic name that breaks the rule; the message names the reason and the rule."""


def topic_error(topic: str) -> str | None:
    """Why `topic` is not a valid topic name, or None when it is."""
    if _VALID.fullmatch(topic) is not None:
        if len(topic) <= MAX_TOPIC_BYTES:
            return None
        return f"topic {topic[:20]!r}… is {len(topic)} characters long; use {TOPIC_RULE}"
    if not topic:
        return f"the topic name is empty; use {TOPIC_RULE}"
    bad = sorted(set(_INVALID_CHAR.findall(topic)))
    shown = ", ".join(repr(c) for c in bad[:5])
    return f"topic {topic[:40]!r} contains {shown}, not allowed; use {TOPIC_RULE}"


def is_valid_topic(topic: str) -> bool:
    return topic_error(topic) is None


def check_topic(topic: str) -> None:
    """Raise TopicInvalid unless `topic` follows the rule."""
    error = topic_error(topic)
    if error is not None:
        raise TopicInvalid(error)
