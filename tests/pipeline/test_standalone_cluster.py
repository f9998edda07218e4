"""The audit unchanged on a real Spark cluster (issue 12 item 4): a standalone master
and two workers started from the installed pyspark (`spark-class`) on loopback, then
`brokergroup audit --master spark://…` on the chaos store; its summary must equal
the one the local[*] session computes from the same inputs.

The command gets every path relative to its working directory, as a user types it:
executors run in their own working directories (work/app-…/N), so the driver must
resolve the paths before they reach them (issue 17 item 7)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from brokergroup_audit.inputs import acknowledged, read_json_lines
from brokergroup_audit.job import run_audit
from brokergroup_audit.result import comparable_summary
from tests.pipeline.conftest import ChaosStore

pytestmark = [pytest.mark.pipeline, pytest.mark.integration]

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"spark process exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail(
        f"spark master not listening on {port} after {timeout_s}s:\n{log.read_text()[-3000:]}"
    )


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_HOME": str(spark_class.parent.parent), "SPARK_LOCAL_IP": HOST,
           "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}  # fmt: skip
    port = _free_port()
    url = f"spark://{HOST}:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = tmp_path / "master.log"
        procs.append(
            subprocess.Popen(
                [
                    str(spark_class),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--webui-port",
                    str(_free_port()),
                ],
                env=env,
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        _wait_port(port, procs[0], log, 180)
        for i in range(2):
            wlog = tmp_path / f"worker-{i}.log"
            procs.append(
                subprocess.Popen(
                    [
                        str(spark_class),
                        "org.apache.spark.deploy.worker.Worker",
                        url,
                        "--host",
                        HOST,
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        str(_free_port()),
                        "--work-dir",
                        str(tmp_path / f"work-{i}"),
                    ],
                    env=env,
                    stdout=wlog.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            registered = log.read_text().count("Registering worker")
            if registered >= 2:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"2 workers did not register:\n{log.read_text()[-3000:]}")
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_standalone_master_and_two_workers_give_the_local_summary(
    spark: SparkSession, chaos_store: ChaosStore, standalone_cluster: str, tmp_path: Path
) -> None:
    acks = acknowledged(read_json_lines(str(chaos_store.acks)), ["broker-a"])
    events = read_json_lines(str(chaos_store.events))
    local = run_audit(spark, str(chaos_store.brokers), acks=acks, events=events)
    out = tmp_path / "cluster-out"
    here = chaos_store.brokers.parent  # acks.jsonl, events.jsonl and brokers/ side by side
    cli = subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", "audit",
         os.path.relpath(chaos_store.brokers, here),
         "--acks", os.path.relpath(chaos_store.acks, here),
         "--events", os.path.relpath(chaos_store.events, here),
         "--out", os.path.relpath(out, here), "--master", standalone_cluster, "--split-mib", "1"],
        capture_output=True, text=True, timeout=900, check=False, cwd=here,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout + cli.stderr[-3000:]
    remote = json.loads((out / "summary.json").read_text())
    remote.pop("findings")
    assert comparable_summary(remote) == json.loads(
        json.dumps(comparable_summary(local.summary), sort_keys=True)
    )
