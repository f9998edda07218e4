"""DESIGN.md §3.1 Commit log segments and "Recovery: scan from the last checkpoint,
verify CRCs, truncate a torn or corrupt tail, rebuild consume queues past the
checkpoint", plus truncate(offset) then append.

Real files in tmp_path with real fsync. A crash is `close(flush=False)`: the
checkpoint is not advanced, so recovery must scan what came after it; files
are then damaged by hand (cut, bit flip, zero fill) before reopening.
"""

from __future__ import annotations

import logging
import shutil
import struct
from pathlib import Path

import pytest

from brokergroup_broker.store import (
    MessageInput,
    MessageStore,
    OffsetOutOfRange,
    StoreConfig,
    StoreConfigMismatch,
)
from brokergroup_broker.store.message import BLANK_MAGIC_CODE
from brokergroup_broker.store.message_scan import scan_records

SEG = 4096
HOST = ("127.0.0.1", 10911)


def cfg(**kw: object) -> StoreConfig:
    return StoreConfig(commit_log_segment_bytes=SEG, consume_queue_entries_per_file=16, **kw)  # type: ignore[arg-type]


def put(
    store: MessageStore, n: int, *, queue_ids: int = 2, size: int = 200, tag: str = "t"
) -> None:
    batch = [
        MessageInput("TopicA", i % queue_ids, bytes([65 + i % 26]) * size, {"TAGS": tag, "KEYS": f"k{i}"},
                     born_timestamp_ms=i, born_host=("10.0.0.1", 1000))
        for i in range(n)
    ]  # fmt: skip
    store.put_messages(batch, HOST, 1000)


def all_messages(store: MessageStore, topic: str = "TopicA") -> list[tuple[int, int, bytes]]:
    out = []
    for q in range(store.queue_count(topic)):
        for m in store.get_messages(topic, q, 0, 10_000, store.max_offset):
            out.append((m.physical_offset, m.queue_offset, m.body))
    return sorted(out)


def segments(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def test_segments_roll_with_blank_records(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    for _ in range(5):
        put(store, 10)
    files = segments(tmp_path)
    assert [f.name for f in files] == [f"{i * SEG:020d}" for i in range(len(files))]
    assert len(files) > 3
    for f in files[:-1]:
        data = f.read_bytes()
        assert len(data) == SEG
        res = scan_records(data, int(f.name), SEG)
        last_end = res.records[-1].physical_offset + res.records[-1].size - int(f.name)
        total, magic = struct.unpack_from(">ii", data, last_end)
        assert (total, magic) == (SEG - last_end, BLANK_MAGIC_CODE)
        assert data[last_end + 8 :] == bytes(SEG - last_end - 8)
    assert len(all_messages(store)) == 50
    store.close()


def test_clean_reopen_scans_nothing(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 30)
    before = all_messages(store)
    end = store.max_offset
    store.close()
    store = MessageStore.open(tmp_path, cfg())
    assert store.recovery.scan_from == end and store.recovery.records_dispatched == 0
    assert all_messages(store) == before
    store.close()


def test_torn_last_record_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 5)
    store.flush()
    put(store, 3)
    result_end = store.max_offset
    store.close(flush=False)
    last = segments(tmp_path)[-1]
    size = last.stat().st_size
    with last.open("r+b") as f:
        f.truncate(size - 50)  # the last record loses its tail
    caplog.set_level(logging.INFO)
    store = MessageStore.open(tmp_path, cfg())
    msgs = all_messages(store)
    assert len(msgs) == 7
    assert msgs[-1][0] < store.max_offset < result_end
    assert store.recovery.truncated_bytes == size - 50 - (store.max_offset - int(last.name))
    assert "cutting" in caplog.text and "record incomplete" in caplog.text
    # The store takes writes again at the recovered end and stays consistent.
    put(store, 4)
    assert len(all_messages(store)) == 11
    store.close()


def test_corrupt_crc_in_the_middle_of_the_tail_truncates_there(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 4)
    store.flush()  # checkpoint: the first 4 records are trusted
    checkpoint_end = store.max_offset
    put(store, 6)
    store.close(flush=False)
    # Flip a body byte of the 3rd record after the checkpoint.
    whole = b"".join(p.read_bytes() for p in segments(tmp_path))
    recs = scan_records(whole[checkpoint_end:], checkpoint_end, SEG).records
    victim = recs[2]
    seg_path = segments(tmp_path)[victim.physical_offset // SEG]
    with seg_path.open("r+b") as f:
        f.seek(victim.physical_offset % SEG + 100)
        byte = f.read(1)
        f.seek(victim.physical_offset % SEG + 100)
        f.write(bytes([byte[0] ^ 0x55]))
    store = MessageStore.open(tmp_path, cfg())
    assert store.recovery.scan_from == checkpoint_end
    assert store.max_offset == victim.physical_offset
    assert store.recovery.stop.name == "BAD_CRC"
    assert len(all_messages(store)) == 4 + 2
    store.close()


def test_zero_filled_tail_is_cut(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 3)
    end = store.max_offset
    store.close(flush=False)
    last = segments(tmp_path)[-1]
    with last.open("ab") as f:
        f.write(bytes(SEG - last.stat().st_size))  # preallocated-looking space
    store = MessageStore.open(tmp_path, cfg())
    assert store.max_offset == end and last.stat().st_size == end - int(last.name)
    assert store.recovery.stop.name == "ZEROS"
    store.close()


def test_consume_queues_are_rebuilt_past_the_checkpoint(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 10)
    store.flush()
    put(store, 20)
    expected = all_messages(store)
    store.close(flush=False)
    # Lose the consume queue writes after the checkpoint (they were never fsynced).
    for q in (0, 1):
        qdir = tmp_path / "consumequeue" / "TopicA" / str(q)
        files = sorted(qdir.iterdir())
        for f in files[1:]:
            f.unlink()
        with files[0].open("r+b") as fh:
            fh.truncate(5 * 20 + 7)  # the 5 checkpointed entries and a torn one
    store = MessageStore.open(tmp_path, cfg())
    assert store.recovery.records_dispatched == 20
    assert not store.recovery.full_rebuild
    assert all_messages(store) == expected
    assert store.queue_offset_range("TopicA", 0) == (0, 15)
    store.close()


def test_lost_consume_queues_trigger_a_full_rebuild(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 25)
    expected = all_messages(store)
    store.close()
    shutil.rmtree(tmp_path / "consumequeue")  # RocketMQ's way to force an index rebuild
    store = MessageStore.open(tmp_path, cfg())
    assert store.recovery.full_rebuild
    assert all_messages(store) == expected
    store.close()


def test_consume_queue_entries_beyond_the_recovered_end_are_dropped(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 6)
    store.flush()
    put(store, 6)
    store.flush()  # consume queues durable and the checkpoint at the end
    store.close(flush=False)
    # The commit log loses its last segment's tail; consume queues still point there.
    last = segments(tmp_path)[-1]
    with last.open("r+b") as f:
        f.truncate(10)
    store = MessageStore.open(tmp_path, cfg())
    n = len(all_messages(store))
    q0, q1 = store.queue_offset_range("TopicA", 0)[1], store.queue_offset_range("TopicA", 1)[1]
    assert q0 + q1 == n < 12
    store.close()


def test_truncate_then_append(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 12)
    keep = all_messages(store)[:5]
    cut_at = next(
        m.physical_offset + m.size
        for q in (0, 1)
        for m in store.get_messages("TopicA", q, 0, 100, store.max_offset)
        if m.physical_offset == keep[-1][0]
    )
    store.truncate(cut_at)
    assert store.max_offset == cut_at == store.last_record_end
    assert all_messages(store) == keep
    assert len(segments(tmp_path)) == cut_at // SEG + 1
    put(store, 3)
    msgs = all_messages(store)
    assert len(msgs) == 8
    assert sorted(q for _, q, _ in msgs) == sorted([0, 1, 2, 0, 1, 3, 2, 4][: len(msgs)])
    with pytest.raises(OffsetOutOfRange, match="outside the held range"):
        store.truncate(store.max_offset + 1)
    store.close()
    store = MessageStore.open(tmp_path, cfg())
    assert all_messages(store) == msgs
    store.close()


def test_truncate_to_a_segment_boundary_and_to_zero(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 40)
    store.truncate(SEG)
    assert store.max_offset == SEG and len(segments(tmp_path)) == 1
    assert store.last_record_end == SEG
    put(store, 2)
    assert all_messages(store)[-2][0] == SEG  # the first new record opens segment 1
    store.truncate(0)
    assert store.max_offset == 0 and all_messages(store) == []
    put(store, 2)
    assert [q for _, q, _ in all_messages(store)] == [0, 0]
    store.close()


def test_other_segment_size_is_refused(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    put(store, 40)
    store.close()
    with pytest.raises(StoreConfigMismatch, match="segment size"):
        MessageStore.open(tmp_path, StoreConfig(commit_log_segment_bytes=SEG * 2))
