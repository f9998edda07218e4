"""How long a new master holds its acknowledgements (DESIGN.md §3.3 "Fencing"), pure.

Theory of operation
-------------------
When the leader elects a master while the replaced one may still hold its
lease, the new master must hold its acknowledgements until that lease has
surely run out. The leader alone can bound the old lease (it saw the old
master's last heartbeat, `Liveness.takeover_wait_ms`), so it decides the
wait *before* proposing and the `ElectMaster` event carries it; `apply`
stores it in the broker set as a `Takeover`. Every node then answers
`masterTakeoverWaitMs` from that record, so an election whose commit timed
out on the request path, but applied later, still holds the new master.

Clocks differ between nodes, so the record holds a *duration* measured from
the decision (`wait_ms`), plus the leader's wall clock at the decision
(`decided_at_ms`). A node counts the duration from the moment it first saw
the record in its own state, on its own monotonic clock: that moment is
never before the decision, so its answer is never shorter than the true
remaining time (a late follower or a new leader answers more, which only
holds a master a little longer). The wall-clock time is used for one thing
only: a record older than `wait_ms + forget_after_ms` by this node's wall
clock is forgotten, so a node that replays its log after a restart does not
hold a long-established master again. Controller clocks would have to
differ by more than `forget_after_ms` (60 s by default) to cut a wait short.

No clocks, no I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A record older than its wait plus this, by a node's wall clock, holds nobody.
DEFAULT_FORGET_AFTER_MS = 60_000


@dataclass(frozen=True)
class Takeover:
    """The leader's decision for the election that produced `master_epoch`."""

    master_epoch: int
    #: Whose lease the wait covers (None: none known, e.g. a grace bound).
    old_master_broker_id: int | None
    #: How long after the decision the new master holds its acknowledgements.
    wait_ms: int
    #: The deciding leader's wall clock (ms since the epoch).
    decided_at_ms: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "masterEpoch": self.master_epoch,
            "oldMasterBrokerId": self.old_master_broker_id,
            "waitMs": self.wait_ms,
            "decidedAtMs": self.decided_at_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Takeover:
        old = data.get("oldMasterBrokerId")
        return cls(
            master_epoch=int(data["masterEpoch"]),
            old_master_broker_id=None if old is None else int(old),
            wait_ms=int(data["waitMs"]),
            decided_at_ms=int(data["decidedAtMs"]),
        )


def combine_waits(
    previous_old_master: int | None,
    previous_remaining_ms: int,
    old_master: int | None,
    old_master_wait_ms: int,
) -> tuple[int | None, int]:
    """A new election keeps waiting for any lease an earlier one still waits
    for: the longer wait wins, and names whose lease it covers."""
    if old_master is not None and old_master_wait_ms >= previous_remaining_ms:
        return old_master, max(0, old_master_wait_ms)
    return previous_old_master, max(0, previous_remaining_ms)


def remaining_ms(
    takeover: Takeover,
    *,
    seen_ago_ms: int,
    decided_ago_wall_ms: int,
    forget_after_ms: int = DEFAULT_FORGET_AFTER_MS,
    old_master_gone: bool = False,
) -> int:
    """What `masterTakeoverWaitMs` says now on a node that first saw the
    record `seen_ago_ms` ago (its monotonic clock) and whose wall clock says
    the decision was `decided_ago_wall_ms` ago. `old_master_gone`: a witness
    saw the old master's process end after the decision."""
    if old_master_gone:
        return 0
    if decided_ago_wall_ms > takeover.wait_ms + forget_after_ms:
        return 0
    return max(0, min(takeover.wait_ms, takeover.wait_ms - seen_ago_ms))
