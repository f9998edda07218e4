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
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._fileio import atomic_write

log = logging.getLogger(__name__)

CONSUMER_OFFSET_FILE = Path("config") / "consumerOffset.json"

OffsetKey = tuple[str, str, int]  # (group, topic, queueId)


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
    def __init__(self, root: Path) -> None:
        self.path = root / CONSUMER_OFFSET_FILE
        self._offsets: dict[OffsetKey, int] = {}
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

    def get(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get((group, topic, queue_id))

    def commit(self, group: str, topic: str, queue_id: int, offset: int, now_ms: int) -> None:
        self._offsets[(group, topic, queue_id)] = offset
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
        self.version = other.version
        self.dirty = True
        return True

    def persist(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.snapshot().to_json(), sort_keys=True, indent=1).encode()
        atomic_write(self.path, data)
        self.dirty = False
