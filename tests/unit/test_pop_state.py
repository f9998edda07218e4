"""The pure POP core (pop/state.py), by hypothesis over random runs of pops, acks, changed
invisible times, the clock, revives and restarts (a new master applying the records so far
from the revive low, with the consumer offsets saved):

- an acked message is never revived; a message is revived at most once per visibility
  window, and only after it;
- the consumer offset never passes a message popped and not yet done, and never moves back;
- FIFO: while a queue holds an invisible receipt nothing new of it is handed out;
- a restart holds the same receipts (offset, pop time, deadline) and the same next offset.

On the old code (b0939bf) brokergroup_broker.pop does not exist: the import fails.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.pop.records import Ack, CheckPoint, PopRecord, decode_record, encode_record
from brokergroup_broker.pop.state import AckCheck, PopState

KEY = ("g", "T", 0)
END = 40  # messages in the queue

ops = st.lists(
    st.one_of(
        st.tuples(st.just("pop"), st.integers(1, 5)),
        st.tuples(st.just("ack"), st.integers(0, 50)),
        st.tuples(st.just("change"), st.integers(0, 50)),
        st.tuples(st.just("time"), st.integers(1, 40)),
        st.tuples(st.just("revive"), st.integers(0, 3)),
        st.tuples(st.just("restart"), st.just(0)),
    ),
    max_size=60,
)


def _rebuild(log: list[tuple[int, PopRecord]], low: int, floor: int) -> PopState:
    state = PopState(max_in_flight_per_group=1000)
    for pos, record in log:
        if pos >= low:
            tag, body = encode_record(record)  # through the bytes the revive topic holds
            state.apply(decode_record(tag, body), pos, floor)
    return state


def _view(state: PopState) -> tuple[int, dict[int, tuple[int, int]]]:
    q = state.queues[KEY]
    return q.next, {o: (r.pop_time_ms, r.deadline_ms) for o, r in q.in_flight.items()}


@settings(max_examples=300, deadline=None)
@given(ops=ops, fifo=st.booleans())
def test_random_runs_keep_the_pop_invariants(ops: list[tuple[str, int]], fifo: bool) -> None:
    state = PopState(max_in_flight_per_group=1000)
    state.queue(KEY, 0)
    log: list[tuple[int, PopRecord]] = []
    now = 1_000
    acked: set[int] = set()
    reviving: list[int] = []
    revived_window: set[tuple[int, int]] = set()  # (offset, pop time) revived
    last_offset = 0

    def write(record: PopRecord) -> None:
        pos = len(log)
        log.append((pos, record))
        state.apply(record, pos)

    for op, arg in ops:
        q = state.queues[KEY]
        if op == "pop":
            if fifo and state.locked(KEY, now):
                continue  # the service hands out nothing of a locked queue
            if fifo:
                again = state.checkpoint_for_redelivery(KEY, now, 10, arg)
                if again is not None:
                    assert min(again.offsets) == min(q.in_flight)  # in order, lowest first
                    write(again)
                    continue
            n = min(arg, END - q.next)
            if n > 0:
                offsets = range(q.next, q.next + n)
                write(state.checkpoint_for_pop(KEY, offsets, q.next + n, now, 10, fifo=fifo))
        elif op in ("ack", "change") and q.in_flight:
            offset = sorted(q.in_flight)[arg % len(q.in_flight)]
            receipt = q.in_flight[offset]
            check = state.check(KEY, offset, receipt.pop_time_ms)
            if offset in q.reviving:
                assert check is AckCheck.STALE
                continue
            assert check is AckCheck.IN_FLIGHT
            if op == "ack":
                write(Ack(*KEY, (offset,)))
                acked.add(offset)
                assert state.check(KEY, offset, receipt.pop_time_ms) is AckCheck.DONE
            else:
                write(state.checkpoint_for_change(KEY, offset, now, 20))
                assert state.check(KEY, offset, receipt.pop_time_ms) in (
                    AckCheck.STALE, AckCheck.IN_FLIGHT,  # same pop time when now did not move
                )  # fmt: skip
        elif op == "time":
            now += arg
        elif op == "revive":
            for revival in state.due(now, 10):
                assert not fifo
                assert revival.offset not in acked
                assert revival.receipt.deadline_ms <= now
                window = (revival.offset, revival.receipt.pop_time_ms)
                assert window not in revived_window
                revived_window.add(window)
                reviving.append(revival.offset)
            for offset in reviving[:arg]:  # the re-put acknowledged: done
                write(Ack(*KEY, (offset,)))
            del reviving[:arg]
        elif op == "restart":
            saved_offset = q.consumer_offset
            before = _view(state)
            state = _rebuild(log, state.revive_low(len(log)), saved_offset)
            state.queue(KEY, saved_offset)
            assert _view(state) == before
            # A new master starts the unfinished revives over (at-least-once: a duplicate).
            revived_window = {w for w in revived_window if w[0] not in reviving}
            reviving = []
        q = state.queues[KEY]
        popped_not_done = set(q.in_flight)
        assert all(q.consumer_offset <= o for o in popped_not_done)
        assert q.consumer_offset >= last_offset
        last_offset = q.consumer_offset
        assert not (popped_not_done & acked)


def test_a_record_that_is_not_a_pop_record_is_refused() -> None:
    import pytest

    from brokergroup_broker.pop.records import RecordInvalid

    with pytest.raises(RecordInvalid):
        decode_record("ck", b'{"g":"g"}')
    with pytest.raises(RecordInvalid):
        decode_record("other", b'{"g":"g","t":"T","q":0,"o":[]}')
    ck = CheckPoint("g", "T", 1, (3, 4), (0, 1), 5, 7, 9, True)
    assert decode_record(*encode_record(ck)) == ck
