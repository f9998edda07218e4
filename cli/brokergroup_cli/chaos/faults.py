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
from brokergroup_cli.chaos.targets.base import Node, NodeKind, Target, TargetError
from brokergroup_cli.local.procs import wait_gone

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
# OpenChaos's faults (issue 37): a bridge, a majorities ring, a lossy link, a suspended leader.
PARTITION_BRIDGE = "partition-bridge"
PARTITION_RING = "partition-majorities-ring"
LOSSY_LINK = "packet-loss-master-link"
PAUSE_CONTROLLER_LEADER = "pause-controller-leader"
#: Composite faults `A+B+...`: each part injected in order and all healed together at the
#: window's end; a `kill-master` part crashes the master (as it was when the window
#: began) `COMPOSE_KILL_AFTER_S` after the parts before it (negative controls and
#: scenarios: a failover under the fault) as a machine crashes (`crash_master`): what it
#: had not sent by then reaches nobody.
THEN_KILL_MASTER = "+kill-master"
COMPOSE_KILL_AFTER_S = 1.5
#: Longest wait for a SIGKILLed process to be gone before its sockets are destroyed.
DEATH_TIMEOUT_S = 5.0

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
    PARTITION_BRIDGE,
    PARTITION_RING,
    LOSSY_LINK,
    PAUSE_CONTROLLER_LEADER,
)
# Faults only the named scenarios use (chaos.scenarios: RocketMQ's controller-mode defects).
#: The master and one controller cut off from the rest, clients still reaching the master
#: (apache/rocketmq#7017: one data centre isolated).
ISOLATE_MASTER_ROOM = "isolate-master-with-a-controller"
#: The master and one slave cut off together from the controllers and the other slave
#: (apache/rocketmq#6662: the abnormal master still has a slave acking it).
ISOLATE_MASTER_AND_SLAVE = "isolate-master-with-a-slave"
#: The master partitioned away; at heal it rejoins as a slave and truncates its divergent
#: tail, and is SIGKILLed REJOIN_CRASH_AFTER_S into that (apache/rocketmq#10666).
REJOIN_CRASH = "partition-master-then-crash-on-rejoin"
#: Heavy loss on the master's links to both slaves at once (apache/rocketmq#9897:
#: network delay on two slaves, the SyncStateSet shrink raced).
LOSSY_SLAVE_LINKS = "packet-loss-both-slave-links"
#: Loss on the master's links to every controller (apache/rocketmq#9845: heartbeats
#: under network delay).
LOSSY_CONTROLLER_LINKS = "packet-loss-master-controller-links"
SCENARIO_FAULTS = (
    ISOLATE_MASTER_ROOM,
    ISOLATE_MASTER_AND_SLAVE,
    REJOIN_CRASH,
    LOSSY_SLAVE_LINKS,
    LOSSY_CONTROLLER_LINKS,
)
REJOIN_CRASH_AFTER_S = 0.5
HEAVY_LOSS_PERCENT = 90.0

#: What LOSSY_LINK does to the master's link to one slave (delay only where netem is).
LINK_LOSS_PERCENT = 30.0
LINK_DELAY_MS = 100
LINK_JITTER_MS = 50
#: How long the slaves lag (are stopped) before LAGGING_KILL kills the master.
LAG_S = 1.0

#: Per-broker disk for FILL_MASTER_DISK (a tmpfs of its own, so the machine's disk is safe).
BROKER_DISK_BYTES = 256 * 1024 * 1024
#: Most bytes a power loss takes from a broker's commit log tail (TRUNCATE_TAIL).
MAX_TAIL_CUT_BYTES = 64 * 1024


def is_known(fault: str) -> bool:
    return all(part in ALL_FAULTS or part in SCENARIO_FAULTS for part in fault.split("+"))


def unavailable_reason(fault: str) -> str | None:
    if "+" in fault:
        parts = fault.split("+")
        reasons = (unavailable_reason(part) for part in parts)
        reason = next((r for r in reasons if r is not None), None)
        if reason is None and KILL_MASTER in parts:
            reason = netfault.sockets_unavailable_reason()
        return reason
    if fault == LAGGING_KILL:
        return netfault.sockets_unavailable_reason()
    if fault in (PARTITION_MASTER, PARTITION_BRIDGE, PARTITION_RING,
                 ISOLATE_MASTER_ROOM, ISOLATE_MASTER_AND_SLAVE, REJOIN_CRASH):  # fmt: skip
        return netfault.unavailable_reason()
    if fault in (LOSSY_LINK, LOSSY_SLAVE_LINKS, LOSSY_CONTROLLER_LINKS):
        return netfault.loss_unavailable_reason()
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


def _noting_drops(note: str, cut: netfault.LoopbackPartition | netfault.LinkImpairment) -> Injected:
    """`cut`'s window, its heal adding to the note what the owner rules dropped (the
    window's row then shows that a stock node's links really were cut: their packets
    leave from 127.0.0.1 and only the owner rules see them); the note stays as it was
    when the cut had no owner rules."""
    injected = Injected(note, _nothing)

    def heal() -> None:
        cut.heal()
        if cut.owner_dropped is not None:
            injected.note += f"; owner rules dropped {cut.owner_dropped} packets"

    injected.heal = heal
    return injected


#: How long an injection waits for the controllers to name a live master. One read can
#: miss it on a loaded machine (the local target asks each controller with a 1 s timeout),
#: or come while a group just reported healthy re-elects; the window is then late, never
#: silently dropped (a test of two kills that ran one failed in a loaded run).
MASTER_WAIT_S = 20.0


def _master(rt: Target, wait_s: float | None = None) -> Node:
    deadline = time.monotonic() + (MASTER_WAIT_S if wait_s is None else wait_s)
    while True:
        master = rt.master()
        if master is not None:
            return master
        if time.monotonic() >= deadline:
            raise TargetError("no live master to inject the fault into")
        time.sleep(0.2)


def _owners(rt: Target) -> dict[str, int]:
    """Address -> process group of the nodes that have one (`Node.gid`: stock JVMs, whose
    links leave from 127.0.0.1): every address-pair fault cuts or impairs their links by
    owner too, so it breaks each link of a node, not only those an address rule sees."""
    return {n.host: n.gid for n in rt.nodes() if n.gid is not None}


#: The faults that cut or impair links between nodes (a composite with `kill-master`
#: too: `crash_master` cuts the master off while it dies).
LINK_FAULTS = (
    PARTITION_MASTER, PARTITION_BRIDGE, PARTITION_RING, LOSSY_LINK, LAGGING_KILL,
    ISOLATE_MASTER_ROOM, ISOLATE_MASTER_AND_SLAVE, REJOIN_CRASH, LOSSY_SLAVE_LINKS,
    LOSSY_CONTROLLER_LINKS,
)  # fmt: skip


def target_unavailable_reason(fault: str, node_gids: bool) -> str | None:
    """Why `fault` cannot run on a target whose nodes are told apart by process group
    (`node_gids`: stock JVMs, dialing every link from 127.0.0.1): its links are cut by
    owner, which needs iptables' owner and connmark matches
    (`netfault.owner_unavailable_reason`). A fault that left those links whole would be a
    weaker test reported as the same one."""
    parts = fault.split("+")
    links = any(p in LINK_FAULTS for p in parts) or (len(parts) > 1 and KILL_MASTER in parts)
    return netfault.owner_unavailable_reason() if node_gids and links else None


def _slaves(rt: Target, master: Node) -> list[Node]:
    return [c for c in rt.nodes(NodeKind.BROKER) if c.host != master.host]


def _store(node: Node) -> tuple[Path, Path]:
    """(data dir, commit log dir) of a broker node."""
    if node.data_dir is None or node.commitlog_dir is None:
        raise TargetError(f"{node.name}: the target does not say where its store is")
    return node.data_dir, node.commitlog_dir


def inject(fault: str, rt: Target, rng: random.Random) -> Injected:
    """Start `fault` now; `heal()` ends it (kills need none: the supervisor restarts).
    `<fault>+kill-master` also kills the master COMPOSE_KILL_AFTER_S in."""
    if "+" in fault:
        return _inject_composite(fault.split("+"), rt, rng)
    new = _inject_openchaos(fault, rt, rng)
    if new is not None:
        return new
    if fault == KILL_MASTER:
        master = _master(rt)
        rt.signal(master, signal.SIGKILL)
        return Injected(f"SIGKILL master {master.name} on {master.host}", _nothing)
    if fault == KILL_SLAVE:
        slaves = _slaves(rt, _master(rt))
        if not slaves:
            raise TargetError("no live slave")
        victim = rng.choice(slaves)
        rt.signal(victim, signal.SIGKILL)
        return Injected(f"SIGKILL slave {victim.name} on {victim.host}", _nothing)
    if fault in (KILL_CONTROLLER_LEADER, KILL_MASTER_AND_CONTROLLER_LEADER):
        leader = rt.controller_leader()
        if leader is None:
            raise TargetError("no controller leader")
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
        lag = netfault.LoopbackPartition(owners=_owners(rt))
        lag.cut([master.host], [s.host for s in slaves])
        # Stock slaves dial the master's HA port from 127.0.0.1: the pair cut above misses
        # them (in CI the "cut off" slaves kept replicating, and nothing was lost).
        ha_cut = netfault.PortCut()
        try:
            if master.ha_port is not None:
                ha_cut.cut(master.host, master.ha_port)
            time.sleep(LAG_S)
            rt.signal(master, signal.SIGKILL)
            if leader is not None:
                rt.signal(leader, signal.SIGKILL)
            # The killed process's kernel would deliver its unsent bytes once the cut
            # heals, to slaves still following it if no one was elected by then (a dead
            # machine cannot): its sockets go with it (crash_master).
            if wait_gone([(master.pid, master.start_ticks)], DEATH_TIMEOUT_S):
                raise TargetError(f"{master.name} still running {DEATH_TIMEOUT_S} s after SIGKILL")
            netfault.destroy_sockets(master.host)
        except BaseException:
            ha_cut.heal()
            lag.heal()
            raise

        def heal() -> None:
            ha_cut.heal()
            lag.heal()

        via = "" if master.ha_port is None else f" (and its HA port {master.ha_port})"
        return Injected(
            f"slaves {', '.join(s.name for s in slaves)} cut off{via} {LAG_S} s, then SIGKILL "
            f"master {master.name} + controller leader {leader.name if leader else '(none)'}",
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
        controllers = [c.host for c in rt.nodes(NodeKind.CONTROLLER)]
        others = [*controllers, *(s.host for s in _slaves(rt, master))]
        partition = netfault.LoopbackPartition(owners=_owners(rt))
        partition.cut([master.host], others)
        return _noting_drops(f"partition master {master.host} from {', '.join(others)}", partition)
    if fault == RESTART_BROKER:
        victim = rng.choice(rt.nodes(NodeKind.BROKER))
        rt.signal(victim, signal.SIGTERM)  # graceful; the supervisor restarts it elsewhere
        return Injected(f"restart {victim.name} (was {victim.host}) on a new address", _nothing)
    if fault == FILL_MASTER_DISK:
        master = _master(rt)
        filler = fill_disk(_store(master)[0], 0.97)

        def drain() -> None:
            filler.unlink(missing_ok=True)

        return Injected(f"fill the disk of master {master.name} to 97%", drain)
    if fault == TRUNCATE_TAIL:
        victim = rng.choice(rt.nodes(NodeKind.BROKER))
        rt.signal(victim, signal.SIGSTOP)  # freeze its writes, then lose the tail as power would
        cut = _cut_tail(_store(victim)[1], rng)
        rt.signal(victim, signal.SIGKILL)
        return Injected(
            f"power loss of {victim.name}: commit log tail cut by {cut} bytes", _nothing
        )
    raise ValueError(f"unknown fault {fault!r}; known: {', '.join(ALL_FAULTS)}")


def _inject_composite(parts: list[str], rt: Target, rng: random.Random) -> Injected:
    master = _master(rt)  # before a part stops the controllers from answering
    done: list[Injected] = []
    combined = Injected("", _nothing)

    def heal() -> None:
        for injected in reversed(done):
            injected.heal()
        combined.note = "; then ".join(i.note for i in done)  # what the parts' heals added

    try:
        for part in parts:
            if part == KILL_MASTER:
                time.sleep(COMPOSE_KILL_AFTER_S)
                done.append(crash_master(rt, master))
            else:
                done.append(inject(part, rt, rng))
    except BaseException:
        heal()
        raise
    combined.note = "; then ".join(i.note for i in done)
    combined.heal = heal
    return combined


def crash_master(rt: Target, master: Node) -> Injected:
    """SIGKILL `master` as its machine dies: nothing it had not sent by the kill reaches
    anyone afterwards. A killed process's kernel keeps its sockets (orphans) and goes on
    delivering their send queues: under a lossy link the slaves got everything the dead
    master had acknowledged within seconds of the kill, or the moment the loss healed if
    no one had been elected by then (a suspended controller leader), and a negative
    control lost nothing. So the master is cut off from every other node first (nothing
    moves while it dies), killed, its sockets destroyed once it is gone
    (`netfault.destroy_sockets`), and the cut lifted: from then on its address answers
    with resets, as a crashed machine's restarted kernel would."""
    peers = sorted({n.host for n in rt.nodes()} - {master.host})
    cut = netfault.LoopbackPartition(netfault.SECOND_PREF, _owners(rt))  # the fault's own stay
    cut.cut([master.host], peers)
    try:
        rt.signal(master, signal.SIGKILL)
        if wait_gone([(master.pid, master.start_ticks)], DEATH_TIMEOUT_S):
            raise TargetError(f"{master.name} still running {DEATH_TIMEOUT_S} s after SIGKILL")
        destroyed = netfault.destroy_sockets(master.host)
    finally:
        cut.heal()
    return Injected(
        f"SIGKILL master {master.name} on {master.host} ({destroyed} connections it left "
        "destroyed unsent)",
        _nothing,
    )


def _nodes(rt: Target) -> tuple[Node, list[Node], list[str]]:
    """The master, its slaves and every controller host: the nodes a partition splits."""
    master = _master(rt)
    return master, _slaves(rt, master), [c.host for c in rt.nodes(NodeKind.CONTROLLER)]


def _inject_openchaos(fault: str, rt: Target, rng: random.Random) -> Injected | None:
    if fault == PARTITION_BRIDGE:
        # The master on one side, its slaves on the other, a controller as the bridge:
        # the master keeps a controller majority through the bridge while the slaves'
        # side can elect (the shape of apache/rocketmq#7017's isolated room).
        master, slaves, controllers = _nodes(rt)
        bridge = rng.choice(controllers)
        side_a, side_b = netfault.bridge_sides(
            [*controllers, master.host, *(s.host for s in slaves)], bridge,
            pinned_a=[master.host], pinned_b=[s.host for s in slaves],
        )  # fmt: skip
        partition = netfault.PairPartition(owners=_owners(rt))
        partition.cut_pairs(netfault.bridge_pairs(side_a, side_b))
        return _noting_drops(
            f"bridge {bridge} between {', '.join(side_a)} | {', '.join(side_b)}", partition
        )
    if fault == PARTITION_RING:
        master, slaves, controllers = _nodes(rt)
        ring = [*controllers, master.host, *(s.host for s in slaves)]
        rng.shuffle(ring)
        partition = netfault.PairPartition(owners=_owners(rt))
        pairs = netfault.ring_pairs(ring)
        partition.cut_pairs(pairs)
        return _noting_drops(
            f"majorities ring {' - '.join(ring)} (cut {', '.join(f'{a}/{b}' for a, b in pairs)})",
            partition,
        )
    if fault == LOSSY_LINK:
        master = _master(rt)
        slaves = _slaves(rt, master)
        if not slaves:
            raise TargetError("no live slave")
        peer = rng.choice(slaves)
        link = netfault.LinkImpairment(_owners(rt))
        delay = netfault.netem_unavailable_reason() is None
        impairment = netfault.Impairment(
            LINK_LOSS_PERCENT, LINK_DELAY_MS if delay else 0, LINK_JITTER_MS if delay else 0
        )
        backend = link.impair(master.host, peer.host, impairment)
        return _noting_drops(
            f"{impairment.loss_percent:g}% loss"
            + (f", {impairment.delay_ms}±{impairment.jitter_ms} ms delay" if delay else "")
            + f" on master {master.host} <-> slave {peer.host} ({backend})",
            link,
        )
    if fault in SCENARIO_FAULTS:
        return _inject_scenario_fault(fault, rt, rng)
    if fault == PAUSE_CONTROLLER_LEADER:
        leader = rt.controller_leader()
        if leader is None:
            raise TargetError("no controller leader")
        rt.signal(leader, signal.SIGSTOP)

        def resume() -> None:
            rt.signal(leader, signal.SIGCONT)

        return Injected(f"SIGSTOP controller leader {leader.name} on {leader.host}", resume)
    return None


def _lossy(rt: Target, master: Node, peers: list[str], loss_percent: float) -> Injected:
    owners = _owners(rt)
    links = [netfault.LinkImpairment(owners) for _ in peers]
    injected = Injected("", _nothing)

    def heal() -> None:
        for link in links:
            link.heal()
        counts = [link.dropped for link in links]
        if injected.note and all(n is not None for n in counts):
            # What the window's row shows: the loss really happened on each link.
            injected.note += f"; dropped {', '.join(str(n) for n in counts)} packets"

    try:
        backend = ""
        for link, peer in zip(links, peers, strict=True):
            backend = link.impair(master.host, peer, netfault.Impairment(loss_percent))
    except BaseException:
        heal()
        raise
    injected.note = (
        f"{loss_percent:g}% loss on master {master.host} <-> {', '.join(peers)} ({backend})"
    )
    injected.heal = heal
    return injected


def _inject_scenario_fault(fault: str, rt: Target, rng: random.Random) -> Injected:
    master, slaves, controllers = _nodes(rt)
    if fault in (ISOLATE_MASTER_ROOM, ISOLATE_MASTER_AND_SLAVE):
        if fault == ISOLATE_MASTER_ROOM:
            buddy = rng.choice(controllers)
        else:
            if not slaves:
                raise TargetError("no live slave")
            buddy = rng.choice(slaves).host
        room = [master.host, buddy]
        rest = [h for h in (*controllers, *(s.host for s in slaves)) if h not in room]
        partition = netfault.LoopbackPartition(owners=_owners(rt))
        partition.cut(room, rest)
        return Injected(f"isolate {', '.join(room)} from {', '.join(rest)}", partition.heal)
    if fault == REJOIN_CRASH:
        partition = netfault.LoopbackPartition(owners=_owners(rt))
        partition.cut([master.host], [*controllers, *(s.host for s in slaves)])

        def heal() -> None:
            partition.heal()
            time.sleep(REJOIN_CRASH_AFTER_S)  # it reconnects, handshakes, truncates...
            rt.signal(master, signal.SIGKILL)  # ...and crashes in the middle of it

        return Injected(
            f"partition master {master.name} on {master.host}; SIGKILL it "
            f"{REJOIN_CRASH_AFTER_S} s after the heal (rejoining as a slave)",
            heal,
        )
    if fault == LOSSY_SLAVE_LINKS:
        return _lossy(rt, master, [s.host for s in slaves], HEAVY_LOSS_PERCENT)
    if fault == LOSSY_CONTROLLER_LINKS:
        return _lossy(rt, master, controllers, LINK_LOSS_PERCENT * 2)
    raise ValueError(f"unknown scenario fault {fault!r}")


def fill_disk(mount_point: Path, used_ratio: float, name: str = "chaos-filler") -> Path:
    """A filler file that takes the filesystem to `used_ratio` as the broker measures it
    (df's Use%: used over used + available, `brokergroup_broker.store.health`)."""
    space = DiskSpace.from_statvfs(os.statvfs(mount_point))
    filler = mount_point / name
    with open(filler, "wb") as out:
        out.write(b"\0" * max(0, int((space.used + space.usable) * used_ratio) - space.used))
    return filler


def _cut_tail(commitlog_dir: Path, rng: random.Random) -> int:
    segments = sorted(commitlog_dir.glob("[0-9]" * 20))
    written = [s for s in segments if s.stat().st_size > 0]
    if not written:
        return 0
    last = written[-1]
    size = last.stat().st_size
    cut = rng.randint(1, min(MAX_TAIL_CUT_BYTES, size))
    os.truncate(last, size - cut)
    return cut
