"""A Spark standalone cluster on loopback, started from the installed pyspark's own
`spark-class` (org.apache.spark.deploy.master.Master and worker.Worker), as on real
machines: used by tests/pipeline/test_standalone_cluster.py and `bench/audit.py --scale`.
Every process is ended by its PID."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyspark

HOST = "127.0.0.1"
START_TIMEOUT_S = 180


class ClusterFailed(Exception):
    """A master or worker did not come up (the message has its log's tail)."""


@dataclass(frozen=True)
class Standalone:
    url: str
    """spark://127.0.0.1:PORT"""
    pids: tuple[int, ...]
    """Master first, then the workers (their executors are their children)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterFailed(
                f"spark master exited {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.5)
    raise ClusterFailed(f"spark master not listening on {port}:\n{log.read_text()[-3000:]}")


@contextmanager
def standalone_cluster(
    work: Path, workers: int = 2, cores: int = 1, memory: str = "1g"
) -> Iterator[Standalone]:
    """A master and `workers` workers of `cores` cores and `memory` each; logs and the
    workers' work directories under `work`."""
    work.mkdir(parents=True, exist_ok=True)
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    env = {**os.environ, "SPARK_HOME": str(spark_class.parent.parent), "SPARK_LOCAL_IP": HOST,
           "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}  # fmt: skip
    port = free_port()
    url = f"spark://{HOST}:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = work / "master.log"
        with log.open("wb") as out:
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
                        str(free_port()),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        _wait_port(port, procs[0], log)
        for i in range(workers):
            with (work / f"worker-{i}.log").open("wb") as out:
                procs.append(
                    subprocess.Popen(
                        [
                            str(spark_class),
                            "org.apache.spark.deploy.worker.Worker",
                            url,
                            "--host",
                            HOST,
                            "--cores",
                            str(cores),
                            "--memory",
                            memory,
                            "--webui-port",
                            str(free_port()),
                            "--work-dir",
                            str(work / f"work-{i}"),
                        ],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
        deadline = time.monotonic() + START_TIMEOUT_S
        while log.read_text().count("Registering worker") < workers:
            if time.monotonic() > deadline:
                raise ClusterFailed(
                    f"{workers} workers did not register:\n{log.read_text()[-3000:]}"
                )
            time.sleep(0.5)
        yield Standalone(url, tuple(p.pid for p in procs))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
