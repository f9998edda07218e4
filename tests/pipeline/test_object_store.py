"""The audit of stores kept in object storage (issue 21 item 1), against a real
S3-compatible server (versitygw built by tools/s3/build.sh, `tests/pipeline/s3_server.py`),
never a mock.

The chaos store (three replicas written by real brokers through two master kills), its
acknowledgement log and controller events are uploaded to a bucket; then
`brokergroup audit s3://…` runs as a user runs it, credentials and endpoint in the
environment only, `--acks`, `--events` and `--out` in the bucket too. Its summary must
equal the audit of the local copy, and every output must be in the bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyarrow import fs
from pyspark.sql import SparkSession

from brokergroup_audit.inputs import acknowledged, read_json_lines
from brokergroup_audit.job import run_audit
from brokergroup_audit.result import comparable_summary
from tests.pipeline.conftest import ChaosStore
from tests.pipeline.s3_server import S3Server, ServerUnavailable, s3_server, server_binary

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]

BUCKET = "incidents"
PREFIX = f"{BUCKET}/2026-11-26"
OUTPUTS = ("summary.json", "findings.parquet", "failovers.parquet", "epochs.parquet", "report.html")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    try:
        server_binary()
    except ServerUnavailable as exc:
        pytest.skip(f"no S3-compatible server could be built: {exc}")
    base = tmp_path_factory.mktemp("s3")
    with s3_server(base / "data", base / "versitygw.log") as server:
        yield server


def test_a_store_in_s3_audits_like_its_local_copy(
    spark: SparkSession, chaos_store: ChaosStore, s3: S3Server
) -> None:
    acks = acknowledged(read_json_lines(str(chaos_store.acks)), ["broker-a"])
    events = read_json_lines(str(chaos_store.events))
    local = run_audit(spark, str(chaos_store.brokers), acks=acks, events=events)

    bucket = s3.filesystem()
    bucket.create_dir(BUCKET)
    here = fs.LocalFileSystem()
    fs.copy_files(str(chaos_store.brokers), f"{PREFIX}/brokers",
                  source_filesystem=here, destination_filesystem=bucket)  # fmt: skip
    for name, path in (("acks.jsonl", chaos_store.acks), ("events.jsonl", chaos_store.events)):
        fs.copy_files(str(path), f"{PREFIX}/{name}",
                      source_filesystem=here, destination_filesystem=bucket)  # fmt: skip

    cli = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit", f"s3://{PREFIX}/brokers",
         "--acks", f"s3://{PREFIX}/acks.jsonl", "--events", f"s3://{PREFIX}/events.jsonl",
         "--out", f"s3://{PREFIX}/audit", "--master", "local[2]", "--split-mib", "1"],
        capture_output=True, text=True, timeout=900, check=False,
        env={**os.environ, **s3.env},
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr[-3000:]
    for name in OUTPUTS:
        assert bucket.get_file_info(f"{PREFIX}/audit/{name}").type == fs.FileType.File, name
    with bucket.open_input_stream(f"{PREFIX}/audit/summary.json") as f:
        remote = json.loads(f.read())
    remote.pop("findings")
    assert [r["path"] for r in remote["replicas"]] == [
        f"s3://{PREFIX}/brokers/{Path(r['path']).relative_to(chaos_store.brokers)}"
        for r in local.summary["replicas"]
    ]
    assert comparable_summary(remote) == json.loads(
        json.dumps(comparable_summary(local.summary), sort_keys=True)
    )


def test_a_missing_bucket_is_a_clear_error(s3: S3Server, tmp_path: Path) -> None:
    cli = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit", "s3://no-such-bucket/stores",
         "--out", str(tmp_path / "out"), "--quiet"],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, **s3.env},
    )  # fmt: skip
    assert cli.returncode == 2, cli.stdout + cli.stderr[-3000:]
    assert "s3://no-such-bucket/stores" in cli.stderr
    assert s3.env["AWS_SECRET_ACCESS_KEY"] not in cli.stderr + cli.stdout
