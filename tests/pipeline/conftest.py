"""Shared fixtures of the audit tests: one SparkSession per test session, and one
real store made by a chaos run of the local runtime (3 brokers, 2 master kills while
a producer writes an ack log and `brokergroup admin events` records the controller)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from brokergroup_audit.session import spark_session
from tests.integration.local_harness import (
    CONTROLLER_API_ADDRESSES,
    Runtime,
    local_runtime,
    wait_for,
)

FIXTURE_TAR = (
    Path(__file__).resolve().parents[3]
    / "shared/fixtures/rocketmq-5.3-store/rocketmq-5.3-store.tar.gz"
)
#: Small segments so the store has several, with blank records at their ends.
SEGMENT_BYTES = 256 * 1024


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[*]", app_name="brokergroup-audit-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def rocketmq_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not FIXTURE_TAR.is_file():
        pytest.skip(f"RocketMQ fixture {FIXTURE_TAR} not present")
    out = tmp_path_factory.mktemp("rocketmq")
    with tarfile.open(FIXTURE_TAR) as tar:
        tar.extractall(out, filter="data")
    return out / "rocketmq-5.3-store"


@dataclass(frozen=True)
class ChaosStore:
    brokers: Path
    """A copy of the runtime's brokers/ directory (one store per slot)."""
    acks: Path
    events: Path
    killed: list[int]
    """BrokerIds killed as master, in order."""
    epochs_after_kills: list[int]


def _in_sync(rt: Runtime, min_epoch: int) -> dict[str, Any] | None:
    s = rt.status()
    if s["master"] is None or s["masterEpoch"] < min_epoch or len(s["syncStateSet"]) != 3:
        return None
    if any(b["process"] != "running" or b["alive"] is not True for b in s["brokers"]):
        return None
    return s


class _Producer(threading.Thread):
    """Runs `brokergroup produce` again and again (each follows failovers) until stopped."""

    def __init__(self, rt: Runtime, ack_log: Path) -> None:
        super().__init__(daemon=True)
        self.rt, self.ack_log = rt, ack_log
        self.stop = threading.Event()
        self.runs: list[str] = []

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            result = subprocess.run(
                [sys.executable, "-m", "brokergroup_cli.main", "produce",
                 "--controller-addresses", CONTROLLER_API_ADDRESSES,
                 "--controller-token-file", str(self.rt.root / "token"),
                 "--key-file", str(self.rt.root / "client-keys.json"),
                 "--broker-name", "broker-a", "--topic", "AuditT", "--count", "1500",
                 "--batch", "16", "--size", "300", "--key-prefix", f"r{n}-",
                 "--retry-deadline-ms", "20000", "--ack-log", str(self.ack_log), "--json"],
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip
            self.runs.append(result.stdout.strip() or result.stderr[-500:])
            n += 1

    def acked(self) -> int:
        try:
            return sum(1 for _ in self.ack_log.open())
        except OSError:
            return 0


@pytest.fixture(scope="session")
def chaos_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosStore]:
    base = tmp_path_factory.mktemp("chaos")
    acks = base / "acks.jsonl"
    events = base / "events.jsonl"
    with local_runtime(base / "local", (f"broker.mappedFileSizeCommitLog={SEGMENT_BYTES}",)) as rt:
        up = rt.up(brokers=3)
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{rt.logs()}"
        first = wait_for("3 brokers in sync", lambda: _in_sync(rt, 1), 90, rt)
        recorder = subprocess.Popen(
            [sys.executable, "-m", "brokergroup_cli.main", "admin", "events",
             "--controller-addresses", CONTROLLER_API_ADDRESSES,
             "--token-file", str(rt.root / "token"), "--out", str(events),
             "--poll-timeout-ms", "1000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        producer = _Producer(rt, acks)
        killed: list[int] = []
        epochs: list[int] = []
        try:
            producer.start()
            epoch = first["masterEpoch"]
            for round_ in range(2):
                target = 800 * (round_ + 1)
                deadline = time.monotonic() + 90
                while producer.acked() < target and time.monotonic() < deadline:
                    time.sleep(0.2)
                master = rt.status()["master"]["brokerId"]
                kill = rt.run("kill", "master")
                assert kill.returncode == 0, kill.stderr
                killed.append(master)
                s = wait_for(
                    "a new master with all 3 back in sync",
                    lambda e=epoch: _in_sync(rt, e + 1),
                    90,
                    rt,
                )
                epoch = s["masterEpoch"]
                epochs.append(epoch)
            producer.stop.set()
            producer.join(timeout=150)

            # Let the slaves catch up before stopping: every broker at the master's end.
            def caught_up() -> dict[str, Any] | None:
                s = rt.status()
                offsets = {b["maxOffset"] for b in s["brokers"]}
                return s if len(offsets) == 1 and None not in offsets else None

            wait_for("replicas at the same offset", caught_up, 60, rt)
            time.sleep(1.5)  # one more recorder poll after the last change
        finally:
            producer.stop.set()
            recorder.terminate()
            recorder.wait(timeout=10)
        down = rt.run("down", timeout_s=60)
        assert down.returncode == 0, down.stderr
        copy = base / "brokers"
        shutil.copytree(rt.root / "brokers", copy)
    yield ChaosStore(copy, acks, events, killed, epochs)
