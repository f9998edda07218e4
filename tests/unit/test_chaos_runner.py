"""The chaos runner's producer loop (brokergroup_cli/chaos/runner.py `_produce`)
against a scripted producer: what each send's attempts were, and the outcome the
history records for it. A retry whose last attempt failed after an earlier
attempt that may have been written is indeterminate, never failed (the checker
would otherwise call a read-back of it a duplicate, and count it as certainly
not written)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from brokergroup_broker.protocol.client import BrokerConnectionError, NoMasterError
from brokergroup_broker.protocol.messages import (
    ProduceMessage,
    SendResult,
    SentMessage,
)
from brokergroup_broker.store.message import body_crc
from brokergroup_cli.chaos.checker import FAILED, INDETERMINATE, OK, FaultWindow
from brokergroup_cli.chaos.runner import (
    Run,
    _Clock,
    _produce,
    read_history,
    replica_addresses,
    write_history,
)
from brokergroup_cli.chaos.stock_run import consumer_log_excerpt


class ScriptedProducer:
    """Answers each send with the next scripted step: an exception, or an
    acknowledgement at the next queue offset. Stops the run when the script ends."""

    def __init__(self, script: Sequence[BaseException | None], stop: asyncio.Event) -> None:
        self.script = list(script)
        self.stop = stop
        self.sent: list[str] = []
        self.offset = 0

    async def send(self, message: ProduceMessage, queue_id: int | None = None) -> SendResult:
        self.sent.append(message.key or "")
        step = self.script.pop(0)
        if not self.script:
            self.stop.set()
        if step is not None:
            raise step
        self.offset += 1
        return SendResult((SentMessage(0, self.offset - 1, 100 * self.offset),), 3)


def _run(script: Sequence[BaseException | None], attempts: int) -> tuple[Run, list[str]]:
    async def go() -> tuple[Run, list[str]]:
        run, stop = Run(), asyncio.Event()
        producer = ScriptedProducer(script, stop)
        await _produce("p0", "t", 0, producer, _Clock(), run, stop, 0.0, attempts)  # type: ignore[arg-type]
        return run, producer.sent

    return asyncio.run(go())


TIMEOUT = BrokerConnectionError("127.0.1.110:10911", "no answer within 2000 ms")
NO_MASTER = NoMasterError("no master for DefaultCluster/broker-a right now")


def test_a_send_that_failed_after_an_indeterminate_attempt_is_indeterminate() -> None:
    run, sent = _run([TIMEOUT, NO_MASTER, NO_MASTER, None], attempts=3)
    assert sent == ["p0-0", "p0-0", "p0-0", "p0-1"]  # one key, retried
    assert [(o.key, o.outcome, o.attempts) for o in run.operations] == [
        ("p0-0", INDETERMINATE, (INDETERMINATE, FAILED, FAILED)),
        ("p0-1", OK, (OK,)),
    ]
    assert [(line["key"], line["outcome"], line["attempts"]) for line in run.ack_lines] == [
        ("p0-0", INDETERMINATE, [INDETERMINATE, FAILED, FAILED]),
        ("p0-1", OK, [OK]),
    ]
    body = b"p0-1|" + b"x" * 64
    assert run.operations[1].body_crc == body_crc(body)


def test_a_send_whose_every_attempt_failed_is_failed_and_a_retry_can_succeed() -> None:
    run, sent = _run([NO_MASTER, NO_MASTER, TIMEOUT, None], attempts=2)
    assert sent == ["p0-0", "p0-0", "p0-1", "p0-1"]
    assert [(o.key, o.outcome, o.attempts, o.queue_offset) for o in run.operations] == [
        ("p0-0", FAILED, (FAILED, FAILED), None),
        ("p0-1", OK, (INDETERMINATE, OK), 0),
    ]


def test_the_drain_reads_every_live_replica_but_the_master() -> None:
    info = {
        "masterAddress": "127.0.1.110:10911",
        "brokers": [
            {"brokerId": 1, "address": "127.0.1.110:10911", "alive": True},
            {"brokerId": 2, "address": "127.0.1.112:10911", "alive": True},
            {"brokerId": 3, "address": "127.0.1.111:10911", "alive": True},
            {"brokerId": 4, "address": "127.0.1.113:10911", "alive": False},
        ],
    }
    assert replica_addresses(info) == ["127.0.1.111:10911", "127.0.1.112:10911"]


def test_the_history_reads_back_as_the_operations_and_windows_written(tmp_path: Path) -> None:
    run, _ = _run([TIMEOUT, NO_MASTER, NO_MASTER, None], attempts=3)
    run.windows.append(FaultWindow("kill-master", 0.5, 3.5, "SIGKILL master"))
    write_history(run, tmp_path)
    operations, windows = read_history(tmp_path)
    # Times are kept to the microsecond.
    assert [replace(o, invoke_s=0.0, complete_s=0.0) for o in operations] == [
        replace(o, invoke_s=0.0, complete_s=0.0) for o in run.operations
    ]
    assert windows == run.windows


def test_the_consumer_excerpt_keeps_the_client_logs_last_consumer_lines(tmp_path: Path) -> None:
    logs = tmp_path / "client" / "logs" / "rocketmqlogs"
    logs.mkdir(parents=True)
    (logs / "tools_default.log").write_text(
        "01:00 INFO main - the consumer [chaos-c] start OK.\n"
        "01:01 DEBUG RebalanceService - noisy rebalance detail\n"
        "01:02 INFO main - the producer [p] start OK.\n"
        "01:03 WARN RebalanceService - doRebalance, chaos-c, add new mq failed\n"
        "01:04 INFO RebalanceService - doRebalance, chaos-c, add a new mq\n"
    )
    assert consumer_log_excerpt(tmp_path, lines=2).splitlines() == [
        "01:03 WARN RebalanceService - doRebalance, chaos-c, add new mq failed",
        "01:04 INFO RebalanceService - doRebalance, chaos-c, add a new mq",
    ]
    assert consumer_log_excerpt(tmp_path / "nothing") == "(no client log lines about it)"
