"""Transactional messages with the stock RocketMQ 5.3.1 client against `brokergroup local up`
(issue 34 item 2), through the routes and key pair `local status --json` shows
(tools/rocketmq/modes/TransactionMode.java: a TransactionMQProducer whose local transaction
answers COMMIT, ROLLBACK or UNKNOW by the message's id, and whose check back commits an
UNKNOW one once a gate file exists):

- committed messages reach their topic once each, rolled-back ones never, and UNKNOW ones
  are checked back (CHECK_TRANSACTION_STATE, TRANSACTION_CHECK_TIMES from 1) and committed
  by the answer, once each; nothing committed at once is checked;
- across a SIGKILL of the master while the producer sends: half messages left UNKNOW
  (checked by the old master, answered UNKNOW) are checked by the new master once the gate
  opens and then delivered once; every acknowledged commit is delivered, every rollback
  never; a message acknowledged before the kill is delivered exactly once (sends in flight
  at the kill may be stored twice by the client's own retry: counted, not asserted).

What the topic holds is read at the end by a new consumer group from the first offset, so a
consumer's own redelivery (offsets across a failover) does not count as a duplicate.
transactionTimeOut 1 s and transactionCheckInterval 2 s keep the checks quick;
transactionCheckMax 100 keeps UNKNOW ones from being discarded while the test waits.

On the old code (b0939bf) the settings are unknown (`local up` fails); without them, every
transactional send is refused MESSAGE_ILLEGAL ("transactional messages are not supported by
brokergroup"), so the producer gets no SEND_OK (`sendOk` 0).

Skips, saying why, without Java or the cached jars.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.stock_client_harness import StockRuntime, stock_runtime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SETTINGS = (
    "transactionTimeOut=1000",
    "transactionCheckInterval=2000",
    "transactionCheckMax=100",
)
SIZE = 512


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockRuntime]:
    with stock_runtime(tmp_path_factory.mktemp("stock-tx"), SETTINGS) as runtime:
        yield runtime


def acks_of(path: Path) -> dict[str, tuple[str, int]]:
    """bodyId → (kind, sentAtMs) of each SEND_OK."""
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        if len(parts) == 5:
            out[parts[0]] = (parts[1], int(parts[4]))
    return out


def checks_of(path: Path) -> list[tuple[int, str, str, str]]:
    """(checkAtMs, bodyId, TRANSACTION_CHECK_TIMES, answer) per check back."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        if len(parts) == 4:
            out.append((int(parts[0]), parts[1], parts[2], parts[3]))
    return out


def wait_until(what: str, check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for: {what}")
        time.sleep(0.5)


def stored(rt: StockRuntime, topic: str, expected: set[str], group: str) -> Counter[str]:
    """How often each key is in `topic`, read by new groups from the first offset until
    `expected` is all there (at most three readers)."""
    seen: Counter[str] = Counter()
    for attempt in range(3):
        lines = rt.client.run(
            "consume", kind="lite", topic=topic, group=f"{group}-{attempt}", count=100_000,
            idle_s=6,
        )  # fmt: skip
        seen = Counter(str(m["keys"]) for m in lines if "summary" not in m)
        if expected <= set(seen):
            break
        time.sleep(3)
    return seen


def test_commit_rollback_and_unknown_resolved_by_check(rt: StockRuntime, tmp_path: Path) -> None:
    topic = "StockTx"
    gate = tmp_path / "gate"
    gate.touch()  # an UNKNOW one is committed at its first check
    acks_path, checks_path = tmp_path / "acks.tsv", tmp_path / "checks.tsv"
    stop = tmp_path / "stop"
    producer = rt.client.start(
        "transaction", tmp_path / "producer.log", topic=topic, run="t", count=5, size=SIZE,
        acks=acks_path, checks=checks_path, gate=gate, stop=stop, group="stock-tx-producer",
    )  # fmt: skip
    try:
        wait_until("15 SEND_OKs", lambda: len(acks_of(acks_path)) == 15, 120)
        unknown = {i for i, (kind, _) in acks_of(acks_path).items() if kind == "unknown"}
        wait_until(
            "every UNKNOW one checked and committed",
            lambda: unknown <= {c[1] for c in checks_of(checks_path) if c[3] == "COMMIT_MESSAGE"},
            60,
        )
    finally:
        stop.touch()
        try:
            producer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            producer.kill()
    acks = acks_of(acks_path)
    assert {k for k, _ in acks.values()} == {"commit", "rollback", "unknown"}, acks
    committed = {i for i, (kind, _) in acks.items() if kind in ("commit", "unknown")}
    seen = stored(rt, topic, committed, "stock-tx-read")
    assert dict(seen) == {i: 1 for i in committed}, "committed once each, rolled back never"
    checks = checks_of(checks_path)
    assert {c[1] for c in checks} == unknown, "only the UNKNOW ones are checked"
    first = {i: min(int(c[2]) for c in checks if c[1] == i) for i in unknown}
    assert set(first.values()) == {1}, first


def test_an_unknown_half_is_checked_by_the_new_master_after_a_kill(
    rt: StockRuntime, tmp_path: Path
) -> None:
    topic = "StockTxFailover"
    rt.wait_healthy()
    gate, stop, done = tmp_path / "gate", tmp_path / "stop", tmp_path / "done"
    acks_path, checks_path = tmp_path / "acks.tsv", tmp_path / "checks.tsv"
    producer = rt.client.start(
        "transaction", tmp_path / "producer.log", topic=topic, run="f", count=40, size=SIZE,
        kinds="unknown,commit,rollback", rate=15, acks=acks_path, checks=checks_path,
        gate=gate, stop=stop, done=done, group="stock-tx-failover",
    )  # fmt: skip
    try:
        wait_until("30 SEND_OKs", lambda: len(acks_of(acks_path)) >= 30, 120)
        wait_until(
            "a check answered UNKNOW by the old master",
            lambda: any(c[3] == "UNKNOW" for c in checks_of(checks_path)),
            60,
        )
        killed_at = int(time.time() * 1000)
        acked_before = set(acks_of(acks_path))
        epoch = rt.kill_master()["masterEpoch"]

        def new_master() -> bool:
            status = rt.status()
            return bool(status.get("master") and status.get("masterEpoch", 0) > epoch)

        wait_until("a new master", new_master, 120)
        wait_until("the producer's last send", done.exists, 180)
        assert any(at > killed_at for _, at in acks_of(acks_path).values()), (
            "no send after the kill"
        )
        gate.touch()
        unknown = {i for i, (kind, _) in acks_of(acks_path).items() if kind == "unknown"}

        def all_committed_after_the_kill() -> bool:
            answered = {c[1] for c in checks_of(checks_path)
                        if c[0] > killed_at and c[3] == "COMMIT_MESSAGE"}  # fmt: skip
            return unknown <= answered

        wait_until("every UNKNOW one committed by a check of the new master", all_committed_after_the_kill, 120)  # fmt: skip
    finally:
        stop.touch()
        try:
            producer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            producer.kill()
    assert rt.status()["masterEpoch"] > epoch
    acks = acks_of(acks_path)
    committed = {i for i, (kind, _) in acks.items() if kind in ("commit", "unknown")}
    rolled_back = {i for i, (kind, _) in acks.items() if kind == "rollback"}
    seen = stored(rt, topic, committed, "stock-tx-failover-read")
    missing = sorted(committed - set(seen))
    assert not missing, f"acknowledged and committed, not delivered: {missing}"
    assert not rolled_back & set(seen), sorted(rolled_back & set(seen))
    assert all(i.split("-")[1] != "rollback" for i in seen), seen
    twice = {i: n for i, n in seen.items() if n > 1}
    assert not {i for i in twice if i in acked_before}, f"delivered twice: {twice}"
    unknown_checks = [c for c in checks_of(checks_path) if c[1].split("-")[1] == "unknown"]
    print(
        f"{len(acks)} acknowledged ({len(committed)} committed, {len(rolled_back)} rolled "
        f"back); {len(unknown_checks)} checks of UNKNOW ones, "
        f"{sum(1 for c in unknown_checks if c[0] > killed_at)} after the kill; "
        f"{sum(n - 1 for n in twice.values())} duplicates of sends in flight at the kill"
    )
