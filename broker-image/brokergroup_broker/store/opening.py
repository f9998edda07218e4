"""Opening and closing a store: the one place its components are made and wired
(docs/architecture.md "store"). `open_store` takes the directory lock, loads the
files, runs recovery and hands back the parts; `close_store` flushes and lets go."""

from __future__ import annotations

import fcntl
import os
import resource
from dataclasses import dataclass
from pathlib import Path

from .appender import Appender
from .checkpoint import StoreCheckpoint
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueueSet
from .consumer_offsets import ConsumerOffsetStore
from .durability import Durability
from .epoch_file import EpochFile
from .errors import StoreLocked
from .health import StoreHealth
from .identity import IdentityFiles
from .locks import StoreLocks
from .reader import Reader
from .recovery import RecoveryReport, recover_store
from .retention import MinOffsetFloor, StoreRetention
from .truncation import Truncation


@dataclass(frozen=True)
class StoreParts:
    root: Path
    config: StoreConfig
    lock_fd: int
    locks: StoreLocks
    health: StoreHealth
    commitlog: CommitLog
    queues: ConsumeQueueSet
    checkpoint: StoreCheckpoint
    epoch_file: EpochFile
    consumer_offsets: ConsumerOffsetStore
    identity: IdentityFiles
    recovery: RecoveryReport
    durability: Durability
    appender: Appender
    reader: Reader
    truncation: Truncation
    retention: StoreRetention


def _queue_file_budget(configured: int) -> int:
    """Consume-queue files to keep open: the configured bound, but never more than half
    the process's descriptor limit (the log, sockets and metadata need the rest)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft // 2))


def open_store(root: Path, config: StoreConfig) -> StoreParts:
    """Open (creating if needed) and recover the store at `root` (one process per store)."""
    root.mkdir(parents=True, exist_ok=True)
    lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(lock_fd)
        raise StoreLocked(str(root)) from exc
    try:
        epoch_file = EpochFile(root)
        checkpoint = StoreCheckpoint.load(root)
        commitlog = CommitLog(root / "commitlog", config.commit_log_segment_bytes)
        queues = ConsumeQueueSet(
            root / "consumequeue",
            config.consume_queue_entries_per_file,
            max_open_files=_queue_file_budget(config.max_open_queue_files),
            max_topics=config.max_topics,
        )
        floor = MinOffsetFloor(root)
        report = recover_store(
            root, config, commitlog, queues, checkpoint, epoch_file, min_offset_floor=floor.value
        )
        consumer_offsets = ConsumerOffsetStore(root)
        locks = StoreLocks()
        health = StoreHealth(root, config)
        durability = Durability(
            config, locks, health, commitlog, queues, checkpoint, consumer_offsets
        )
        appender = Appender(
            root, config, locks, health, commitlog, queues, durability,
            records_unindexed=report.records_unindexed,
        )  # fmt: skip
        return StoreParts(
            root=root,
            config=config,
            lock_fd=lock_fd,
            locks=locks,
            health=health,
            commitlog=commitlog,
            queues=queues,
            checkpoint=checkpoint,
            epoch_file=epoch_file,
            consumer_offsets=consumer_offsets,
            identity=IdentityFiles(root),
            recovery=report,
            durability=durability,
            appender=appender,
            reader=Reader(config, locks, health, commitlog, queues, appender, durability),
            truncation=Truncation(
                root, locks, health, commitlog, queues, appender, durability, floor
            ),
            retention=StoreRetention(root, locks, health, commitlog, queues, epoch_file, floor),
        )
    except BaseException:
        os.close(lock_fd)
        raise


def close_store(parts: StoreParts, *, flush: bool) -> None:
    """Flush (unless `flush` is False: tests simulate a crash) and release files; once."""
    if parts.health.closed:
        return
    if flush and parts.health.fatal_error is None:
        parts.durability.flush(parts.appender.record_end_checked())
    with parts.locks.flush, parts.locks.write:
        parts.health.mark_closed()
        parts.commitlog.close()
        parts.queues.close()
        os.close(parts.lock_fd)
