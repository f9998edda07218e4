"""DESIGN.md §3.2 transfer into the store: `append_replicated` (slave path), `read_range`
(master path, for os.sendfile) and `truncate_partial_tail` on a role change.

The master writes batches that roll segments with blank records; the slave
receives the same bytes whole, byte by byte and in odd chunk sizes, and must
end with segment files identical to the master's and the same consume
queues. Wrong offsets and corrupt bytes are refused without changing state.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from brokergroup_broker.store import (
    FlushDiskType,
    MessageInput,
    MessageStore,
    ReplicationDataCorrupt,
    StoreConfig,
    StoreOffsetMismatch,
)

SEG = 2048
HOST = ("127.0.0.1", 10911)


def cfg(flush: FlushDiskType = FlushDiskType.SYNC_FLUSH) -> StoreConfig:
    return StoreConfig(commit_log_segment_bytes=SEG, flush_disk_type=flush,
                       consume_queue_entries_per_file=8)  # fmt: skip


def fill_master(root: Path, batches: int = 6, seed: int = 7) -> MessageStore:
    rnd = random.Random(seed)
    master = MessageStore.open(root, cfg())
    for b in range(batches):
        batch = [
            MessageInput(f"T{i % 2}", rnd.randrange(3), os.urandom(rnd.randrange(1, 400)),
                         {"TAGS": f"tag{b}"} if i % 3 else {}, born_timestamp_ms=b)
            for i in range(rnd.randrange(1, 9))
        ]  # fmt: skip
        master.put_messages(batch, HOST, 1000 + b)
    return master


def files(root: Path, sub: str) -> dict[str, bytes]:
    base = root / sub
    return {
        str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()
    }


def replicate(master: MessageStore, slave: MessageStore, chunks: list[int]) -> None:
    """Copy the master's log into the slave, chunk sizes cycling through `chunks`."""
    offset = slave.max_offset
    i = 0
    while offset < master.max_offset:
        data = master.read_bytes(offset, chunks[i % len(chunks)])
        assert data, f"nothing to read at {offset}"
        offset = slave.append_replicated(offset, data, flush=False)
        i += 1


@pytest.mark.parametrize(
    "chunks", [[1 << 20], [1], [7, 13, 1, 333, 64, 2], [SEG], [SEG - 1, 3]], ids=str
)
def test_slave_files_are_identical_to_the_masters(tmp_path: Path, chunks: list[int]) -> None:
    master = fill_master(tmp_path / "m")
    slave = MessageStore.open(tmp_path / "s", cfg(FlushDiskType.ASYNC_FLUSH))
    replicate(master, slave, chunks)
    assert slave.max_offset == slave.last_record_end == master.max_offset
    master.flush()
    slave.flush()
    assert files(tmp_path / "s", "commitlog") == files(tmp_path / "m", "commitlog")
    assert len(files(tmp_path / "m", "commitlog")) > 2  # blank records were replicated
    assert files(tmp_path / "s", "consumequeue") == files(tmp_path / "m", "consumequeue")
    for topic in ("T0", "T1"):
        for q in range(3):
            a = master.get_messages(topic, q, 0, 1000, master.max_offset)
            b = slave.get_messages(topic, q, 0, 1000, slave.max_offset)
            assert a == b
    master.close()
    slave.close()


def test_partial_record_is_held_until_complete_and_survives_a_restart_cut(tmp_path: Path) -> None:
    master = fill_master(tmp_path / "m", batches=2)
    slave = MessageStore.open(tmp_path / "s", cfg())
    data = master.read_bytes(0, 1 << 20)
    half = 150
    assert slave.append_replicated(0, data[:half]) == half
    assert slave.last_record_end <= half and slave.max_offset == half
    assert slave.flushed_offset == half  # SYNC_FLUSH: durable before the ack
    # Nothing partial is served.
    served = [m for t in ("T0", "T1") for q in range(3)
              for m in slave.get_messages(t, q, 0, 10, 1 << 40)]  # fmt: skip
    assert all(m.physical_offset + m.size <= slave.last_record_end for m in served)
    slave.close()
    slave = MessageStore.open(tmp_path / "s", cfg())
    assert slave.max_offset == slave.last_record_end  # recovery cut the partial record
    replicate(master, slave, [97])
    assert files(tmp_path / "s", "commitlog") == files(tmp_path / "m", "commitlog")
    master.close()
    slave.close()


def test_truncate_partial_tail_before_becoming_master(tmp_path: Path) -> None:
    master = fill_master(tmp_path / "m", batches=3)
    slave = MessageStore.open(tmp_path / "s", cfg())
    data = master.read_bytes(0, 1 << 20)
    slave.append_replicated(0, data[:-5])
    whole = slave.last_record_end
    assert slave.max_offset > whole
    assert slave.truncate_partial_tail() == whole == slave.max_offset
    res = slave.put_messages([MessageInput("T0", 0, b"new master")], HOST, 5)
    assert res.messages[0].physical_offset >= whole
    assert slave.get_messages("T0", 0, 0, 1000, slave.max_offset)[-1].body == b"new master"
    master.close()
    slave.close()


def test_wrong_offset_is_refused_unchanged(tmp_path: Path) -> None:
    master = fill_master(tmp_path / "m", batches=1)
    slave = MessageStore.open(tmp_path / "s", cfg())
    data = master.read_bytes(0, 1 << 20)
    slave.append_replicated(0, data[:100])
    with pytest.raises(StoreOffsetMismatch, match="append at offset 90 but the log ends at 100"):
        slave.append_replicated(90, data[90:])
    assert slave.max_offset == 100
    master.close()
    slave.close()


def test_corrupt_bytes_are_refused_after_the_valid_prefix(tmp_path: Path) -> None:
    master = fill_master(tmp_path / "m", batches=2)
    slave = MessageStore.open(tmp_path / "s", cfg())
    data = bytearray(master.read_bytes(0, 1 << 20))
    recs = master.get_messages("T0", 0, 0, 1000, master.max_offset) + master.get_messages(
        "T1", 0, 0, 1000, master.max_offset
    )
    victim = sorted(recs, key=lambda m: m.physical_offset)[-1]
    data[victim.physical_offset + victim.size - 20] ^= 0xFF  # inside the body or topic
    data[victim.physical_offset + 90] ^= 0xFF  # surely inside the body (bodyCRC)
    with pytest.raises(ReplicationDataCorrupt, match=f"offset {victim.physical_offset}"):
        slave.append_replicated(0, bytes(data))
    assert slave.max_offset == slave.last_record_end == victim.physical_offset
    master.close()
    slave.close()


def test_read_range_stays_inside_one_segment(tmp_path: Path) -> None:
    master = fill_master(tmp_path / "m")
    offset = 0
    while offset < master.max_offset:
        rng = master.read_range(offset, 10_000)
        assert rng is not None and rng.offset == offset
        assert rng.file_position == offset % SEG
        assert rng.file_position + rng.length <= SEG
        assert offset + rng.length <= master.max_offset
        assert os.pread(rng.fd, rng.length, rng.file_position) == master.read_bytes(offset, 10_000)
        offset += rng.length
    assert master.read_range(master.max_offset, 100) is None
    master.close()


def test_truncate_anywhere_then_resume_replication(tmp_path: Path) -> None:
    """The HA truncation point may fall inside a record or a blank on a slave."""
    master = fill_master(tmp_path / "m", batches=8, seed=3)
    slave = MessageStore.open(tmp_path / "s", cfg(FlushDiskType.ASYNC_FLUSH))
    replicate(master, slave, [1 << 20])
    rnd = random.Random(11)
    cuts = sorted({rnd.randrange(1, master.max_offset) for _ in range(12)}, reverse=True)
    cuts += [SEG, SEG - 1, SEG + 1]
    for cut in cuts:
        slave.truncate(min(cut, slave.max_offset))
        assert slave.max_offset == min(cut, slave.max_offset)
        assert slave.last_record_end <= slave.max_offset
        replicate(master, slave, [rnd.randrange(1, 700)])
        assert slave.last_record_end == master.max_offset
    master.flush()
    slave.flush()
    assert files(tmp_path / "s", "commitlog") == files(tmp_path / "m", "commitlog")
    assert files(tmp_path / "s", "consumequeue") == files(tmp_path / "m", "consumequeue")
    master.close()
    slave.close()
