"""Store settings (DESIGN.md §3.1): typed, frozen, relationships checked at construction."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .errors import StoreConfigMismatch

#: RocketMQ's default maxMessageSize (4 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: RocketMQ's mappedFileSizeConsumeQueue is 300,000 entries of 20 bytes.
DEFAULT_CONSUME_QUEUE_ENTRIES_PER_FILE = 300_000
_MIN_SEGMENT_BYTES = 256
_MAX_SEGMENT_BYTES = (1 << 31) - 1  # positions inside a segment are Java ints in RocketMQ


class FlushDiskType(StrEnum):
    #: One fdatasync per put_messages / append_replicated call before it returns (group commit).
    SYNC_FLUSH = "SYNC_FLUSH"
    #: Data reaches the disk when the owner calls flush() (every flush_interval_ms).
    ASYNC_FLUSH = "ASYNC_FLUSH"


@dataclass(frozen=True)
class StoreConfig:
    commit_log_segment_bytes: int = 1 << 30
    """mappedFileSizeCommitLog. Bigger segments mean fewer files and rolls; tests use tiny ones."""
    flush_disk_type: FlushDiskType = FlushDiskType.SYNC_FLUSH
    """SYNC_FLUSH makes every acknowledged byte durable on this replica before the call returns."""
    flush_interval_ms: int = 500
    """How often the owner calls flush(): the durability lag of ASYNC_FLUSH and the cadence of
    consume queue + checkpoint persistence in both modes (bounds the recovery scan)."""
    disk_full_ratio: float = 0.95
    """diskFullRatio: above this used fraction of the filesystem the store refuses writes."""
    default_queue_count: int = 4
    """Queues of an auto-created topic (RocketMQ defaultTopicQueueNums)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    """Largest encoded record accepted (maxMessageSize); must fit a segment with its blank."""
    consume_queue_entries_per_file: int = DEFAULT_CONSUME_QUEUE_ENTRIES_PER_FILE
    """Entries per consume queue file; RocketMQ uses 300,000 (6,000,000-byte files)."""
    max_topics: int = 10_000
    """Topics this store will create (auto-created on first produce). Past it a produce
    to a new topic is refused with a clear error; existing topics go on."""
    max_open_queue_files: int = 1024
    """Consume-queue files kept open at once (least recently used closed past it), so
    many topics never exhaust the process's file descriptors."""
    verify_crc_on_recover: bool = True
    """checkCRCOnRecover: verify body CRCs of every record scanned during recovery."""
    page_cache_window_bytes: int = 64 << 20
    """Drop-behind: after each commit log fdatasync, the page cache of durable bytes more
    than this far behind the flushed offset is dropped (POSIX_FADV_DONTNEED), so new
    writes reuse recycled pages instead of claiming fresh memory (which costs ~1 us of
    CPU per KiB on a fresh VM, docs/benchmarks.md). Tail readers (HA transfer, consumers
    within the window) still read from memory; older reads go to disk. 0 disables."""

    def __post_init__(self) -> None:
        seg = self.commit_log_segment_bytes
        if not _MIN_SEGMENT_BYTES <= seg <= _MAX_SEGMENT_BYTES:
            raise StoreConfigMismatch(
                f"commit_log_segment_bytes {seg} must be in [{_MIN_SEGMENT_BYTES}, "
                f"{_MAX_SEGMENT_BYTES}]"
            )
        if self.max_message_bytes > seg - 8:
            # A record must fit an empty segment together with the 8-byte blank header.
            object.__setattr__(self, "max_message_bytes", seg - 8)
        if self.flush_interval_ms <= 0:
            raise StoreConfigMismatch(f"flush_interval_ms {self.flush_interval_ms} must be > 0")
        if not 0.0 <= self.disk_full_ratio <= 1.0:
            raise StoreConfigMismatch(f"disk_full_ratio {self.disk_full_ratio} not in [0, 1]")
        if self.default_queue_count <= 0:
            raise StoreConfigMismatch(f"default_queue_count {self.default_queue_count} must be > 0")
        if self.page_cache_window_bytes < 0:
            raise StoreConfigMismatch(
                f"page_cache_window_bytes {self.page_cache_window_bytes} must be >= 0"
            )
        if self.max_topics <= 0 or self.max_open_queue_files <= 0:
            raise StoreConfigMismatch("max_topics and max_open_queue_files must be > 0")
        if self.consume_queue_entries_per_file <= 0:
            raise StoreConfigMismatch(
                f"consume_queue_entries_per_file {self.consume_queue_entries_per_file} must be > 0"
            )
