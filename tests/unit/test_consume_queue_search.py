"""The consume queue's readable end: `count_ending_at_or_before` (issue 38, the pull path).

Every pull asks it of confirmOffset, which trails the queue's end by a commit round at
most, so it searches from the end. The tests hold it to the plain bisection's answer (a
hypothesis property over thresholds, and real queue files across file boundaries with a
moved min offset) and bound how many entries it reads when the answer is at the end: the
whole-queue bisection read ~log2(n) entries, one pread each, on every pull.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.store.consume_queue import CQ_ENTRY, ConsumeQueue


@given(st.integers(0, 10_000), st.data())
def test_the_search_from_the_end_agrees_with_the_bisection(low: int, data: st.DataObject) -> None:
    high = data.draw(st.integers(low, low + 5_000))
    answer = data.draw(st.integers(low, high))
    calls: list[int] = []

    def pred(i: int) -> bool:
        assert low <= i < high, f"asked about {i} outside [{low}, {high})"
        calls.append(i)
        return i >= answer

    assert ConsumeQueue._first_index_from_end(low, high, pred) == answer
    assert ConsumeQueue._first_index(low, high, lambda i: i >= answer) == answer
    # Gallop back ~log2(d) probes, then bisect the last gap of at most d: d from the end.
    from_end = high - answer
    assert len(calls) <= 2 * math.ceil(math.log2(from_end + 1)) + 2, (from_end, calls)


def _queue(tmp_path: Path, first_index: int, sizes: list[int], per_file: int) -> ConsumeQueue:
    cq = ConsumeQueue(tmp_path / "cq", "T", 0, per_file)
    offset = 1_000
    data = bytearray()
    for size in sizes:
        data += CQ_ENTRY.pack(offset, size, 0)
        offset += size + 37  # other queues' records in between
    cq.append(first_index, bytes(data))
    return cq


def _brute(cq: ConsumeQueue, physical_offset: int) -> int:
    for i in range(cq.min_offset, cq.max_offset):
        offset, size, _ = cq.entry(i)
        if offset + size > physical_offset:
            return i
    return cq.max_offset


@pytest.mark.parametrize("first_index", [0, 5, 23])
def test_real_queue_files_give_the_bisection_answer_at_every_offset(
    tmp_path: Path, first_index: int
) -> None:
    sizes = [100 + (i * 37) % 300 for i in range(60)]
    cq = _queue(tmp_path, first_index, sizes, per_file=7)  # several files, a partial first
    last_offset, last_size, _ = cq.entry(cq.max_offset - 1)
    ends = [sum(cq.entry(i)[:2]) for i in range(cq.min_offset, cq.max_offset)]
    probes = {0, 999, 1_000, last_offset + last_size, last_offset + last_size + 10**9}
    probes |= {e + d for e in ends for d in (-1, 0, 1)}
    for physical_offset in sorted(probes):
        assert cq.count_ending_at_or_before(physical_offset) == _brute(cq, physical_offset), (
            physical_offset
        )


def test_a_pull_at_the_readable_end_reads_one_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cq = _queue(tmp_path, 0, [256] * 5_000, per_file=1_000)
    reads: list[int] = []
    entry = cq.entry

    def counted(index: int) -> tuple[int, int, int]:
        reads.append(index)
        return entry(index)

    monkeypatch.setattr(cq, "entry", counted)
    last_offset, last_size, _ = entry(cq.max_offset - 1)
    assert cq.count_ending_at_or_before(last_offset + last_size) == 5_000
    assert reads == [4_999]
    reads.clear()
    # confirmOffset three records behind the end (a commit round in flight).
    third_last_end = sum(entry(4_996)[:2])
    assert cq.count_ending_at_or_before(third_last_end) == 4_997
    assert len(reads) <= 5, reads  # the whole-queue bisection: 13
