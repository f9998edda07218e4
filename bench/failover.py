"""Failover benchmark (DESIGN.md §9 "Failover" and "Partition"), on the local runtime.

    .venv/bin/python bench/failover.py --quick          # 5 kills, < 60 s
    .venv/bin/python bench/failover.py                  # 20 kills + partition
    .venv/bin/python bench/failover.py --kills 30 --partitions 5 --dir /tmp/fo --keep

What it does
------------
1. `python -m brokergroup_cli.local up --detach` in a temp dir: 3 controllers
   and `--brokers` brokers as real processes on loopback, with every
   behaviour setting at its default (allAckInSyncStateSet true). Only the
   addresses move (controllers 127.0.1.201-203, brokers 127.0.1.210+) so the
   bench never collides with a default `local up` or the test blocks.
2. A continuous producer (the project's `Producer`, in-process asyncio,
   default `ClientConfig`) records every acknowledged message (key, queueId,
   queueOffset, masterEpoch) and every error.
3. Per kill: wait until the group is healthy (a master holding its lease,
   a full SyncStateSet, every broker alive and following the current epoch,
   and an ack at the current epoch), SIGKILL the master by the PID in
   state.json, then time
   - kill → controller shows the new master (`/v1/replica-info` polled
     every 10 ms): detection + election;
   - kill → first acknowledged write at a higher masterEpoch from another
     broker: the number DESIGN.md §9 bounds (p50 ≤ 1 s, p99 ≤ 2 s).
   Afterwards the logs give each kill's timeline (supervisor saw the exit,
   reported it inactive, the controller elected, the new master took the role).
4. Partition (no FIN): SIGSTOP the master, time the same two numbers
   (heartbeat timeout detection), SIGCONT, check the old master rejoins as
   a slave. The producer of this phase bounds a request at
   `PARTITION_REQUEST_TIMEOUT_MS` (see there: the default 35 s would be the
   whole measurement).
5. Consume every queue from the final master: acknowledged-but-missing keys
   (`acked_lost`, must be 0), extra copies of acknowledged keys
   (`duplicates`, at-least-once retries), acknowledged keys found elsewhere
   than their acknowledged position.

Writes bench/results/failover.json; the last stdout line is one JSON object.
Every process is stopped with `local down` (then by PID from state.json),
also on Ctrl-C or failure; a paused broker is continued first.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import (  # noqa: E402
    print_last_line,
    summarize,
    write_result,
)
from failover_parts import (  # noqa: E402
    ADDRESSES,
    BROKER_NAME,
    CLUSTER,
    FAILOVER_TIMEOUT_S,
    HEALTHY_TIMEOUT_S,
    MIN_ISR2_SETTINGS,
    PARTITION_REQUEST_TIMEOUT_MS,
    ContinuousProducer,
    Ledger,
    Observer,
    Trial,
    _fmt,
    add_timelines,
    ceiling,
    log,
    read_back,
    report,
    wait_first_ack,
)

from brokergroup_broker.protocol.client import (  # noqa: E402
    ClientConfig,
)
from brokergroup_broker.protocol.producer import Producer  # noqa: E402
from brokergroup_cli.chaos.runtime import LocalRuntime  # noqa: E402

# ------------------------------------------------------------------ the runtime


# ------------------------------------------------------------------ the producer


# ------------------------------------------------------------------ observation


# ------------------------------------------------------------------ one failover


async def one_failover(
    kind: str,
    index: int,
    runtime: LocalRuntime,
    observer: Observer,
    ledger: Ledger,
    ack_timeout_s: float = FAILOVER_TIMEOUT_S,
) -> Trial:
    info = await observer.wait_healthy(ledger)
    assert info.master_broker_id is not None and info.master_address is not None
    host = info.master_address.rpartition(":")[0]
    process = runtime.broker_on(host)
    pid = process.pid
    await asyncio.sleep(random.uniform(0.0, 0.2))  # kill at a random point of a cycle
    sig = signal.SIGKILL if kind == "kill" else signal.SIGSTOP
    trial = Trial(
        kind,
        index,
        info.master_broker_id,
        info.master_address,
        info.master_epoch,
        kill_wall=time.time(),
    )
    detect = asyncio.create_task(observer.wait_new_master(info.master_epoch, info.master_broker_id))
    ack = asyncio.create_task(
        wait_first_ack(ledger, info.master_epoch, info.master_address, ack_timeout_s)
    )
    two_copies = asyncio.create_task(observer.wait_two_copies(info.master_epoch))
    start = time.monotonic()
    trial.kill_wall = time.time()
    if not runtime.signal(process, sig):
        raise RuntimeError(f"broker pid {pid} exited before {sig.name}")
    try:
        detected_at, new_info = await detect
        trial.detection_s = detected_at - start
        trial.new_master = new_info.master_broker_id
        acked_at, trial.new_epoch = await ack
        trial.failover_s = acked_at - start
        if kind == "kill":
            trial.two_copies_s = await two_copies - start
    except TimeoutError as exc:
        trial.error = str(exc)
        ack.cancel()
    two_copies.cancel()
    if kind == "partition":
        runtime.signal(process, signal.SIGCONT)  # (gone already: nothing to continue)
        resumed = time.monotonic()
        deadline = resumed + HEALTHY_TIMEOUT_S
        while time.monotonic() < deadline:
            status = await observer.broker_status(host)
            current = await observer.replica_info()
            if (
                status is not None
                and current is not None
                and status.get("role") == "SLAVE"
                and status.get("masterEpoch") == current.master_epoch
                and status.get("brokerId") == info.master_broker_id
            ):
                trial.rejoined_s = time.monotonic() - resumed
                break
            await asyncio.sleep(0.05)
    log(
        f"{kind} {index}: master {trial.old_master} (pid {pid}, masterEpoch {trial.old_epoch}) → "
        f"{trial.new_master} at masterEpoch {trial.new_epoch}: controller "
        f"{_fmt(trial.detection_s)}, first ack {_fmt(trial.failover_s)}"
        + (f", two copies {_fmt(trial.two_copies_s)}" if trial.two_copies_s is not None else "")
        + (f", rejoined as slave {_fmt(trial.rejoined_s)} after SIGCONT" if kind != "kill" else "")
        + (f" ERROR {trial.error}" if trial.error else "")
    )
    return trial


# ------------------------------------------------------------------ timelines from the logs


# ------------------------------------------------------------------ final read-back


# ------------------------------------------------------------------ main


async def run(
    args: argparse.Namespace, runtime: LocalRuntime, kills: int, partitions: int
) -> dict[str, Any]:
    ledger = Ledger()
    trials: list[Trial] = []
    token = runtime.client_credential()  # the producers' role; the observer reads as admin
    async with aiohttp.ClientSession() as session:
        observer = Observer(runtime, session)
        try:
            return await _run(args, runtime, observer, ledger, trials, token, kills, partitions)
        finally:
            await observer.close()


async def _run(
    args: argparse.Namespace,
    runtime: LocalRuntime,
    observer: Observer,
    ledger: Ledger,
    trials: list[Trial],
    token: str,
    kills: int,
    partitions: int,
) -> dict[str, Any]:
    producer = ContinuousProducer(
        ledger,
        Producer(
            CLUSTER,
            BROKER_NAME,
            controller_addresses=runtime.addresses.api_addresses,
            token=token,
            credentials=runtime.client_pair(),
        ),
        "k",
    )
    producer.start()
    try:
        for i in range(kills):
            trials.append(await one_failover("kill", i, runtime, observer, ledger))
        await producer.stop()
        if partitions:
            producer = ContinuousProducer(
                ledger,
                Producer(
                    CLUSTER,
                    BROKER_NAME,
                    controller_addresses=runtime.addresses.api_addresses,
                    token=token,
                    credentials=runtime.client_pair(),
                    config=ClientConfig(request_timeout_ms=args.partition_request_timeout_ms),
                ),
                "p",
            )
            producer.start()
            for i in range(partitions):
                # A request stuck on the paused master ends at the client's
                # request timeout: wait that long for the first ack.
                timeout_s = FAILOVER_TIMEOUT_S + args.partition_request_timeout_ms / 1000
                trial = await one_failover("partition", i, runtime, observer, ledger, timeout_s)
                trials.append(trial)
            await observer.wait_healthy(ledger)
    finally:
        await producer.stop()
    final = await observer.wait_healthy(ledger)
    assert final.master_address is not None
    counts, where = await read_back(final.master_address, runtime.client_pair())
    add_timelines(runtime.root, trials)
    lost = [k for k in ledger.acked if counts[k] == 0]
    misplaced = [
        k
        for k, a in ledger.acked.items()
        if counts[k] and (a.queue_id, a.queue_offset) not in where.get(k, set())
    ]
    duplicates = sum(n - 1 for k, n in counts.items() if n > 1 and k in ledger.acked)
    unknown = [k for k in counts if k not in ledger.acked and k not in ledger.uncertain]
    return {
        "ledger": ledger,
        "trials": trials,
        "lost": lost,
        "misplaced": misplaced,
        "duplicates": duplicates,
        "duplicates_uncertain": sum(n - 1 for k, n in counts.items() if n > 1) - duplicates,
        "unknown": unknown,
        "read_back": sum(counts.values()),
        "final_master": final.master_broker_id,
    }


def add_min_isr2(args: argparse.Namespace, result: dict[str, Any], root: Path) -> dict[str, Any]:
    """The same kills on a runtime with minInSyncReplicas=2: the first
    acknowledgement after a failover is then already held by two replicas."""
    runtime = LocalRuntime(root, ADDRESSES, brokers=args.brokers, settings=MIN_ISR2_SETTINGS)
    ok = False
    try:
        log(f"second runtime with {' '.join(MIN_ISR2_SETTINGS)}: {args.min_isr2_kills} kills")
        runtime.up()
        out = asyncio.run(run(args, runtime, args.min_isr2_kills, 0))
        ok = True
    finally:
        runtime.down()
        if ok and not args.keep and root.exists():
            shutil.rmtree(root, ignore_errors=True)
    trials: list[Trial] = out["trials"]
    first = summarize([t.failover_s for t in trials if t.failover_s is not None])
    section = {
        "settings": list(MIN_ISR2_SETTINGS),
        "kills": len(trials),
        "failed": sum(1 for t in trials if t.failover_s is None),
        "p50_s": first["p50"],
        "p99_s": first["p99"],
        "max_s": first["max"],
        "acked": len(out["ledger"].acked),
        "acked_lost": len(out["lost"]),
        "duplicates": out["duplicates"],
    }
    result["summary"]["min_isr2"] = section
    result["full"]["min_isr2"] = {**section, "trials": [t.to_json() for t in trials]}
    for part in ("summary", "full"):
        result[part]["acked_lost"] += section["acked_lost"]
        result[part]["targets_met"] = result[part]["targets_met"] and not section["acked_lost"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 kills, 1 partition (< 60 s)")
    parser.add_argument("--kills", type=int, default=None, help="master SIGKILLs (default 20)")
    parser.add_argument(
        "--partitions", type=int, default=None, help="master SIGSTOPs (default 5; quick 1)"
    )
    parser.add_argument(
        "--partition-request-timeout-ms",
        type=int,
        default=PARTITION_REQUEST_TIMEOUT_MS,
        help="request timeout of the partition phase's producer "
        f"(default: the client default, {PARTITION_REQUEST_TIMEOUT_MS})",
    )
    parser.add_argument(
        "--min-isr2-kills",
        type=int,
        default=None,
        help="kills on a second runtime with minInSyncReplicas=2 (default 20; quick 3; 0: skip)",
    )
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="runtime dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the runtime dir (logs)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--no-write", action="store_true", help="do not write bench/results/failover.json"
    )
    args = parser.parse_args()
    if args.kills is None:
        args.kills = 5 if args.quick else 20
    if args.partitions is None:
        args.partitions = 1 if args.quick else 20
    if args.min_isr2_kills is None:
        args.min_isr2_kills = 3 if args.quick else 20
    if args.seed is None:
        args.seed = random.randrange(1 << 32)
    random.seed(args.seed)  # the client's backoff jitter and our kill timing
    root = args.dir or Path(tempfile.mkdtemp(prefix="bg-failover-"))
    root = root.resolve()
    runtime = LocalRuntime(root, ADDRESSES, brokers=args.brokers)

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    log(f"seed {args.seed}; measuring the loopback ceiling")
    ceil = ceiling()
    log(
        "ceiling: heartbeatTimeoutMs {heartbeatTimeoutMs} (interval {heartbeatIntervalMs}), "
        "masterLeaseMs {masterLeaseMs}, Raft election {raftMinTimeoutMs}-{raftMaxTimeoutMs} ms, "
        "supervisor restart delay {supervisorRestartInitialDelayMs} ms, client backoff "
        "{clientRetryInitialBackoffMs}-{clientRetryMaxBackoffMs} ms".format(**ceil)
        + ", loopback RTT p50 {rtt_p50_us} µs p99 {rtt_p99_us} µs, one stream "
        "{stream_mb_per_s} MB/s".format(**ceil["loopback"])
    )
    ok = False
    started = time.monotonic()
    try:
        log(f"local up --detach --brokers {args.brokers} --dir {root}")
        runtime.up()
        log(
            f"up in {time.monotonic() - started:.1f} s; {args.kills} kills, {args.partitions} partitions"
        )
        out = asyncio.run(run(args, runtime, args.kills, args.partitions))
        result = report(args, out, ceil)
        result["full"]["wall_s"] = round(time.monotonic() - started, 1)
        result["summary"]["wall_s"] = result["full"]["wall_s"]
        ok = True
    finally:
        log("stopping the runtime (local down)")
        runtime.down()
        if (ok and not args.keep and args.dir is None) and root.exists():
            shutil.rmtree(root, ignore_errors=True)
        elif root.exists():
            log(f"runtime dir kept: {root}")
    if args.min_isr2_kills:  # (the first runtime is down: the addresses are free again)
        result = add_min_isr2(args, result, root.with_name(root.name + "-minisr2"))
        result["full"]["wall_s"] = result["summary"]["wall_s"] = round(
            time.monotonic() - started, 1
        )
    full = result["full"]
    for step, stats in full["timeline_s"].items():
        log(f"timeline kill → {step}: p50 {stats['p50']} s, p99 {stats['p99']} s")
    for step, stats in full["partition_detail"]["timeline_s"].items():
        log(f"timeline SIGSTOP → {step}: p50 {stats['p50']} s, p99 {stats['p99']} s")
    if not args.no_write:
        log(f"wrote {write_result('failover', full)}")
    print_last_line(result["summary"])
    return 0 if full["acked_lost"] == 0 else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; every process this run started has been stopped")
        sys.exit(130)
