"""DESIGN.md §3.6 "Consumer offsets carry a data version so a returning master takes the
newer offsets from the slaves (pre-online), never rolling them back" (seed RIP-32).
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.store import ConsumerOffsetSnapshot, ConsumerOffsetStore, DataVersion


def test_commit_bumps_the_version_and_persists_rocketmq_json(tmp_path: Path) -> None:
    store = ConsumerOffsetStore(tmp_path)
    store.commit("g1", "TopicA", 0, 42, now_ms=1000)
    store.commit("g1", "TopicA", 1, 17, now_ms=1001)
    assert store.version == DataVersion(2, 1001)
    store.persist()
    data = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert data["offsetTable"] == {"TopicA@g1": {"0": 42, "1": 17}}
    assert data["dataVersion"]["counter"] == 2
    again = ConsumerOffsetStore(tmp_path)
    assert again.get("g1", "TopicA", 1) == 17 and again.version == DataVersion(2, 1001)


def test_returning_master_takes_newer_offsets_without_rolling_back(tmp_path: Path) -> None:
    master = ConsumerOffsetStore(tmp_path / "m")
    master.commit("g", "T", 0, 10, now_ms=1)
    master.commit("g", "T", 1, 50, now_ms=2)
    slave = ConsumerOffsetStore(tmp_path / "s")
    assert slave.merge_newer(master.snapshot())
    # While the master was gone the slave (acting master) served consumers.
    slave.commit("g", "T", 0, 25, now_ms=10)
    slave.commit("g2", "T", 0, 3, now_ms=11)
    assert master.merge_newer(slave.snapshot())
    assert master.get("g", "T", 0) == 25 and master.get("g2", "T", 0) == 3
    # An older snapshot is ignored entirely.
    stale = ConsumerOffsetSnapshot(DataVersion(1, 1), {("g", "T", 0): 0})
    assert not master.merge_newer(stale)
    assert master.get("g", "T", 0) == 25
    # A newer snapshot with a smaller offset for one queue does not move it back.
    newer = ConsumerOffsetSnapshot(DataVersion(99, 99), {("g", "T", 1): 5})
    assert master.merge_newer(newer)
    assert master.get("g", "T", 1) == 50


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 2), st.integers(0, 1000)),
        max_size=30,
    )
)
def test_merges_never_decrease_an_offset(ops: list[tuple[str, int, int]]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        stores = {
            "a": ConsumerOffsetStore(Path(tmp) / "a"),
            "b": ConsumerOffsetStore(Path(tmp) / "b"),
        }
        for t, (who, q, off) in enumerate(ops):
            other = stores["b" if who == "a" else "a"]
            before = dict(other.snapshot().offsets)
            stores[who].commit("g", "T", q, off, now_ms=t)
            other.merge_newer(stores[who].snapshot())
            after = other.snapshot().offsets
            assert all(after[k] >= v for k, v in before.items())


def test_unreadable_file_starts_empty(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert ConsumerOffsetStore(tmp_path).snapshot().offsets == {}
