"""Held pulls woken by arrival: RocketMQ's PullRequestHoldService and
NotifyMessageArrivingListener (broker/longpolling/), for a store whose consumers read up
to a readable end.

Theory of operation
-------------------
A consumer may read a record once all its bytes lie below the readable end
R = min(confirmOffset, what the store serves) (DESIGN.md §3.3, store/reader.py). A pull
that finds nothing to read at the end of its queue *holds*: `hold(topic, queueId, wake)`
registers a one-shot callback under that queue and the caller sleeps until it is called,
its own suspend timeout passes, or it is cancelled (connection closed: `Hold.cancel`).
The caller bounds the holds (`len`).
Nothing here runs on a timer: a hold nobody wakes costs its entry and nothing else.

Two inputs move a queue's readable end, and both come from the store:

- `appended(keys, start, first_end, last_end)`: records from `start` were dispatched to
  these queues' consume queues (in log order, under the store's write lock). The range
  waits here, as (first_end, last_end, keys), until R covers its first record;
  consecutive ranges of the same queues merge into one.
- `advance(R)`: R moved (the store's set_confirm_offset: every confirmOffset move, on a
  master and on a slave). Ranges whose first record ends at or below R leave, and each of
  their queues' holds is woken once. A range only partly covered stays, from R + 1 on:
  its queues are woken again at the next advance (a woken pull re-reads and may hold
  again). Ranges are in log order, so an advance looks at the ranges it releases and one
  more: O(ranges released + holds woken), however many holds wait elsewhere.

A range that starts below the last range's end means the log was cut (truncation, a
slave's resync): the ranges past the cut are dropped, their records are gone. At most
`max_ranges` ranges are kept: past it they merge into one range that wakes every hold
(each then re-reads once), so a readable end that stalls costs bounded memory.
`wake_all` wakes every hold (a role change: each pull answers as its new role says).

Threads: `appended` may run on any thread (it takes a lock); `advance`, `hold`,
`Hold.cancel` and `wake_all` run on the event loop thread, as the callbacks do.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable

QueueKey = tuple[str, int]
"""(topic, queueId)."""

#: A range that wakes every hold (`max_ranges` overflow).
_EVERY_QUEUE: tuple[QueueKey, ...] = ()


class Hold:
    """One held pull: `wake` is called at most once; `cancel` forgets it (idempotent)."""

    __slots__ = ("_arrivals", "key", "wake")

    def __init__(self, arrivals: Arrivals, key: QueueKey, wake: Callable[[], None]) -> None:
        self._arrivals = arrivals
        self.key = key
        self.wake = wake

    def cancel(self) -> None:
        self._arrivals._forget(self)


class _Range:
    __slots__ = ("first_end", "keys", "last_end")

    def __init__(self, first_end: int, last_end: int, keys: tuple[QueueKey, ...]) -> None:
        self.first_end = first_end
        self.last_end = last_end
        self.keys = keys


class Arrivals:
    """The held pulls of one store, by queue; see the module docstring."""

    def __init__(self, *, max_ranges: int = 65_536) -> None:
        self.max_ranges = max_ranges
        self._holds: dict[QueueKey, set[Hold]] = {}
        self._held = 0
        #: In log order; a range whose keys are _EVERY_QUEUE wakes every hold.
        self._ranges: deque[_Range] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Holds waiting now."""
        return self._held

    def pending_ranges(self) -> int:
        return len(self._ranges)

    # -- holds ------------------------------------------------------------------------------
    def hold(self, topic: str, queue_id: int, wake: Callable[[], None]) -> Hold:
        """Call `wake` once this queue's readable end may have moved (the caller bounds how
        many pulls it holds: `len`)."""
        key = (topic, queue_id)
        held = Hold(self, key, wake)
        self._holds.setdefault(key, set()).add(held)
        self._held += 1
        return held

    def _forget(self, held: Hold) -> None:
        holds = self._holds.get(held.key)
        if holds is None or held not in holds:
            return
        holds.discard(held)
        self._held -= 1
        if not holds:
            del self._holds[held.key]

    def _wake(self, key: QueueKey) -> int:
        holds = self._holds.pop(key, None)
        if not holds:
            return 0
        self._held -= len(holds)
        for held in holds:
            held.wake()
        return len(holds)

    def wake_all(self) -> int:
        """Wake every hold; returns how many."""
        woken = 0
        for key in list(self._holds):
            woken += self._wake(key)
        return woken

    # -- the readable end ---------------------------------------------------------------------
    def appended(self, keys: Iterable[QueueKey], start: int, first_end: int, last_end: int) -> None:
        """Records `start`..`last_end` went to the consume queues of `keys`; the first of them
        ends at `first_end`."""
        queues = tuple(keys)
        with self._lock:
            ranges = self._ranges
            while ranges and ranges[-1].last_end > start:
                ranges.pop()  # the log was cut below them: those records are gone
            if ranges and ranges[-1].keys == queues:
                ranges[-1].last_end = last_end
                return
            ranges.append(_Range(first_end, last_end, queues))
            if len(ranges) > self.max_ranges:
                first = ranges[0].first_end
                ranges.clear()
                ranges.append(_Range(first, last_end, _EVERY_QUEUE))

    def advance(self, readable_end: int) -> int:
        """The readable end is now `readable_end`: wake the holds of queues it reached;
        returns how many holds were woken."""
        to_wake: list[tuple[QueueKey, ...]] = []
        with self._lock:
            ranges = self._ranges
            while ranges and ranges[0].first_end <= readable_end:
                head = ranges[0]
                to_wake.append(head.keys)
                if head.last_end <= readable_end:
                    ranges.popleft()
                else:
                    head.first_end = readable_end + 1  # partly readable: the rest wakes later
                    break
        woken = 0
        for queues in to_wake:
            if queues == _EVERY_QUEUE:
                woken += self.wake_all()
                continue
            for key in queues:
                woken += self._wake(key)
        return woken
