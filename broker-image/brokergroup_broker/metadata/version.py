"""RocketMQ's DataVersion of a metadata table (remoting/protocol/DataVersion.java).

Every change of a table moves its version on (`next`): the counter by one and the timestamp
to the wall clock the caller passes in. Versions are ordered as `DataVersion.compare`
orders them: stateVersion, then counter, then timestamp. A slave takes its master's table
whenever the versions differ (SlaveSynchronize compares with `equals`); a new master takes
a peer's table only when it is newer (`is_newer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import BadMetadata

_LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class DataVersion:
    state_version: int = 0
    timestamp_ms: int = 0
    counter: int = 0

    def order_key(self) -> tuple[int, int, int]:
        return (self.state_version, self.counter, self.timestamp_ms)

    def is_newer(self, other: DataVersion) -> bool:
        """DataVersion.compare(other) > 0."""
        return self.order_key() > other.order_key()

    def next(self, now_ms: int) -> DataVersion:
        """DataVersion.nextVersion(): counter + 1, timestamp now, stateVersion 0."""
        return DataVersion(0, now_ms, self.counter + 1)

    def to_json(self) -> dict[str, int]:
        return {
            "counter": self.counter,
            "stateVersion": self.state_version,
            "timestamp": self.timestamp_ms,
        }

    @classmethod
    def from_json(cls, data: object) -> DataVersion:
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise BadMetadata("dataVersion is not an object")
        return cls(_long(data, "stateVersion"), _long(data, "timestamp"), _long(data, "counter"))


def _long(data: dict[str, Any], name: str) -> int:
    value = data.get(name, 0)
    if type(value) is not int or not 0 <= value <= _LONG_MAX:
        raise BadMetadata(f"dataVersion.{name} is not a non-negative long: {value!r:.40}")
    return value
