"""The broker's two metadata tables, pure and immutable: `TopicTable` (TopicConfigManager)
and `GroupTable` (SubscriptionGroupManager), each with its own `DataVersion`.

A change returns a new table with the next version (`now_ms` is an argument; nothing here
reads a clock or a file); the caller writes it durably and only then installs it, so a
change that cannot be written leaves the table in memory as it was (metadata/store.py).

Rules between replicas (docs/reliability.md "Metadata across failover"):

- `synced_from_master`: a slave takes its master's table whenever the versions differ
  (RocketMQ's SlaveSynchronize: the master is the truth, deletions included).
- `merged_newer`: a broker about to become master takes a live peer's table when it is
  newer (DataVersion order), whole, so a deletion the peer saw stays deleted; an older or
  equal one changes nothing.
- `TopicTable.adopt`: a new master then gives a default config to every topic its store
  holds that has none and was not deleted (a topic created on its first send whose config
  had not reached this replica before the old master died). Deleted topics are remembered
  (`deleted`, bounded, oldest forgotten first) so adoption does not bring them back while
  their records wait for retention.

Bounds (`MetadataBounds`): a new topic or group beyond its bound raises `MetadataFull` and
changes nothing; updating an entry that exists always works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from brokergroup_remoting import names

from .configs import PERM_READ, PERM_WRITE, SubscriptionGroupConfig, TopicConfig
from .errors import BadMetadata, MetadataFull
from .request_modes import MAX_REQUEST_MODES, RequestModeTable
from .version import DataVersion

#: Topic configs one broker holds (the store's maxTopics default: a table cannot name
#: more topics than the store may hold).
MAX_TOPIC_CONFIGS = 10_000
#: Subscription groups one broker holds (as consumer offsets' MAX_OFFSET_GROUPS).
MAX_SUBSCRIPTION_GROUPS = 10_000
#: Deleted topics remembered (adoption must not bring them back).
MAX_DELETED_TOPICS = 10_000


@dataclass(frozen=True)
class MetadataBounds:
    topics: int = MAX_TOPIC_CONFIGS
    groups: int = MAX_SUBSCRIPTION_GROUPS
    deleted_topics: int = MAX_DELETED_TOPICS
    request_modes: int = MAX_REQUEST_MODES


C = TypeVar("C", TopicConfig, SubscriptionGroupConfig)


def _frozen(entries: Mapping[str, Any]) -> MappingProxyType[str, Any]:
    return MappingProxyType(dict(entries))


@dataclass(frozen=True)
class _Table(Generic[C]):
    version: DataVersion = field(default_factory=DataVersion)
    entries: MappingProxyType[str, C] = field(default_factory=lambda: _frozen({}))

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def get(self, name: str) -> C | None:
        return self.entries.get(name)


@dataclass(frozen=True)
class TopicTable(_Table[TopicConfig]):
    deleted: MappingProxyType[str, int] = field(default_factory=lambda: _frozen({}))
    """Deleted topic → wall-clock ms of its deletion, oldest first."""

    def put(self, config: TopicConfig, now_ms: int, bounds: MetadataBounds) -> TopicTable:
        """The table with `config` created or replaced (MetadataFull past `bounds.topics`)."""
        name = config.topic_name
        if name not in self.entries and len(self.entries) >= bounds.topics:
            raise MetadataFull(
                f"{len(self.entries)} topics on this broker (maxTopics {bounds.topics}); "
                f"topic {name} is not created"
            )
        deleted = {k: v for k, v in self.deleted.items() if k != name}
        return TopicTable(
            self.version.next(now_ms), _frozen({**self.entries, name: config}), _frozen(deleted)
        )

    def delete(self, name: str, now_ms: int, bounds: MetadataBounds) -> TopicTable:
        """The table without `name`, remembering its deletion (`deleted`, bounded)."""
        entries = {k: v for k, v in self.entries.items() if k != name}
        deleted = {k: v for k, v in self.deleted.items() if k != name}
        deleted[name] = now_ms
        while len(deleted) > bounds.deleted_topics:
            del deleted[next(iter(deleted))]
        return TopicTable(self.version.next(now_ms), _frozen(entries), _frozen(deleted))

    def adopt(
        self, store_topics: Mapping[str, int], now_ms: int, bounds: MetadataBounds
    ) -> TopicTable:
        """Default configs (read-write, the store's queue count) for the store's topics that
        have none and were not deleted, up to `bounds.topics`; self when there is none."""
        missing = [
            (name, queues)
            for name, queues in sorted(store_topics.items())
            if name not in self.entries and name not in self.deleted and names.is_topic(name)
        ]
        room = max(bounds.topics - len(self.entries), 0)
        if not missing or room == 0:
            return self
        added = {
            name: TopicConfig(name, queues, queues, PERM_READ | PERM_WRITE)
            for name, queues in missing[:room]
        }
        return TopicTable(
            self.version.next(now_ms), _frozen({**self.entries, **added}), self.deleted
        )

    def queue_counts(self) -> dict[str, int]:
        return {name: config.queue_count for name, config in self.entries.items()}

    def to_json(self) -> dict[str, Any]:
        """TopicConfigSerializeWrapper, with the deleted topics (`deletedTopics`, ours)."""
        return {
            "dataVersion": self.version.to_json(),
            "deletedTopics": dict(self.deleted),
            "topicConfigTable": {n: c.to_json() for n, c in sorted(self.entries.items())},
        }

    @classmethod
    def from_json(cls, data: object, bounds: MetadataBounds) -> TopicTable:
        if not isinstance(data, dict):
            raise BadMetadata("a topic table is not an object")
        table = data.get("topicConfigTable") or {}
        deleted = data.get("deletedTopics") or {}
        if not isinstance(table, dict) or len(table) > bounds.topics:
            raise BadMetadata(f"topicConfigTable is not a map of at most {bounds.topics} topics")
        if not isinstance(deleted, dict) or len(deleted) > bounds.deleted_topics:
            raise BadMetadata("deletedTopics is not a bounded map of topic to time")
        entries: dict[str, TopicConfig] = {}
        for key, value in table.items():
            config = TopicConfig.from_json(value)
            if config.topic_name != key:
                raise BadMetadata(f"topicConfigTable key {key[:40]!r} names another topic")
            entries[key] = config
        for key, when in deleted.items():
            if not names.is_topic(key) or type(when) is not int or when < 0:
                raise BadMetadata("deletedTopics is not a map of topic to time")
        gone = dict(sorted(deleted.items(), key=lambda kv: kv[1]))
        return cls(DataVersion.from_json(data.get("dataVersion")), _frozen(entries), _frozen(gone))


@dataclass(frozen=True)
class GroupTable(_Table[SubscriptionGroupConfig]):
    def put(
        self, config: SubscriptionGroupConfig, now_ms: int, bounds: MetadataBounds
    ) -> GroupTable:
        name = config.group_name
        if name not in self.entries and len(self.entries) >= bounds.groups:
            raise MetadataFull(
                f"{len(self.entries)} subscription groups on this broker (at most "
                f"{bounds.groups}); group {name} is not created"
            )
        return GroupTable(self.version.next(now_ms), _frozen({**self.entries, name: config}))

    def delete(self, name: str, now_ms: int) -> GroupTable:
        entries = {k: v for k, v in self.entries.items() if k != name}
        return GroupTable(self.version.next(now_ms), _frozen(entries))

    def to_json(self) -> dict[str, Any]:
        """SubscriptionGroupWrapper (no forbidden table: nothing is forbidden per topic)."""
        return {
            "dataVersion": self.version.to_json(),
            "forbiddenTable": {},
            "subscriptionGroupTable": {n: c.to_json() for n, c in sorted(self.entries.items())},
        }

    @classmethod
    def from_json(cls, data: object, bounds: MetadataBounds) -> GroupTable:
        if not isinstance(data, dict):
            raise BadMetadata("a subscription group table is not an object")
        table = data.get("subscriptionGroupTable") or {}
        if not isinstance(table, dict) or len(table) > bounds.groups:
            raise BadMetadata(
                f"subscriptionGroupTable is not a map of at most {bounds.groups} groups"
            )
        entries: dict[str, SubscriptionGroupConfig] = {}
        for key, value in table.items():
            config = SubscriptionGroupConfig.from_json(value)
            if config.group_name != key:
                raise BadMetadata(f"subscriptionGroupTable key {key[:40]!r} names another group")
            entries[key] = config
        return cls(DataVersion.from_json(data.get("dataVersion")), _frozen(entries))


T = TypeVar("T", TopicTable, GroupTable, RequestModeTable)


def synced_from_master(mine: T, masters: T) -> T:
    """What a slave holds after reading its master's table (SlaveSynchronize)."""
    return mine if masters.version == mine.version else masters


def merged_newer(mine: T, peers: T) -> T:
    """What a broker about to become master holds after reading a live peer's table."""
    return peers if peers.version.is_newer(mine.version) else mine
