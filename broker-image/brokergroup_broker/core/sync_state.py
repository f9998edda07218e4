"""The master's SyncStateSet maintenance decisions (DESIGN.md §3.3).

Seed: controller-mode-design ("Shrink SyncStateSet", "Expand"); the
"union while pending" rule is Kafka's maximal-ISR (kafka-controller-isr
seed, KIP-497). Pure: time and replica progress come in as arguments.

Theory of operation
-------------------
The master owns the SyncStateSet's *proposals*; the controller owns its
*value*. Every `sync_state_set_check_interval_ms` the driver calls
`decide(now_ms, …)` with the HA service's per-slave progress. It returns at
most one `AlterProposal` (new set = old − shrunk ∪ expanded) and remembers
it as pending; no second proposal is made until `on_alter_accepted`,
`on_alter_refused`, `on_alter_unknown` or a newer controller view settles it.

Rules:
- Shrink a member whose connection is gone, or whose last caught-up time
  (the HA service's lastCaughtUpTimeMs: it acked everything the master had
  when it last sent) is older than ``haMaxTimeSlaveNotCatchUpMs``. A member
  that never connected to this master is measured from the moment it
  became master, so a freshly elected master gives its old set one full
  window to reconnect.
- Expand a connected non-member whose ack ≥ confirmOffset and ≥ the start
  offset of the master's current epoch (it holds everything committed and
  has truncated to this epoch's lineage) and that a member's shrink rules
  would keep (caught up within ``haMaxTimeSlaveNotCatchUpMs``).
- confirmOffset = min ack over the *effective* set, the master counting
  its own max offset. While a proposal is pending the effective set is the
  union of the old and the proposed sets: whichever the controller ends up
  holding, every acknowledged byte is on all of its members, so an
  election from either set loses nothing.
- An answer that never came (timeout, lost response, the controller's
  COMMIT_TIMEOUT or NOT_LEADER) means "maybe committed": the proposal stays
  in the effective set (``in_doubt``) until a controller view shows a
  syncStateSetEpoch above the one it was based on — only then is it known
  which (if any) proposal based on that epoch was applied: the epoch CAS lets
  at most one win. A new proposal may be made meanwhile (again based on the
  same epoch, so again at most one of them can apply); it joins the union.
  FENCED_SYNC_STATE_SET_EPOCH is no definite refusal: it is what the retry
  of an applied proposal hears (from a controller that does not deduplicate
  request ids, or once the id is forgotten), so it too means "maybe
  committed" until the read-back. Only a definite refusal by the
  controller's rules (an invalid or dead member, a fenced masterEpoch)
  drops a proposal.
- confirmOffset never decreases within one master term (the floor starts
  at the persisted confirm offset, capped at the log end): consumers may
  already have read up to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


@dataclass(frozen=True)
class ReplicaProgress:
    """What the master's HA service knows of one slave (HAMasterService.slaves)."""

    ack_offset: int
    last_caught_up_ms: int
    connected: bool


#: Answers to an AlterSyncStateSet after which it may still have been applied
#: (`SyncStateSetManager.on_alter_rejected`): nobody decided (COMMIT_TIMEOUT,
#: NOT_LEADER, UNAVAILABLE), or the controller's syncStateSetEpoch is no longer
#: the proposal's base (FENCED_SYNC_STATE_SET_EPOCH) — maybe because this very
#: proposal moved it and the answer saying so was lost.
ALTER_OUTCOME_UNKNOWN_CODES = frozenset(
    {"COMMIT_TIMEOUT", "NOT_LEADER", "UNAVAILABLE", "FENCED_SYNC_STATE_SET_EPOCH"}
)


class ShrinkReason(StrEnum):
    DISCONNECTED = "the HA connection to the master is gone"
    NOT_CAUGHT_UP = "has not caught up with the master within haMaxTimeSlaveNotCatchUpMs"
    NEVER_CONNECTED = "has not connected to the new master within haMaxTimeSlaveNotCatchUpMs"


@dataclass(frozen=True)
class AlterProposal:
    new_set: frozenset[int]
    based_on_sync_state_set_epoch: int
    shrunk: tuple[tuple[int, ShrinkReason], ...] = ()
    expanded: frozenset[int] = field(default_factory=frozenset)

    def describe(self) -> str:
        parts = [f"{broker_id} {reason}" for broker_id, reason in self.shrunk]
        parts += [f"{broker_id} caught up" for broker_id in sorted(self.expanded)]
        return f"SyncStateSet → {sorted(self.new_set)}: " + "; ".join(parts)


class SyncStateSetManager:
    """The set as one master at one masterEpoch sees it; rebuilt on every role change."""

    def __init__(
        self,
        *,
        master_broker_id: int,
        master_epoch: int,
        epoch_start_offset: int,
        sync_state_set: frozenset[int],
        sync_state_set_epoch: int,
        confirm_offset_floor: int,
        master_since_ms: int,
        ha_max_time_slave_not_catch_up_ms: int,
    ) -> None:
        self.master_broker_id = master_broker_id
        self.master_epoch = master_epoch
        self.epoch_start_offset = epoch_start_offset
        # The controller may hand a set without us after a data wipe; the
        # master always counts itself (AlterSyncStateSet demands it too).
        self.sync_state_set = frozenset(sync_state_set) | {master_broker_id}
        self.sync_state_set_epoch = sync_state_set_epoch
        self.pending: AlterProposal | None = None
        #: Proposals whose answer never came, based on the current epoch: any
        #: one of them may have been applied, so their members stay counted.
        self.in_doubt: tuple[AlterProposal, ...] = ()
        self._sets_cache: (
            tuple[frozenset[int], tuple[AlterProposal, ...], AlterProposal | None,
                  tuple[frozenset[int], int]] | None
        ) = None  # fmt: skip
        self._confirm_offset = confirm_offset_floor
        self._master_since_ms = master_since_ms
        self._not_catch_up_ms = ha_max_time_slave_not_catch_up_ms

    # ---------------------------------------------------------- reads

    def _possible_sets(self) -> list[frozenset[int]]:
        """Every set the controller may hold now (the current one, or one unsettled proposal's)."""
        sets = [self.sync_state_set, *(p.new_set for p in self.in_doubt)]
        if self.pending is not None:
            sets.append(self.pending.new_set)
        return sets

    def _union_and_settled(self) -> tuple[frozenset[int], int]:
        """(`effective_set()`, `settled_set_size()`), computed again only when the set or a
        proposal was replaced: the commit rule asks on every produce and every ack."""
        cached = self._sets_cache
        if (
            cached is not None
            and cached[0] is self.sync_state_set
            and cached[1] is self.in_doubt
            and cached[2] is self.pending
        ):
            return cached[3]
        sets = self._possible_sets()
        answer = frozenset().union(*sets), len(frozenset.intersection(*sets))
        self._sets_cache = (self.sync_state_set, self.in_doubt, self.pending, answer)
        return answer

    def effective_set(self) -> frozenset[int]:
        return self._union_and_settled()[0]

    def settled_set_size(self) -> int:
        """Members that stay in the set whatever the unsettled proposals' fate
        (for the minInSyncReplicas check)."""
        return self._union_and_settled()[1]

    def member_acks(
        self, master_max_offset: int, progress: Mapping[int, ReplicaProgress]
    ) -> dict[int, int]:
        """Ack offset of every effective member; the master's is its own max,
        a member this master has not heard from counts 0."""
        acks: dict[int, int] = {}
        for broker_id in self.effective_set():
            if broker_id == self.master_broker_id:
                acks[broker_id] = master_max_offset
            else:
                seen = progress.get(broker_id)
                acks[broker_id] = 0 if seen is None else min(seen.ack_offset, master_max_offset)
        return acks

    def confirm_offset(
        self, master_max_offset: int, progress: Mapping[int, ReplicaProgress]
    ) -> int:
        return self.confirm_offset_of(self.member_acks(master_max_offset, progress))

    def confirm_offset_of(self, member_acks: Mapping[int, int]) -> int:
        """confirmOffset given `member_acks()`' answer: their minimum, never moving back."""
        computed = min(member_acks.values())
        if computed > self._confirm_offset:
            self._confirm_offset = computed
        return self._confirm_offset

    # ---------------------------------------------------------- decisions

    def decide(
        self,
        now_ms: int,
        master_max_offset: int,
        progress: Mapping[int, ReplicaProgress],
    ) -> AlterProposal | None:
        """At most one proposal in flight; None when nothing should change."""
        if self.pending is not None:
            return None
        confirm = self.confirm_offset(master_max_offset, progress)
        shrunk: list[tuple[int, ShrinkReason]] = []
        for broker_id in sorted(self.sync_state_set - {self.master_broker_id}):
            reason = self._shrink_reason(now_ms, progress.get(broker_id))
            if reason is not None:
                shrunk.append((broker_id, reason))
        expanded = frozenset(
            broker_id
            for broker_id, seen in progress.items()
            if broker_id not in self.sync_state_set
            and broker_id != self.master_broker_id
            and seen.ack_offset >= confirm
            and seen.ack_offset >= self.epoch_start_offset
            # Caught up within the window, as a member must stay: an ack offset alone
            # is no sign of life (RocketMQ expands on a slave's fresh report). A stopped
            # slave's last ack equals the log end while nothing is written; without this
            # it was shrunk and re-added at every check, and an operator scaled down the
            # one live in-sync copy, counting it.
            and self._shrink_reason(now_ms, seen) is None
        )
        if not shrunk and not expanded:
            return None
        new_set = (self.sync_state_set - {b for b, _ in shrunk}) | expanded
        self.pending = AlterProposal(
            new_set=new_set,
            based_on_sync_state_set_epoch=self.sync_state_set_epoch,
            shrunk=tuple(shrunk),
            expanded=expanded,
        )
        return self.pending

    def _shrink_reason(self, now_ms: int, seen: ReplicaProgress | None) -> ShrinkReason | None:
        if seen is None:
            if now_ms - self._master_since_ms > self._not_catch_up_ms:
                return ShrinkReason.NEVER_CONNECTED
            return None
        if not seen.connected:
            return ShrinkReason.DISCONNECTED
        # A member connected before this master took over is measured from the
        # takeover at the earliest: its clock only starts with our first send.
        caught_up_ms = max(seen.last_caught_up_ms, self._master_since_ms)
        if now_ms - caught_up_ms > self._not_catch_up_ms:
            return ShrinkReason.NOT_CAUGHT_UP
        return None

    # ---------------------------------------------------------- answers

    def on_alter_accepted(
        self, proposal: AlterProposal, new_set: frozenset[int], new_set_epoch: int
    ) -> None:
        if self.pending is proposal:
            self.pending = None
        self._adopt(new_set, new_set_epoch)

    def on_alter_rejected(self, proposal: AlterProposal, code: str) -> None:
        """The controller answered `code` (an ErrorCode name) instead of SUCCESS."""
        if code in ALTER_OUTCOME_UNKNOWN_CODES:
            self.on_alter_unknown(proposal)
        else:
            self.on_alter_refused(proposal)

    def on_alter_refused(self, proposal: AlterProposal) -> None:
        """The controller's rules refused it (fenced epoch, invalid member…): it was
        not applied and never will be. Forget it; the next `decide` starts over."""
        if self.pending is proposal:
            self.pending = None

    def on_alter_unknown(self, proposal: AlterProposal) -> None:
        """No answer (timeout, lost response, commit timeout): maybe committed.
        Keep counting its members until a view settles its base epoch; a later
        proposal may be made meanwhile, and joins the union."""
        if self.pending is proposal:
            self.pending = None
            if proposal.based_on_sync_state_set_epoch == self.sync_state_set_epoch:
                self.in_doubt = (*self.in_doubt, proposal)

    def on_controller_view(self, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> None:
        """A heartbeat/watch answer at our masterEpoch. Newer epochs win; a
        pending proposal based on an older epoch is settled by it (either it
        was applied — the new value shows it — or it lost the race)."""
        if sync_state_set_epoch <= self.sync_state_set_epoch:
            return
        self._adopt(sync_state_set, sync_state_set_epoch)
        if (
            self.pending is not None
            and self.pending.based_on_sync_state_set_epoch < sync_state_set_epoch
        ):
            self.pending = None

    def _adopt(self, new_set: frozenset[int], new_set_epoch: int) -> None:
        if new_set_epoch < self.sync_state_set_epoch:
            return
        if new_set_epoch > self.sync_state_set_epoch:
            # The base epoch moved: every proposal based on an older one is settled.
            self.in_doubt = ()
        self.sync_state_set = frozenset(new_set) | {self.master_broker_id}
        self.sync_state_set_epoch = new_set_epoch
