"""The audit unchanged on a real Spark cluster (issue 12 item 4): a standalone master
and two workers started from the installed pyspark (`spark-class`) on loopback, then
`brokergroup audit --master spark://…` on the chaos store; its summary must equal
the one the local[*] session computes from the same inputs.

The command runs with every path relative to its working directory, as a user types it
(issue 21 item 2: executors run in their own working directories, work/app-…/N, so the
driver must resolve the paths before they reach them: issue 17 item 7). That run covers
absolute paths on the cluster too: the driver makes every relative path absolute before
any executor sees it, so the executors of this run get exactly what a user typing absolute
paths gives them (tests/unit/test_audit_checks.py checks the driver's step, and
tests/unit/test_audit_locations.py that absolute paths and URIs leave the driver as typed).
A second, absolute-path run on the cluster repeated that job (~4 min of a slow CI
machine's two cores, docs/development.md "CI on a slow machine"). The local[*] summary it
compares with is computed once for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brokergroup_audit.inputs import acknowledged, read_json_lines
from brokergroup_audit.job import run_audit
from brokergroup_audit.result import comparable_summary
from tests.pipeline import spark_standalone
from tests.pipeline.conftest import ChaosStore, SparkSessions

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        with spark_standalone.standalone_cluster(tmp_path_factory.mktemp("standalone")) as c:
            yield c.url
    except spark_standalone.ClusterFailed as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def local_summary(spark_sessions: SparkSessions, chaos_store: ChaosStore) -> Any:
    """What the local[*] session computes from the chaos store (both runs compare to it)."""
    spark = spark_sessions.get()
    acks = acknowledged(read_json_lines(str(chaos_store.acks)), ["broker-a"])
    events = read_json_lines(str(chaos_store.events))
    local = run_audit(spark, str(chaos_store.brokers), acks=acks, events=events)
    return json.loads(json.dumps(comparable_summary(local.summary), sort_keys=True))


def test_standalone_master_and_two_workers_give_the_local_summary(
    local_summary: Any, chaos_store: ChaosStore, standalone_cluster: str, tmp_path: Path
) -> None:
    out = tmp_path / "cluster-out"
    here = chaos_store.brokers.parent  # acks.jsonl, events.jsonl and brokers/ side by side

    def typed(p: Path) -> str:
        return os.path.relpath(p, here)

    cli = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit", typed(chaos_store.brokers),
         "--acks", typed(chaos_store.acks), "--events", typed(chaos_store.events),
         "--out", typed(out), "--master", standalone_cluster, "--split-mib", "1"],
        capture_output=True, text=True, timeout=900, check=False, cwd=here,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr[-3000:]
    remote = json.loads((out / "summary.json").read_text())
    remote.pop("findings")
    assert comparable_summary(remote) == local_summary
