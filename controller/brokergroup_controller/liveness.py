"""Leader-local broker liveness (DESIGN.md §2.3), a pure class.

Theory of operation
-------------------
Only the Raft leader tracks liveness; it is not replicated. The I/O shell
(`server`) feeds every input with the current time as `now_ms` (a monotonic
millisecond clock the shell owns) and asks three kinds of questions:

- `is_alive` / `alive_replicas` / `view`: the leader's view of a replica,
  used by election decisions (`election.ReplicaHeartbeat`) and ReplicaInfo.
- `tick(now_ms, masters)`: which broker sets need a controller-triggered
  election *now*: their master just became inactive (returned at once, not
  on a later scan), or an earlier attempt failed and its backoff expired.
  The shell reports every attempt back with `election_attempted`; attempts
  back off exponentially until one succeeds or the master is alive again.
- `become_leader`: a new leader knows nothing, so every broker gets one
  default timeout of grace before it can be declared inactive.

The leader's own stalls are not the brokers' silence: when two `tick`s are
further apart than `stall_threshold_ms` (the controller was paused, or
starved of CPU), the heartbeats sent meanwhile are still unread in its
sockets, so every clock the verdicts read (last heartbeat, closed
connection) moves forward by the whole gap before this tick decides
anything: each broker gets its full timeout again to be heard.
Reports of a process gone are certain and are not forgiven.

A replica is inactive when any of these holds:
- its last heartbeat is older than its own `heartbeatTimeoutMs`;
- its latest heartbeat said the store cannot take writes;
- it was reported inactive (operator, local supervisor, admin) and has not
  heartbeated since the report. A report names the incarnation it is about
  (the broker's pod uid, or the local supervisor's per-start token; brokers
  send theirs in every heartbeat): one about another incarnation than the
  last heartbeat's is stale and ignored. A report of a *symptom* ("pod not
  ready") counts only through the heartbeat rule: a readiness blip of a
  broker that keeps heartbeating costs no election;
- its heartbeat connection closed and no heartbeat arrived within
  `connection_close_grace_ms` after that. The grace exists because an HTTP
  client may recycle a keep-alive connection while the broker is healthy;
  a real crash sends no further heartbeat, so the grace only delays the
  verdict by about one heartbeat interval.

Heartbeat progress only moves forward: (epoch, maxOffset) is compared
lexicographically and a heartbeat that would move it back (a reordered,
older request) refreshes the timestamp but not the progress.

No clocks, no I/O, no randomness here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from brokergroup_controller.api import BrokerHeartbeat, BrokerSetKey
from brokergroup_controller.backoff import BackoffPolicy
from brokergroup_controller.election import ReplicaHeartbeat

BrokerKey = tuple[str, str, int]  # (clusterName, brokerName, brokerId)


class InactiveReason(StrEnum):
    HEARTBEAT_TIMEOUT = "heartbeat timed out"
    STORE_NOT_WRITABLE = "store cannot take writes"
    REPORTED = "reported inactive"
    CONNECTION_CLOSED = "heartbeat connection closed"
    NEVER_HEARD = "no heartbeat since this controller became leader"


@dataclass
class _Replica:
    last_heartbeat_ms: int
    timeout_ms: int
    heard: bool  # False: only graced by become_leader, no heartbeat yet
    address: str = ""
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    store_writable: bool = True
    store_error: str | None = None
    reported_at_ms: int | None = None
    reported_reason: str | None = None
    closed_at_ms: int | None = None
    process_gone: bool = False  # a witness saw the process end (not just unready)
    symptom_only: bool = False  # the report is a symptom: heartbeats still decide
    incarnation: str = ""  # from the last heartbeat ("" unknown)
    master_lease_ms: int | None = None
    all_ack_in_sync_state_set: bool = False


@dataclass(frozen=True)
class ReplicaView:
    """What the leader knows about one replica, for ReplicaInfo."""

    broker_id: int
    alive: bool
    inactive_reason: str | None
    heard: bool
    address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int
    last_heartbeat_age_ms: int | None


@dataclass(frozen=True)
class WatchedSet:
    """A broker set as `Liveness.tick` needs it: its master and registered ids."""

    master: int | None
    broker_ids: frozenset[int]


@dataclass
class _PendingElection:
    due_ms: int
    backoff_ms: int
    in_flight: bool = False


class Liveness:
    """Leader-local liveness of every replica plus the election retry schedule."""

    def __init__(
        self,
        *,
        default_timeout_ms: int = 2000,
        connection_close_grace_ms: int = 750,
        election_retry_initial_ms: int = 100,
        election_retry_max_ms: int = 2000,
        stall_threshold_ms: int = 500,
    ) -> None:
        if default_timeout_ms <= 0 or connection_close_grace_ms < 0:
            raise ValueError("liveness timeouts must be positive")
        if not 0 < election_retry_initial_ms <= election_retry_max_ms:
            raise ValueError("need 0 < election_retry_initial_ms <= election_retry_max_ms")
        self.default_timeout_ms = default_timeout_ms
        self.connection_close_grace_ms = connection_close_grace_ms
        self.election_retry_initial_ms = election_retry_initial_ms
        self.election_retry_max_ms = election_retry_max_ms
        self._election_backoff = BackoffPolicy(election_retry_initial_ms, election_retry_max_ms)
        self.stall_threshold_ms = stall_threshold_ms
        self._last_tick_ms: int | None = None
        self._replicas: dict[BrokerKey, _Replica] = {}
        self._pending: dict[BrokerSetKey, _PendingElection] = {}
        self._leader_since_ms: int | None = None

    # -------------------------------------------------------------- leadership

    def become_leader(self, now_ms: int) -> None:
        """Start from nothing; every broker gets one default timeout of grace.

        Brokers this leader has not heard from yet count as alive until
        `now_ms + default_timeout_ms`, whether or not their registration is
        already applied here, so a healthy master is never replaced just
        because the controller leader changed.
        """
        self._replicas = {}
        self._pending = {}
        self._leader_since_ms = now_ms
        self._last_tick_ms = None

    def step_down(self) -> None:
        """A follower keeps no liveness: the next leader starts from grace."""
        self._replicas = {}
        self._pending = {}
        self._leader_since_ms = None
        self._last_tick_ms = None

    def _in_grace(self, now_ms: int) -> bool:
        since = self._leader_since_ms
        return since is not None and now_ms - since <= self.default_timeout_ms

    # ----------------------------------------------------------------- inputs

    def heartbeat(self, hb: BrokerHeartbeat, now_ms: int) -> None:
        key = (hb.cluster_name, hb.broker_name, hb.broker_id)
        was_alive = self.is_alive(key, now_ms)
        replica = self._replicas.get(key)
        if replica is None:
            replica = _Replica(
                last_heartbeat_ms=now_ms, timeout_ms=hb.heartbeat_timeout_ms, heard=True
            )
            self._replicas[key] = replica
            replica.epoch, replica.max_offset = hb.epoch, hb.max_offset
            replica.confirm_offset = hb.confirm_offset
        elif (hb.epoch, hb.max_offset) >= (replica.epoch, replica.max_offset):
            replica.epoch, replica.max_offset = hb.epoch, hb.max_offset
            replica.confirm_offset = max(replica.confirm_offset, hb.confirm_offset)
        replica.heard = True
        replica.address = hb.address
        replica.last_heartbeat_ms = max(replica.last_heartbeat_ms, now_ms)
        replica.timeout_ms = (
            hb.heartbeat_timeout_ms if hb.heartbeat_timeout_ms > 0 else (self.default_timeout_ms)
        )
        replica.election_priority = hb.election_priority
        replica.store_writable = hb.store_writable
        replica.store_error = hb.store_error
        replica.master_lease_ms = hb.master_lease_ms
        replica.all_ack_in_sync_state_set = hb.all_ack_in_sync_state_set
        replica.incarnation = hb.incarnation or replica.incarnation
        # A heartbeat sent after a report or a closed connection proves the broker is back.
        replica.reported_at_ms = None
        replica.reported_reason = None
        replica.closed_at_ms = None
        replica.process_gone = False
        replica.symptom_only = False
        if not was_alive and self.is_alive(key, now_ms):
            self._revived(key, now_ms)

    def touch(self, key: BrokerKey, address: str, now_ms: int) -> None:
        """A request from the broker itself (register, elect) proves it is up."""
        was_alive = self.is_alive(key, now_ms)
        replica = self._replicas.get(key)
        if replica is None:
            replica = _Replica(
                last_heartbeat_ms=now_ms, timeout_ms=self.default_timeout_ms, heard=True
            )
            self._replicas[key] = replica
        replica.heard = True
        replica.address = address
        replica.last_heartbeat_ms = max(replica.last_heartbeat_ms, now_ms)
        replica.reported_at_ms = None
        replica.reported_reason = None
        replica.closed_at_ms = None
        replica.process_gone = False
        replica.symptom_only = False
        if not was_alive and self.is_alive(key, now_ms):
            self._revived(key, now_ms)

    def report_inactive(
        self,
        key: BrokerKey,
        reason: str,
        now_ms: int,
        *,
        process_gone: bool = False,
        incarnation: str = "",
        symptom_only: bool = False,
    ) -> bool:
        """The operator, the local supervisor or an admin says the broker is gone.

        `process_gone`: the reporter saw the process end (an exit status, a
        terminated container), so it can acknowledge nothing any more.
        `incarnation`: which start of the broker the report is about; False
        (ignored) when the last heartbeat came from another one. `symptom_only`:
        not ready rather than gone; it never outweighs an earlier hard report.
        """
        replica = self._replicas.get(key)
        if replica is not None and incarnation and replica.incarnation not in ("", incarnation):
            return False
        if replica is None:
            replica = _Replica(
                last_heartbeat_ms=now_ms, timeout_ms=self.default_timeout_ms, heard=False
            )
            self._replicas[key] = replica
        hard_before = replica.reported_at_ms is not None and not replica.symptom_only
        replica.symptom_only = symptom_only and not process_gone and not hard_before
        if hard_before and symptom_only:
            return True
        replica.reported_at_ms = now_ms
        replica.reported_reason = reason or InactiveReason.REPORTED.value
        replica.process_gone = replica.process_gone or process_gone
        return True

    def connection_closed(self, key: BrokerKey, now_ms: int) -> None:
        replica = self._replicas.get(key)
        if replica is not None and replica.closed_at_ms is None:
            replica.closed_at_ms = now_ms

    def forget(self, key: BrokerKey) -> None:
        """CleanBrokerData removed the broker."""
        self._replicas.pop(key, None)

    def forget_set(self, set_key: BrokerSetKey) -> None:
        for key in [k for k in self._replicas if (k[0], k[1]) == set_key]:
            del self._replicas[key]
        self._pending.pop(set_key, None)

    # ---------------------------------------------------------------- queries

    def inactive_reason(self, key: BrokerKey, now_ms: int) -> str | None:
        """None if alive, else why not."""
        replica = self._replicas.get(key)
        if replica is None:
            return None if self._in_grace(now_ms) else InactiveReason.NEVER_HEARD.value
        if replica.reported_at_ms is not None and not replica.symptom_only:
            return replica.reported_reason or InactiveReason.REPORTED.value
        if not replica.store_writable:
            detail = f": {replica.store_error}" if replica.store_error else ""
            return f"{InactiveReason.STORE_NOT_WRITABLE.value}{detail}"
        if (
            replica.closed_at_ms is not None
            and now_ms - replica.closed_at_ms >= self.connection_close_grace_ms
        ):
            return InactiveReason.CONNECTION_CLOSED.value
        if not replica.heard:
            return None if self._in_grace(now_ms) else InactiveReason.NEVER_HEARD.value
        if now_ms - replica.last_heartbeat_ms > replica.timeout_ms:
            return InactiveReason.HEARTBEAT_TIMEOUT.value
        return None

    def is_alive(self, key: BrokerKey, now_ms: int) -> bool:
        return self.inactive_reason(key, now_ms) is None

    def takeover_wait_ms(
        self, old_master: BrokerKey, now_ms: int, *, new_master_in_sync_state_set: bool
    ) -> int:
        """How long a master elected now must hold its acknowledgements
        because `old_master` may still hold its lease (DESIGN.md §3.3 "Fencing").

        The old master's lease was renewed at the latest by the answer to
        its last heartbeat, so it ends before that heartbeat's arrival here
        plus its masterLeaseMs (its heartbeat timeout, which is longer, when
        it never said), plus a margin for clock rate drift. Zero when its end
        is certain (a witness saw the process end), or when it acknowledges
        only with its whole SyncStateSet and the new master comes from that
        set (the new master no longer acknowledges for it). A replica this
        leader never heard from may have been renewed by the previous leader
        just before this one took over: its bound starts at the takeover.
        """
        replica = self._replicas.get(old_master)
        if replica is not None and replica.process_gone:
            return 0
        if replica is None or not replica.heard:
            since = self._leader_since_ms if self._leader_since_ms is not None else now_ms
            return max(0, since + self.default_timeout_ms - now_ms)
        if replica.all_ack_in_sync_state_set and new_master_in_sync_state_set:
            return 0
        lease = replica.master_lease_ms or replica.timeout_ms
        margin = max(20, lease // 20)
        return max(0, replica.last_heartbeat_ms + lease + margin - now_ms)

    def process_gone(self, key: BrokerKey) -> bool:
        """A witness saw this replica's process end, and it has not spoken since."""
        replica = self._replicas.get(key)
        return replica is not None and replica.process_gone

    def grace_remaining_ms(self, now_ms: int) -> int:
        """The takeover bound without a replicated record (an election from a
        log older than `takeover.Takeover`): every lease the previous leader
        renewed ends within one timeout of this leader's takeover."""
        since = self._leader_since_ms
        if since is None:
            # Not the leader (a long-poll that outlived its leadership): it knows
            # no lease, so it answers as a leader taking over now would.
            return self.default_timeout_ms
        return max(0, since + self.default_timeout_ms - now_ms)

    def alive_replicas(
        self, set_key: BrokerSetKey, broker_ids: Iterable[int], now_ms: int
    ) -> dict[int, ReplicaHeartbeat]:
        """Alive registered replicas of a set with their progress, for `decide_election`.

        Replicas in the post-failover grace without a heartbeat yet count as
        alive with zero progress: they rank last among candidates.
        """
        alive: dict[int, ReplicaHeartbeat] = {}
        for broker_id in sorted(broker_ids):
            key = (set_key[0], set_key[1], broker_id)
            if not self.is_alive(key, now_ms):
                continue
            replica = self._replicas.get(key)
            if replica is None or not replica.heard:
                alive[broker_id] = ReplicaHeartbeat(broker_id=broker_id)
                continue
            alive[broker_id] = ReplicaHeartbeat(
                broker_id=broker_id,
                epoch=replica.epoch,
                max_offset=replica.max_offset,
                confirm_offset=replica.confirm_offset,
                election_priority=replica.election_priority,
            )
        return alive

    def inactive_reasons(
        self, set_key: BrokerSetKey, broker_ids: Iterable[int], now_ms: int
    ) -> dict[int, str]:
        """Why each replica of a set that is not alive is not, for election refusals."""
        reasons = {b: self.inactive_reason((*set_key, b), now_ms) for b in broker_ids}
        return {b: reason for b, reason in sorted(reasons.items()) if reason is not None}

    def unheard(
        self, set_key: BrokerSetKey, broker_ids: Iterable[int], now_ms: int
    ) -> frozenset[int]:
        """Replicas alive only by this leader's grace: not one heartbeat to it yet."""
        out = set()
        for broker_id in broker_ids:
            key = (set_key[0], set_key[1], broker_id)
            replica = self._replicas.get(key)
            if (replica is None or not replica.heard) and self.is_alive(key, now_ms):
                out.add(broker_id)
        return frozenset(out)

    def view(self, key: BrokerKey, now_ms: int) -> ReplicaView:
        replica = self._replicas.get(key)
        reason = self.inactive_reason(key, now_ms)
        if replica is None:
            return ReplicaView(key[2], reason is None, reason, False, "", 0, 0, 0, 0, None)
        return ReplicaView(
            broker_id=key[2],
            alive=reason is None,
            inactive_reason=reason,
            heard=replica.heard,
            address=replica.address,
            epoch=replica.epoch,
            max_offset=replica.max_offset,
            confirm_offset=replica.confirm_offset,
            election_priority=replica.election_priority,
            last_heartbeat_age_ms=max(0, now_ms - replica.last_heartbeat_ms)
            if replica.heard
            else None,
        )

    def tracked(self) -> list[BrokerKey]:
        return sorted(self._replicas)

    # -------------------------------------------------------- election schedule

    def tick(self, now_ms: int, sets: Mapping[BrokerSetKey, WatchedSet]) -> list[BrokerSetKey]:
        """Broker sets that need a controller-triggered election now.

        `sets` holds every set the shell wants watched: one with a master is
        due as soon as the master is inactive; one without a master (after a
        "no master" election) is due while any of its replicas is alive, so a
        returning SyncStateSet member is elected without waiting for a request.
        """
        if self._last_tick_ms is not None:
            gap = now_ms - self._last_tick_ms
            if gap > self.stall_threshold_ms:
                self.forgive_stall(gap, now_ms)  # the whole gap: nothing was read in it
        self._last_tick_ms = now_ms
        due: list[BrokerSetKey] = []
        for set_key, watched in sorted(sets.items()):
            if watched.master is not None:
                needs = not self.is_alive((*set_key, watched.master), now_ms)
            else:
                needs = any(
                    (replica := self._replicas.get((*set_key, b))) is not None
                    and replica.heard
                    and self.is_alive((*set_key, b), now_ms)
                    for b in watched.broker_ids
                )
            pending = self._pending.get(set_key)
            if not needs:
                if pending is not None and not pending.in_flight:
                    del self._pending[set_key]
                continue
            if pending is None:
                # Just became inactive: elect at once, not on the next scan.
                pending = _PendingElection(due_ms=now_ms, backoff_ms=self.election_retry_initial_ms)
                self._pending[set_key] = pending
            if not pending.in_flight and pending.due_ms <= now_ms:
                pending.in_flight = True
                due.append(set_key)
        for set_key in [k for k in self._pending if k not in sets]:
            if not self._pending[set_key].in_flight:
                del self._pending[set_key]
        return due

    def forgive_stall(self, stalled_ms: int, now_ms: int) -> None:
        """This leader did not run for `stalled_ms`: what it did not read is not silence."""
        for replica in self._replicas.values():
            replica.last_heartbeat_ms = min(now_ms, replica.last_heartbeat_ms + stalled_ms)
            if replica.closed_at_ms is not None:
                replica.closed_at_ms = min(now_ms, replica.closed_at_ms + stalled_ms)
        if self._leader_since_ms is not None:
            self._leader_since_ms = min(now_ms, self._leader_since_ms + stalled_ms)

    def election_attempted(self, set_key: BrokerSetKey, now_ms: int, *, succeeded: bool) -> None:
        """Report the outcome of an election `tick` asked for."""
        pending = self._pending.get(set_key)
        if pending is None:
            return
        if succeeded:
            del self._pending[set_key]
            return
        pending.in_flight = False
        pending.due_ms = now_ms + pending.backoff_ms
        pending.backoff_ms = self._election_backoff.next_ms(pending.backoff_ms)

    def pending_elections(self) -> list[BrokerSetKey]:
        return sorted(self._pending)

    def _revived(self, key: BrokerKey, now_ms: int) -> None:
        # A replica came back: a set waiting for an electable replica retries now.
        pending = self._pending.get((key[0], key[1]))
        if pending is not None and not pending.in_flight:
            pending.due_ms = now_ms
            pending.backoff_ms = self.election_retry_initial_ms
