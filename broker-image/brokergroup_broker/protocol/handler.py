"""The seam between the protocol server and the broker core.

`BrokerProtocolServer` decodes frames and awaits one of these methods per
request; the core (ReplicasManager, commit rule, store) implements them. The
server owns framing, pipelining and back-pressure; the handler owns every
decision about roles, fencing and the commit rule. To refuse, a method
raises `BrokerError(ResponseCode, message, master_address=...)`; any other
exception becomes SYSTEM_ERROR (and is logged as a bug).

Ordering: the server starts handler calls for one connection in the order
the requests arrived (each in its own task), so a handler that appends
before its first `await` keeps a producer's pipelined batches in order.

Optional fast path: a handler may also define
`start_send_batch(batch: SendBatch, reply: Callable[[Response], None]) -> None`
(the broker core does). The server then uses it instead of `send_messages`
for SEND_MESSAGES frames: it must append synchronously, call `reply` exactly
once (now or later) and raise `BrokerError` to refuse before appending.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from brokergroup_broker.protocol.messages import ProduceMessage, PullResult, SendResult


class RequestHandler(Protocol):
    async def send_messages(
        self, topic: str, queue_id: int | None, messages: Sequence[ProduceMessage]
    ) -> SendResult:
        """Append and return once committed (DESIGN.md §3.3); one result per
        message, same order. `queue_id` None: the broker picks the queue."""
        ...

    async def pull_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> PullResult:
        """Messages from `queue_offset`, at most `max_count`, only up to
        confirmOffset. Slaves and an acting master serve these too (§3.6)."""
        ...

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        """(min, max) queue offset; max is the next offset to be written."""
        ...

    async def topic_queue_count(self, topic: str) -> int:
        """Number of queues of `topic`; 0 or TOPIC_NOT_FOUND when unknown."""
        ...

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None:
        """Store `offset` as the next offset `group` will consume."""
        ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or NO_CONSUMER_OFFSET (-1) if none."""
        ...
