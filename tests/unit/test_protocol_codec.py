"""Client protocol codec (DESIGN.md §3.5, docs/protocol.md).

Checks, h11 style (STYLE.md §2): every request and response type round
trips; the decoder gets each frame whole, byte by byte, split at random
points and followed by trailing bytes; framing errors are sticky; body
errors name the request; encoding refuses what the format cannot carry;
and hypothesis fuzzing shows that garbage or mutated frames yield a valid
value or our own `ProtocolError`, never another exception.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.protocol.codec import (
    FLAG_RESPONSE,
    HEADER_BYTES,
    MAX_STRING_BYTES,
    Frame,
    FrameDecoder,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    decode_request,
    encode_request,
    request_code_of,
)
from brokergroup_broker.protocol.messages import (
    CommitConsumerOffsetRequest,
    CommitResult,
    ConsumerOffsetResult,
    ErrorResponse,
    OffsetsResult,
    ProduceMessage,
    PulledMessage,
    PullMessagesRequest,
    PullResult,
    QueryConsumerOffsetRequest,
    QueryOffsetsRequest,
    QueueCountResult,
    Request,
    RequestCode,
    Response,
    ResponseCode,
    SendMessagesRequest,
    SendResult,
    SentMessage,
    TopicQueueCountRequest,
)
from brokergroup_broker.protocol.response_codec import decode_response, encode_response

REQUESTS: list[Request] = [
    SendMessagesRequest("orders", None, (ProduceMessage("orders", b"hello"),)),
    SendMessagesRequest(
        "orders",
        3,
        (
            ProduceMessage("orders", b"", key="k1", tags="TagA"),
            ProduceMessage("orders", b"\x00\xff" * 600, properties={"a": "1", "ünï": "cødé"}),
            ProduceMessage("orders", b"x", key="", tags=None, properties={"": ""}),
        ),
    ),
    PullMessagesRequest("orders", 2, 1 << 40, 32),
    QueryOffsetsRequest("orders", 0),
    TopicQueueCountRequest("t" * MAX_STRING_BYTES),
    CommitConsumerOffsetRequest("group-1", "orders", 1, 99),
    QueryConsumerOffsetRequest("group-1", "orders", 1),
]

RESPONSES: list[Response] = [
    SendResult((SentMessage(0, 0, 0),), master_epoch=0),
    SendResult(tuple(SentMessage(i % 4, i, i * 1100) for i in range(50)), master_epoch=7),
    PullResult((), next_queue_offset=5, min_queue_offset=5, max_queue_offset=5),
    PullResult(
        (
            PulledMessage("orders", 1, 10, 4096, b"body", {"KEYS": "k"}, 1, 2, 0xFFFFFFFF, 0),
            PulledMessage("orders", 1, 11, 4200, b"", {}, 0, 0, 0, -1),
        ),
        next_queue_offset=12,
        min_queue_offset=0,
        max_queue_offset=40,
    ),
    OffsetsResult(0, 1 << 50),
    QueueCountResult(8),
    CommitResult(),
    ConsumerOffsetResult(-1),
    ErrorResponse(RequestCode.SEND_MESSAGES, ResponseCode.NOT_MASTER, "slave", "10.0.0.1:10911"),
    ErrorResponse(RequestCode.PULL_MESSAGES, ResponseCode.FENCED, "role not confirmed", None),
    ErrorResponse(999, ResponseCode.BAD_REQUEST, "unknown request code 999"),
]


def _one(data: bytes) -> Frame:
    decoder = FrameDecoder()
    decoder.feed(data)
    frame = decoder.next_frame()
    assert frame is not None
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 0
    return frame


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_request_round_trip_whole(request_: Request) -> None:
    data = encode_request(42, request_)
    frame = _one(data)
    assert frame.request_id == 42
    assert frame.code == request_code_of(request_)
    assert not frame.is_response
    assert struct.unpack_from(">i", data)[0] == len(data) - 4
    assert decode_request(frame) == request_


@pytest.mark.parametrize("response", RESPONSES, ids=lambda r: type(r).__name__)
def test_response_round_trip_whole(response: Response) -> None:
    frame = _one(encode_response(-7, response))
    assert frame.request_id == -7
    assert frame.is_response
    assert decode_response(frame) == response


def test_every_frame_byte_by_byte() -> None:
    stream = b"".join(encode_request(i, r) for i, r in enumerate(REQUESTS))
    stream += b"".join(encode_response(i, r) for i, r in enumerate(RESPONSES))
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        frames.extend(decoder.frames())
    assert [decode_request(f) for f in frames[: len(REQUESTS)]] == REQUESTS
    assert [decode_response(f) for f in frames[len(REQUESTS) :]] == RESPONSES
    assert decoder.buffered_bytes == 0


def test_trailing_bytes_wait_for_the_rest() -> None:
    first = encode_request(1, REQUESTS[0])
    second = encode_request(2, REQUESTS[1])
    decoder = FrameDecoder()
    decoder.feed(first + second[:7])
    frame = decoder.next_frame()
    assert frame is not None and decode_request(frame) == REQUESTS[0]
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 7
    decoder.feed(second[7:])
    frame = decoder.next_frame()
    assert frame is not None and decode_request(frame) == REQUESTS[1]


@given(st.lists(st.integers(min_value=0, max_value=4000), max_size=20))
def test_any_split_points(cuts: list[int]) -> None:
    stream = b"".join(encode_request(i, r) for i, r in enumerate(REQUESTS))
    points = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for a, b in itertools.pairwise(points):
        decoder.feed(stream[a:b])
        frames.extend(decoder.frames())
    assert [decode_request(f) for f in frames] == REQUESTS


def test_bad_length_is_sticky() -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    decoder.feed(struct.pack(">i", 5000))
    with pytest.raises(RemoteProtocolError, match="frame length"):
        decoder.next_frame()
    decoder.feed(encode_request(1, REQUESTS[0]))
    with pytest.raises(RemoteProtocolError):  # the stream stays unusable
        decoder.next_frame()


def test_length_below_header_is_rejected() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">i", HEADER_BYTES - 5) + b"\x00" * 16)
    with pytest.raises(RemoteProtocolError):
        decoder.next_frame()


def test_unknown_flags_are_rejected() -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">iihh", 8, 1, 10, 0x40))
    with pytest.raises(RemoteProtocolError, match="flags"):
        decoder.next_frame()


def test_unknown_request_code() -> None:
    with pytest.raises(RemoteProtocolError, match="unknown request code 77"):
        decode_request(Frame(1, 77, 0, b""))


def test_response_frame_is_not_a_request_and_vice_versa() -> None:
    frame = _one(encode_response(1, QueueCountResult(1)))
    with pytest.raises(RemoteProtocolError):
        decode_request(frame)
    frame = _one(encode_request(1, REQUESTS[3]))
    with pytest.raises(RemoteProtocolError):
        decode_response(frame)


def test_extra_bytes_inside_a_body_are_rejected() -> None:
    frame = _one(encode_request(5, QueryOffsetsRequest("t", 1)))
    with pytest.raises(RemoteProtocolError, match="unexpected bytes"):
        decode_request(Frame(5, frame.code, 0, frame.body + b"\x00"))


def test_truncated_body_names_the_request() -> None:
    frame = _one(encode_request(9, REQUESTS[1]))
    for cut in range(len(frame.body)):
        with pytest.raises(RemoteProtocolError, match="request 9"):
            decode_request(Frame(9, frame.code, 0, frame.body[:cut]))


def test_invalid_request_values_are_rejected() -> None:
    pull = _one(encode_request(1, PullMessagesRequest("t", 0, 0, 1)))
    bad = pull.body[:-4] + struct.pack(">i", 0)  # maxCount 0
    with pytest.raises(RemoteProtocolError, match="maxCount=0"):
        decode_request(Frame(1, pull.code, 0, bad))
    send = _one(encode_request(1, SendMessagesRequest("t", None, (ProduceMessage("t", b""),))))
    # topic "t" = 3 bytes, then queueId -5
    bad = send.body[:3] + struct.pack(">i", -5) + send.body[7:]
    with pytest.raises(RemoteProtocolError, match="queueId -5"):
        decode_request(Frame(1, send.code, 0, bad))
    huge_count = send.body[:7] + struct.pack(">i", 1 << 30) + send.body[11:]
    with pytest.raises(RemoteProtocolError, match="does not fit"):
        decode_request(Frame(1, send.code, 0, huge_count))


def test_unknown_response_code_is_a_protocol_error() -> None:
    frame = _one(encode_response(1, QueueCountResult(1)))
    with pytest.raises(RemoteProtocolError):
        decode_response(Frame(1, 250, FLAG_RESPONSE, frame.body))


def test_local_errors_before_any_byte() -> None:
    with pytest.raises(LocalProtocolError, match="string"):
        encode_request(1, TopicQueueCountRequest("t" * (MAX_STRING_BYTES + 1)))
    with pytest.raises(LocalProtocolError, match="at least one"):
        encode_request(1, SendMessagesRequest("t", None, ()))
    with pytest.raises(LocalProtocolError):
        encode_request(1, PullMessagesRequest("t", 1 << 40, 0, 1))  # queueId over int
    with pytest.raises(LocalProtocolError):
        encode_response(1, QueueCountResult(1 << 40))


def test_long_error_messages_are_truncated_not_refused() -> None:
    response = ErrorResponse(RequestCode.SEND_MESSAGES, ResponseCode.SYSTEM_ERROR, "é" * 40_000)
    decoded = decode_response(_one(encode_response(1, response)))
    assert isinstance(decoded, ErrorResponse)
    assert decoded.message == "é" * (MAX_STRING_BYTES // 2)


def test_error_response_becomes_broker_error() -> None:
    decoded = decode_response(_one(encode_response(3, RESPONSES[-3])))
    assert isinstance(decoded, ErrorResponse)
    error = decoded.to_error()
    assert error.code is ResponseCode.NOT_MASTER
    assert error.master_address == "10.0.0.1:10911"


# ---------------------------------------------------------------- hypothesis

_text = st.text(max_size=20)
_messages = st.builds(
    ProduceMessage,
    topic=st.just("T"),
    body=st.binary(max_size=300),
    key=st.none() | _text,
    tags=st.none() | _text,
    properties=st.dictionaries(_text, _text, max_size=3),
)


@given(
    queue_id=st.none() | st.integers(0, 2**31 - 1),
    messages=st.lists(_messages, min_size=1, max_size=10),
    request_id=st.integers(-(2**31), 2**31 - 1),
)
def test_send_requests_round_trip(
    queue_id: int | None, messages: list[ProduceMessage], request_id: int
) -> None:
    request = SendMessagesRequest("T", queue_id, tuple(messages))
    frame = _one(encode_request(request_id, request))
    assert frame.request_id == request_id
    assert decode_request(frame) == request


_pulled = st.builds(
    PulledMessage,
    topic=_text,
    queue_id=st.integers(0, 2**31 - 1),
    queue_offset=st.integers(0, 2**63 - 1),
    physical_offset=st.integers(0, 2**63 - 1),
    body=st.binary(max_size=200),
    properties=st.dictionaries(_text, _text, max_size=3),
    born_timestamp_ms=st.integers(0, 2**63 - 1),
    store_timestamp_ms=st.integers(0, 2**63 - 1),
    body_crc=st.integers(0, 2**32 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
)


@given(st.lists(_pulled, max_size=8), st.integers(0, 2**62))
def test_pull_results_round_trip(messages: list[PulledMessage], offset: int) -> None:
    result = PullResult(tuple(messages), offset, 0, offset)
    assert decode_response(_one(encode_response(1, result))) == result


def _decode_everything(data: bytes, max_frame_bytes: int = 1 << 20) -> None:
    decoder = FrameDecoder(max_frame_bytes)
    decoder.feed(data)
    try:
        for frame in decoder.frames():
            try:
                if frame.is_response:
                    decode_response(frame)
                else:
                    decode_request(frame)
            except ProtocolError:
                pass
    except ProtocolError:
        pass


@settings(max_examples=500)
@given(st.binary(max_size=400))
def test_fuzz_garbage_never_crashes(data: bytes) -> None:
    _decode_everything(data)


@settings(max_examples=300)
@given(st.binary(max_size=200), st.sampled_from(list(RequestCode)), st.booleans())
def test_fuzz_valid_header_garbage_body(body: bytes, code: RequestCode, response: bool) -> None:
    if response:
        header = struct.pack(">iihh", len(body) + 10, 1, 0, FLAG_RESPONSE) + struct.pack(">h", code)
    else:
        header = struct.pack(">iihh", len(body) + 8, 1, code, 0)
    _decode_everything(header + body)


_valid_frames = [encode_request(i, r) for i, r in enumerate(REQUESTS[:4])] + [
    encode_response(i, r) for i, r in enumerate(RESPONSES)
]


@settings(max_examples=500)
@given(
    st.sampled_from(_valid_frames),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6),
)
def test_fuzz_mutated_frames_never_crash(frame: bytes, flips: list[tuple[int, int]]) -> None:
    data = bytearray(frame)
    for position, value in flips:
        data[position % len(data)] = value
    _decode_everything(bytes(data))
