"""The message request modes: how a consumer group consumes a topic, PULL or POP (RocketMQ's
MessageRequestModeManager, config/messageRequestMode.json), pure and immutable like the
other metadata tables (tables.py): a change returns a new table with the next DataVersion;
store.py writes it durably before installing it and replicates it to the slaves with the
topic and group tables, so a new master answers QUERY_ASSIGNMENT as the old one did.

An entry is SET_MESSAGE_REQUEST_MODE's body (SetMessageRequestModeRequestBody: topic,
consumerGroup, mode, popShareQueueNum); QUERY_ASSIGNMENT answers a (topic, group) without
one in PULL mode (BrokerConfig.defaultMessageRequestMode). A new entry beyond the bound
raises MetadataFull; replacing one always works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from brokergroup_remoting import names
from brokergroup_remoting.fields import BadField

from .errors import BadMetadata, MetadataFull
from .version import DataVersion

#: (topic, group) entries one broker holds (as the subscription groups' bound).
MAX_REQUEST_MODES = 10_000
#: popShareQueueNum's upper bound (a client shares the queues of at most this many others).
MAX_POP_SHARE_QUEUE_NUM = 1024


class MessageRequestMode(Enum):
    """MessageRequestMode (its JSON is the name; fastjson also reads the ordinal)."""

    PULL = "PULL"
    POP = "POP"

    @classmethod
    def parse(cls, value: object) -> MessageRequestMode:
        if isinstance(value, str) and value in cls.__members__:
            return cls[value]
        if type(value) is int and 0 <= value < len(cls):
            return list(cls)[value]
        raise BadMetadata(f"mode {value!r:.40} is not PULL or POP")


@dataclass(frozen=True)
class RequestMode:
    """SetMessageRequestModeRequestBody."""

    topic: str
    consumer_group: str
    mode: MessageRequestMode = MessageRequestMode.PULL
    pop_share_queue_num: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "consumerGroup": self.consumer_group,
            "mode": self.mode.value,
            "popShareQueueNum": self.pop_share_queue_num,
        }

    @classmethod
    def from_json(cls, data: object) -> RequestMode:
        """A body or a stored entry, checked whole (BadMetadata names the field)."""
        if not isinstance(data, dict):
            raise BadMetadata("a message request mode is not an object")
        try:
            topic = names.check_topic(data.get("topic"))
            group = names.check_group(data.get("consumerGroup"), "consumerGroup")
        except BadField as exc:
            raise BadMetadata(str(exc)) from None
        share = data.get("popShareQueueNum", 0)
        if type(share) is not int or not 0 <= share <= MAX_POP_SHARE_QUEUE_NUM:
            raise BadMetadata(
                f"popShareQueueNum {share!r:.40} is not in [0, {MAX_POP_SHARE_QUEUE_NUM}]"
            )
        mode = MessageRequestMode.parse(data.get("mode", MessageRequestMode.PULL.value))
        return cls(topic, group, mode, share)


def _frozen(
    entries: dict[tuple[str, str], RequestMode],
) -> MappingProxyType[tuple[str, str], RequestMode]:
    return MappingProxyType(entries)


@dataclass(frozen=True)
class RequestModeTable:
    version: DataVersion = field(default_factory=DataVersion)
    entries: MappingProxyType[tuple[str, str], RequestMode] = field(
        default_factory=lambda: _frozen({})
    )
    """(topic, consumer group) → its mode."""

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, topic: str, group: str) -> RequestMode | None:
        return self.entries.get((topic, group))

    def put(
        self, entry: RequestMode, now_ms: int, bound: int = MAX_REQUEST_MODES
    ) -> RequestModeTable:
        key = (entry.topic, entry.consumer_group)
        if key not in self.entries and len(self.entries) >= bound:
            raise MetadataFull(
                f"{len(self.entries)} message request modes on this broker (at most {bound}); "
                f"{entry.consumer_group}@{entry.topic} is not set"
            )
        return RequestModeTable(self.version.next(now_ms), _frozen({**self.entries, key: entry}))

    def to_json(self) -> dict[str, Any]:
        """MessageRequestModeManager's file (messageRequestModeMap: topic → group → body),
        with the table's dataVersion (ours: the replicas' order)."""
        by_topic: dict[str, dict[str, Any]] = {}
        for (topic, group), entry in sorted(self.entries.items()):
            by_topic.setdefault(topic, {})[group] = entry.to_json()
        return {"dataVersion": self.version.to_json(), "messageRequestModeMap": by_topic}

    @classmethod
    def from_json(cls, data: object, bound: int = MAX_REQUEST_MODES) -> RequestModeTable:
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise BadMetadata("a message request mode table is not an object")
        by_topic = data.get("messageRequestModeMap") or {}
        if not isinstance(by_topic, dict):
            raise BadMetadata("messageRequestModeMap is not a map")
        entries: dict[tuple[str, str], RequestMode] = {}
        for topic, groups in by_topic.items():
            if not isinstance(groups, dict):
                raise BadMetadata(f"messageRequestModeMap[{topic[:40]!r}] is not a map")
            for group, body in groups.items():
                entry = RequestMode.from_json(body)
                if (entry.topic, entry.consumer_group) != (topic, group):
                    raise BadMetadata(f"the entry under {topic[:40]}/{group[:40]} names another")
                entries[(topic, group)] = entry
                if len(entries) > bound:
                    raise BadMetadata(f"more than {bound} message request modes")
        return cls(DataVersion.from_json(data.get("dataVersion")), _frozen(entries))
