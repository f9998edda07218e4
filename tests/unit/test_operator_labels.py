"""Operator labels (DESIGN.md §5 Roles): which pod gets role=master|slave and
which broker-id, derived from the controller's view and the pods' IPs.

Properties over random groups: at most one master label, only on the pod at
the live master's registered address and never on a pod being deleted;
BrokerIds label at most one pod each; unmatched pods lose both labels;
applying the patches reaches a fixpoint (a second pass patches nothing);
demotions come before the promotion. Plus the concrete failover story."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings

from brokergroup_operator.labels import broker_ids_by_pod, desired_labels, label_patches
from brokergroup_operator.model import (
    CLIENT_PORT,
    LABEL_BROKER_ID,
    LABEL_ROLE,
    BrokerRow,
    GroupView,
    PodFacts,
)
from tests.unit.operator_worlds import worlds


@settings(max_examples=300)
@given(worlds())
def test_at_most_one_master_and_only_at_the_live_master_address(world: tuple) -> None:
    pods, view = world
    desired = desired_labels(pods, view)
    masters = [name for name, labels in desired.items() if labels[LABEL_ROLE] == "master"]
    assert len(masters) <= 1
    for name in masters:
        pod = next(p for p in pods if p.name == name)
        assert view.master_alive and not pod.deleting
        row = view.broker(view.master_broker_id)  # type: ignore[arg-type]
        assert row is not None and row.address == pod.address
    if not view.master_alive:
        assert masters == []


@settings(max_examples=300)
@given(worlds())
def test_broker_ids_are_unique_and_match_addresses(world: tuple) -> None:
    pods, view = world
    ids = broker_ids_by_pod(pods, view)
    assert len(set(ids.values())) == len(ids)
    for name, bid in ids.items():
        pod = next(p for p in pods if p.name == name)
        assert any(r.broker_id == bid and r.address == pod.address for r in view.brokers)
    desired = desired_labels(pods, view)
    for pod in pods:
        if pod.name not in ids:
            assert desired[pod.name] == {LABEL_ROLE: None, LABEL_BROKER_ID: None}
        else:
            assert desired[pod.name][LABEL_BROKER_ID] == str(ids[pod.name])


@settings(max_examples=300)
@given(worlds())
def test_patches_reach_a_fixpoint_and_demote_first(world: tuple) -> None:
    pods, view = world
    patches = label_patches(pods, view)
    roles = [patch.get(LABEL_ROLE) for _, patch in patches]
    if "master" in roles:
        assert roles.index("master") == len(roles) - 1
    patched = {p.name: dict(p.labels) for p in pods}
    for pod, patch in patches:
        for k, v in patch.items():
            if v is None:
                patched[pod.name].pop(k, None)
            else:
                patched[pod.name][k] = v
    after = [replace(p, labels=patched[p.name]) for p in pods]
    assert label_patches(after, view) == []


def _pod(i: int, ip: str | None, **kw: object) -> PodFacts:
    return PodFacts(name=f"bg-{i}", ordinal=i, uid=f"u{i}", ip=ip, ready=True, **kw)  # type: ignore[arg-type]


def test_failover_story_moves_the_master_label() -> None:
    a = f"10.0.0.1:{CLIENT_PORT}"
    b = f"10.0.0.2:{CLIENT_PORT}"
    pods = [
        _pod(0, "10.0.0.1", labels={LABEL_ROLE: "master", LABEL_BROKER_ID: "1"}),
        _pod(1, "10.0.0.2", labels={LABEL_ROLE: "slave", LABEL_BROKER_ID: "2"}),
        _pod(2, "10.0.0.3", labels={}),
    ]
    rows = (
        BrokerRow(1, a, False),
        BrokerRow(2, b, True),
        BrokerRow(3, f"10.0.0.3:{CLIENT_PORT}", True),
    )
    view = GroupView(2, True, b, 2, frozenset({2}), 3, rows)
    patches = label_patches(pods, view)
    assert [(p.name, patch) for p, patch in patches] == [
        ("bg-0", {LABEL_ROLE: "slave"}),
        ("bg-2", {LABEL_ROLE: "slave", LABEL_BROKER_ID: "3"}),
        ("bg-1", {LABEL_ROLE: "master"}),
    ]


def test_pod_back_on_a_new_ip_keeps_its_broker_id_once_registered() -> None:
    # bg-0 held broker 1 at .1; it came back on .7. Until broker 1 registers
    # .7 the pod has no labels; the stale row on .1 labels nobody.
    rows = (
        BrokerRow(1, f"10.0.0.1:{CLIENT_PORT}", False),
        BrokerRow(2, f"10.0.0.2:{CLIENT_PORT}", True),
    )
    pods = [
        _pod(0, "10.0.0.7", labels={LABEL_ROLE: "master", LABEL_BROKER_ID: "1"}),
        _pod(1, "10.0.0.2"),
    ]
    view = GroupView(2, True, None, 2, frozenset({2}), 2, rows)
    assert desired_labels(pods, view)["bg-0"] == {LABEL_ROLE: None, LABEL_BROKER_ID: None}
    moved = (BrokerRow(1, f"10.0.0.7:{CLIENT_PORT}", True), rows[1])
    view = GroupView(2, True, None, 2, frozenset({2}), 2, moved)
    assert desired_labels(pods, view)["bg-0"] == {LABEL_ROLE: "slave", LABEL_BROKER_ID: "1"}


def test_replica_info_without_and_with_master_alive() -> None:
    from brokergroup_controller.api import BrokerLiveness, ReplicaInfo

    info = ReplicaInfo(
        "ns", "bg", None, None, 3, frozenset({2}), 4, 4, (BrokerLiveness(2, "x:1", True),)
    )
    view = GroupView.from_replica_info(info)
    assert (view.master_broker_id, view.master_alive, view.live_master) == (None, False, None)
    info = ReplicaInfo(
        "ns", "bg", 2, "x:1", 3, frozenset({2}), 4, 4, (BrokerLiveness(2, "x:1", False),)
    )
    view = GroupView.from_replica_info(info, {"masterAlive": False})
    assert (view.master_broker_id, view.master_alive, view.live_master) == (2, False, None)
    view = GroupView.from_replica_info(info)
    assert (view.master_broker_id, view.master_alive, view.live_master) == (2, True, 2)
