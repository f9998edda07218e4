"""Which commit log segments to delete, and why (DESIGN.md §3.1 "Retention"; RocketMQ's
store/ `DefaultMessageStore.CleanCommitLogService` and
`MappedFileQueue.deleteExpiredFileByTime`). Pure: facts in, decisions out; no clock, no
disk. The shell (`core/retention_service.py`) gathers the facts on a cadence and the
store (`retention.py`) carries each decision out.

Rules, RocketMQ's, with one change where RocketMQ loses more than it must:

- A run deletes anything only if it is time (the local hour is one of `deleteWhen`'s
  hours, "04;05") or the disk is under pressure (usage above
  `diskMaxUsedSpaceRatio`, any hour).
- Segments go oldest first, whole, never the one being written (the last), and never
  one past a segment that stays: the log stays contiguous from its new minimum.
- A segment is *expired* once `fileReservedTime` has passed since its last write (the
  file's mtime, as RocketMQ's `getLastModifiedTimestamp`). Expired segments are deleted
  at `deleteWhen` (reason "expired") and, under pressure, at any hour ("disk").
- Above `diskSpaceCleanForciblyRatio` unexpired segments go too ("forced"), unless
  `cleanFileForciblyEnable` is off. RocketMQ
  then deletes up to deleteFileBatchMax (10) segments at once; here only as many as
  bring the projected usage back to that ratio, so forced cleaning loses the least data
  that keeps the store writable (it starts below `diskFullRatio`, checked by the
  broker's config).
- At most `delete_file_batch_max` segments a run (RocketMQ's deleteFileBatchMax); the
  next run goes on.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DeleteReason",
    "RetentionSettings",
    "SegmentDeletion",
    "SegmentFacts",
    "decide_deletions",
    "parse_delete_when",
]

#: RocketMQ's deleteFileBatchMax.
DEFAULT_DELETE_FILE_BATCH_MAX = 10
_MS_PER_HOUR = 3_600_000


class DeleteReason(enum.StrEnum):
    """Why a segment goes; the value is what retention.log records."""

    EXPIRED = "expired"
    """Older than fileReservedTime, at a deleteWhen hour."""
    DISK = "disk"
    """Older than fileReservedTime, outside deleteWhen, disk above diskMaxUsedSpaceRatio."""
    FORCED = "forced"
    """Not yet expired, disk above diskSpaceCleanForciblyRatio."""


def parse_delete_when(text: str) -> frozenset[int]:
    """RocketMQ's deleteWhen ("04", "04;05"): hours of the day; ValueError naming the part."""
    hours: set[int] = set()
    for part in text.split(";"):
        part = part.strip()
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ValueError(f"deleteWhen {text!r}: {part!r} is not an hour 00-23")
        hours.add(int(part))
    return frozenset(hours)


@dataclass(frozen=True)
class RetentionSettings:
    file_reserved_ms: int
    """fileReservedTime in milliseconds (RocketMQ gives it in hours)."""
    delete_when_hours: frozenset[int]
    """deleteWhen as hours of the day (local time, as RocketMQ's Calendar)."""
    disk_max_used_space_ratio: float
    """diskMaxUsedSpaceRatio as a fraction: above it expired segments go at any hour."""
    disk_space_clean_forcibly_ratio: float
    """diskSpaceCleanForciblyRatio as a fraction: above it unexpired segments go too."""
    clean_file_forcibly_enable: bool = True
    """cleanFileForciblyEnable: False never deletes an unexpired segment."""
    delete_file_batch_max: int = DEFAULT_DELETE_FILE_BATCH_MAX

    def __post_init__(self) -> None:
        if self.file_reserved_ms <= 0:
            raise ValueError(f"fileReservedTime must be > 0, got {self.file_reserved_ms} ms")
        if not 0.0 < self.disk_max_used_space_ratio <= self.disk_space_clean_forcibly_ratio:
            raise ValueError(
                f"diskMaxUsedSpaceRatio {self.disk_max_used_space_ratio} must be > 0 and <= "
                f"diskSpaceCleanForciblyRatio {self.disk_space_clean_forcibly_ratio}"
            )
        if self.delete_file_batch_max <= 0:
            raise ValueError(f"deleteFileBatchMax must be > 0, got {self.delete_file_batch_max}")

    @classmethod
    def of(
        cls,
        *,
        file_reserved_time_hours: float,
        delete_when: str,
        disk_max_used_space_ratio_percent: int,
        disk_space_clean_forcibly_ratio_percent: int,
        clean_file_forcibly_enable: bool = True,
    ) -> RetentionSettings:
        """From RocketMQ's units (hours, "04;05", percent)."""
        return cls(
            file_reserved_ms=round(file_reserved_time_hours * _MS_PER_HOUR),
            delete_when_hours=parse_delete_when(delete_when),
            disk_max_used_space_ratio=disk_max_used_space_ratio_percent / 100,
            disk_space_clean_forcibly_ratio=disk_space_clean_forcibly_ratio_percent / 100,
            clean_file_forcibly_enable=clean_file_forcibly_enable,
        )


@dataclass(frozen=True)
class SegmentFacts:
    """One commit log segment as the policy sees it."""

    start: int
    size: int
    last_write_ms: int
    """Wall-clock ms of its last write (the file's mtime)."""

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class SegmentDeletion:
    segment: SegmentFacts
    reason: DeleteReason


def decide_deletions(
    segments: Sequence[SegmentFacts],
    *,
    active_start: int,
    now_ms: int,
    hour: int,
    disk_used_ratio: float,
    disk_bytes: int,
    settings: RetentionSettings,
) -> list[SegmentDeletion]:
    """The segments to delete this run, oldest first (a prefix of `segments`).

    `segments`: the log's segments in offset order; `active_start`: the start of the one
    being written (never deleted, nor anything after it); `hour`: the local hour of
    `now_ms`; `disk_used_ratio`: the filesystem's used fraction (StoreHealth's);
    `disk_bytes`: used + usable bytes, to project the ratio a deletion leaves.
    """
    time_up = hour in settings.delete_when_hours
    pressure = disk_used_ratio > settings.disk_max_used_space_ratio
    if not (time_up or pressure):
        return []
    forcibly = settings.disk_space_clean_forcibly_ratio
    projected = disk_used_ratio
    out: list[SegmentDeletion] = []
    for seg in segments:
        if seg.start >= active_start or len(out) >= settings.delete_file_batch_max:
            break
        if now_ms >= seg.last_write_ms + settings.file_reserved_ms:
            reason = DeleteReason.EXPIRED if time_up else DeleteReason.DISK
        elif settings.clean_file_forcibly_enable and projected > forcibly:
            reason = DeleteReason.FORCED
        else:
            break  # oldest first: never delete past a segment that stays
        out.append(SegmentDeletion(seg, reason))
        if disk_bytes > 0:
            projected -= seg.size / disk_bytes
    return out
