"""The pure parts of OpenChaos's faults (issue 37 item 2; cli/brokergroup_cli/chaos/netfault.py):
which pairs a bridge and a majorities ring cut, and the exact tc / iptables rules a lossy
link adds. Properties over random node lists (hypothesis) against the definitions:
a ring gives every node a majority and (n >= 4) no node is seen by all; a bridge's two
sides never see each other and the bridge sees everyone."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_cli.chaos import faults, netfault

NODES = st.lists(
    st.integers(1, 250).map(lambda i: f"127.0.1.{i}"), min_size=3, max_size=9, unique=True
)


def _sees(nodes: list[str], cut: list[tuple[str, str]]) -> dict[str, set[str]]:
    blocked = {frozenset(p) for p in cut}
    return {a: {b for b in nodes if frozenset((a, b)) not in blocked} for a in nodes}


@given(NODES)
def test_ring_every_node_sees_a_majority_and_no_node_is_seen_by_all(ring: list[str]) -> None:
    cut = netfault.ring_pairs(ring)
    sees = _sees(ring, cut)
    n = len(ring)
    for node, seen in sees.items():
        assert len(seen) >= n // 2 + 1, (node, seen)
    for a, b in cut:  # symmetric pairs, no self-cuts
        assert a != b and a in ring and b in ring
    if n >= 4:
        common = set.intersection(*sees.values())
        assert not common, common


def test_ring_of_six_cuts_each_node_from_its_opposite_only() -> None:
    ring = [f"n{i}" for i in range(6)]
    assert sorted(netfault.ring_pairs(ring)) == [("n0", "n3"), ("n1", "n4"), ("n2", "n5")]
    assert netfault.ring_pairs(["a", "b", "c"]) == []  # three nodes: everyone is a neighbour
    five = [f"n{i}" for i in range(5)]
    assert sorted(netfault.ring_pairs(five)) == [
        ("n0", "n2"), ("n0", "n3"), ("n1", "n3"), ("n1", "n4"), ("n2", "n4"),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="each node once"):
        netfault.ring_pairs(["a", "b", "a", "c"])


@given(NODES, st.data())
def test_bridge_sides_split_everyone_but_the_bridge(nodes: list[str], data: st.DataObject) -> None:
    bridge = data.draw(st.sampled_from(nodes))
    side_a, side_b = netfault.bridge_sides(nodes, bridge)
    assert sorted([*side_a, *side_b, bridge]) == sorted(nodes)
    assert abs(len(side_a) - len(side_b)) <= 1
    sees = _sees(nodes, netfault.bridge_pairs(side_a, side_b))
    assert sees[bridge] == set(nodes)
    for a in side_a:
        assert not sees[a] & set(side_b)


def test_bridge_keeps_the_pinned_master_apart_from_its_slaves() -> None:
    nodes = ["c1", "c2", "c3", "m", "s1", "s2"]
    side_a, side_b = netfault.bridge_sides(nodes, "c2", pinned_a=["m"], pinned_b=["s1", "s2"])
    assert (side_a, side_b) == (["m", "c1"], ["s1", "s2", "c3"])
    with pytest.raises(ValueError, match="pinned"):
        netfault.bridge_sides(nodes, "c2", pinned_a=["m"], pinned_b=["m"])
    with pytest.raises(ValueError, match="not one of"):
        netfault.bridge_sides(nodes, "x")


def test_lossy_link_rules_name_only_the_two_addresses_both_ways() -> None:
    filters = netfault.u32_filters("127.0.1.110", "127.0.1.111")
    assert [f[f.index("src") + 1] for f in filters] == ["127.0.1.110/32", "127.0.1.111/32"]
    assert [f[f.index("dst") + 1] for f in filters] == ["127.0.1.111/32", "127.0.1.110/32"]
    assert all(f[-1] == "1:4" for f in filters)
    rules = netfault.iptables_rules("127.0.1.110", "127.0.1.111", 30.0)
    assert rules[0] == [
        "OUTPUT", "-s", "127.0.1.110/32", "-d", "127.0.1.111/32", "-m", "statistic", "--mode",
        "random", "--probability", "0.3000", "-m", "comment", "--comment", "bgchaos", "-j", "DROP",
    ]  # fmt: skip
    assert netfault.Impairment(30.0, 100, 50).netem_args() == [
        "delay", "100ms", "50ms", "loss", "30%",
    ]  # fmt: skip
    with pytest.raises(ValueError):
        netfault.Impairment(120.0)


def test_composite_faults_are_known_and_share_their_base_reason() -> None:
    assert faults.is_known(faults.PARTITION_BRIDGE + faults.THEN_KILL_MASTER)
    assert not faults.is_known("partition-everything")
    assert faults.unavailable_reason(
        faults.PARTITION_RING + faults.THEN_KILL_MASTER
    ) == faults.unavailable_reason(faults.PARTITION_RING)
