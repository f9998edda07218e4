"""The pure retention policy (store/retention_policy.py; DESIGN.md §3.1 "Retention";
RocketMQ's CleanCommitLogService and MappedFileQueue.deleteExpiredFileByTime).

Hypothesis over segment sets, last-write times, disk usage and hours checks the rules
against a naive reference written from RocketMQ's text: never the segment being written
(nor one after it), oldest first with no gap, only expired segments unless the disk is
above diskSpaceCleanForciblyRatio, nothing at all outside deleteWhen without pressure,
at most deleteFileBatchMax a run, and forced deletion stops once the projected usage is
back at the forced ratio. Examples pin each reason and deleteWhen parsing.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.store.retention_policy import (
    DeleteReason,
    RetentionSettings,
    SegmentDeletion,
    SegmentFacts,
    decide_deletions,
    parse_delete_when,
)

SEG = 1 << 20
HOUR_MS = 3_600_000
SETTINGS = RetentionSettings.of(
    file_reserved_time_hours=72,
    delete_when="04",
    disk_max_used_space_ratio_percent=75,
    disk_space_clean_forcibly_ratio_percent=85,
)


def log_of(ages_h: list[float], now_ms: int, size: int = SEG) -> list[SegmentFacts]:
    return [
        SegmentFacts(i * SEG, size, now_ms - round(age * HOUR_MS)) for i, age in enumerate(ages_h)
    ]


def decide(
    segs: list[SegmentFacts], *, now: int, hour: int, ratio: float, disk: int = 100 * SEG
) -> list[tuple[int, DeleteReason]]:
    out = decide_deletions(
        segs,
        active_start=segs[-1].start,
        now_ms=now,
        hour=hour,
        disk_used_ratio=ratio,
        disk_bytes=disk,
        settings=SETTINGS,
    )
    return [(d.segment.start, d.reason) for d in out]


NOW = 1_800_000_000_000


def test_expired_segments_go_at_delete_when_only_without_pressure() -> None:
    segs = log_of([100, 80, 73, 10, 200, 1], NOW)  # the 200 h one lies behind a young one
    assert decide(segs, now=NOW, hour=3, ratio=0.5) == []
    assert decide(segs, now=NOW, hour=4, ratio=0.5) == [
        (0, DeleteReason.EXPIRED),
        (SEG, DeleteReason.EXPIRED),
        (2 * SEG, DeleteReason.EXPIRED),
    ]


def test_pressure_deletes_expired_at_any_hour_and_forced_deletes_unexpired() -> None:
    segs = log_of([100, 10, 9, 8, 7, 1], NOW)
    assert decide(segs, now=NOW, hour=12, ratio=0.80) == [(0, DeleteReason.DISK)]
    # 87 % of a 100-segment disk: two unexpired segments bring it back to 85 %.
    assert decide(segs, now=NOW, hour=12, ratio=0.87) == [
        (0, DeleteReason.DISK),
        (SEG, DeleteReason.FORCED),
    ]
    assert decide(segs, now=NOW, hour=12, ratio=0.875) == [
        (0, DeleteReason.DISK),
        (SEG, DeleteReason.FORCED),
        (2 * SEG, DeleteReason.FORCED),
    ]
    # A foreign file holds the disk above 85 %: every segment but the active one goes.
    assert [s for s, _ in decide(segs, now=NOW, hour=4, ratio=0.99)] == [s.start for s in segs[:-1]]


def test_without_forced_cleaning_unexpired_segments_stay() -> None:
    segs = log_of([100, 10, 9, 1], NOW)
    off = dataclasses.replace(SETTINGS, clean_file_forcibly_enable=False)
    got = decide_deletions(
        segs, active_start=segs[-1].start, now_ms=NOW, hour=12, disk_used_ratio=0.99,
        disk_bytes=100 * SEG, settings=off,
    )  # fmt: skip
    assert [(d.segment.start, d.reason) for d in got] == [(0, DeleteReason.DISK)]


def test_the_active_segment_is_never_deleted() -> None:
    segs = log_of([500], NOW)
    assert decide(segs, now=NOW, hour=4, ratio=1.0) == []


def test_delete_when_is_rocketmqs_hour_list() -> None:
    assert parse_delete_when("04") == frozenset({4})
    assert parse_delete_when("04;05;23") == frozenset({4, 5, 23})
    for bad in ("", "24", "4;", "x", "-1", "04,05"):
        with pytest.raises(ValueError, match="deleteWhen"):
            parse_delete_when(bad)


def test_a_fraction_of_an_hour_is_accepted() -> None:
    s = RetentionSettings.of(
        file_reserved_time_hours=0.05,
        delete_when="00",
        disk_max_used_space_ratio_percent=75,
        disk_space_clean_forcibly_ratio_percent=85,
    )
    assert s.file_reserved_ms == 180_000


# -- property: the policy against a naive reference ----------------------------------------


def reference(
    segs: list[SegmentFacts], active: int, now: int, hour: int, ratio: float, disk: int
) -> list[SegmentDeletion]:
    """RocketMQ's rules as prose, with the forced stop at the projected ratio."""
    time_up = hour == 4
    if not time_up and ratio <= 0.75:
        return []
    out: list[SegmentDeletion] = []
    freed = 0
    for seg in segs:
        if seg.start >= active or len(out) == SETTINGS.delete_file_batch_max:
            break
        expired = now - seg.last_write_ms >= 72 * HOUR_MS
        if expired:
            out.append(SegmentDeletion(seg, DeleteReason.EXPIRED if time_up else DeleteReason.DISK))
        elif ratio - freed / disk > 0.85:
            out.append(SegmentDeletion(seg, DeleteReason.FORCED))
        else:
            break
        freed += seg.size
    return out


segment_sets = st.lists(
    st.tuples(st.integers(1, SEG), st.integers(0, 200 * HOUR_MS)), min_size=1, max_size=30
)


@settings(max_examples=400, deadline=None)
@given(
    segment_sets,
    st.integers(0, 29),
    st.integers(0, 23),
    st.floats(0.0, 1.0),
    st.integers(1, 200 * SEG),
)
def test_policy_matches_the_reference_and_its_invariants(
    shape: list[tuple[int, int]], active_index: int, hour: int, ratio: float, disk: int
) -> None:
    segs = [SegmentFacts(i * SEG, size, NOW - age) for i, (size, age) in enumerate(shape)]
    active = segs[min(active_index, len(segs) - 1)].start
    got = decide_deletions(
        segs,
        active_start=active,
        now_ms=NOW,
        hour=hour,
        disk_used_ratio=ratio,
        disk_bytes=disk,
        settings=SETTINGS,
    )
    # Floating point may differ only at the exact forced boundary; compare in exact terms.
    assert [(d.segment, d.reason) for d in got] == [
        (d.segment, d.reason) for d in reference(segs, active, NOW, hour, ratio, disk)
    ] or _at_forced_boundary(segs, ratio, disk)
    starts = [d.segment.start for d in got]
    assert starts == [s.start for s in segs[: len(got)]]  # oldest first, no gap
    assert all(s < active for s in starts)  # never the active segment or past it
    assert len(got) <= SETTINGS.delete_file_batch_max
    for d in got:
        expired = NOW - d.segment.last_write_ms >= 72 * HOUR_MS
        assert (d.reason is DeleteReason.FORCED) == (not expired)
        if d.reason is DeleteReason.FORCED:
            assert ratio > 0.85
        if d.reason is DeleteReason.DISK:
            assert ratio > 0.75 and hour != 4
    if hour != 4 and ratio <= 0.75:
        assert got == []


def _at_forced_boundary(segs: list[SegmentFacts], ratio: float, disk: int) -> bool:
    freed = 0
    for seg in segs:
        if abs(ratio - freed / disk - 0.85) < 1e-9:
            return True
        freed += seg.size
    return False
