"""BrokerGroup status and conditions (DESIGN.md §5 status; metav1.Condition).

Checks the concrete status of a healthy group and of a failover (the
MasterElected and SyncStateSetChanged Events, lastFailover with its
duration), that rebuilding the status from the same facts emits no Event a
second time, that lastTransitionTime moves only with a status change, and,
over random groups, that Available holds exactly when a live master's pod
is ready and labelled."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings

from brokergroup_operator.conditions import (
    AVAILABLE,
    DEGRADED,
    PROGRESSING,
    READY,
    GroupFacts,
    conditions,
)
from brokergroup_operator.labels import broker_ids_by_pod
from brokergroup_operator.model import CLIENT_PORT, LABEL_ROLE, BrokerRow, GroupView, PodFacts
from brokergroup_operator.status import Event, StatusInput, build_status
from tests.unit.operator_worlds import worlds

ROWS = tuple(BrokerRow(i + 1, f"10.0.0.{i}:{CLIENT_PORT}", True, 100 * i) for i in range(3))


def _pods(master_pod: int) -> tuple[PodFacts, ...]:
    return tuple(
        PodFacts(
            f"bg-{i}",
            i,
            f"u{i}",
            f"10.0.0.{i}",
            True,
            revision="r1",
            labels={LABEL_ROLE: "master" if i == master_pod else "slave"},
        )
        for i in range(3)
    )


def _input(
    view: GroupView,
    pods: tuple[PodFacts, ...],
    previous: dict,
    now_ms: int,
    lost: int | None = None,
) -> StatusInput:
    return StatusInput(
        group="bg",
        generation=4,
        replicas=3,
        min_in_sync_replicas=2,
        update_revision="r1",
        current_revision="r1",
        pods=pods,
        view=view,
        previous=previous,
        now_iso=f"2026-11-23T04:00:{now_ms // 1000:02d}Z",
        now_ms=now_ms,
        master_lost_at_ms=lost,
    )


def test_healthy_then_failover() -> None:
    view = GroupView(1, True, ROWS[0].address, 1, frozenset({1, 2, 3}), 1, ROWS)
    status, events = build_status(_input(view, _pods(0), {}, 1000))
    assert status["master"] == {"brokerId": 1, "pod": "bg-0", "address": "10.0.0.0:10911"}
    assert (status["masterEpoch"], status["syncStateSet"], status["inSync"], status["ready"]) == (
        1,
        [1, 2, 3],
        "3/3",
        "3/3",
    )
    assert (
        status["selector"]
        == "app.kubernetes.io/name=brokergroup,app.kubernetes.io/instance=bg,brokergroup.io/group=bg"
    )
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        (READY, "True", "GroupReady"),
        (AVAILABLE, "True", "MasterReady"),
        (PROGRESSING, "False", "UpToDate"),
        (DEGRADED, "False", "AllInSync"),
    ]
    assert events == [Event("MasterElected", "broker 1 (bg-0) is master at epoch 1 (was none)")]
    assert status["lastFailover"] is None
    again, events = build_status(_input(view, _pods(0), status, 2000))
    assert events == []
    assert again["conditions"] == status["conditions"]

    failed = GroupView(2, True, ROWS[1].address, 2, frozenset({2}), 2, ROWS)
    after, events = build_status(_input(failed, _pods(1), status, 3500, lost=2900))
    assert events == [
        Event("MasterElected", "broker 2 (bg-1) is master at epoch 2 (was 1)"),
        Event("SyncStateSetChanged", "SyncStateSet [1, 2, 3] → [2] at epoch 2"),
    ]
    assert after["lastFailover"] == {
        "at": "2026-11-23T04:00:03Z",
        "from": 1,
        "to": 2,
        "durationMs": 600,
    }
    degraded = next(c for c in after["conditions"] if c["type"] == DEGRADED)
    assert (degraded["status"], degraded["reason"], degraded["lastTransitionTime"]) == (
        "True",
        "BelowMinInSync",
        "2026-11-23T04:00:03Z",
    )
    available = next(c for c in after["conditions"] if c["type"] == AVAILABLE)
    assert available["lastTransitionTime"] == "2026-11-23T04:00:01Z"


def test_no_master_says_why_each_replica_is_not_alive() -> None:
    """The e2e tier's groups sat at `NoMaster: the controller has no live master` while
    every broker's disk was over diskFullRatio; the controller knew, the status did not."""
    full = "store cannot take writes: disk usage 95.2% of /data is above diskFullRatio 95.0%"
    rows = (
        BrokerRow(2, f"10.0.0.1:{CLIENT_PORT}", False, 0, 0, full),
        BrokerRow(1, f"10.0.0.0:{CLIENT_PORT}", False, 0, 0, full),
        BrokerRow(3, f"10.0.0.2:{CLIENT_PORT}", True, 0, 0, None),
    )
    view = GroupView(None, False, None, 0, frozenset(), 0, rows)
    status, _ = build_status(_input(view, _pods(0), {}, 1000))
    why = f"; not alive: 1 ({full}), 2 ({full})"
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]] == [
        (READY, "False", "NoMaster", f"the controller has no live master{why}"),
        (AVAILABLE, "False", "NoMaster", f"the controller has no live master{why}"),
        (PROGRESSING, "False", "UpToDate", "every pod runs the current template"),
        (DEGRADED, "True", "NoMaster", f"no live master: writes are refused{why}"),
    ]
    assert [(b["pod"], b["alive"], b["inactiveReason"]) for b in status["brokers"]] == [
        ("bg-0", False, full),
        ("bg-1", False, full),
        ("bg-2", True, None),
    ]


def test_no_controller_view() -> None:
    status, events = build_status(_input(None, _pods(0), {}, 1000))  # type: ignore[arg-type]
    assert events == [] and status["inSync"] == "?"
    assert next(c for c in status["conditions"] if c["type"] == AVAILABLE)["reason"] == "NoMaster"


@settings(max_examples=300)
@given(worlds())
def test_available_iff_live_master_pod_ready_and_labelled(world: tuple) -> None:
    pods, view = world
    status, _ = build_status(
        StatusInput("bg", 1, len(pods), 1, "rev-new", "rev-new", tuple(pods), view, {}, "t", 0)
    )
    ids = broker_ids_by_pod(pods, view)
    master_pod = next(
        (p for p in pods if view.live_master is not None and ids.get(p.name) == view.live_master),
        None,
    )
    expected = (
        master_pod is not None
        and master_pod.ready
        and master_pod.labels.get(LABEL_ROLE) == "master"
    )
    available = next(c for c in status["conditions"] if c["type"] == AVAILABLE)
    assert (available["status"] == "True") == expected
    assert [c["type"] for c in status["conditions"]] == [READY, AVAILABLE, PROGRESSING, DEGRADED]
    ready = next(c for c in status["conditions"] if c["type"] == READY)
    others = [c["status"] for c in status["conditions"] if c["type"] != READY]
    assert (ready["status"] == "True") == (others == ["True", "False", "False"])
    assert all(
        set(c)
        == {"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"}
        for c in status["conditions"]
    )


def test_transition_time_kept_while_status_holds() -> None:
    facts = GroupFacts(1, 3, 3, 3, True, True, True, 3, 1, 0)
    first = conditions(facts, [], "T1")
    second = conditions(facts, first, "T2")
    assert [c["lastTransitionTime"] for c in second] == ["T1", "T1", "T1", "T1"]
    worse = GroupFacts(2, 3, 3, 2, True, True, True, 3, 1, 0)
    third = conditions(worse, second, "T3")
    assert [(c["type"], c["lastTransitionTime"]) for c in third] == [
        (READY, "T3"),
        (AVAILABLE, "T1"),
        (PROGRESSING, "T3"),
        (DEGRADED, "T3"),
    ]


def test_ready_says_why_not() -> None:
    """Issue 22 item 6: `kubectl wait --for=condition=Ready` needs a Ready condition;
    item 2: a group that cannot run says so there."""
    healthy = GroupFacts(1, 3, 3, 3, True, True, True, 3, 1, 0)
    cases = [
        (healthy, ("True", "GroupReady")),
        (GroupFacts(1, 3, 3, 3, False, False, False, 0, 1, 0), ("False", "NoMaster")),
        (GroupFacts(1, 3, 3, 3, True, True, True, 3, 1, 1), ("False", "RollingUpdate")),
        (GroupFacts(1, 3, 3, 3, True, True, True, 2, 1, 0), ("False", "SlavesOutOfSync")),
        (
            GroupFacts(1, 3, 0, 0, False, False, False, 0, 1, 0, blocked=("SecretMissing", "x")),
            ("False", "SecretMissing"),
        ),
    ]
    for facts, expected in cases:
        ready = conditions(facts, [], "T")[0]
        assert (ready["type"], ready["status"], ready["reason"]) == (READY, *expected)


def test_current_revision_follows_the_operators_roll() -> None:
    """Issue 22 item 6: with OnDelete the StatefulSet's currentRevision never moves;
    status.currentRevision is the update revision once every pod runs it."""
    view = GroupView(1, True, ROWS[0].address, 1, frozenset({1, 2, 3}), 1, ROWS)
    pods = _pods(0)

    def rolled(n: int) -> tuple[PodFacts, ...]:
        return tuple(
            PodFacts(p.name, p.ordinal, p.uid, p.ip, True, revision="r2" if i < n else "r1",
                     labels=p.labels)
            for i, p in enumerate(pods)
        )  # fmt: skip

    def current(n: int, previous: dict) -> str:
        inp = _input(view, rolled(n), previous, 1000)
        inp = dataclasses.replace(inp, update_revision="r2", current_revision="r1")
        return str(build_status(inp)[0]["currentRevision"])

    assert [current(n, {"currentRevision": "r1"}) for n in range(4)] == ["r1", "r1", "r1", "r2"]
    assert current(0, {}) == "r1"
