"""The broker's put/get counters live in `brokergroup_broker.broker_stats`, a leaf module
below both `core` and `remoting_front`: the remoting port's handlers (VIEW_BROKER_STATS_DATA,
GET_BROKER_RUNTIME_INFO) read them, and `remoting_front` may not import `core` (core
imports it; the no-import-circles contract). Import from there; this name is kept for
core's callers."""

from brokergroup_broker.broker_stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    STATS_NAMES,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    RuntimeTotals,
    StatsSnapshot,
    StatsWindow,
    stats_key,
)

__all__ = [
    "BROKER_GET_NUMS",
    "BROKER_PUT_NUMS",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "SNDBCK_PUT_NUMS",
    "STATS_NAMES",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "BrokerStats",
    "RuntimeTotals",
    "StatsSnapshot",
    "StatsWindow",
    "stats_key",
]
