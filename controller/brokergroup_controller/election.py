"""Election policy (DESIGN.md §2.2 ElectMaster), a pure function.

The leader calls `decide_election` with a snapshot of the broker set and its
own liveness view; the result is either a refusal (code + message, nothing
to commit) or an `ElectMaster` event to propose through Raft. The event
carries the epochs the decision was based on, so `ControllerState.apply`
rejects it if another decision committed first.

Rules:
- A live master is kept unless an admin designates another broker
  (MASTER_STILL_EXIST), or the master itself asks to be re-elected: a master
  that restarted before the controller noticed must open a new masterEpoch at
  its current log end (DESIGN.md §3.2), since it may have lost an unflushed
  tail its slaves still hold under the old epoch.
- First election of a set (it has never had a master: a new set at
  masterEpoch 0, or one re-created after a whole-set CleanBrokerData, which
  starts at its predecessor's epoch floor): the designated broker or else the
  requester wins; there is no SyncStateSet yet.
- Otherwise candidates = SyncStateSet ∩ alive, or every alive registered
  replica with `enable_elect_unclean_master`; the old master is never a
  candidate (it is dead, or being replaced on purpose).
- Ranking: epoch desc, maxOffset desc, electionPriority asc, brokerId asc —
  the replica with the newest, longest log wins; priority then id break ties
  deterministically.
- A replica alive only by a new controller leader's grace (no heartbeat to
  this leader yet) keeps a live master in place but is never a candidate of
  a controller- or broker-triggered election (an admin may designate it): it
  may be dead. While such SyncStateSet members could still prove themselves,
  a controller-triggered election with no other candidate waits (retried).
- No candidate: a controller-triggered election records "no master"
  (masterEpoch+1) so the dead master is fenced; a broker/admin request is
  refused with MASTER_NOT_AVAILABLE.

Switchover (an admin election with `switchover` and no designated broker: the
operator's rolling update and scale-down, `brokergroup admin switchover`): move
a live master to the best other replica, as Patroni's switchover without a
candidate does. The controller owns the choice (`switchover_targets`): the live
SyncStateSet members other than the master, each heard by this leader (a replica
alive only by grace may be dead), within `eligible_broker_ids` when the caller
names them (the operator passes the brokers whose pods are ready: the controller
cannot see pods), ranked by `rank_key` exactly as an election ranks, so
electionPriority is honoured. Never an unclean choice, whatever
enableElectUncleanMaster says: a planned move must not lose acknowledged writes.
No live master: refused (MASTER_NOT_AVAILABLE; the controller elects on its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum

from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.state import BrokerSet, ElectMaster


class ElectionTrigger(StrEnum):
    BROKER = "broker"  # a broker found no master and asked
    ADMIN = "admin"  # `brokergroup admin elect-master` (may designate)
    CONTROLLER = "controller"  # the leader saw the master go inactive


@dataclass(frozen=True)
class ReplicaHeartbeat:
    """What the leader last heard from an alive replica (§2.3)."""

    broker_id: int
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0


@dataclass(frozen=True)
class ElectionRequest:
    trigger: ElectionTrigger
    requester_broker_id: int | None = None
    designated_broker_id: int | None = None
    enable_elect_unclean_master: bool = False
    switchover: bool = False
    """Admin: move the live master to the best other in-sync replica (`switchover_targets`)."""
    eligible_broker_ids: frozenset[int] | None = None
    """With `switchover`: only these may take over (None: any); the caller's own facts,
    e.g. which brokers' pods are ready."""


@dataclass(frozen=True)
class ElectionDecision:
    code: ErrorCode
    message: str
    event: ElectMaster | None = None

    @property
    def ok(self) -> bool:
        return self.code is ErrorCode.SUCCESS


def rank_key(heartbeat: ReplicaHeartbeat) -> tuple[int, int, int, int]:
    """Smaller is better: (epoch desc, maxOffset desc, electionPriority asc, brokerId asc)."""
    return (
        -heartbeat.epoch,
        -heartbeat.max_offset,
        heartbeat.election_priority,
        heartbeat.broker_id,
    )


def switchover_targets(
    broker_set: BrokerSet,
    alive: Mapping[int, ReplicaHeartbeat],
    unheard: AbstractSet[int] = frozenset(),
    eligible_broker_ids: AbstractSet[int] | None = None,
) -> list[ReplicaHeartbeat]:
    """Who may take over from the current master in a switchover, best first: alive
    SyncStateSet members heard by this leader, not the master, within
    `eligible_broker_ids` if given, ranked by `rank_key` (the election ranking)."""
    pool = [
        heartbeat
        for broker_id, heartbeat in alive.items()
        if broker_id in broker_set.brokers
        and broker_id in broker_set.sync_state_set
        and broker_id != broker_set.master_broker_id
        and broker_id not in unheard
        and (eligible_broker_ids is None or broker_id in eligible_broker_ids)
    ]
    return sorted(pool, key=rank_key)


def _switchover(
    broker_set: BrokerSet,
    alive: Mapping[int, ReplicaHeartbeat],
    request: ElectionRequest,
    unheard: AbstractSet[int],
) -> ElectionDecision:
    name = broker_set.broker_name
    old_master = broker_set.master_broker_id
    if old_master is None or old_master not in alive:
        return ElectionDecision(
            ErrorCode.MASTER_NOT_AVAILABLE,
            f"{name} has no live master to switch over from"
            + ("" if old_master is None else f" (master {old_master} is not alive)")
            + ": the controller elects one itself",
        )
    ranked = switchover_targets(broker_set, alive, unheard, request.eligible_broker_ids)
    if not ranked:
        within = (
            ""
            if request.eligible_broker_ids is None
            else f" within the eligible {sorted(request.eligible_broker_ids)}"
        )
        return ElectionDecision(
            ErrorCode.ELECT_TARGET_NOT_ELIGIBLE,
            f"no replica of {name} can take over from master {old_master}: none of the "
            f"SyncStateSet {sorted(broker_set.sync_state_set)} is alive and heard{within} "
            f"(alive {sorted(alive)})",
        )
    winner = ranked[0].broker_id
    return ElectionDecision(
        ErrorCode.SUCCESS,
        f"switchover of {name}: broker {winner} takes over from master {old_master}, "
        f"best of {[h.broker_id for h in ranked]}",
        _event(broker_set, winner, f"switchover ({request.trigger})"),
    )


def _event(broker_set: BrokerSet, new_master: int | None, reason: str) -> ElectMaster:
    return ElectMaster(
        cluster_name=broker_set.cluster_name,
        broker_name=broker_set.broker_name,
        new_master_broker_id=new_master,
        based_on_master_epoch=broker_set.master_epoch,
        based_on_sync_state_set_epoch=broker_set.sync_state_set_epoch,
        reason=reason,
    )


def decide_election(
    broker_set: BrokerSet,
    alive: Mapping[int, ReplicaHeartbeat],
    request: ElectionRequest,
    unheard: AbstractSet[int] = frozenset(),
    inactive: Mapping[int, str] | None = None,
) -> ElectionDecision:
    """Decide an election for `broker_set` given the alive replicas' heartbeats;
    `unheard`: those of them alive only by the leader's grace (never candidates);
    `inactive`: why the others are not alive, for the refusals' messages only."""
    name = broker_set.broker_name
    old_master = broker_set.master_broker_id
    designated = request.designated_broker_id

    if designated is not None and designated not in broker_set.brokers:
        return ElectionDecision(
            ErrorCode.ELECT_TARGET_NOT_ELIGIBLE,
            f"designated broker {name}:{designated} is not registered",
        )
    if request.switchover:
        assert designated is None, "a switchover lets the controller pick the target"
        return _switchover(broker_set, alive, request, unheard)
    if (
        old_master is not None
        and old_master in alive
        and designated == old_master
        and request.requester_broker_id == old_master
    ):
        return ElectionDecision(
            ErrorCode.SUCCESS,
            f"master {old_master} of {name} restarted: re-elected at a new masterEpoch",
            _event(broker_set, old_master, "the master renews its epoch after a restart"),
        )
    if old_master is not None and old_master in alive and designated in (None, old_master):
        return ElectionDecision(
            ErrorCode.MASTER_STILL_EXIST,
            f"broker {name}:{old_master} is alive and still master at "
            f"masterEpoch {broker_set.master_epoch}",
        )

    if not broker_set.has_had_master and old_master is None:
        winner = designated if designated is not None else request.requester_broker_id
        if winner is None:
            return ElectionDecision(
                ErrorCode.MASTER_NOT_AVAILABLE,
                f"{name} has never had a master; waiting for a broker to ask",
            )
        if winner not in broker_set.brokers:
            return ElectionDecision(
                ErrorCode.NEED_TO_BE_REGISTERED,
                f"broker {name}:{winner} is not registered",
            )
        if winner not in alive:
            return ElectionDecision(
                ErrorCode.BROKER_NOT_ALIVE,
                f"broker {name}:{winner} is not alive"
                + (f": {inactive[winner]}" if inactive and winner in inactive else ""),
            )
        return ElectionDecision(
            ErrorCode.SUCCESS,
            f"first master of {name}: {winner}",
            _event(broker_set, winner, f"first election ({request.trigger})"),
        )

    pool = {broker_id for broker_id in alive if broker_id in broker_set.brokers}
    if not request.enable_elect_unclean_master:
        pool &= broker_set.sync_state_set
    if old_master is not None:
        pool.discard(old_master)
    if request.trigger is not ElectionTrigger.ADMIN:
        # An admin who designates a replica takes responsibility for it; the
        # controller's own and brokers' elections need proof of life.
        pool -= unheard

    if designated is not None:
        if designated not in pool:
            kind = (
                "alive replicas"
                if request.enable_elect_unclean_master
                else (f"SyncStateSet {sorted(broker_set.sync_state_set)} ∩ alive")
            )
            return ElectionDecision(
                ErrorCode.ELECT_TARGET_NOT_ELIGIBLE,
                f"designated broker {name}:{designated} is not among the {kind} "
                f"(eligible: {sorted(pool)})",
            )
        return ElectionDecision(
            ErrorCode.SUCCESS,
            f"designated broker {designated} elected master of {name}",
            _event(broker_set, designated, f"designated by {request.trigger}"),
        )

    if pool:
        winner = min((alive[b] for b in pool), key=rank_key).broker_id
        return ElectionDecision(
            ErrorCode.SUCCESS,
            f"broker {winner} elected master of {name} from {sorted(pool)}",
            _event(broker_set, winner, f"elected ({request.trigger})"),
        )

    waiting = (broker_set.sync_state_set & unheard) - {old_master}
    if waiting and request.trigger is ElectionTrigger.CONTROLLER:
        return ElectionDecision(
            ErrorCode.MASTER_NOT_AVAILABLE,
            f"SyncStateSet members {sorted(waiting)} of {name} have not heartbeated to this "
            "controller leader yet (its grace after taking over): waiting for proof of life",
        )
    if request.trigger is ElectionTrigger.CONTROLLER and old_master is not None:
        return ElectionDecision(
            ErrorCode.SUCCESS,
            f"master {old_master} of {name} is gone and no SyncStateSet member is alive: "
            "no master until one returns",
            _event(broker_set, None, "no eligible replica alive"),
        )
    return ElectionDecision(
        ErrorCode.MASTER_NOT_AVAILABLE,
        f"no eligible replica for {name}: SyncStateSet {sorted(broker_set.sync_state_set)}, "
        f"alive {sorted(alive)}{_why(inactive, sorted(broker_set.brokers))}",
    )


def _why(inactive: Mapping[int, str] | None, broker_ids: Iterable[int]) -> str:
    """ "; not alive: 2 (store cannot take writes: disk usage 96.1% ...)" for a refusal."""
    reasons = [f"{b} ({inactive[b]})" for b in broker_ids if inactive and b in inactive]
    return f"; not alive: {', '.join(reasons)}" if reasons else ""
