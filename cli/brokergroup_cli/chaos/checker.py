"""The chaos checker (DESIGN.md §8 chaos/, docs/reliability.md "Chaos"): a
pure function from a history of operations, what was read back, and the
fault windows, to findings. No I/O, no clocks: times are inputs.

Definitions (one producer operation = one send of one new key, retried up
to a few attempts with the same key and body):
- attempt outcome `ok`: acknowledged; `failed`: certainly not written (the
  broker refused it before appending, or it was never sent); `indeterminate`:
  anything else (a timeout, a lost connection, an error that may follow an
  append).
- operation outcome (`settle`): `ok` if an attempt was acknowledged;
  `failed` only if every attempt failed; else `indeterminate` — a last
  attempt that failed says nothing about an earlier one that may have been
  written.
- The final read-back reads every replica: the final master's log is the
  reference for the definitions below; each other replica must hold the same
  records (key and body CRC) at the same (topic, queueId, queueOffset).
- **lost**: acknowledged, never read back from the final master.
- **duplicated**: read back more than once, or read back though its send
  `failed`.
- **corrupt**: read back (from any replica) with a body whose CRC is not the
  CRC of the body sent under that key.
- **replica mismatch**: a replica that does not hold what the final master
  holds at some position (missing, another key, another body), or holds a
  record where the master holds none: the next failover would serve it.
- **unexpected**: read back, never sent.
- **order violation**: in one queue, two acknowledged keys of one client
  read back in the opposite order of their sends (a client sends one key at
  a time, so its acknowledged keys must keep their order; first copies count).
- **misplaced**: acknowledged at (queueId, queueOffset) but read back elsewhere.
- **reused offset**: one (topic, queueId, queueOffset) acknowledged for two
  different keys: the broker handed a queue position out
  twice, e.g. a new master that went on below offsets already acknowledged.
  Consumers that commit offsets skip or re-read around it, and the order
  checks above see the keys at the later position as reordered: this names the
  cause. One entry per later key, with the key first acknowledged there.
- **unstable read**: a consumer, during the run, read a key at (queueId,
  queueOffset) where the final drain does not hold that key (another key or
  nothing; at a reused offset it may hold several) — it was
  shown something a failover later took back (replicas serve only up to
  confirmOffset, so this must never happen). A consumed key never sent is
  unexpected too.
- **unavailability** of a client: from the invoke of an operation that did
  not succeed at its first attempt within `slow_s` (failed, indeterminate,
  retried or slow) to the completion of the next operation that did; per fault window, the longest such stretch
  of any client that overlaps the window (or the `grace_s` after it) — a
  send in flight when the fault began starts its stretch a moment before
  the window does, and belongs to it. A stretch overlapping several windows
  belongs to the first. Stretches that overlap no window (and its grace) are
  reported as unexpected unavailability.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

OK, FAILED, INDETERMINATE = "ok", "failed", "indeterminate"
#: The earlier name of INDETERMINATE.
UNKNOWN = INDETERMINATE


def settle(attempts: Sequence[str]) -> str:
    """One operation's outcome from its attempts' outcomes, oldest first."""
    if not attempts:
        raise ValueError("an operation has at least one attempt")
    if OK in attempts:
        return OK
    return FAILED if all(a == FAILED for a in attempts) else INDETERMINATE


@dataclass(frozen=True)
class Operation:
    """One producer send. Times are seconds on the run's monotonic clock."""

    client: str
    seq: int  # the client's n-th operation
    key: str
    invoke_s: float
    complete_s: float
    outcome: str
    queue_id: int | None = None
    queue_offset: int | None = None
    error: str | None = None
    body_crc: int | None = None
    """CRC of the body sent (None: not compared)."""
    attempts: tuple[str, ...] = ()
    """Each attempt's outcome, oldest first (empty: one attempt, `outcome`)."""
    topic: str = ""
    """Where it was sent: a run's phases each have their own topic (and runtime)."""

    @property
    def latency_s(self) -> float:
        return self.complete_s - self.invoke_s


@dataclass(frozen=True)
class ReadRecord:
    """One message read back in the final drain, in log order per queue."""

    key: str
    queue_id: int
    queue_offset: int
    topic: str = ""
    body_crc: int | None = None
    """CRC of the body as read (None: not compared)."""
    replica: str = ""
    """Which replica served it (a consumer's reads: the one it read from)."""


@dataclass(frozen=True)
class FaultWindow:
    fault: str
    start_s: float
    end_s: float
    note: str = ""


@dataclass
class Unavailability:
    client: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class FaultResult:
    window: FaultWindow
    unavailable_s: float  # longest stretch that began in this window (0: none)


@dataclass
class Findings:
    operations: int
    acknowledged: int
    failed: int
    indeterminate: int
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    corrupt: list[tuple[str, str]] = field(default_factory=list)
    """(replica, key) read back with another body than the one sent."""
    replica_mismatches: list[tuple[str, str, int, int, str]] = field(default_factory=list)
    """(replica, topic, queueId, queueOffset, what differs from the final master)."""
    order_violations: list[tuple[int, str, str]] = field(default_factory=list)
    unstable_reads: list[tuple[int, int, str]] = field(default_factory=list)
    """(queueId, queueOffset, key consumed there) not in the final log at that place."""
    reused_offsets: list[tuple[int, int, str, str]] = field(default_factory=list)
    """(queueId, queueOffset, key acknowledged there first, a later key acknowledged there)."""
    faults: list[FaultResult] = field(default_factory=list)
    unexpected_unavailability: list[Unavailability] = field(default_factory=list)

    @property
    def data_safe(self) -> bool:
        """No finding that costs a user data or order."""
        return not (
            self.lost
            or self.order_violations
            or self.unexpected
            or self.misplaced
            or self.unstable_reads
            or self.reused_offsets
            or self.corrupt
            or self.replica_mismatches
        )


def check(
    operations: Sequence[Operation],
    read_back: Sequence[ReadRecord],
    windows: Sequence[FaultWindow],
    *,
    consumed: Sequence[ReadRecord] = (),
    replica_reads: Sequence[ReadRecord] = (),
    replicas_read: Sequence[tuple[str, str]] = (),
    slow_s: float = 0.25,
    grace_s: float = 1.0,
) -> Findings:
    """`read_back`: the final master's log; `replica_reads`: every other replica's,
    each record naming its replica (`ReadRecord.replica`); `replicas_read`: the
    (replica, topic) pairs read, including any that returned nothing."""
    by_key = {op.key: op for op in operations}
    acked = {op.key: op for op in operations if op.outcome == OK}
    findings = Findings(
        operations=len(operations),
        acknowledged=len(acked),
        failed=sum(1 for op in operations if op.outcome == FAILED),
        indeterminate=sum(1 for op in operations if op.outcome == INDETERMINATE),
    )
    copies: dict[str, list[ReadRecord]] = defaultdict(list)
    for record in read_back:
        copies[record.key].append(record)
    findings.lost = sorted(k for k in acked if k not in copies)
    findings.unexpected = sorted(
        {r.key for r in (*read_back, *replica_reads, *consumed) if r.key not in by_key}
    )
    findings.corrupt = sorted(
        {
            (r.replica, r.key)
            for r in (*read_back, *replica_reads)
            if r.body_crc is not None
            and r.key in by_key
            and by_key[r.key].body_crc is not None
            and by_key[r.key].body_crc != r.body_crc
        }
    )
    findings.replica_mismatches = replica_mismatches(read_back, replica_reads, replicas_read)
    final = {(r.topic, r.queue_id, r.queue_offset, r.key) for r in read_back}
    findings.unstable_reads = sorted(
        {
            (r.queue_id, r.queue_offset, r.key)
            for r in consumed
            if (r.topic, r.queue_id, r.queue_offset, r.key) not in final
        }
    )
    findings.duplicated = sorted(
        k
        for k, found in copies.items()
        if len(found) > 1 or (k in by_key and by_key[k].outcome == FAILED)
    )
    findings.misplaced = sorted(
        k
        for k, op in acked.items()
        if k in copies
        and op.queue_id is not None
        and (op.queue_id, op.queue_offset) not in {(r.queue_id, r.queue_offset) for r in copies[k]}
    )
    findings.order_violations = _order_violations(read_back, acked)
    findings.reused_offsets = reused_offsets(operations)
    stretches = unavailability(operations, slow_s)
    owner = {id(u): _owner(u, windows, grace_s) for u in stretches}
    findings.faults = [
        FaultResult(w, max((u.duration_s for u in stretches if owner[id(u)] == i), default=0.0))
        for i, w in enumerate(windows)
    ]
    findings.unexpected_unavailability = [u for u in stretches if owner[id(u)] is None]
    return findings


def replica_mismatches(
    reference: Sequence[ReadRecord],
    replica_reads: Sequence[ReadRecord],
    replicas_read: Iterable[tuple[str, str]] = (),
) -> list[tuple[str, str, int, int, str]]:
    """Where a replica's log differs from the reference (the final master's):
    (replica, topic, queueId, queueOffset, what). Compared per (replica, topic)
    read: those in `replicas_read` (so a replica that returned nothing counts)
    and those `replica_reads` name (each phase of a run has its own topic)."""
    ref = {(r.topic, r.queue_id, r.queue_offset): r for r in reference}
    held: dict[tuple[str, str], dict[tuple[str, int, int], ReadRecord]] = defaultdict(dict)
    for pair in replicas_read:
        held[pair] = {}
    for r in replica_reads:
        held[(r.replica, r.topic)][(r.topic, r.queue_id, r.queue_offset)] = r
    out: list[tuple[str, str, int, int, str]] = []
    for (replica, topic), records in sorted(held.items()):
        for at in sorted({*records, *(k for k in ref if k[0] == topic)}):
            mine, theirs = records.get(at), ref.get(at)
            if theirs is None:
                what = f"holds {mine.key if mine else '?'}; the master holds nothing here"
            elif mine is None:
                what = f"holds nothing; the master holds {theirs.key}"
            elif mine.key != theirs.key:
                what = f"holds {mine.key}; the master holds {theirs.key}"
            elif mine.body_crc != theirs.body_crc:
                what = f"{mine.key}: body crc {mine.body_crc}, the master's {theirs.body_crc}"
            else:
                continue
            out.append((replica, *at, what))
    return out


def reused_offsets(operations: Iterable[Operation]) -> list[tuple[int, int, str, str]]:
    """(queueId, queueOffset, first key, later key) for every acknowledged send whose
    position an earlier acknowledged send of another key already had ("earlier": acked
    first; the same key acked twice at one position is a retry, not a reuse)."""
    first: dict[tuple[str, int, int], str] = {}
    out: set[tuple[int, int, str, str]] = set()
    for op in sorted(operations, key=lambda o: (o.complete_s, o.client, o.seq)):
        if op.outcome != OK or op.queue_id is None or op.queue_offset is None:
            continue
        # Per topic: each phase of a run has its own, on a fresh runtime, from offset 0.
        had = first.setdefault((op.topic, op.queue_id, op.queue_offset), op.key)
        if had != op.key:
            out.add((op.queue_id, op.queue_offset, had, op.key))
    return sorted(out)


def _order_violations(
    read_back: Sequence[ReadRecord], acked: dict[str, Operation]
) -> list[tuple[int, str, str]]:
    """(queueId, earlier key, later key) where the later send was read first."""
    seen: set[str] = set()
    last: dict[tuple[str, int, str], Operation] = {}
    violations: list[tuple[int, str, str]] = []
    for record in sorted(read_back, key=lambda r: (r.topic, r.queue_id, r.queue_offset)):
        op = acked.get(record.key)
        if op is None or record.key in seen:
            continue
        seen.add(record.key)
        previous = last.get((record.topic, record.queue_id, op.client))
        if previous is not None and previous.seq > op.seq:
            violations.append((record.queue_id, op.key, previous.key))
        if previous is None or previous.seq < op.seq:
            last[(record.topic, record.queue_id, op.client)] = op
    return violations


def unavailability(operations: Iterable[Operation], slow_s: float) -> list[Unavailability]:
    """Per client: invoke of the first op not fast-and-ok → completion of the next that is.

    An op is fast-and-ok only if its first attempt was acknowledged within `slow_s`:
    a send that needed a retry met a fault however fast the retry was, and counting
    it as available would let the client's retries hide a failover."""
    by_client: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        by_client[op.client].append(op)
    out: list[Unavailability] = []
    for client, ops in sorted(by_client.items()):
        start: float | None = None
        for op in sorted(ops, key=lambda o: o.seq):
            good = op.outcome == OK and op.latency_s <= slow_s and len(op.attempts) <= 1
            if not good and start is None:
                start = op.invoke_s
            if good and start is not None:
                out.append(Unavailability(client, start, op.complete_s))
                start = None
        if start is not None:  # never recovered: up to the last operation's end
            out.append(Unavailability(client, start, max(o.complete_s for o in ops)))
    return out


def _owner(u: Unavailability, windows: Sequence[FaultWindow], grace_s: float) -> int | None:
    """Index of the earliest window whose [start, end + grace] `u` overlaps, if any."""
    overlapping = [
        (w.start_s, i)
        for i, w in enumerate(windows)
        if u.start_s <= w.end_s + grace_s and u.end_s >= w.start_s
    ]
    return min(overlapping)[1] if overlapping else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`, None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def accumulate(into: Any, more: Any) -> None:
    """Add dataclass `more` to `into` field by field (lists and counts add up,
    dicts merge, a float end time takes the later): several runs, one report."""
    for f in fields(into):
        mine, theirs = getattr(into, f.name), getattr(more, f.name)
        if isinstance(mine, float):
            setattr(into, f.name, max(mine, theirs))
        elif isinstance(mine, dict):
            mine.update(theirs)
        else:
            setattr(into, f.name, mine + theirs)
