"""Retention in the store (store/retention.py; DESIGN.md §3.1 "Retention"; docs/retention.md):
real segment files in tmp_path, small segments, records over four queues.

- Deleting the oldest segment writes its retention.log record first (exact JSON), moves
  the log's min to the next segment, every consume queue's min to its first record at
  or after it (compared with the records read before the deletion), drops the epoch
  entries that end at or before it (RocketMQ's truncateEpochFilePrefix), and refuses a
  stale decision (not the oldest, or the active segment).
- A crash in the middle of a deletion, simulated by doing each step's file operations
  by hand on a closed store and reopening: after the record only, after the unlink
  (queues and epochs not yet trimmed), after the queues (epochs not yet trimmed), and
  with consume queue files half deleted. Each reopened store serves exactly what a
  finished deletion serves.
- The HA master's `hold_range` keeps its bytes after the segment is deleted.
- retention.log rotates past its bound, keeping one old file; a torn last line stays
  one bad line.
- The served floor: a learned floor hides records below it, also ones a catching-up
  slave dispatches later, and survives a reopen.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from brokergroup_broker.store import MessageInput, MessageStore, StoreConfig
from brokergroup_broker.store.consume_queue import CQ_ENTRY_BYTES
from brokergroup_broker.store.retention import RetentionLog
from brokergroup_broker.store.retention_policy import DeleteReason

SEG = 4096
HOST = ("127.0.0.1", 10911)
TOPIC = "rt"
T0 = 1_700_000_000_000
CONFIG = StoreConfig(commit_log_segment_bytes=SEG, consume_queue_entries_per_file=8)


def fill(store: MessageStore, count: int, tag: str = "m") -> None:
    for i in range(count):
        body = f"{tag}-{i}-".encode() * (1 + i % 9)
        store.put_messages([MessageInput(TOPIC, i % 4, body)], HOST, T0 + i)


def index(store: MessageStore) -> dict[int, list[tuple[int, int]]]:
    """queue id -> [(queue offset, physical offset)] of every record readable now."""
    out: dict[int, list[tuple[int, int]]] = {}
    for q in range(4):
        low, high = store.queue_offset_range(TOPIC, q)
        got = store.get_messages(TOPIC, q, low, high - low + 1, store.max_offset)
        out[q] = [(m.queue_offset, m.physical_offset) for m in got]
    return out


def expected_after(
    before: dict[int, list[tuple[int, int]]], new_min: int
) -> dict[int, list[tuple[int, int]]]:
    return {q: [(o, p) for o, p in rows if p >= new_min] for q, rows in before.items()}


def ranges(store: MessageStore) -> dict[int, tuple[int, int]]:
    return {q: store.queue_offset_range(TOPIC, q) for q in range(4)}


@pytest.fixture
def filled(tmp_path: Path) -> MessageStore:
    store = MessageStore.open(tmp_path / "s", CONFIG)
    store.epoch_file.append(1, 0)
    fill(store, 60, "a")
    store.epoch_file.append(2, store.max_offset)
    fill(store, 60, "b")
    store.epoch_file.append(3, store.max_offset)
    fill(store, 60, "c")
    store.flush()
    assert len(store.commitlog.segments) >= 5
    return store


def test_deleting_the_oldest_segment_moves_log_queues_and_epochs(filled: MessageStore) -> None:
    store = filled
    before = index(store)
    maxes = {q: hi for q, (_, hi) in ranges(store).items()}
    epochs = store.epoch_file.entries()
    first, second = store.commitlog.segments[0], store.commitlog.segments[1]
    end = first.end

    removed = store.retention.delete_oldest(0, DeleteReason.EXPIRED, T0 + 5)

    assert removed is not None and removed.new_min_offset == SEG == second.start
    assert not (store.root / "commitlog" / f"{0:020d}").exists()
    assert store.min_offset == SEG
    assert store.retention.log.records() == [
        {"atMs": T0 + 5, "segment": "00000000000000000000", "fromOffset": 0, "toOffset": end,
         "reason": "expired", "newMinOffset": SEG},
    ]  # fmt: skip
    assert index(store) == expected_after(before, SEG)
    for q, (low, high) in ranges(store).items():
        assert high == maxes[q]  # the next queue offset is kept
        rows = expected_after(before, SEG)[q]
        assert low == (rows[0][0] if rows else high)
    # Epoch entries ending at or before the new min are gone, the others unchanged.
    assert store.epoch_file.entries() == [
        e for i, e in enumerate(epochs) if i + 1 == len(epochs) or epochs[i + 1].start_offset > SEG
    ]
    assert (store.retention.deleted_segments_total, store.retention.deleted_bytes_total) == (
        1,
        end,
    )
    # Stale decisions are refused: not the oldest any more; never the active segment.
    assert store.retention.delete_oldest(0, DeleteReason.EXPIRED, T0) is None
    while len(store.commitlog.segments) > 1:
        start = store.commitlog.segments[0].start
        assert store.retention.delete_oldest(start, DeleteReason.FORCED, T0) is not None
    active = store.commitlog.segments[0].start
    assert store.retention.delete_oldest(active, DeleteReason.FORCED, T0) is None
    assert store.min_offset == active
    assert store.epoch_file.entries() == [epochs[-1]]
    store.close()


def test_a_reopened_store_after_deletion_serves_the_same(filled: MessageStore) -> None:
    store, root = filled, filled.root
    store.retention.delete_oldest(0, DeleteReason.DISK, T0)
    store.retention.delete_oldest(SEG, DeleteReason.DISK, T0)
    served, rng = index(store), ranges(store)
    store.close()
    with MessageStore.open(root, CONFIG) as again:
        assert again.min_offset == 2 * SEG
        assert index(again) == served and ranges(again) == rng


# -- a crash in the middle of a deletion --------------------------------------------------


def _unlink_segment(root: Path, start: int) -> None:
    (root / "commitlog" / f"{start:020d}").unlink()


@pytest.mark.parametrize(
    "step", ["record_only", "unlinked", "queues_half_trimmed", "queues_trimmed"]
)
def test_a_crash_in_the_middle_of_a_deletion_leaves_a_store_that_opens(
    filled: MessageStore, step: str
) -> None:
    store, root = filled, filled.root
    before = index(store)
    epochs = store.epoch_file.entries()
    rng_before = ranges(store)
    store.close()
    # Step 1 (always): the record, as delete_oldest writes it.
    RetentionLog(root).append({"atMs": T0, "segment": f"{0:020d}", "fromOffset": 0,
                               "toOffset": SEG, "reason": "forced", "newMinOffset": SEG})  # fmt: skip
    if step != "record_only":
        _unlink_segment(root, 0)
    if step in ("queues_half_trimmed", "queues_trimmed"):
        # Consume queue files wholly below the new min: some (or all) unlinked.
        for q in range(4):
            qdir = root / "consumequeue" / TOPIC / str(q)
            files = sorted(qdir.iterdir())
            below = [
                f
                for f in files[:-1]
                if all(
                    int.from_bytes(f.read_bytes()[i : i + 8], "big") < SEG
                    for i in range(0, f.stat().st_size, CQ_ENTRY_BYTES)
                )
            ]
            for f in below[: 1 if step == "queues_half_trimmed" else None]:
                f.unlink()
    with MessageStore.open(root, CONFIG) as again:
        if step == "record_only":  # nothing was deleted: everything is still served
            assert again.min_offset == 0 and index(again) == before
            assert again.epoch_file.entries() == epochs
            # The next run deletes it again and records it again.
            assert again.retention.delete_oldest(0, DeleteReason.FORCED, T0) is not None
            assert [r["segment"] for r in again.retention.log.records()] == [f"{0:020d}"] * 2
        assert again.min_offset == SEG
        assert index(again) == expected_after(before, SEG)
        assert {q: hi for q, (_, hi) in ranges(again).items()} == {
            q: hi for q, (_, hi) in rng_before.items()
        }
        assert all(e.start_offset < SEG for e in again.epoch_file.entries()[:1])
        assert again.epoch_file.entries() == [
            e for i, e in enumerate(epochs)
            if i + 1 == len(epochs) or epochs[i + 1].start_offset > SEG
        ]  # fmt: skip
        fill(again, 5, "after")  # and it takes writes
        assert again.max_offset > SEG


def test_hold_range_keeps_its_bytes_after_the_segment_is_deleted(filled: MessageStore) -> None:
    store = filled
    expected = store.read_bytes(0, 1000)
    rng = store.hold_range(0, 1000)
    assert rng is not None
    try:
        store.retention.delete_oldest(0, DeleteReason.FORCED, T0)
        assert os.pread(rng.fd, rng.length, rng.file_position) == expected
    finally:
        os.close(rng.fd)
    store.close()


def test_retention_log_rotates_and_survives_a_torn_line(tmp_path: Path) -> None:
    log = RetentionLog(tmp_path, max_bytes=300)
    records = [{"atMs": i, "segment": f"{i:020d}", "fromOffset": i, "toOffset": i + 1,
                "reason": "expired", "newMinOffset": i + 1} for i in range(6)]  # fmt: skip
    for r in records:
        log.append(r)
    kept = log.records()
    assert kept == records[-len(kept) :] and len(kept) < len(records)
    assert log.old_path.exists() and log.path.stat().st_size <= 300
    # A crash in the middle of a line: the next record starts a line of its own.
    torn = RetentionLog(tmp_path / "torn")
    torn.path.parent.mkdir()
    torn.append(records[1])
    with torn.path.open("ab") as f:
        f.write(b'{"atMs": 9')
    torn.append(records[0])
    lines = torn.path.read_text().splitlines()
    assert lines[-2] == '{"atMs": 9' and json.loads(lines[-1]) == records[0]


def test_a_learned_floor_hides_records_below_it_and_survives_a_reopen(
    filled: MessageStore,
) -> None:
    store, root = filled, filled.root
    before = index(store)
    floor = store.commitlog.segments[2].start
    assert store.retention.raise_floor(floor)
    assert not store.retention.raise_floor(floor - 1)  # only raises
    assert store.min_offset == 0 and store.served_min_offset == floor
    assert index(store) == expected_after(before, floor)
    store.close()
    with MessageStore.open(root, CONFIG) as again:
        assert again.served_min_offset == floor
        assert index(again) == expected_after(before, floor)


def test_records_below_the_floor_that_arrive_later_are_not_served(tmp_path: Path) -> None:
    """A slave that learned the master's min before its own log reached it."""
    source = MessageStore.open(tmp_path / "src", CONFIG)
    fill(source, 60)
    data = source.read_bytes(0, source.max_offset)
    chunks = []
    pos = 0
    while pos < source.max_offset:
        chunk = source.read_bytes(pos, 1 << 20)
        chunks.append((pos, chunk))
        pos += len(chunk)
    floor = source.commitlog.segments[1].start
    want = expected_after(index(source), floor)
    source.close()
    assert data
    slave = MessageStore.open(tmp_path / "slave", CONFIG)
    slave.retention.raise_floor(floor)
    for offset, chunk in chunks:
        slave.append_replicated(offset, chunk)
    assert index(slave) == want
    slave.close()
