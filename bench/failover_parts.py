"""The failover benchmark's parts (bench/failover.py runs them): its settings
and targets, the continuous producer and its ledger, the observer of the
controller and brokers, per-trial records, the log timelines, the read-back
and the report."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _common import (  # noqa: E402
    loopback_tcp_ceiling,
    summarize,
)

from brokergroup_broker.core.config import BrokerConfig  # noqa: E402
from brokergroup_broker.protocol.client import (  # noqa: E402
    BrokerConnection,
    BrokerUnavailableError,
    ClientConfig,
    NoMasterError,
)
from brokergroup_broker.protocol.messages import BrokerError, ProduceMessage  # noqa: E402
from brokergroup_broker.protocol.producer import Producer  # noqa: E402
from brokergroup_cli.chaos.runtime import (  # noqa: E402
    BROKER_CLIENT_PORT as CLIENT_PORT,
)
from brokergroup_cli.chaos.runtime import Addresses, LocalRuntime  # noqa: E402
from brokergroup_cli.local.procs import is_alive  # noqa: E402
from brokergroup_controller.api import ReplicaInfo  # noqa: E402
from brokergroup_controller.client import ControllerClient, ControllerUnavailable  # noqa: E402
from brokergroup_controller.errors import ControllerError  # noqa: E402
from brokergroup_controller.server import ControllerConfig  # noqa: E402
from brokergroup_remoting.net import Credentials  # noqa: E402

CLUSTER = "DefaultCluster"  # local runtime defaults


BROKER_NAME = "broker-a"


TOPIC = "failover"


#: Addresses only (lane 2: controllers 127.0.1.201-203, brokers from
#: 127.0.1.210): every behaviour setting stays at its default.
ADDRESSES = Addresses(lane=2)


#: Concurrent senders of the continuous producer, and the pause between two
#: sends of one sender (keeps the final read-back small; a failover is timed
#: by the retrying sends, which do not pause).
SENDERS = 4


SEND_PAUSE_S = 0.002


BODY = b"x" * 100


#: The partition phase's producer uses the client's default request timeout;
#: it follows the controller's watch to the new master without waiting it out.
PARTITION_REQUEST_TIMEOUT_MS = ClientConfig().request_timeout_ms


HEALTHY_TIMEOUT_S = 90.0


FAILOVER_TIMEOUT_S = 30.0


DETECT_POLL_S = 0.01


TARGETS = {"p50_s": 1.0, "p99_s": 2.0, "partition_p99_s": 3.0}


#: The second runtime of a run: no acknowledgement held by one copy only.
MIN_ISR2_SETTINGS = ("minInSyncReplicas=2",)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Ack:
    queue_id: int
    queue_offset: int
    master_epoch: int
    address: str | None
    at: float  # monotonic


@dataclass
class Ledger:
    acked: dict[str, Ack] = field(default_factory=dict)
    uncertain: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    error_log: list[tuple[float, str, str]] = field(default_factory=list)
    first_ack: dict[int, tuple[float, str | None]] = field(default_factory=dict)
    """masterEpoch -> (monotonic time, broker address) of its first ack."""


class ContinuousProducer:
    """`SENDERS` tasks sending one new key at a time through one `Producer`."""

    def __init__(self, ledger: Ledger, producer: Producer, prefix: str) -> None:
        self.ledger = ledger
        self.producer = producer
        self.prefix = prefix
        self._n = 0
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.new_ack = asyncio.Event()

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._sender()) for _ in range(SENDERS)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait(self._tasks, timeout=60)
        for task in self._tasks:
            task.cancel()
        await self.producer.close()

    async def _sender(self) -> None:
        while not self._stop.is_set():
            key = f"{self.prefix}{self._n}"
            self._n += 1
            message = ProduceMessage(TOPIC, BODY, key=key)
            try:
                result = await self.producer.send(message)
            except (BrokerError, BrokerUnavailableError, NoMasterError, OSError) as exc:
                name = exc.code.name if isinstance(exc, BrokerError) else type(exc).__name__
                self.ledger.errors[name] += 1
                self.ledger.error_log.append((time.monotonic(), key, f"{name}: {exc}"[:300]))
                self.ledger.uncertain.add(key)
                await asyncio.sleep(0.05)
                continue
            now = time.monotonic()
            sent = result.messages[0]
            address = self.producer.master_address
            self.ledger.acked[key] = Ack(
                sent.queue_id, sent.queue_offset, result.master_epoch, address, now
            )
            self.ledger.first_ack.setdefault(result.master_epoch, (now, address))
            self.new_ack.set()
            await asyncio.sleep(SEND_PAUSE_S)


class Observer:
    def __init__(self, runtime: LocalRuntime, session: aiohttp.ClientSession) -> None:
        self.runtime = runtime
        self.session = session
        # Reads need a credential (DESIGN.md §11): the runtime's admin token.
        self.controller = ControllerClient(
            runtime.addresses.api_addresses, runtime.token(), request_timeout_s=1.0
        )

    async def close(self) -> None:
        await self.controller.close()

    async def replica_info(self) -> ReplicaInfo | None:
        try:
            return await self.controller.replica_info(CLUSTER, BROKER_NAME)
        except (ControllerUnavailable, ControllerError):
            return None

    async def broker_status(self, host: str) -> dict[str, Any] | None:
        try:
            async with self.session.get(
                f"http://{host}:{CLIENT_PORT + 2}/v1/status",
                headers={"Authorization": f"Bearer {self.runtime.broker_credential()}"},
                timeout=aiohttp.ClientTimeout(total=0.5),
            ) as response:
                if response.status != 200:
                    return None
                body = await response.json()
                return body if isinstance(body, dict) else None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None

    async def healthy(self) -> tuple[ReplicaInfo | None, str]:
        """The group is healthy, or why not."""
        info = await self.replica_info()
        if info is None:
            return None, "no controller answer"
        if info.live_master_broker_id is None:
            return None, "no live master"
        alive = {b.broker_id for b in info.brokers if b.alive}
        if len(alive) < self.runtime.brokers:
            return None, f"alive brokers {sorted(alive)}"
        if len(info.sync_state_set) < self.runtime.brokers:
            return None, f"SyncStateSet {sorted(info.sync_state_set)}"
        children = [c for c in self.runtime.state().brokers if is_alive(c.pid, c.start_ticks)]
        if len(children) < self.runtime.brokers:
            return None, "a broker process is not running"
        for child in children:
            status = await self.broker_status(child.host)
            if status is None:
                return None, f"no status from {child.host}"
            if status.get("masterEpoch") != info.master_epoch:
                return None, f"{child.host} at masterEpoch {status.get('masterEpoch')}"
            if status.get("brokerId") == info.master_broker_id:
                if status.get("role") != "MASTER" or (status.get("leaseRemainingMs") or 0) <= 0:
                    return None, f"master {child.host} role {status.get('role')} without lease"
            elif status.get("role") != "SLAVE":
                return None, f"{child.host} role {status.get('role')}"
        return info, "healthy"

    async def wait_healthy(self, ledger: Ledger) -> ReplicaInfo:
        """Healthy, and the producer has an ack at the current masterEpoch."""
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        why = ""
        while time.monotonic() < deadline:
            info, why = await self.healthy()
            if info is not None and info.master_epoch in ledger.first_ack:
                return info
            if info is not None:
                why = "no ack at the current masterEpoch yet"
            await asyncio.sleep(0.05)
        raise TimeoutError(f"group not healthy after {HEALTHY_TIMEOUT_S} s: {why}")

    async def wait_two_copies(self, old_epoch: int) -> float:
        """When the new master's SyncStateSet has two members again: an
        expansion needs the member to hold everything confirmed, so from then
        every acknowledged write is on at least two replicas."""
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        while time.monotonic() < deadline:
            info = await self.replica_info()
            if info is not None and info.master_epoch > old_epoch and len(info.sync_state_set) >= 2:
                return time.monotonic()
            await asyncio.sleep(DETECT_POLL_S)
        raise TimeoutError(f"SyncStateSet not back to two members {HEALTHY_TIMEOUT_S} s after")

    async def wait_new_master(self, old_epoch: int, old_id: int) -> tuple[float, ReplicaInfo]:
        deadline = time.monotonic() + FAILOVER_TIMEOUT_S
        while time.monotonic() < deadline:
            info = await self.replica_info()
            if (
                info is not None
                and info.master_epoch > old_epoch
                and info.live_master_broker_id not in (None, old_id)
            ):
                return time.monotonic(), info
            await asyncio.sleep(DETECT_POLL_S)
        raise TimeoutError(f"controller shows no new master {FAILOVER_TIMEOUT_S} s after the kill")


async def wait_first_ack(
    ledger: Ledger, old_epoch: int, old_address: str, timeout_s: float
) -> tuple[float, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for epoch, (at, address) in sorted(ledger.first_ack.items()):
            if epoch > old_epoch and address != old_address:
                return at, epoch
        await asyncio.sleep(0.005)
    raise TimeoutError(f"no acknowledged write on a new master {timeout_s} s after")


@dataclass
class Trial:
    kind: str  # "kill" or "partition"
    index: int
    old_master: int
    old_address: str
    old_epoch: int
    kill_wall: float
    new_master: int | None = None
    new_epoch: int | None = None
    detection_s: float | None = None
    failover_s: float | None = None
    two_copies_s: float | None = None
    rejoined_s: float | None = None
    error: str | None = None
    timeline: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            k: (round(v, 4) if isinstance(v, float) else v)
            for k, v in self.__dict__.items()
            if k != "timeline"
        } | {"timeline": {k: None if v is None else round(v, 4) for k, v in self.timeline.items()}}


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f} s"


_TS = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _log_events(path: Path) -> list[tuple[float, str]]:
    out: list[tuple[float, str]] = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        m = _TS.match(line)
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((when, line))
    return out


def add_timelines(root: Path, trials: list[Trial]) -> None:
    """Per trial, seconds from the signal to each step (first matching log line)."""
    logs = root / "logs"
    supervisor = _log_events(logs / "supervisor.log")
    controllers = sorted(e for p in logs.glob("controller-*.log") for e in _log_events(p))
    brokers = sorted(e for p in logs.glob("broker-*.log") for e in _log_events(p))

    def first(
        events: list[tuple[float, str]], after: float, until: float, needle: str
    ) -> float | None:
        for when, line in events:
            if after - 0.002 <= when < until and needle in line:
                return round(when - after, 4)
        return None

    for n, t in enumerate(trials):
        w = t.kill_wall
        # Only lines before the next trial's signal belong to this one.
        until = trials[n + 1].kill_wall if n + 1 < len(trials) else w + FAILOVER_TIMEOUT_S
        if t.kind == "kill":
            t.timeline["supervisor_saw_exit"] = first(supervisor, w, until, "exited with code")
            t.timeline["supervisor_reported_inactive"] = first(supervisor, w, until, "inactive: ok")
            t.timeline["controller_marked_inactive"] = first(
                controllers, w, until, "reported inactive"
            )
        else:
            # Absent when a slave's ElectMaster request (it saw the master
            # not alive in a heartbeat answer) came before the controller's tick.
            t.timeline["controller_heartbeat_timeout"] = first(
                controllers, w, until, "is inactive ("
            )
        t.timeline["controller_elected"] = first(
            controllers, w, until, f"(masterEpoch was {t.old_epoch})"
        )
        if t.new_epoch is not None:
            t.timeline["new_master_took_role"] = first(
                brokers, w, until, f"is MASTER at masterEpoch {t.new_epoch}"
            )
        t.timeline["controller_shows_new_master_poll"] = t.detection_s
        t.timeline["first_ack"] = t.failover_s


async def read_back(
    address: str, credentials: Credentials | None = None
) -> tuple[Counter[str], dict[str, set[tuple[int, int]]]]:
    conn = await BrokerConnection.connect(address, credentials=credentials)
    counts: Counter[str] = Counter()
    where: dict[str, set[tuple[int, int]]] = {}
    try:
        queues = await conn.topic_queue_count(TOPIC)
        for queue_id in range(queues):
            low, high = await conn.query_offsets(TOPIC, queue_id)
            offset = low
            while offset < high:
                result = await conn.pull(TOPIC, queue_id, offset, 256)
                if not result.messages:
                    break
                for m in result.messages:
                    key = m.properties.get("KEYS", "")
                    counts[key] += 1
                    where.setdefault(key, set()).add((m.queue_id, m.queue_offset))
                offset = result.next_queue_offset
    finally:
        await conn.close()
    return counts, where


def ceiling() -> dict[str, Any]:
    broker, client = BrokerConfig(), ClientConfig()
    controller = ControllerConfig(node_id=1, peers=("127.0.0.1:9880",), data_dir="")
    loop = loopback_tcp_ceiling()
    return {
        "heartbeatIntervalMs": broker.heartbeat_interval_ms,
        "heartbeatTimeoutMs": broker.heartbeat_timeout_ms,
        "masterLeaseMs": broker.master_lease_ms,
        "controllerLivenessTickMs": controller.liveness_tick_ms,
        "raftMinTimeoutMs": controller.raft_min_timeout_ms,
        "raftMaxTimeoutMs": controller.raft_max_timeout_ms,
        "appendEntriesPeriodMs": controller.append_entries_period_ms,
        "supervisorRestartInitialDelayMs": 200,
        "clientRetryInitialBackoffMs": client.retry_initial_backoff_ms,
        "clientRetryMaxBackoffMs": client.retry_max_backoff_ms,
        "clientRequestTimeoutMs": client.request_timeout_ms,
        "loopback": loop.to_json(),
    }


def report(args: argparse.Namespace, out: dict[str, Any], ceil: dict[str, Any]) -> dict[str, Any]:
    ledger: Ledger = out["ledger"]
    trials: list[Trial] = out["trials"]
    kills = [t for t in trials if t.kind == "kill"]
    parts = [t for t in trials if t.kind == "partition"]
    failover = summarize([t.failover_s for t in kills if t.failover_s is not None])
    two_copies = summarize([t.two_copies_s for t in kills if t.two_copies_s is not None])
    detection = summarize([t.detection_s for t in kills if t.detection_s is not None])
    reconnect = summarize(
        [t.failover_s - t.detection_s for t in kills if t.failover_s and t.detection_s]
    )
    p_failover = summarize([t.failover_s for t in parts if t.failover_s is not None])
    p_detection = summarize([t.detection_s for t in parts if t.detection_s is not None])
    steps = sorted({k for t in kills for k in t.timeline})
    timeline = {
        k: summarize([v for t in kills if (v := t.timeline.get(k)) is not None]) for k in steps
    }
    p_steps = sorted({k for t in parts for k in t.timeline})
    p_timeline = {
        k: summarize([v for t in parts if (v := t.timeline.get(k)) is not None]) for k in p_steps
    }
    summary: dict[str, Any] = {
        "benchmark": "failover",
        "quick": args.quick,
        "brokers": args.brokers,
        "kills": len(kills),
        "kills_failed": sum(1 for t in kills if t.failover_s is None),
        "p50_s": failover["p50"],
        "p99_s": failover["p99"],
        "max_s": failover["max"],
        "detection_p50_s": detection["p50"],
        "detection_p99_s": detection["p99"],
        "detection_max_s": detection["max"],
        "two_copies_p50_s": two_copies["p50"],
        "two_copies_p99_s": two_copies["p99"],
        "acked": len(ledger.acked),
        "acked_lost": len(out["lost"]),
        "duplicates": out["duplicates"],
        "misplaced": len(out["misplaced"]),
        "partition": {
            "reps": len(parts),
            "client_request_timeout_ms": args.partition_request_timeout_ms,
            "failed": sum(1 for t in parts if t.failover_s is None),
            "p50_s": p_failover["p50"],
            "p99_s": p_failover["p99"],
            "max_s": p_failover["max"],
            "detection_p50_s": p_detection["p50"],
            "rejoined_as_slave": all(t.rejoined_s is not None for t in parts),
        },
    }
    met = {
        "p50": failover["p50"] is not None and failover["p50"] <= TARGETS["p50_s"],
        "p99": failover["p99"] is not None and failover["p99"] <= TARGETS["p99_s"],
        "acked_lost": not out["lost"],
        "partition_p99": not parts
        or (p_failover["p99"] is not None and p_failover["p99"] <= TARGETS["partition_p99_s"]),
    }
    summary["targets_met"] = all(met.values())
    full = {
        **summary,
        "targets": TARGETS,
        "targets_detail": met,
        "failover_s": failover,
        "detection_s": detection,
        "two_copies_s": two_copies,
        "reconnect_after_detection_s": reconnect,
        "timeline_s": timeline,
        "partition_detail": {
            "failover_s": p_failover,
            "detection_s": p_detection,
            "timeline_s": p_timeline,
        },
        "producer": {
            "senders": SENDERS,
            "errors": dict(ledger.errors),
            "uncertain_keys": len(ledger.uncertain),
            "read_back_records": out["read_back"],
            "duplicates_of_uncertain_keys": out["duplicates_uncertain"],
            "unknown_keys": len(out["unknown"]),
            "lost_sample": out["lost"][:20],
            "misplaced_sample": out["misplaced"][:20],
            "error_sample": [e[2] for e in ledger.error_log[:10]],
        },
        "ceiling": ceil,
        "settings": {
            "localSettings": list(ADDRESSES.settings),
            "broker": "defaults",
            "controller": "defaults",
            "client": "defaults (partition phase: requestTimeoutMs "
            f"{args.partition_request_timeout_ms})",
        },
        "seed": args.seed,
        "trials": [t.to_json() for t in trials],
    }
    return {"summary": summary, "full": full}
