"""The chaos run's disk read-back (`chaos.disklog`) on a store RocketMQ 5.3.3 wrote
itself (../shared/fixtures/rocketmq-5.3-store: two replicas, one failover, 1 MiB
segments with zero-filled tails, one compressed body): every manifest entry comes back
from each replica's commit log, in log order, with its topic, queue, queue offset, KEYS
and body CRC; records of other topics do not; a torn tail loses only the torn record."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from brokergroup_cli.chaos.disklog import read_commitlog

FIXTURE_TAR = (
    Path(__file__).resolve().parents[3]
    / "shared/fixtures/rocketmq-5.3-store/rocketmq-5.3-store.tar.gz"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FIXTURE_TAR.is_file():
        pytest.skip(f"RocketMQ fixture {FIXTURE_TAR} not present")
    out = tmp_path_factory.mktemp("rocketmq")
    with tarfile.open(FIXTURE_TAR) as tar:
        tar.extractall(out, filter="data")
    return out / "rocketmq-5.3-store"


def _manifest(store: Path) -> list[dict[str, object]]:
    lines = (store / "manifest.jsonl").read_text().splitlines()
    return sorted((json.loads(x) for x in lines), key=lambda m: int(m["commitLogOffset"]))


def _replicas(store: Path) -> list[Path]:
    return sorted(p for p in store.glob("broker-*/commitlog") if p.is_dir())


def test_every_manifest_entry_comes_back_from_each_replica_in_log_order(store: Path) -> None:
    manifest = _manifest(store)
    topics = sorted({str(m["topic"]) for m in manifest})
    assert len(_replicas(store)) == 2 and len(topics) >= 2
    for commitlog in _replicas(store):
        assert len(list(commitlog.iterdir())) > 1  # several segments, blank tails between
        for topic in topics:
            got = read_commitlog(commitlog, topic, commitlog.parent.name)
            expected = [m for m in manifest if m["topic"] == topic]
            assert [(r.topic, r.queue_id, r.queue_offset, r.key) for r in got] == [
                (m["topic"], m["queueId"], m["queueOffset"], m["key"]) for m in expected
            ]
            for r, m in zip(got, expected, strict=True):
                if not m["storedBodyCompressed"]:  # the CRC of the body as stored
                    assert r.body_crc == int(m["bodyCrc32"]) & 0x7FFFFFFF, m
                assert r.replica == commitlog.parent.name


def test_a_torn_tail_loses_only_the_torn_record(store: Path, tmp_path: Path) -> None:
    manifest = _manifest(store)
    source = _replicas(store)[0]
    copy = tmp_path / "commitlog"
    copy.mkdir()
    segments = sorted(source.iterdir())
    for s in segments:
        (copy / s.name).write_bytes(s.read_bytes())
    last = manifest[-1]
    segment = copy / segments[-1].name
    end = int(last["commitLogOffset"]) - int(segments[-1].name) + int(last["storedSize"])
    os.truncate(segment, end - 7)  # the last record torn, as a power loss leaves it
    got = read_commitlog(copy, str(last["topic"]), "torn")
    expected = [m for m in manifest if m["topic"] == last["topic"]][:-1]
    assert [r.key for r in got] == [m["key"] for m in expected]


def test_an_empty_or_missing_log_reads_as_nothing(tmp_path: Path) -> None:
    assert read_commitlog(tmp_path / "absent", "chaos", "x") == []
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlog" / ("0" * 20)).write_bytes(b"\0" * 4096)
    assert read_commitlog(tmp_path / "commitlog", "chaos", "x") == []
