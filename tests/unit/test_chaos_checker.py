"""The chaos checker (brokergroup_cli/chaos/checker.py) on histories built to
hold exactly one known defect: hypothesis builds a valid history (clients
sending keys in order to their own queues, outcomes ok / failed / unknown,
read back in log order), then one defect is planted — a lost acknowledged
key, a second copy, a read of a failed send, a key never sent, two keys of
one client swapped, a consumer shown a record the final log does not hold, a
body other than the one sent, a replica that differs from the final master —
and the checker must report exactly that key, and
nothing on the clean history. A retried send settles as failed only if every
attempt failed. Unavailability is checked on hand-built timelines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_cli.chaos.checker import (
    FAILED,
    INDETERMINATE,
    OK,
    FaultWindow,
    Findings,
    Operation,
    ReadRecord,
    accumulate,
    check,
    percentile,
    reused_offsets,
    settle,
    unavailability,
)


@dataclass
class World:
    operations: list[Operation]
    read_back: list[ReadRecord]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """Clients c0..cN each send to queue N; ok sends are read back in order,
    unknown ones maybe (at least once), failed ones never."""
    clients = draw(st.integers(1, 3))
    operations: list[Operation] = []
    read_back: list[ReadRecord] = []
    t = 0.0
    for c in range(clients):
        offset = 0
        for seq in range(draw(st.integers(1, 12))):
            outcome = draw(st.sampled_from([OK, OK, OK, FAILED, INDETERMINATE]))
            key = f"c{c}-{seq}"
            landed = outcome == OK or (outcome == INDETERMINATE and draw(st.booleans()))
            operations.append(
                Operation(f"c{c}", seq, key, t, t + 0.001, outcome,
                          c if outcome == OK else None, offset if outcome == OK else None)
            )  # fmt: skip
            if landed:
                read_back.append(ReadRecord(key, c, offset))
                offset += 1
            t += 0.01
    return World(operations, read_back)


def _clean(findings: object) -> bool:
    f = findings
    return not (
        f.lost or f.duplicated or f.unexpected or f.misplaced or f.order_violations  # type: ignore[attr-defined]
    )


@settings(max_examples=200)
@given(worlds())
def test_a_consistent_history_has_no_findings(world: World) -> None:
    assert _clean(check(world.operations, world.read_back, []))


@settings(max_examples=200)
@given(worlds(), st.data())
def test_each_planted_defect_is_reported_exactly(world: World, data: st.DataObject) -> None:
    acked = [op for op in world.operations if op.outcome == OK]
    failed = [op for op in world.operations if op.outcome == FAILED]
    read = list(world.read_back)
    if acked:
        victim = data.draw(st.sampled_from(acked))
        without = [r for r in read if r.key != victim.key]
        f = check(world.operations, without, [])
        assert f.lost == [victim.key] and not f.duplicated and not f.order_violations
        copy = next(r for r in read if r.key == victim.key)
        f = check(world.operations, [*read, ReadRecord(copy.key, copy.queue_id, 999)], [])
        assert f.duplicated == [victim.key] and not f.lost
    if failed:
        ghost = data.draw(st.sampled_from(failed))
        f = check(world.operations, [*read, ReadRecord(ghost.key, 0, 998)], [])
        assert f.duplicated == [ghost.key]
    f = check(world.operations, [*read, ReadRecord("never-sent", 0, 997)], [])
    assert f.unexpected == ["never-sent"] and f.lost == [] and f.duplicated == []
    # Swap two acknowledged keys of one client in its queue: one order violation.
    by_client: dict[str, list[ReadRecord]] = {}
    for r in read:
        op = next(o for o in world.operations if o.key == r.key)
        if op.outcome == OK:
            by_client.setdefault(op.client, []).append(r)
    pairs = [rs for rs in by_client.values() if len(rs) >= 2]
    if pairs:
        rs = data.draw(st.sampled_from(pairs))
        a, b = rs[0], rs[1]
        swapped = [
            ReadRecord(b.key, a.queue_id, a.queue_offset) if r is a
            else ReadRecord(a.key, b.queue_id, b.queue_offset) if r is b
            else r
            for r in read
        ]  # fmt: skip
        f = check(world.operations, swapped, [])
        assert f.order_violations == [(a.queue_id, a.key, b.key)]
        assert sorted(f.misplaced) == sorted([a.key, b.key])  # acknowledged at other offsets


def _op(seq: int, start: float, end: float, outcome: str = OK) -> Operation:
    return Operation("c0", seq, f"k{seq}", start, end, outcome, 0, seq)


def test_unavailability_runs_from_the_first_bad_invoke_to_the_next_good_completion() -> None:
    ops = [
        _op(0, 0.0, 0.01),
        _op(1, 1.0, 1.5),  # slow (> 0.25 s): the stretch starts at its invoke
        _op(2, 1.5, 1.6, INDETERMINATE),
        _op(3, 1.7, 1.8, FAILED),
        _op(4, 1.9, 1.95),  # first good: ends the stretch at 1.95
        _op(5, 2.0, 2.01),
        _op(6, 5.5, 6.0, INDETERMINATE),  # outside any window (and its grace), never recovered
    ]
    stretches = unavailability(ops, 0.25)
    assert [(u.start_s, u.end_s) for u in stretches] == [(1.0, 1.95), (5.5, 6.0)]
    windows = [FaultWindow("kill-master", 0.9, 1.2), FaultWindow("pause-master", 3.0, 4.0)]
    f = check(ops, [ReadRecord(f"k{i}", 0, i) for i in (0, 1, 4, 5)], windows, slow_s=0.25)
    assert [(r.window.fault, round(r.unavailable_s, 3)) for r in f.faults] == [
        ("kill-master", 0.95),
        ("pause-master", 0.0),
    ]
    assert [(u.start_s, u.end_s) for u in f.unexpected_unavailability] == [(5.5, 6.0)]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 99) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([0.5], 99) == 0.5


def test_a_send_in_flight_when_the_fault_began_charges_the_fault_not_the_quiet_time() -> None:
    # Seen in a long run: the send invoked 3 ms before the window started was
    # the first one the fault hurt; its stretch was reported as unexpected
    # unavailability and the fault's own unavailability as much shorter.
    ops = [
        _op(0, 0.0, 0.01),
        _op(1, 9.997, 10.4),  # in flight at the fault (10.0): slow
        _op(2, 10.4, 10.5, INDETERMINATE),
        _op(3, 11.6, 11.61),  # recovered
        _op(4, 30.0, 30.5),  # slow long after every window: unexpected
        _op(5, 30.5, 30.51),
    ]
    windows = [FaultWindow("fill-master-disk", 10.0, 13.0), FaultWindow("kill-slave", 20.0, 23.0)]
    f = check(ops, [ReadRecord(f"k{i}", 0, i) for i in (0, 1, 3, 4, 5)], windows, slow_s=0.25)
    assert [(r.window.fault, round(r.unavailable_s, 3)) for r in f.faults] == [
        ("fill-master-disk", 1.613),
        ("kill-slave", 0.0),
    ]
    assert [(u.start_s, u.end_s) for u in f.unexpected_unavailability] == [(30.0, 30.51)]


def test_a_stretch_spanning_two_windows_belongs_to_the_first() -> None:
    ops = [_op(0, 0.0, 0.01), _op(1, 1.0, 9.0, INDETERMINATE), _op(2, 9.0, 9.01)]
    windows = [FaultWindow("pause-master", 1.0, 2.0), FaultWindow("kill-master", 5.0, 6.0)]
    f = check(ops, [ReadRecord(f"k{i}", 0, i) for i in (0, 2)], windows, slow_s=0.25)
    assert [round(r.unavailable_s, 3) for r in f.faults] == [8.01, 0.0]
    assert not f.unexpected_unavailability


@settings(max_examples=200)
@given(worlds(), st.data())
def test_a_read_the_final_log_took_back_is_reported_exactly(
    world: World, data: st.DataObject
) -> None:
    # What consumers read during the run: any subset of the final log is stable.
    seen = (
        data.draw(st.lists(st.sampled_from(world.read_back), unique=True))
        if world.read_back
        else []
    )
    assert _clean(check(world.operations, world.read_back, [], consumed=seen))
    op = data.draw(st.sampled_from(world.operations))
    at = data.draw(st.sampled_from(world.read_back)) if world.read_back else None
    if at is not None and at.key != op.key:
        # A consumer saw `op.key` where the final log holds another key.
        f = check(world.operations, world.read_back, [],
                  consumed=[*seen, ReadRecord(op.key, at.queue_id, at.queue_offset)])  # fmt: skip
        assert f.unstable_reads == [(at.queue_id, at.queue_offset, op.key)]
        assert not (f.lost or f.duplicated or f.unexpected or f.order_violations)
    # A consumer saw a record past the end of the final log (later truncated).
    f = check(world.operations, world.read_back, [],
              consumed=[*seen, ReadRecord(op.key, 7, 10_000)])  # fmt: skip
    assert f.unstable_reads == [(7, 10_000, op.key)] and not f.data_safe
    # A consumer read a key never sent: unexpected (and unstable: the log does not hold it).
    f = check(world.operations, world.read_back, [], consumed=[ReadRecord("ghost", 7, 10_001)])
    assert f.unexpected == ["ghost"] and f.unstable_reads == [(7, 10_001, "ghost")]


def test_findings_of_several_runs_add_up() -> None:
    first = check([_op(0, 0.0, 0.01)], [], [FaultWindow("kill-master", 0.0, 1.0)])
    second = check([_op(0, 0.0, 0.01), _op(1, 1.0, 1.01)], [ReadRecord("x", 0, 0)], [])
    total = Findings(operations=0, acknowledged=0, failed=0, indeterminate=0)
    for f in (first, second):
        accumulate(total, f)
    assert (total.operations, total.acknowledged) == (3, 3)
    assert total.lost == ["k0", "k0", "k1"] and total.unexpected == ["x"]
    assert [r.window.fault for r in total.faults] == ["kill-master"]


def test_a_send_in_flight_when_the_fault_hit_belongs_to_the_fault() -> None:
    """Invoked 10 ms before the injection, slowed by it: the fault's, not unexpected."""
    ops = [_op(0, 0.0, 0.01), _op(1, 0.99, 1.8), _op(2, 1.8, 1.81), _op(3, 9.0, 9.5)]
    f = check(ops, [], [FaultWindow("fill-master-disk", 1.0, 3.0)], slow_s=0.25)
    assert [round(r.unavailable_s, 3) for r in f.faults] == [0.82]
    assert [(u.start_s, u.end_s) for u in f.unexpected_unavailability] == [(9.0, 9.5)]


# -- Attempts: a retried send that failed last may still have been written ----------


def test_an_operation_is_failed_only_if_every_attempt_failed() -> None:
    assert settle([FAILED]) == FAILED
    assert settle([FAILED, FAILED, FAILED]) == FAILED
    assert settle([INDETERMINATE, FAILED]) == INDETERMINATE  # the first may be in the log
    assert settle([FAILED, INDETERMINATE]) == INDETERMINATE
    assert settle([INDETERMINATE, FAILED, OK]) == OK


def test_a_retried_send_read_back_after_an_indeterminate_attempt_is_not_a_duplicate() -> None:
    ops = [
        Operation("c0", 0, "k0", 0.0, 0.01, OK, 0, 0),
        Operation(
            "c0",
            1,
            "k1",
            0.1,
            2.5,
            settle([INDETERMINATE, FAILED]),
            attempts=(INDETERMINATE, FAILED),
        ),
        Operation("c0", 2, "k2", 2.6, 2.61, OK, 0, 2),
    ]
    f = check(ops, [ReadRecord("k0", 0, 0), ReadRecord("k1", 0, 1), ReadRecord("k2", 0, 2)], [])
    assert (f.failed, f.indeterminate) == (0, 1)
    assert f.duplicated == [] and f.data_safe


# -- Every replica, bodies included ------------------------------------------------


def _sent(key: str, crc: int, offset: int) -> Operation:
    return Operation(
        "c0", offset, key, offset * 0.1, offset * 0.1 + 0.01, OK, 0, offset, body_crc=crc
    )


def test_a_body_read_back_other_than_the_one_sent_is_corrupt() -> None:
    ops = [_sent("k0", 100, 0), _sent("k1", 101, 1)]
    master = [ReadRecord("k0", 0, 0, "t", 100, "m"), ReadRecord("k1", 0, 1, "t", 101, "m")]
    assert check(ops, master, []).data_safe
    bad = [master[0], ReadRecord("k1", 0, 1, "t", 999, "m")]
    f = check(ops, bad, [])
    assert f.corrupt == [("m", "k1")] and not f.lost and not f.data_safe


def test_a_replica_that_differs_from_the_final_master_is_reported_per_position() -> None:
    ops = [_sent(f"k{i}", 100 + i, i) for i in range(4)]
    master = [ReadRecord(f"k{i}", 0, i, "t", 100 + i, "m") for i in range(4)]
    same = [replace(r, replica="s1") for r in master]
    f = check(ops, master, [], replica_reads=same)
    assert f.replica_mismatches == [] and f.data_safe
    # s1 lost k3, holds another body for k1; s2 holds k2 where the master holds nothing.
    s1 = [same[0], replace(same[1], body_crc=7), same[2]]
    s2 = [replace(r, replica="s2") for r in master] + [ReadRecord("k2", 0, 4, "t", 102, "s2")]
    f = check(ops, master, [], replica_reads=[*s1, *s2], replicas_read=[("s3", "t")])
    assert f.replica_mismatches == [
        ("s1", "t", 0, 1, "k1: body crc 7, the master's 101"),
        ("s1", "t", 0, 3, "holds nothing; the master holds k3"),
        ("s2", "t", 0, 4, "holds k2; the master holds nothing here"),
        # s3 was read and served nothing: every position is missing there.
        ("s3", "t", 0, 0, "holds nothing; the master holds k0"),
        ("s3", "t", 0, 1, "holds nothing; the master holds k1"),
        ("s3", "t", 0, 2, "holds nothing; the master holds k2"),
        ("s3", "t", 0, 3, "holds nothing; the master holds k3"),
    ]
    assert f.corrupt == [("s1", "k1")]
    assert f.lost == [] and not f.data_safe
    # Another topic (a later phase's) is compared only with that topic's master log.
    other = [ReadRecord("k0", 0, 0, "u", 100, "s1")]
    f = check(
        ops, [*master, ReadRecord("k0", 0, 0, "u", 100, "m")], [], replica_reads=[*same, *other]
    )
    assert f.replica_mismatches == []


def test_a_send_that_needed_a_retry_counts_as_unavailable_however_fast() -> None:
    # Retries must not hide a failover: the first attempt of k1 failed (the master
    # died), its retry landed 0.1 s later. The stretch runs from k1's invoke to the
    # next send that succeeded at its first attempt, as it did before sends retried.
    ops = [
        _op(0, 0.0, 0.01),
        Operation("c0", 1, "k1", 1.0, 1.1, OK, 0, 1, attempts=(INDETERMINATE, OK)),
        Operation("c0", 2, "k2", 1.1, 1.12, OK, 0, 2, attempts=(OK,)),
    ]
    assert [(u.start_s, u.end_s) for u in unavailability(ops, 0.25)] == [(1.0, 1.12)]
    f = check(ops, [], [FaultWindow("kill-master", 0.99, 2.0)], slow_s=0.25)
    assert [round(r.unavailable_s, 3) for r in f.faults] == [0.12]


def _acked(client: str, seq: int, done_s: float, queue_offset: int, queue_id: int = 2) -> Operation:
    return Operation(client, seq, f"{client}-{seq}", done_s - 0.01, done_s, OK, queue_id,
                     queue_offset)  # fmt: skip


def test_a_queue_offset_acknowledged_for_two_keys_is_a_reused_offset() -> None:
    # RocketMQ's full run (seed 3701): a new master went on in queue 2 below offsets
    # already acknowledged, so p0-70234 got p1-69909's position.
    first, later = _acked("p1", 5, 1.0, 60960), _acked("p0", 9, 3.0, 60960)
    other = _acked("p0", 8, 2.0, 60961)
    findings = check([later, other, first], [ReadRecord(first.key, 2, 60960),
                     ReadRecord(other.key, 2, 60961), ReadRecord(later.key, 2, 60960)], [])  # fmt: skip
    assert findings.reused_offsets == [(2, 60960, "p1-5", "p0-9")]
    assert not findings.data_safe and not findings.lost
    # The same position in another queue, a retry of one key, a failed or unplaced send:
    # no reuse.
    assert reused_offsets([first, _acked("p2", 1, 4.0, 60960, queue_id=3)]) == []
    # A later phase of the run: its own topic on a fresh runtime, from offset 0 again.
    assert reused_offsets([first, replace(later, topic="ChaosTopic-a")]) == []
    assert reused_offsets([first, replace(first, complete_s=5.0, seq=6)]) == []
    assert reused_offsets([first, replace(later, outcome=FAILED, queue_id=None)]) == []
    assert reused_offsets([first, replace(later, queue_offset=None)]) == []


POSITIONED = st.tuples(
    st.sampled_from(["c0", "c1", "c2"]), st.integers(0, 2), st.integers(0, 3),
    st.floats(0, 10), st.sampled_from([OK, OK, FAILED, INDETERMINATE]),
)  # fmt: skip


@settings(max_examples=200)
@given(st.lists(POSITIONED, max_size=30), st.randoms())
def test_reused_offsets_name_each_later_key_at_a_position_whatever_the_input_order(
    specs: list[tuple[str, int, int, float, str]], rng: object
) -> None:
    ops = [
        Operation(c, seq, f"{c}-{seq}", t, t + 0.001 * seq, outcome,
                  q if outcome == OK else None, off if outcome == OK else None)
        for seq, (c, q, off, t, outcome) in enumerate(specs)
    ]  # fmt: skip
    found = reused_offsets(ops)
    shuffled = list(ops)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    assert reused_offsets(shuffled) == found
    # Brute force: at each position, every acked key other than the first acked there.
    expected = set()
    for op in ops:
        if op.outcome != OK:
            continue
        there = [o for o in ops if o.outcome == OK
                 and (o.queue_id, o.queue_offset) == (op.queue_id, op.queue_offset)]  # fmt: skip
        head = min(there, key=lambda o: (o.complete_s, o.client, o.seq))
        if head.key != op.key:
            expected.add((op.queue_id, op.queue_offset, head.key, op.key))
    assert found == sorted(expected)


def test_a_consumer_read_of_either_key_at_a_reused_offset_is_not_unstable() -> None:
    first, later = _acked("p1", 5, 1.0, 7), _acked("p0", 9, 3.0, 7)
    final = [ReadRecord(first.key, 2, 7), ReadRecord(later.key, 2, 7)]
    findings = check([first, later], final, [], consumed=final)
    assert findings.unstable_reads == [] and findings.reused_offsets == [(2, 7, "p1-5", "p0-9")]
    gone = check([first, later], final[1:], [], consumed=final)
    assert gone.unstable_reads == [(2, 7, "p1-5")] and gone.lost == ["p1-5"]
