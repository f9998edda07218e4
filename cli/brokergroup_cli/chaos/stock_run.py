"""A chaos run with the stock RocketMQ Java client as the workload (issue 37 item 1): the
same fault windows (`runner.fault_windows`) against any `Target`, so one schedule and one
seed give comparable reports for `local`, `local-rocketmq` and `rocketmq`.

The workload is tools/rocketmq/modes/ChaosWorkloadMode.java (rocketmq-client 5.3.1 at its
default retry settings, compiled by tools/rocketmq/stock_client.py): N producer threads, one
message at a time each, a unique key per message, one line per send with its wall-clock
invoke and completion and its outcome (`ok` = SEND_OK: the checker's acknowledged set;
`failed` only for a send that never left the client; `indeterminate` otherwise), and a push
consumer recording what it receives. After the last window and the recovery the producers
stop, the group must be healthy again, and every replica's commit log is read from disk
(`disklog`) — after the processes stopped, so nothing moves under the reader; the replica
the controllers named master last is the reference. The checker is the one of every run.

Times: the Java client stamps the wall clock (ms); this run's clock is the wall clock from
its start, so fault windows and sends share one timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from brokergroup_cli.chaos import faults as fault_kinds
from brokergroup_cli.chaos.checker import Operation, ReadRecord
from brokergroup_cli.chaos.disklog import read_commitlog
from brokergroup_cli.chaos.runner import TOPIC, Run, Schedule, fault_windows, wait_healthy
from brokergroup_cli.chaos.targets.base import Target, TargetError

REPO = Path(__file__).resolve().parents[3]
STOCK_CLIENT_PY = REPO / "tools" / "rocketmq" / "stock_client.py"
MODE = "chaosWorkload"
#: How long the workload may take to stop after the stop file (its consumer drains 2 s).
STOP_TIMEOUT_S = 60.0
#: How long the first SEND_OK may take (a stock client's first route, topic creation).
FIRST_ACK_TIMEOUT_S = 90.0
#: How long the consumer may take, after the first SEND_OK, to receive its first message
#: (its route, its queues' offsets from the master, a rebalance: RocketMQ retries a failed
#: one every 20 s).
FIRST_READ_TIMEOUT_S = 90.0
#: The client log's lines that say what the consumer did (route, rebalance, offsets, pulls).
_CONSUMER_LOG_WORDS = ("ebalance", "route", "offset", "pull", "Pull", "consumer")
#: How long a freshly started group may take to become healthy before the first window: a
#: liveness bound (seven JVMs starting on a loaded 2-core machine), not the schedule's
#: `healthy_timeout_s`, which bounds each recovery.
STARTUP_HEALTHY_TIMEOUT_S = 240.0


def stock_client_module() -> ModuleType:
    """tools/rocketmq/stock_client.py of this checkout (stdlib only; not installed)."""
    if not STOCK_CLIENT_PY.is_file():
        raise TargetError(
            f"the stock workload needs a brokergroup checkout: {STOCK_CLIENT_PY} is missing"
        )
    spec = importlib.util.spec_from_file_location("brokergroup_stock_client", STOCK_CLIENT_PY)
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return module


def stock_unavailable_reason() -> str | None:
    """Why the stock workload cannot run here (no JDK, jars not cached), or None."""
    if not STOCK_CLIENT_PY.is_file():
        return f"the stock workload needs a brokergroup checkout ({STOCK_CLIENT_PY})"
    reason: str | None = stock_client_module().missing(servers=True)
    return reason


def _target_cannot(target: Target, fault: str) -> str | None:
    reason = fault_kinds.target_unavailable_reason(fault, bool(getattr(target, "node_gids", False)))
    if reason is not None:
        return reason
    if fault.startswith(fault_kinds.FILL_MASTER_DISK) and not getattr(
        target, "broker_disk_bytes", None
    ):
        return (
            "filling a disk needs a tmpfs per broker (the local targets, as root); this "
            "target's brokers write to the machine's own disk"
        )
    return None


class _WallClock:
    def __init__(self, start_s: float = 0.0) -> None:
        self.t0 = time.time() - start_s

    def now(self) -> float:
        return time.time() - self.t0


def _operation(line: dict[str, Any], t0: float, topic: str) -> Operation:
    outcome = str(line["outcome"])
    return Operation(
        str(line["client"]), int(line["seq"]), str(line["key"]),
        line["invokeMs"] / 1000 - t0, line["completeMs"] / 1000 - t0, outcome,
        line.get("queueId"), line.get("queueOffset"),
        None if outcome == "ok" else str(line.get("detail")), line.get("bodyCrc"), (outcome,),
        topic,
    )  # fmt: skip


def _history_line(op: Operation, topic: str) -> dict[str, Any]:
    line: dict[str, Any] = {
        "op": "send", "client": op.client, "seq": op.seq, "key": op.key, "topic": topic,
        "bodyCrc": op.body_crc, "brokerName": "broker-a", "invokeTime": round(op.invoke_s, 6),
        "completeTime": round(op.complete_s, 6), "outcome": op.outcome,
    }  # fmt: skip
    if op.queue_id is not None:
        line |= {"queueId": op.queue_id, "queueOffset": op.queue_offset}
    if op.error is not None:
        line["error"] = op.error
    return line


class _Tail:
    """The lines a running JVM has written so far (complete lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        return [json.loads(x) for x in data[:end].splitlines() if x.strip()]


async def run_stock_schedule(
    target: Target, schedule: Schedule, work: Path, progress: Callable[[str], None]
) -> Run:
    """The schedule against `target` with the stock workload; `target` is stopped before
    its stores are read (the caller's `down()` afterwards finds nothing left)."""
    stock = stock_client_module()
    reason = stock.missing(servers=True)
    if reason is not None:
        raise TargetError(reason)
    rng = random.Random(f"{schedule.seed}/{schedule.client_prefix}")
    topic = f"{TOPIC}-{schedule.client_prefix}" if schedule.client_prefix else TOPIC
    clock = _WallClock(schedule.start_s)
    run = Run()
    usable = []
    for fault in schedule.faults:
        why = fault_kinds.unavailable_reason(fault) or _target_cannot(target, fault)
        if why is None:
            usable.append(fault)
        else:
            run.skipped[fault] = why
            progress(f"skipping {fault}: {why}")
    started = time.monotonic()
    if not await wait_healthy(target, max(schedule.healthy_timeout_s, STARTUP_HEALTHY_TIMEOUT_S)):
        raise TargetError(
            f"{target.name}: the group never became healthy in "
            f"{time.monotonic() - started:.0f} s: {await _health_problem(target)}"
        )
    progress(f"{target.name}: healthy {time.monotonic() - started:.1f} s after start")
    await asyncio.to_thread(target.create_topic, topic, schedule.producers)
    endpoint = target.client()
    work.mkdir(parents=True, exist_ok=True)
    sends, receives, stop = work / "sends.jsonl", work / "receives.jsonl", work / "stop"
    stop.unlink(missing_ok=True)
    client = stock.StockClient(
        endpoint.namesrv, work / "client", endpoint.access_key, endpoint.secret_key,
        classes=await asyncio.to_thread(stock.build), jvm_options=endpoint.jvm_options,
    )  # fmt: skip
    jvm: subprocess.Popen[bytes] = client.start(
        MODE, work / "workload.log", topic=topic, producers=schedule.producers,
        run=schedule.client_prefix, stop=stop, sends=sends, receives=receives,
        pause_ms=int(schedule.send_pause_s * 1000), send_timeout_ms=schedule.op_timeout_ms + 1000,
        group=f"chaos-{schedule.client_prefix or 'c'}",
    )  # fmt: skip
    tail = _Tail(sends)
    acked_invokes: list[float] = []  # wall clock (s) of every acknowledged send's invoke

    def acknowledged_since(wall_s: float) -> bool:
        return any(t >= wall_s for t in reversed(acked_invokes))

    if hasattr(target, "acknowledged_since"):  # a master's kill waits for a fresh ack
        target.acknowledged_since = acknowledged_since

    async def follow() -> None:
        while True:
            lines = tail.read()
            acked_invokes.extend(x["invokeMs"] / 1000 for x in lines if x["outcome"] == "ok")
            run.operations.extend(_operation(x, clock.t0, topic) for x in lines)
            await asyncio.sleep(0.2)

    follower = asyncio.create_task(follow())
    try:
        deadline = time.monotonic() + FIRST_ACK_TIMEOUT_S
        while not any(o.outcome == "ok" for o in run.operations):
            if jvm.poll() is not None or time.monotonic() > deadline:
                log = (work / "workload.log").read_text(errors="replace")[-2000:]
                raise TargetError(f"the stock workload acknowledged nothing: {log}")
            await asyncio.sleep(0.2)
        # The windows start once the consumer has received: a consumer that has no queues
        # yet when the master dies can show nothing about what a fault does to reads (CI
        # run 47: on a loaded machine the plain RocketMQ group's consumer received nothing
        # in the whole run, its first rebalance evidently not done before the first kill).
        first_ack_s = time.monotonic()
        receipts = _Tail(receives)
        while not receipts.read():
            if jvm.poll() is not None or time.monotonic() - first_ack_s > FIRST_READ_TIMEOUT_S:
                raise TargetError(
                    "the stock workload's consumer received nothing in "
                    f"{time.monotonic() - first_ack_s:.0f} s after the first SEND_OK; its "
                    f"client log says:\n{consumer_log_excerpt(work)}"
                )
            await asyncio.sleep(0.2)
        progress(
            f"{target.name}: stock workload running ({schedule.producers} producers; the "
            f"consumer's first message {time.monotonic() - first_ack_s:.1f} s after the first "
            "SEND_OK)"
        )
        await fault_windows(target, schedule, usable, rng, clock, run, progress)  # type: ignore[arg-type]
        await asyncio.sleep(schedule.recovery_s)
    finally:
        if hasattr(target, "acknowledged_since"):
            target.acknowledged_since = None
        stop.touch()
        try:
            await asyncio.to_thread(jvm.wait, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
    run.operations = [_operation(x, clock.t0, topic) for x in _Tail(sends).read()]
    run.ack_lines = [_history_line(op, topic) for op in run.operations]
    if not await wait_healthy(target, schedule.healthy_timeout_s):
        run.not_recovered.append("after the run: not healthy")
    master = await asyncio.to_thread(target.master)
    stores = target.replica_stores()
    await _settle(target, stores, topic, schedule.drain_settle_s)
    await asyncio.to_thread(target.down)
    reference = f"broker-{master.index}" if master is not None else None
    if reference is None:
        run.not_recovered.append("no master at the end: the first replica is the reference")
        reference = stores[0].name
    for store in stores:
        records = read_commitlog(store.commitlog_dir, topic, store.name)
        if store.name == reference:
            run.read_back = records
        else:
            run.replica_reads.extend(records)
            run.replicas_read.append((store.name, topic))
    for line in _Tail(receives).read():
        record = ReadRecord(str(line.get("key") or ""), int(line["queueId"]),
                            int(line["queueOffset"]), topic, line.get("bodyCrc"),
                            str(line.get("brokerName", "")))  # fmt: skip
        run.consumed.append(record)
    run.reads = len(run.consumed)
    run.ended_s = clock.now()
    return run


def consumer_log_excerpt(work: Path, lines: int = 25) -> str:
    """The stock client's own log lines about its consumer (the RocketMQ client logs to
    `<home>/logs/rocketmqlogs/`), the last `lines`: why it has not received."""
    found: list[str] = []
    for log in sorted((work / "client").glob("**/rocketmqlogs/*.log")):
        with contextlib.suppress(OSError):
            found += [
                x for x in log.read_text(errors="replace").splitlines()
                if " DEBUG " not in x and any(w in x for w in _CONSUMER_LOG_WORDS)
            ]  # fmt: skip
    return "\n".join(x[:300] for x in found[-lines:]) or "(no client log lines about it)"


async def _health_problem(target: Target) -> str:
    describe = getattr(target, "health_problem", None)
    if describe is None:
        return "(the target does not say why)"
    return str(await asyncio.to_thread(describe))


async def _settle(target: Target, stores: list[Any], topic: str, settle_s: float) -> None:
    """Give the slaves up to `settle_s` to hold as many records as the longest log (a
    slave replicates what the master wrote after the last acknowledged send too)."""
    deadline = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        counts = [
            len(await asyncio.to_thread(read_commitlog, s.commitlog_dir, topic, s.name))
            for s in stores
        ]
        if len(set(counts)) <= 1:
            return
        await asyncio.sleep(0.5)
