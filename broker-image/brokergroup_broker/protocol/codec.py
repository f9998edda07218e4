"""Sans-I/O codec of the client protocol (docs/protocol.md has the layouts).

Theory of operation (h11 style): this module never touches a socket or a
clock. `FrameDecoder.feed(bytes)` buffers whatever the transport read;
`next_frame()` returns one whole `Frame` or None when more bytes are needed.
`decode_request` / `decode_response` turn a frame's body into the typed
values of `messages`; `encode_request` / `encode_response` do the reverse
and return the complete frame bytes, ready for one `transport.write`.

Frame: ``int length | int requestId | short code | short flags | body``,
big-endian, `length` counting everything after itself (8 + body). A
response's `code` is a `ResponseCode`, a request's a `RequestCode`; every
response body starts with the request's code echoed back, so a response
decodes on its own without knowing which request it answers.

Errors: `RemoteProtocolError` means the peer sent bytes that break the
protocol. A framing error (bad length) leaves the byte stream unusable, so
the decoder stays failed and the connection must close; a body error only
spoils that one request (the server answers BAD_REQUEST and goes on).
`LocalProtocolError` means we were asked to encode something the format
cannot carry (a string over 32767 bytes): a caller bug, caught before any
byte is written.

Speed: a batch of messages is one frame; encoding collects the pieces in a
list and joins once, decoding walks the body with precompiled
`Struct.unpack_from` and copies each body out once.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from brokergroup_broker.protocol.layout import (
    DEFAULT_MAX_FRAME_BYTES,
    FLAG_RESPONSE,
    HEADER,
    HEADER_BYTES,
    I32,
    I32_I64,
    I32_I64_I32,
    I32_PAIR,
    KNOWN_FLAGS,
    LENGTH,
    MAX_STRING_BYTES,
    NO_PROPERTIES,
    NULL_STRING,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    check_count,
    check_end,
    encode_props,
    encode_str,
    read_bytes,
    read_opt_str,
    read_props,
    read_str,
)
from brokergroup_broker.protocol.messages import (
    CommitConsumerOffsetRequest,
    ProduceMessage,
    PullMessagesRequest,
    QueryConsumerOffsetRequest,
    QueryOffsetsRequest,
    Request,
    RequestCode,
    SendBatch,
    SendMessagesRequest,
    TopicQueueCountRequest,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "FLAG_RESPONSE",
    "HEADER_BYTES",
    "MAX_STRING_BYTES",
    "Frame",
    "FrameDecoder",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "decode_request",
    "decode_send_batch",
    "encode_frame",
    "encode_request",
    "request_code_of",
]


@dataclass(frozen=True, slots=True)
class Frame:
    request_id: int
    code: int
    flags: int
    body: bytes

    @property
    def is_response(self) -> bool:
        return bool(self.flags & FLAG_RESPONSE)


class FrameDecoder:
    """Incremental frame splitter: feed any chunks, take whole frames.

    Holds at most one partial frame plus what was fed and not yet taken; the
    caller bounds the latter by reading only when it has taken frames out.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        assert max_frame_bytes >= HEADER_BYTES
        self._max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0
        self._error: RemoteProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and self._pos >= len(self._buf) // 2:
            # Compact lazily: amortised O(1) per byte, no copy per frame.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        if self._error is not None:
            raise self._error
        buf = self._buf
        pos = self._pos
        available = len(buf) - pos
        if available < 4:
            return None
        (length,) = LENGTH.unpack_from(buf, pos)
        if length < HEADER_BYTES - 4 or length + 4 > self._max_frame_bytes:
            self._error = RemoteProtocolError(
                f"frame length {length} outside [{HEADER_BYTES - 4}, "
                f"{self._max_frame_bytes - 4}] (max_frame_bytes={self._max_frame_bytes})"
            )
            raise self._error
        if available < 4 + length:
            return None
        _, request_id, code, flags = HEADER.unpack_from(buf, pos)
        if flags & ~KNOWN_FLAGS:
            self._error = RemoteProtocolError(f"unknown frame flags {flags:#06x}")
            raise self._error
        body = bytes(buf[pos + HEADER_BYTES : pos + 4 + length])
        self._pos = pos + 4 + length
        return Frame(request_id, code, flags, body)

    def frames(self) -> Iterator[Frame]:
        while (frame := self.next_frame()) is not None:
            yield frame


def encode_frame(parts: list[bytes], request_id: int, code: int, flags: int) -> bytes:
    """`parts[0]` is a placeholder for the header; join once."""
    body_len = sum(map(len, parts)) - len(parts[0])
    parts[0] = HEADER.pack(body_len + HEADER_BYTES - 4, request_id, code, flags)
    return b"".join(parts)


def request_code_of(request: Request) -> RequestCode:
    return _REQUEST_CODES[type(request)]


def encode_request(request_id: int, request: Request) -> bytes:
    """The complete frame of `request`."""
    try:
        return _encode_request(request_id, request)
    except struct.error as exc:  # a number out of its field's range
        raise LocalProtocolError(f"cannot encode {type(request).__name__}: {exc}") from exc


def _encode_request(request_id: int, request: Request) -> bytes:
    parts: list[bytes] = [b""]
    if isinstance(request, SendMessagesRequest):
        msgs = request.messages
        if not msgs:
            raise LocalProtocolError("a send request needs at least one message")
        qid = -1 if request.queue_id is None else request.queue_id
        parts.append(encode_str(request.topic))
        parts.append(I32_PAIR.pack(qid, len(msgs)))
        append = parts.append
        for m in msgs:
            body = m.body
            append(I32.pack(len(body)))
            append(body)
            append(NULL_STRING if m.key is None else encode_str(m.key))
            append(NULL_STRING if m.tags is None else encode_str(m.tags))
            if m.properties:
                encode_props(parts, m.properties)
            else:
                append(NO_PROPERTIES)
    elif isinstance(request, PullMessagesRequest):
        parts.append(encode_str(request.topic))
        parts.append(I32_I64_I32.pack(request.queue_id, request.queue_offset, request.max_count))
    elif isinstance(request, QueryOffsetsRequest):
        parts.append(encode_str(request.topic))
        parts.append(I32.pack(request.queue_id))
    elif isinstance(request, TopicQueueCountRequest):
        parts.append(encode_str(request.topic))
    elif isinstance(request, CommitConsumerOffsetRequest):
        parts.append(encode_str(request.group))
        parts.append(encode_str(request.topic))
        parts.append(I32_I64.pack(request.queue_id, request.offset))
    elif isinstance(request, QueryConsumerOffsetRequest):
        parts.append(encode_str(request.group))
        parts.append(encode_str(request.topic))
        parts.append(I32.pack(request.queue_id))
    else:  # pragma: no cover - exhaustive over Request
        raise LocalProtocolError(f"not a request: {request!r}")
    return encode_frame(parts, request_id, request_code_of(request), 0)


def decode_request(frame: Frame) -> Request:
    """The typed request in `frame`; RemoteProtocolError if it is not one."""
    if frame.is_response:
        raise RemoteProtocolError(f"request {frame.request_id}: a response frame was sent")
    try:
        return _decode_request(frame)
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"request {frame.request_id} (code {frame.code}): {exc}") from exc
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(
            f"request {frame.request_id} (code {frame.code}): malformed body: {exc}"
        ) from exc


def _decode_request(frame: Frame) -> Request:
    buf = frame.body
    code = frame.code
    request: Request
    if code == RequestCode.SEND_MESSAGES:
        topic, pos = read_str(buf, 0)
        qid, count = I32_PAIR.unpack_from(buf, pos)
        pos += 8
        if qid < -1:
            raise RemoteProtocolError(f"queueId {qid} is invalid")
        if count < 1:
            raise RemoteProtocolError(f"send request with {count} messages")
        check_count(count, 10, buf, pos, "message")
        msgs: list[ProduceMessage] = []
        unpack_i = I32.unpack_from
        for _ in range(count):
            (blen,) = unpack_i(buf, pos)
            body, pos = read_bytes(buf, pos + 4, blen, "body")
            key, pos = read_opt_str(buf, pos)
            tags, pos = read_opt_str(buf, pos)
            if buf[pos : pos + 2] == NO_PROPERTIES:
                props: dict[str, str] = {}
                pos += 2
            else:
                props, pos = read_props(buf, pos)
            msgs.append(ProduceMessage(topic, body, key, tags, props))
        request = SendMessagesRequest(topic, None if qid == -1 else qid, tuple(msgs))
    elif code == RequestCode.PULL_MESSAGES:
        topic, pos = read_str(buf, 0)
        qid, offset, max_count = I32_I64_I32.unpack_from(buf, pos)
        pos += I32_I64_I32.size
        if qid < 0 or offset < 0 or max_count < 1:
            raise RemoteProtocolError(
                f"pull queueId={qid} queueOffset={offset} maxCount={max_count} is invalid"
            )
        request = PullMessagesRequest(topic, qid, offset, max_count)
    elif code == RequestCode.QUERY_OFFSETS:
        topic, pos = read_str(buf, 0)
        (qid,) = I32.unpack_from(buf, pos)
        pos += 4
        request = QueryOffsetsRequest(topic, qid)
    elif code == RequestCode.TOPIC_QUEUE_COUNT:
        topic, pos = read_str(buf, 0)
        request = TopicQueueCountRequest(topic)
    elif code == RequestCode.COMMIT_CONSUMER_OFFSET:
        group, pos = read_str(buf, 0)
        topic, pos = read_str(buf, pos)
        qid, offset = I32_I64.unpack_from(buf, pos)
        pos += I32_I64.size
        request = CommitConsumerOffsetRequest(group, topic, qid, offset)
    elif code == RequestCode.QUERY_CONSUMER_OFFSET:
        group, pos = read_str(buf, 0)
        topic, pos = read_str(buf, pos)
        (qid,) = I32.unpack_from(buf, pos)
        pos += 4
        request = QueryConsumerOffsetRequest(group, topic, qid)
    else:
        raise RemoteProtocolError(f"unknown request code {code}")
    check_end(buf, pos)
    return request


#: What follows a body when the message has no key, no tags and no properties:
#: key = null string, tags = null string, property count 0.
_PLAIN_TRAILER = NULL_STRING + NULL_STRING + NO_PROPERTIES


def decode_send_batch(frame: Frame) -> SendBatch:
    """A SEND_MESSAGES request as a `SendBatch` (bodies are memoryviews into
    `frame.body`): the same validation and errors as `decode_request`, which gives
    the equivalent `SendMessagesRequest` (a unit test checks both on random input)."""
    if frame.is_response:
        raise RemoteProtocolError(f"request {frame.request_id}: a response frame was sent")
    if frame.code != RequestCode.SEND_MESSAGES:
        raise RemoteProtocolError(f"request {frame.request_id}: code {frame.code} is not a send")
    try:
        return _decode_send_batch(frame.body)
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"request {frame.request_id} (code {frame.code}): {exc}") from exc
    except (struct.error, UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(
            f"request {frame.request_id} (code {frame.code}): malformed body: {exc}"
        ) from exc


def _decode_send_batch(buf: bytes) -> SendBatch:
    topic, pos = read_str(buf, 0)
    qid, count = I32_PAIR.unpack_from(buf, pos)
    pos += 8
    if qid < -1:
        raise RemoteProtocolError(f"queueId {qid} is invalid")
    if count < 1:
        raise RemoteProtocolError(f"send request with {count} messages")
    check_count(count, 10, buf, pos, "message")
    view = memoryview(buf)
    n = len(buf)
    bodies: list[bytes | memoryview] = []
    add_body = bodies.append
    extras: list[tuple[str | None, str | None, Mapping[str, str]] | None] | None = None
    unpack_i = I32.unpack_from
    plain = _PLAIN_TRAILER
    startswith = buf.startswith
    for i in range(count):
        (blen,) = unpack_i(buf, pos)
        pos += 4
        end = pos + blen
        if blen < 0 or end > n:
            raise RemoteProtocolError(f"body length {blen} at byte {pos} is invalid")
        add_body(view[pos:end])
        if startswith(plain, end):
            pos = end + 6
            if extras is not None:
                extras.append(None)
            continue
        key, pos = read_opt_str(buf, end)
        tags, pos = read_opt_str(buf, pos)
        props, pos = read_props(buf, pos)
        if extras is None:
            extras = [None] * i
        extras.append((key, tags, props))
    check_end(buf, pos)
    return SendBatch(topic, None if qid == -1 else qid, bodies, extras)


_REQUEST_CODES: dict[type, RequestCode] = {
    SendMessagesRequest: RequestCode.SEND_MESSAGES,
    PullMessagesRequest: RequestCode.PULL_MESSAGES,
    QueryOffsetsRequest: RequestCode.QUERY_OFFSETS,
    TopicQueueCountRequest: RequestCode.TOPIC_QUEUE_COUNT,
    CommitConsumerOffsetRequest: RequestCode.COMMIT_CONSUMER_OFFSET,
    QueryConsumerOffsetRequest: RequestCode.QUERY_CONSUMER_OFFSET,
}
