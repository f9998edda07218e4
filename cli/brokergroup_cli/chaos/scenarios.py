"""RocketMQ's controller-mode defects as named chaos scenarios (issue 37 item 3).

Each scenario is a fixed schedule — faults in order, each with the quiet time before
it and how long it is held — that reproduces the conditions under which Apache
RocketMQ lost, duplicated or stalled messages, as its issue describes them. A
scenario does not assert RocketMQ's defect (that is what running it against the
`rocketmq` target shows); the checker judges every target the same way, and the
report says per scenario and target what was lost, duplicated, reordered and how long
the group was unavailable.

`brokergroup chaos --scenario NAME [--seed S]` runs one; the seed fixes every random
choice inside the faults (which slave, which controller). Where this workload cannot
see the defect's symptom (no consumer offsets committed, no delay messages, one topic
made at the start) the scenario says so in `blind_spot`, so a clean result is never
read as more than it shows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from brokergroup_cli.chaos import faults as f
from brokergroup_cli.chaos.runner import Schedule


@dataclass(frozen=True)
class Step:
    fault: str
    normal_s: float
    """Quiet time before the fault (writes flowing)."""
    fault_s: float
    """How long the fault is held before it heals."""


@dataclass(frozen=True)
class Scenario:
    name: str
    issues: tuple[int, ...]
    """apache/rocketmq issue (or pull request) numbers."""
    defect: str
    """What RocketMQ did, from the issue."""
    conditions: str
    """What the schedule reproduces, and how."""
    steps: tuple[Step, ...]
    repeat: int = 2
    settings: tuple[str, ...] = ()
    """Extra `local up --set` the conditions need (a target that has no such
    setting ignores it)."""
    watch: str = "lost"
    """The summary figure the defect shows in."""
    blind_spot: str = ""

    def schedule(self, seed: int, **overrides: object) -> Schedule:
        steps = tuple((s.fault, s.normal_s, s.fault_s) for s in self.steps) * self.repeat
        faults = tuple(dict.fromkeys(s.fault for s in self.steps))
        base = Schedule(faults=faults, windows=len(steps), seed=seed, sequence=steps)
        return replace(base, **overrides)  # type: ignore[arg-type]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "two-masters-isolated-room",
            (7017,),
            "5.1.1: the master and one controller isolated from the other two data centres; "
            "a second master is elected there, and everything sent to the old master "
            "during the isolation is gone when it returns as a slave",
            "the master and one controller cut off (policy-routing blackholes) from the "
            "other controllers and both slaves for 8 s; clients still reach the old master",
            (Step(f.ISOLATE_MASTER_ROOM, 2.0, 8.0),),
        ),
        Scenario(
            "confirm-offset-isolated-pair",
            (6662,),
            "an abnormal master cut off together with one slave keeps advancing its "
            "confirmOffset from that slave's acks, moving consume positions forward over "
            "messages the elected side never had",
            "the master and one slave cut off from the controllers and the other slave for "
            "8 s (dual masters, the old one with a slave acking it)",
            (Step(f.ISOLATE_MASTER_AND_SLAVE, 2.0, 8.0),),
            watch="lost, unstable_reads",
        ),
        Scenario(
            "master-and-controller-leader-killed",
            (7689,),
            "5.1.4 (found by OpenChaos): the master and the controller leader killed "
            "together; the restarted master recovers only to confirmOffset and new writes "
            "reuse consume-queue offsets of unreplicated messages",
            "SIGKILL of the master and the controller leader at once, then the same after "
            "the slaves were cut off for 1 s (they lag)",
            (
                Step(f.KILL_MASTER_AND_CONTROLLER_LEADER, 2.0, 3.0),
                Step(f.LAGGING_KILL, 2.0, 4.0),
            ),
            watch="lost, misplaced",
        ),
        Scenario(
            "slave-truncation-crash",
            (10666,),
            "AutoSwitchHA truncation only resets in-memory positions: a slave that crashes "
            "right after truncating recovers the stale tail from disk",
            "the master partitioned away for 6 s (it may append a divergent tail), then, "
            "0.5 s after the heal, while it rejoins as a slave and truncates, SIGKILLed",
            (Step(f.REJOIN_CRASH, 2.0, 6.0),),
            watch="replica_mismatches",
            blind_spot="a SIGKILL keeps the page cache: a truncation that was never "
            "fsynced is only lost by a power cut, which a process on this machine cannot "
            "cause; the replica comparison still catches a stale tail served after restart",
        ),
        Scenario(
            "consumer-offsets-past-truncation",
            (4771,),
            "consumer offsets are not truncated with the log: after a failover truncates "
            "the old master, its consumers' committed offsets point past the new log end",
            "the master partitioned away for 8 s while the consumer tails every queue, "
            "twice (the old master's unreplicated tail is truncated when it rejoins)",
            (Step(f.PARTITION_MASTER, 2.0, 8.0),),
            watch="unstable_reads",
            blind_spot="this workload's consumers keep their offsets in memory and never "
            "commit them, so committed offsets are not checked; reads the log later took "
            "back are (unstable reads)",
        ),
        Scenario(
            "topic-metadata-on-switch",
            (9804, 9984),
            "5.3.3: a topic created on the master is missing on the new master after a "
            "switch (topics.json not replicated; a slave deletes topics it syncs)",
            "three master kills in a row, the first 1 s after the run's topic was created, "
            "so every send needs the topic on a master that did not create it",
            (Step(f.KILL_MASTER, 1.0, 3.0),),
            repeat=3,
            watch="failed sends (topic not found), unavailability",
            blind_spot="one topic, made at the start; transaction topics are not used",
        ),
        Scenario(
            "flush-slave-timeout-sss-race",
            (9897,),
            "5.3.2: network delay on two slaves at once; the SyncStateSet shrink raced and "
            "kept them in, so sends got FLUSH_SLAVE_TIMEOUT for far longer than the 20 s "
            "it should take to drop them",
            "90% packet loss on the master's links to both slaves at once for 10 s",
            (Step(f.LOSSY_SLAVE_LINKS, 2.0, 10.0),),
            watch="unavailability",
        ),
        Scenario(
            "heartbeat-under-network-delay",
            (9845,),
            "the broker's heartbeat to the controller stops under network delay, so a "
            "healthy master is taken for dead (or a dead one for alive)",
            "60% packet loss on the master's links to every controller for 10 s",
            (Step(f.LOSSY_CONTROLLER_LINKS, 2.0, 10.0),),
            watch="unavailability, spurious failovers",
        ),
        Scenario(
            "acting-master-picks-dead-master",
            (7923,),
            "with enableSlaveActingMaster, a slave acting as master sends scheduled "
            "messages to the dead master before routes update, and they are lost",
            "the slaves' links lossy (they drop out of the SyncStateSet), then the master "
            "killed and kept down 5 s, so no in-sync replica can be elected and a slave "
            "acts as master",
            (Step(f.LOSSY_SLAVE_LINKS + f.THEN_KILL_MASTER, 2.0, 6.0),),
            settings=("local.restartInitialDelayMs=5000",),
            watch="lost, unavailability",
            blind_spot="this workload sends no delay/scheduled messages",
        ),
    )
}


def names() -> list[str]:
    return sorted(SCENARIOS)


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(names())}") from None


def outcome(scenario: Scenario, summary: dict[str, object]) -> dict[str, object]:
    """What one run of `scenario` showed, in the scenario's terms (issue 37 item 3: per
    scenario and target what was lost, duplicated, reordered or unavailable, how long)."""
    rows = summary.get("recovery")
    windows = rows if isinstance(rows, list) else []
    unavailable = [float(r["unavailable_s"]) for r in windows if r.get("unavailable_s") is not None]
    first_ack = [float(r["first_ack_s"]) for r in windows if r.get("first_ack_s") is not None]
    return {
        "name": scenario.name,
        "issues": [f"apache/rocketmq#{n}" for n in scenario.issues],
        "defect": scenario.defect,
        "conditions": scenario.conditions,
        "watch": scenario.watch,
        "blind_spot": scenario.blind_spot,
        "lost": summary.get("lost"),
        "duplicated": summary.get("duplicated"),
        "reordered": summary.get("order_violations"),
        "unstable_reads": summary.get("unstable_reads"),
        "reused_offsets": summary.get("reused_offsets"),
        "replica_mismatches": summary.get("replica_mismatches"),
        "failed_sends": summary.get("failed"),
        "indeterminate_sends": summary.get("indeterminate"),
        "unavailable_max_s": max(unavailable, default=None),
        "unavailable_total_s": round(sum(unavailable), 3),
        "first_ack_max_s": max(first_ack, default=None),
        "not_recovered": summary.get("not_recovered"),
    }
