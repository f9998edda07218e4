"""DESIGN.md §3.1 "Epoch file epochFileCheckpoint (+ .bak): line 1 entry count, line 2
CRC32 of the entry lines, then epoch-startOffset lines; appends must raise both
numbers; fall back to .bak if the main file is unreadable" (seed
controller-mode-design: EpochFile; RocketMQ CheckpointFile format).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from brokergroup_broker.store import EpochEntry, EpochFile, EpochFileError, EpochOrderError
from brokergroup_broker.store.epoch_file import decode_epoch_file, encode_epoch_file


def test_format_is_rocketmqs_checkpoint_file(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(3, 4096)
    body = b"1-0\n3-4096\n"
    expected = b"2\n" + str(zlib.crc32(body) & 0x7FFFFFFF).encode() + b"\n" + body
    assert (tmp_path / "epochFileCheckpoint").read_bytes() == expected
    assert EpochFile(tmp_path).entries() == [EpochEntry(1, 0), EpochEntry(3, 4096)]


def test_append_must_raise_both_numbers_and_a_refusal_changes_nothing(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.append(2, 100)
    before = (tmp_path / "epochFileCheckpoint").read_bytes()
    for epoch, start in [(2, 200), (1, 200), (3, 100), (3, 50)]:
        with pytest.raises(EpochOrderError, match=r"must raise both .* \(2, 100\)"):
            ef.append(epoch, start)
    assert ef.entries() == [EpochEntry(2, 100)]
    assert (tmp_path / "epochFileCheckpoint").read_bytes() == before
    ef.append(3, 101)
    assert ef.last_epoch() == 3


def test_begin_epoch_replaces_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.begin_epoch(1, 0)
    ef.begin_epoch(2, 500)
    ef.begin_epoch(3, 500)  # epoch 2 was elected but wrote no byte
    assert ef.entries() == [EpochEntry(1, 0), EpochEntry(3, 500)]
    with pytest.raises(EpochOrderError):
        ef.begin_epoch(3, 600)


def test_corrupt_main_file_falls_back_to_bak(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(2, 10)
    assert decode_epoch_file((tmp_path / "epochFileCheckpoint.bak").read_bytes()) == [
        EpochEntry(1, 0)
    ]
    main = tmp_path / "epochFileCheckpoint"
    for damage in (b"2\n12345\n1-0\n2-10\n", b"garbage", main.read_bytes()[:-4], b""):
        main.write_bytes(damage)
        assert EpochFile(tmp_path).entries() == [EpochEntry(1, 0)]
    assert "using" in caplog.text and ".bak" in caplog.text
    # Unreadable main file (a directory in its place) also falls back.
    main.unlink()
    main.mkdir()
    assert EpochFile(tmp_path).entries() == [EpochEntry(1, 0)]


def test_both_corrupt_is_a_clear_error(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    ef.append(1, 0)
    ef.append(2, 10)
    (tmp_path / "epochFileCheckpoint").write_bytes(b"x")
    (tmp_path / "epochFileCheckpoint.bak").write_bytes(b"1\n0\n1-0\n")
    with pytest.raises(EpochFileError, match=r"neither .*epochFileCheckpoint.* CRC"):
        EpochFile(tmp_path)


def test_missing_files_mean_a_new_store(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    assert ef.entries() == [] and ef.last_epoch() == 0


def test_out_of_order_file_content_is_corrupt() -> None:
    with pytest.raises(ValueError, match="do not both increase"):
        decode_epoch_file(encode_epoch_file([EpochEntry(2, 10), EpochEntry(3, 10)]))


def test_truncate_suffix_and_prefix(tmp_path: Path) -> None:
    ef = EpochFile(tmp_path)
    for e, s in [(1, 0), (2, 100), (4, 250), (5, 400)]:
        ef.append(e, s)
    assert ef.find(2) == (EpochEntry(2, 100), 250)
    assert ef.find(5) == (EpochEntry(5, 400), None)
    ef.truncate_suffix(250)
    assert [e.epoch for e in ef.entries()] == [1, 2]
    ef.append(6, 300)
    ef.truncate_prefix(100)
    assert [e.epoch for e in ef.entries()] == [2, 6]
    ef.truncate_prefix(299)
    assert [e.epoch for e in ef.entries()] == [2, 6]
    assert [e.epoch for e in EpochFile(tmp_path).entries()] == [2, 6]
    ef.truncate_suffix(0)
    assert EpochFile(tmp_path).entries() == []
