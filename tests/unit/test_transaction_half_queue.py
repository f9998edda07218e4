"""The half queue's pure decisions (transaction/half_queue.py) against a naive reference,
with hypothesis (issue 34 item 2; RocketMQ's TransactionalMessageServiceImpl.check):

- a half message is resolved exactly when a "d" op record read back names it, whatever the
  order of op records and halves (an op may name a half not read yet) and however often an
  END is repeated (`begin_end` claims a half once until its op is read back or released);
- a check round checks every unresolved half past its immunity with no end or check in
  flight, numbering the check as the "c" op records read so far + 1, and discards those
  checked transactionCheckMax times — never a resolved or too young one;
- the progress only grows, and a new master that starts from it and reads both queues from
  there holds the same pending halves with the same check counts (what survives a failover).

On the old code (08e4c59) the package does not exist (a transactional send was refused).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.transaction.half_queue import HalfQueue, Progress
from brokergroup_broker.transaction.rules import (
    CHECK_TAG,
    REMOVE_TAG,
    TransactionRules,
    check_immunity_ms,
    half_send,
    op_body,
    op_offsets,
)

IMMUNITY = 6_000


@dataclass
class Log:
    """The two queues as records (what a new master would read again)."""

    halves: list[int] = field(default_factory=list)  # born_ms per half offset
    ops: list[tuple[str, list[int]]] = field(default_factory=list)


def replay(log: Log, progress: Progress) -> HalfQueue:
    """A new master: from `progress`, every record of both queues from there."""
    queue = HalfQueue(progress)
    for offset in range(progress.half, len(log.halves)):
        queue.add_half(offset, log.halves[offset], IMMUNITY)
    for op_offset in range(progress.op, len(log.ops)):
        tag, names = log.ops[op_offset]
        queue.add_op(op_offset, tag, names)
    return queue


def naive_resolved(log: Log) -> set[int]:
    return {h for tag, names in log.ops if tag == REMOVE_TAG for h in names}


def naive_checks(log: Log, half: int) -> int:
    return sum(names.count(half) for tag, names in log.ops if tag == CHECK_TAG)


# An event: ("half", born_ms) | ("op", tag, names as fractions of the halves so far + ahead)
events = st.lists(
    st.one_of(
        st.tuples(st.just("half"), st.integers(0, 20_000)),
        st.tuples(
            st.just("op"),
            st.sampled_from([REMOVE_TAG, CHECK_TAG, "x"]),
            st.lists(st.integers(0, 40), max_size=4),
        ),
        st.tuples(st.just("round"), st.integers(0, 30_000)),
        st.tuples(st.just("end"), st.integers(0, 40)),
        st.tuples(st.just("checkpoint")),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(events, st.integers(1, 3))
def test_decisions_match_a_naive_reference_and_survive_a_restart(
    script: list[tuple[object, ...]], check_max: int
) -> None:
    log = Log()
    queue = HalfQueue(Progress())
    claimed: set[int] = set()
    progresses = [queue.progress()]
    for event in script:
        kind = event[0]
        if kind == "half":
            born = int(event[1])  # type: ignore[call-overload]
            queue.add_half(len(log.halves), born, IMMUNITY)
            log.halves.append(born)
        elif kind == "op":
            tag, names = str(event[1]), list(event[2])  # type: ignore[call-overload]
            queue.add_op(len(log.ops), tag, names)
            log.ops.append((tag, names))
            if tag == REMOVE_TAG:
                claimed -= set(names)
        elif kind == "end":
            half = int(event[1])  # type: ignore[call-overload]
            resolved = half in naive_resolved(log) or half < progresses[-1].half
            got = queue.begin_end(half)
            assert got == (not resolved and half not in claimed), (half, resolved, claimed)
            if got:
                claimed.add(half)
        elif kind == "round":
            now = int(event[1])  # type: ignore[call-overload]
            busy = set(queue.checking) | set(queue.ending)
            decided = queue.check_round(now, check_max)
            done = naive_resolved(log)
            expected_check, expected_discard = [], []
            for half, born in enumerate(log.halves):
                if half in done or half in busy or half < progresses[0].half:
                    continue
                if 0 <= now - born <= IMMUNITY:
                    continue
                count = naive_checks(log, half)
                if count >= check_max:
                    expected_discard.append(half)
                else:
                    expected_check.append((half, count + 1))
            assert decided.check == expected_check
            assert decided.discard == expected_discard
            claimed |= set(decided.discard)
            # Checks in flight whose op is lost (refused before its append) are released.
            for half, _ in decided.check:
                queue.release(half)
        else:
            progresses.append(queue.progress())
        # Resolution is exactly the "d" records read back, for every half read.
        done = naive_resolved(log)
        for half in range(len(log.halves)):
            assert queue.resolved(half) == (half in done), half
    progresses.append(queue.progress())
    for before, after in itertools.pairwise(progresses):
        assert before.half <= after.half and before.op <= after.op
    # A new master from the last progress holds the same pending halves and counts.
    fresh = replay(log, progresses[-1])
    assert list(fresh.pending) == list(queue.pending)
    assert {h: p.checks for h, p in fresh.pending.items()} == {
        h: p.checks for h, p in queue.pending.items()
    }
    assert {h: naive_checks(log, h) for h in queue.pending} == {
        h: p.checks for h, p in queue.pending.items()
    }


def test_an_op_record_may_come_before_its_half_is_read() -> None:
    queue = HalfQueue(Progress())
    queue.add_op(0, CHECK_TAG, [1])
    queue.add_op(1, REMOVE_TAG, [2])
    assert queue.begin_end(2) is False  # resolved already, though not read yet
    queue.add_half(0, 0, IMMUNITY)
    queue.add_half(1, 0, IMMUNITY)
    queue.add_half(2, 0, IMMUNITY)
    assert list(queue.pending) == [0, 1] and queue.pending[1].checks == 1
    assert queue.progress() == Progress(0, 0)
    queue.add_op(2, REMOVE_TAG, [0])
    assert queue.progress() == Progress(1, 0)  # op 0 ("c" of half 1) is still needed
    queue.add_op(3, REMOVE_TAG, [1])
    assert queue.progress() == Progress(3, 4)


def test_discard_after_check_max_checks_and_never_before_immunity() -> None:
    queue = HalfQueue(Progress())
    queue.add_half(0, born_ms=1_000, immunity_ms=IMMUNITY)
    assert queue.check_round(7_000, 2).check == []  # exactly the immunity: not yet
    for n, op in ((1, 0), (2, 1)):
        assert queue.check_round(7_001 + n, 2).check == [(0, n)]
        assert queue.check_round(7_001 + n, 2).check == []  # in flight: not twice
        queue.add_op(op, CHECK_TAG, [0])
    decided = queue.check_round(9_000, 2)
    assert (decided.check, decided.discard) == ([], [0])
    assert queue.begin_end(0) is False  # the discard holds it
    queue.add_op(2, REMOVE_TAG, [0])
    assert queue.resolved(0) and queue.progress() == Progress(1, 3)


def test_clock_skew_checks_a_half_born_in_the_future() -> None:
    queue = HalfQueue(Progress())
    queue.add_half(0, born_ms=10_000, immunity_ms=IMMUNITY)
    assert queue.check_round(9_999, 15).check == [(0, 1)]  # born 1 ms ahead: checked


def test_rules_half_send_and_op_bodies() -> None:
    half = half_send("Orders", 2, {"PGROUP": "pg", "UNIQ_KEY": "U", "TRAN_MSG": "true"}, 0x4 | 1)
    assert (half.topic, half.queue_id, half.sys_flag) == ("RMQ_SYS_TRANS_HALF_TOPIC", 0, 1)
    assert half.properties == {
        "PGROUP": "pg", "UNIQ_KEY": "U", "TRAN_MSG": "true", "__transactionId__": "U",
        "REAL_TOPIC": "Orders", "REAL_QID": "2",
    }  # fmt: skip
    assert op_body([3, 10]) == b"3,10,"
    assert op_offsets(b"3,x,10,") == [3, 10]
    rules = TransactionRules(timeout_ms=6_000)
    assert check_immunity_ms({}, rules) == 6_000
    assert check_immunity_ms({"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}, rules) == 60_000
    assert check_immunity_ms({"CHECK_IMMUNITY_TIME_IN_SECONDS": "1"}, rules) == 6_000
