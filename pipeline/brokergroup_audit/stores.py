"""Finding replica stores under a root and what each one says about itself (docs/audit.md).

A replica is any directory with a `commitlog/` folder of 20-digit segment files.
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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from brokergroup_broker.store._fileio import read_properties
from brokergroup_broker.store.checkpoint import CHECKPOINT_FILE_NAME
from brokergroup_broker.store.epoch_file import EPOCH_FILE_NAME, decode_epoch_file
from brokergroup_broker.store.identity import META_FILE_NAME, TEMP_FILE_NAME

_SEGMENT_NAME = re.compile(r"^\d{20}$")
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
    length: int


@dataclass(frozen=True)
class Replica:
    group: str
    broker_id: int
    path: str
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

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    @property
    def name(self) -> str:
        return f"{self.group}/{self.broker_id}"


def _properties(path: Path) -> dict[str, str]:
    return read_properties(path.read_text())


def _identity(store: Path) -> tuple[str | None, int | None, str]:
    meta = store / META_FILE_NAME
    if meta.is_file():
        p = _properties(meta)
        return p.get("brokerName"), int(p["brokerId"]), "brokergroup"
    temp = store / TEMP_FILE_NAME
    if temp.is_file():
        return None, int(_properties(temp)["brokerId"]), "brokergroup"
    ident = store / "brokerIdentity"
    if ident.is_file():
        parts = ident.read_text().strip().split("#")
        if len(parts) == 3:
            return parts[1], int(parts[2]), "rocketmq"
    return None, None, "unknown"


def _epochs(store: Path) -> tuple[tuple[tuple[int, int], ...], str]:
    errors = []
    for name in (EPOCH_FILE_NAME, EPOCH_FILE_NAME + ".bak"):
        path = store / name
        if not path.is_file():
            continue
        try:
            entries = decode_epoch_file(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            errors.append(f"{name}: {exc}")
            continue
        return tuple((e.epoch, e.start_offset) for e in entries), name
    return (), "; ".join(errors) or "none"


def _confirm_offset(store: Path) -> int | None:
    ours = store / CHECKPOINT_FILE_NAME
    if ours.is_file():
        text = _properties(ours).get("confirmOffset")
        return int(text) if text is not None else None
    theirs = store / ROCKETMQ_CHECKPOINT
    if theirs.is_file():
        data = theirs.read_bytes()
        if len(data) >= _ROCKETMQ_CONFIRM_AT + 8:
            value = int.from_bytes(data[_ROCKETMQ_CONFIRM_AT : _ROCKETMQ_CONFIRM_AT + 8], "big")
            return value or None
    return None


def _recover_offset(store: Path) -> int | None:
    ours = store / CHECKPOINT_FILE_NAME
    if not ours.is_file():
        return None
    text = _properties(ours).get("recoverOffset")
    return int(text) if text is not None else None


def _segments(commitlog: Path) -> tuple[Segment, ...]:
    files = sorted(p for p in commitlog.iterdir() if _SEGMENT_NAME.match(p.name) and p.is_file())
    return tuple(Segment(int(p.name), str(p), p.stat().st_size) for p in files)


def find_replicas(root: str | Path) -> list[Replica]:
    """Every replica store under `root` (or `root` itself), sorted by (group, brokerId)."""
    base = Path(root)
    if not base.is_dir():
        raise FileNotFoundError(f"store root {base} is not a directory")
    stores = sorted({p.parent for p in base.rglob("commitlog") if p.is_dir()})
    found: list[Replica] = []
    fallback_ids: dict[Path, int] = {}
    for store in stores:
        group, broker_id, kind = _identity(store)
        if group is None:
            group = store.parent.name if store != base else base.name
        if broker_id is None:
            fallback_ids[store.parent] = fallback_ids.get(store.parent, 0) + 1
            broker_id = fallback_ids[store.parent]
        segments = _segments(store / "commitlog")
        if len(segments) >= 2:
            segment_bytes = segments[1].start - segments[0].start
        elif segments:
            segment_bytes = max(segments[0].length, DEFAULT_SEGMENT_BYTES)
        else:
            segment_bytes = DEFAULT_SEGMENT_BYTES
        epochs, epoch_source = _epochs(store)
        found.append(
            Replica(
                group=group,
                broker_id=broker_id,
                path=str(store),
                segments=segments,
                segment_bytes=segment_bytes,
                epochs=epochs,
                epoch_source=epoch_source,
                confirm_offset=_confirm_offset(store),
                kind=kind,
                recover_offset=_recover_offset(store),
            )
        )
    found.sort(key=lambda r: (r.group, r.broker_id, r.path))
    return found
