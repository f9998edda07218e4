"""The faults of a chaos run (DESIGN.md §8 chaos/; issue "Chaos"), each
injected into a running local runtime and healed at the end of its window.

Every fault acts on real processes, files or packets: SIGKILL / SIGSTOP by
PID, policy-routing blackhole rules (`netfault`), a filler file in a
broker's own tmpfs, a commit-log tail cut from a stopped broker. A fault
that this machine cannot do says why (`unavailable_reason`) and is skipped.

Injecting and healing block (HTTP to the controllers, writing a filler file,
sleeping while slaves lag): the runner calls them in a worker thread, so the
clients on its event loop never wait for the tool itself — that wait would
be charged to the fault as unavailability.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from brokergroup_broker.store.health import DiskSpace
from brokergroup_cli.chaos import netfault
from brokergroup_cli.chaos.runtime import LocalRuntime, LocalRuntimeError
from brokergroup_cli.local.state import ChildKind, ChildRecord

KILL_MASTER = "kill-master"
KILL_SLAVE = "kill-slave"
KILL_CONTROLLER_LEADER = "kill-controller-leader"
KILL_MASTER_AND_CONTROLLER_LEADER = "kill-master-and-controller-leader"
PAUSE_MASTER = "pause-master"
PARTITION_MASTER = "partition-master"
RESTART_BROKER = "restart-broker-new-address"
FILL_MASTER_DISK = "fill-master-disk"
TRUNCATE_TAIL = "truncate-unflushed-tail"
LAGGING_KILL = "kill-master-and-controller-leader-with-lagging-slaves"

ALL_FAULTS = (
    KILL_MASTER,
    KILL_SLAVE,
    KILL_CONTROLLER_LEADER,
    KILL_MASTER_AND_CONTROLLER_LEADER,
    PAUSE_MASTER,
    PARTITION_MASTER,
    RESTART_BROKER,
    FILL_MASTER_DISK,
    TRUNCATE_TAIL,
    LAGGING_KILL,
)
#: How long the slaves lag (are stopped) before LAGGING_KILL kills the master.
LAG_S = 1.0

#: Per-broker disk for FILL_MASTER_DISK (a tmpfs of its own, so the machine's disk is safe).
BROKER_DISK_BYTES = 256 * 1024 * 1024
#: Most bytes a power loss takes from a broker's commit log tail (TRUNCATE_TAIL).
MAX_TAIL_CUT_BYTES = 64 * 1024


def unavailable_reason(fault: str) -> str | None:
    if fault in (PARTITION_MASTER, LAGGING_KILL):
        return netfault.unavailable_reason()
    if fault == FILL_MASTER_DISK and os.geteuid() != 0:
        return "filling a disk needs a tmpfs per broker (root)"
    return None


def needs_broker_disks(faults: tuple[str, ...]) -> bool:
    return FILL_MASTER_DISK in faults


def needs_async_flush(faults: tuple[str, ...]) -> bool:
    """The power-loss model only matters where the log is not fsynced per write."""
    return TRUNCATE_TAIL in faults


Heal = Callable[[], None]


@dataclass
class Injected:
    note: str
    heal: Heal


def _nothing() -> None:
    return None


def _master(rt: LocalRuntime) -> ChildRecord:
    info = rt.replica_info()
    if info is None or not info.get("masterAlive") or not info.get("masterAddress"):
        raise LocalRuntimeError("no live master to inject the fault into")
    return rt.broker_on(str(info["masterAddress"]).rpartition(":")[0])


def _slaves(rt: LocalRuntime, master: ChildRecord) -> list[ChildRecord]:
    return [c for c in rt.live_children(ChildKind.BROKER) if c.host != master.host]


def inject(fault: str, rt: LocalRuntime, rng: random.Random) -> Injected:
    """Start `fault` now; `heal()` ends it (kills need none: the supervisor restarts)."""
    if fault == KILL_MASTER:
        master = _master(rt)
        rt.signal(master, signal.SIGKILL)
        return Injected(f"SIGKILL master {master.name} on {master.host}", _nothing)
    if fault == KILL_SLAVE:
        slaves = _slaves(rt, _master(rt))
        if not slaves:
            raise LocalRuntimeError("no live slave")
        victim = rng.choice(slaves)
        rt.signal(victim, signal.SIGKILL)
        return Injected(f"SIGKILL slave {victim.name} on {victim.host}", _nothing)
    if fault in (KILL_CONTROLLER_LEADER, KILL_MASTER_AND_CONTROLLER_LEADER):
        leader = rt.controller_leader()
        if leader is None:
            raise LocalRuntimeError("no controller leader")
        notes = [f"SIGKILL controller leader {leader.name}"]
        if fault == KILL_MASTER_AND_CONTROLLER_LEADER:
            master = _master(rt)
            rt.signal(master, signal.SIGKILL)
            notes.append(f"SIGKILL master {master.name} on {master.host}")
        rt.signal(leader, signal.SIGKILL)
        return Injected(" + ".join(notes), _nothing)
    if fault == LAGGING_KILL:
        # RocketMQ 5.1.4 lost messages here (apache/rocketmq#7689): the slaves
        # fall behind, then the master and the controller leader die together.
        # The slaves are cut off by dropped packets (a stopped slave would find
        # everything in its socket buffer on resume: it would not lag).
        master = _master(rt)
        slaves = _slaves(rt, master)
        leader = rt.controller_leader()
        lag = netfault.LoopbackPartition()
        lag.cut([master.host], [s.host for s in slaves])
        try:
            time.sleep(LAG_S)
            rt.signal(master, signal.SIGKILL)
            if leader is not None:
                rt.signal(leader, signal.SIGKILL)
        except BaseException:
            lag.heal()
            raise

        def heal() -> None:
            # Only at the window's end: the killed process's kernel would
            # otherwise deliver its unsent bytes (a dead machine cannot).
            lag.heal()

        return Injected(
            f"slaves {', '.join(s.name for s in slaves)} cut off {LAG_S} s, then SIGKILL master "
            f"{master.name} + controller leader {leader.name if leader else '(none)'}",
            heal,
        )
    if fault == PAUSE_MASTER:
        master = _master(rt)
        rt.signal(master, signal.SIGSTOP)

        def resume() -> None:
            rt.signal(master, signal.SIGCONT)

        return Injected(f"SIGSTOP master {master.name} on {master.host}", resume)
    if fault == PARTITION_MASTER:
        master = _master(rt)
        others = [*rt.addresses.controller_hosts, *(s.host for s in _slaves(rt, master))]
        partition = netfault.LoopbackPartition()
        partition.cut([master.host], others)

        def heal() -> None:
            partition.heal()

        return Injected(f"partition master {master.host} from {', '.join(others)}", heal)
    if fault == RESTART_BROKER:
        victim = rng.choice(rt.live_children(ChildKind.BROKER))
        rt.signal(victim, signal.SIGTERM)  # graceful; the supervisor restarts it elsewhere
        return Injected(f"restart {victim.name} (was {victim.host}) on a new address", _nothing)
    if fault == FILL_MASTER_DISK:
        master = _master(rt)
        filler = fill_disk(rt.broker_dir(master.index), 0.97)

        def drain() -> None:
            filler.unlink(missing_ok=True)

        return Injected(f"fill the disk of master {master.name} to 97%", drain)
    if fault == TRUNCATE_TAIL:
        victim = rng.choice(rt.live_children(ChildKind.BROKER))
        rt.signal(victim, signal.SIGSTOP)  # freeze its writes, then lose the tail as power would
        cut = _cut_tail(rt.broker_dir(victim.index), rng)
        rt.signal(victim, signal.SIGKILL)
        rt.paused.discard((victim.pid or 0, victim.start_ticks))
        return Injected(
            f"power loss of {victim.name}: commit log tail cut by {cut} bytes", _nothing
        )
    raise ValueError(f"unknown fault {fault!r}; known: {', '.join(ALL_FAULTS)}")


def fill_disk(mount_point: Path, used_ratio: float, name: str = "chaos-filler") -> Path:
    """A filler file that takes the filesystem to `used_ratio` as the broker measures it
    (df's Use%: used over used + available, `brokergroup_broker.store.health`)."""
    space = DiskSpace.from_statvfs(os.statvfs(mount_point))
    filler = mount_point / name
    with open(filler, "wb") as out:
        out.write(b"\0" * max(0, int((space.used + space.usable) * used_ratio) - space.used))
    return filler


def _cut_tail(store_dir: Path, rng: random.Random) -> int:
    segments = sorted((store_dir / "commitlog").glob("[0-9]" * 20))
    written = [s for s in segments if s.stat().st_size > 0]
    if not written:
        return 0
    last = written[-1]
    size = last.stat().st_size
    cut = rng.randint(1, min(MAX_TAIL_CUT_BYTES, size))
    os.truncate(last, size - cut)
    return cut
