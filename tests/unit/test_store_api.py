"""DESIGN.md §3.1 flush policy and serving rules, §3.4a store health, and the
docs/architecture.md store API: one fdatasync per batch on SYNC_FLUSH (group
commit), ASYNC_FLUSH durable at flush(), get_messages never beyond
max_physical_offset (confirmOffset), writable() false on a full disk or after
an I/O error (ENOSPC injected) with state unchanged, one process per store.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from brokergroup_broker.store import (
    FlushDiskType,
    MessageInput,
    MessageInvalid,
    MessageStore,
    PartialTailPresent,
    StoreConfig,
    StoreIOError,
    StoreLocked,
    StoreNotWritable,
    health,
    measure_disk_ceiling,
)
from brokergroup_broker.store.health import DiskSpace

HOST = ("127.0.0.1", 10911)


def cfg(**kw: object) -> StoreConfig:
    return StoreConfig(commit_log_segment_bytes=8192, **kw)  # type: ignore[arg-type]


def batch(n: int, topic: str = "T", queue_id: int = 0) -> list[MessageInput]:
    return [MessageInput(topic, queue_id, b"%d" % i * 50, {"TAGS": "x"}) for i in range(n)]


def count_fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fdatasync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    return calls


def test_sync_flush_is_one_fdatasync_per_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(tmp_path, cfg())
    calls = count_fdatasyncs(monkeypatch)
    res = store.put_messages(batch(20), HOST, 1)
    assert len(calls) == 1
    assert store.flushed_offset == store.max_offset == res.end_offset
    store.close()


def test_concurrent_writers_share_fdatasyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(tmp_path, StoreConfig())
    calls = count_fdatasyncs(monkeypatch)

    def writer() -> None:
        for _ in range(25):
            store.put_messages(batch(4), HOST, 1)

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.flushed_offset == store.max_offset
    assert len(calls) <= 100
    assert store.queue_offset_range("T", 0) == (0, 400)
    store.close()


def test_async_flush_is_durable_at_flush(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg(flush_disk_type=FlushDiskType.ASYNC_FLUSH))
    store.put_messages(batch(10), HOST, 1)
    assert store.flushed_offset == 0 < store.max_offset
    # ASYNC_FLUSH serves written records (bounded by confirmOffset as always).
    assert len(store.get_messages("T", 0, 0, 100, store.max_offset)) == 10
    assert store.flush() == store.max_offset
    assert store.checkpoint.recover_offset == store.max_offset
    store.close()


def test_get_messages_respects_max_physical_offset(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    res = store.put_messages(batch(10), HOST, 1)
    confirm = res.messages[3].physical_offset + res.messages[3].size
    got = store.get_messages("T", 0, 0, 100, confirm)
    assert [m.queue_offset for m in got] == [0, 1, 2, 3]
    assert store.get_messages("T", 0, 0, 100, confirm - 1)[-1].queue_offset == 2
    assert store.get_messages("T", 0, 8, 100, 1 << 40)[0].body == b"8" * 50
    assert store.get_messages("T", 0, 10, 100, 1 << 40) == []
    assert store.get_messages("nope", 0, 0, 100, 1 << 40) == []
    assert store.queue_offset_range("T", 0, max_physical_offset=confirm) == (0, 4)
    assert store.queue_count("T") == 4 and store.queue_count("nope") == 0
    store.close()


def test_invalid_batch_changes_nothing(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    store.put_messages(batch(2), HOST, 1)
    end = store.max_offset
    bad = [*batch(2), MessageInput("x" * 200, 0, b"b")]
    with pytest.raises(MessageInvalid, match=r"1\.\.127"):
        store.put_messages(bad, HOST, 1)
    with pytest.raises(MessageInvalid, match="exceeds max_message_bytes"):
        store.put_messages([MessageInput("T", 0, b"z" * 9000)], HOST, 1)
    assert store.max_offset == end and store.queue_offset_range("T", 0) == (0, 2)
    store.close()


def test_disk_full_ratio_makes_the_store_unwritable(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg(disk_full_ratio=0.0))
    ok, reason = store.writable()
    assert not ok and reason is not None and "diskFullRatio" in reason
    with pytest.raises(StoreNotWritable, match="diskFullRatio"):
        store.put_messages(batch(1), HOST, 1)
    assert 0.0 < store.disk_usage_ratio() <= 1.0
    store.close()


def statvfs(blocks: int, free: int, available: int) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, blocks, free, available, 0, 0, 0, 0, 255))


def test_disk_used_ratio_is_dfs_use_percent() -> None:
    # 100 blocks, 40 used, 60 free of which 50 are reserved for root: df and RocketMQ
    # say 40 / (40 + 10) = 80 %, not (100 - 10) / 100 = 90 %.
    space = DiskSpace.from_statvfs(statvfs(100, 60, 10))
    assert (space.total, space.free, space.usable) == (409600, 245760, 40960)
    assert space.used_ratio == pytest.approx(0.8)
    assert DiskSpace.from_statvfs(statvfs(100, 50, 0)).used_ratio == 1.0  # ENOSPC for us
    assert DiskSpace.from_statvfs(statvfs(100, 100, 100)).used_ratio == 0.0
    assert DiskSpace(0, 0, 0).used_ratio == 0.0  # a filesystem that reports no blocks


def test_root_reserve_is_not_counted_as_used_and_crossings_are_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk with a big root reserve was refused at 90 % "used" with 50 % of it free
    (the kind e2e tier on a host whose reserve was 63 %: no broker was ever writable)."""
    answer = statvfs(100, 60, 10)
    monkeypatch.setattr(health, "_DISK_USAGE_TTL_S", 0.0)
    store = MessageStore.open(tmp_path, cfg(disk_full_ratio=0.85))
    monkeypatch.setattr(health.os, "statvfs", lambda _path: answer)
    caplog.set_level("INFO", logger=health.__name__)
    assert store.writable() == (True, None)
    answer = statvfs(100, 55, 5)  # 45 / 50 = 90 %
    assert store.writable() == (False, f"disk usage 90.0% of {tmp_path} is above "
                                       "diskFullRatio 85.0%")  # fmt: skip
    assert store.writable()[0] is False
    answer = statvfs(100, 60, 10)
    assert store.writable() == (True, None)
    assert [r.getMessage() for r in caplog.records if r.name == health.__name__] == [
        f"store {tmp_path}: disk usage 90.0% is above diskFullRatio 85.0%: refusing writes "
        "until space is freed",
        f"store {tmp_path}: disk usage 80.0% is back under diskFullRatio; accepting writes",
    ]
    store.close()


def test_enospc_is_rolled_back_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore.open(tmp_path, cfg())
    store.put_messages(batch(5), HOST, 1)
    end = store.max_offset
    real = os.pwrite

    def full_disk(fd: int, data: object, pos: int) -> int:
        real(fd, memoryview(data)[:10], pos)  # type: ignore[arg-type]  # a short write first
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full_disk)
    with pytest.raises(StoreIOError, match="No space left"):
        store.put_messages(batch(50), HOST, 1)
    monkeypatch.setattr(os, "pwrite", real)
    assert store.max_offset == end and store.queue_offset_range("T", 0) == (0, 5)
    assert (tmp_path / "commitlog" / f"{0:020d}").stat().st_size == end
    # Space is back (the real disk has plenty): writes resume, nothing was corrupted.
    assert store.writable() == (True, None)
    store.put_messages(batch(1), HOST, 1)
    store.close()
    store = MessageStore.open(tmp_path, cfg())
    assert store.queue_offset_range("T", 0) == (0, 6) and store.recovery.truncated_bytes == 0
    store.close()


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC, errno.EDQUOT])
def test_fdatasync_failure_sticks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    """Issue 7 item 7: after a failed fdatasync the page cache state is unknown, so
    whatever the errno (ENOSPC too: space coming back must not make a retried
    fsync look safe) the store stops taking writes until it recovers from disk."""
    store = MessageStore.open(tmp_path, cfg())

    def failing(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StoreIOError, match="fdatasync"):
        store.put_messages(batch(1), HOST, 1)
    monkeypatch.undo()
    ok, reason = store.writable()
    assert not ok and reason is not None and "recover from disk" in reason
    with pytest.raises(StoreNotWritable):
        store.put_messages(batch(1), HOST, 2)
    # Not durable, so not served.
    assert store.get_messages("T", 0, 0, 10, 1 << 40) == []
    store.close(flush=False)
    # A restart recovers from what is on disk and takes writes again.
    with MessageStore.open(tmp_path, cfg()) as again:
        assert again.writable() == (True, None)
        again.put_messages(batch(1), HOST, 3)


def test_master_write_on_a_partial_tail_is_refused(tmp_path: Path) -> None:
    master = MessageStore.open(tmp_path / "m", cfg())
    master.put_messages(batch(3), HOST, 1)
    slave = MessageStore.open(tmp_path / "s", cfg())
    slave.append_replicated(0, master.read_bytes(0, 1 << 20)[:-3])
    with pytest.raises(PartialTailPresent, match="truncate_partial_tail"):
        slave.put_messages(batch(1), HOST, 1)
    master.close()
    slave.close()


def test_one_process_per_store(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    with pytest.raises(StoreLocked):
        MessageStore.open(tmp_path, cfg())
    store.close()
    MessageStore.open(tmp_path, cfg()).close()


def test_reset_for_a_full_resync(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    store.put_messages(batch(5), HOST, 1)
    store.reset(8192 * 3)
    assert store.min_offset == store.max_offset == 8192 * 3
    assert store.queue_count("T") == 0
    store.close()
    store = MessageStore.open(tmp_path, cfg())
    assert store.min_offset == store.max_offset == 8192 * 3
    store.close()


def test_confirm_offset_is_persisted_and_clamped(tmp_path: Path) -> None:
    store = MessageStore.open(tmp_path, cfg())
    res = store.put_messages(batch(5), HOST, 1)
    store.set_confirm_offset(res.end_offset)
    store.close()
    store = MessageStore.open(tmp_path, cfg())
    assert store.confirm_offset == res.end_offset
    store.truncate(res.messages[2].physical_offset)
    assert store.confirm_offset == res.messages[2].physical_offset
    store.close()


def test_disk_ceiling_probe(tmp_path: Path) -> None:
    c = measure_disk_ceiling(tmp_path, seq_total_bytes=2 << 20, small_ops=20)
    assert c.seq_write_fdatasync_mb_s > 0 and c.small_write_fdatasync_ops_s > 0
    assert list(tmp_path.iterdir()) == []
