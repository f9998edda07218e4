"""The official RocketMQ 5 Python SDK over gRPC against brokergroup and against RocketMQ 5.3
with its own proxy, in one run (issue 35 item 6).

    .venv/bin/python bench/grpc_client.py --quick     # 2 kills a side, 10 s of load
    .venv/bin/python bench/grpc_client.py             # 10 kills a side, 20 s of load
    .venv/bin/python bench/grpc_client.py --only brokergroup   # or --only rocketmq

Two sides, one after the other, each driven by the same SDK program:

- brokergroup: `brokergroup local up` (three controllers, three brokers, every setting at its
  default, lane 2 of the local runtime's addresses) through the group's stable gRPC endpoint
  (`local status --json` `grpcEndpoint`), signed with the group's client pair.
- rocketmq: a stock RocketMQ 5.3 controller-mode group (tools/rocketmq/stock_client.py
  RocketMQGroup: a name server, one DLedger controller, three brokers of one broker set,
  allAckInSyncStateSet and SYNC_FLUSH, as brokergroup's commit rule) and the stock proxy in
  cluster mode (`ProxyStartup -pm cluster`, cli/brokergroup_cli/local/rocketmq_stock.py
  StockProxyConfig, every proxy setting at its default but the pools sized for two cores and
  no client authentication: the stock group has no users). The SDK talks to the proxy; the
  killed broker is started again by the bench once the failover is measured.

Per side:

1. load: 16 threads, each with its own Producer (rocketmq-python-client, default settings),
   send 1 KiB bodies for the load time; msg/s and the p50/p99 of a send call.
2. failover: one thread sends continuously; per kill the group is first healthy (a master,
   all three in the SyncStateSet, a send acknowledged since the last kill), then the master
   is SIGKILLed by PID and the time from the kill to the first acknowledged send begun after
   it is the failover time (the supervisor restarts the killed broker).
3. verify: a SimpleConsumer receives both topics; every acknowledged message must come back
   (`ackedLost`), matched by message id and body.

A kill whose first acknowledged send does not come within FAILOVER_TIMEOUT_S is recorded as
timed out (`timedOut`, its seconds the timeout) and the run goes on.

Prints the loopback TCP ceiling measured in the same run. Writes bench/results/grpc_client.json
(bench/results/grpc_client_quick.json with --quick); the last stdout line is one JSON object.
Run it under `flock /tmp/bg-heavy.lock`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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
FAILOVER_TIMEOUT_S = 120.0
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
    name = "brokergroup"
    description = "brokergroup local up (built-in engine), stable gRPC endpoint"

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

    def after_failover(self, victim: str) -> None:
        pass  # the local supervisor restarts the killed broker

    def stop(self) -> None:
        self.runtime.down()


class RocketMQSide:
    """A stock RocketMQ 5.3 controller-mode group and its stock proxy (cluster mode)."""

    name = "rocketmq"
    description = (
        "RocketMQ 5.3 controller-mode group (3 brokers, DLedger controller, "
        "allAckInSyncStateSet, SYNC_FLUSH) behind its stock proxy (cluster mode)"
    )
    GRPC_PORT = 28_481
    REMOTING_PORT = 28_480

    def __init__(self, work: Path) -> None:
        sys.path.insert(0, str(ROOT / "tools" / "rocketmq"))
        from stock_client import RocketMQGroup

        self.work = work
        self.group = RocketMQGroup(work / "group", host_prefix="127.0.62")
        self.proxy: subprocess.Popen[bytes] | None = None
        self.epoch = 0

    def start(self) -> Any:
        from rocketmq import ClientConfiguration, Credentials

        from brokergroup_cli.local.rocketmq_stock import (
            StockProxyConfig,
            find_home,
            java_env,
            proxy_missing,
        )

        home = find_home()
        if isinstance(home, str):
            raise RuntimeError(home)
        why = proxy_missing(home)
        if why is not None:
            raise RuntimeError(why)
        self.group.start()
        self.healthy()
        log(f"rocketmq: master {self.state['MasterAddr']} epoch {self.epoch}, 3 in sync")
        self.group.create_topic(LOAD_TOPIC, 8)
        self.group.create_topic(FAILOVER_TOPIC, 4)
        proxy = StockProxyConfig(
            base_dir=self.work / "proxy",
            namesrv=self.group.namesrv,
            # The pair it signs with; the stock group checks none (no ACL, no users).
            access_key="bench-proxy",
            secret_key="bench-proxy-secret",
            grpc_port=self.GRPC_PORT,
            remoting_port=self.REMOTING_PORT,
            authenticate=False,
        )
        proxy.write()
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.work / "logs" / "proxy.out", "ab") as out:
            self.proxy = subprocess.Popen(
                proxy.argv(home), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.work, env=java_env(proxy.base_dir),
            )  # fmt: skip
        self.endpoint = f"127.0.0.1:{self.GRPC_PORT}"
        config = ClientConfiguration(self.endpoint, Credentials())
        wait_for(lambda: self._proxy_serves(config), 180, "the stock proxy serving", 1.0)
        log(f"rocketmq: stock proxy up; gRPC endpoint {self.endpoint}")
        return config

    def _proxy_serves(self, config: Any) -> bool:
        from rocketmq import Message, Producer

        if self.proxy is not None and self.proxy.poll() is not None:
            raise RuntimeError(f"the stock proxy exited ({self.proxy.returncode}); see logs")
        producer = Producer(config, (LOAD_TOPIC,))
        try:
            producer.startup()
            m = Message()
            m.topic = LOAD_TOPIC
            m.body = body("warmup", 0)
            producer.send(m)
            return True
        except Exception as exc:
            log(f"rocketmq: proxy not serving yet: {exc!r}"[:200])
            return False
        finally:
            with contextlib.suppress(Exception):
                producer.shutdown()

    def healthy(self) -> dict[str, Any]:
        state: dict[str, Any] = self.group.wait_in_sync(3, self.epoch, timeout_s=HEALTHY_TIMEOUT_S)
        self.epoch = int(state["MasterEpoch"])
        self.state = state
        return state

    def kill_master(self) -> str:
        victim = str(self.group.master_name(self.state))
        self.group.kill(victim)
        return victim

    def after_failover(self, victim: str) -> None:
        self.group.start_broker(victim)
        self.epoch += 1

    def stop(self) -> None:
        if self.proxy is not None and self.proxy.poll() is None:
            self.proxy.send_signal(signal.SIGTERM)
            try:
                self.proxy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proxy.kill()
                self.proxy.wait(timeout=30)
        self.group.stop()


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


def failover(side: Any, config: Any, kills: int) -> tuple[dict[str, Any], dict[str, bytes]]:
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

            try:
                first = wait_for(after, FAILOVER_TIMEOUT_S, "a send acknowledged after the kill")
                seconds, timed_out = first - killed_at, False
            except TimeoutError:
                seconds, timed_out = FAILOVER_TIMEOUT_S, True
            side.after_failover(victim)
            entry: dict[str, Any] = {"kill": k + 1, "victim": victim, "seconds": round(seconds, 3)}
            if timed_out:
                entry["timedOut"] = True
            per_kill.append(entry)
            log(f"{side.name} kill {k + 1}/{kills}: master {victim}; first acknowledged send "
                f"{seconds:.3f} s{' (timed out)' if timed_out else ''}")  # fmt: skip
    finally:
        stop.set()
        thread.join(60)
        producer.shutdown()
    return {
        "kills": kills,
        "timedOut": sum(1 for p in per_kill if p.get("timedOut")),
        "seconds": summarize([p["seconds"] for p in per_kill], 3),
        "perKill": per_kill,
        "acked": len(acked),
    }, acked


def verify(config: Any, topic: str, acked: dict[str, bytes], timeout_s: float) -> dict[str, Any]:
    """Receive `topic` with a new SimpleConsumer group until every acknowledged message came
    back or `timeout_s` passed. When each one first came (seconds after the consumer
    started) tells a late message from a lost one: `arrivalS` summarizes them, `receivedBy`
    counts the acknowledged ones received by 30 s steps."""
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(config, f"{topic}Verify", {topic: FilterExpression("*")},
                              await_duration=2)  # fmt: skip
    consumer.startup()
    got: dict[str, bytes] = {}
    first_seen_s: dict[str, float] = {}
    began = time.monotonic()
    deadline = began + timeout_s
    next_log = began + 30
    try:
        while time.monotonic() < deadline and not set(acked) <= set(got):
            if time.monotonic() >= next_log:
                next_log += 30
                log(f"verify {topic}: {len(set(acked) & set(got))} of {len(acked)} "
                    f"acknowledged received after {time.monotonic() - began:.0f} s")  # fmt: skip
            try:
                batch = consumer.receive(32, 60) or []
            except Exception:
                time.sleep(0.2)
                continue
            for m in batch:
                got[m.message_id] = m.body
                first_seen_s.setdefault(m.message_id, time.monotonic() - began)
                # A failed ack (a stock proxy's deadline under load): the message comes
                # again after its invisible time; it was received all the same.
                with contextlib.suppress(Exception):
                    consumer.ack(m)
    finally:
        consumer.shutdown()
    lost = [k for k, v in acked.items() if got.get(k) != v]
    arrivals = sorted(first_seen_s[k] for k in acked if k in first_seen_s)
    steps = range(30, int(timeout_s) + 30, 30)
    return {
        "acked": len(acked),
        "received": len(got),
        "ackedLost": len(lost),
        "verifySeconds": timeout_s,
        "arrivalS": summarize(arrivals, 1),
        "receivedBy": {f"{t}s": sum(1 for a in arrivals if a <= t) for t in steps},
        "lostSample": sorted(lost)[:20],
    }


def run_side(side: Any, seconds: float, kills: int, verify_s: float) -> dict[str, Any]:
    from _cpu import cpu_window, take_sample

    # This process and its children (the side's servers, JVMs included) against the whole
    # machine: what other sessions took of the cores while the side ran. A killed broker's
    # ticks leave with it, so `other_busy_cores` is an upper bound.
    before = take_sample({os.getpid(): "bench"})
    try:
        config = side.start()
        load_result, load_acked = load(config, seconds)
        log(f"{side.name} load: {load_result['msgPerSec']} msg/s, "
            f"send p99 {load_result['sendMs']['p99']} ms")  # fmt: skip
        failover_result, failover_acked = failover(side, config, kills)
        side.healthy()
        checks = {
            "load": verify(config, LOAD_TOPIC, load_acked, max(180, verify_s)),
            "failover": verify(config, FAILOVER_TOPIC, failover_acked, verify_s),
        }
        # Before the side stops: an exited process's ticks leave with it.
        after = take_sample({os.getpid(): "bench"})
    finally:
        side.stop()
    window = cpu_window(before, after)
    ours = sum(window.cores().values())
    return {
        "side": side.description,
        "machine": {
            "wallS": round(window.wall_s, 1),
            "machine_busy_cores": round(window.machine_busy_cores, 3),
            "bench_cores": round(ours, 3),
            "other_busy_cores": round(window.machine_busy_cores - ours, 3),
        },
        "load": load_result,
        "failover": failover_result,
        "verify": checks,
        "ackedLost": sum(c["ackedLost"] for c in checks.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 kills a side, 10 s of load")
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--only", choices=("brokergroup", "rocketmq"), default=None)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument(
        "--verify-seconds", type=float, default=120.0,
        help="how long the failover topic's verify waits for every acknowledged message",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    kills = args.kills if args.kills is not None else (2 if args.quick else 10)
    seconds = args.seconds if args.seconds is not None else (10.0 if args.quick else 20.0)
    work = args.dir or Path(tempfile.mkdtemp(prefix="bench-grpc-"))
    ceiling = loopback_tcp_ceiling()
    log(f"loopback ceiling: {ceiling.to_json()}")
    sides: dict[str, dict[str, Any]] = {}
    try:
        makers: dict[str, Callable[[Path], Any]] = {"brokergroup": Side, "rocketmq": RocketMQSide}
        for side_name, make in makers.items():
            if args.only not in (None, side_name):
                continue
            sides[side_name] = run_side(make(work / side_name), seconds, kills, args.verify_seconds)
            log(f"{side_name}: {json.dumps(sides[side_name])}")  # kept if a later side fails
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "grpc_client",
        "client": "rocketmq-python-client 5.1.2 (official Python SDK), default settings",
        "sides": sides,
        "ackedLost": sum(s["ackedLost"] for s in sides.values()),
        "loopbackCeiling": ceiling.to_json(),
    }
    name = "grpc_client_quick" if args.quick else "grpc_client"
    if args.only is not None:
        name += f"_{args.only}"
    write_result(name, result)
    print_last_line(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
