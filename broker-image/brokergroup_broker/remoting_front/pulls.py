"""The read codes of the broker's remoting port: PULL_MESSAGE and LITE_PULL_MESSAGE with
long polling, GET_MAX_OFFSET, GET_MIN_OFFSET, SEARCH_OFFSET_BY_TIMESTAMP and
GET_EARLIEST_MSG_STORETIME, over the one produce/pull path.

Pulls send the records exactly as the store holds them (RocketMQ's v1 layout), up to
confirmOffset. A pull with the suspend flag that finds nothing new holds (long polling)
until its queue's readable end moves (the store's `Arrivals`, as RocketMQ's
PullRequestHoldService is woken by NotifyMessageArrivingListener), at most its
suspendTimeoutMillis (capped at `max_suspend_ms`); an idle held pull costs no CPU. Over
`max_held_pulls` held at once, a pull is answered SYSTEM_BUSY. A pull's commit flag commits
the consumer offset it carries through the consumers part's one offset check
(`commit_offset`); a refused commit is skipped and the pull still served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.protocol.messages import BrokerError, RecordPull
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.key_query import RecordSource
from brokergroup_broker.store.arrivals import Arrivals
from brokergroup_remoting import RemotingCommand, ResponseCode
from brokergroup_remoting import fields as header
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import RequestRefused
from brokergroup_remoting.net import Connection

#: Commit a consumer offset (group, topic, queueId, offset), or raise the RequestRefused
#: that says why not (`consumers.Consumers.commit_offset`).
CommitOffset = Callable[[str, str, int, int], Awaitable[None]]


class PullReads(RecordSource, Protocol):
    """What the pulls read of the produce path (`front.ProduceAndPull` has it)."""

    @property
    def arrivals(self) -> Arrivals: ...

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...


class Pulls:
    """Handlers of the pull and queue offset codes; the held pulls live in the store's
    `Arrivals`, bounded here by `max_held_pulls`."""

    def __init__(
        self,
        produce: PullReads,
        *,
        commit_offset: CommitOffset,
        max_held_pulls: int,
        max_suspend_ms: int,
        clock_ms: Callable[[], int],
        stats: BrokerStats,
    ) -> None:
        self._produce = produce
        self._stats = stats  # GROUP_GET_NUMS/SIZE (docs/metrics.md)
        self._commit_offset = commit_offset
        self._max_held_pulls = max_held_pulls
        self._max_suspend_ms = max_suspend_ms
        self._clock_ms = clock_ms

    async def pull_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        req = wire.pull_request(cmd.fields())
        if req.sys_flag & wire.PULL_FLAG_COMMIT_OFFSET and req.commit_offset >= 0:
            # A slave keeps no offsets of its own; the pull is still served.
            with contextlib.suppress(BrokerError, RequestRefused):
                await self._commit_offset(
                    req.consumer_group, req.topic, req.queue_id, req.commit_offset
                )
        wait_ms = (
            min(req.suspend_timeout_ms, self._max_suspend_ms)
            if req.sys_flag & wire.PULL_FLAG_SUSPEND
            else 0
        )
        deadline = self._clock_ms() + wait_ms
        while True:
            got = await self._produce.pull_records(
                req.topic, req.queue_id, req.queue_offset, max(1, req.max_msg_nums)
            )
            if got.records:
                self._stats.on_get(
                    req.consumer_group, req.topic, len(got.records), sum(map(len, got.records))
                )
                return _pull_answer(cmd, ResponseCode.SUCCESS, got.next_offset, got,
                                    b"".join(got.records))  # fmt: skip
            if req.queue_offset < got.min_offset or req.queue_offset > got.max_offset:
                moved = got.min_offset if req.queue_offset < got.min_offset else got.max_offset
                return _pull_answer(cmd, ResponseCode.PULL_OFFSET_MOVED, moved, got)
            left_ms = deadline - self._clock_ms()
            if left_ms <= 0:
                return _pull_answer(cmd, ResponseCode.PULL_NOT_FOUND, req.queue_offset, got)
            if not await self._hold(req.topic, req.queue_id, left_ms):
                return response_to(
                    cmd,
                    ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD] {self._max_held_pulls} pulls are held on this broker "
                    "(max_held_pulls); pull again later",
                )

    async def _hold(self, topic: str, queue_id: int, wait_ms: int) -> bool:
        """Wait until the queue's readable end may have moved (arrivals.py) or `wait_ms`
        passed; False at once when `max_held_pulls` pulls already wait. A cancelled pull
        (its connection closed) leaves nothing behind."""
        arrivals = self._produce.arrivals
        if len(arrivals) >= self._max_held_pulls:
            return False
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not woken.done():
                woken.set_result(None)

        held = arrivals.hold(topic, queue_id, wake)
        try:
            await asyncio.wait((woken,), timeout=wait_ms / 1000)
        finally:
            held.cancel()
        return True

    async def get_max_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ref = wire.queue_ref(cmd.fields())
        _, high = await self._produce.query_offsets(ref.topic, ref.queue_id)
        return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(high)})

    async def get_min_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ref = wire.queue_ref(cmd.fields())
        low, _ = await self._produce.query_offsets(ref.topic, ref.queue_id)
        return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(low)})

    async def search_offset(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """The first queue offset whose record was stored at or after `timestamp` (the
        queue's end when none was): a binary search over store timestamps, which grow with
        the queue offset on one master (the log is appended in order)."""
        fields = cmd.fields()
        ref = wire.queue_ref(fields)
        timestamp = header.int64(fields, "timestamp")
        low, high = await self._produce.query_offsets(ref.topic, ref.queue_id)
        while low < high:
            mid = (low + high) // 2
            stored = await self._produce.store_timestamp_at(ref.topic, ref.queue_id, mid)
            if stored is None or stored >= timestamp:
                high = mid
            else:
                low = mid + 1
        return response_to(cmd, ResponseCode.SUCCESS, None, {"offset": str(low)})

    async def earliest_store_time(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        ref = wire.queue_ref(cmd.fields())
        low, high = await self._produce.query_offsets(ref.topic, ref.queue_id)
        stored = (
            await self._produce.store_timestamp_at(ref.topic, ref.queue_id, low)
            if low < high
            else None
        )
        return response_to(
            cmd, ResponseCode.SUCCESS, None, {"timestamp": str(-1 if stored is None else stored)}
        )


def _pull_answer(
    cmd: RemotingCommand, code: int, next_offset: int, got: RecordPull, body: bytes = b""
) -> RemotingCommand:
    return response_to(
        cmd,
        code,
        None,
        {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(next_offset),
            "minOffset": str(got.min_offset),
            "maxOffset": str(got.max_offset),
        },
        body,
    )
