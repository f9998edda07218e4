"""When a produce may be acknowledged (DESIGN.md §3.3 commit rule).

Seeds: controller-mode-design (confirmOffset), dledger-log-append (the
leader's bounded pending map: a full map refuses at once with
LEADER_PENDING_FULL rather than queueing without bound — our SYSTEM_BUSY).
Pure: the driver passes `now_ms` and a `ReplicationView` snapshot.

Theory of operation
-------------------
1. Before appending, `admit(view)` refuses at once when the set is smaller
   than ``minInSyncReplicas`` (IN_SYNC_REPLICAS_NOT_ENOUGH: waiting would not
   help, the client should know now) or when ``max_pending_acks`` waiters
   are queued (SYSTEM_BUSY: back-pressure instead of unbounded memory).
   Refusing *before* the append means a refused produce never reaches the
   log, so it can never surface later as a message nobody acknowledged.
2. After the append, `add(token, end_offset, now_ms, view)` either
   acknowledges at once or queues a waiter.
3. `progress(view, now_ms)` releases waiters whose end offset is covered
   (``allAckInSyncStateSet``: end ≤ confirmOffset; otherwise at least
   min(inSyncReplicas, set size) members — the master included — acked
   it) and times out the rest after ``slaveTimeoutMs`` (SLAVE_TIMEOUT).
4. `fail_all(outcome)` empties the queue on a role change (NOT_MASTER) or
   a lost lease (FENCED).

Appends are strictly ordered, so waiters are queued in end-offset order and
their deadlines are non-decreasing: both releases pop from the left, O(1)
per waiter.

A timed-out or failed produce may still be in the log and may still
replicate: the client sees an error and retries (at-least-once). What the
rule guarantees is the other direction — nothing is acknowledged unless it
is on every member the next master can be elected from.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class AckOutcome(StrEnum):
    ACKED = "ACKED"
    IN_SYNC_REPLICAS_NOT_ENOUGH = "IN_SYNC_REPLICAS_NOT_ENOUGH"
    SLAVE_TIMEOUT = "SLAVE_TIMEOUT"
    SYSTEM_BUSY = "SYSTEM_BUSY"
    FENCED = "FENCED"
    NOT_MASTER = "NOT_MASTER"


@dataclass(frozen=True)
class CommitRuleConfig:
    all_ack_in_sync_state_set: bool = True
    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    slave_timeout_ms: int = 3000
    max_pending_acks: int = 10_000


@dataclass(frozen=True)
class ReplicationView:
    """The master's replication state at one instant."""

    confirm_offset: int
    member_acks: Mapping[int, int]  # effective SyncStateSet member -> ack offset
    in_sync_count: int  # settled set size, for minInSyncReplicas


@dataclass
class _Waiter:
    token: int
    end_offset: int
    deadline_ms: int


class AckWaiters:
    def __init__(self, config: CommitRuleConfig) -> None:
        self.config = config
        self._waiters: deque[_Waiter] = deque()

    def __len__(self) -> int:
        return len(self._waiters)

    def admit(self, view: ReplicationView) -> AckOutcome | None:
        """None: go ahead and append. Otherwise refuse with this outcome."""
        if view.in_sync_count < self.config.min_in_sync_replicas:
            return AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH
        if len(self._waiters) >= self.config.max_pending_acks:
            return AckOutcome.SYSTEM_BUSY
        return None

    def add(
        self,
        token: int,
        end_offset: int,
        now_ms: int,
        view: ReplicationView,
        *,
        may_ack_now: bool = True,
    ) -> AckOutcome | None:
        """ACKED at once, or None: queued until `progress` releases it. `may_ack_now`
        False (a takeover hold, a lapsed lease): queued even when already covered, so the
        same fencing that holds `progress` holds it."""
        if may_ack_now and not self._waiters and self._covered(end_offset, view):
            return AckOutcome.ACKED
        if self._waiters:
            assert end_offset >= self._waiters[-1].end_offset, "appends must be ordered"
        self._waiters.append(_Waiter(token, end_offset, now_ms + self.config.slave_timeout_ms))
        return None

    def progress(self, view: ReplicationView, now_ms: int) -> list[tuple[int, AckOutcome]]:
        released: list[tuple[int, AckOutcome]] = []
        while self._waiters and self._covered(self._waiters[0].end_offset, view):
            released.append((self._waiters.popleft().token, AckOutcome.ACKED))
        while self._waiters and self._waiters[0].deadline_ms <= now_ms:
            released.append((self._waiters.popleft().token, AckOutcome.SLAVE_TIMEOUT))
        return released

    def fail_all(self, outcome: AckOutcome) -> list[tuple[int, AckOutcome]]:
        released = [(waiter.token, outcome) for waiter in self._waiters]
        self._waiters.clear()
        return released

    def next_deadline_ms(self) -> int | None:
        return self._waiters[0].deadline_ms if self._waiters else None

    def _covered(self, end_offset: int, view: ReplicationView) -> bool:
        if self.config.all_ack_in_sync_state_set:
            return end_offset <= view.confirm_offset
        # RocketMQ's calcNeedAckNums: never wait for more replicas than are in
        # the set (the minInSyncReplicas admission check is the floor).
        need = max(1, min(self.config.in_sync_replicas, len(view.member_acks)))
        acked = sum(1 for ack in view.member_acks.values() if ack >= end_offset)
        return acked >= need
