"""Register-state machine (DESIGN.md §3.4; seed persistent-broker-id,
"Online Process" and "Fault tolerance").

How: each simulated broker has its own "disk" (the temp/meta identity files)
and runs `RegisterMachine` against the controller's real pure state machine
(`ControllerState`, which does the registerCode CAS). A crash either loses
an action before it ran, or after its effect but before the answer reached
the machine (answer lost). A table drives one broker through a crash at
every step; hypothesis interleaves several brokers with random crashes.
Checked: every broker ends with one BrokerId, none shared, and a broker
that had committed `.broker.meta` never changes its id.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.core.register_state import (
    Action,
    ApplyAnswered,
    ApplyBrokerId,
    CommitTemp,
    DeleteTempAndRestart,
    Done,
    Fail,
    FilesFound,
    GetNextBrokerId,
    Input,
    MetaCommitted,
    NextBrokerIdAnswered,
    Register,
    RegisterAnswered,
    RegisterMachine,
    RegisterProtocolError,
    RegisterState,
    RoleConfirmed,
    TempDeleted,
    TempWritten,
    WriteTemp,
)
from brokergroup_controller import state as cs

CLUSTER, NAME = "c1", "b1"


@dataclass
class Disk:
    temp: tuple[int, str] | None = None
    meta: int | None = None

    def files(self) -> FilesFound:
        return FilesFound(
            temp_broker_id=None if self.temp is None else self.temp[0],
            temp_register_code=None if self.temp is None else self.temp[1],
            meta_broker_id=self.meta,
            meta_cluster_name=None if self.meta is None else CLUSTER,
            meta_broker_name=None if self.meta is None else NAME,
        )


class SimBroker:
    def __init__(self, index: int, controller: cs.ControllerState) -> None:
        self.index = index
        self.disk = Disk()
        self.controller = controller
        self.codes = (f"code-{index}-{n}" for n in itertools.count())
        self.committed_id: int | None = None
        self.boot()

    def boot(self) -> None:
        self.machine = RegisterMachine(CLUSTER, NAME)
        self.action: Action = self.machine.start(self.disk.files())

    @property
    def done(self) -> bool:
        return isinstance(self.action, Done)

    def effect(self) -> Input:
        """Carry out the current action (disk or controller) and return the answer."""
        action = self.action
        address = f"127.0.0.{self.index}:10911"
        match action:
            case GetNextBrokerId():
                return NextBrokerIdAnswered(
                    self.controller.next_broker_id(CLUSTER, NAME), next(self.codes)
                )
            case WriteTemp(broker_id, code):
                self.disk.temp = (broker_id, code)
                return TempWritten()
            case ApplyBrokerId(broker_id, code):
                result = self.controller.apply(
                    cs.ApplyBrokerId(CLUSTER, NAME, broker_id, code, address)
                )
                return ApplyAnswered(result.ok, result.next_broker_id or 0)
            case CommitTemp(broker_id):
                assert self.disk.temp is not None and self.disk.temp[0] == broker_id
                self.disk.temp, self.disk.meta = None, broker_id
                return MetaCommitted()
            case DeleteTempAndRestart():
                self.disk.temp = None
                return TempDeleted()
            case Register(broker_id):
                result = self.controller.apply(cs.RegisterBroker(CLUSTER, NAME, broker_id, address))
                return RegisterAnswered(
                    result.ok, result.code is cs.ErrorCode.NEED_TO_BE_REGISTERED
                )
        raise AssertionError(f"no effect for {action!r}")

    def step(self) -> None:
        self.action = self.machine.handle(self.effect())
        self.check_stable()

    def crash_before(self) -> None:
        self.boot()
        self.check_stable()

    def crash_after(self) -> None:
        self.effect()  # the effect happened, its answer is lost
        self.boot()
        self.check_stable()

    def check_stable(self) -> None:
        if self.disk.meta is not None:
            if self.committed_id is None:
                self.committed_id = self.disk.meta
            assert self.disk.meta == self.committed_id, "a committed BrokerId changed"

    def run_to_done(self, max_steps: int = 50) -> int:
        for _ in range(max_steps):
            if self.done:
                assert isinstance(self.action, Done)
                return self.action.broker_id
            self.step()
        raise AssertionError(f"broker {self.index} did not finish: {self.action!r}")


def check_unique(brokers: list[SimBroker], controller: cs.ControllerState) -> None:
    ids = [b.run_to_done() for b in brokers]
    assert len(set(ids)) == len(ids), f"two brokers share a BrokerId: {ids}"
    broker_set = controller.get(CLUSTER, NAME)
    assert broker_set is not None
    for broker, broker_id in zip(brokers, ids, strict=True):
        assert broker.disk.meta == broker_id
        assert broker.disk.temp is None
        assert broker_id in broker_set.brokers
        assert broker.machine.state is RegisterState.REGISTERED


# ---------------------------------------------------------------- happy path


def test_first_start_walks_every_state_in_order() -> None:
    controller = cs.ControllerState()
    broker = SimBroker(1, controller)
    seen = [(broker.machine.state, type(broker.action).__name__)]
    while not broker.done:
        broker.step()
        seen.append((broker.machine.state, type(broker.action).__name__))
    assert seen == [
        (RegisterState.INITIAL, "GetNextBrokerId"),
        (RegisterState.INITIAL, "WriteTemp"),
        (RegisterState.CREATE_TEMP_METADATA_FILE_DONE, "ApplyBrokerId"),
        (RegisterState.CREATE_TEMP_METADATA_FILE_DONE, "CommitTemp"),
        (RegisterState.CREATE_METADATA_FILE_DONE, "Register"),
        (RegisterState.REGISTERED, "Done"),
    ]
    assert broker.machine.handle(RoleConfirmed()) == Done(1)
    assert broker.machine.state is RegisterState.RUNNING


def test_normal_restart_goes_straight_to_register() -> None:
    """Seed: "Node online after normal restart" — continue from RegisterBrokerToController."""
    controller = cs.ControllerState()
    broker = SimBroker(1, controller)
    broker.run_to_done()
    broker.boot()
    assert broker.machine.state is RegisterState.CREATE_METADATA_FILE_DONE
    assert broker.action == Register(1)
    assert broker.run_to_done() == 1


# ---------------------------------------------------------------- a crash at every step


@pytest.mark.parametrize("crash_at", range(6))
@pytest.mark.parametrize("answer_lost", [False, True])
def test_crash_at_every_step_recovers_the_same_broker_id(crash_at: int, answer_lost: bool) -> None:
    """Seed "Fault tolerance": a crash before or after each step's effect."""
    controller = cs.ControllerState()
    first = SimBroker(1, controller)
    first.run_to_done()  # an established broker holds id 1
    broker = SimBroker(2, controller)
    for _ in range(crash_at):
        if broker.done:
            break
        broker.step()
    if not broker.done:
        broker.crash_after() if answer_lost else broker.crash_before()
    assert broker.run_to_done() == 2
    check_unique([first, broker], controller)


def test_temp_id_taken_by_another_broker_is_deleted_and_restarted() -> None:
    """Seed: "CreateTempMetaFile success, ApplyBrokerId fail"."""
    controller = cs.ControllerState()
    a, b = SimBroker(1, controller), SimBroker(2, controller)
    a.step()  # next id 1
    b.step()  # next id 1 too
    a.step()  # temp (1, code-1)
    b.step()  # temp (1, code-2)
    a.step()  # applied 1
    b.step()  # refused
    assert b.action == DeleteTempAndRestart(1)
    b.crash_before()  # temp still on disk → re-applied, refused again
    assert b.action == ApplyBrokerId(1, "code-2-0")
    b.step()
    assert isinstance(b.action, DeleteTempAndRestart)
    check_unique([a, b], controller)
    assert b.disk.meta == 2


def test_apply_answer_lost_is_reapplied_with_the_same_register_code() -> None:
    """Seed: "ApplyBrokerId success, CreateMetaFileFromTemp fail"."""
    controller = cs.ControllerState()
    broker = SimBroker(1, controller)
    broker.step()
    broker.step()
    assert broker.action == ApplyBrokerId(1, "code-1-0")
    broker.crash_after()  # controller applied it, broker never heard
    assert broker.machine.state is RegisterState.CREATE_TEMP_METADATA_FILE_DONE
    assert broker.action == ApplyBrokerId(1, "code-1-0")
    assert broker.run_to_done() == 1


def test_broker_restarted_on_a_new_address_keeps_its_id() -> None:
    controller = cs.ControllerState()
    broker = SimBroker(1, controller)
    broker.run_to_done()
    broker.index = 99  # new address
    broker.boot()
    assert broker.run_to_done() == 1
    broker_set = controller.get(CLUSTER, NAME)
    assert broker_set is not None and broker_set.brokers[1].address == "127.0.0.99:10911"


def test_meta_of_another_broker_set_fails_with_a_reason() -> None:
    machine = RegisterMachine(CLUSTER, NAME)
    action = machine.start(
        FilesFound(meta_broker_id=3, meta_cluster_name="x", meta_broker_name="y")
    )
    assert isinstance(action, Fail) and "x/y" in action.reason


def test_controller_without_our_id_fails_with_a_reason() -> None:
    machine = RegisterMachine(CLUSTER, NAME)
    machine.start(FilesFound(meta_broker_id=3))
    action = machine.handle(RegisterAnswered(False, need_to_be_registered=True))
    assert isinstance(action, Fail) and "BrokerId 3" in action.reason


def test_out_of_order_input_is_a_protocol_error_and_changes_nothing() -> None:
    machine = RegisterMachine(CLUSTER, NAME)
    machine.start(FilesFound())
    with pytest.raises(RegisterProtocolError):
        machine.handle(MetaCommitted())
    assert machine.state is RegisterState.INITIAL
    assert machine.pending_action == GetNextBrokerId()


# ---------------------------------------------------------------- interleavings


@settings(max_examples=300, deadline=None)
@given(
    n_brokers=st.integers(min_value=2, max_value=4),
    schedule=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3),
            st.sampled_from(["step", "step", "step", "crash_before", "crash_after"]),
        ),
        max_size=60,
    ),
)
def test_random_interleavings_and_crashes_never_share_an_id(
    n_brokers: int, schedule: list[tuple[int, str]]
) -> None:
    controller = cs.ControllerState()
    brokers = [SimBroker(i + 1, controller) for i in range(n_brokers)]
    for index, op in schedule:
        broker = brokers[index % n_brokers]
        if broker.done and op == "step":
            continue
        if op == "crash_after" and broker.done:
            op = "crash_before"
        getattr(broker, op)()
    check_unique(brokers, controller)
    assert sorted(b.disk.meta or 0 for b in brokers)[-1] <= controller.next_broker_id(CLUSTER, NAME)
