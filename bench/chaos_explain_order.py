"""Where a stock-workload chaos run's order violations and unstable reads come from.

    .venv/bin/python bench/chaos_explain_order.py ~/.cache/brokergroup/chaos-full-3701/rocketmq/seed-3701

Reads a `brokergroup chaos` run directory (history.jsonl, faults.jsonl, summary.json);
no network, no processes. The run keeps no read-back (the commit logs and the consumer's
receipts go with the runtime), but a run whose summary says 0 lost, 0 misplaced and 0
duplicated has every acknowledged key exactly once in the final master's log, at the
(queueId, queueOffset) its SEND_OK named: the acknowledgements are the final log's
acknowledged part. So this script rebuilds that part from history.jsonl (two keys at one
position: the one acknowledged first comes first, as a log that only appends has it),
runs the checker's own `check` on it and says whether the order violations come out as
the summary's (count and samples). Then it prints:

- outages (`--gap-s` or more without any acknowledgement: a failover, a pause) after
  which a queue's next acknowledged offset was one already acknowledged for another key
  in that queue since the outage before (a rewind);
- per rewind, the positions acknowledged twice and the order violations whose later key
  was sent after it;
- per fault type, the checker's attribution (the window of the later key's send, as in
  summary.json) against the window of the failover that rewound;
- examples: the summary's samples with each key's send, its window, and the other key
  acknowledged at the same position.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from brokergroup_cli.chaos.checker import OK, FaultWindow, Operation, ReadRecord, check
from brokergroup_cli.chaos.report import window_rows
from brokergroup_cli.chaos.runner import read_history

#: No acknowledgement at all for this long: a failover (or an outage) in between.
DEFAULT_GAP_S = 2.0
#: How far after a failover a queue's first acknowledgement is looked for.
LOOKAHEAD_S = 60.0


@dataclass
class Rewind:
    """A failover after which `queue_id`'s next acknowledged offset was not above the
    highest one acknowledged before it."""

    queue_id: int
    gap_start_s: float
    gap_end_s: float
    window: int | None  # index of the last window that began at or before the gap
    max_before: Operation
    first_after: Operation
    reused: list[tuple[Operation, Operation]] = field(default_factory=list)
    violations: int = 0


def reused_positions(operations: Sequence[Operation]) -> list[tuple[Operation, Operation]]:
    """(first, second): two acknowledged keys at one (queueId, queueOffset), by ack time."""
    first: dict[tuple[int | None, int | None], Operation] = {}
    out = []
    for op in sorted((o for o in operations if o.outcome == OK), key=lambda o: o.complete_s):
        at = (op.queue_id, op.queue_offset)
        if at in first:
            out.append((first[at], op))
        else:
            first[at] = op
    return out


def window_at(windows: Sequence[FaultWindow], at_s: float) -> int | None:
    """Index of the last window that began at or before `at_s`."""
    found = None
    for i, w in enumerate(windows):
        if w.start_s <= at_s:
            found = i
    return found


def rewinds(
    operations: Sequence[Operation], windows: Sequence[FaultWindow], gap_s: float
) -> tuple[int, list[Rewind]]:
    """(failovers seen, rewinds among them), in time order. A queue rewound if its first
    acknowledged offset after a failover is not above the highest one acknowledged since
    the failover before (the previous master's counter; an earlier master's higher
    offsets, left behind by an earlier rewind, do not count again)."""
    acks = sorted((o for o in operations if o.outcome == OK), key=lambda o: o.complete_s)
    era: dict[int, Operation] = {}  # per queue: the highest ack since the last failover
    failovers, out = 0, []
    for n, op in enumerate(acks):
        if n and op.complete_s - acks[n - 1].complete_s >= gap_s:
            failovers += 1
            start = acks[n - 1].complete_s
            seen: set[int] = set()
            for nxt in acks[n:]:
                if nxt.complete_s - op.complete_s > LOOKAHEAD_S or len(seen) == len(era):
                    break
                q = nxt.queue_id
                if q is None or q in seen or q not in era:
                    continue
                seen.add(q)
                before = era[q]
                if (nxt.queue_offset or 0) <= (before.queue_offset or 0):
                    out.append(
                        Rewind(q, start, op.complete_s, window_at(windows, start), before, nxt)
                    )
            era = {}
        if op.queue_id is not None:
            best = era.get(op.queue_id)
            if best is None or (op.queue_offset or 0) > (best.queue_offset or 0):
                era[op.queue_id] = op
    return failovers, out


def rebuilt_log(operations: Sequence[Operation], topic: str) -> list[ReadRecord]:
    """The final master's acknowledged records, if nothing acknowledged was lost, moved
    or stored twice: each key at its acknowledged position, the earlier ack first."""
    acked = [o for o in operations if o.outcome == OK and o.queue_id is not None]
    acked.sort(key=lambda o: (o.queue_id, o.queue_offset, o.complete_s))
    return [
        ReadRecord(o.key, o.queue_id or 0, o.queue_offset or 0, topic, o.body_crc, "rebuilt")
        for o in acked
    ]


def owning_rewind(found: Sequence[Rewind], queue_id: int, at_s: float) -> Rewind | None:
    """The latest rewind of `queue_id` that ended at or before `at_s`."""
    chosen = None
    for r in found:
        if r.queue_id == queue_id and r.gap_end_s <= at_s:
            chosen = r
    return chosen


def _w(windows: Sequence[FaultWindow], i: int | None, at_s: float | None = None) -> str:
    if i is None:
        return "before the first window"
    w = windows[i]
    since = "" if at_s is None else f", +{at_s - w.start_s:.1f} s after its start"
    return f"W{i + 1} {w.fault} ({w.start_s:.1f}-{w.end_s:.1f} s{since})"


def _op(o: Operation, windows: Sequence[FaultWindow]) -> str:
    return (
        f"{o.key} seq {o.seq} sent {o.invoke_s:.3f}-{o.complete_s:.3f} s {o.outcome} at "
        f"q{o.queue_id}/{o.queue_offset} in {_w(windows, window_at(windows, o.invoke_s), o.invoke_s)}"
    )


def _before(ops_by_client: dict[str, list[Operation]], o: Operation) -> str:
    """What the same client's previous sends did (one line per operation; the Java
    client's own up to 3 tries inside one send are not in the history)."""
    earlier = [p for p in ops_by_client[o.client] if p.seq < o.seq]
    bad: list[Operation] = []
    for p in reversed(earlier):
        if p.outcome == OK:
            break
        bad.append(p)
    if not bad:
        return "its previous send was acknowledged"
    kinds = Counter((p.outcome, (p.error or "")[:40]) for p in bad)
    span = f"{bad[-1].invoke_s:.1f}-{bad[0].complete_s:.1f} s"
    return f"{len(bad)} sends not acknowledged just before it ({span}): {dict(kinds)}"


def explain(run_dir: Path, gap_s: float, examples: int) -> int:
    operations, windows = read_history(run_dir)
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text())
    topic = next(
        (json.loads(x)["topic"] for x in (run_dir / "history.jsonl").open() if x.strip()), ""
    )
    print(f"{run_dir}: {len(operations)} sends, {len(windows)} windows")
    said = {k: summary.get(k) for k in ("lost", "misplaced", "duplicated")}
    exact = not any(said.values())
    print(f"summary: {said}; order_violations {summary.get('order_violations')}, "
          f"unstable_reads {summary.get('unstable_reads')}, "
          f"replica_mismatches {summary.get('replica_mismatches')}")  # fmt: skip
    if not exact:
        print("the acknowledgements are not the final log here: the rebuilt counts are bounds")

    pairs = reused_positions(operations)
    print(f"\npositions acknowledged for two keys: {len(pairs)}; per queue "
          f"{dict(sorted(Counter(a.queue_id for a, _ in pairs).items()))}")  # fmt: skip

    findings = check(operations, rebuilt_log(operations, topic), windows)
    same = [list(v) for v in findings.order_violations[:20]] == summary.get("samples", {}).get(
        "order_violations"
    )
    print(f"order violations of the rebuilt log: {len(findings.order_violations)} "
          f"(summary {summary.get('order_violations')}; first 20 samples identical: {same})")  # fmt: skip

    failovers, found = rewinds(operations, windows, gap_s)
    by_key = {o.key: o for o in operations}
    for first, second in pairs:
        owner = owning_rewind(found, second.queue_id or 0, second.complete_s)
        if owner is not None:
            owner.reused.append((first, second))
    stray = len(pairs) - sum(len(r.reused) for r in found)
    for queue_id, _earlier, later in findings.order_violations:
        owner = owning_rewind(found, queue_id, by_key[later].complete_s)
        if owner is not None:
            owner.violations += 1
    print(f"\noutages (>= {gap_s} s without any ack): {failovers}; rewinds after them: {len(found)}"
          + (f"; positions reused outside them: {stray}" if stray else ""))  # fmt: skip
    for r in found:
        gen1 = [a.complete_s for a, _ in r.reused]
        gen2 = [b.complete_s for _, b in r.reused]
        offsets = [a.queue_offset or 0 for a, _ in r.reused]
        print(f"- queue {r.queue_id}, failover {r.gap_start_s:.1f}-{r.gap_end_s:.1f} s in "
              f"{_w(windows, r.window)}: highest acked since the failover before "
              f"{r.max_before.queue_offset} "
              f"({r.max_before.key} at {r.max_before.complete_s:.1f} s), next acked "
              f"{r.first_after.queue_offset} ({r.first_after.key} at {r.first_after.complete_s:.1f} s)")  # fmt: skip
        if r.reused:
            print(f"  {len(r.reused)} positions {min(offsets)}-{max(offsets)} acknowledged "
                  f"again {min(gen2):.1f}-{max(gen2):.1f} s, first acknowledged "
                  f"{min(gen1):.1f}-{max(gen1):.1f} s; order violations whose later key was "
                  f"sent after this failover: {r.violations}")  # fmt: skip

    rows = window_rows(findings, operations, windows, [])
    checker_view: Counter[str] = Counter()
    for row in rows:
        checker_view[row["fault"]] += len(row["reordered"])
    cause_view: Counter[str] = Counter()
    for r in found:
        if r.window is not None:
            cause_view[windows[r.window].fault] += r.violations
    print(
        "\nper fault type: order violations as summary.json attributes them (window of "
        "the later key's send) | by the window of the failover that rewound"
    )
    for fault in sorted(set(checker_view) | set(cause_view)):
        if checker_view[fault] or cause_view[fault]:
            print(f"  {fault:55s} {checker_view[fault]:6d} | {cause_view[fault]:6d}")

    ops_by_client: dict[str, list[Operation]] = defaultdict(list)
    for o in sorted(operations, key=lambda o: o.seq):
        ops_by_client[o.client].append(o)
    at_position = {(a.queue_id, a.queue_offset): (a, b) for a, b in pairs}
    samples = summary.get("samples", {})
    print("\nexamples (summary.json samples):")
    for queue_id, earlier, later in samples.get("order_violations", [])[:examples]:
        print(f"- order violation, queue {queue_id}: {earlier} read after {later}")
        for key in (earlier, later):
            o = by_key[key]
            print(f"    {_op(o, windows)}")
            pair = at_position.get((o.queue_id, o.queue_offset))
            if pair is not None:
                other = pair[1] if pair[0].key == key else pair[0]
                print(f"      same position also acknowledged for {_op(other, windows)}")
        print(f"    before {later}: {_before(ops_by_client, by_key[later])}")
    for queue_id, offset, key in samples.get("unstable_reads", [])[:examples]:
        pair = at_position.get((queue_id, offset))
        print(f"- unstable read: the consumer got {key} at q{queue_id}/{offset}")
        print(f"    {_op(by_key[key], windows)}" if key in by_key else "    never sent")
        if pair is not None:
            print(f"    the checker's final map keeps the later key there: {_op(pair[1], windows)}")
    for replica, _topic, queue_id, offset, what in samples.get("replica_mismatches", [])[:examples]:
        print(f"- replica mismatch: {replica} at q{queue_id}/{offset}: {what}")
        for o in operations:
            if o.outcome == OK and (o.queue_id, o.queue_offset) == (queue_id, offset):
                print(f"    {_op(o, windows)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a chaos run's output directory")
    parser.add_argument("--gap-s", type=float, default=DEFAULT_GAP_S)
    parser.add_argument("--examples", type=int, default=3, help="samples shown per kind")
    args = parser.parse_args(argv)
    return explain(args.run_dir.expanduser(), args.gap_s, args.examples)


if __name__ == "__main__":
    sys.exit(main())
