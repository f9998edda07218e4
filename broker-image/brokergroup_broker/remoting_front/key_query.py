"""QUERY_MESSAGE (by key, and by unique key for queryMsgById): a scan bounded by the time
range and a byte budget, over the topic's consume queues.

RocketMQ keeps a hash index file (store/index/IndexService: 500 k slots and 2 M entries per
~400 MiB file, `topic#key` → commit log offset, built by the dispatcher on master and slave).
Here a query reads the records themselves instead, and only where they can be:

- only the asked topic's queues (every QUERY_MESSAGE names its topic);
- per queue only the queue offsets whose storeTimestamp lies in [beginTimestamp,
  endTimestamp], found by binary search (store timestamps grow with the queue offset on one
  master, as SEARCH_OFFSET_BY_TIMESTAMP also assumes);
- newest first, a chunk of `chunk_records` per queue in turn, until maxNum records matched
  or `budget_bytes` of records were looked at (the answer is then what was found so far:
  the limit is documented in docs/rocketmq-compatibility.md). Reads go past the budget by
  at most one chunk, as a pull's do.

So the produce path does no extra work at all (no index to write, fsync, replicate or rebuild
at recovery; a slave answers from the same bytes), and a query costs at most `budget_bytes`
of reads. The unique-key query mqadmin's queryMsgById makes asks the last three days by
default; it stops at the newest record with that UNIQ_KEY (`wanted`), and is bounded by
the budget too.

`key_query` decodes the header (BadHeader names a bad field); `run_key_query` is the scan,
over the two reads it needs of the produce path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.protocol.messages import RecordPull
from brokergroup_broker.store.record_keys import NotARecord, RecordKeys, record_keys
from brokergroup_remoting import fields as header
from brokergroup_remoting import names

#: MixAll.UNIQUE_MSG_QUERY_FLAG: the extFields entry a query by message id carries.
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
#: MessageStoreConfig.defaultQueryMaxNum: what a unique-key query asks at most.
DEFAULT_QUERY_MAX_NUM = 32
#: MessageStoreConfig.maxMsgsNumBatch: DefaultMessageStore.queryMessage caps maxNum at it.
MAX_MSGS_NUM_BATCH = 64
#: A key is one property value (the properties are at most a Java short long).
_MAX_KEY_BYTES = 32767
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class KeyQuery:
    """QueryMessageRequestHeader, with maxNum as the broker applies it."""

    topic: str
    key: str
    max_num: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    unique: bool


def key_query(fields: Mapping[str, str]) -> KeyQuery:
    """Decode a QUERY_MESSAGE header; BadHeader if a field is missing or not a number."""
    topic = names.topic_name(fields, "topic")
    key = header.text(fields, "key", max_bytes=_MAX_KEY_BYTES)
    max_num = header.int32(fields, "maxNum")
    begin = header.int64(fields, "beginTimestamp")
    end = header.int64(fields, "endTimestamp")
    unique = fields.get(UNIQUE_MSG_QUERY_FLAG) == "true"
    if unique:  # QueryMessageProcessor: a unique-key query gets defaultQueryMaxNum
        max_num = DEFAULT_QUERY_MAX_NUM
    return KeyQuery(topic, key, max(0, min(max_num, MAX_MSGS_NUM_BATCH)), begin, end, unique)


def wanted(query: KeyQuery) -> int:
    """Matches after which the scan stops: maxNum, or 1 for a unique key (a message id names
    one message; a producer's retried send may have stored it twice, and the client takes
    the first record either way, MQAdminImpl.queryMessageByUniqKey), so a query by id stops
    at the newest copy instead of reading the whole time range."""
    return min(1, query.max_num) if query.unique else query.max_num


def matches(found: RecordKeys, query: KeyQuery) -> bool:
    """The record is one RocketMQ's index would give for `topic#key` in the time range."""
    return (
        found.topic == query.topic
        and query.begin_timestamp_ms <= found.store_timestamp_ms <= query.end_timestamp_ms
        and query.key in found.keys
    )


class RecordSource(Protocol):
    """The reads a key query makes (`front.ProduceAndPull` has them)."""

    async def pull_records(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> RecordPull: ...

    async def store_timestamp_at(
        self, topic: str, queue_id: int, queue_offset: int
    ) -> int | None: ...


@dataclass(frozen=True)
class KeyQueryResult:
    records: list[bytes]
    """The matching records as stored, newest first per queue."""
    last_timestamp_ms: int
    """storeTimestamp of the newest record of the topic the scan could see (0: none)."""
    last_physical_offset: int
    """Its commit log offset (0: none)."""
    scanned_bytes: int
    exhausted_budget: bool
    """True when the budget ran out before the time range was read through."""


@dataclass
class _Cursor:
    queue_id: int
    low: int
    position: int  # the scan reads [.., position) next, going down to low


async def run_key_query(
    source: RecordSource,
    query: KeyQuery,
    queue_count: int,
    *,
    budget_bytes: int,
    chunk_records: int = 32,
) -> KeyQueryResult:
    """Scan the topic's `queue_count` queues for `query`; see the module docstring."""
    assert budget_bytes > 0 and chunk_records > 0
    cursors: list[_Cursor] = []
    newest: RecordKeys | None = None
    for queue_id in range(queue_count):
        bounds = await _time_bounds(source, query, queue_id)
        if bounds is None:
            continue
        low, high, last = bounds
        if last is not None and (newest is None or last.physical_offset > newest.physical_offset):
            newest = last
        if low < high:
            cursors.append(_Cursor(queue_id, low, high))
    found: list[bytes] = []
    scanned = 0
    needle = query.key.encode("utf-8", "surrogatepass")
    enough = wanted(query)
    while cursors and len(found) < enough and scanned < budget_bytes:
        for cursor in list(cursors):
            start = max(cursor.low, cursor.position - chunk_records)
            chunk = await _read(source, query.topic, cursor.queue_id, start, cursor.position)
            cursor.position = start
            if not chunk or cursor.position <= cursor.low:
                cursors.remove(cursor)
            for raw in reversed(chunk):
                if len(found) >= enough or scanned >= budget_bytes:
                    break
                scanned += len(raw)
                if needle in raw and _matches(raw, query):
                    found.append(raw)
            if len(found) >= enough or scanned >= budget_bytes:
                break
            await asyncio.sleep(0)  # the reads are synchronous: let the loop breathe
    return KeyQueryResult(
        found,
        newest.store_timestamp_ms if newest else 0,
        newest.physical_offset if newest else 0,
        scanned,
        exhausted_budget=bool(cursors) and scanned >= budget_bytes,
    )


def _matches(raw: bytes, query: KeyQuery) -> bool:
    try:
        return matches(record_keys(raw), query)
    except NotARecord:
        return False


async def _time_bounds(
    source: RecordSource, query: KeyQuery, queue_id: int
) -> tuple[int, int, RecordKeys | None] | None:
    """[low, high) of the queue offsets stored in the time range, and the queue's newest
    record; None for a queue with nothing readable."""
    probe = await source.pull_records(query.topic, queue_id, 0, 1)
    first, end = probe.min_offset, probe.max_offset
    if first >= end:
        return None
    tail = await source.pull_records(query.topic, queue_id, end - 1, 1)
    last = None
    if tail.records:
        try:
            last = record_keys(tail.records[0])
        except NotARecord:
            last = None
    low = await _first_at_or_after(source, query, queue_id, first, end, query.begin_timestamp_ms)
    if query.end_timestamp_ms >= _INT64[1]:
        high = end
    else:
        high = await _first_at_or_after(
            source, query, queue_id, low, end, query.end_timestamp_ms + 1
        )
    return low, high, last


async def _first_at_or_after(
    source: RecordSource, query: KeyQuery, queue_id: int, low: int, high: int, timestamp: int
) -> int:
    """The first queue offset in [low, high) stored at or after `timestamp` (high if none)."""
    while low < high:
        mid = (low + high) // 2
        stored = await source.store_timestamp_at(query.topic, queue_id, mid)
        if stored is None or stored >= timestamp:
            high = mid
        else:
            low = mid + 1
    return low


async def _read(
    source: RecordSource, topic: str, queue_id: int, start: int, stop: int
) -> list[bytes]:
    """The records of queue offsets [start, stop) (fewer if the queue ends sooner)."""
    out: list[bytes] = []
    position = start
    while position < stop:
        got = await source.pull_records(topic, queue_id, position, stop - position)
        if not got.records or got.next_offset <= position:
            break
        out.extend(got.records[: stop - position])
        position = got.next_offset
    return out
