"""Held pulls: what N suspended PULL_MESSAGEs cost a master that has nothing to deliver
(issue 31 item 4: held pulls woken by arrival, not re-read on a timer).

    flock /tmp/bg-heavy.lock .venv/bin/python bench/held_pulls.py --quick
    flock /tmp/bg-heavy.lock .venv/bin/python bench/held_pulls.py --held 6000 \\
        --before-tree /tmp/old-main     # the same on an older checkout first

What it does
------------
1. Ceiling: loopback TCP on this machine now (`loopback_tcp_ceiling`), and the same broker
   with no pull held (the `baseline` window of each side): its idle CPU and a send's latency
   are the best the held window can reach.
2. One broker (SyncStateSet {1}, the harness's settings) under three controllers, real
   processes (tests/integration `BrokerGroupHarness`) on loopback block 127.0.43.0/24, its
   remoting port signing-only: every request here is signed with the group's client pair,
   as a stock client's AclClientRPCHook signs it.
3. `HeldTopic` gets one message in each of its 4 queues; a holder *process* opens
   ceil(N / 200) connections (the port allows 256 requests in flight per connection) and
   keeps N suspended pulls (sysFlag SUSPEND, suspendTimeoutMillis 30 s) at the end of those
   queues, pulling again whenever one is answered, as push consumers do.
4. Per window (`baseline` before the holder, `held` after it reported all its pulls sent
   and `--settle` seconds passed): `--seconds` of no traffic (the broker process's CPU from
   /proc, % of one core), then `--sends` sequential 1 KiB SEND_MESSAGE_V2 to `SendTopic`
   from this process (latency per send: request written → SEND_OK read), then
   `--deliveries` rounds of one pull held at the end of SendTopic's queue 0 and one send to
   it (delivery: send written → the held pull's answer read).
5. `--before-tree DIR`: the same run first on DIR's code (broker and controllers import
   DIR's packages through PYTHONPATH), e.g. `git worktree add --detach /tmp/old-main <rev>`.

Output: a summary, bench/results/held_pulls.json, and as the LAST stdout line one JSON
object: held, the ceiling (loopback rtt, baseline idle CPU and send p50/p99), and per side
(`after`, `before` when given) the held window's idle broker CPU, send p50/p99 and the
holder's answered/busy counts (answered while idle: 0 expected; busy: SYSTEM_BUSY answers).
Every process this script starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import loopback_tcp_ceiling, print_last_line, summarize, write_result  # noqa: E402
from _cpu import cpu_window, take_sample  # noqa: E402

BLOCK = 43  # 127.0.43.0/24: not the local runtime's, no test's (41 is one), not produce.py's
HELD_TOPIC = "HeldTopic"
SEND_TOPIC = "SendTopic"
QUEUES = 4
PULLS_PER_CONNECTION = 200
SUSPEND_MS = 30_000
BODY = b"x" * 1024
#: The harness's FAST_SETTINGS put back to BrokerConfig's defaults (as bench/produce.py):
#: the shipped configuration, whose lease an overloaded event loop must still renew.
DEFAULT_SETTINGS: dict[str, str] = {
    "heartbeatIntervalMs": "500",
    "heartbeatTimeoutMs": "2000",
    "masterLeaseMs": "1500",
    "haMaxTimeSlaveNotCatchUpMs": "5000",
    "slaveTimeoutMs": "3000",
    "syncStateSetCheckIntervalMs": "500",
    "mappedFileSizeCommitLog": str(1 << 30),
    "controllerRequestTimeoutMs": "1000",
    "watchTimeoutMs": "10000",
    "flushIntervalMs": "500",
    "flushDiskType": "SYNC_FLUSH",
    "allAckInSyncStateSet": "true",
    "autoCreateTopicEnable": "true",
}
PACKAGE_DIRS = ("broker-image", "remoting", "controller", "cli", "operator", "pipeline")


# ============================================================== requests


def pull_request(queue_id: int, offset: int, topic: str = HELD_TOPIC) -> Any:
    from brokergroup_remoting import RequestCode
    from brokergroup_remoting.command import request

    return request(RequestCode.PULL_MESSAGE, 0, {
        "consumerGroup": "held-bench", "topic": topic, "queueId": str(queue_id),
        "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
        "suspendTimeoutMillis": str(SUSPEND_MS), "subscription": "*", "subVersion": "0",
    })  # fmt: skip


def send_request(topic: str, queue_id: int) -> Any:
    from brokergroup_remoting import RequestCode
    from brokergroup_remoting.command import request

    fields = {
        "a": "held-bench-producer", "b": topic, "c": "TBW102", "d": str(QUEUES),
        "e": str(queue_id), "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
        "i": "", "j": "0", "k": "false", "m": "false", "n": "broker-a",
    }  # fmt: skip
    return request(RequestCode.SEND_MESSAGE_V2, 0, fields, BODY)


def credentials(key_file: str) -> Any:
    from brokergroup_remoting.net import Credentials

    data = json.loads(Path(key_file).read_text())
    return Credentials(data["accessKey"], data["secretKey"])


# ============================================================== the holder process


async def holder_main(args: argparse.Namespace) -> int:
    from brokergroup_remoting import ResponseCode
    from brokergroup_remoting.net import RemotingClient

    creds = credentials(args.key_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    counts = {"answered": 0, "busy": 0, "errors": 0}
    offsets = {q: args.offset for q in range(QUEUES)}

    async def keep_pulling(client: RemotingClient, queue_id: int) -> None:
        while not stop.is_set():
            try:
                answer = await client.invoke(pull_request(queue_id, offsets[queue_id]), 60.0)
            except Exception:
                counts["errors"] += 1
                await asyncio.sleep(1)
                continue
            if answer.code == ResponseCode.SYSTEM_BUSY:
                counts["busy"] += 1
                await asyncio.sleep(3)  # what a push consumer does after an exception
                continue
            counts["answered"] += 1
            next_offset = answer.fields().get("nextBeginOffset")
            if answer.code == ResponseCode.SUCCESS and next_offset is not None:
                offsets[queue_id] = max(offsets[queue_id], int(next_offset))

    clients = [
        await RemotingClient.connect(args.address, credentials=creds)
        for _ in range(math.ceil(args.held / PULLS_PER_CONNECTION))
    ]
    tasks = [
        asyncio.ensure_future(keep_pulling(clients[i // PULLS_PER_CONNECTION], i % QUEUES))
        for i in range(args.held)
    ]
    await asyncio.sleep(0.5)  # every pull written
    print(json.dumps({"event": "holding", "held": args.held}), flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for client in clients:
        await client.close()
    print(json.dumps({"event": "done", **counts}), flush=True)
    return 0


# ============================================================== windows


async def send_latencies(address: str, key_file: str, sends: int) -> dict[str, Any]:
    from brokergroup_remoting import ResponseCode
    from brokergroup_remoting.net import RemotingClient

    creds = credentials(key_file)
    client = await RemotingClient.connect(address, credentials=creds)
    latencies_ms: list[float] = []
    errors: dict[str, int] = {}
    try:
        for i in range(sends):
            cmd = send_request(SEND_TOPIC, i % QUEUES)
            start = time.perf_counter()
            try:
                answer = await client.invoke(cmd, 30.0)
            except (ConnectionError, TimeoutError) as exc:
                # The broker closes a connection whose send it refused as not the master
                # (an overloaded loop may miss its lease): count it, reconnect, go on.
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                await client.close()
                await asyncio.sleep(0.1)
                client = await RemotingClient.connect(address, credentials=creds)
                continue
            elapsed = (time.perf_counter() - start) * 1000
            if answer.code == ResponseCode.SUCCESS:
                latencies_ms.append(elapsed)
            else:
                key = f"{answer.code}: {(answer.remark or '')[:80]}"
                errors[key] = errors.get(key, 0) + 1
    finally:
        await client.close()
    return {"send_ms": summarize(latencies_ms, 3), "send_errors": errors}


async def delivery_latencies(address: str, key_file: str, rounds: int) -> dict[str, Any]:
    """A pull held at the end of SendTopic's queue 0, then one send to it: send written →
    the held pull's answer read (the send's own path included). The old front found the
    record at its next 20 ms re-read; woken by arrival, it answers with the send."""
    from brokergroup_remoting import ResponseCode
    from brokergroup_remoting.net import RemotingClient

    creds = credentials(key_file)
    producer = await RemotingClient.connect(address, credentials=creds)
    consumer = await RemotingClient.connect(address, credentials=creds)
    latencies_ms: list[float] = []
    misses = 0
    try:
        first = await producer.invoke(send_request(SEND_TOPIC, 0), 30.0)
        offset = int(first.fields().get("queueOffset", "0")) + 1
        for _ in range(rounds):
            held = asyncio.ensure_future(consumer.invoke(pull_request(0, offset, SEND_TOPIC), 60.0))
            await asyncio.sleep(0.05)  # the pull reaches the broker and holds
            start = time.perf_counter()
            sent = await producer.invoke(send_request(SEND_TOPIC, 0), 30.0)
            answer = await held
            elapsed = (time.perf_counter() - start) * 1000
            if sent.code == ResponseCode.SUCCESS and answer.code == ResponseCode.SUCCESS:
                latencies_ms.append(elapsed)
                offset = int(answer.fields()["nextBeginOffset"])
            else:
                misses += 1
                offset = int(answer.fields().get("nextBeginOffset", offset))
    except (ConnectionError, TimeoutError):
        misses += 1
    finally:
        await producer.close()
        await consumer.close()
    return {"delivery_ms": summarize(latencies_ms, 3), "delivery_misses": misses}


def window(
    broker_pid: int,
    args: argparse.Namespace,
    address: str,
    key_file: str,
    master_epoch: Callable[[], int | None],
) -> dict[str, Any]:
    """`--seconds` of no traffic (broker CPU), then `--sends` sequential sends. The
    broker's masterEpoch at the start, after the idle part and at the end: a master whose
    event loop lagged past masterLeaseMs was fenced and re-elected (its connections, the
    held pulls' too, were closed), and the numbers after that are not of held pulls."""
    epochs = [master_epoch()]
    before = take_sample({broker_pid: "broker"})
    time.sleep(args.seconds)
    after = take_sample({broker_pid: "broker"})
    epochs.append(master_epoch())
    idle = cpu_window(before, after)
    sends = asyncio.run(send_latencies(address, key_file, args.sends))
    delivery = asyncio.run(delivery_latencies(address, key_file, args.deliveries))
    epochs.append(master_epoch())
    return {
        "master_epochs": epochs,
        "idle_broker_cpu_pct": round(idle.cores().get("broker", 0.0) * 100, 1),
        "idle_broker_kernel_cpu_pct": round(
            idle.kernel_s.get("broker", 0.0) / idle.wall_s * 100, 1
        ),
        "idle_machine_busy_cores": round(idle.machine_busy_cores, 2),
        "idle_window_s": round(idle.wall_s, 2),
        **sends,
        **delivery,
    }


def stop_pid(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM by PID (SIGKILL after 10 s); returns what it printed."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=10)
    return out.decode(errors="replace")


def read_event(proc: subprocess.Popen[bytes], event: str, timeout_s: float) -> dict[str, Any]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the holder exited before {event!r} (status {proc.poll()})")
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and data.get("event") == event:
                return data
    raise RuntimeError(f"no {event!r} from the holder in {timeout_s} s")


def make_group(base: Path) -> tuple[Any, str]:
    """A one-broker group whose remoting port is open and signing-only; the key file a
    client signs with. A harness with `client_auth` gives the group's client pair; an
    older one starts the broker with the group's broker pair (`--remoting-key-file`),
    which its remoting port also accepts."""
    from brokergroup_controller.credentials import Role, derive_rocketmq_pair
    from tests.integration import broker_harness as h

    settings = DEFAULT_SETTINGS
    if "client_auth" in inspect.signature(h.BrokerGroupHarness).parameters:
        group = h.BrokerGroupHarness(
            base, block=BLOCK, replicas=1, settings=settings, client_auth=True
        )
        return group, str(group.client_key_file)
    key_file = base / "remoting-broker-keys.json"

    class Harness(h.BrokerGroupHarness):
        def command(self, slot: int, extra_settings: Any = None) -> list[str]:
            return [*super().command(slot, extra_settings), "--remoting-key-file", str(key_file)]

    group = Harness(base, block=BLOCK, replicas=1, settings=settings)
    root = group.controllers.broker_credential_root
    key_file.write_text(
        derive_rocketmq_pair(root, Role.BROKER, h.CLUSTER, h.BROKER_NAME).to_json() + "\n"
    )
    key_file.chmod(0o600)
    return group, str(key_file)


def run_side(label: str, tree: Path | None, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from tests.integration.broker_harness import CLIENT_PORT

    saved = os.environ.get("PYTHONPATH")
    code = tree if tree is not None else ROOT
    # The broker and controllers import this side's packages first.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(code / d) for d in PACKAGE_DIRS] + ([saved] if saved else [])
    )
    group, key_file = make_group(base / label)
    holder: subprocess.Popen[bytes] | None = None
    try:
        group.start_all()
        slot = group.wait_for_master(timeout_s=60)
        broker = group.brokers[slot]
        assert broker.process is not None
        address = f"{broker.host}:{CLIENT_PORT + 3}"
        print(f"[{label}] broker pid {broker.process.pid}, remoting {address} ({code})", flush=True)

        async def seed() -> None:  # one record per queue of both topics (auto-created)
            from brokergroup_remoting import ResponseCode
            from brokergroup_remoting.net import RemotingClient

            client = await RemotingClient.connect(address, credentials=credentials(key_file))
            try:
                for topic in (HELD_TOPIC, SEND_TOPIC):
                    for queue_id in range(QUEUES):
                        for _ in range(50):
                            answer = await client.invoke(send_request(topic, queue_id), 10.0)
                            if answer.code == ResponseCode.SUCCESS:
                                break
                            await asyncio.sleep(0.2)  # the lease, the name server: retry
                        else:
                            raise RuntimeError(f"seeding {topic}/{queue_id}: {answer}")
            finally:
                await client.close()

        asyncio.run(seed())

        def master_epoch() -> int | None:
            status = group.status(slot, timeout_s=5.0)
            return None if status is None else status.get("masterEpoch")

        baseline = window(broker.process.pid, args, address, key_file, master_epoch)
        print(f"[{label}] baseline (0 held): {json.dumps(baseline)}", flush=True)
        holder = subprocess.Popen(
            [sys.executable, __file__, "--holder", "--address", address, "--key-file", key_file,
             "--held", str(args.held), "--offset", "1"],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        read_event(holder, "holding", 120)
        time.sleep(args.settle)
        holder_before = take_sample({holder.pid: "holder"})
        held = window(broker.process.pid, args, address, key_file, master_epoch)
        holder_cpu = cpu_window(holder_before, take_sample({holder.pid: "holder"}))
        held["holder_cpu_pct"] = round(holder_cpu.cores().get("holder", 0.0) * 100, 1)
        out = stop_pid(holder)
        holder = None
        done = [json.loads(x) for x in out.splitlines() if x.startswith('{"event": "done"')]
        if done:
            held["holder"] = {k: v for k, v in done[-1].items() if k != "event"}
        print(f"[{label}] {args.held} held: {json.dumps(held)}", flush=True)
        return {"code": str(code), "baseline": baseline, "held": held}
    finally:
        if holder is not None:
            stop_pid(holder)
        group.stop_all()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run, < 60 s a side")
    parser.add_argument("--held", type=int, default=None, help="held pulls (6000; quick 2000)")
    parser.add_argument("--seconds", type=float, default=None, help="idle window (10; quick 4)")
    parser.add_argument("--sends", type=int, default=None, help="sends per window (1000; 200)")
    parser.add_argument(
        "--deliveries", type=int, default=None, help="held pull + send rounds (100; quick 20)"
    )
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after the holder")
    parser.add_argument("--before-tree", type=Path, default=None, help="older checkout, run first")
    parser.add_argument("--dir", default=None, help="work directory (kept)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results")
    # Internal: the holder process.
    parser.add_argument("--holder", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--key-file", help=argparse.SUPPRESS)
    parser.add_argument("--offset", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.held is None:
        args.held = 2000 if args.quick else 6000
    if args.holder:
        return asyncio.run(holder_main(args))
    if args.seconds is None:
        args.seconds = 4.0 if args.quick else 10.0
    if args.sends is None:
        args.sends = 200 if args.quick else 1000
    if args.deliveries is None:
        args.deliveries = 20 if args.quick else 100
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-held-"))
    base.mkdir(parents=True, exist_ok=True)
    loop = loopback_tcp_ceiling(f"127.0.{BLOCK}.1", round_trips=500 if args.quick else 2000,
                                stream_bytes=(64 if args.quick else 256) << 20)  # fmt: skip
    print(f"ceiling: loopback TCP rtt p50 {loop.rtt_p50_us} us, p99 {loop.rtt_p99_us} us, "
          f"{loop.stream_mb_per_s:.0f} MB/s", flush=True)  # fmt: skip
    sides: dict[str, Any] = {}
    if args.before_tree is not None:
        sides["before"] = run_side("before", args.before_tree.resolve(), args, base)
    sides["after"] = run_side("after", None, args, base)
    after = sides["after"]
    result: dict[str, Any] = {
        "held": args.held,
        "ceiling": {
            "loopback": loop.to_json(),
            "baseline_idle_broker_cpu_pct": after["baseline"]["idle_broker_cpu_pct"],
            "baseline_send_p50_ms": after["baseline"]["send_ms"]["p50"],
            "baseline_send_p99_ms": after["baseline"]["send_ms"]["p99"],
        },
        "config": {
            "quick": args.quick,
            "idle_window_s": args.seconds,
            "sends": args.sends,
            "suspend_ms": SUSPEND_MS,
            "queues": QUEUES,
            "pulls_per_connection": PULLS_PER_CONNECTION,
            "replicas": 1,
        },
        "sides": sides,
    }
    for label, side in sides.items():
        held = side["held"]
        result[f"{label}_idle_broker_cpu_pct"] = held["idle_broker_cpu_pct"]
        result[f"{label}_send_p50_ms"] = held["send_ms"]["p50"]
        result[f"{label}_send_p99_ms"] = held["send_ms"]["p99"]
        result[f"{label}_delivery_p50_ms"] = held["delivery_ms"]["p50"]
        result[f"{label}_delivery_p99_ms"] = held["delivery_ms"]["p99"]
        # The master lost its lease while pulls were held (its loop lagged): re-elected.
        result[f"{label}_master_fenced"] = len(set(held["master_epochs"])) > 1
    for label, side in sides.items():
        b, h = side["baseline"], side["held"]
        print(
            f"{label}: {args.held} held pulls: broker idle CPU {h['idle_broker_cpu_pct']}% "
            f"(0 held: {b['idle_broker_cpu_pct']}%), send p50 {h['send_ms']['p50']} ms p99 "
            f"{h['send_ms']['p99']} ms (0 held: {b['send_ms']['p50']} / {b['send_ms']['p99']}); "
            f"send errors {sum(h['send_errors'].values())}, masterEpoch {h['master_epochs']}; "
            f"held pull answered after a send: p50 {h['delivery_ms']['p50']} ms p99 "
            f"{h['delivery_ms']['p99']} ms (0 held: {b['delivery_ms']['p50']} / "
            f"{b['delivery_ms']['p99']})"
        )
    if not args.no_write:
        print(f"wrote {write_result('held_pulls', result)}")
    print_last_line(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
