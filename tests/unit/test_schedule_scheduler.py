"""The pure scheduler of one schedule queue (schedule/scheduler.py), driven by random
histories of stores, reads, clock moves, re-puts that succeed or fail, checkpoints and
crashes (a restart from the last persisted checkpoint, in-flight re-puts lost):

- it never hands out an entry before its due time;
- every checkpoint's low / scan / watermark are ≥ the last one's, across restarts;
- an entry a persisted checkpoint says is delivered was acknowledged before it (a restart
  loses nothing), and after a restart only entries acknowledged after the last checkpoint
  (or never) are handed out again (duplicates only where at-least-once allows);
- once time passes every due time and the re-puts succeed, every entry was delivered.

On the old code (08e4c59) the module does not exist (ImportError): a delayed send was
refused MESSAGE_ILLEGAL.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.schedule.scheduler import (
    Progress,
    QueueSchedule,
    due_of,
    offset_of,
)


@dataclass
class World:
    now: int = 1_000_000
    dues: list[int] = field(default_factory=list)  # the queue: offset -> due
    acked: set[int] = field(default_factory=set)
    acked_since_checkpoint: set[int] = field(default_factory=set)
    saved: Progress = field(default_factory=Progress)
    deliveries: list[tuple[int, int]] = field(default_factory=list)  # (offset, at)
    restarted_covered: set[int] = field(default_factory=set)


def _read_all(world: World, queue: QueueSchedule, upto: int) -> None:
    while queue.cursor < min(upto, len(world.dues)):
        queue.ingest(queue.cursor, world.dues[queue.cursor])


def _check_checkpoint(world: World, progress: Progress) -> None:
    old = world.saved
    assert progress.low >= old.low and progress.scan >= old.scan
    assert progress.watermark_ms >= old.watermark_ms
    assert progress.low <= progress.scan
    for offset, due in enumerate(world.dues):
        if progress.covers(offset, due):
            assert offset in world.acked, (offset, due, progress)
    world.saved = progress
    world.acked_since_checkpoint = set()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("store"), st.integers(-3_000, 20_000)),
        st.tuples(st.just("read"), st.integers(0, 8)),
        st.tuples(st.just("tick"), st.integers(0, 5_000)),
        st.tuples(st.just("take"), st.integers(1, 6)),
        st.tuples(st.just("ack"), st.booleans()),
        st.tuples(st.just("checkpoint"), st.just(0)),
        st.tuples(st.just("crash"), st.just(0)),
    ),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(ops)
def test_never_early_nothing_lost_progress_monotone_restart_delivers_the_rest(
    history: list[tuple[str, int]],
) -> None:
    world = World()
    queue = QueueSchedule(world.saved)
    in_flight: list[int] = []
    read_to = 0
    for op, arg in history:
        if op == "store":
            world.dues.append(world.now + arg)
        elif op == "read":
            read_to = queue.cursor + arg
            _read_all(world, queue, read_to)
        elif op == "tick":
            world.now += arg
        elif op == "take":
            for entry in queue.take_due(world.now, arg):
                assert due_of(entry) <= world.now, "handed out before its due time"
                assert due_of(entry) == world.dues[offset_of(entry)]
                world.deliveries.append((offset_of(entry), world.now))
                in_flight.append(entry)
        elif op == "ack" and in_flight:
            entry = in_flight.pop(0)
            if arg:
                queue.delivered(entry)
                world.acked.add(offset_of(entry))
                world.acked_since_checkpoint.add(offset_of(entry))
            else:
                queue.retry(entry)
        elif op == "checkpoint":
            _check_checkpoint(world, queue.checkpoint(world.now))
        elif op == "crash":
            # What was acknowledged since the checkpoint may be delivered again.
            queue = QueueSchedule(world.saved)
            in_flight = []
            _read_all(world, queue, len(world.dues))
            for offset, due in enumerate(world.dues):
                if world.saved.covers(offset, due):
                    world.restarted_covered.add(offset)
    # Run to the end: time passes every due time and every re-put succeeds.
    for entry in in_flight:
        queue.delivered(entry)
        world.acked.add(offset_of(entry))
    _read_all(world, queue, len(world.dues))
    world.now = max([world.now, *world.dues])
    while entries := queue.take_due(world.now, 10):
        for entry in entries:
            world.deliveries.append((offset_of(entry), world.now))
            queue.delivered(entry)
            world.acked.add(offset_of(entry))
    _check_checkpoint(world, queue.checkpoint(world.now))
    delivered = {offset for offset, _ in world.deliveries}
    assert delivered | world.restarted_covered >= set(range(len(world.dues)))
    assert set(range(len(world.dues))) <= world.acked
    assert queue.pending == 0
    final = queue.checkpoint(world.now)
    assert final.low == len(world.dues)  # every entry below the low-water mark


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2_000, 10_000), min_size=1, max_size=60), st.data())
def test_a_restart_redelivers_only_what_was_acknowledged_after_the_checkpoint(
    deltas: list[int], data: st.DataObject
) -> None:
    now = 5_000_000
    queue = QueueSchedule(Progress())
    dues = []
    for delta in deltas:
        dues.append(now + delta)
        queue.ingest(len(dues) - 1, dues[-1])
        now += data.draw(st.integers(0, 300))
    acked: set[int] = set()
    for entry in queue.take_due(now, len(dues)):
        queue.delivered(entry)
        acked.add(offset_of(entry))
    saved = queue.checkpoint(now)
    later = now + data.draw(st.integers(0, 10_000))
    after: set[int] = set()
    for entry in queue.take_due(later, len(dues)):
        queue.delivered(entry)
        after.add(offset_of(entry))
    restarted = QueueSchedule(saved)
    for offset in range(restarted.cursor, len(dues)):  # a restart reads from the low mark
        restarted.ingest(offset, dues[offset])
    again = {offset_of(e) for e in restarted.take_due(later, len(dues))}
    assert again <= after  # nothing acknowledged before the checkpoint comes back
    assert again | acked >= after | acked  # and nothing due is missing
    assert all(dues[o] > later for o in range(len(dues)) if o not in acked | after)


def test_the_low_water_mark_waits_for_a_long_timer_and_the_scan_covers_the_rest() -> None:
    queue = QueueSchedule(Progress())
    queue.ingest(0, 1_000_000)  # a timer due much later
    for offset in range(1, 5):
        queue.ingest(offset, 100 + offset)
    delivered = queue.take_due(200, 10)
    assert [offset_of(e) for e in delivered] == [1, 2, 3, 4]
    for entry in delivered:
        queue.delivered(entry)
    assert queue.checkpoint(200) == Progress(low=0, scan=5, watermark_ms=200)
    restarted = QueueSchedule(Progress(low=0, scan=5, watermark_ms=200))
    for offset, due in enumerate([1_000_000, 101, 102, 103, 104]):
        restarted.ingest(offset, due)
    assert restarted.take_due(999_999, 10) == []
    assert [offset_of(e) for e in restarted.take_due(1_000_000, 10)] == [0]


def test_an_entry_due_on_arrival_holds_the_scan_until_it_is_delivered() -> None:
    queue = QueueSchedule(Progress())
    queue.ingest(0, 500)
    (first,) = queue.take_due(600, 10)
    queue.delivered(first)
    assert queue.checkpoint(1_000) == Progress(1, 1, 1_000)
    queue.ingest(1, 900)  # stored late: due before the watermark
    assert queue.checkpoint(1_100) == Progress(1, 1, 1_000)
    (late,) = queue.take_due(1_100, 10)
    assert queue.checkpoint(1_100) == Progress(1, 1, 1_000)  # in flight: not yet
    queue.delivered(late)
    assert queue.checkpoint(1_200) == Progress(2, 2, 1_200)
