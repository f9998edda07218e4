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

#: Default bound on one frame: a 1,000-message batch of 4 MiB bodies would
#: not fit, a 1,000 × 1 KiB batch (1 MiB) fits 64 times. Both ends check it.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
#: Bytes of the frame header (length, requestId, code, flags).
HEADER_BYTES = 12
#: `flags` bit set on every response frame.
FLAG_RESPONSE = 0x0001
_KNOWN_FLAGS = FLAG_RESPONSE
#: Longest string the `short` length prefix carries.
MAX_STRING_BYTES = 0x7FFF

_HEADER = struct.Struct(">iihh")
_LENGTH = struct.Struct(">i")
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_II = struct.Struct(">ii")
_IQ = struct.Struct(">iq")
_QQ = struct.Struct(">qq")
_IQI = struct.Struct(">iqi")
_QQQ = struct.Struct(">qqq")
_SENT = struct.Struct(">iqq")
_PULLED = struct.Struct(">iqqqqIii")  # queueId .. bodyLen, see docs/protocol.md
_NULL_STRING = b"\xff\xff"  # short -1
_NO_PROPERTIES = b"\x00\x00"


class ProtocolError(Exception):
    """Bytes that do not follow docs/protocol.md (base of both sides)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the protocol cannot carry."""


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
        (length,) = _LENGTH.unpack_from(buf, pos)
        if length < HEADER_BYTES - 4 or length + 4 > self._max_frame_bytes:
            self._error = RemoteProtocolError(
                f"frame length {length} outside [{HEADER_BYTES - 4}, "
                f"{self._max_frame_bytes - 4}] (max_frame_bytes={self._max_frame_bytes})"
            )
            raise self._error
        if available < 4 + length:
            return None
        _, request_id, code, flags = _HEADER.unpack_from(buf, pos)
        if flags & ~_KNOWN_FLAGS:
            self._error = RemoteProtocolError(f"unknown frame flags {flags:#06x}")
            raise self._error
        body = bytes(buf[pos + HEADER_BYTES : pos + 4 + length])
        self._pos = pos + 4 + length
        return Frame(request_id, code, flags, body)

    def frames(self) -> Iterator[Frame]:
        while (frame := self.next_frame()) is not None:
            yield frame


# --------------------------------------------------------------------------
# Encoding helpers.


def _str(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > MAX_STRING_BYTES:
        raise LocalProtocolError(f"string of {len(raw)} bytes over {MAX_STRING_BYTES}")
    return _H.pack(len(raw)) + raw


def _opt_str(value: str | None) -> bytes:
    return _NULL_STRING if value is None else _str(value)


def _props(parts: list[bytes], props: Mapping[str, str]) -> None:
    if not props:
        parts.append(_NO_PROPERTIES)
        return
    if len(props) > 0x7FFF:
        raise LocalProtocolError(f"{len(props)} properties over {0x7FFF}")
    parts.append(_H.pack(len(props)))
    for name, value in props.items():
        parts.append(_str(name))
        parts.append(_str(value))


def _frame(parts: list[bytes], request_id: int, code: int, flags: int) -> bytes:
    """`parts[0]` is a placeholder for the header; join once."""
    body_len = sum(map(len, parts)) - len(parts[0])
    parts[0] = _HEADER.pack(body_len + HEADER_BYTES - 4, request_id, code, flags)
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
        parts.append(_str(request.topic))
        parts.append(_II.pack(qid, len(msgs)))
        append = parts.append
        for m in msgs:
            body = m.body
            append(_I.pack(len(body)))
            append(body)
            append(_NULL_STRING if m.key is None else _str(m.key))
            append(_NULL_STRING if m.tags is None else _str(m.tags))
            if m.properties:
                _props(parts, m.properties)
            else:
                append(_NO_PROPERTIES)
    elif isinstance(request, PullMessagesRequest):
        parts.append(_str(request.topic))
        parts.append(_IQI.pack(request.queue_id, request.queue_offset, request.max_count))
    elif isinstance(request, QueryOffsetsRequest):
        parts.append(_str(request.topic))
        parts.append(_I.pack(request.queue_id))
    elif isinstance(request, TopicQueueCountRequest):
        parts.append(_str(request.topic))
    elif isinstance(request, CommitConsumerOffsetRequest):
        parts.append(_str(request.group))
        parts.append(_str(request.topic))
        parts.append(_IQ.pack(request.queue_id, request.offset))
    elif isinstance(request, QueryConsumerOffsetRequest):
        parts.append(_str(request.group))
        parts.append(_str(request.topic))
        parts.append(_I.pack(request.queue_id))
    else:  # pragma: no cover - exhaustive over Request
        raise LocalProtocolError(f"not a request: {request!r}")
    return _frame(parts, request_id, request_code_of(request), 0)


# --------------------------------------------------------------------------
# Decoding helpers. Each returns (value, new position); overruns surface as
# struct.error / explicit checks and become RemoteProtocolError at the top.


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _H.unpack_from(buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise RemoteProtocolError(f"string length {n} at byte {pos - 2} is invalid")
    return buf[pos : pos + n].decode(), pos + n


def _read_opt_str(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = _H.unpack_from(buf, pos)
    if n == -1:
        return None, pos + 2
    return _read_str(buf, pos)


def _read_props(buf: bytes, pos: int) -> tuple[dict[str, str], int]:
    (count,) = _H.unpack_from(buf, pos)
    pos += 2
    if count < 0:
        raise RemoteProtocolError(f"property count {count} is negative")
    props: dict[str, str] = {}
    for _ in range(count):
        name, pos = _read_str(buf, pos)
        value, pos = _read_str(buf, pos)
        props[name] = value
    return props, pos


def _read_bytes(buf: bytes, pos: int, n: int, what: str) -> tuple[bytes, int]:
    if n < 0 or pos + n > len(buf):
        raise RemoteProtocolError(f"{what} length {n} at byte {pos} is invalid")
    return buf[pos : pos + n], pos + n


def _check_count(count: int, min_item_bytes: int, buf: bytes, pos: int, what: str) -> None:
    # Reject absurd counts before looping: each item needs at least
    # `min_item_bytes`, so a 4-byte count can't make us loop 2^31 times.
    if count < 0 or count * min_item_bytes > len(buf) - pos:
        raise RemoteProtocolError(f"{what} count {count} does not fit the body")


def _check_end(buf: bytes, pos: int) -> None:
    if pos != len(buf):
        raise RemoteProtocolError(f"{len(buf) - pos} unexpected bytes after the body")


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
        topic, pos = _read_str(buf, 0)
        qid, count = _II.unpack_from(buf, pos)
        pos += 8
        if qid < -1:
            raise RemoteProtocolError(f"queueId {qid} is invalid")
        if count < 1:
            raise RemoteProtocolError(f"send request with {count} messages")
        _check_count(count, 10, buf, pos, "message")
        msgs: list[ProduceMessage] = []
        unpack_i = _I.unpack_from
        for _ in range(count):
            (blen,) = unpack_i(buf, pos)
            body, pos = _read_bytes(buf, pos + 4, blen, "body")
            key, pos = _read_opt_str(buf, pos)
            tags, pos = _read_opt_str(buf, pos)
            if buf[pos : pos + 2] == _NO_PROPERTIES:
                props: dict[str, str] = {}
                pos += 2
            else:
                props, pos = _read_props(buf, pos)
            msgs.append(ProduceMessage(topic, body, key, tags, props))
        request = SendMessagesRequest(topic, None if qid == -1 else qid, tuple(msgs))
    elif code == RequestCode.PULL_MESSAGES:
        topic, pos = _read_str(buf, 0)
        qid, offset, max_count = _IQI.unpack_from(buf, pos)
        pos += _IQI.size
        if qid < 0 or offset < 0 or max_count < 1:
            raise RemoteProtocolError(
                f"pull queueId={qid} queueOffset={offset} maxCount={max_count} is invalid"
            )
        request = PullMessagesRequest(topic, qid, offset, max_count)
    elif code == RequestCode.QUERY_OFFSETS:
        topic, pos = _read_str(buf, 0)
        (qid,) = _I.unpack_from(buf, pos)
        pos += 4
        request = QueryOffsetsRequest(topic, qid)
    elif code == RequestCode.TOPIC_QUEUE_COUNT:
        topic, pos = _read_str(buf, 0)
        request = TopicQueueCountRequest(topic)
    elif code == RequestCode.COMMIT_CONSUMER_OFFSET:
        group, pos = _read_str(buf, 0)
        topic, pos = _read_str(buf, pos)
        qid, offset = _IQ.unpack_from(buf, pos)
        pos += _IQ.size
        request = CommitConsumerOffsetRequest(group, topic, qid, offset)
    elif code == RequestCode.QUERY_CONSUMER_OFFSET:
        group, pos = _read_str(buf, 0)
        topic, pos = _read_str(buf, pos)
        (qid,) = _I.unpack_from(buf, pos)
        pos += 4
        request = QueryConsumerOffsetRequest(group, topic, qid)
    else:
        raise RemoteProtocolError(f"unknown request code {code}")
    _check_end(buf, pos)
    return request


#: What follows a body when the message has no key, no tags and no properties:
#: key = null string, tags = null string, property count 0.
_PLAIN_TRAILER = _NULL_STRING + _NULL_STRING + _NO_PROPERTIES


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
    topic, pos = _read_str(buf, 0)
    qid, count = _II.unpack_from(buf, pos)
    pos += 8
    if qid < -1:
        raise RemoteProtocolError(f"queueId {qid} is invalid")
    if count < 1:
        raise RemoteProtocolError(f"send request with {count} messages")
    _check_count(count, 10, buf, pos, "message")
    view = memoryview(buf)
    n = len(buf)
    bodies: list[bytes | memoryview] = []
    add_body = bodies.append
    extras: list[tuple[str | None, str | None, Mapping[str, str]] | None] | None = None
    unpack_i = _I.unpack_from
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
        key, pos = _read_opt_str(buf, end)
        tags, pos = _read_opt_str(buf, pos)
        props, pos = _read_props(buf, pos)
        if extras is None:
            extras = [None] * i
        extras.append((key, tags, props))
    _check_end(buf, pos)
    return SendBatch(topic, None if qid == -1 else qid, bodies, extras)


_REQUEST_CODES: dict[type, RequestCode] = {
    SendMessagesRequest: RequestCode.SEND_MESSAGES,
    PullMessagesRequest: RequestCode.PULL_MESSAGES,
    QueryOffsetsRequest: RequestCode.QUERY_OFFSETS,
    TopicQueueCountRequest: RequestCode.TOPIC_QUEUE_COUNT,
    CommitConsumerOffsetRequest: RequestCode.COMMIT_CONSUMER_OFFSET,
    QueryConsumerOffsetRequest: RequestCode.QUERY_CONSUMER_OFFSET,
}
