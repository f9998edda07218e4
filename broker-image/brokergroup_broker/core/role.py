"""Role decisions from the controller's view of the group (DESIGN.md §3.4, §3.6).

Seeds: controller-mode-design (ReplicasManager switches BrokerRole when the
controller elects), rip-32-slave-acting-master (acting master).
Pure: `decide(current, group, broker_id)` maps the broker's current role
and one controller answer (heartbeat, register or watch) to the decisions
the driver carries out in order.

Rules
-----
- A broker starts FENCED: no reads, no writes, until a controller answer
  names a master (itself → MASTER, another → SLAVE).
- The role changes only for a strictly higher masterEpoch. Answers at a
  lower epoch (a stale leader, a reordered reply) are ignored. At the same
  epoch only the details may move: a slave follows its master's new
  address (the master restarted elsewhere), a master adopts a newer
  SyncStateSet — and a FENCED broker (no role) takes the role an answer at
  its own epoch names with a live master: it was fenced at that epoch by an
  answer that showed no live master (a stale view) or by a transition that
  failed, and would otherwise wait for the next election (issue 37). A
  restarted broker starts at masterEpoch 0, so the controller's current
  epoch is "higher" and it resumes its role, master included (the
  controller never saw it gone).
- A higher masterEpoch with no master (the controller found no candidate)
  demotes a master to FENCED: it has been replaced by nobody, and must
  not keep writing at an epoch the controller moved past.
- No master alive: ask for an election (the controller ranks candidates;
  asking is harmless when we are not one). While there is none, the live
  slave with the smallest brokerId acts as a read-only master (RIP-32);
  it hands back as soon as a master is known.
- Same epoch, master not alive in the controller's view: a master keeps
  its role (the lease, not the role, stops its acknowledgements; if the
  controller sees it again, nothing needs undoing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum


class Role(StrEnum):
    FENCED = "FENCED"
    MASTER = "MASTER"
    SLAVE = "SLAVE"


@dataclass(frozen=True)
class GroupView:
    """The slice of the controller's ReplicaInfo the role rules read."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    alive_broker_ids: frozenset[int] = frozenset()
    master_alive: bool = True  # False: the recorded master is not alive now

    @property
    def live_master_broker_id(self) -> int | None:
        return self.master_broker_id if self.master_alive else None


@dataclass(frozen=True)
class RoleState:
    role: Role = Role.FENCED
    master_epoch: int = 0
    master_broker_id: int | None = None
    master_address: str | None = None
    sync_state_set_epoch: int = 0
    acting_master: bool = False

    @property
    def confirmed(self) -> bool:
        return self.role is not Role.FENCED


# ---------------------------------------------------------------- decisions


@dataclass(frozen=True)
class BecomeMaster:
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class BecomeSlave:
    master_epoch: int
    master_broker_id: int
    master_address: str


@dataclass(frozen=True)
class Fence:
    master_epoch: int
    reason: str


@dataclass(frozen=True)
class SyncStateSetChanged:
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class RequestElection:
    pass


@dataclass(frozen=True)
class SetActingMaster:
    acting: bool


Decision = (
    BecomeMaster | BecomeSlave | Fence | SyncStateSetChanged | RequestElection | SetActingMaster
)


def confirms_master(current: RoleState, group: GroupView, broker_id: int) -> bool:
    """Does this answer renew a master's lease? Only if it names us, alive,
    at exactly the epoch we are master of."""
    return (
        current.role is Role.MASTER
        and group.live_master_broker_id == broker_id
        and group.master_epoch == current.master_epoch
    )


def is_acting_master_candidate(broker_id: int, alive_broker_ids: Iterable[int]) -> bool:
    alive = set(alive_broker_ids)
    return broker_id in alive and broker_id == min(alive)


def decide(
    current: RoleState,
    group: GroupView,
    broker_id: int,
    *,
    enable_slave_acting_master: bool = True,
) -> list[Decision]:
    if group.master_epoch < current.master_epoch:
        return []  # stale answer: epochs only move forward
    decisions: list[Decision] = []
    newer = group.master_epoch > current.master_epoch
    # A recorded master that is not alive is treated as no master: elect, or act.
    master = group.live_master_broker_id

    if newer:
        if master == broker_id:
            decisions.append(
                BecomeMaster(group.master_epoch, group.sync_state_set, group.sync_state_set_epoch)
            )
        elif master is not None and group.master_address:
            decisions.append(BecomeSlave(group.master_epoch, master, group.master_address))
        elif current.role is Role.MASTER:
            decisions.append(
                Fence(
                    group.master_epoch,
                    f"broker {broker_id} was master at masterEpoch {current.master_epoch}; "
                    f"the controller moved to masterEpoch {group.master_epoch} with no master",
                )
            )
    elif master is not None:
        if current.role is Role.FENCED:
            # Same epoch, a live master named, and we hold no role: we were fenced at
            # this epoch, either by an answer that showed it without a live master (a
            # long-poll watch answered by a controller that had lost leadership reads
            # every broker as dead: issue 37, a paused master stayed out 49 s) or by a
            # transition that failed. Take the role the controller gave this epoch.
            # Never a master role we already wrote under: the driver asks for a new
            # epoch when the store's last epoch is this one (restart rule).
            if master == broker_id:
                decisions.append(
                    BecomeMaster(
                        group.master_epoch, group.sync_state_set, group.sync_state_set_epoch
                    )
                )
            elif group.master_address:
                decisions.append(BecomeSlave(group.master_epoch, master, group.master_address))
        elif current.role is Role.MASTER and master == broker_id:
            if group.sync_state_set_epoch > current.sync_state_set_epoch:
                decisions.append(
                    SyncStateSetChanged(group.sync_state_set, group.sync_state_set_epoch)
                )
        elif (
            current.role is Role.SLAVE
            and master != broker_id
            and group.master_address
            and (
                master != current.master_broker_id or group.master_address != current.master_address
            )
        ):
            # Same epoch, the master moved: it restarted on a new address
            # before the controller noticed it gone.
            decisions.append(BecomeSlave(group.master_epoch, master, group.master_address))

    if master is None:
        decisions.append(RequestElection())
    will_be_master = any(isinstance(d, BecomeMaster) for d in decisions) or (
        current.role is Role.MASTER and not any(isinstance(d, Fence) for d in decisions)
    )
    acting = (
        enable_slave_acting_master
        and master is None
        and not will_be_master
        and is_acting_master_candidate(broker_id, group.alive_broker_ids)
    )
    if acting != current.acting_master:
        decisions.append(SetActingMaster(acting))
    return decisions


def apply(current: RoleState, decision: Decision) -> RoleState:
    """The role after the driver carried out `decision` successfully."""
    match decision:
        case BecomeMaster(epoch, _, set_epoch):
            return RoleState(Role.MASTER, epoch, None, None, set_epoch, False)
        case BecomeSlave(epoch, master_id, address):
            return RoleState(Role.SLAVE, epoch, master_id, address, 0, False)
        case Fence(epoch, _):
            return RoleState(Role.FENCED, epoch, None, None, 0, current.acting_master)
        case SyncStateSetChanged(_, set_epoch):
            return replace(current, sync_state_set_epoch=set_epoch)
        case SetActingMaster(acting):
            return replace(current, acting_master=acting)
        case RequestElection():
            return current
    raise AssertionError(f"unknown decision {decision!r}")
