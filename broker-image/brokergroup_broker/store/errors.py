"""Errors of the message store (DESIGN.md §3.1), grouped by what the caller does next.

- `StoreOffsetMismatch`, `OffsetOutOfRange`, `MessageInvalid`, `EpochOrderError`:
  the caller asked for something impossible; state is unchanged, fix the request.
- `StoreNotWritable` (and its `StoreIOError` subclass): the store refuses writes
  (disk over `disk_full_ratio`, ENOSPC, an I/O error); report it in heartbeats
  and fail over. A failed write was rolled back, so nothing is corrupted.
- `StoreCorruption`, `ReplicationDataCorrupt`: bytes failed validation (on disk
  or from the master); nothing past the last valid record is dispatched.
- `StoreConfigMismatch`, `EpochFileError`, `IdentityFileError`, `StoreLocked`:
  the store cannot be opened as configured; stop the process and say why.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error raised by `brokergroup_broker.store`."""


class StoreClosed(StoreError):
    def __init__(self, root: str) -> None:
        super().__init__(f"store at {root} is closed")


class StoreLocked(StoreError):
    def __init__(self, root: str) -> None:
        super().__init__(f"store at {root} is already open in another process (lock file held)")


class StoreOffsetMismatch(StoreError):
    """An append did not start exactly at the end of the log."""

    def __init__(self, offset: int, max_offset: int) -> None:
        super().__init__(f"append at offset {offset} but the log ends at {max_offset}")
        self.offset = offset
        self.max_offset = max_offset


class OffsetOutOfRange(StoreError):
    def __init__(self, what: str, offset: int, low: int, high: int) -> None:
        super().__init__(f"{what} offset {offset} is outside the held range [{low}, {high}]")
        self.offset = offset
        self.low = low
        self.high = high


class PartialTailPresent(StoreError):
    """A master write was attempted while the log ends in the middle of a record."""

    def __init__(self, max_offset: int, last_record_end: int) -> None:
        super().__init__(
            f"the log ends mid-record at {max_offset} (last whole record ends at "
            f"{last_record_end}); call truncate_partial_tail() before writing as master"
        )
        self.max_offset = max_offset
        self.last_record_end = last_record_end


class MessageInvalid(StoreError):
    """A message cannot be stored in the RocketMQ v1 layout (too long, bad topic...)."""


class TopicNotStorable(MessageInvalid):
    """The topic breaks the topic rule (brokergroup_broker.topics); nothing was written."""


class TopicLimitReached(MessageInvalid):
    """A new topic past maxTopics; nothing was written."""


class StoreBusy(StoreError):
    """A resource limit (open files), not a broken disk: this request failed, the store
    is healthy; retry later."""


class StoreNotWritable(StoreError):
    def __init__(self, reason: str) -> None:
        super().__init__(f"store is not writable: {reason}")
        self.reason = reason


class StoreIOError(StoreNotWritable):
    """An OS error during a write or fdatasync; the original is chained as __cause__."""


class StoreCorruption(StoreError):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt data at offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class ReplicationDataCorrupt(StoreCorruption):
    """Bytes received from the master fail validation; valid bytes before them were kept."""


class StoreConfigMismatch(StoreError):
    """Files on disk do not fit the configuration (e.g. another segment size)."""


class EpochFileError(StoreError):
    """Both epochFileCheckpoint and its .bak are unreadable or corrupt."""


class EpochOrderError(StoreError):
    def __init__(self, epoch: int, start_offset: int, last_epoch: int, last_start: int) -> None:
        super().__init__(
            f"epoch entry ({epoch}, {start_offset}) must raise both the epoch and the start "
            f"offset above the last entry ({last_epoch}, {last_start})"
        )
        self.epoch = epoch
        self.start_offset = start_offset


class IdentityFileError(StoreError):
    """A broker identity file (.broker.meta / .broker.meta.temp) is missing or unreadable."""
