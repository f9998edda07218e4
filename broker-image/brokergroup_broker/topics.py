"""Topic names in the broker's store (DESIGN.md §3.4b): RocketMQ's TopicValidator rule,
which lives in one place, `brokergroup_remoting.names`; this module gives the store its
exception and its names for it.

A topic names a directory of consume queues and travels in one length byte of the v1
record, so a name is 1..127 characters from `[%|a-zA-Z0-9_-]` (ASCII: characters and bytes
are the same count). Every request that carries a topic is checked before anything is
written (the remoting port with `names.topic_name`, the own protocol with `topic_error`);
the store checks again before it appends, so no caller can put an unindexable record into
the commit log.
"""

from __future__ import annotations

from brokergroup_remoting.names import TOPIC_MAX_LENGTH, TOPIC_RULE, is_topic, topic_error

MAX_TOPIC_BYTES = TOPIC_MAX_LENGTH

__all__ = [
    "MAX_TOPIC_BYTES",
    "TOPIC_RULE",
    "TopicInvalid",
    "check_topic",
    "is_valid_topic",
    "topic_error",
]


class TopicInvalid(ValueError):
    """A topic name that breaks the rule; the message names the reason and the rule."""


def is_valid_topic(topic: str) -> bool:
    return is_topic(topic)


def check_topic(topic: str) -> None:
    """Raise TopicInvalid unless `topic` follows the rule."""
    error = topic_error(topic)
    if error is not None:
        raise TopicInvalid(error)
