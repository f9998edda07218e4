"""The broker's message store (DESIGN.md §3.1): commit log, consume queues, epoch file,
identity files, checkpoint and consumer offsets. See docs/architecture.md for the contract."""

from .ceiling import DiskCeiling, measure_disk_ceiling
from .checkpoint import StoreCheckpoint
from .config import FlushDiskType, StoreConfig
from .consumer_offsets import ConsumerOffsetSnapshot, ConsumerOffsetStore, DataVersion
from .epoch_file import EpochEntry, EpochFile
from .errors import (
    EpochFileError,
    EpochOrderError,
    IdentityFileError,
    MessageInvalid,
    OffsetOutOfRange,
    PartialTailPresent,
    ReplicationDataCorrupt,
    StoreClosed,
    StoreConfigMismatch,
    StoreCorruption,
    StoreError,
    StoreIOError,
    StoreLocked,
    StoreNotWritable,
    StoreOffsetMismatch,
)
from .group_commit import (
    GroupCommitCounts,
    GroupCommitService,
    LoopGroupCommit,
    SyncPlacement,
)
from .identity import BrokerMeta, IdentityFiles, TempBrokerMeta
from .message import AppendedMessage, AppendResult, FileRange, MessageInput, StoredMessage
from .recovery import RecoveryReport
from .store import MessageStore

__all__ = [
    "AppendResult",
    "AppendedMessage",
    "BrokerMeta",
    "ConsumerOffsetSnapshot",
    "ConsumerOffsetStore",
    "DataVersion",
    "DiskCeiling",
    "EpochEntry",
    "EpochFile",
    "EpochFileError",
    "EpochOrderError",
    "FileRange",
    "FlushDiskType",
    "GroupCommitCounts",
    "GroupCommitService",
    "IdentityFileError",
    "IdentityFiles",
    "LoopGroupCommit",
    "MessageInput",
    "MessageInvalid",
    "MessageStore",
    "OffsetOutOfRange",
    "PartialTailPresent",
    "RecoveryReport",
    "ReplicationDataCorrupt",
    "StoreCheckpoint",
    "StoreClosed",
    "StoreConfig",
    "StoreConfigMismatch",
    "StoreCorruption",
    "StoreError",
    "StoreIOError",
    "StoreLocked",
    "StoreNotWritable",
    "StoreOffsetMismatch",
    "StoredMessage",
    "SyncPlacement",
    "TempBrokerMeta",
    "measure_disk_ceiling",
]
