"""Typed requests, responses and result codes of the client protocol.

These are the values the codec turns into bytes and back (docs/protocol.md),
and the values the broker core's `RequestHandler` takes and returns. They are
frozen dataclasses so a decoded request can be handed to the core and a
result shared between tasks without defensive copies.

The wire types are our own, not the store's: the codec must not depend on
the on-disk layout (docs/architecture.md, "seams"), so the core converts
`StoredMessage` to `PulledMessage` when it serves a pull.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

#: RocketMQ property names under which key and tags live in a stored message.
PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"

#: `queue_id` on the wire meaning "the broker chooses the queue".
ANY_QUEUE = -1
#: `query_consumer_offset` result meaning "this group never committed here".
NO_CONSUMER_OFFSET = -1


class ResponseCode(IntEnum):
    """Outcome of one request; the value is the frame's `code` in a response.

    Grouped by what a client does next (docs/protocol.md has the table):
    re-discover the master (NOT_MASTER, FENCED, STORE_NOT_WRITABLE), try
    another replica for reads (READ_ONLY), back off and retry a bounded number
    of times (SYSTEM_BUSY, IN_SYNC_REPLICAS_NOT_ENOUGH, SLAVE_TIMEOUT), or
    give up on this request (TOPIC_NOT_FOUND, TOPIC_INVALID, BAD_REQUEST,
    SYSTEM_ERROR).
    """

    SUCCESS = 0
    #: This broker is not the master (a slave, or fenced by a newer epoch);
    #: `master_address` carries the master it knows of, if any.
    NOT_MASTER = 1
    #: The broker's role is not confirmed yet, or its master lease expired
    #: (DESIGN.md §3.3 fencing, §3.4): it serves nothing until confirmed.
    FENCED = 2
    #: A slave (or acting master, §3.6) refused a write-type request.
    READ_ONLY = 3
    #: Fewer than minInSyncReplicas in the SyncStateSet (§3.3).
    IN_SYNC_REPLICAS_NOT_ENOUGH = 4
    #: The write was appended but not acknowledged by the SyncStateSet in
    #: slaveTimeoutMs; it may or may not survive a failover (§3.3).
    SLAVE_TIMEOUT = 5
    #: The store refuses writes (disk over diskFullRatio, I/O error).
    STORE_NOT_WRITABLE = 6
    TOPIC_NOT_FOUND = 7
    #: The request was well framed but its content is invalid.
    BAD_REQUEST = 8
    #: Overloaded (in-flight bound reached, flush queue full): retry later.
    SYSTEM_BUSY = 9
    #: A bug or unexpected failure on the broker; the message says what.
    SYSTEM_ERROR = 10
    #: The topic name breaks the topic rule (brokergroup_broker.topics); nothing
    #: was written. Fix the name: retrying cannot help.
    TOPIC_INVALID = 11
    #: The connection's key pair may not send this request (docs/security.md: the
    #: client pair may not send an administrative request). Nothing was done.
    NO_PERMISSION = 12


class RequestCode(IntEnum):
    """The frame's `code` in a request: which operation and body layout."""

    SEND_MESSAGES = 10
    PULL_MESSAGES = 11
    QUERY_OFFSETS = 12
    TOPIC_QUEUE_COUNT = 13
    COMMIT_CONSUMER_OFFSET = 14
    QUERY_CONSUMER_OFFSET = 15


class BrokerError(Exception):
    """A request the broker refused, raised by a `RequestHandler` and
    re-raised on the client side with the same fields.

    `master_address` ("host:port") lets a slave point the client at the
    master it knows of, saving a controller round trip on NOT_MASTER.
    """

    def __init__(
        self, code: ResponseCode, message: str, *, master_address: str | None = None
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.master_address = master_address


# --------------------------------------------------------------------------
# Values passed to and returned by the RequestHandler.


@dataclass(frozen=True, slots=True)
class ProduceMessage:
    """One message a producer sends. `key` and `tags` become the RocketMQ
    properties KEYS and TAGS when stored (see `store_properties`)."""

    topic: str
    body: bytes
    key: str | None = None
    tags: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)

    def store_properties(self) -> dict[str, str]:
        """Properties as the store keeps them: KEYS/TAGS folded in."""
        props = dict(self.properties)
        if self.key is not None:
            props[PROPERTY_KEYS] = self.key
        if self.tags is not None:
            props[PROPERTY_TAGS] = self.tags
        return props


@dataclass(frozen=True, slots=True)
class SentMessage:
    """Where one produced message landed, in the same order as sent."""

    queue_id: int
    queue_offset: int
    physical_offset: int


@dataclass(frozen=True)
class SendResult:
    """An acknowledged produce: committed per the commit rule (§3.3).

    `master_epoch` is the epoch the master acknowledged in; the audit uses it
    to attribute acknowledged writes to an epoch.
    """

    messages: tuple[SentMessage, ...]
    master_epoch: int = 0


@dataclass(frozen=True, slots=True)
class PulledMessage:
    """One stored message as served by a pull (a subset of the store's
    decoded v1 record; key and tags are in `properties`)."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    body: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    born_timestamp_ms: int = 0
    store_timestamp_ms: int = 0
    body_crc: int = 0
    flag: int = 0

    @property
    def key(self) -> str | None:
        return self.properties.get(PROPERTY_KEYS)

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)


@dataclass(frozen=True)
class PullResult:
    """Messages from `queue_offset` on, readable up to confirmOffset only.

    `next_queue_offset` is where the next pull starts; when the requested
    offset was below `min_queue_offset` (truncated or expired) the handler
    returns no messages and a `next_queue_offset` of `min_queue_offset`, so a
    consumer never spins on an illegal offset.
    """

    messages: tuple[PulledMessage, ...]
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int


# --------------------------------------------------------------------------
# Request frames (client → broker).


@dataclass(frozen=True)
class SendMessagesRequest:
    """Single and batch produce share one layout; all messages of a batch
    go to one topic (as RocketMQ batches do). `queue_id` None = any queue."""

    topic: str
    queue_id: int | None
    messages: tuple[ProduceMessage, ...]


@dataclass(frozen=True)
class PullMessagesRequest:
    topic: str
    queue_id: int
    queue_offset: int
    max_count: int


@dataclass(frozen=True, slots=True)
class SendBatch:
    """A produce request decoded without per-message objects (`codec.decode_send_batch`,
    the server's fast path for a handler with `start_send_batch`).

    `bodies` may be memoryviews into the request frame. `extras` is None when no
    message has a key, tags or properties (the common case); otherwise one entry
    per message, None or `(key, tags, properties)`.
    """

    topic: str
    queue_id: int | None
    bodies: Sequence[bytes | memoryview]
    extras: Sequence[tuple[str | None, str | None, Mapping[str, str]] | None] | None = None
    #: What a RocketMQ producer sets itself (the remoting front end); kept in the record.
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int | None = None
    born_host: tuple[str, int] | None = None
    reconsume_times: int = 0

    def __len__(self) -> int:
        return len(self.bodies)

    def store_properties(self) -> list[Mapping[str, str] | None] | None:
        """Per message, the properties as the store keeps them (`ProduceMessage.
        store_properties`); None when no message has any. A message with neither key nor
        tags gives its mapping itself, not a copy: the store only reads it, and the
        remoting front end's encoded properties (`EncodedProperties`) reach the record
        encoder as the bytes they arrived in."""
        if self.extras is None:
            return None
        out: list[Mapping[str, str] | None] = []
        for extra in self.extras:
            if extra is None:
                out.append(None)
                continue
            key, tags, props = extra
            if key is None and tags is None:
                out.append(props or None)
                continue
            merged = dict(props)
            if key is not None:
                merged[PROPERTY_KEYS] = key
            if tags is not None:
                merged[PROPERTY_TAGS] = tags
            out.append(merged or None)
        return out

    def messages(self) -> tuple[ProduceMessage, ...]:
        """The same request as `ProduceMessage`s (the reference representation)."""
        if self.extras is None:
            return tuple(ProduceMessage(self.topic, bytes(b)) for b in self.bodies)
        return tuple(
            ProduceMessage(self.topic, bytes(b))
            if e is None
            else ProduceMessage(self.topic, bytes(b), e[0], e[1], e[2])
            for b, e in zip(self.bodies, self.extras, strict=True)
        )


@dataclass(frozen=True)
class QueryOffsetsRequest:
    topic: str
    queue_id: int


@dataclass(frozen=True)
class TopicQueueCountRequest:
    topic: str


@dataclass(frozen=True)
class CommitConsumerOffsetRequest:
    group: str
    topic: str
    queue_id: int
    offset: int


@dataclass(frozen=True)
class QueryConsumerOffsetRequest:
    group: str
    topic: str
    queue_id: int


Request = (
    SendMessagesRequest
    | PullMessagesRequest
    | QueryOffsetsRequest
    | TopicQueueCountRequest
    | CommitConsumerOffsetRequest
    | QueryConsumerOffsetRequest
)


# --------------------------------------------------------------------------
# Response frames (broker → client). A success response carries the
# request's result type; a failure carries `ErrorResponse`.


@dataclass(frozen=True)
class OffsetsResult:
    """min/max queue offset of one queue (max = next offset to be written)."""

    min_queue_offset: int
    max_queue_offset: int


@dataclass(frozen=True)
class QueueCountResult:
    queue_count: int


@dataclass(frozen=True)
class CommitResult:
    """An empty success: the consumer offset was stored."""


@dataclass(frozen=True)
class ConsumerOffsetResult:
    offset: int  # NO_CONSUMER_OFFSET when the group never committed


@dataclass(frozen=True)
class ErrorResponse:
    #: The request's code echoed back; an int because a broker also answers
    #: requests whose code it does not know (BAD_REQUEST).
    request_code: int
    code: ResponseCode
    message: str
    master_address: str | None = None

    def to_error(self) -> BrokerError:
        return BrokerError(self.code, self.message, master_address=self.master_address)


@dataclass(frozen=True, slots=True)
class SendRunResult:
    """A `SendResult` whose messages all went to one queue at consecutive queue
    offsets (the broker's fast path); same wire bytes, no per-message objects."""

    queue_id: int
    first_queue_offset: int
    physical_offsets: Sequence[int]
    master_epoch: int = 0

    def to_send_result(self) -> SendResult:
        qid, first = self.queue_id, self.first_queue_offset
        return SendResult(
            tuple(SentMessage(qid, first + i, p) for i, p in enumerate(self.physical_offsets)),
            self.master_epoch,
        )


Response = (
    SendResult
    | SendRunResult
    | PullResult
    | OffsetsResult
    | QueueCountResult
    | CommitResult
    | ConsumerOffsetResult
    | ErrorResponse
)


@dataclass(frozen=True)
class RecordPull:
    """A pull's records exactly as stored (the RocketMQ front end sends them unchanged),
    with the queue offsets a PULL_MESSAGE answer carries."""

    records: tuple[bytes, ...]
    next_offset: int
    min_offset: int
    max_offset: int
