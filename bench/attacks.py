"""Issue 31's attacks against a real group: what a well-behaved client sees, and what the
attacked processes pay, before and after the transport's bounds.

    flock /tmp/bg-integration.lock flock /tmp/bg-heavy.lock .venv/bin/python bench/attacks.py --quick
    git worktree add --detach /tmp/h9old 51926cc      # the code before issue 31's hardening
    flock /tmp/bg-integration.lock flock /tmp/bg-heavy.lock .venv/bin/python bench/attacks.py \\
        --before-tree /tmp/h9old

What it does
------------
1. Ceiling: loopback TCP on this machine now (`loopback_tcp_ceiling`), and each side's
   `baseline` window (the same group, the same client, no attack).
2. One broker (SyncStateSet {1}, the shipped timeouts as bench/held_pulls.py) under three
   controllers, real processes (tests/integration `BrokerGroupHarness`) on loopback block
   127.0.46.0/24, the broker's remoting port signing-only (`client_auth`). The harness
   starts no name server (a controller serves it only with `--namesrv-key-file`): here each
   controller gets one (an admin pair written for the run), so each serves its embedded name
   server on <node>:9876, signed requests only, and the broker registers with all three
   (`--namesrv-addresses`), so TBW102 has a route.
3. The attacked controller is the Raft leader (the node whose stall costs heartbeats and
   elections). Per window, at once, from this process (one asyncio loop):
   - sends: sequential 1 KiB SEND_MESSAGE_V2 to the master's remoting port (port 10914),
     signed with the group's client pair, paced at `--send-rate` (the next one starts at its
     slot or when the last one is answered, whichever is later), 3 s timeout (a stock
     producer's sendMsgTimeout). Same wire format and port as a stock RocketMQ producer
     with AclClientRPCHook: this stands in for "the stock client's send p99".
   - routes: sequential signed GET_ROUTEINFO_BY_TOPIC (TBW102) to the attacked controller's
     name server on one kept connection, paced at `--route-rate`, 3 s timeout (a stock
     client's mqClientApiTimeout). A timeout keeps the connection (as a stock client
     does); a closed one is reconnected and counted.
   - every 0.5 s VmRSS (/proc/PID/status) of the attacked controller and the master broker;
     CPU of both (and of the attacker) from /proc at the window's ends (bench/_cpu.py);
   - every 2 s (a thread) the controllers' replica-info (masterEpoch, masterBrokerId,
     masterAlive, as the harness reads it) and every node's /v1/raft (term, leader).
4. Windows: `baseline` (`--baseline-seconds`, no attack), then `attack` (`--seconds`): an
   attacker *process* (its CPU is not the measuring client's), from its own source address
   127.0.46.200, opens per target (the attacked controller's name server, the master's
   remoting port) `--floods` connections (SO_RCVBUF 4096, reading paused: never reads) that
   write unsigned small frames as fast as the socket takes them, and `--promises`
   connections that each write a frame header promising 16 MiB, then 3 MiB of it, before
   any signature, and hold. Bounded by `--seconds`; if either attacked process's RSS passes
   `--rss-cap-mib` the attack is stopped early (this machine is shared) and that is recorded.
   After it, `--recovery-seconds` later: RSS again, and whether the group has a master.
5. `--before-tree DIR`: the same run first on DIR's code (the broker and controllers import
   DIR's packages through PYTHONPATH; this process and the attacker use this tree's).

Timeouts and refusals are counted, never fatal: a side whose master is deposed or whose
client times out records that as its result. Output: a summary, bench/results/attacks.json
(not with `--quick`), and as the LAST stdout line one JSON object. Every process this script
starts is stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import loopback_tcp_ceiling, print_last_line, summarize, write_result  # noqa: E402
from _cpu import cpu_window, take_sample  # noqa: E402
from held_pulls import DEFAULT_SETTINGS, PACKAGE_DIRS, credentials, read_event, stop_pid  # noqa: E402

BLOCK = 46  # 127.0.46.0/24: not held_pulls' 43, produce's 40, any test's (41, 44, 57, ...)
ATTACKER_SOURCE = f"127.0.{BLOCK}.200"
NAMESRV_PORT = 9876  # a controller's default namesrvPort
SEND_TOPIC = "AttackSendTopic"
ROUTE_TOPIC = "TBW102"
QUEUES = 4
BODY = b"x" * 1024
REQUEST_TIMEOUT_S = 3.0
PROMISED_BYTES = 16 * 1024 * 1024
PROMISE_SENT_BYTES = 3 << 20
FLOOD_BUFFER_BYTES = 256 * 1024  # what one flood keeps queued in its own transport at most


# ============================================================== requests


def send_request(queue_id: int) -> Any:
    from brokergroup_remoting import RequestCode
    from brokergroup_remoting.command import request

    fields = {
        "a": "attacks-bench-producer", "b": SEND_TOPIC, "c": "TBW102", "d": str(QUEUES),
        "e": str(queue_id), "f": "0", "g": str(int(time.time() * 1000)), "h": "0",
        "i": "", "j": "0", "k": "false", "m": "false", "n": "broker-a",
    }  # fmt: skip
    return request(RequestCode.SEND_MESSAGE_V2, 0, fields, BODY)


def route_request() -> Any:
    from brokergroup_remoting import RequestCode
    from brokergroup_remoting.command import request

    return request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": ROUTE_TOPIC})


def flood_frames(target: str, count: int) -> tuple[bytes, int]:
    """`count` small unsigned frames for `target` ("namesrv": a route request; "broker":
    GET_MAX_OFFSET), and one frame's length."""
    from brokergroup_remoting import RequestCode
    from brokergroup_remoting.command import request
    from brokergroup_remoting.frame import encode

    if target == "namesrv":
        one = encode(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 1, {"topic": "x"}))
    else:
        one = encode(request(RequestCode.GET_MAX_OFFSET, 1, {"topic": SEND_TOPIC, "queueId": "0"}))
    return one * count, len(one)


# ============================================================== the attacker process


class _Peer(asyncio.Protocol):
    """A connection that can pause its own reading; records when the server closed it."""

    def __init__(self, read: bool) -> None:
        self.read = read
        self.transport: asyncio.Transport | None = None
        self.closed_at: float | None = None
        self.lost = asyncio.Event()
        self.writable = asyncio.Event()
        self.writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.read:
            transport.pause_reading()  # never read: the server's answers pile up on its side
        transport.set_write_buffer_limits(high=FLOOD_BUFFER_BYTES)

    def data_received(self, data: bytes) -> None:
        pass

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed_at = time.monotonic()
        self.lost.set()
        self.writable.set()


async def _open(host: str, port: int, read: bool, rcvbuf: int | None) -> _Peer:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.bind((ATTACKER_SOURCE, 0))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        await asyncio.wait_for(loop.sock_connect(sock, (host, port)), 5.0)
        _, peer = await loop.create_connection(lambda: _Peer(read), sock=sock)
    except BaseException:
        sock.close()
        raise
    return peer


async def attacker_main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    targets = {"namesrv": args.namesrv, "broker": args.broker}
    stats: dict[str, dict[str, Any]] = {
        name: {"flood_connections": 0, "flood_connect_errors": 0, "flood_frames_written": 0,
               "flood_closed_by_server": 0, "promise_connections": 0,
               "promise_connect_errors": 0, "promise_bytes_taken": 0,
               "promise_closed_by_server": 0, "promise_close_after_s": []}
        for name in targets
    }  # fmt: skip

    async def connect_all(name: str, address: str) -> tuple[list[_Peer], list[_Peer]]:
        host, _, port = address.rpartition(":")
        floods: list[_Peer] = []
        promises: list[_Peer] = []
        for kind, n, read, rcvbuf, into in (
            ("flood", args.floods, False, 4096, floods),
            ("promise", args.promises, True, None, promises),
        ):
            for _ in range(n):
                try:
                    into.append(await _open(host, int(port), read, rcvbuf))
                    stats[name][f"{kind}_connections"] += 1
                except (OSError, TimeoutError):
                    stats[name][f"{kind}_connect_errors"] += 1
        return floods, promises

    opened = {name: await connect_all(name, address) for name, address in targets.items()}
    start = time.monotonic()
    until = start + args.seconds
    print(json.dumps({"event": "attacking"}), flush=True)

    async def wait_until(peer: _Peer) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                asyncio.wait(
                    [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(peer.lost.wait())],
                    return_when=asyncio.FIRST_COMPLETED,
                ),
                max(0.0, until - time.monotonic()),
            )

    async def flood(name: str, peer: _Peer) -> None:
        frames, frame_len = flood_frames(name, 1000)
        assert peer.transport is not None
        while time.monotonic() < until and not stop.is_set() and not peer.lost.is_set():
            if peer.writable.is_set():
                peer.transport.write(frames)
                stats[name]["flood_frames_written"] += 1000
            else:  # the server stopped reading us: keep the pressure on
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(peer.writable.wait(), 0.5)
            await asyncio.sleep(0)
        if peer.lost.is_set():
            stats[name]["flood_closed_by_server"] += 1
        else:  # what never left our own buffer was not sent
            queued = peer.transport.get_write_buffer_size()
            stats[name]["flood_frames_written"] -= queued // frame_len
            peer.transport.abort()

    async def promise(name: str, peer: _Peer) -> None:
        assert peer.transport is not None
        peer.transport.write(
            struct.pack(">ii", PROMISED_BYTES - 4, 100) + b"\0" * PROMISE_SENT_BYTES
        )
        await wait_until(peer)
        if peer.lost.is_set() and peer.closed_at is not None:
            stats[name]["promise_closed_by_server"] += 1
            stats[name]["promise_close_after_s"].append(round(peer.closed_at - start, 2))
        else:
            left = peer.transport.get_write_buffer_size()
            stats[name]["promise_bytes_taken"] += 8 + PROMISE_SENT_BYTES - left
            peer.transport.abort()

    tasks = [flood(name, p) for name, (floods, _) in opened.items() for p in floods]
    tasks += [promise(name, p) for name, (_, promises) in opened.items() for p in promises]
    await asyncio.gather(*tasks, return_exceptions=True)
    for per in stats.values():
        closes = sorted(per.pop("promise_close_after_s"))
        per["promise_close_after_s_p50"] = closes[len(closes) // 2] if closes else None
    print(json.dumps({"event": "done", "seconds": round(time.monotonic() - start, 2),
                      "stopped": stop.is_set(), **stats}), flush=True)  # fmt: skip
    return 0


# ============================================================== measuring


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class GroupWatch(threading.Thread):
    """Every `interval_s`: replica-info (masterEpoch, masterBrokerId, masterAlive) and every
    controller node's Raft term and leader, as the harness reads them (blocking HTTP)."""

    def __init__(self, group: Any, interval_s: float = 2.0) -> None:
        super().__init__(name="group-watch", daemon=True)
        self.group = group
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.polls: list[dict[str, Any]] = []

    def poll(self) -> dict[str, Any]:
        info = self.group.replica_info()
        terms: dict[str, Any] = {}
        leaders: set[str] = set()
        for node_id in self.group.controllers.nodes:
            status = self.group.controllers.raft_status(node_id, timeout_s=2.0)
            terms[str(node_id)] = None if status is None else status.get("term")
            if status is not None and status.get("leader"):
                leaders.add(str(status["leader"]))
        return {
            "masterEpoch": None if info is None else info.get("masterEpoch"),
            "masterBrokerId": None if info is None else info.get("masterBrokerId"),
            "masterAlive": None if info is None else info.get("masterAlive", True),
            "terms": terms,
            "leaders": sorted(leaders),
        }

    def run(self) -> None:
        while not self.stop.is_set():
            self.polls.append(self.poll())
            self.stop.wait(self.interval_s)

    def summary(self) -> dict[str, Any]:
        epochs = [p["masterEpoch"] for p in self.polls if p["masterEpoch"] is not None]
        terms = sorted({t for p in self.polls for t in p["terms"].values() if t is not None})
        known = [e for e in epochs if isinstance(e, int)]
        return {
            "polls": len(self.polls),
            "master_epochs_seen": sorted(set(epochs)),
            "elections": (max(known) - min(known)) if known else None,
            "polls_without_master": sum(
                1 for p in self.polls if p["masterBrokerId"] is None or not p["masterAlive"]
            ),
            "polls_without_replica_info": sum(1 for p in self.polls if p["masterEpoch"] is None),
            "raft_terms_seen": terms,
            "raft_leaders_seen": sorted({x for p in self.polls for x in p["leaders"]}),
        }


async def measure(
    send_address: str,
    route_address: str,
    key_file: str,
    seconds: float,
    args: argparse.Namespace,
    pids: dict[str, int],
    on_rss_cap: Any = None,
) -> dict[str, Any]:
    """Sends and route requests, paced and sequential, for `seconds` (or until the RSS cap
    stopped the attack); RSS of `pids` every 0.5 s."""
    from brokergroup_remoting import ResponseCode
    from brokergroup_remoting.net import RemotingClient

    creds = credentials(key_file)
    start = time.monotonic()
    until = start + seconds
    stopped_early: list[str] = []
    rss: dict[str, list[float]] = {role: [] for role in pids}

    def done() -> bool:
        return time.monotonic() >= until or bool(stopped_early)

    async def client_loop(address: str, make: Any, rate: float) -> dict[str, Any]:
        latencies: list[float] = []
        counts = {"timeouts": 0, "reconnects": 0, "connect_errors": 0}
        codes: dict[str, int] = {}
        client: RemotingClient | None = None
        slot = time.monotonic()
        i = 0
        while not done():
            now = time.monotonic()
            if now < slot:
                await asyncio.sleep(slot - now)
                continue
            slot = max(slot + 1 / rate, now)
            if client is None or client.closed:
                if client is not None:
                    counts["reconnects"] += 1
                    await client.close()
                try:
                    client = await RemotingClient.connect(address, credentials=creds)
                except (OSError, TimeoutError):
                    client = None
                    counts["connect_errors"] += 1
                    await asyncio.sleep(0.2)
                    continue
            cmd = make(i)
            i += 1
            begin = time.perf_counter()
            try:
                # The outer bound also covers writing the request to a server not reading.
                answer = await asyncio.wait_for(
                    client.invoke(cmd, REQUEST_TIMEOUT_S), REQUEST_TIMEOUT_S + 2
                )
            except TimeoutError:
                counts["timeouts"] += 1
                continue
            except (ConnectionError, OSError):
                await client.close()
                client = None
                counts["reconnects"] += 1
                continue
            elapsed = (time.perf_counter() - begin) * 1000
            if answer.code == ResponseCode.SUCCESS:
                latencies.append(elapsed)
            else:
                key = f"{answer.code}: {(answer.remark or '')[:80]}"
                codes[key] = codes.get(key, 0) + 1
        if client is not None:
            await client.close()
        return {"ms": summarize(latencies, 3), **counts, "refusals": codes, "asked": i}

    async def rss_loop() -> None:
        while not done():
            for role, pid in pids.items():
                value = rss_mib(pid)
                if value is not None:
                    rss[role].append(value)
                    if on_rss_cap is not None and value > args.rss_cap_mib and not stopped_early:
                        stopped_early.append(f"{role} RSS {value} MiB > {args.rss_cap_mib} MiB")
                        on_rss_cap()
            await asyncio.sleep(0.5)

    sends, routes, _ = await asyncio.gather(
        client_loop(send_address, lambda i: send_request(i % QUEUES), args.send_rate),
        client_loop(route_address, lambda _i: route_request(), args.route_rate),
        rss_loop(),
    )
    return {
        "measured_s": round(time.monotonic() - start, 2),
        "stopped_early": stopped_early[0] if stopped_early else None,
        "send": sends,
        "route": routes,
        "rss_samples": rss,
    }


def window(
    label: str,
    group: Any,
    seconds: float,
    args: argparse.Namespace,
    addresses: tuple[str, str, str],
    pids: dict[str, int],
    attacker: subprocess.Popen[bytes] | None = None,
) -> dict[str, Any]:
    send_address, route_address, key_file = addresses
    watch = GroupWatch(group)
    first = watch.poll()
    named = {pid: role for role, pid in pids.items()}
    if attacker is not None:
        named[attacker.pid] = "attacker"
    rss_start = {role: rss_mib(pid) for role, pid in pids.items()}
    watch.polls.append(first)
    watch.start()
    before = take_sample(named)

    def stop_attacker() -> None:
        if attacker is not None and attacker.poll() is None:
            os.kill(attacker.pid, signal.SIGTERM)

    measured = asyncio.run(
        measure(send_address, route_address, key_file, seconds, args, pids,
                stop_attacker if attacker is not None else None)
    )  # fmt: skip
    after = take_sample(named)
    rss_end = {role: rss_mib(pid) for role, pid in pids.items()}
    watch.stop.set()
    watch.join(timeout=15)
    watch.polls.append(watch.poll())
    cpu = cpu_window(before, after)
    samples = measured.pop("rss_samples")
    rss: dict[str, Any] = {}
    for role in pids:
        start, end = rss_start[role], rss_end[role]
        rss[role] = {
            "start": start,
            "end": end,
            "peak": max([x for x in [start, end, *samples[role]] if x is not None], default=None),
            "growth": None if start is None or end is None else round(end - start, 1),
        }
    return {
        **measured,
        "cpu_pct": {role: round(c * 100, 1) for role, c in cpu.cores().items()},
        "kernel_cpu_pct": {
            role: round(s / cpu.wall_s * 100, 1) for role, s in cpu.kernel_s.items()
        },
        "machine_busy_cores": round(cpu.machine_busy_cores, 2),
        "rss_mib": rss,
        "group": watch.summary(),
        "first_poll": first,
        "last_poll": watch.polls[-1],
    }


# ============================================================== a side


def make_group(base: Path) -> tuple[Any, str]:
    """The harness's group (client pair on, shipped timeouts) whose controllers also serve
    their name server: `--namesrv-key-file` with an admin pair written for this run."""
    from tests.integration import broker_harness as h

    group = h.BrokerGroupHarness(
        base, block=BLOCK, replicas=1, settings=DEFAULT_SETTINGS, client_auth=True
    )
    namesrv_keys = base / "namesrv-admin-keys.json"  # the release's (admin) pair: unused here
    namesrv_keys.write_text(
        json.dumps({"accessKey": "attacks-bench-admin", "secretKey": secrets.token_hex(16)})
    )
    namesrv_keys.chmod(0o600)
    controllers = group.controllers
    plain = controllers.command

    def command(node_id: int) -> list[str]:
        return [*plain(node_id), "--namesrv-key-file", str(namesrv_keys)]

    controllers.command = command  # type: ignore[method-assign]
    # The brokers register with every controller's name server (the harness passes none),
    # so routes name them as `brokergroup local up`'s do.
    namesrv = ";".join(f"{n.host}:{NAMESRV_PORT}" for n in controllers.nodes.values())
    broker_command = group.command

    def broker(slot: int, extra_settings: Any = None) -> list[str]:
        return [*broker_command(slot, extra_settings), "--namesrv-addresses", namesrv]

    group.command = broker  # type: ignore[method-assign]
    return group, str(group.client_key_file)


def wait_answered(address: str, key_file: str, make: Any, what: str, timeout_s: float) -> None:
    from brokergroup_remoting import ResponseCode
    from brokergroup_remoting.net import RemotingClient

    async def probe() -> str:
        try:
            client = await RemotingClient.connect(address, credentials=credentials(key_file))
        except (OSError, TimeoutError) as exc:
            return repr(exc)
        try:
            answer = await client.invoke(make(), 5.0)
        except (OSError, TimeoutError) as exc:
            return repr(exc)
        finally:
            await client.close()
        return "" if answer.code == ResponseCode.SUCCESS else f"{answer.code} {answer.remark}"

    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        last = asyncio.run(probe())
        if not last:
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} at {address} not answering after {timeout_s} s: {last}")


def run_side(label: str, tree: Path | None, args: argparse.Namespace, base: Path) -> dict[str, Any]:
    from tests.integration.broker_harness import CLIENT_PORT

    saved = os.environ.get("PYTHONPATH")
    code = tree if tree is not None else ROOT
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(code / d) for d in PACKAGE_DIRS] + ([saved] if saved else [])
    )
    group, key_file = make_group(base / label)
    attacker: subprocess.Popen[bytes] | None = None
    try:
        group.start_all()
        slot = group.wait_for_master(timeout_s=60)
        leader = group.controllers.wait_for_leader(timeout_s=30)
        broker = group.brokers[slot]
        node = group.controllers.nodes[leader]
        assert broker.process is not None and node.process is not None
        send_address = f"{broker.host}:{CLIENT_PORT + 3}"
        route_address = f"{node.host}:{NAMESRV_PORT}"
        pids = {"controller": node.process.pid, "broker": broker.process.pid}
        print(f"[{label}] ({code}) master pid {pids['broker']} remoting {send_address}; "
              f"attacked controller node {leader} (Raft leader) pid {pids['controller']} "
              f"name server {route_address}", flush=True)  # fmt: skip
        for queue_id in range(QUEUES):  # SendTopic auto-created, every queue answering
            wait_answered(send_address, key_file, lambda q=queue_id: send_request(q), "sends", 30)
        wait_answered(route_address, key_file, route_request, "the name server", 60)
        addresses = (send_address, route_address, key_file)

        baseline = window(label, group, args.baseline_seconds, args, addresses, pids)
        print(f"[{label}] baseline: {json.dumps(compact(baseline))}", flush=True)

        env = {**os.environ}  # the attacker runs this tree's code, whatever the side
        if saved is None:
            env.pop("PYTHONPATH", None)
        else:
            env["PYTHONPATH"] = saved
        attacker = subprocess.Popen(
            [sys.executable, __file__, "--attacker", "--namesrv", route_address,
             "--broker", send_address, "--seconds", str(args.seconds + 1),
             "--floods", str(args.floods), "--promises", str(args.promises)],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        read_event(attacker, "attacking", 60)
        attack = window(label, group, args.seconds, args, addresses, pids, attacker)
        out = stop_pid(attacker)
        attacker = None
        done = [json.loads(x) for x in out.splitlines() if x.startswith('{"event": "done"')]
        attack["attacker"] = {k: v for k, v in done[-1].items() if k != "event"} if done else None
        print(f"[{label}] attack: {json.dumps(compact(attack))}", flush=True)

        time.sleep(args.recovery_seconds)
        recovered_at = time.monotonic()
        try:
            master_after: int | None = group.wait_for_master(timeout_s=30)
        except (TimeoutError, RuntimeError):
            master_after = None
        recovery = {
            "after_s": args.recovery_seconds,
            "rss_mib": {role: rss_mib(pid) for role, pid in pids.items()},
            "master_slot": master_after,
            "master_found_after_s": round(time.monotonic() - recovered_at, 2),
            "replica_info": group.replica_info(),
            "alive": {
                "controller": node.running(),
                "broker": broker.running(),
            },
        }
        print(f"[{label}] after the attack: {json.dumps(recovery)}", flush=True)
        return {
            "code": str(code),
            "attacked_controller_node": leader,
            "baseline": baseline,
            "attack": attack,
            "after_attack": recovery,
        }
    finally:
        if attacker is not None:
            stop_pid(attacker)
        group.stop_all()
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def compact(w: dict[str, Any]) -> dict[str, Any]:
    """The numbers of a window worth a console line."""
    return {
        "send_p50_p99_ms": [w["send"]["ms"]["p50"], w["send"]["ms"]["p99"]],
        "send_ok": w["send"]["ms"]["count"],
        "send_timeouts": w["send"]["timeouts"],
        "route_p50_p99_ms": [w["route"]["ms"]["p50"], w["route"]["ms"]["p99"]],
        "route_ok": w["route"]["ms"]["count"],
        "route_timeouts": w["route"]["timeouts"],
        "cpu_pct": w["cpu_pct"],
        "rss_growth_mib": {r: v["growth"] for r, v in w["rss_mib"].items()},
        "rss_peak_mib": {r: v["peak"] for r, v in w["rss_mib"].items()},
        "epochs": w["group"]["master_epochs_seen"],
        "terms": w["group"]["raft_terms_seen"],
        "stopped_early": w["stopped_early"],
    }


def headline(side: dict[str, Any]) -> dict[str, Any]:
    b, a = side["baseline"], side["attack"]
    return {
        "baseline_send_p50_ms": b["send"]["ms"]["p50"],
        "baseline_send_p99_ms": b["send"]["ms"]["p99"],
        "attack_send_p50_ms": a["send"]["ms"]["p50"],
        "attack_send_p99_ms": a["send"]["ms"]["p99"],
        "attack_send_ok": a["send"]["ms"]["count"],
        "attack_send_timeouts": a["send"]["timeouts"],
        "attack_send_refusals": sum(a["send"]["refusals"].values()),
        "baseline_route_p50_ms": b["route"]["ms"]["p50"],
        "baseline_route_p99_ms": b["route"]["ms"]["p99"],
        "attack_route_p50_ms": a["route"]["ms"]["p50"],
        "attack_route_p99_ms": a["route"]["ms"]["p99"],
        "attack_route_ok": a["route"]["ms"]["count"],
        "attack_route_timeouts": a["route"]["timeouts"],
        "attack_controller_rss_growth_mib": a["rss_mib"]["controller"]["growth"],
        "attack_controller_rss_peak_mib": a["rss_mib"]["controller"]["peak"],
        "attack_broker_rss_growth_mib": a["rss_mib"]["broker"]["growth"],
        "attack_broker_rss_peak_mib": a["rss_mib"]["broker"]["peak"],
        "baseline_controller_cpu_pct": b["cpu_pct"].get("controller"),
        "attack_controller_cpu_pct": a["cpu_pct"].get("controller"),
        "baseline_broker_cpu_pct": b["cpu_pct"].get("broker"),
        "attack_broker_cpu_pct": a["cpu_pct"].get("broker"),
        "attack_elections": a["group"]["elections"],
        "attack_master_epochs": a["group"]["master_epochs_seen"],
        "attack_raft_terms": a["group"]["raft_terms_seen"],
        "attack_stopped_early": a["stopped_early"],
        "master_after_attack": side["after_attack"]["master_slot"] is not None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short run, < 60 s a side")
    parser.add_argument("--seconds", type=float, default=None, help="attack window (90; quick 20)")
    parser.add_argument(
        "--baseline-seconds", type=float, default=None, help="window with no attack (30; quick 8)"
    )
    parser.add_argument(
        "--recovery-seconds", type=float, default=None, help="after the attack (10; quick 3)"
    )
    parser.add_argument("--floods", type=int, default=8, help="never-reading floods per target")
    parser.add_argument("--promises", type=int, default=24, help="16 MiB promises per target")
    parser.add_argument("--send-rate", type=float, default=50.0, help="sends per second at most")
    parser.add_argument("--route-rate", type=float, default=20.0, help="route requests per s")
    parser.add_argument(
        "--rss-cap-mib", type=float, default=3072.0, help="stop the attack past this RSS"
    )
    parser.add_argument("--before-tree", type=Path, default=None, help="older checkout, run first")
    parser.add_argument("--dir", default=None, help="work directory (kept)")
    parser.add_argument("--no-write", action="store_true", help="do not write bench/results")
    # Internal: the attacker process.
    parser.add_argument("--attacker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--namesrv", help=argparse.SUPPRESS)
    parser.add_argument("--broker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seconds is None:
        args.seconds = 20.0 if args.quick else 90.0
    if args.attacker:
        return asyncio.run(attacker_main(args))
    if args.baseline_seconds is None:
        args.baseline_seconds = 8.0 if args.quick else 30.0
    if args.recovery_seconds is None:
        args.recovery_seconds = 3.0 if args.quick else 10.0
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-attacks-"))
    base.mkdir(parents=True, exist_ok=True)
    loop = loopback_tcp_ceiling(f"127.0.{BLOCK}.1", round_trips=500 if args.quick else 2000,
                                stream_bytes=(64 if args.quick else 256) << 20)  # fmt: skip
    print(f"ceiling: loopback TCP rtt p50 {loop.rtt_p50_us} us, p99 {loop.rtt_p99_us} us, "
          f"{loop.stream_mb_per_s:.0f} MB/s", flush=True)  # fmt: skip
    sides: dict[str, Any] = {}
    if args.before_tree is not None:
        sides["before"] = run_side("before", args.before_tree.resolve(), args, base)
    sides["after"] = run_side("after", None, args, base)
    result: dict[str, Any] = {
        "ceiling": {
            "loopback": loop.to_json(),
            **{
                f"{label}_baseline": {
                    k: v for k, v in headline(side).items() if k.startswith("baseline_")
                }
                for label, side in sides.items()
            },
        },
        "config": {
            "quick": args.quick,
            "attack_s": args.seconds,
            "baseline_s": args.baseline_seconds,
            "recovery_s": args.recovery_seconds,
            "floods_per_target": args.floods,
            "promises_per_target": args.promises,
            "promised_frame_bytes": PROMISED_BYTES,
            "promise_sent_bytes": PROMISE_SENT_BYTES,
            "send_rate_per_s": args.send_rate,
            "route_rate_per_s": args.route_rate,
            "request_timeout_s": REQUEST_TIMEOUT_S,
            "rss_cap_mib": args.rss_cap_mib,
            "replicas": 1,
            "block": f"127.0.{BLOCK}.0/24",
            "settings": DEFAULT_SETTINGS,
        },
        **{label: headline(side) for label, side in sides.items()},
        "sides": sides,
    }
    for label, side in sides.items():
        h = headline(side)
        print(
            f"{label}: send p50/p99 {h['baseline_send_p50_ms']}/{h['baseline_send_p99_ms']} ms "
            f"-> under attack {h['attack_send_p50_ms']}/{h['attack_send_p99_ms']} ms "
            f"({h['attack_send_ok']} ok, {h['attack_send_timeouts']} timeouts, "
            f"{h['attack_send_refusals']} refused); route p50/p99 {h['baseline_route_p50_ms']}/"
            f"{h['baseline_route_p99_ms']} -> {h['attack_route_p50_ms']}/"
            f"{h['attack_route_p99_ms']} ms ({h['attack_route_ok']} ok, "
            f"{h['attack_route_timeouts']} timeouts); controller RSS "
            f"+{h['attack_controller_rss_growth_mib']} MiB (peak "
            f"{h['attack_controller_rss_peak_mib']}), CPU {h['baseline_controller_cpu_pct']}% -> "
            f"{h['attack_controller_cpu_pct']}%; broker RSS +{h['attack_broker_rss_growth_mib']} "
            f"MiB (peak {h['attack_broker_rss_peak_mib']}), CPU {h['baseline_broker_cpu_pct']}% "
            f"-> {h['attack_broker_cpu_pct']}%; elections {h['attack_elections']} (epochs "
            f"{h['attack_master_epochs']}), Raft terms {h['attack_raft_terms']}; stopped early: "
            f"{h['attack_stopped_early']}; master after: {h['master_after_attack']}",
            flush=True,
        )
    if not args.no_write and not args.quick:
        print(f"wrote {write_result('attacks', result)}")
    print_last_line({k: v for k, v in result.items() if k != "sides"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
