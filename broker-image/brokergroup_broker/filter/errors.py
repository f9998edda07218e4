"""The one refusal of a subscription expression (pure)."""

from __future__ import annotations


class FilterRefused(ValueError):
    """An expression that cannot be compiled: bad syntax, a type rule RocketMQ's parser
    enforces, an unknown expression type, or over the size bounds. The message says
    which and where; the caller answers SUBSCRIPTION_PARSE_FAILED with it."""
