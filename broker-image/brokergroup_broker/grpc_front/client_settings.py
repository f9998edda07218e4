"""The Telemetry settings exchange (pure): what the proxy's GrpcClientSettingsManager answers
a client's Settings with, from the ProxyConfig and SubscriptionGroupConfig defaults.

A producer gets 3 attempts with exponential back-off 10 ms → 1 s (×2) and the 4 MiB body
limit; a consumer the long-polling batch (32) and timeout (20 s), fifo from its group's
consumeMessageOrderly, retryMaxTimes + 1 attempts (16 + 1 by default) and the customized
back-off 1 s, 5 s, 10 s, 30 s, 1 min … 2 h (RocketMQ's CustomizedRetryPolicy). Metrics: off
(the SDKs' metrics are not collected here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf.duration_pb2 import Duration

from brokergroup_broker.grpc_front.convert import MAX_MESSAGE_SIZE
from brokergroup_broker.grpc_front.definitions import pb

PRODUCER_MAX_ATTEMPTS = 3
PRODUCER_BACKOFF_INITIAL_MS = 10
PRODUCER_BACKOFF_MAX_MS = 1000
PRODUCER_BACKOFF_MULTIPLIER = 2.0
CONSUMER_RECEIVE_BATCH = 32
CONSUMER_LONG_POLLING_MS = 20_000
DEFAULT_RETRY_MAX_TIMES = 16
#: CustomizedRetryPolicy's default `next` (seconds).
CUSTOMIZED_BACKOFF_S = (
    1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


def _duration_ms(ms: int) -> Any:
    return Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def merge(
    settings: Any,
    retry_max_times: Callable[[str], int | None],
    orderly: Callable[[str], bool] = lambda _group: False,
) -> Any:
    """The client's `settings` (apache.rocketmq.v2.Settings) as the proxy answers them."""
    merged = pb.Settings()
    merged.CopyFrom(settings)
    if settings.HasField("publishing"):
        policy = merged.backoff_policy
        policy.max_attempts = PRODUCER_MAX_ATTEMPTS
        policy.exponential_backoff.initial.CopyFrom(_duration_ms(PRODUCER_BACKOFF_INITIAL_MS))
        policy.exponential_backoff.max.CopyFrom(_duration_ms(PRODUCER_BACKOFF_MAX_MS))
        policy.exponential_backoff.multiplier = PRODUCER_BACKOFF_MULTIPLIER
        merged.publishing.validate_message_type = True
        merged.publishing.max_body_size = MAX_MESSAGE_SIZE
    elif settings.HasField("subscription"):
        group = settings.subscription.group.name
        subscription = merged.subscription
        subscription.receive_batch_size = CONSUMER_RECEIVE_BATCH
        subscription.long_polling_timeout.CopyFrom(_duration_ms(CONSUMER_LONG_POLLING_MS))
        subscription.fifo = orderly(group)
        times = retry_max_times(group)
        merged.backoff_policy.max_attempts = (
            DEFAULT_RETRY_MAX_TIMES if times is None else times
        ) + 1
        merged.backoff_policy.customized_backoff.next.extend(
            _duration_ms(s * 1000) for s in CUSTOMIZED_BACKOFF_S
        )
    merged.metric.on = False
    return merged
