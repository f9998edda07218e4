"""Audit inputs and outputs named by a path or a URI (`brokergroup_audit.locations`,
issue 21 item 1): the driver makes local paths absolute and leaves URIs alone; the
store listing, the ack log and the outputs go through pyarrow's filesystems, so a
`file://` URI of a store gives what its path gives. (The same against a real S3
server: tests/pipeline/test_object_store.py.)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from brokergroup_audit.cli import absolute_paths
from brokergroup_audit.inputs import read_json_lines
from brokergroup_audit.locations import on_driver, resolve
from brokergroup_audit.source import CommitLogDataSource
from brokergroup_audit.stores import find_replicas
from brokergroup_broker.store.message_encode import encode_run


def _store(root: Path, group: str, broker_id: int, records: int) -> None:
    store = root / group / f"broker-{broker_id}"
    (store / "commitlog").mkdir(parents=True)
    (store / ".broker.meta").write_text(
        f"clusterName=C\nbrokerName={group}\nbrokerId={broker_id}\n"
    )
    (store / "epochFileCheckpoint").write_text("1\n" + "0\n" + "1-0\n")
    run = encode_run(
        "T", 0, [b"x" * 50] * records, None, flag=0, born_timestamp_ms=1,
        born_host=("127.0.0.1", 1), start_offset=0, segment_bytes=1 << 20,
        store_host=("127.0.0.1", 2), store_timestamp_ms=2, first_queue_offset=0,
        max_message_bytes=1 << 16,
    )  # fmt: skip
    (store / "commitlog" / f"{0:020d}").write_bytes(run.data)


def test_uris_leave_the_driver_as_typed_and_paths_absolute(tmp_path: Path) -> None:
    args = argparse.Namespace(
        store_root="s3://bucket/stores?endpoint_override=127.0.0.1:9000", acks="gs://b/acks.jsonl",
        events="run/events.jsonl", out="hdfs://nn:8020/audit", master="local[2]",
        split_mib=64, quiet=True,
    )  # fmt: skip
    resolved = absolute_paths(args, tmp_path)
    assert (resolved.store_root, resolved.acks, resolved.events, resolved.out) == (
        "s3://bucket/stores?endpoint_override=127.0.0.1:9000", "gs://b/acks.jsonl",
        str(tmp_path / "run/events.jsonl"), "hdfs://nn:8020/audit",
    )  # fmt: skip
    assert on_driver("./a/../stores", tmp_path) == str(tmp_path / "stores")


def test_the_commitlog_source_takes_a_uri_root() -> None:
    reader = CommitLogDataSource({"path": "file:///nonexistent/stores"}).reader(None)
    assert reader.path == "file:///nonexistent/stores"


def test_a_file_uri_lists_the_same_replicas_as_its_path(tmp_path: Path) -> None:
    _store(tmp_path, "broker-a", 1, 3)
    _store(tmp_path, "broker-a", 2, 2)
    _store(tmp_path, "broker-b", 1, 1)
    (tmp_path / "empty" / "commitlog").mkdir(parents=True)  # a replica with no segment yet
    by_path = find_replicas(str(tmp_path))
    by_uri = find_replicas(tmp_path.as_uri())
    assert [(r.group, r.broker_id, r.segments, r.epochs) for r in by_uri] == [
        (r.group, r.broker_id, r.segments, r.epochs) for r in by_path
    ]
    assert [(r.group, r.broker_id, len(r.segments)) for r in by_path] == [
        ("broker-a", 1, 1), ("broker-a", 2, 1), ("broker-b", 1, 1), (tmp_path.name, 1, 0),
    ]  # fmt: skip


def test_a_missing_root_and_an_unknown_scheme_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        find_replicas(tmp_path / "missing")
    with pytest.raises(ValueError, match="cannot open nosuch://bucket/x"):
        resolve("nosuch://bucket/x?secret=1")


def test_ack_logs_are_read_through_uris(tmp_path: Path) -> None:
    log = tmp_path / "acks.jsonl"
    log.write_text(json.dumps({"topic": "T"}) + "\n\n" + json.dumps({"topic": "U"}) + "\n")
    assert read_json_lines(log.as_uri()) == [{"topic": "T"}, {"topic": "U"}]
    log.write_text("[1]\n")
    with pytest.raises(ValueError, match=r"acks.jsonl:1: not a JSON object"):
        read_json_lines(log.as_uri())
