"""Held pulls woken by arrival (store/arrivals.py; RocketMQ's PullRequestHoldService woken by
NotifyMessageArrivingListener): a hold wakes when its queue's readable end moves, never
for another queue, once; a cancelled hold leaves nothing behind. The store test drives the
real store: records become readable when confirmOffset covers them (DESIGN.md §3.3)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.broker_settings import store_config_of
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.store import MessageStore
from brokergroup_broker.store.arrivals import Arrivals
from brokergroup_broker.store.message import MessageInput

HOST = ("127.0.0.1", 10911)


class Woken:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_a_hold_wakes_once_its_queues_record_is_readable() -> None:
    arrivals = Arrivals()
    woken = Woken()
    arrivals.hold("T", 0, woken)
    arrivals.appended([("T", 0)], 0, 100, 100)
    assert arrivals.advance(99) == 0 and woken.count == 0  # appended, not yet confirmed
    assert arrivals.advance(100) == 1 and woken.count == 1
    assert len(arrivals) == 0 and arrivals.pending_ranges() == 0
    arrivals.appended([("T", 0)], 100, 200, 200)
    arrivals.advance(200)
    assert woken.count == 1  # one-shot: a woken pull holds again if it wants more


def test_another_queue_moving_wakes_no_one() -> None:
    arrivals = Arrivals()
    woken = Woken()
    arrivals.hold("T", 1, woken)
    arrivals.hold("U", 0, woken)
    arrivals.appended([("T", 0)], 0, 100, 100)
    assert arrivals.advance(100) == 0
    assert woken.count == 0 and len(arrivals) == 2


def test_a_record_appended_before_the_hold_wakes_it_when_confirmed() -> None:
    """The race a timer hid: the pull read before confirmOffset covered the record."""
    arrivals = Arrivals()
    arrivals.appended([("T", 0)], 0, 100, 100)
    woken = Woken()
    arrivals.hold("T", 0, woken)
    arrivals.advance(100)
    assert woken.count == 1


def test_a_cancelled_hold_leaves_nothing_and_is_never_called() -> None:
    arrivals = Arrivals()
    woken = Woken()
    held = arrivals.hold("T", 0, woken)
    other = arrivals.hold("T", 0, woken)
    held.cancel()
    held.cancel()  # idempotent (the connection closed after a timeout, say)
    assert len(arrivals) == 1
    other.cancel()
    assert len(arrivals) == 0 and not arrivals._holds
    arrivals.appended([("T", 0)], 0, 100, 100)
    arrivals.advance(100)
    assert woken.count == 0
    assert arrivals.wake_all() == 0


def test_many_holds_only_the_moved_queue_wakes() -> None:
    arrivals = Arrivals()
    woken = {q: Woken() for q in range(100)}
    for queue_id, callback in woken.items():
        for _ in range(100):
            arrivals.hold("T", queue_id, callback)
    assert len(arrivals) == 10_000
    arrivals.appended([("T", 7)], 0, 50, 50)
    assert arrivals.advance(50) == 100
    assert woken[7].count == 100
    assert sum(w.count for w in woken.values()) == 100
    assert len(arrivals) == 9_900


def test_a_partly_readable_run_wakes_again_at_the_next_advance() -> None:
    arrivals = Arrivals()
    first, second = Woken(), Woken()
    arrivals.appended([("T", 0)], 0, 100, 300)  # three records: ends 100, 200, 300
    arrivals.hold("T", 0, first)
    arrivals.advance(150)
    assert first.count == 1
    arrivals.hold("T", 0, second)  # the consumer read record 1 and holds for record 2
    arrivals.advance(200)
    assert second.count == 1
    assert arrivals.pending_ranges() == 1
    arrivals.advance(300)
    assert arrivals.pending_ranges() == 0


def test_consecutive_runs_of_one_queue_merge_and_interleaved_queues_wake_together() -> None:
    arrivals = Arrivals()
    arrivals.appended([("T", 0)], 0, 10, 10)
    arrivals.appended([("T", 0)], 10, 20, 20)
    assert arrivals.pending_ranges() == 1
    # One replicated batch with records of two queues interleaved: one range.
    arrivals.appended([("T", 1), ("T", 2)], 20, 30, 60)
    a, b = Woken(), Woken()
    arrivals.hold("T", 1, a)
    arrivals.hold("T", 2, b)
    arrivals.advance(30)
    assert (a.count, b.count) == (1, 1)


def test_a_cut_log_drops_the_ranges_past_the_cut() -> None:
    arrivals = Arrivals()
    arrivals.appended([("T", 0)], 0, 100, 100)
    arrivals.appended([("T", 1)], 100, 200, 200)
    # Truncated to 100, then the new master's records arrive from there.
    arrivals.appended([("T", 2)], 100, 150, 150)
    woken = Woken()
    arrivals.hold("T", 2, woken)
    arrivals.advance(150)
    assert woken.count == 1 and arrivals.pending_ranges() == 0


def test_too_many_ranges_merge_into_one_that_wakes_everyone() -> None:
    arrivals = Arrivals(max_ranges=2)
    for i in range(3):
        arrivals.appended([("T", i)], i * 10, i * 10 + 10, i * 10 + 10)
    assert arrivals.pending_ranges() == 1
    woken = Woken()
    arrivals.hold("U", 0, woken)
    arrivals.advance(5)
    assert woken.count == 0
    arrivals.advance(10)
    assert woken.count == 1


def test_wake_all_wakes_every_hold_once() -> None:
    arrivals = Arrivals()
    woken = Woken()
    for q in range(5):
        arrivals.hold("T", q, woken)
    assert arrivals.wake_all() == 5 and woken.count == 5 and len(arrivals) == 0


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.lists(st.integers(0, 3), min_size=1, max_size=4)),
            st.tuples(st.just("hold"), st.integers(0, 3)),
            st.tuples(st.just("advance"), st.integers(0, 60)),
        ),
        max_size=40,
    )
)
def test_no_readable_record_leaves_its_queues_hold_asleep(steps: list[tuple[str, object]]) -> None:
    """Against a naive reference: after an advance to R, no hold on a queue is still
    asleep if a record of that queue ending in (R when it held, R] exists."""
    arrivals = Arrivals(max_ranges=4)
    records: list[tuple[int, int]] = []  # (queue, end), log order
    readable = 0
    end = 0
    holds: list[tuple[int, int, Woken]] = []  # (queue, readable when held, woken)
    for step, arg in steps:
        if step == "append":
            assert isinstance(arg, list)
            start = end
            for queue in arg:  # one dispatch call: records of these queues in log order
                end += 10
                records.append((queue, end))
            arrivals.appended(dict.fromkeys(("T", q) for q in arg), start, start + 10, end)
        elif step == "hold":
            assert isinstance(arg, int)
            woken = Woken()
            arrivals.hold("T", arg, woken)
            holds.append((arg, readable, woken))
        else:
            assert isinstance(arg, int)
            readable = max(readable, min(end, readable + arg))
            arrivals.advance(readable)
            for queue, held_at, woken in holds:
                due = any(q == queue and held_at < e <= readable for q, e in records)
                assert woken.count <= 1
                assert not due or woken.count == 1, (queue, held_at, readable, records)


def test_the_store_wakes_a_hold_when_confirm_offset_covers_the_record(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path / "store", store_config_of(BrokerConfig())) as store:
        woken, other = Woken(), Woken()
        store.arrivals.hold("TopicA", 0, woken)
        store.arrivals.hold("TopicA", 1, other)
        result = store.put_messages([MessageInput("TopicA", 0, b"body")], HOST, 1)
        assert woken.count == 0  # appended, not readable until confirmed
        store.set_confirm_offset(result.end_offset - 1)
        assert woken.count == 0
        store.set_confirm_offset(result.end_offset)
        assert (woken.count, other.count) == (1, 0)
        store.truncate(0)  # a cut wakes every hold: a pull past the cut answers OFFSET_MOVED
        assert other.count == 1 and len(store.arrivals) == 0


def test_a_sync_flush_slave_wakes_a_hold_when_its_fsync_covers_a_confirmed_record(
    tmp_path: Path,
) -> None:
    """On SYNC_FLUSH a record below confirmOffset is readable once durable: a slave's
    master may confirm it before the slave's own fsync finishes."""
    with (
        MessageStore.open(tmp_path / "master", store_config_of(BrokerConfig())) as master,
        MessageStore.open(tmp_path / "slave", store_config_of(BrokerConfig())) as slave,
    ):
        result = master.put_messages([MessageInput("TopicA", 0, b"body")], HOST, 1)
        woken = Woken()
        slave.arrivals.hold("TopicA", 0, woken)
        data = master.read_bytes(0, result.end_offset)
        slave.append_replicated(0, data, flush=False)
        slave.set_confirm_offset(result.end_offset)  # the master's word, ahead of our fsync
        assert woken.count == 0 and slave.flushed_offset < result.end_offset
        slave.flush()
        slave.flushed_moved()
        assert woken.count == 1
