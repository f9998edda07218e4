"""Shared fixtures of the audit tests: one SparkSession for the tier, and one
real store made by a chaos run of the local runtime (3 brokers, 2 master kills while
a producer writes an ack log and `brokergroup admin events` records the controller)."""

from __future__ import annotations

import contextlib
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
from pyspark import SparkContext
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


class SparkSessions:
    """The tier's one SparkSession, started again after a test that failed: a test cut off
    by its timeout inside a py4j call leaves the gateway's socket in the middle of an
    answer, and every later call reads the rest of that answer (in CI one such timeout
    turned into 10 more failures: KeyError 'c', "SparkSession does not exist in the JVM")."""

    def __init__(self) -> None:
        self._session: SparkSession | None = None

    def get(self) -> SparkSession:
        if self._session is None:
            self._session = spark_session("local[*]", app_name="brokergroup-audit-tests")
        return self._session

    def discard(self) -> None:
        """Stop the session and its JVM, whatever state the gateway is in."""
        session, self._session = self._session, None
        if session is None:
            return
        gateway = SparkContext._gateway
        # A desynchronised gateway raises anything (KeyError, Py4JError, OSError).
        with contextlib.suppress(Exception):
            session.stop()
        if gateway is not None:
            with contextlib.suppress(Exception):
                gateway.shutdown()
            proc = getattr(gateway, "proc", None)
            if proc is not None:
                proc.kill()
                proc.wait(timeout=30)
        # What getOrCreate() looks at: with these cleared it launches a new JVM.
        SparkContext._gateway = None
        SparkContext._jvm = None
        SparkContext._active_spark_context = None
        SparkSession._instantiatedSession = None
        SparkSession._activeSession = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each audit test's 300 s are its own: the tier's session fixtures (a chaos run of the
    local runtime, a SparkSession) start inside whichever test asks first, bounded by
    their own deadlines, and on a slow machine they took most of the first test's time."""
    for item in items:
        if item.nodeid.startswith("tests/pipeline/"):
            item.add_marker(pytest.mark.timeout(300, func_only=True))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"report_{report.when}", report)  # read by the spark fixture's teardown
    return report


# Package scope (here and below): the JVM and the stores go after the tier's last test, not at
# the end of the worker's session.
@pytest.fixture(scope="package")
def spark_sessions() -> Iterator[SparkSessions]:
    sessions = SparkSessions()
    yield sessions
    sessions.discard()


@pytest.fixture
def spark(spark_sessions: SparkSessions, request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    yield spark_sessions.get()
    if any(
        getattr(request.node, f"report_{when}", None) is not None
        and getattr(request.node, f"report_{when}").failed
        for when in ("setup", "call")
    ):
        spark_sessions.discard()


@pytest.fixture(scope="package")
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


@pytest.fixture(scope="package")
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
