"""Timer messages through a master failover: how far from its time each one is delivered
(issue 34 item 1).

    flock /tmp/bg-heavy.lock .venv/bin/python bench/delay.py --quick   # 5,000 over 1 min
    flock /tmp/bg-heavy.lock .venv/bin/python bench/delay.py           # 100,000 over 5 min
    flock /tmp/bg-heavy.lock .venv/bin/python bench/delay.py --only rocketmq

One program, tools/rocketmq/StockClient.java (rocketmq-client 5.3.1, default settings), on
the same machine: its `timers` mode (tools/rocketmq/modes/TimersMode.java) sends N timer
messages (setDeliverTimeMs, 1 KiB bodies) from `--threads` threads of one producer (8: one
synchronous thread cannot keep 333 sends/s through SYNC_FLUSH and three replicas on two
cores), message i sent at i*M/N and due at T0 + delay + i*M/N (each waits about
`--delay-s`); its `follow` mode (a push consumer) records when each arrives.
Halfway through the delivery window the master is SIGKILLed (brokergroup's supervisor
restarts it; the script restarts RocketMQ's). Then, per acknowledged message:

- error = first receipt (consumer's clock) - its deliver time (ms): p50 / p99 / max — the
  error a consumer sees (delivery plus the push consumer's own pull round);
- lost: acknowledged, never received; early: any receipt before its deliver time;
  duplicated: receipts beyond the first (at-least-once: a failover redelivers what the old
  master re-put but had not yet replicated its progress of, and consumer offsets roll back
  up to a second).

Sides: **brokergroup** (`brokergroup local up`, defaults) and **rocketmq** (a stock 5.3
controller-mode group, tools/rocketmq/stock_client.py RocketMQGroup: its timer wheel at
timerWheelEnable=true written out, the rest at its defaults: timerPrecisionMs 1000, which rounds
a deliver time down, so its "early" counts up to a second before). Prints the loopback TCP and
disk ceilings measured in the same run; writes bench/results/delay.json (--quick:
delay_quick.json; with --only, the other side's results of the same size are kept); the last
stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools" / "rocketmq"))

from _common import (  # noqa: E402
    RESULTS_DIR,
    loopback_tcp_ceiling,
    print_last_line,
    summarize,
    write_result,
)
from rocketmq_client import BrokergroupSide, RocketMQSide, log, wait_for  # noqa: E402
from stock_client import StockClient, missing  # noqa: E402

from brokergroup_broker.store.ceiling import measure_disk_ceiling  # noqa: E402

TOPIC = "BenchDelay"
#: brokergroup: `local up` (built-in brokers); rocketmq: a stock 5.3 group under RocketMQ's
#: DLedger controller; rocketmq-engine: `local up --engine rocketmq` (stock brokers, their
#: timer wheel, under this controller).
SIDES = ("brokergroup", "rocketmq", "rocketmq-engine")
RESULT_KEYS = {
    "brokergroup": "brokergroup",
    "rocketmq": "rocketmq",
    "rocketmq-engine": "rocketmqEngine",
}
BODY_BYTES = 1024


def acks_of(path: Path) -> dict[str, tuple[int, int]]:
    """bodyId → (ackAtMs, deliverAtMs) of every SEND_OK."""
    out = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        if len(parts) == 6:
            out[parts[0]] = (int(parts[3]), int(parts[5]))
    return out


def receipts_of(path: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        if len(parts) == 5 and parts[4] == "true":
            out.setdefault(parts[1], []).append(int(parts[0]))
    return out


def sender_summary(path: Path) -> dict[str, int]:
    """sent / sendOk / failed from the timers mode's summary line (none: it did not finish)."""
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith('{"summary"'):
            summary = json.loads(line)
            return {k: int(summary[k]) for k in ("sent", "sendOk", "failed")}
    return {}


def run_side(side: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    client: StockClient = side.start()
    if isinstance(side, RocketMQSide):
        side.group.create_topic(TOPIC, 4)  # brokergroup's local runtime creates on first send
    follow_out, stop = work / "follow.tsv", work / "stop"
    client.run("send", kind="sync", topic=TOPIC, count=1, run="warm", size=BODY_BYTES)
    follower = client.start(
        "follow", work / "follow.log", topic=TOPIC, group="bench-delay", out=follow_out,
        stop=stop, size=BODY_BYTES,
    )  # fmt: skip
    wait_for(lambda: receipts_of(follow_out), 180, "the follower's first message", poll_s=0.5)
    window_ms = int(args.minutes * 60_000)
    start_ms = int(time.time() * 1000) + 2_000
    at_ms = start_ms + int(args.delay_s * 1000)
    acks_path = work / "acks.tsv"
    log(f"{side.name}: {args.count} timers due from +{args.delay_s} s over {args.minutes} min")
    send_stop = work / "send-stop"
    sender = client.start(
        "timers", work / "timers.log", topic=TOPIC, count=args.count,
        rate=max(1, int(args.count * 1000 / window_ms)), at_ms=at_ms, spread_ms=window_ms,
        acks=acks_path, run="t", size=BODY_BYTES, threads=args.threads, stop=send_stop,
    )  # fmt: skip
    kill_at = at_ms + window_ms // 2
    time.sleep(max(0.0, kill_at / 1000 - time.time()))
    side.healthy()
    victim = side.kill_master()
    killed_ms = int(time.time() * 1000)
    log(f"{side.name}: killed the master ({victim}) at +{(killed_ms - at_ms) / 1000:.0f} s")
    side.after_failover(victim)
    end_ms = at_ms + window_ms
    try:
        sender.wait(timeout=max(60.0, end_ms / 1000 - time.time() + 300))
    except subprocess.TimeoutExpired:  # behind its schedule: what it sent is measured
        log(f"{side.name}: the sender is behind; stopping it")
        send_stop.touch()
        sender.wait(timeout=120)
    acks = acks_of(acks_path)

    def all_in() -> bool:
        return set(acks) <= set(receipts_of(follow_out))

    try:
        wait_for(all_in, max(60.0, end_ms / 1000 - time.time() + 120), "every ack received", 1.0)
    except TimeoutError as exc:
        log(f"{side.name}: {exc}")
    time.sleep(3)  # late duplicates
    stop.touch()
    follower.wait(timeout=60)
    receipts = receipts_of(follow_out)
    errors = [min(receipts[i]) - due for i, (_, due) in acks.items() if i in receipts]
    result = {
        "acknowledged": len(acks),
        "count": args.count,
        **sender_summary(work / "timers.log"),
        "errorMs": summarize(errors, digits=1),
        "lost": sum(1 for i in acks if i not in receipts),
        "early": sum(1 for i, (_, due) in acks.items() for t in receipts.get(i, []) if t < due),
        "earlyByMoreThan1s": sum(
            1 for i, (_, due) in acks.items() for t in receipts.get(i, []) if t < due - 1000
        ),
        "duplicated": sum(len(receipts[i]) - 1 for i in acks if i in receipts),
        "killedAtMs": killed_ms - at_ms,
    }
    log(f"{side.name}: {result}")
    return result


def earlier_sides(path: Path, results: dict[str, Any], sides: list[str]) -> dict[str, Any]:
    """The sides not run now from an earlier result of the same size (one side per run)."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if any(old.get(k) != results[k] for k in ("count", "minutes", "delayS")):
        return {}
    kept = {}
    for name in SIDES:
        if name not in sides:
            key = RESULT_KEYS[name]
            for k in (key, f"{key}Ceiling", f"{key}Settings"):
                if k in old:
                    kept[k] = old[k]
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 timers over 1 minute")
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--delay-s", type=float, default=None, help="how long each waits")
    parser.add_argument("--threads", type=int, default=8, help="sending threads")
    parser.add_argument("--only", choices=SIDES, action="append")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    args.count = args.count or (5_000 if args.quick else 100_000)
    args.minutes = args.minutes or (1.0 if args.quick else 5.0)
    args.delay_s = args.delay_s or (15.0 if args.quick else 60.0)
    sides = args.only or ["brokergroup", "rocketmq"]
    reason = missing(servers="rocketmq" in sides or "rocketmq-engine" in sides)
    if reason is not None:
        print(reason, file=sys.stderr)
        return 2
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-delay-"))
    root.mkdir(parents=True, exist_ok=True)
    loopback = loopback_tcp_ceiling()
    disk = measure_disk_ceiling(root, seq_total_bytes=32 << 20, small_ops=300)
    log(f"ceiling: loopback {loopback.to_json()}, disk {disk.as_dict()}")
    results: dict[str, Any] = {
        "benchmark": "delay",
        "count": args.count,
        "minutes": args.minutes,
        "delayS": args.delay_s,
        "threads": args.threads,
        "ceiling": {"loopback": loopback.to_json(), "disk": disk.as_dict()},
    }
    name_of_result = "delay_quick" if args.quick else "delay"
    results |= earlier_sides(RESULTS_DIR / f"{name_of_result}.json", results, sides)
    for name in sides:
        work = root / name
        work.mkdir(parents=True, exist_ok=True)
        side: Any
        if name == "brokergroup":
            side = BrokergroupSide(work)
        elif name == "rocketmq-engine":
            side = BrokergroupSide(work, engine="rocketmq")
        else:
            side = RocketMQSide(work)
            side.group.timer_wheel = True  # said, not left to the default
            results["rocketmqSettings"] = {"timerWheelEnable": True, "timerPrecisionMs": 1000}
        try:
            results[RESULT_KEYS[name]] = run_side(side, args, work)
        finally:
            side.stop()
        results[f"{RESULT_KEYS[name]}Ceiling"] = results["ceiling"]
    write_result(name_of_result, results)
    print_last_line(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
