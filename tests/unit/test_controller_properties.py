"""Hypothesis properties of the controller core (DESIGN.md §2.2, §8 unit/):

- masterEpoch and syncStateSetEpoch never decrease (also across a whole-set
  CleanBrokerData and re-creation);
- at most one master per (broker set, masterEpoch), even when several
  leaders' election decisions, made on the same snapshot, commit in any
  order (they are queued and delivered late on purpose);
- an AlterSyncStateSet carrying any stale epoch or a wrong master is
  rejected and changes nothing;
- ApplyBrokerId is a compare-and-set: two registerCodes racing for one id,
  exactly one wins when the id was free, none when it was already held;
- a broker set that has had no master since it was created (or re-created
  after a whole-set CleanBrokerData) elects its first master as soon as a
  live registered broker asks, above every epoch the name used before
  (issue 22: a re-created group never got a master);
- a request id answers once: repeating any earlier event (same id) returns
  its first answer and changes nothing; the broker sets always equal those
  of a reference state that applies each request once, without ids.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_controller.api import BrokerSetKey
from brokergroup_controller.election import (
    ElectionRequest,
    ElectionTrigger,
    ReplicaHeartbeat,
    decide_election,
)
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    CleanBrokerData,
    ControllerState,
    ElectMaster,
    Event,
    RegisterBroker,
)

C = "c"
NAMES = ("a", "b")
IDS = st.integers(min_value=1, max_value=4)

heartbeat = st.builds(
    ReplicaHeartbeat,
    broker_id=IDS,
    epoch=st.integers(0, 5),
    max_offset=st.integers(0, 1000),
    election_priority=st.integers(0, 2),
)

op = st.one_of(
    st.tuples(st.just("apply"), st.sampled_from(NAMES), IDS, st.sampled_from(["x", "y"])),
    st.tuples(st.just("register"), st.sampled_from(NAMES), IDS),
    st.tuples(
        st.just("alter"),
        st.sampled_from(NAMES),
        st.frozensets(IDS, max_size=4),
        st.integers(-1, 1),  # masterEpoch skew
        st.integers(-1, 1),  # syncStateSetEpoch skew
        st.booleans(),  # wrong master
    ),
    st.tuples(
        st.just("decide"),
        st.sampled_from(NAMES),
        st.lists(heartbeat, max_size=4),
        st.sampled_from(list(ElectionTrigger)),
        st.one_of(st.none(), IDS),
        st.booleans(),  # designate the requester
        st.booleans(),  # unclean
    ),
    st.tuples(st.just("deliver"), st.integers(0, 7)),
    st.tuples(st.just("clean"), st.sampled_from(NAMES), st.one_of(st.none(), st.frozensets(IDS))),
)


def broker_sets_of(state: ControllerState) -> dict[str, Any]:
    """The dump without the table of recent request ids."""
    dump = copy.deepcopy(state.to_dict())
    del dump["recentRequests"]
    return dump


class Checker:
    def __init__(self) -> None:
        self.state = ControllerState()
        self.pending: list[ElectMaster] = []
        self.high_water: dict[BrokerSetKey, tuple[int, int]] = {}
        self.master_of_epoch: dict[tuple[BrokerSetKey, int], int | None] = {}
        # The model of "has had a master since (re-)creation", kept apart from the state's.
        self.had_master: set[BrokerSetKey] = set()

    def apply(self, event: Event) -> ErrorCode:
        before = broker_sets_of(self.state)
        result = self.state.apply(event)
        if not result.ok:  # (its answer is remembered under its request id, if any)
            assert broker_sets_of(self.state) == before, f"rejected {event} changed state"
        if event.key not in self.state.broker_sets:
            self.had_master.discard(event.key)
        elif result.ok and isinstance(event, ElectMaster) and event.new_master_broker_id:
            self.had_master.add(event.key)
        self.check()
        return result.code

    def check(self) -> None:
        for key, broker_set in self.state.broker_sets.items():
            epochs = (broker_set.master_epoch, broker_set.sync_state_set_epoch)
            old = self.high_water.get(key, (0, 0))
            assert epochs[0] >= old[0] and epochs[1] >= old[1], (key, old, epochs)
            self.high_water[key] = epochs
            slot = (key, broker_set.master_epoch)
            seen = self.master_of_epoch.setdefault(slot, broker_set.master_broker_id)
            assert seen == broker_set.master_broker_id, f"two masters in {slot}"

    def step(self, operation: tuple[Any, ...]) -> None:
        kind = operation[0]
        if kind == "apply":
            _, name, broker_id, code = operation
            self.apply(ApplyBrokerId(C, name, broker_id, code, f"h{broker_id}:1"))
        elif kind == "register":
            _, name, broker_id = operation
            self.apply(RegisterBroker(C, name, broker_id, f"n{broker_id}:1"))
        elif kind == "alter":
            self.alter(*operation[1:])
        elif kind == "decide":
            self.decide(*operation[1:])
        elif kind == "deliver" and self.pending:
            self.apply(self.pending.pop(operation[1] % len(self.pending)))
        elif kind == "clean":
            _, name, ids = operation
            self.apply(CleanBrokerData(C, name, ids))

    def alter(
        self, name: str, members: frozenset[int], m_skew: int, s_skew: int, wrong: bool
    ) -> None:
        broker_set = self.state.snapshot(C, name)
        if broker_set is None or broker_set.master_broker_id is None:
            return
        master = broker_set.master_broker_id + (10 if wrong else 0)
        event = AlterSyncStateSet(
            C,
            name,
            master,
            broker_set.master_epoch + m_skew,
            members | {broker_set.master_broker_id},
            broker_set.sync_state_set_epoch + s_skew,
        )
        code = self.apply(event)
        if wrong or m_skew or s_skew:
            assert code in (
                ErrorCode.INVALID_MASTER,
                ErrorCode.FENCED_MASTER_EPOCH,
                ErrorCode.FENCED_SYNC_STATE_SET_EPOCH,
            ), code

    def decide(
        self,
        name: str,
        heartbeats: list[ReplicaHeartbeat],
        trigger: ElectionTrigger,
        requester: int | None,
        designate: bool,
        unclean: bool,
    ) -> None:
        broker_set = self.state.snapshot(C, name)
        if broker_set is None:
            return
        alive = {h.broker_id: h for h in heartbeats}
        request = ElectionRequest(
            trigger,
            requester_broker_id=requester,
            designated_broker_id=requester if designate else None,
            enable_elect_unclean_master=unclean,
        )
        decision = decide_election(broker_set, alive, request)
        assert decision.message
        if decision.event is not None:
            new_master = decision.event.new_master_broker_id
            if new_master is not None and broker_set.key in self.had_master and not unclean:
                assert new_master in broker_set.sync_state_set
            self.pending.append(decision.event)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=60))
def test_epochs_monotonic_and_one_master_per_epoch(operations: list[tuple[Any, ...]]) -> None:
    checker = Checker()
    for operation in operations:
        checker.step(operation)
    while checker.pending:
        checker.apply(checker.pending.pop())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(IDS, st.sampled_from(["p", "q", "r"])), max_size=6),
    IDS,
)
def test_apply_broker_id_is_a_compare_and_set(
    history: list[tuple[int, str]], contested_id: int
) -> None:
    state = ControllerState()
    for broker_id, code in history:
        state.apply(ApplyBrokerId(C, "a", broker_id, code, "h:1"))
    broker_set = state.get(C, "a")
    held = broker_set.brokers.get(contested_id) if broker_set else None
    free = held is None and (broker_set is not None or contested_id == 1)
    first = state.apply(ApplyBrokerId(C, "a", contested_id, "racer-1", "h:1")).ok
    second = state.apply(ApplyBrokerId(C, "a", contested_id, "racer-2", "h:2")).ok
    assert not (first and second)
    assert (first or second) == free


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=60), st.booleans())
def test_a_set_without_a_master_yet_elects_its_first_when_a_broker_asks(
    operations: list[tuple[Any, ...]], deliver_stale: bool
) -> None:
    checker = Checker()
    for operation in operations:
        checker.step(operation)
    if deliver_stale:  # decisions taken before a clean must not spoil the successor
        while checker.pending:
            checker.apply(checker.pending.pop())
    for name in NAMES:
        broker_set = checker.state.snapshot(C, name)
        if broker_set is None or broker_set.key in checker.had_master:
            continue
        floor = checker.high_water.get(broker_set.key, (0, 0))
        requester = max(broker_set.brokers)
        request = ElectionRequest(ElectionTrigger.BROKER, requester_broker_id=requester)
        decision = decide_election(broker_set, {requester: ReplicaHeartbeat(requester)}, request)
        assert decision.event is not None, decision.message
        assert checker.apply(decision.event) is ErrorCode.SUCCESS
        after = checker.state.get(C, name)
        assert after is not None
        assert after.master_broker_id == requester
        assert after.master_epoch > floor[0]
        assert after.sync_state_set == {requester}


class DedupChecker(Checker):
    """Every event gets a request id; a reference state applies each first
    occurrence without one. A repeat must return the first answer and leave
    the broker sets exactly as the reference has them (issue 17 item 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.reference = ControllerState()
        self.sent: list[tuple[Event, ErrorCode]] = []

    def apply(self, event: Event) -> ErrorCode:
        event = replace(event, request_id=f"r{len(self.sent)}")
        code = super().apply(event)
        assert self.reference.apply(replace(event, request_id="")).code is code
        self.sent.append((event, code))
        self.compare()
        return code

    def repeat(self, index: int) -> None:
        if not self.sent:
            return
        event, code = self.sent[index % len(self.sent)]
        before = copy.deepcopy(self.state.to_dict())
        assert self.state.apply(event).code is code
        assert self.state.to_dict() == before, f"the repeat of {event} changed state"

    def compare(self) -> None:
        assert broker_sets_of(self.state) == broker_sets_of(self.reference)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(op, st.tuples(st.just("repeat"), st.integers(0, 60))), max_size=60))
def test_a_repeated_request_id_gets_its_first_answer_and_changes_nothing(
    operations: list[tuple[Any, ...]],
) -> None:
    checker = DedupChecker()
    for operation in operations:
        if operation[0] == "repeat":
            checker.repeat(operation[1])
        else:
            checker.step(operation)
    checker.compare()
