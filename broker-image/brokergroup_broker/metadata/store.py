"""`BrokerMetadata`: the broker's topic, subscription-group and message-request-mode tables,
kept durably.

The I/O shell over the pure tables (tables.py): every change computes the next table,
writes it with `files.write_durably` and only then installs it, so a caller that answers
after the change returns (an admin request, the first send of a topic) answers for what is
on disk, and a change that could not be written changed nothing (MetadataWriteFailed).
Changes are synchronous on the event loop: each is one small fsynced file, and they are
rare (admin requests, the first record of a topic, a consumer group's first heartbeat).

`root=None` keeps the tables in memory only (a front end built without a broker, in tests).
Listeners (`on_topics_changed`) hear every installed topic table (the name server link
registers again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import files
from .configs import SubscriptionGroupConfig, TopicConfig
from .errors import BadMetadata
from .request_modes import RequestMode, RequestModeTable
from .tables import (
    GroupTable,
    MetadataBounds,
    TopicTable,
    merged_newer,
    synced_from_master,
)

log = logging.getLogger(__name__)

#: A peer's tables as `parse_snapshot` reads them.
Tables = tuple[TopicTable, GroupTable, RequestModeTable]


class BrokerMetadata:
    def __init__(
        self,
        root: Path | None,
        *,
        bounds: MetadataBounds | None = None,
        crash_point: files.CrashPoint | None = None,
    ) -> None:
        self.bounds = bounds or MetadataBounds()
        self._root = root
        self._crash_point = crash_point
        self.topics = TopicTable()
        self.groups = GroupTable()
        self.request_modes = RequestModeTable()
        self._topic_listeners: list[Callable[[], None]] = []
        self.had_topics_file = False
        if root is not None:
            topics = self._load(root / files.TOPICS_FILE, TopicTable.from_json)
            groups = self._load(root / files.GROUPS_FILE, GroupTable.from_json)
            self.had_topics_file = topics is not None
            self.topics = topics or TopicTable()
            self.groups = groups or GroupTable()
            modes = self._load(root / files.REQUEST_MODES_FILE,
                               lambda d, b: RequestModeTable.from_json(d, b.request_modes))  # fmt: skip
            self.request_modes = modes or RequestModeTable()

    def _load(self, path: Path, parse: Callable[[object, MetadataBounds], Any]) -> Any:
        document = files.read_document(path)
        if document is None:
            return None
        try:
            return parse(document, self.bounds)
        except BadMetadata as exc:
            files.set_aside(path, str(exc))
            return None

    def on_topics_changed(self, listener: Callable[[], None]) -> None:
        self._topic_listeners.append(listener)

    # ------------------------------------------------------------------ installing

    def _install_topics(self, table: TopicTable) -> bool:
        if table is self.topics:
            return False
        if self._root is not None:
            files.write_durably(self._root / files.TOPICS_FILE, table.to_json(), self._crash_point)
        self.topics = table
        for listener in self._topic_listeners:
            listener()
        return True

    def _install_groups(self, table: GroupTable) -> bool:
        if table is self.groups:
            return False
        if self._root is not None:
            files.write_durably(self._root / files.GROUPS_FILE, table.to_json(), self._crash_point)
        self.groups = table
        return True

    def _install_request_modes(self, table: RequestModeTable) -> bool:
        if table is self.request_modes:
            return False
        if self._root is not None:
            files.write_durably(
                self._root / files.REQUEST_MODES_FILE, table.to_json(), self._crash_point
            )
        self.request_modes = table
        return True

    # ------------------------------------------------------------------ changes

    def put_topic(self, config: TopicConfig, now_ms: int) -> bool:
        """Create or update a topic (False: it is already exactly this, as RocketMQ's
        idempotent UPDATE_AND_CREATE_TOPIC)."""
        if self.topics.get(config.topic_name) == config:
            return False
        return self._install_topics(self.topics.put(config, now_ms, self.bounds))

    def delete_topic(self, name: str, now_ms: int) -> bool:
        """Delete a topic's config (False: there was none; its deletion is still
        remembered, so adoption does not create it from the store's queues)."""
        held = name in self.topics
        self._install_topics(self.topics.delete(name, now_ms, self.bounds))
        return held

    def put_group(self, config: SubscriptionGroupConfig, now_ms: int) -> bool:
        if self.groups.get(config.group_name) == config:
            return False
        return self._install_groups(self.groups.put(config, now_ms, self.bounds))

    def delete_group(self, name: str, now_ms: int) -> bool:
        if name not in self.groups:
            return False
        return self._install_groups(self.groups.delete(name, now_ms))

    def put_request_mode(self, entry: RequestMode, now_ms: int) -> bool:
        """SET_MESSAGE_REQUEST_MODE: the (topic, group)'s mode (False: it is already this)."""
        if self.request_modes.get(entry.topic, entry.consumer_group) == entry:
            return False
        return self._install_request_modes(
            self.request_modes.put(entry, now_ms, self.bounds.request_modes)
        )

    def adopt_store_topics(self, store_topics: Mapping[str, int], now_ms: int) -> list[str]:
        """Configs for the store's topics that have none and were not deleted (tables.py);
        the names adopted."""
        table = self.topics.adopt(store_topics, now_ms, self.bounds)
        added = sorted(set(table.entries) - set(self.topics.entries))
        self._install_topics(table)
        return added

    # ------------------------------------------------------------------ replicas

    def snapshot(self) -> dict[str, Any]:
        """The tables as a peer reads them (GET /v1/metadata)."""
        return {
            "topics": self.topics.to_json(),
            "subscriptionGroups": self.groups.to_json(),
            "messageRequestModes": self.request_modes.to_json(),
        }

    def parse_snapshot(self, document: object) -> Tables:
        """A peer's snapshot, checked whole (BadMetadata) before anything is taken. A peer
        of an older version sends no request modes: an empty table at version 0 (never
        newer; a slave takes it from such a master, which serves none)."""
        if not isinstance(document, dict):
            raise BadMetadata("a metadata snapshot is not an object")
        return (
            TopicTable.from_json(document.get("topics"), self.bounds),
            GroupTable.from_json(document.get("subscriptionGroups"), self.bounds),
            RequestModeTable.from_json(
                document.get("messageRequestModes"), self.bounds.request_modes
            ),
        )

    def sync_from_master(
        self, topics: TopicTable, groups: GroupTable, modes: RequestModeTable | None = None
    ) -> bool:
        """A slave takes its master's tables where they differ; True if anything changed."""
        changed = self._install_topics(synced_from_master(self.topics, topics))
        changed = self._install_groups(synced_from_master(self.groups, groups)) or changed
        if modes is not None:
            changed = (
                self._install_request_modes(synced_from_master(self.request_modes, modes))
                or changed
            )
        return changed

    def merge_newer(
        self, topics: TopicTable, groups: GroupTable, modes: RequestModeTable | None = None
    ) -> bool:
        """A broker about to become master takes a peer's newer tables."""
        changed = self._install_topics(merged_newer(self.topics, topics))
        changed = self._install_groups(merged_newer(self.groups, groups)) or changed
        if modes is not None:
            changed = (
                self._install_request_modes(merged_newer(self.request_modes, modes)) or changed
            )
        return changed
