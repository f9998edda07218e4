"""The chaos checker (DESIGN.md §8 chaos/, docs/reliability.md "Chaos"): a
pure function from a history of operations, what was read back, and the
fault windows, to findings. No I/O, no clocks: times are inputs.

Definitions (one producer operation = one send of one new key, one attempt):
- outcome `ok`: acknowledged; `failed`: certainly not written (the broker
  refused it before appending, or it was never sent); `unknown`: anything
  else (a timeout, a lost connection, an error that may follow an append).
- **lost**: acknowledged, never read back.
- **duplicated**: read back more than once, or read back though its send
  `failed`.
- **unexpected**: read back, never sent.
- **order violation**: in one queue, two acknowledged keys of one client
  read back in the opposite order of their sends (a client sends one key at
  a time, so its acknowledged keys must keep their order; first copies count).
- **misplaced**: acknowledged at (queueId, queueOffset) but read back elsewhere.
- **unavailability** of a client: from the invoke of an operation that did
  not succeed within `slow_s` (failed, unknown or slow) to the completion of
  the next operation that did; per fault window, the longest such stretch
  of any client that overlaps the window or the `grace_s` after it (an
  operation in flight when the fault hit belongs to the fault). Stretches
  that overlap no window (with its grace) are unexpected unavailability.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"


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

    @property
    def latency_s(self) -> float:
        return self.complete_s - self.invoke_s


@dataclass(frozen=True)
class ReadRecord:
    """One message read back in the final drain, in log order per queue."""

    key: str
    queue_id: int
    queue_offset: int


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
    unknown: int
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    order_violations: list[tuple[int, str, str]] = field(default_factory=list)
    faults: list[FaultResult] = field(default_factory=list)
    unexpected_unavailability: list[Unavailability] = field(default_factory=list)

    @property
    def data_safe(self) -> bool:
        """No finding that costs a user data or order."""
        return not (self.lost or self.order_violations or self.unexpected or self.misplaced)


def check(
    operations: Sequence[Operation],
    read_back: Sequence[ReadRecord],
    windows: Sequence[FaultWindow],
    *,
    slow_s: float = 0.25,
    grace_s: float = 1.0,
) -> Findings:
    by_key = {op.key: op for op in operations}
    acked = {op.key: op for op in operations if op.outcome == OK}
    findings = Findings(
        operations=len(operations),
        acknowledged=len(acked),
        failed=sum(1 for op in operations if op.outcome == FAILED),
        unknown=sum(1 for op in operations if op.outcome == UNKNOWN),
    )
    copies: dict[str, list[ReadRecord]] = defaultdict(list)
    for record in read_back:
        copies[record.key].append(record)
    findings.lost = sorted(k for k in acked if k not in copies)
    findings.unexpected = sorted(k for k in copies if k not in by_key)
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
    stretches = unavailability(operations, slow_s)
    findings.faults = [
        FaultResult(
            w, max((u.duration_s for u in stretches if _overlaps(u, w, grace_s)), default=0.0)
        )
        for w in windows
    ]
    findings.unexpected_unavailability = [
        u for u in stretches if not any(_overlaps(u, w, grace_s) for w in windows)
    ]
    return findings


def _order_violations(
    read_back: Sequence[ReadRecord], acked: dict[str, Operation]
) -> list[tuple[int, str, str]]:
    """(queueId, earlier key, later key) where the later send was read first."""
    seen: set[str] = set()
    last: dict[tuple[int, str], Operation] = {}
    violations: list[tuple[int, str, str]] = []
    for record in sorted(read_back, key=lambda r: (r.queue_id, r.queue_offset)):
        op = acked.get(record.key)
        if op is None or record.key in seen:
            continue
        seen.add(record.key)
        previous = last.get((record.queue_id, op.client))
        if previous is not None and previous.seq > op.seq:
            violations.append((record.queue_id, op.key, previous.key))
        if previous is None or previous.seq < op.seq:
            last[(record.queue_id, op.client)] = op
    return violations


def unavailability(operations: Iterable[Operation], slow_s: float) -> list[Unavailability]:
    """Per client: invoke of the first op not fast-and-ok → completion of the next that is."""
    by_client: dict[str, list[Operation]] = defaultdict(list)
    for op in operations:
        by_client[op.client].append(op)
    out: list[Unavailability] = []
    for client, ops in sorted(by_client.items()):
        start: float | None = None
        for op in sorted(ops, key=lambda o: o.seq):
            good = op.outcome == OK and op.latency_s <= slow_s
            if not good and start is None:
                start = op.invoke_s
            if good and start is not None:
                out.append(Unavailability(client, start, op.complete_s))
                start = None
        if start is not None:  # never recovered: up to the last operation's end
            out.append(Unavailability(client, start, max(o.complete_s for o in ops)))
    return out


def _overlaps(u: Unavailability, w: FaultWindow, grace_s: float) -> bool:
    return u.start_s <= w.end_s + grace_s and u.end_s >= w.start_s


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`, None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]
