"""Replica stores with a deleted prefix, for the audit's retention tests
(tests/unit/test_audit_retention.py, tests/pipeline/test_audit_retention.py).

`build_master` writes one store with the broker's own store code (MessageStore,
small segments and consume queue files, epoch 1 then epoch 2 from a point in the
middle) and returns the acknowledgement log a producer would have written for it.
`replica` copies it as one replica of a group (byte-identical, as replication makes
them); `behind` cuts the copy at its last segment's start with the store's own
truncation (a slave that had not received the segment being written), so its last
segment is full and ends with its blank record. `retire` then deletes the first
segments as the broker's retention does (docs/audit.md "Retention"): one JSON line
appended to retention.log per segment before it is unlinked, consume queue files
wholly below the new minimum unlinked (each queue's last kept), and the epoch
entries that end at or below it dropped (`EpochFile.truncate_prefix`).
"""

from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.config import FlushDiskType, StoreConfig
from brokergroup_broker.store.epoch_file import EpochFile
from brokergroup_broker.store.message import MessageInput

GROUP = "broker-r"
SEG = 4096
CQ_ENTRY_BYTES = 20
CONFIG = StoreConfig(
    commit_log_segment_bytes=SEG,
    flush_disk_type=FlushDiskType.ASYNC_FLUSH,
    consume_queue_entries_per_file=8,
)
#: The reasons retire() gives the deleted segments, in turn.
REASONS = ("expired", "expired", "disk", "forced")
FIRST_ACK_MS = 1_795_000_000_000


@dataclass(frozen=True)
class Master:
    path: Path
    full_segments: int
    """Finished segments; the master has one more, being written."""
    epoch2_at: int
    end: int
    """Its log's end (max offset)."""
    acks: list[dict[str, Any]]
    """Ack log lines (brokergroup produce's format), one per stored message, in order."""


def build_master(path: Path, full_segments: int) -> Master:
    acks: list[dict[str, Any]] = []
    epoch2_at = 0
    with MessageStore.open(path, CONFIG) as store:
        store.epoch_file.append(1, 0)
        n = 0
        while len(store.commitlog.segments) <= full_segments:
            if not epoch2_at and store.max_offset >= (full_segments * SEG) // 2:
                epoch2_at = store.max_offset
                store.epoch_file.append(2, epoch2_at)
            batch = [
                MessageInput("RetT", i % 3, bytes([n % 251]) * (150 + 37 * (n % 5)),
                             {"KEYS": f"k{n + i}"})
                for i in range(4)
            ]  # fmt: skip
            done = store.put_messages(batch, ("127.0.0.1", 10911), FIRST_ACK_MS + n)
            for m, sent in zip(done.messages, batch, strict=True):
                acks.append(
                    {
                        "brokerName": GROUP, "topic": sent.topic, "queueId": m.queue_id,
                        "queueOffset": m.queue_offset, "physicalOffset": m.physical_offset,
                        "key": sent.properties["KEYS"], "bodyCrc": zlib.crc32(sent.body),
                        "ackTimeMs": FIRST_ACK_MS + n, "masterEpoch": 2 if epoch2_at else 1,
                        "size": m.size,
                    }
                )  # fmt: skip
            n += 4
        store.set_confirm_offset(store.max_offset)
        store.flush()
        end = store.max_offset
    return Master(path, full_segments, epoch2_at, end, acks)


def replica(master: Master, path: Path, broker_id: int, *, behind: bool = False) -> Path:
    shutil.copytree(master.path, path)
    (path / ".broker.meta").write_text(f"clusterName=C\nbrokerName={GROUP}\nbrokerId={broker_id}\n")
    if behind:
        cut = master.full_segments * SEG
        with MessageStore.open(path, CONFIG) as store:
            store.truncate(cut)
            store.epoch_file.truncate_suffix(cut)
            store.set_confirm_offset(cut)
            store.flush()
    return path


def retire(path: Path, count: int, first_at_ms: int) -> list[dict[str, Any]]:
    """Delete the first `count` segments as the broker's retention does; returns the
    retention.log lines written."""
    segments = sorted(p for p in (path / "commitlog").iterdir())
    assert count < len(segments), "retention never deletes the segment being written"
    lines = []
    for i, seg in enumerate(segments[:count]):
        start = int(seg.name)
        line = {
            "atMs": first_at_ms + i, "segment": seg.name, "fromOffset": start,
            "toOffset": start + seg.stat().st_size, "reason": REASONS[i % len(REASONS)],
            "newMinOffset": int(segments[i + 1].name),
        }  # fmt: skip
        with open(path / "retention.log", "a") as f:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
        seg.unlink()
        lines.append(line)
    if count:
        new_min = int(segments[count].name)
        for queue in (path / "consumequeue").glob("*/*"):
            files = sorted(queue.iterdir())
            for cq in files[:-1]:
                last = cq.read_bytes()[-CQ_ENTRY_BYTES:]
                if int.from_bytes(last[:8], "big") + int.from_bytes(last[8:12], "big") <= new_min:
                    cq.unlink()
        EpochFile(path).truncate_prefix(new_min)
    return lines
