"""Route-query latency of the local runtime's name server, idle, under produce load and beside
CPU burners, against the floor the machine alone explains (a trivial asyncio echo server).

    flock /tmp/bg-heavy.lock .venv/bin/python bench/namesrv_route.py            # 300 a phase
    flock /tmp/bg-heavy.lock .venv/bin/python bench/namesrv_route.py --quick --java-runs 1
    .venv/bin/python bench/namesrv_route.py --burners 6 --queries 500 --dir /tmp/nr --keep

Why: in CI (load average 10-12 on 2 cores) a stock RocketMQ client's first send spent its
3 s budget on GET_ROUTEINFO_BY_TOPIC (code 105), answered about 2 s after connect. The name
server runs inside each controller process (controller/brokergroup_controller/namesrv), on the
controller's event loop beside its HTTP API and its Raft thread; this measures whether it is
slower than any asyncio server on the same starved machine.

`brokergroup local up` (lane 2 of chaos/runtime.Addresses: three controllers, three brokers)
in a temp directory, every setting at its default. Each round of a phase makes four probes,
interleaved so they see the same load, over the three name server nodes in turn:
- namesrv_connect: TCP connect + a signed GET_ROUTEINFO_BY_TOPIC for TBW102 (every broker
  registers it) + close: what a client's first lookup costs;
- namesrv_warm: the same request on a connection kept open (connect excluded);
- echo_connect / echo_warm: connect + a 64-byte echo + close, and the echo alone, against a
  trivial asyncio echo server in a process of its own (the floor: same machine, same client,
  same load, no name server).

Beside the probes, each phase starts `--java-runs` rounds of fresh stock Java clients
(bench/java/RouteProbe.java, RocketMQ client 5.3.1 signing with the runtime's client pair):
the JVM's first route lookup (its connect included, as in CI) and 20 more on the same
connection, four ways a round (JAVA_KINDS): our three nodes and a routed topic (the CI case);
the same after the client's server-less cold paths (HMAC signature, header encoding, route
JSON decoding) ran first; one of our nodes and a topic no one routes; and RocketMQ 5.3.1's
own name server (NamesrvStartup on 127.0.62.1, no brokers) with that topic. The last two do
the same client work (TOPIC_NOT_EXIST) against our name server and RocketMQ's.

Phases: idle; produce (`brokergroup produce` sending 1 KiB batches to the master, started
and stopped by PID); burn (`--burners` processes of `while True: pass`, default 6: load ~8
on 2 cores, started and killed by PID); burn+produce (both, the CI case). The client doing
the probing is starved as much as either server, so the floor carries the client's share.

Prints the loopback TCP ceiling measured in the same run. Writes
bench/results/namesrv_route.json; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools" / "rocketmq"))

from _common import loopback_tcp_ceiling, print_last_line, summarize, write_result  # noqa: E402
from _cpu import TICKS_PER_S, parse_proc_stat  # noqa: E402
from stock_client import (  # noqa: E402
    CLIENT_JVM,
    SERVER_JVM,
    compile_sources,
    missing,
    rocketmq_home,
)

TOPIC = "TBW102"  # every broker of the local runtime registers it (autoCreateTopicEnable)
LOAD_TOPIC = "RouteBenchLoad"
ECHO_BYTES = 64
QUERY_TIMEOUT_S = 15.0
LANE = 2
NAMESRV_PORT = 9876
BURN = "while True: pass"
PROBES = ("namesrv_connect", "namesrv_warm", "echo_connect", "echo_warm")
JAVA_PROBE = Path(__file__).resolve().parent / "java" / "RouteProbe.java"
JAVA_WARM = 20


# ---- a fresh stock Java client's first lookup -------------------------------------------------


#: A topic no name server routes: TOPIC_NOT_EXIST from ours and from RocketMQ's alike, so the
#: client does the same work against both.
NO_ROUTE_TOPIC = "RouteProbeNoSuchTopic"
#: RocketMQ's own name server, for the Java client's floor (a block no other run uses).
STOCK_NAMESRV = "127.0.62.1:9876"
#: What each fresh JVM asks (label, which name server, topic, prewarm): `ours` is the CI case
#: (the three nodes, a routed topic); `ours_prewarmed` the same after the client's server-less
#: cold paths (RouteProbe.prewarm); `ours_one_no_route` and `stock_no_route` the same client
#: work (one address, TOPIC_NOT_EXIST) against our node and against RocketMQ's name server.
JAVA_KINDS = (
    ("ours", "ours", TOPIC, False),
    ("ours_prewarmed", "ours", TOPIC, True),
    ("ours_one_no_route", "ours_one", NO_ROUTE_TOPIC, False),
    ("stock_no_route", "stock", NO_ROUTE_TOPIC, False),
)


class JavaProbe:
    """bench/java/RouteProbe.java: a fresh JVM's producer start, first route lookup (its
    connect included) and `JAVA_WARM` more on the same connection. `ours`: all three nodes
    (the namesrv list a stock client is given); `stock`: RocketMQ 5.3's own name server,
    which answers a topic without a route as ours does (TOPIC_NOT_EXIST)."""

    def __init__(
        self, namesrvs: dict[str, str], access_key: str, secret_key: str, work: Path
    ) -> None:
        self.classes = compile_sources("routeprobe", [JAVA_PROBE], quiet=True)
        self.namesrvs, self.access_key, self.secret_key = namesrvs, access_key, secret_key
        self.work = work
        work.mkdir(parents=True, exist_ok=True)

    def once(self, namesrv: str, topic: str, prewarm: bool) -> dict[str, Any]:
        lib = rocketmq_home() / "lib"
        command = [
            *("java", *CLIENT_JVM, f"-Duser.home={self.work}"),
            *("-cp", f"{self.classes}:{lib}/*", "RouteProbe"),
            *(namesrv, topic, self.access_key, self.secret_key, str(JAVA_WARM)),
            *(("prewarm",) if prewarm else ()),
        ]
        t0 = time.perf_counter()
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=120, cwd=self.work, check=False
            )
        except subprocess.TimeoutExpired:
            return {"error": "timed out after 120 s", "wallMs": 120_000.0}
        wall_ms = (time.perf_counter() - t0) * 1000
        lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
        if not lines:
            return {"error": (done.stderr or done.stdout).strip()[-300:], "wallMs": wall_ms}
        result: dict[str, Any] = json.loads(lines[-1])
        result["wallMs"] = wall_ms
        return result

    def runs(self, count: int) -> dict[str, list[dict[str, Any]]]:
        """`count` rounds, each kind once a round (interleaved: the same load for each)."""
        out: dict[str, list[dict[str, Any]]] = {label: [] for label, *_ in JAVA_KINDS}
        for _ in range(count):
            for label, server, topic, prewarm in JAVA_KINDS:
                if server in self.namesrvs:
                    out[label].append(self.once(self.namesrvs[server], topic, prewarm))
        return {label: runs for label, runs in out.items() if runs}


def java_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    warm = [ms for r in ok for ms in r["warmMs"]]
    out: dict[str, Any] = {
        "runs": len(runs),
        "firstLookupMs": [round(r["firstLookupMs"], 1) for r in ok],
        "firstFound": [r["firstFound"] for r in ok],
        "prewarmMs": [round(r["prewarmMs"], 1) for r in ok],
        "producerStartMs": [round(r["startMs"], 1) for r in ok],
        "jvmToMainMs": [r["jvmToMainMs"] for r in ok],
        "wallMs": [round(r["wallMs"]) for r in ok],
        "warmLookupMs": summarize(warm, 3),
    }
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        out["errors"] = errors
    return out


def start_stock_namesrv(work: Path) -> subprocess.Popen[bytes]:
    """RocketMQ 5.3.1's NamesrvStartup on STOCK_NAMESRV (no brokers: no routes)."""
    host, port = STOCK_NAMESRV.split(":")
    work.mkdir(parents=True, exist_ok=True)
    conf = work / "namesrv.conf"
    conf.write_text(f"listenPort={port}\nbindAddress={host}\n")
    lib = rocketmq_home() / "server" / "lib"
    with open(work / "namesrv.out", "ab") as out:
        proc = subprocess.Popen(
            [
                *("java", *SERVER_JVM, f"-Duser.home={work}", "-cp", f"{lib}/*"),
                *("org.apache.rocketmq.namesrv.NamesrvStartup", "-c", str(conf)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=work,
            env={**os.environ, "ROCKETMQ_HOME": str(work)},
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 1):
            return proc
        time.sleep(0.5)
    stop([proc])
    raise RuntimeError(f"RocketMQ's name server did not listen on {STOCK_NAMESRV}")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- the floor: a trivial asyncio echo server in a process of its own -----------------------


async def _echo_serve() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.readexactly(ECHO_BYTES)
                writer.write(data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def echo_main() -> int:
    asyncio.run(_echo_serve())
    return 0


def start_echo() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--echo-server"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"127.0.0.1:{port}"


# ---- probes -----------------------------------------------------------------------------------


class Prober:
    """The four probes of one round; latencies in ms, failures by reason."""

    def __init__(self, nodes: list[str], echo: str, credentials: Any) -> None:
        self.nodes = nodes
        self.echo = echo
        self.credentials = credentials
        self._warm: dict[str, Any] = {}
        self._echo_warm: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _route(self, client: Any) -> None:
        from brokergroup_remoting import RequestCode, ResponseCode
        from brokergroup_remoting.command import request

        answer = await client.invoke(
            request(RequestCode.GET_ROUTEINFO_BY_TOPIC, 0, {"topic": TOPIC}), QUERY_TIMEOUT_S
        )
        if answer.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"route query answered {answer.code}: {answer.remark}")

    async def namesrv_connect(self, node: str) -> None:
        from brokergroup_remoting.net import RemotingClient

        client = await RemotingClient.connect(node, credentials=self.credentials)
        try:
            await self._route(client)
        finally:
            await client.close()

    async def namesrv_warm(self, node: str) -> None:
        from brokergroup_remoting.net import RemotingClient

        client = self._warm.get(node)
        if client is None or client.closed:
            client = await RemotingClient.connect(node, credentials=self.credentials)
            await self._route(client)  # the connect is not this probe's
            self._warm[node] = client
        await self._route(client)

    async def echo_connect(self, _node: str) -> None:
        host, port = self.echo.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            await self._echo(reader, writer)
        finally:
            writer.close()
            await writer.wait_closed()

    async def echo_warm(self, _node: str) -> None:
        if self._echo_warm is None:
            host, port = self.echo.rsplit(":", 1)
            self._echo_warm = await asyncio.open_connection(host, int(port))
        await self._echo(*self._echo_warm)

    async def _echo(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"x" * ECHO_BYTES)
        await writer.drain()
        await reader.readexactly(ECHO_BYTES)

    async def close(self) -> None:
        for client in self._warm.values():
            await client.close()
        if self._echo_warm is not None:
            self._echo_warm[1].close()

    async def phase(self, rounds: int, pause_s: float) -> dict[str, Any]:
        latencies: dict[str, list[float]] = {p: [] for p in PROBES}
        failures: dict[str, dict[str, int]] = {p: {} for p in PROBES}
        for i in range(rounds):
            node = self.nodes[i % len(self.nodes)]
            for probe in PROBES:
                t0 = time.perf_counter()
                try:
                    await asyncio.wait_for(getattr(self, probe)(node), QUERY_TIMEOUT_S)
                except Exception as exc:  # counted, the phase goes on
                    reason = type(exc).__name__
                    failures[probe][reason] = failures[probe].get(reason, 0) + 1
                    if probe == "namesrv_warm":
                        self._warm.pop(node, None)
                    continue
                latencies[probe].append((time.perf_counter() - t0) * 1000)
            await asyncio.sleep(pause_s)
        out: dict[str, Any] = {p: summarize(latencies[p], 3) for p in PROBES}
        for p in PROBES:
            # The outliers themselves, and how many passed 100 ms.
            out[p]["worst"] = [round(x, 1) for x in sorted(latencies[p])[-5:][::-1]]
            out[p]["over100ms"] = sum(1 for x in latencies[p] if x > 100)
            if failures[p]:
                out[p]["failures"] = failures[p]
        return out


# ---- load and CPU ----------------------------------------------------------------------------


def cpu_ticks(pid: int) -> int | None:
    try:
        return parse_proc_stat(Path(f"/proc/{pid}/stat").read_text()).cpu_ticks
    except (OSError, ValueError):
        return None


def start_burners(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(count)]


def stop(procs: list[subprocess.Popen[Any]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def start_produce(runtime: Any) -> subprocess.Popen[bytes]:
    """`brokergroup produce` to the runtime's master, far more than a phase sends."""
    root = runtime.root
    command = [
        *(str(ROOT / ".venv" / "bin" / "brokergroup"), "produce"),
        *("--topic", LOAD_TOPIC, "--count", "100000000", "--size", "1024"),
        *("--batch", "16", "--in-flight", "4"),
        *("--controller-addresses", ",".join(runtime.addresses.api_addresses)),
        *("--controller-token-file", str(root / "token")),
        *("--key-file", str(root / "client-keys.json")),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from brokergroup_cli.chaos.runtime import Addresses, LocalRuntime
    from brokergroup_cli.local.state import ChildKind

    ceiling = loopback_tcp_ceiling(round_trips=2000, stream_bytes=64 << 20)
    log(
        f"ceiling: loopback TCP RTT p50 {ceiling.rtt_p50_us:.1f} us, "
        f"p99 {ceiling.rtt_p99_us:.1f} us, {ceiling.stream_mb_per_s:.0f} MB/s"
    )
    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="namesrv-route-"))
    runtime = LocalRuntime(work / "local", Addresses(lane=LANE))
    echo, echo_address = start_echo()
    extra: list[subprocess.Popen[Any]] = [echo]
    phases: dict[str, Any] = {}
    try:
        log(f"local up in {runtime.root}")
        runtime.up()
        credentials = runtime.client_pair()
        nodes = [f"{h}:{NAMESRV_PORT}" for h in runtime.addresses.controller_hosts]
        controllers = {c.pid or 0: c.index for c in runtime.live_children(ChildKind.CONTROLLER)}
        java = None
        if args.java_runs:
            reason = missing()
            if reason is not None:
                log(f"no Java probe: {reason}")
            else:
                namesrvs = {"ours": ";".join(nodes), "ours_one": nodes[0]}
                if missing(servers=True) is None:
                    extra.append(start_stock_namesrv(work / "stock-namesrv"))
                    namesrvs["stock"] = STOCK_NAMESRV
                java = JavaProbe(
                    namesrvs, credentials.access_key, credentials.secret_key, work / "java"
                )
        phases = asyncio.run(
            phases_of(args, runtime, nodes, echo_address, credentials, controllers, java)
        )
    finally:
        stop(extra)
        log("local down")
        runtime.down()
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "ceiling": {"loopback": ceiling.to_json()},
        "settings": {
            "queriesPerPhase": args.queries,
            "pauseMs": args.pause_ms,
            "burners": args.burners,
            "javaRuns": args.java_runs,
            "phases": args.phases or "all",
            "topic": TOPIC,
            "nodes": 3,
        },
        "phases": phases,
        "ratios": ratios(phases),
    }


async def wait_routed(prober: Prober, deadline_s: float) -> None:
    """Until every node answers TBW102's route (brokers register at start-up)."""
    deadline = time.monotonic() + deadline_s
    for node in prober.nodes:
        while True:
            try:
                await prober.namesrv_connect(node)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)


async def phases_of(
    args: argparse.Namespace,
    runtime: Any,
    nodes: list[str],
    echo: str,
    credentials: Any,
    controllers: dict[int, int],
    java: JavaProbe | None,
) -> dict[str, Any]:
    prober = Prober(nodes, echo, credentials)
    await wait_routed(prober, 120)
    out: dict[str, Any] = {}
    plan = [("idle", False, 0), ("produce", True, 0)]
    if args.burners:
        plan += [("burn", False, args.burners), ("burn+produce", True, args.burners)]
    if args.phases:
        plan = [step for step in plan if step[0] in args.phases.split(",")]
    try:
        for name, produce, burners in plan:
            load: list[subprocess.Popen[Any]] = start_burners(burners)
            if produce:
                load.append(start_produce(runtime))
            try:
                await asyncio.sleep(args.settle_s if load else 0)
                before = {pid: cpu_ticks(pid) for pid in controllers}
                t0 = time.monotonic()
                # The JVMs run beside the probes: the probes see the server while they do.
                jvms = (
                    None
                    if java is None
                    else asyncio.create_task(asyncio.to_thread(java.runs, args.java_runs))
                )
                result = await prober.phase(args.queries, args.pause_ms / 1000)
                if jvms is not None:
                    kinds = await jvms
                    result["javaClient"] = {k: java_summary(v) for k, v in kinds.items()}
                elapsed = time.monotonic() - t0
                after = {pid: cpu_ticks(pid) for pid in controllers}
                result["loadAverage1m"] = round(os.getloadavg()[0], 2)
                result["seconds"] = round(elapsed, 1)
                result["controllerCores"] = {
                    f"controller-{controllers[pid]}": round(
                        ((after[pid] or 0) - (before[pid] or 0)) / TICKS_PER_S / elapsed, 3
                    )
                    for pid in controllers
                    if before[pid] is not None and after[pid] is not None
                }
                if produce and load[-1].poll() is not None:
                    result["produceExited"] = load[-1].returncode
            finally:
                stop(load)
            out[name] = result
            log(f"{name}: {line_of(result)}")
            await asyncio.sleep(args.settle_s)
    finally:
        await prober.close()
    return out


def line_of(result: dict[str, Any]) -> str:
    parts = [
        f"{p} p50/p99/max {result[p]['p50']}/{result[p]['p99']}/{result[p]['max']} ms"
        for p in PROBES
    ]
    for kind, java in result.get("javaClient", {}).items():
        warm = java["warmLookupMs"]
        parts.append(
            f"java {kind}: first lookup {java['firstLookupMs']} ms, warm p50/max "
            f"{warm['p50']}/{warm['max']} ms"
        )
    return "; ".join(parts) + f" (load {result['loadAverage1m']})"


def ratios(phases: dict[str, Any]) -> dict[str, Any]:
    """Name server over echo floor, per phase and statistic (connect included and not)."""
    out: dict[str, Any] = {}
    for name, result in phases.items():
        row: dict[str, Any] = {}
        for kind in ("connect", "warm"):
            ns, floor = result[f"namesrv_{kind}"], result[f"echo_{kind}"]
            for stat in ("p50", "p99", "max"):
                if ns.get(stat) and floor.get(stat):
                    row[f"{kind}_{stat}"] = round(ns[stat] / floor[stat], 2)
        out[name] = row
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="60 rounds a phase")
    parser.add_argument("--queries", type=int, default=300, help="rounds per phase")
    parser.add_argument("--pause-ms", type=float, default=20.0, help="pause between rounds")
    parser.add_argument("--burners", type=int, default=6, help="CPU burners (0: no burn)")
    parser.add_argument("--settle-s", type=float, default=3.0, help="load on before a phase")
    parser.add_argument(
        "--java-runs", type=int, default=3, help="fresh stock Java clients a phase (0: none)"
    )
    parser.add_argument(
        "--phases", help="only these phases (comma-separated: idle,produce,burn,burn+produce)"
    )
    parser.add_argument("--dir", help="runtime directory (default: a temp one, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the temp directory")
    parser.add_argument("--out", default="namesrv_route", help="bench/results/<OUT>.json")
    parser.add_argument("--echo-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        return echo_main()
    if args.quick:
        args.queries = 60
    data = run(args)
    path = write_result(args.out, data)
    log(f"wrote {path}")
    print_last_line(
        {
            "ceilingRttP50Us": data["ceiling"]["loopback"]["rtt_p50_us"],
            **{
                f"{name}.{p}.p99": r[p]["p99"]
                for name, r in data["phases"].items()
                for p in ("namesrv_connect", "echo_connect")
            },
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
