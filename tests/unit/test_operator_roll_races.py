"""Switchover and roll races in one reconcile pass (issue 17 item 6, DESIGN.md §5).

Against the recording Kubernetes fake of test_operator_handlers and a scripted
controller:
- a switchover whose outcome is unknown (no answer) ends the pass's
  disruptive part: no pod is deleted after it in the same pass;
- before a roll deletes a pod the operator re-reads the controller and
  deletes only if masterEpoch did not move since it planned (Strimzi's
  KafkaRoller re-checks before each restart);
- a scale-down step is re-checked the same way before the StatefulSet shrinks;
- a rolling update's switchover asks the controller to pick (issue 32 item 3),
  naming the brokers on ready pods as the eligible ones, and the controller's
  answer (not a ranking of the operator's) is the new master in the Event.
"""

from __future__ import annotations

from brokergroup_controller.api import ReplicaInfo
from brokergroup_controller.client import ControllerUnavailable
from brokergroup_operator.model import SWITCHOVER_ANNOTATION
from brokergroup_operator.reconcile import reconcile_group
from tests.unit.test_operator_handlers import (
    Events,
    FakeController,
    FakeKube,
    group,
    info,
    pod,
    runtime,
)


class SilentElection(FakeController):
    """ElectMaster sent, no answer: it may or may not have been committed."""

    async def elect_master(
        self, cluster: str, broker: str, *, designated_broker_id: int
    ) -> ReplicaInfo:
        self.calls.append(("elect", designated_broker_id))
        raise ControllerUnavailable("no controller answered in 2.0 s")


class EpochMovesAfterPlanning(FakeController):
    """The first read plans on masterEpoch 1; every later read sees an election."""

    def __init__(self, first: ReplicaInfo, later: ReplicaInfo) -> None:
        super().__init__(first)
        self.later = later
        self.reads = 0

    async def replica_info(self, cluster: str, broker: str) -> ReplicaInfo:
        self.reads += 1
        return self.info if self.reads == 1 else self.later


async def test_unknown_switchover_outcome_ends_the_pass() -> None:
    pods = [pod(i, revision="r0") for i in range(3)]
    kube = FakeKube(
        pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1", "currentRevision": "r0"}}
    )
    ctl = SilentElection(info(1))
    events = Events()
    await reconcile_group(runtime(kube, ctl), group({SWITCHOVER_ANNOTATION: "2"}), events)
    assert ctl.calls == [("elect", 2)]
    assert [c for c in kube.calls if c[0] == "delete"] == []
    assert [e[1] for e in events if e[0] == "Warning"] == ["SwitchoverOutcomeUnknown"]


async def test_roll_deletes_nothing_when_master_epoch_moved_since_planning() -> None:
    pods = [pod(i, revision="r0") for i in range(3)]
    kube = FakeKube(
        pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1", "currentRevision": "r0"}}
    )
    ctl = EpochMovesAfterPlanning(info(1), info(3, epoch=2, sss=frozenset({3})))
    events = Events()
    await reconcile_group(runtime(kube, ctl), group(), events)
    assert [c for c in kube.calls if c[0] == "delete"] == []
    assert (
        "Normal",
        "StepSkipped",
        "restart of bg-2 (broker 3) skipped: masterEpoch moved from 1 to 2 since the step "
        "was planned",
    ) in events


async def test_roll_deletes_when_the_re_read_agrees() -> None:
    pods = [pod(i, revision="r0") for i in range(3)]
    kube = FakeKube(
        pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1", "currentRevision": "r0"}}
    )
    ctl = EpochMovesAfterPlanning(info(1), info(1))
    await reconcile_group(runtime(kube, ctl), group(), Events())
    assert [c for c in kube.calls if c[0] == "delete"] == [("delete", "bg-2")]
    assert ctl.reads == 2


async def test_scale_down_skips_when_master_epoch_moved_since_planning() -> None:
    pods = [pod(i) for i in range(3)]
    kube = FakeKube(pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1"}})
    ctl = EpochMovesAfterPlanning(info(1), info(2, epoch=2, sss=frozenset({2})))
    body = group()
    body["spec"]["replicas"] = 2
    await reconcile_group(runtime(kube, ctl), body, Events())
    assert kube.sts is not None and kube.sts["spec"]["replicas"] == 3


async def test_roll_switchover_is_the_controllers_pick_among_ready_pods() -> None:
    # Slaves bg-1, bg-2 updated; the master's pod bg-0 is the last one outdated.
    pods = [pod(0, revision="r0"), pod(1), pod(2)]
    kube = FakeKube(
        pods, {"spec": {"replicas": 3}, "status": {"updateRevision": "r1", "currentRevision": "r0"}}
    )
    ctl = FakeController(info(1))
    events = Events()
    await reconcile_group(runtime(kube, ctl), group(), events)
    assert ("switchover", [2, 3]) in ctl.calls
    assert not [c for c in ctl.calls if c[0] == "elect" and c != ("elect", 2)]
    assert [c for c in kube.calls if c[0] == "delete"] == []
    assert (
        "Normal",
        "Switchover",
        "rolling update: master last: master 1 → 2 at epoch 2",
    ) in events
