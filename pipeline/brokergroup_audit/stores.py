"""Finding replica stores under a root and what each one says about itself (docs/audit.md).

A replica is any directory with a `commitlog/` folder of 20-digit segment files; in an
object store, any prefix with objects `commitlog/<20 digits>` under it. The root is a
local path or a URI (`locations`): the same listing works on both.
Identity, in order of preference:

- this project's `.broker.meta` (clusterName, brokerName, brokerId), or the brokerId
  of a `.broker.meta.temp` (a broker that never finished registering);
- RocketMQ 5's `brokerIdentity` (`cluster#brokerName#brokerId`, controller mode);
- else the directory names: group = parent directory, brokerId = position among
  its sibling replicas (1-based).

So `brokergroup local up`'s directory (`brokers/<slot>/`), a copy of several
installations, and a directory of RocketMQ stores (`broker-n0/`, `broker-n1/`) all
work. Epochs come from `epochFileCheckpoint` (`.bak` if the main file is damaged);
the confirmed offset from this project's `storeCheckpoint` or RocketMQ's binary
`checkpoint` (confirmPhyOffset at byte 32); without one, the end of the log. This
project's checkpoint also gives recoverOffset (every byte below it was fsynced).
Retention's deletions come from `retention.log.1` then `retention.log` (retention.py).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from pyarrow import fs

from brokergroup_audit.locations import display, join, read_bytes, resolve
from brokergroup_audit.retention import (
    RETENTION_LOG,
    RETENTION_LOG_ROTATED,
    Deletion,
    parse_retention_log,
)
from brokergroup_broker.store._fileio import read_properties
from brokergroup_broker.store.checkpoint import CHECKPOINT_FILE_NAME
from brokergroup_broker.store.epoch_file import EPOCH_FILE_NAME, decode_epoch_file
from brokergroup_broker.store.identity import META_FILE_NAME, TEMP_FILE_NAME
from brokergroup_broker.store.message import BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH
from brokergroup_broker.store.record_layout import blank_fits

_SEGMENT_NAME = re.compile(r"^\d{20}$")
COMMITLOG_DIR = "commitlog"
#: RocketMQ's StoreCheckpoint: physicMsgTimestamp, logicsMsgTimestamp,
#: indexMsgTimestamp, masterFlushedOffset, confirmPhyOffset (8 bytes each).
ROCKETMQ_CHECKPOINT = "checkpoint"
_ROCKETMQ_CONFIRM_AT = 32
#: When a log has one segment, its size cannot be read off the names: assume
#: the default (1 GiB); only blank-record recognition depends on it.
DEFAULT_SEGMENT_BYTES = 1 << 30


@dataclass(frozen=True)
class Segment:
    start: int
    path: str
    """In the store root's filesystem (`locations.resolve(root)`)."""
    length: int


@dataclass(frozen=True)
class Replica:
    group: str
    broker_id: int
    path: str
    """Shown to people: a local path, or the URI scheme and the object path."""
    segments: tuple[Segment, ...]
    segment_bytes: int
    epochs: tuple[tuple[int, int], ...]
    """(epoch, startOffset), oldest first; empty when the store has no epoch file."""
    epoch_source: str
    confirm_offset: int | None
    """From the store's checkpoint; None if it has none."""
    kind: str  # "brokergroup" | "rocketmq" | "unknown"
    recover_offset: int | None = None
    """This project's storeCheckpoint recoverOffset (RocketMQ's checkpoint has none)."""
    deletions: tuple[Deletion, ...] = ()
    """Retention's logged deletions, oldest file first."""
    retention_problems: tuple[str, ...] = ()
    """retention.log lines that are not deletions (skipped)."""

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def name(self) -> str:
        return f"{self.group}/{self.broker_id}"


class _Store:
    """One replica directory's small files, read through its filesystem."""

    def __init__(self, filesystem: fs.FileSystem, path: str, files: dict[str, int]) -> None:
        self.fs, self.path, self.files = filesystem, path, files

    def read(self, name: str) -> bytes | None:
        return read_bytes(self.fs, join(self.path, name)) if name in self.files else None

    def properties(self, name: str) -> dict[str, str] | None:
        data = self.read(name)
        return None if data is None else read_properties(data.decode("utf-8"))


def _identity(store: _Store) -> tuple[str | None, int | None, str]:
    meta = store.properties(META_FILE_NAME)
    if meta is not None:
        return meta.get("brokerName"), int(meta["brokerId"]), "brokergroup"
    temp = store.properties(TEMP_FILE_NAME)
    if temp is not None:
        return None, int(temp["brokerId"]), "brokergroup"
    ident = store.read("brokerIdentity")
    if ident is not None:
        parts = ident.decode("utf-8").strip().split("#")
        if len(parts) == 3:
            return parts[1], int(parts[2]), "rocketmq"
    return None, None, "unknown"


def _epochs(store: _Store) -> tuple[tuple[tuple[int, int], ...], str]:
    errors = []
    for name in (EPOCH_FILE_NAME, EPOCH_FILE_NAME + ".bak"):
        data = store.read(name)
        if data is None:
            continue
        try:
            entries = decode_epoch_file(data)
        except (ValueError, UnicodeDecodeError) as exc:
            errors.append(f"{name}: {exc}")
            continue
        return tuple((e.epoch, e.start_offset) for e in entries), name
    return (), "; ".join(errors) or "none"


def _confirm_offset(store: _Store) -> int | None:
    ours = store.properties(CHECKPOINT_FILE_NAME)
    if ours is not None:
        text = ours.get("confirmOffset")
        return int(text) if text is not None else None
    data = store.read(ROCKETMQ_CHECKPOINT)
    if data is not None and len(data) >= _ROCKETMQ_CONFIRM_AT + 8:
        value = int.from_bytes(data[_ROCKETMQ_CONFIRM_AT : _ROCKETMQ_CONFIRM_AT + 8], "big")
        return value or None
    return None


def _recover_offset(store: _Store) -> int | None:
    ours = store.properties(CHECKPOINT_FILE_NAME)
    if ours is None:
        return None
    text = ours.get("recoverOffset")
    return int(text) if text is not None else None


def _deletions(store: _Store) -> tuple[list[Deletion], list[str]]:
    deletions: list[Deletion] = []
    problems: list[str] = []
    for name in (RETENTION_LOG_ROTATED, RETENTION_LOG):
        data = store.read(name)
        if data is None:
            continue
        found, bad = parse_retention_log(data.decode("utf-8", "replace"), name)
        deletions += found
        problems += bad
    return deletions, problems


def segment_size(segments: tuple[Segment, ...], deletions: list[Deletion]) -> int:
    """The log's segment size: the distance between two segments' starts; with one
    segment left, a deleted segment's span (retention deletes only finished, full
    segments); else the first segment's length, at least the default. Blank-record
    recognition depends on it: a full last segment read with the wrong size would show
    its blank as damage."""
    if len(segments) >= 2:
        return segments[1].start - segments[0].start
    spans = [d.to_offset - d.from_offset for d in deletions]
    if segments and spans and max(spans) >= segments[0].length:
        return max(spans)
    if segments:
        return max(segments[0].length, DEFAULT_SEGMENT_BYTES)
    return DEFAULT_SEGMENT_BYTES


def blank_end(filesystem: fs.FileSystem, replica: Replica, end: int) -> int:
    """Where a replica's log ends when its valid records end at `end`: the end of the
    segment when the bytes from `end` are that segment's blank record, else `end`. A
    blank yields no row, so a log that stops right after one (a slave that received a
    finished segment and not yet the next) would otherwise look short of its own
    checkpoint."""
    seg = next((s for s in replica.segments if s.start <= end < s.start + s.length), None)
    if seg is None or seg.length != replica.segment_bytes:
        return end
    with filesystem.open_input_file(seg.path) as f:
        head = bytes(f.read_at(END_FILE_MIN_BLANK_LENGTH, end - seg.start))
    total = int.from_bytes(head[:4], "big")
    magic = int.from_bytes(head[4:8], "big", signed=True)
    segment_end = seg.start + replica.segment_bytes
    return segment_end if magic == BLANK_MAGIC_CODE and blank_fits(total, end, segment_end) else end


def find_replicas(root: str | Path) -> list[Replica]:
    """Every replica store under `root` (or `root` itself), sorted by (group, brokerId)."""
    root = str(root)
    filesystem, base = resolve(root)
    shown = display(root, base)
    if filesystem.get_file_info(base).type != fs.FileType.Directory:
        raise FileNotFoundError(f"store root {shown} is not a directory")
    # One recursive listing: in an object store that is a few requests for the whole
    # tree, where walking it directory by directory would be one per directory.
    entries = filesystem.get_file_info(fs.FileSelector(base, recursive=True))
    files: dict[str, dict[str, int]] = {}  # directory -> {file name: size}
    commitlogs: set[str] = set()  # stores: directories with commitlog/ in them
    for e in entries:
        parent, name = posixpath.split(e.path.rstrip("/"))
        if e.type == fs.FileType.File:
            files.setdefault(parent, {})[name] = e.size
            if _SEGMENT_NAME.match(name) and posixpath.basename(parent) == COMMITLOG_DIR:
                commitlogs.add(posixpath.dirname(parent))
        elif e.type == fs.FileType.Directory and name == COMMITLOG_DIR:
            commitlogs.add(parent)
    found: list[Replica] = []
    fallback_ids: dict[str, int] = {}
    base_name = posixpath.basename(base.rstrip("/"))
    for store_path in sorted(commitlogs):
        store = _Store(filesystem, store_path, files.get(store_path, {}))
        group, broker_id, kind = _identity(store)
        store_parent = posixpath.dirname(store_path)
        if group is None:
            group = posixpath.basename(store_parent) if store_path != base else base_name
        if broker_id is None:
            fallback_ids[store_parent] = fallback_ids.get(store_parent, 0) + 1
            broker_id = fallback_ids[store_parent]
        log_dir = join(store_path, COMMITLOG_DIR)
        segments = tuple(
            Segment(int(name), join(log_dir, name), size)
            for name, size in sorted(files.get(log_dir, {}).items())
            if _SEGMENT_NAME.match(name)
        )
        deletions, retention_problems = _deletions(store)
        segment_bytes = segment_size(segments, deletions)
        epochs, epoch_source = _epochs(store)
        found.append(
            Replica(
                group=group,
                broker_id=broker_id,
                path=display(root, store_path),
                segments=segments,
                segment_bytes=segment_bytes,
                epochs=epochs,
                epoch_source=epoch_source,
                confirm_offset=_confirm_offset(store),
                kind=kind,
                recover_offset=_recover_offset(store),
                deletions=tuple(deletions),
                retention_problems=tuple(retention_problems),
            )
        )
    found.sort(key=lambda r: (r.group, r.broker_id, r.path))
    return found
