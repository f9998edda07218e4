"""One chaos run: a local runtime, producer and consumer clients at a steady
rate, alternating normal and fault windows, a recovery phase, a drain of
every queue, then the checker (`checker.check`) and the reports.

Producers send one new key per operation, retried as a client would (up to
`Schedule.send_attempts` attempts, same key and body); each attempt has an
outcome — `ok` (acknowledged), `failed` (certainly not written: refused
before the append, or never sent) or `indeterminate` — and the operation's
is `checker.settle` of them: a last attempt that failed after an
indeterminate one is indeterminate, never failed. Each producer writes to
its own queue, so its acknowledged keys must be read back in send order.
Consumers tail every queue meanwhile (their reads are recorded, not judged).
The final drain reads every replica, bodies included. The history (JSON
lines) doubles as the acknowledgement log the audit reads (`brokergroup
audit --acks`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brokergroup_broker.protocol.client import (
    BrokerConnection,
    BrokerConnectionError,
    BrokerUnavailableError,
    ClientConfig,
    NoMasterError,
)
from brokergroup_broker.protocol.consumer import Consumer
from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage, ResponseCode
from brokergroup_broker.protocol.producer import Producer
from brokergroup_broker.store.message import body_crc
from brokergroup_cli.chaos import faults as fault_kinds
from brokergroup_cli.chaos.checker import (
    FAILED,
    INDETERMINATE,
    OK,
    FaultWindow,
    Operation,
    ReadRecord,
    accumulate,
    settle,
)
from brokergroup_cli.chaos.runtime import BROKER_NAME, CLUSTER, LocalRuntime, LocalRuntimeError
from brokergroup_cli.chaos.targets.base import Target, TargetError
from brokergroup_cli.chaos.targets.local import LocalTarget
from brokergroup_remoting.net import Credentials

TOPIC = "chaos"
#: Refusals that come before anything is appended.
_NOT_WRITTEN = frozenset(
    {ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH, ResponseCode.TOPIC_INVALID, ResponseCode.BAD_REQUEST}
)


@dataclass
class Schedule:
    faults: tuple[str, ...]
    windows: int
    seed: int
    normal_s: float = 2.0
    fault_s: float = 3.0
    recovery_s: float = 3.0
    healthy_timeout_s: float = 45.0
    producers: int = 3
    consumers: int = 1
    send_pause_s: float = 0.01
    op_timeout_ms: int = 2_000
    client_prefix: str = ""
    """Names this run's clients (and so its keys) apart from another phase's."""
    start_s: float = 0.0
    """The run's clock starts here (a later phase continues an earlier one's timeline)."""
    send_attempts: int = 3
    """Attempts per send (a client's retries: same key and body)."""
    plants: tuple[str, ...] = ()
    """Negative control only (PLANTS): defects written after the producers stop, which
    the checker must then report."""
    drain_settle_s: float = 10.0
    """How long the drain waits for a replica to serve as far as the master does
    (slaves serve up to confirmOffset, which follows the master's by a heartbeat)."""
    sequence: tuple[tuple[str, float, float], ...] = ()
    """A named scenario's steps (fault, normal_s before it, fault_s), run in order
    instead of the shuffled rotation (`chaos.scenarios`)."""


#: A second copy of an acknowledged key and body, sent to its queue again.
PLANT_DUPLICATE = "duplicate"
#: Two keys of one planted client written in the opposite order of their seqs.
PLANT_REORDER = "reorder"
PLANTS = (PLANT_DUPLICATE, PLANT_REORDER)


@dataclass
class Run:
    """What a run observed, in the run's monotonic seconds (t0 = start)."""

    operations: list[Operation] = field(default_factory=list)
    ack_lines: list[dict[str, Any]] = field(default_factory=list)
    windows: list[FaultWindow] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    reads: int = 0
    read_errors: int = 0
    read_back: list[ReadRecord] = field(default_factory=list)
    """The final master's log."""
    replica_reads: list[ReadRecord] = field(default_factory=list)
    """Every other replica's log (`ReadRecord.replica` names it)."""
    replicas_read: list[tuple[str, str]] = field(default_factory=list)
    """(replica, topic) of every replica the drain read, empty ones included."""
    planted: dict[str, list[str]] = field(default_factory=dict)
    """Negative control: plant -> the keys it wrote."""
    consumed: list[ReadRecord] = field(default_factory=list)
    """What the tailing consumers read during the run, in read order."""
    read_lines: list[dict[str, Any]] = field(default_factory=list)
    not_recovered: list[str] = field(default_factory=list)
    ended_s: float = 0.0
    """The run's clock when it finished (a next phase starts after it)."""
    healthy_s: list[float | None] = field(default_factory=list)
    """Per window (as `windows`): when the group was seen healthy again (SyncStateSet
    full, every process back), None if it never was (recovery time, issue 37)."""

    def extend(self, other: Run) -> None:
        """Add a later phase (another runtime, its own clients and keys)."""
        accumulate(self, other)


class _Clock:
    def __init__(self, start_s: float = 0.0) -> None:
        self.t0 = time.monotonic() - start_s

    def now(self) -> float:
        return time.monotonic() - self.t0


def outcome_of(exc: BaseException) -> str:
    """One attempt's outcome from its error."""
    cause = exc.__cause__ if isinstance(exc, BrokerUnavailableError) else exc
    if isinstance(cause, BrokerError):
        return FAILED if cause.code in _NOT_WRITTEN else INDETERMINATE
    if isinstance(cause, NoMasterError):
        return FAILED
    if isinstance(cause, BrokerConnectionError) and "connect " in str(cause):
        return FAILED  # the connection never opened: nothing was sent
    return INDETERMINATE


_SEND_ERRORS = (BrokerError, BrokerUnavailableError, NoMasterError, OSError)
#: Pause before a retry (the producer re-discovers the master on its next send).
RETRY_PAUSE_S = 0.05


def body_of(key: str) -> bytes:
    """The body sent under `key` (its CRC is what the checker compares)."""
    return f"{key}|{'x' * 64}".encode()


async def _produce(
    name: str,
    topic: str,
    queue_id: int,
    producer: Producer,
    clock: _Clock,
    run: Run,
    stop: asyncio.Event,
    pause_s: float,
    attempts: int = 1,
) -> None:
    seq = 0
    while not stop.is_set():
        key = f"{name}-{seq}"
        body = body_of(key)
        invoke = clock.now()
        outcomes: list[str] = []
        error: str | None = None
        result = None
        while result is None and len(outcomes) < attempts:
            if outcomes:
                await asyncio.sleep(RETRY_PAUSE_S)
            try:
                result = await producer.send(
                    ProduceMessage(topic, body, key=key), queue_id=queue_id
                )
            except _SEND_ERRORS as exc:
                outcomes.append(outcome_of(exc))
                error = f"{type(exc).__name__}: {exc}"[:200]
        done = clock.now()
        if result is None:
            outcome = settle(outcomes)
            run.operations.append(
                Operation(name, seq, key, invoke, done, outcome, error=error,
                          body_crc=body_crc(body), attempts=tuple(outcomes), topic=topic)
            )  # fmt: skip
            run.ack_lines.append(
                _line(name, topic, seq, key, invoke, done, outcome, body, error)
                | {"attempts": outcomes}
            )
            seq += 1
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        outcomes.append(OK)
        sent = result.messages[0]
        run.operations.append(
            Operation(name, seq, key, invoke, done, OK, sent.queue_id, sent.queue_offset,
                      body_crc=body_crc(body), attempts=tuple(outcomes), topic=topic)
        )  # fmt: skip
        run.ack_lines.append(
            _line(name, topic, seq, key, invoke, done, OK, body, None)
            | {
                "queueId": sent.queue_id,
                "queueOffset": sent.queue_offset,
                "physicalOffset": sent.physical_offset,
                "masterEpoch": result.master_epoch,
                "ackTimeMs": int(time.time() * 1000),
                "attempts": outcomes,
            }
        )
        seq += 1
        await asyncio.sleep(pause_s)


def _line(
    client: str, topic: str, seq: int, key: str, invoke: float, complete: float, outcome: str,
    body: bytes, error: str | None,
) -> dict[str, Any]:  # fmt: skip
    line: dict[str, Any] = {
        "op": "send",
        "client": client,
        "seq": seq,
        "key": key,
        "topic": topic,
        "bodyCrc": body_crc(body),
        "brokerName": BROKER_NAME,
        "invokeTime": round(invoke, 6),
        "completeTime": round(complete, 6),
        "outcome": outcome,
    }
    if error is not None:
        line["error"] = error
    return line


async def _consume(
    name: str,
    topic: str,
    consumer: Consumer,
    queues: Sequence[int],
    clock: _Clock,
    run: Run,
    stop: asyncio.Event,
) -> None:
    """Tail every queue from offset 0; every pull is an operation of the history
    (reads.jsonl) and every message read is judged against the final log."""
    offsets = dict.fromkeys(queues, 0)
    while not stop.is_set():
        for queue_id in queues:
            invoke = clock.now()
            line: dict[str, Any] = {"op": "pull", "client": name, "topic": topic,
                                    "queueId": queue_id, "fromOffset": offsets[queue_id]}  # fmt: skip
            try:
                result = await consumer.pull(topic, queue_id, offsets[queue_id], 64)
            except Exception as exc:  # a read during a fault may fail: recorded, not judged
                run.read_errors += 1
                run.read_lines.append(
                    line | {"invokeTime": round(invoke, 6), "completeTime": round(clock.now(), 6),
                            "outcome": INDETERMINATE,
                            "error": f"{type(exc).__name__}: {exc}"[:200]}
                )  # fmt: skip
                await asyncio.sleep(0.1)
                continue
            replica = consumer.read_address or ""
            got = [
                ReadRecord(m.key or "", queue_id, m.queue_offset, topic, body_crc(m.body), replica)
                for m in result.messages
            ]
            run.consumed.extend(got)
            run.reads += len(got)
            if got:
                run.read_lines.append(
                    line | {"invokeTime": round(invoke, 6), "completeTime": round(clock.now(), 6),
                            "outcome": OK, "read": [[r.queue_offset, r.key] for r in got],
                            "replica": replica}
                )  # fmt: skip
            offsets[queue_id] = max(offsets[queue_id], result.next_queue_offset)
        await asyncio.sleep(0.05)


async def wait_healthy(target: Target, timeout_s: float) -> bool:
    """Until `target.healthy()`, reviving what a fault ended for good (`Target.revive`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        await asyncio.to_thread(target.revive)
        if await asyncio.to_thread(target.healthy):
            return True
        await asyncio.sleep(0.2)
    return False


async def read_log(
    address: str,
    topic: str,
    queues: Sequence[int],
    credentials: Credentials | None = None,
    config: ClientConfig | None = None,
) -> list[ReadRecord]:
    """Every message one replica serves of `queues`, in log order, bodies' CRCs included
    (`config`: the runtime's, TLS included)."""
    conn = await BrokerConnection.connect(address, config, credentials=credentials)
    try:
        out: list[ReadRecord] = []
        for queue_id in queues:
            offset = 0
            while True:
                result = await conn.pull(topic, queue_id, offset, 256)
                if not result.messages:
                    break
                out.extend(
                    ReadRecord(m.key or "", queue_id, m.queue_offset, topic, body_crc(m.body),
                               address)
                    for m in result.messages
                )  # fmt: skip
                offset = result.next_queue_offset
        return out
    finally:
        await conn.close()


def replica_addresses(info: dict[str, object]) -> list[str]:
    """Every live replica's address but the master's, from replica-info."""
    rows = info.get("brokers")
    master = info.get("masterAddress")
    found = {
        str(b["address"])
        for b in (rows if isinstance(rows, list) else [])
        if isinstance(b, dict) and b.get("alive") and b.get("address")
    }
    return sorted(found - {master})


async def drain(
    rt: LocalRuntime, topic: str, queues: Sequence[int], run: Run, settle_s: float = 10.0
) -> None:
    """The final read-back: the live master's log into `run.read_back`, every other
    replica's into `run.replica_reads`. A replica serves up to its confirmOffset,
    which follows the master's by a heartbeat: one that serves less than the master
    is read again for up to `settle_s` before what it holds is recorded."""
    info = await asyncio.to_thread(rt.replica_info)
    if info is None or not info.get("masterAddress"):
        raise LocalRuntimeError("no master to drain from")
    master = str(info["masterAddress"])
    pair = await asyncio.to_thread(rt.client_pair)
    config = rt.client_config()
    run.read_back = await read_log(master, topic, queues, pair, config)
    deadline = time.monotonic() + settle_s
    slaves = replica_addresses(info)
    if len(slaves) < rt.brokers - 1:
        run.not_recovered.append(f"drain: {len(slaves)} live slaves, not {rt.brokers - 1}")
    for address in slaves:
        error: Exception | None = None
        while True:
            try:
                held = await read_log(address, topic, queues, pair, config)
            except (OSError, BrokerError, BrokerConnectionError) as exc:
                held, error = [], exc
            else:
                error = None
            if len(held) >= len(run.read_back) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.2)
        if error is not None:
            run.not_recovered.append(f"replica {address} not readable: {error}")
        run.replica_reads.extend(held)
        run.replicas_read.append((address, topic))


async def plant(
    rt: LocalRuntime, kinds: Sequence[str], topic: str, name: str, run: Run, clock: _Clock
) -> None:
    """Negative control: write defects the checker must report. `duplicate`: the
    last acknowledged key (after every fault) sent again, same body (a second copy
    the history does not know of). `reorder`: a planted client's keys 0 and 1
    acknowledged in the opposite order of their seqs (what a broker that reordered
    a client's sends would leave)."""
    # One read can miss the master on a loaded machine (1 s per controller): in CI the
    # negative control failed "no master to plant on" right after both windows had
    # recovered. Keep asking, as an injection does (faults.MASTER_WAIT_S).
    deadline = time.monotonic() + fault_kinds.MASTER_WAIT_S
    while True:
        info = await asyncio.to_thread(rt.replica_info)
        if info is not None and info.get("masterAddress"):
            break
        if time.monotonic() >= deadline:
            raise LocalRuntimeError("no master to plant on")
        await asyncio.sleep(0.2)
    conn = await BrokerConnection.connect(
        str(info["masterAddress"]),
        rt.client_config(),
        credentials=await asyncio.to_thread(rt.client_pair),
    )
    try:
        if PLANT_DUPLICATE in kinds:
            victim = max((o for o in run.operations if o.outcome == OK), key=lambda o: o.complete_s)
            body = body_of(victim.key)
            await conn.send(topic, [ProduceMessage(topic, body, key=victim.key)], victim.queue_id)
            run.planted[PLANT_DUPLICATE] = [victim.key]
        if PLANT_REORDER in kinds:
            keys = [f"{name}-0", f"{name}-1"]
            for seq in (1, 0):  # the later seq first
                invoke = clock.now()
                body = body_of(keys[seq])
                result = await conn.send(topic, [ProduceMessage(topic, body, key=keys[seq])], 0)
                sent = result.messages[0]
                run.operations.append(
                    Operation(name, seq, keys[seq], invoke, clock.now(), OK, sent.queue_id,
                              sent.queue_offset, body_crc=body_crc(body), attempts=(OK,),
                              topic=topic)
                )  # fmt: skip
            run.planted[PLANT_REORDER] = keys
    finally:
        await conn.close()


async def fault_windows(
    target: Target,
    schedule: Schedule,
    usable: Sequence[str],
    rng: random.Random,
    clock: _Clock,
    run: Run,
    progress: Callable[[str], None],
) -> None:
    """The schedule's windows, whatever the workload: a normal stretch, a fault injected
    (through `target` only), held `fault_s`, healed, then wait until healthy again."""
    rt = target
    order: list[str] = []
    for index in range(schedule.windows):
        if not order:
            order = list(usable)
            rng.shuffle(order)
        if not order:
            break
        fault = order.pop()
        normal_s, fault_s = schedule.normal_s, schedule.fault_s
        if schedule.sequence:  # a named scenario: its steps in order, its own timings
            fault, normal_s, fault_s = schedule.sequence[index % len(schedule.sequence)]
            if fault in run.skipped:
                continue
        await asyncio.sleep(normal_s)
        start = clock.now()
        try:
            injected = await asyncio.to_thread(fault_kinds.inject, fault, rt, rng)
        except TargetError as exc:
            progress(f"window {index + 1}: {fault} not injected: {exc}")
            continue
        await asyncio.sleep(fault_s)
        await asyncio.to_thread(injected.heal)
        end = clock.now()
        run.windows.append(FaultWindow(fault, start, end, injected.note))
        recovered = await wait_healthy(rt, schedule.healthy_timeout_s)
        run.healthy_s.append(clock.now() if recovered else None)
        if not recovered:
            run.not_recovered.append(f"window {index + 1} ({fault})")
        progress(
            f"window {index + 1}/{schedule.windows} {fault}: {injected.note}; "
            f"{'healthy again' if recovered else 'NOT healthy'} at {clock.now():.1f} s; "
            f"{sum(1 for o in run.operations if o.outcome == OK)} acknowledged so far"
        )


async def run_schedule(rt: LocalTarget, schedule: Schedule, progress: Callable[[str], None]) -> Run:
    rng = random.Random(f"{schedule.seed}/{schedule.client_prefix}")
    # Each phase its own topic: positions (topic, queue, offset) never mix across runtimes.
    topic = f"{TOPIC}-{schedule.client_prefix}" if schedule.client_prefix else TOPIC
    clock = _Clock(schedule.start_s)
    run = Run()
    usable = []
    for fault in schedule.faults:
        reason = fault_kinds.unavailable_reason(fault)
        if reason is None:
            usable.append(fault)
        else:
            run.skipped[fault] = reason
            progress(f"skipping {fault}: {reason}")
    if not await wait_healthy(rt, schedule.healthy_timeout_s):
        raise LocalRuntimeError("the group never became healthy")
    token = rt.client_credential()  # clients read their group only (DESIGN.md §11)
    pair = rt.client_pair()  # and prove the group's client pair to every broker
    # TLS to the brokers and HTTPS to the controllers when the runtime has TLS on.
    config = rt.client_config(
        retry_max_attempts=1,
        request_timeout_ms=schedule.op_timeout_ms,
        connect_timeout_ms=500,
        discovery_timeout_ms=1_000,
    )
    producers = [
        Producer(CLUSTER, BROKER_NAME, controller_addresses=rt.addresses.api_addresses,
                 token=token, credentials=pair, config=config)
        for _ in range(schedule.producers)
    ]  # fmt: skip
    queues = list(range(schedule.producers))
    consumers = [
        Consumer(CLUSTER, BROKER_NAME, controller_addresses=rt.addresses.api_addresses,
                 token=token, credentials=pair, config=rt.client_config())
        for _ in range(schedule.consumers)
    ]  # fmt: skip
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(
            _produce(
                f"{schedule.client_prefix}p{i}",
                topic,
                i,
                p,
                clock,
                run,
                stop,
                schedule.send_pause_s,
                schedule.send_attempts,
            )
        )
        for i, p in enumerate(producers)
    ] + [
        asyncio.create_task(
            _consume(f"{schedule.client_prefix}c{i}", topic, c, queues, clock, run, stop)
        )
        for i, c in enumerate(consumers)
    ]
    try:
        await fault_windows(rt, schedule, usable, rng, clock, run, progress)
        await asyncio.sleep(schedule.recovery_s)
    finally:
        stop.set()
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
        for producer in producers:
            await producer.close()
        for consumer in consumers:
            await consumer.close()
    await wait_healthy(rt, schedule.healthy_timeout_s)
    if schedule.plants:
        await plant(rt, schedule.plants, topic, f"{schedule.client_prefix}planted", run, clock)
    await drain(rt, topic, queues, run, schedule.drain_settle_s)
    run.ended_s = clock.now()
    return run


def write_history(run: Run, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "history.jsonl", "w") as f:
        for line in run.ack_lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    with open(out_dir / "reads.jsonl", "w") as f:
        for line in run.read_lines:
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
    with open(out_dir / "faults.jsonl", "w") as f:
        for w in run.windows:
            line = {"fault": w.fault, "start": round(w.start_s, 6), "end": round(w.end_s, 6)}
            f.write(json.dumps(line | {"note": w.note}) + "\n")


def read_history(out_dir: Path) -> tuple[list[Operation], list[FaultWindow]]:
    """The operations and fault windows `write_history` wrote (what the checker's
    unavailability needs; the read-back is not kept)."""
    operations = []
    for line in (out_dir / "history.jsonl").read_text().splitlines():
        op = json.loads(line)
        operations.append(
            Operation(
                op["client"], op["seq"], op["key"], op["invokeTime"], op["completeTime"],
                op["outcome"], op.get("queueId"), op.get("queueOffset"), op.get("error"),
                op.get("bodyCrc"), tuple(op.get("attempts", ())), op.get("topic", ""),
            )
        )  # fmt: skip
    windows = [
        FaultWindow(w["fault"], w["start"], w["end"], w.get("note", ""))
        for w in map(json.loads, (out_dir / "faults.jsonl").read_text().splitlines())
    ]
    return operations, windows
