"""Consumer offsets with a data version (DESIGN.md §3.5, §3.6; seed RIP-32).

`(group, topic, queueId) -> next queue offset to consume`. Every change bumps
a `DataVersion(counter, timestamp_ms)` (time is passed in, never read here).
A returning master pulls the slaves' snapshots before going online and calls
`merge_newer`: a snapshot with a higher version is merged entry by entry
taking the larger offset, so an offset never moves backwards through a
failover (a consumer may see a message twice, never skip one).

File `<root>/config/consumerOffset.json`, RocketMQ's ConsumerOffsetManager
shape, written with temp + fsync + rename:

    {"dataVersion": {"counter": 7, "stateVersion": 0, "timestamp": 1700000000000},
     "offsetTable": {"TopicA@group1": {"0": 42, "1": 17}}}

The table is rewritten whole on every flush and fetched whole by every slave, so it is
bounded (`OffsetBounds`, docs/security.md "Client state"): offsets (queues) per group,
groups, and offsets in total. A commit that would add a key beyond a bound raises
`ConsumerOffsetsFull` and changes nothing; a commit to a key already held always succeeds.
Offsets merged from a peer's snapshot or read from the file are taken as they are (they
were bounded where they were committed).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._fileio import atomic_write
from .errors import StoreError

log = logging.getLogger(__name__)

CONSUMER_OFFSET_FILE = Path("config") / "consumerOffset.json"

OffsetKey = tuple[str, str, int]  # (group, topic, queueId)


#: Queues one consumer group holds offsets of (e.g. 1,000 topics of 16 queues).
MAX_OFFSETS_PER_GROUP = 20_000
#: Consumer groups with offsets on one broker.
MAX_OFFSET_GROUPS = 10_000
#: Offsets in total (the file is about 40 bytes per offset: 8 MB at the bound).
MAX_OFFSETS = 200_000


@dataclass(frozen=True)
class OffsetBounds:
    per_group: int = MAX_OFFSETS_PER_GROUP
    groups: int = MAX_OFFSET_GROUPS
    total: int = MAX_OFFSETS


class ConsumerOffsetsFull(StoreError):
    """A commit that would add an offset beyond a bound; nothing changed."""


@dataclass(frozen=True, order=True)
class DataVersion:
    counter: int = 0
    timestamp_ms: int = 0


@dataclass(frozen=True)
class ConsumerOffsetSnapshot:
    version: DataVersion
    offsets: dict[OffsetKey, int]

    def to_json(self) -> dict[str, Any]:
        table: dict[str, dict[str, int]] = {}
        for (group, topic, queue_id), offset in sorted(self.offsets.items()):
            table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = offset
        return {
            "dataVersion": {
                "counter": self.version.counter,
                "stateVersion": 0,
                "timestamp": self.version.timestamp_ms,
            },
            "offsetTable": table,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConsumerOffsetSnapshot:
        dv = data.get("dataVersion") or {}
        offsets: dict[OffsetKey, int] = {}
        for key, queues in (data.get("offsetTable") or {}).items():
            topic, sep, group = str(key).partition("@")
            if not sep:
                raise ValueError(f"offsetTable key {key!r} is not topic@group")
            for queue_id, offset in queues.items():
                offsets[(group, topic, int(queue_id))] = int(offset)
        return cls(DataVersion(int(dv.get("counter", 0)), int(dv.get("timestamp", 0))), offsets)


class ConsumerOffsetStore:
    def __init__(self, root: Path, bounds: OffsetBounds | None = None) -> None:
        self.path = root / CONSUMER_OFFSET_FILE
        self.bounds = bounds or OffsetBounds()
        self._offsets: dict[OffsetKey, int] = {}
        self._per_group: dict[str, int] = {}
        self.version = DataVersion()
        self.dirty = False
        if self.path.exists():
            try:
                snap = ConsumerOffsetSnapshot.from_json(json.loads(self.path.read_text()))
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                # Losing offsets re-delivers messages; refusing to start helps nobody.
                log.error("consumer offsets %s unreadable (%s); starting empty", self.path, exc)
            else:
                self._offsets = dict(snap.offsets)
                self.version = snap.version
        self._count_groups()

    def _count_groups(self) -> None:
        self._per_group = {}
        for group, _, _ in self._offsets:
            self._per_group[group] = self._per_group.get(group, 0) + 1

    def __len__(self) -> int:
        return len(self._offsets)

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get((group, topic, queue_id))

    def holds_group(self, group: str) -> bool:
        """Does the table hold an offset of `group`?"""
        return group in self._per_group

    def refusal(self, group: str, topic: str, queue_id: int) -> str | None:
        """Why committing (group, topic, queue_id) would break a bound (None: it would not)."""
        if (group, topic, queue_id) in self._offsets:
            return None
        held = self._per_group.get(group, 0)
        if held >= self.bounds.per_group:
            return f"group {group} holds {held} offsets (at most {self.bounds.per_group})"
        if held == 0 and len(self._per_group) >= self.bounds.groups:
            return (
                f"{len(self._per_group)} consumer groups hold offsets on this broker "
                f"(at most {self.bounds.groups})"
            )
        if len(self._offsets) >= self.bounds.total:
            return f"{len(self._offsets)} consumer offsets on this broker (at most {self.bounds.total})"
        return None

    def commit(self, group: str, topic: str, queue_id: int, offset: int, now_ms: int) -> None:
        """Set an offset; ConsumerOffsetsFull (nothing changed) when a new key breaks a bound."""
        key = (group, topic, queue_id)
        if key not in self._offsets:
            reason = self.refusal(group, topic, queue_id)
            if reason is not None:
                raise ConsumerOffsetsFull(reason)
            self._per_group[group] = self._per_group.get(group, 0) + 1
        self._offsets[key] = offset
        self._bump(now_ms)

    def _bump(self, now_ms: int) -> None:
        self.version = DataVersion(self.version.counter + 1, max(now_ms, self.version.timestamp_ms))
        self.dirty = True

    def snapshot(self) -> ConsumerOffsetSnapshot:
        return ConsumerOffsetSnapshot(self.version, dict(self._offsets))

    def merge_newer(self, other: ConsumerOffsetSnapshot) -> bool:
        """Take offsets from a snapshot with a newer version, never moving one backwards.

        Returns True if the snapshot was newer (and merged). Our version becomes the
        other's (it already counts past ours), so a later merge of the same data is a no-op.
        """
        if other.version <= self.version:
            return False
        for key, offset in other.offsets.items():
            mine = self._offsets.get(key)
            if mine is None or offset > mine:
                self._offsets[key] = offset
        self._count_groups()
        self.version = other.version
        self.dirty = True
        return True

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.snapshot().to_json(), sort_keys=True, indent=1).encode()
        atomic_write(self.path, data)
        self.dirty = False
