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

Server-side filters (docs/filters.md): a pull is filtered by its subscription, the pull
header's (`subscription`, `expressionType`, when its sysFlag has FLAG_SUBSCRIPTION: lite
and pull consumers) or else the one its group's latest heartbeat gave for the topic (push
consumers; ConsumerGroupInfo.findSubscriptionData), compiled by `brokergroup_broker.filter`
(cached). Entries whose consume queue tagsCode a tag filter refuses are passed over without
reading their records; the records read are checked on their properties (the real tag, or
the SQL92 condition); only matches are answered, and nextBeginOffset moves past everything
looked at. A pull that looked at `MAX_FILTER_SCAN` entries and found no match is answered
PULL_RETRY_IMMEDIATELY (RocketMQ's NO_MATCHED_MESSAGE: the client pulls again at once from
nextBeginOffset); one that reached the queue's end holds from there as any other. A SQL92
subscription needs enablePropertyFilter (else SYSTEM_ERROR, RocketMQ's remark); a header
subscription that does not compile is SUBSCRIPTION_PARSE_FAILED, a heartbeat's
FILTER_DATA_NOT_EXIST. A group with no subscription known here is not filtered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.filter import FilterRefused, MessageFilter, compile_filter
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
#: A group's subscription to a topic from its latest heartbeat: (group, topic) →
#: (expressionType, subString), or None (`clients.ConsumerGroups.subscription`).
SubscriptionOf = Callable[[str, str], tuple[str | None, str | None] | None]

#: PullSysFlag.FLAG_SUBSCRIPTION: the header carries the subscription.
PULL_FLAG_SUBSCRIPTION = 0x4
#: Consume queue entries one filtered pull looks at (RocketMQ's maxFilterMessageSize,
#: 16,000 bytes of 20-byte entries), or maxMsgNums if that is more.
MAX_FILTER_SCAN = 800
#: Compiled filters kept, by (expressionType, subString).
MAX_CACHED_FILTERS = 1024


class PullReads(RecordSource, Protocol):
    """What the pulls read of the produce path (`front.ProduceAndPull` has it)."""

    @property
    def arrivals(self) -> Arrivals: ...

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def pull_matching_records(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        *,
        keep_tags_code: Callable[[int], bool],
        keep_properties: Callable[[dict[str, str]], bool],
        max_scan: int,
    ) -> RecordPull: ...


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
        subscriptions: SubscriptionOf = lambda _group, _topic: None,
        enable_property_filter: bool = False,
    ) -> None:
        self._subscriptions = subscriptions
        self._enable_property_filter = enable_property_filter
        self._filters: dict[tuple[str | None, str | None], MessageFilter] = {}
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
        message_filter = self._filter_of(cmd, req)
        deadline = self._clock_ms() + wait_ms
        offset = req.queue_offset
        while True:
            got = await self._read(req, offset, message_filter)
            if got.records:
                self._stats.on_get(
                    req.consumer_group, req.topic, len(got.records), sum(map(len, got.records))
                )
                return _pull_answer(cmd, ResponseCode.SUCCESS, got.next_offset, got,
                                    b"".join(got.records))  # fmt: skip
            if offset < got.min_offset or offset > got.max_offset:
                moved = got.min_offset if offset < got.min_offset else got.max_offset
                return _pull_answer(cmd, ResponseCode.PULL_OFFSET_MOVED, moved, got)
            if got.next_offset > offset:  # entries looked at, none matched
                offset = got.next_offset
                if offset < got.max_offset:  # more to look at: the client asks again
                    return _pull_answer(cmd, ResponseCode.PULL_RETRY_IMMEDIATELY, offset, got)
                continue  # at the end: hold from here
            left_ms = deadline - self._clock_ms()
            if left_ms <= 0:
                return _pull_answer(cmd, ResponseCode.PULL_NOT_FOUND, offset, got)
            if not await self._hold(req.topic, req.queue_id, left_ms):
                return response_to(
                    cmd,
                    ResponseCode.SYSTEM_BUSY,
                    f"[OVERLOAD] {self._max_held_pulls} pulls are held on this broker "
                    "(max_held_pulls); pull again later",
                )

    async def _read(
        self, req: wire.PullRequest, offset: int, message_filter: MessageFilter | None
    ) -> RecordPull:
        count = max(1, req.max_msg_nums)
        if message_filter is None:
            return await self._produce.pull_records(req.topic, req.queue_id, offset, count)
        return await self._produce.pull_matching_records(
            req.topic,
            req.queue_id,
            offset,
            count,
            keep_tags_code=message_filter.matches_tag_hash,
            keep_properties=message_filter.matches,
            max_scan=max(MAX_FILTER_SCAN, count),
        )

    def _filter_of(self, cmd: RemotingCommand, req: wire.PullRequest) -> MessageFilter | None:
        """The pull's subscription filter (None: not filtered), or the RequestRefused
        PullMessageProcessor answers."""
        if req.sys_flag & PULL_FLAG_SUBSCRIPTION:
            fields = cmd.fields()
            subscription = (fields.get("expressionType"), fields.get("subscription"))
            refused = RequestRefused(
                ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
            )
        else:
            held = self._subscriptions(req.consumer_group, req.topic)
            if held is None:
                return None
            subscription = held
            refused = RequestRefused(
                ResponseCode.FILTER_DATA_NOT_EXIST,
                "The broker's consumer filter data is not exist!Your expression may be wrong!",
            )
        kind, expression = subscription
        if kind not in (None, "", "TAG") and not self._enable_property_filter:
            raise RequestRefused(
                ResponseCode.SYSTEM_ERROR,
                f"The broker does not support consumer to filter message by {kind}",
            )
        message_filter = self._filters.get(subscription)
        if message_filter is None:
            try:
                message_filter = compile_filter(kind, expression)
            except FilterRefused as exc:
                raise RequestRefused(refused.code, f"{refused.remark}: {exc}") from exc
            if len(self._filters) >= MAX_CACHED_FILTERS:
                self._filters.pop(next(iter(self._filters)))
            self._filters[subscription] = message_filter
        return None if message_filter.matches_all else message_filter  # `*`: the plain read

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
