"""RocketMQ's own benchmark producer and consumer against RocketMQ 5.3 and brokergroup
(issue 38 item 4): the ratio does not rest on a load program of ours.

    .venv/bin/python bench/rocketmq_benchmark.py                  # both sides
    .venv/bin/python bench/rocketmq_benchmark.py --only brokergroup --reports 2
    BROKERGROUP_EVENT_LOOP=asyncio .venv/bin/python bench/rocketmq_benchmark.py --only brokergroup

The programs are apache/rocketmq's `example/.../benchmark/Producer.java` and `Consumer.java`
(tag rocketmq-all-5.3.1, unchanged, compiled against the stock 5.3.1 client from Maven
Central: tools/rocketmq/benchmark_programs.py). The sides are bench/rocketmq_client.py's:
a stock RocketMQ 5.3 controller-mode group (three brokers, allAckInSyncStateSet, SYNC_FLUSH)
and `brokergroup local up` (three controllers, three brokers, every setting at its default;
the programs sign with the runtime's client key pair through their own `-a true -ak -sk`).

Per side, on topic BenchTopic with 1 KiB bodies (`-s 1024`):
1. **produce**: Producer with `-w 16` (16 threads of synchronous single sends, its default
   mode): its first report (10 s) is the warm-up; the next `--reports` reports (each over
   the ~9 s before it) are the measured window. Send TPS and average RT are the means of
   those reports; Max RT is the program's own (since its start); failed sends are summed.
   CPU per message per side is sampled over the same window (/proc, bench/_cpu.py).
2. **produce + consume**: Consumer (`-w 20`, a push consumer, group benchmark_consumer)
   started first, then Producer again, on a topic of their own (BenchConsumeTopic: on the
   first run's topic a new group would drain that run's backlog), made on both sides before
   the Consumer starts (8 queues); the same window: Consume TPS and the consumer's
   average born-to-consumed (B2C) and stored-to-consumed (S2C) latency beside Send TPS.

`--profile` (brokergroup side, produce run): py-spy samples the master broker over the
measured window (100 Hz, `--nonblocking`), and the result names the functions with the most
samples on top of the stack (self) and anywhere on it (inclusive), as shares of the samples:
the map of where a message's CPU goes (docs/performance.md).

The programs print means, not percentiles: what is compared is what they print. Each
result carries `other_busy_cores` (CPU of processes outside both sides' trees: this machine
is shared) and the event loop brokergroup's processes ran on. Writes
bench/results/rocketmq_benchmark.json (a partial run: rocketmq_benchmark_<only>.json); the
last stdout line is one JSON object. Run it under `flock /tmp/bg-heavy.lock`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools" / "rocketmq"))

from _common import loopback_tcp_ceiling, print_last_line, write_result  # noqa: E402
from _cpu import Sample, cpu_window, load_report, take_sample  # noqa: E402
from _profile import start_profile, top_functions  # noqa: E402
from benchmark_programs import UPSTREAM, BenchmarkProgram, mean_of  # noqa: E402
from rocketmq_client import (  # noqa: E402
    LOAD_TOPIC,
    BrokergroupSide,
    RocketMQSide,
    log,
    run_sides,
)
from stock_client import StockClient, missing  # noqa: E402

PRODUCER_THREADS = 16
CONSUMER_THREADS = 20
BODY_BYTES = 1024
#: The produce + consume run's topic: a new consumer group on the first run's topic would
#: start at its first offset (RocketMQ serves a new group from 0 while the queue's messages
#: are in memory) and measure draining a backlog instead of keeping up.
CONSUME_TOPIC = "BenchConsumeTopic"
#: The programs' report interval: each report covers the ~10 one-second snapshots before it.
REPORT_MS = 10_000


def kernels_of_brokergroup() -> str:
    """The brokers' kernels (BROKERGROUP_NATIVE: they read the same environment)."""
    from brokergroup_broker import kernels

    return kernels.configured().value


def event_loop_of_brokergroup() -> str:
    """The loop the local runtime's processes run on (the supervisor passes its own on)."""
    from brokergroup_remoting import event_loop

    return event_loop.configured().value


def produce(
    side: Any,
    client: StockClient,
    work: Path,
    reports: int,
    consume: bool,
    profile: bool = False,
) -> dict[str, Any]:
    """One Producer run (with a Consumer beside it when `consume`): its measured reports,
    CPU per message over them."""
    keys = {"access_key": client.access_key, "secret_key": client.secret_key}
    common = {"t": CONSUME_TOPIC if consume else LOAD_TOPIC, "ri": REPORT_MS}
    consumer = None
    if consume:
        consumer = BenchmarkProgram(
            "Consumer", client.namesrv, work / "consumer", {**common, "w": CONSUMER_THREADS}, **keys
        )
        consumer.start()
    producer = BenchmarkProgram(
        "Producer",
        client.namesrv,
        work / "producer",
        {**common, "w": PRODUCER_THREADS, "s": BODY_BYTES},
        **keys,
    )
    samples: dict[str, Sample] = {}

    def roles() -> dict[int, str]:
        named = {**side.cpu_roles(), producer.pid: "client"}
        if consumer is not None:
            named[consumer.pid] = "client-consumer"
        return named

    bound_s = (reports + 1) * REPORT_MS / 1000 + 120
    try:
        producer.start()
        producer.wait_reports(1, bound_s)  # warm-up: the first report
        samples["measuring"] = take_sample(roles())
        profiler = None
        if profile:
            master_pid = next(p for p, r in side.cpu_roles().items() if r == side.master_role())
            profiler = start_profile(master_pid, reports * REPORT_MS / 1000, work / "master.txt")
        measured = producer.wait_reports(1 + reports, bound_s)[1:]
        samples["measured"] = take_sample(roles())
        if profiler is not None:
            profiler.wait(timeout=120)
        consumed = (
            [r for t, r in consumer.reports if t >= samples["measuring"].at_s]
            if consumer is not None
            else []
        )
    finally:
        producer.stop()
        if consumer is not None:
            consumer.stop()
    window = cpu_window(samples["measuring"], samples["measured"])
    send_tps = mean_of(measured, "tps") or 0.0
    messages = int(send_tps * window.wall_s)
    out: dict[str, Any] = {
        "send_tps": send_tps,
        "send_avg_rt_ms": mean_of(measured, "avg_rt_ms"),
        "send_max_rt_ms": max(r["max_rt_ms"] for r in measured),
        "send_failed": int(sum(r["failed"] for r in measured)),
        "reports": measured,
        "master": side.master_role(),
    }
    if consumer is not None:
        out |= {
            "consume_tps": mean_of(consumed, "tps"),
            "consume_avg_b2c_ms": mean_of(consumed, "avg_b2c_ms"),
            "consume_avg_s2c_ms": mean_of(consumed, "avg_s2c_ms"),
            "consume_failed": int(sum(r["failed"] for r in consumed)),
            "consumerReports": consumed,
        }
    # The server's CPU per message counts the consumer's deliveries as the same messages.
    out |= load_report(window, messages)
    if profile and (work / "master.txt").exists():
        out["masterProfile"] = top_functions((work / "master.txt").read_text())
    return out


def run_side(side: Any, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    client: StockClient = side.start()
    # Made before the Consumer starts, on both sides: a push consumer subscribed to a topic
    # that does not exist yet finds it only at its next route poll (30 s) and rebalance, and
    # then, a new group, starts at offset 0: it measured draining that backlog (B2C seconds).
    if isinstance(side, RocketMQSide):
        side.group.create_topic(CONSUME_TOPIC, 8)
    else:
        side.create_topic(CONSUME_TOPIC, 8)
    result: dict[str, Any] = {}
    for label, consume in (("produce", False), ("produceConsume", True)):
        profile = args.profile and side.name == "brokergroup" and not consume
        result[label] = produce(side, client, work / label, args.reports, consume, profile)
        load = result[label]
        log(
            f"{side.name} {label}: send {load['send_tps']} msg/s avg RT {load['send_avg_rt_ms']}"
            f" ms (max {load['send_max_rt_ms']}), consume {load.get('consume_tps')} msg/s "
            f"B2C {load.get('consume_avg_b2c_ms')} ms; server {load['server_cpu_ms_per_msg']} "
            f"ms/msg; other busy cores {load['other_busy_cores']}"
        )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--reports", type=int, default=3, help="measured reports per run (10 s each; 3)"
    )
    ap.add_argument("--only", choices=("rocketmq", "brokergroup"), default=None)
    ap.add_argument("--dir", type=Path, default=None, help="where the sides run (a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the sides' stores and logs")
    ap.add_argument("--name", default=None, help="result file name (default by --only)")
    ap.add_argument(
        "--profile", action="store_true", help="py-spy the brokergroup master (produce run)"
    )
    args = ap.parse_args()
    reason = missing(servers=args.only != "brokergroup")
    if reason is not None:
        print(reason, file=sys.stderr)
        return 3
    ceiling = loopback_tcp_ceiling()
    log(f"ceiling: loopback TCP {ceiling.to_json()}")
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-rocketmq-benchmark-"))
    work.mkdir(parents=True, exist_ok=True)
    makers: list[tuple[str, Callable[[Path], Any]]] = [
        ("rocketmq", RocketMQSide),
        ("brokergroup", BrokergroupSide),
    ]
    results, errors = run_sides(
        makers, lambda side, side_dir: run_side(side, args, side_dir), args, work
    )

    def pick(side: str, run: str, key: str) -> Any:
        return results.get(side, {}).get(run, {}).get(key)

    def ratio(key: str, run: str = "produce") -> float | None:
        ours, theirs = pick("brokergroup", run, key), pick("rocketmq", run, key)
        return round(ours / theirs, 3) if ours and theirs else None

    summary: dict[str, Any] = {
        "benchmark": "rocketmq_benchmark",
        "programs": f"{UPSTREAM} example/benchmark Producer, Consumer",
        "client": "org.apache.rocketmq:rocketmq-client:5.3.1",
        "producerThreads": PRODUCER_THREADS,
        "consumerThreads": CONSUMER_THREADS,
        "bodyBytes": BODY_BYTES,
        "measuredReports": args.reports,
        "reportIntervalMs": REPORT_MS,
        "brokergroupEventLoop": event_loop_of_brokergroup(),
        "brokergroupKernels": kernels_of_brokergroup(),
        "brokergroupMasterAddress": "the local runtime's forwarder (stable master address)",
        "send_tps_ratio": ratio("send_tps"),
        "send_tps_ratio_with_consumer": ratio("send_tps", "produceConsume"),
        "consume_tps_ratio": ratio("consume_tps", "produceConsume"),
        "errors": errors,
        "ceiling": {"loopback": ceiling.to_json()},
    }
    for side, _ in makers:
        for run in ("produce", "produceConsume"):
            for key in (
                "send_tps",
                "send_avg_rt_ms",
                "send_max_rt_ms",
                "send_failed",
                "consume_tps",
                "consume_avg_b2c_ms",
                "server_cpu_ms_per_msg",
                "client_cpu_ms_per_msg",
                "other_busy_cores",
            ):
                value = pick(side, run, key)
                if value is not None:
                    summary[f"{side}_{run}_{key}"] = value
    name = args.name or "rocketmq_benchmark" + (f"_{args.only}" if args.only else "")
    write_result(name, {**summary, "sides": results})
    print_last_line(summary)
    return 0 if not errors else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
