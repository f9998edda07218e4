"""DESIGN.md §3.1 identity files, seed persistent-broker-id (CreateTempMetaFile,
CreateMetaFileFromTemp): `.broker.meta.temp` holds the expected brokerId and
registerCode; commit_temp switches to `.broker.meta` in one rename plus a
directory fsync, so after a crash exactly one of them is valid.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from brokergroup_broker.store import BrokerMeta, IdentityFileError, IdentityFiles, TempBrokerMeta


def test_temp_then_meta(tmp_path: Path) -> None:
    ids = IdentityFiles(tmp_path)
    assert ids.read_temp() is None and ids.read_meta() is None
    ids.write_temp(TempBrokerMeta(3, "code-abc"))
    assert ids.read_temp() == TempBrokerMeta(3, "code-abc")
    assert "brokerId=3" in (tmp_path / ".broker.meta.temp").read_text()
    meta = ids.commit_temp("C1", "broker-a")
    assert meta == BrokerMeta("C1", "broker-a", 3, "code-abc")
    assert not (tmp_path / ".broker.meta.temp").exists()
    assert IdentityFiles(tmp_path).read_meta() == meta
    assert IdentityFiles(tmp_path).read_temp() is None


def test_apply_failure_deletes_temp(tmp_path: Path) -> None:
    ids = IdentityFiles(tmp_path)
    ids.write_temp(TempBrokerMeta(2, "x"))
    ids.delete_temp()
    ids.delete_temp()  # idempotent: a restart may repeat it
    assert ids.read_temp() is None


def test_commit_without_temp_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(IdentityFileError, match=r"\.broker\.meta\.temp is missing"):
        IdentityFiles(tmp_path).commit_temp("C", "B")


def test_crash_after_temp_rewrite_still_has_a_valid_temp(tmp_path: Path) -> None:
    # commit_temp's first step leaves a temp with the final content: still a valid temp.
    (tmp_path / ".broker.meta.temp").write_text(
        "clusterName=C\nbrokerName=B\nbrokerId=4\nregisterCode=r\n"
    )
    assert IdentityFiles(tmp_path).read_temp() == TempBrokerMeta(4, "r")


@pytest.mark.parametrize(
    "content, match",
    [
        ("brokerId=\n", "lacks"),
        ("no separator\n", "key=value"),
        ("brokerId=x\nregisterCode=r\n", "not a number"),
    ],
)
def test_unreadable_files_say_why(tmp_path: Path, content: str, match: str) -> None:
    (tmp_path / ".broker.meta.temp").write_text(content)
    with pytest.raises(IdentityFileError, match=match):
        IdentityFiles(tmp_path).read_temp()
