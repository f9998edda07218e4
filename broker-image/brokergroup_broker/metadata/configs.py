"""A topic's and a subscription group's configuration, as RocketMQ serializes them.

`TopicConfig` is common/TopicConfig.java, `SubscriptionGroupConfig` is
remoting/protocol/subscription/SubscriptionGroupConfig.java: the same JSON field names and
defaults (fastjson leaves out null fields). `from_json` checks every field of a document
(a request's body, a peer's snapshot, a file) before anything is kept: names by
`brokergroup_remoting.names`, numbers within their Java types and this broker's bounds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from brokergroup_remoting import names

from .attributes import GROUP_ATTRIBUTES, TOPIC_ATTRIBUTES, check_stored
from .errors import BadMetadata

#: PermName.
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
#: TopicFilterType.
TOPIC_FILTER_TYPES = frozenset({"SINGLE_TAG", "MULTI_TAG"})
#: Queues one topic may have (RocketMQ does not bound them; the name server reads at most
#: this many, controller/namesrv/bodies.py MAX_QUEUE_NUMS).
MAX_QUEUE_NUMS = 1024
#: A group's retry queues (RocketMQ: any int).
MAX_RETRY_QUEUE_NUMS = 1024
#: Bytes of a group's groupRetryPolicy / subscriptionDataSet kept as given.
MAX_OPAQUE_JSON = 4096
_INT_MAX = (1 << 31) - 1
_LONG_MAX = (1 << 63) - 1


def _frozen(attributes: dict[str, str]) -> MappingProxyType[str, str]:
    return MappingProxyType(dict(sorted(attributes.items())))


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: Mapping[str, str] = field(default_factory=lambda: _frozen({}))

    def __post_init__(self) -> None:
        error = names.topic_error(self.topic_name)
        if error is not None:
            raise BadMetadata(error)
        for what, n in (("readQueueNums", self.read_queue_nums),
                        ("writeQueueNums", self.write_queue_nums)):  # fmt: skip
            if not 0 <= n <= MAX_QUEUE_NUMS:
                raise BadMetadata(
                    f"topic {self.topic_name}: {what} {n} is not in 0..{MAX_QUEUE_NUMS}"
                )
        if not 0 <= self.perm <= 0xF:
            raise BadMetadata(f"topic {self.topic_name}: perm {self.perm} is not a PermName")
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise BadMetadata(f"topicFilterType = [{self.topic_filter_type[:40]}] value invalid")
        if not 0 <= self.topic_sys_flag <= _INT_MAX:
            raise BadMetadata(f"topic {self.topic_name}: topicSysFlag is not an int >= 0")
        if not isinstance(self.attributes, MappingProxyType):
            object.__setattr__(self, "attributes", _frozen(dict(self.attributes)))

    @property
    def queue_count(self) -> int:
        """Queues the topic routes (the larger of its read and write queues)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    def to_json(self) -> dict[str, Any]:
        return {
            "attributes": dict(self.attributes),
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_json(cls, data: object, what: str = "a topic config") -> TopicConfig:
        if not isinstance(data, dict):
            raise BadMetadata(f"{what} is not an object")
        name = data.get("topicName")
        if not isinstance(name, str):
            raise BadMetadata(f"{what} has no topicName")
        what = f"topic config {name[:40]!r}"
        return cls(
            topic_name=name,
            read_queue_nums=_int(data, "readQueueNums", 16, what),
            write_queue_nums=_int(data, "writeQueueNums", 16, what),
            perm=_int(data, "perm", PERM_READ | PERM_WRITE, what),
            topic_filter_type=_str(data, "topicFilterType", "SINGLE_TAG", what),
            topic_sys_flag=_int(data, "topicSysFlag", 0, what),
            order=_bool(data, "order", False, what),
            attributes=_frozen(check_stored(data.get("attributes"), what, TOPIC_ATTRIBUTES)),
        )


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    group_sys_flag: int = 0
    consume_timeout_minute: int = 15
    group_retry_policy: str = '{"type":"CUSTOMIZED"}'
    """GroupRetryPolicy as JSON text, kept as given (this broker has no retry delays)."""
    subscription_data_set: str | None = None
    """subscriptionDataSet as JSON text, kept as given (None: absent)."""
    attributes: Mapping[str, str] = field(default_factory=lambda: _frozen({}))

    def __post_init__(self) -> None:
        error = names.group_error(self.group_name)
        if error is not None:
            raise BadMetadata(error)
        if not 0 <= self.retry_queue_nums <= MAX_RETRY_QUEUE_NUMS:
            raise BadMetadata(
                f"group {self.group_name}: retryQueueNums {self.retry_queue_nums} is not in "
                f"0..{MAX_RETRY_QUEUE_NUMS}"
            )
        if not -1 <= self.retry_max_times <= _INT_MAX:
            raise BadMetadata(f"group {self.group_name}: retryMaxTimes is not an int >= -1")
        if not isinstance(self.attributes, MappingProxyType):
            object.__setattr__(self, "attributes", _frozen(dict(self.attributes)))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "attributes": dict(self.attributes),
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "consumeMessageOrderly": self.consume_message_orderly,
            "consumeTimeoutMinute": self.consume_timeout_minute,
            "groupName": self.group_name,
            "groupRetryPolicy": json.loads(self.group_retry_policy),
            "groupSysFlag": self.group_sys_flag,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }
        if self.subscription_data_set is not None:
            out["subscriptionDataSet"] = json.loads(self.subscription_data_set)
        return out

    @classmethod
    def from_json(
        cls, data: object, what: str = "a subscription group config"
    ) -> SubscriptionGroupConfig:
        if not isinstance(data, dict):
            raise BadMetadata(f"{what} is not an object")
        name = data.get("groupName")
        if not isinstance(name, str):
            raise BadMetadata(f"{what} has no groupName")
        what = f"subscription group {name[:40]!r}"
        policy = data.get("groupRetryPolicy")
        return cls(
            group_name=name,
            consume_enable=_bool(data, "consumeEnable", True, what),
            consume_from_min_enable=_bool(data, "consumeFromMinEnable", True, what),
            consume_broadcast_enable=_bool(data, "consumeBroadcastEnable", True, what),
            consume_message_orderly=_bool(data, "consumeMessageOrderly", False, what),
            retry_queue_nums=_int(data, "retryQueueNums", 1, what),
            retry_max_times=_int(data, "retryMaxTimes", 16, what, low=-1),
            broker_id=_long(data, "brokerId", 0, what),
            which_broker_when_consume_slowly=_long(data, "whichBrokerWhenConsumeSlowly", 1, what),
            notify_consumer_ids_changed_enable=_bool(
                data, "notifyConsumerIdsChangedEnable", True, what
            ),
            group_sys_flag=_int(data, "groupSysFlag", 0, what),
            consume_timeout_minute=_int(data, "consumeTimeoutMinute", 15, what),
            group_retry_policy='{"type":"CUSTOMIZED"}'
            if policy is None
            else _opaque(policy, "groupRetryPolicy", what, dict),
            subscription_data_set=None
            if data.get("subscriptionDataSet") is None
            else _opaque(data["subscriptionDataSet"], "subscriptionDataSet", what, list),
            attributes=_frozen(check_stored(data.get("attributes"), what, GROUP_ATTRIBUTES)),
        )


def _int(data: dict[str, Any], name: str, default: int, what: str, *, low: int = 0) -> int:
    return _number(data, name, default, what, low, _INT_MAX, "an int")


def _long(data: dict[str, Any], name: str, default: int, what: str) -> int:
    return _number(data, name, default, what, 0, _LONG_MAX, "a long")


def _number(
    data: dict[str, Any], name: str, default: int, what: str, low: int, high: int, kind: str
) -> int:
    value = data.get(name, default)
    if value is None:
        return default
    if type(value) is not int or not low <= value <= high:
        raise BadMetadata(f"{what}: {name} is not {kind} in {low}..{high}: {value!r:.40}")
    return value


def _bool(data: dict[str, Any], name: str, default: bool, what: str) -> bool:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadMetadata(f"{what}: {name} is not true or false: {value!r:.40}")
    return value


def _str(data: dict[str, Any], name: str, default: str, what: str) -> str:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise BadMetadata(f"{what}: {name} is not a string")
    return value


def _opaque(value: object, name: str, what: str, kind: type) -> str:
    if not isinstance(value, kind):
        raise BadMetadata(f"{what}: {name} is not a JSON {kind.__name__}")
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    if len(text) > MAX_OPAQUE_JSON:
        raise BadMetadata(f"{what}: {name} is over {MAX_OPAQUE_JSON} bytes")
    return text
