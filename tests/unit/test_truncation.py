"""Truncation point (DESIGN.md §3.2 "Truncation at handshake"; seed controller-mode-design,
"The specific log truncation algorithm flow"; seed kafka-controller-isr-design,
``becomeFollower``: truncate to the high watermark).

What and how: a table of hand-written histories, each naming the clause it
covers; then hypothesis drives a byte-level simulation of a replica group
(writes, replication, commits, failovers, zombie writes by a deposed master in
its stale epoch) and checks, for every replica against the final master, that
the point equals the longest common prefix, never cuts committed data, and
that cut + copy reproduces the master's log *and* its epoch lineage.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.ha.truncation import (
    TruncationPoint,
    TruncationReason,
    find_truncation_point,
)


@dataclass(frozen=True)
class E:
    """An epoch entry (epoch, start_offset), shaped like the store's EpochEntry."""

    epoch: int
    start_offset: int


def _entries(*pairs: tuple[int, int]) -> list[E]:
    return [E(e, s) for e, s in pairs]


# (clause, local entries, local max, master entries, master max, expected offset, matched epoch)
CASES = [
    (
        "seed: same epoch and startOffset -> min(local end, master end); lagging slave keeps all",
        _entries((1, 0), (2, 100)),
        150,
        _entries((1, 0), (2, 100)),
        400,
        150,
        2,
    ),
    (
        "seed: the smaller Endoffset wins; slave's epoch-1 tail past the master's epoch-2 start",
        _entries((1, 0)),
        150,
        _entries((1, 0), (2, 100)),
        300,
        100,
        1,
    ),
    (
        "seed: 'if they are not equal, the previous epoch of the Slave is compared' (slave's "
        "own stale epoch 2 unknown to the master)",
        _entries((1, 0), (2, 100)),
        250,
        _entries((1, 0), (3, 100)),
        400,
        100,
        1,
    ),
    (
        "seed: Epoch AND StartOffset must be equal; same epoch number at another offset is no match",
        _entries((1, 0), (2, 50)),
        90,
        _entries((1, 0), (2, 60)),
        120,
        50,
        1,
    ),
    (
        "seed: deposed master wrote past the new master's epoch start (stale tail in old epoch)",
        _entries((1, 0), (3, 200)),
        300,
        _entries((1, 0), (3, 200), (4, 250)),
        500,
        250,
        3,
    ),
    (
        "DESIGN §3.2: new master's epoch holds no data yet; slave keeps everything up to it",
        _entries((1, 0), (2, 100)),
        300,
        _entries((1, 0), (2, 100), (3, 300)),
        300,
        300,
        2,
    ),
    (
        "seed: empty epochs (same startOffset) -- an epoch ends where the next one starts",
        _entries((1, 0), (2, 100), (3, 100)),
        150,
        _entries((1, 0), (2, 100), (4, 100)),
        400,
        100,
        2,
    ),
    (
        "kafka seed becomeFollower: a follower never holds more than the leader -> truncate to it",
        _entries((5, 1000)),
        1800,
        _entries((5, 1000)),
        1500,
        1500,
        5,
    ),
    (
        "seed: epoch entries after prefix truncation (master min offset > 0)",
        _entries((2, 4096), (3, 9000)),
        9500,
        _entries((3, 9000), (4, 9200)),
        12000,
        9200,
        3,
    ),
]


@pytest.mark.parametrize(
    ("clause", "local", "local_max", "master", "master_max", "expected", "epoch"),
    CASES,
    ids=[c[0][:60] for c in CASES],
)
def test_table(
    clause: str,
    local: list[E],
    local_max: int,
    master: list[E],
    master_max: int,
    expected: int,
    epoch: int,
) -> None:
    point = find_truncation_point(local, master, local_max, master_max)
    assert point == TruncationPoint(
        offset=expected,
        matched_epoch=epoch,
        full_resync=False,
        reason=TruncationReason.COMMON_EPOCH,
        detail=point.detail,
    ), clause
    assert str(expected) in point.detail


def test_empty_local_epoch_file_starts_from_master_min_offset() -> None:
    """RocketMQ doTruncate: an empty epoch cache is a new replica; copy from the master's min."""
    point = find_truncation_point([], _entries((3, 4096), (4, 5000)), 0, 6000)
    assert point.full_resync and point.reason is TruncationReason.EMPTY_LOCAL
    assert point.offset == 4096 and point.matched_epoch is None


def test_no_common_epoch_is_a_full_resync_from_master_min() -> None:
    """DESIGN §3.2: no common epoch -> full resync from the master's min offset."""
    point = find_truncation_point(_entries((1, 0), (2, 10)), _entries((7, 100), (8, 150)), 50, 300)
    assert point.full_resync and point.reason is TruncationReason.NO_COMMON_EPOCH
    assert point.offset == 100
    assert "1@0" in point.detail and "7@100" in point.detail


def test_explicit_master_min_offset_overrides_first_entry() -> None:
    point = find_truncation_point(
        _entries((1, 0)), _entries((2, 100)), 50, 300, master_min_offset=64
    )
    assert point.full_resync and point.offset == 64


def test_empty_master_and_local() -> None:
    point = find_truncation_point([], [], 0, 0)
    assert point.full_resync and point.offset == 0


def test_negative_max_is_a_programmer_error() -> None:
    with pytest.raises(ValueError):
        find_truncation_point([], [], -1, 0)


# ------------------------------------------------------------------ simulated replica group


@dataclass
class Node:
    log: list[int] = field(default_factory=list)  # record id of every byte
    epochs: list[E] = field(default_factory=list)
    mastered_epoch: int | None = None  # the epoch this node led last (for zombie writes)


@dataclass
class Group:
    nodes: list[Node]
    master: int
    sync_state_set: set[int]
    committed: int = 0
    last_epoch: int = 1
    next_rid: int = 0
    record_size: dict[int, int] = field(default_factory=dict)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def is_record_end(log: list[int], sizes: dict[int, int], x: int) -> bool:
    """x is a record boundary of log (0, or the byte before x ends a whole record)."""
    if x == 0:
        return True
    rid = log[x - 1]
    start = x - 1
    while start > 0 and log[start - 1] == rid:
        start -= 1
    return x - start == sizes[rid]


def epoch_at(entries: list[E], x: int) -> int | None:
    found = None
    for entry in entries:
        if entry.start_offset <= x:
            found = entry.epoch
    return found


def write(group: Group, node: Node, epoch: int, sizes: list[int]) -> None:
    for size in sizes:
        rid = group.next_rid
        group.next_rid += 1
        group.record_size[rid] = size
        if not node.epochs or node.epochs[-1].epoch != epoch:
            node.epochs.append(E(epoch, len(node.log)))
        node.log.extend([rid] * size)


def replicate(group: Group, follower: Node, upto: int) -> None:
    """Reference slave (independent of the code under test): cut to the true common
    prefix, then copy bytes, appending an epoch entry when the epoch changes."""
    master = group.nodes[group.master]
    # Following a newer master ends a deposed master's term: it can no longer write as
    # a zombie in its old epoch (it has seen the new one).
    follower.mastered_epoch = None
    cut = common_prefix(follower.log, master.log)
    follower.log = follower.log[:cut]
    follower.epochs = [e for e in follower.epochs if e.start_offset < cut]
    end = max(cut, min(upto, len(master.log)))
    for x in range(cut, end):
        epoch = epoch_at(master.epochs, x)
        assert epoch is not None
        if not follower.epochs or follower.epochs[-1].epoch != epoch:
            start = next(e.start_offset for e in reversed(master.epochs) if e.epoch == epoch)
            follower.epochs.append(E(epoch, start))
        follower.log.append(master.log[x])


def failover(group: Group, new_master: int) -> None:
    node = group.nodes[new_master]
    # "Truncate the Commitlog to the boundary of the last message" (seed, on becoming Master).
    cut = len(node.log)
    while not is_record_end(node.log, group.record_size, cut):
        cut -= 1
    assert cut >= group.committed, "an in-sync replica lost committed bytes"
    node.log = node.log[:cut]
    node.epochs = [e for e in node.epochs if e.start_offset < cut]
    group.last_epoch += 1
    node.epochs.append(E(group.last_epoch, cut))
    node.mastered_epoch = group.last_epoch
    group.master = new_master
    group.sync_state_set = {new_master}


# Weighted so that most runs replicate, commit and fail over several times.
OPS = ["write"] * 3 + ["replicate"] * 3 + ["commit", "expand"] * 2 + ["shrink"]
OPS += ["failover", "zombie"] * 2


@st.composite
def groups(draw: st.DrawFn) -> Group:
    n = draw(st.integers(2, 4))
    group = Group(nodes=[Node() for _ in range(n)], master=0, sync_state_set={0})
    group.nodes[0].epochs.append(E(1, 0))
    group.nodes[0].mastered_epoch = 1
    for _ in range(draw(st.integers(1, 60))):
        master = group.nodes[group.master]
        op = draw(st.sampled_from(OPS))
        if op == "write":
            write(
                group,
                master,
                group.last_epoch,
                draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)),
            )
        elif op == "replicate":
            f = draw(st.integers(0, n - 1))
            if f != group.master:
                replicate(group, group.nodes[f], draw(st.integers(0, len(master.log))))
        elif op == "commit":
            bound = min(common_prefix(group.nodes[i].log, master.log) for i in group.sync_state_set)
            if bound > group.committed:
                c = draw(st.integers(group.committed, bound))
                while not is_record_end(master.log, group.record_size, c):
                    c -= 1
                group.committed = max(group.committed, c)
        elif op == "expand":
            f = draw(st.integers(0, n - 1))
            if common_prefix(group.nodes[f].log, master.log) >= group.committed:
                group.sync_state_set.add(f)
        elif op == "shrink":
            f = draw(st.integers(0, n - 1))
            if f != group.master:
                group.sync_state_set.discard(f)
        elif op == "failover":
            candidates = sorted(group.sync_state_set - {group.master})
            if candidates:
                failover(group, draw(st.sampled_from(candidates)))
        else:  # zombie: a deposed master keeps writing in its stale epoch (never acked)
            z = draw(st.integers(0, n - 1))
            node = group.nodes[z]
            if (
                z != group.master
                and node.mastered_epoch is not None
                and node.epochs
                and node.epochs[-1].epoch == node.mastered_epoch
            ):
                write(
                    group, node, node.mastered_epoch, draw(st.lists(st.integers(1, 9), max_size=3))
                )
    return group


@settings(max_examples=500, deadline=None)
@given(group=groups())
def test_simulated_group_truncation_properties(group: Group) -> None:
    """DESIGN §3.2 + seed: after cutting at the point, both logs share the prefix, nothing
    committed is removed, and copying from the point reproduces log and epoch lineage."""
    master = group.nodes[group.master]
    for i, node in enumerate(group.nodes):
        if i == group.master:
            continue
        point = find_truncation_point(node.epochs, master.epochs, len(node.log), len(master.log))
        shared = common_prefix(node.log, master.log)
        if not node.epochs:
            # Seed/RocketMQ: a replica with no epochs is new; it also holds no data here.
            assert point.full_resync and point.reason is TruncationReason.EMPTY_LOCAL
            assert node.log == [] and point.offset == 0
            continue
        if point.full_resync:
            # No common epoch: only possible when the replica shares no byte with the master
            # (e.g. it led an epoch that never got data replicated anywhere).
            assert point.reason is TruncationReason.NO_COMMON_EPOCH
            assert shared == 0 and point.offset == 0, point.detail
            assert (
                group.committed == 0 or node.log[: group.committed] != master.log[: group.committed]
            )
            continue
        # Both logs share the prefix up to the point; the point is the longest such prefix.
        assert node.log[: point.offset] == master.log[: point.offset]
        assert point.offset == shared, point.detail
        # No committed byte the replica holds is removed (kafka seed: never below HW).
        if i in group.sync_state_set or shared >= group.committed:
            assert point.offset >= min(group.committed, len(node.log))
        # Cut + copy converges, epoch lineage included (seed: record the epoch change).
        kept = [e for e in node.epochs if e.start_offset < point.offset]
        replica = Node(log=node.log[: point.offset], epochs=kept)
        replicate(group, replica, len(master.log))
        assert replica.log == master.log
        for x in range(len(master.log)):
            assert epoch_at(replica.epochs, x) == epoch_at(master.epochs, x)
