"""The official RocketMQ 5 Python SDK over gRPC against brokergroup (issue 35 item 6).

    .venv/bin/python bench/grpc_client.py --quick     # 2 kills, 10 s of load
    .venv/bin/python bench/grpc_client.py             # 10 kills, 20 s of load

One program drives `brokergroup local up` (three controllers, three brokers, every setting at
its default, lane 2 of the local runtime's addresses) through the group's stable gRPC
endpoint (`local status --json` `grpcEndpoint`), signed with the group's client pair:

1. load: 16 threads, each with its own Producer (rocketmq-python-client, default settings),
   send 1 KiB bodies for the load time; msg/s and the p50/p99 of a send call.
2. failover: one thread sends continuously; per kill the group is first healthy (a master,
   all three in the SyncStateSet, a send acknowledged since the last kill), then the master
   is SIGKILLed by PID and the time from the kill to the first acknowledged send begun after
   it is the failover time (the supervisor restarts the killed broker).
3. verify: a SimpleConsumer receives both topics; every acknowledged message must come back
   (`ackedLost`), matched by message id and body.

The RocketMQ side of the issue (the same SDK against a RocketMQ 5.3 controller-mode group and
its proxy) is not run here yet: it needs the stock proxy runtime (issue 35 item 3).

Prints the loopback TCP ceiling measured in the same run. Writes bench/results/grpc_client.json
(bench/results/grpc_client_quick.json with --quick); the last stdout line is one JSON object.
Run it under `flock /tmp/bg-heavy.lock`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import loopback_tcp_ceiling, print_last_line, summarize, write_result  # noqa: E402

THREADS = 16
BODY_BYTES = 1024
LOAD_TOPIC = "GrpcBenchTopic"
FAILOVER_TOPIC = "GrpcFailoverTopic"
FAILOVER_TIMEOUT_S = 60.0
HEALTHY_TIMEOUT_S = 240.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(poll_s)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


def body(run: str, i: int) -> bytes:
    head = f"{run}-{i}-".encode()
    return head + b"x" * (BODY_BYTES - len(head))


class Side:
    def __init__(self, work: Path) -> None:
        from brokergroup_cli.chaos.runtime import Addresses, LocalRuntime

        self.runtime = LocalRuntime(work / "local", Addresses(lane=2))

    def start(self) -> Any:
        from rocketmq import ClientConfiguration, Credentials

        self.runtime.up()
        self.healthy()
        status = json.loads(
            subprocess.run(
                [sys.executable, "-m", "brokergroup_cli.local", "status", "--json",
                 "--dir", str(self.runtime.root)],
                capture_output=True, text=True, check=True, timeout=60,
            ).stdout
        )  # fmt: skip
        self.endpoint = status["grpcEndpoint"]
        log(f"brokergroup up; gRPC endpoint {self.endpoint}")
        return ClientConfiguration(
            self.endpoint, Credentials(status["accessKey"], status["secretKey"])
        )

    def healthy(self) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            info = self.runtime.replica_info()
            data = None if info is None else info.get("data", info)
            if not isinstance(data, dict) or not data.get("masterAlive"):
                return None
            alive = [b for b in data.get("brokers", []) if b.get("alive")]
            if len(alive) < 3 or len(data.get("syncStateSet", [])) < 3:
                return None
            # The controller may not have noticed a kill yet: the master it names must be a
            # live process, and every broker slot running again.
            from brokergroup_cli.local.state import ChildKind

            live = {c.host for c in self.runtime.live_children(ChildKind.BROKER)}
            master_host = str(data.get("masterAddress", "")).rsplit(":", 1)[0]
            if master_host not in live or len(live) < 3:
                return None
            return data

        self.info: dict[str, Any] = wait_for(check, HEALTHY_TIMEOUT_S, "group healthy", 0.2)
        return self.info

    def kill_master(self) -> str:
        host = str(self.info["masterAddress"]).rsplit(":", 1)[0]
        self.runtime.signal(self.runtime.broker_on(host), signal.SIGKILL)
        return host

    def stop(self) -> None:
        self.runtime.down()


def load(config: Any, seconds: float) -> tuple[dict[str, Any], dict[str, bytes]]:
    from rocketmq import Message, Producer

    acked: dict[str, bytes] = {}
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start_at = threading.Event()
    stop_at = [0.0]

    def worker(n: int) -> None:
        producer = Producer(config, (LOAD_TOPIC,))
        producer.startup()
        try:
            start_at.wait()
            i = 0
            while time.monotonic() < stop_at[0]:
                m = Message()
                m.topic = LOAD_TOPIC
                m.body = body(f"load{n}", i)
                began = time.perf_counter()
                try:
                    message_id = producer.send(m).message_id
                except Exception:
                    with lock:
                        errors[0] += 1
                    continue
                took = (time.perf_counter() - began) * 1000
                with lock:
                    acked[message_id] = m.body
                    latencies.append(took)
                i += 1
        finally:
            producer.shutdown()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    time.sleep(3)  # every producer started (routes, settings) before the clock runs
    began = time.monotonic()
    stop_at[0] = began + seconds
    start_at.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    return {
        "threads": THREADS,
        "bodyBytes": BODY_BYTES,
        "seconds": round(elapsed, 2),
        "acked": len(acked),
        "errors": errors[0],
        "msgPerSec": round(len(acked) / elapsed, 1),
        "sendMs": summarize(latencies, 2),
    }, acked


def failover(side: Side, config: Any, kills: int) -> tuple[dict[str, Any], dict[str, bytes]]:
    from rocketmq import Message, Producer

    acked: dict[str, bytes] = {}
    #: (began, acknowledged) of every acknowledged send, monotonic seconds.
    ok_times: list[tuple[float, float]] = []
    stop = threading.Event()
    producer = Producer(config, (FAILOVER_TOPIC,))
    producer.startup()

    def sender() -> None:
        i = 0
        while not stop.is_set():
            m = Message()
            m.topic = FAILOVER_TOPIC
            m.body = body("failover", i)
            i += 1
            began = time.monotonic()
            try:
                message_id = producer.send(m).message_id
            except Exception:
                time.sleep(0.01)
                continue
            acked[message_id] = m.body
            ok_times.append((began, time.monotonic()))
            time.sleep(0.01)

    thread = threading.Thread(target=sender)
    thread.start()
    per_kill: list[dict[str, Any]] = []
    try:
        for k in range(kills):
            side.healthy()
            seen = len(ok_times)
            wait_for(lambda seen=seen: len(ok_times) > seen, 60, "a send before the kill")
            killed_at = time.monotonic()
            victim = side.kill_master()

            def after(killed_at: float = killed_at) -> float | None:
                # A send begun after the kill: one in flight before it may still be answered
                # by the dying master's socket buffers and says nothing about the failover.
                later = [done for began, done in list(ok_times) if began > killed_at]
                return min(later) if later else None

            first = wait_for(after, FAILOVER_TIMEOUT_S, "a send acknowledged after the kill")
            seconds = first - killed_at
            per_kill.append({"kill": k + 1, "victim": victim, "seconds": round(seconds, 3)})
            log(f"kill {k + 1}/{kills}: master {victim}; first acknowledged send {seconds:.3f} s")
    finally:
        stop.set()
        thread.join(60)
        producer.shutdown()
    return {
        "kills": kills,
        "seconds": summarize([p["seconds"] for p in per_kill], 3),
        "perKill": per_kill,
        "acked": len(acked),
    }, acked


def verify(config: Any, topic: str, acked: dict[str, bytes], timeout_s: float) -> dict[str, Any]:
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(config, f"{topic}Verify", {topic: FilterExpression("*")},
                              await_duration=2)  # fmt: skip
    consumer.startup()
    got: dict[str, bytes] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not set(acked) <= set(got):
            try:
                batch = consumer.receive(32, 60) or []
            except Exception:
                time.sleep(0.2)
                continue
            for m in batch:
                consumer.ack(m)
                got[m.message_id] = m.body
    finally:
        consumer.shutdown()
    lost = [k for k, v in acked.items() if got.get(k) != v]
    return {"acked": len(acked), "received": len(got), "ackedLost": len(lost)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 kills, 10 s of load")
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    kills = args.kills if args.kills is not None else (2 if args.quick else 10)
    seconds = args.seconds if args.seconds is not None else (10.0 if args.quick else 20.0)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-grpc-"))
    ceiling = loopback_tcp_ceiling()
    log(f"loopback ceiling: {ceiling.to_json()}")
    side = Side(work)
    try:
        config = side.start()
        load_result, load_acked = load(config, seconds)
        log(f"load: {load_result['msgPerSec']} msg/s, send p99 {load_result['sendMs']['p99']} ms")
        failover_result, failover_acked = failover(side, config, kills)
        side.healthy()
        checks = {
            "load": verify(config, LOAD_TOPIC, load_acked, 180),
            "failover": verify(config, FAILOVER_TOPIC, failover_acked, 120),
        }
    finally:
        side.stop()
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "grpc_client",
        "client": "rocketmq-python-client 5.1.2 (official Python SDK), default settings",
        "side": "brokergroup local up (built-in engine), stable gRPC endpoint",
        "load": load_result,
        "failover": failover_result,
        "verify": checks,
        "ackedLost": sum(c["ackedLost"] for c in checks.values()),
        "loopbackCeiling": ceiling.to_json(),
    }
    write_result("grpc_client_quick" if args.quick else "grpc_client", result)
    print_last_line(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
