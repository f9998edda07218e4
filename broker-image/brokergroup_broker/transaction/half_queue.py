"""The half queue's decisions (pure): which half messages are resolved, which to check back
and which to discard, and the progress to persist.

Inputs, in the order the shell reads them: the half records of RMQ_SYS_TRANS_HALF_TOPIC
queue 0 (`add_half`, queue offsets in order), the op records of RMQ_SYS_TRANS_OP_HALF_TOPIC
queue 0 (`add_op`, in order), the ends and checks the shell starts (`begin_end`,
`check_round`) and their failures (`release`), and `now` for a check round. Nothing here
reads a clock, the store or the network.

State: `pending` — half messages read and not resolved, each with its born time, check
immunity and checks counted so far (from "c" op records); `ending` — ends and discards in
flight (their op record not read back yet), so an END_TRANSACTION repeated meanwhile, or a
check answer racing the producer's own END, is not applied twice; `checking` — checks whose
"c" op record is not read back yet. An op record may name a half message not read yet (the
shell reads a bounded number per tick): it waits in `resolved_ahead` / `checks_ahead`.

Progress (what survives a failover, as CID_RMQ_SYS_TRANS's consumer offsets):

- `half`: every half message below it is resolved (the lowest pending offset, else the read
  cursor);
- `op`: every op record below it names only half messages below `half`.

A new master reads the half queue from `half` and the op queue from `op`: the op records it
skips name only resolved half messages, and those it reads again rebuild each pending half's
resolution and check count. Both only grow. The counts and resolutions come only from op
records read back from the queue (up to confirmOffset), never from the shell's own writes, so
a record is never counted twice and never counted before it is replicated.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from brokergroup_broker.transaction.rules import CHECK_TAG, REMOVE_TAG


@dataclass(frozen=True)
class Progress:
    half: int = 0
    op: int = 0


@dataclass
class PendingHalf:
    born_ms: int
    immunity_ms: int
    checks: int = 0


@dataclass(frozen=True)
class CheckRound:
    """One check round's decisions: (half offset, the check's number 1..checkMax) to check
    back, and the half offsets to discard (checked checkMax times already)."""

    check: list[tuple[int, int]] = field(default_factory=list)
    discard: list[int] = field(default_factory=list)


class HalfQueue:
    def __init__(self, progress: Progress) -> None:
        self.half_cursor = progress.half
        self.op_cursor = progress.op
        #: Offset order (insertion order of a dict; offsets are added ascending).
        self.pending: dict[int, PendingHalf] = {}
        self.ending: set[int] = set()
        self.checking: set[int] = set()
        self.resolved_ahead: set[int] = set()
        self.checks_ahead: dict[int, int] = {}
        #: (op offset, the highest half offset it names) of op records that may name a
        #: pending half message, oldest first: the head is the op progress.
        self._ops: deque[tuple[int, int]] = deque()

    @property
    def low(self) -> int:
        return next(iter(self.pending), self.half_cursor)

    # -- reading ----------------------------------------------------------------------------
    def add_half(self, offset: int, born_ms: int, immunity_ms: int) -> None:
        assert offset == self.half_cursor, (offset, self.half_cursor)
        self.half_cursor = offset + 1
        if offset in self.resolved_ahead:
            self.resolved_ahead.discard(offset)
            self.checks_ahead.pop(offset, None)
            self.ending.discard(offset)
            return
        self.pending[offset] = PendingHalf(born_ms, immunity_ms, self.checks_ahead.pop(offset, 0))

    def skip_half(self, offset: int) -> None:
        """The record at `offset` is no readable half message (or retention deleted it):
        nothing to resolve."""
        assert offset == self.half_cursor, (offset, self.half_cursor)
        self.half_cursor = offset + 1
        self.resolved_ahead.discard(offset)
        self.checks_ahead.pop(offset, None)
        self.ending.discard(offset)
        self.checking.discard(offset)

    def add_op(self, op_offset: int, tag: str | None, half_offsets: list[int]) -> None:
        """An op record read back; a tag other than "d" or "c" names nothing."""
        assert op_offset == self.op_cursor, (op_offset, self.op_cursor)
        self.op_cursor = op_offset + 1
        if tag not in (REMOVE_TAG, CHECK_TAG):
            return
        low = self.low
        named = [h for h in half_offsets if h >= low]
        if not named:
            return
        self._ops.append((op_offset, max(named)))
        for half in named:
            if tag == REMOVE_TAG:
                self.ending.discard(half)
                self.checking.discard(half)
                if half < self.half_cursor:
                    self.pending.pop(half, None)
                else:
                    self.resolved_ahead.add(half)
            else:
                self.checking.discard(half)
                entry = self.pending.get(half)
                if entry is not None:
                    entry.checks += 1
                elif half >= self.half_cursor:
                    self.checks_ahead[half] = self.checks_ahead.get(half, 0) + 1

    # -- deciding ---------------------------------------------------------------------------
    def resolved(self, offset: int) -> bool:
        """Did an op record read back resolve the half message at `offset`?"""
        if offset >= self.half_cursor:
            return offset in self.resolved_ahead
        return offset not in self.pending

    def begin_end(self, offset: int) -> bool:
        """Claim `offset` for an end (commit, rollback) or a discard: False when it is
        resolved already or another end of it is in flight (a repeat: nothing to do)."""
        if self.resolved(offset) or offset in self.ending:
            return False
        self.ending.add(offset)
        return True

    def release(self, offset: int) -> None:
        """An end, discard or check whose op record never reached the log."""
        self.ending.discard(offset)
        self.checking.discard(offset)

    def check_round(self, now_ms: int, check_max: int) -> CheckRound:
        """TransactionalMessageServiceImpl.check: every pending half message past its
        check immunity (born more than that ago, or born in the future by over 1 ms: a
        skewed clock) with no end or check in flight is checked, or discarded once it was
        checked `check_max` times (needDiscard). The chosen ones are in flight from now."""
        out = CheckRound()
        for offset, half in self.pending.items():
            if offset in self.ending or offset in self.checking:
                continue
            age = now_ms - half.born_ms
            if 0 <= age <= half.immunity_ms:
                continue
            if half.checks >= check_max:
                out.discard.append(offset)
                self.ending.add(offset)
            else:
                out.check.append((offset, half.checks + 1))
                self.checking.add(offset)
        return out

    # -- progress ---------------------------------------------------------------------------
    def progress(self) -> Progress:
        low = self.low
        ops = self._ops
        while ops and ops[0][1] < low:
            ops.popleft()
        return Progress(low, ops[0][0] if ops else self.op_cursor)
