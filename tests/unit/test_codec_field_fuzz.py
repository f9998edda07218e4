"""Structured fuzzing of both wire codecs: build a valid frame, change one field.

Random bytes rarely get past a decoder's first check, so they test little
more than the length prefix. Here hypothesis builds *valid* frames of every
kind (client requests and responses, HA frames in both directions), a
layout walker written from docs/protocol.md and the HA codec's layout table
(independently of the codecs) splits each frame into its fields, and one
field is replaced: a number by an edge value (0, ±1, min, max, its
neighbours) or any value of its width, a string or body by other bytes of
the same length.

What must hold:
- the decoders raise only their protocol errors (never IndexError,
  struct.error, UnicodeDecodeError...), and never loop or allocate by a
  forged count (bounded by the frame);
- a value field is read from exactly where the layout says: the HA decoder
  accepts the frame iff the new value obeys the documented rule (oracle
  below) and then returns that value; a client-protocol frame that still
  decodes re-encodes to the very bytes received (so no byte was skipped or
  read twice), and a body or a valid UTF-8 string of the same length
  always decodes to exactly the new bytes;
- a length or count that no longer matches its data is refused, waits for
  more data, or (only when it describes a shorter, self-consistent frame)
  decodes to a frame whose encoding is a prefix of the bytes received.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.ha.codec import (
    HAProtocolError,
    MasterFrameDecoder,
    MasterHandshake,
    NeedData,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    Transfer,
    WireEpochEntry,
)
from brokergroup_broker.protocol.codec import (
    FrameDecoder,
    ProtocolError,
    decode_request,
    encode_request,
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

# ------------------------------------------------------------ layout walker


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    kind: str  # "int" (signed), "uint", "len" (a length or count), "text", "blob"


class _Walk:
    """Reads a frame the way the docs describe it, recording every field."""

    def __init__(self, data: bytes, start: int = 0) -> None:
        self.data = data
        self.pos = start
        self.fields: list[Field] = []

    def num(self, name: str, size: int, kind: str = "int") -> int:
        fmt = {2: ">h", 4: ">I" if kind == "uint" else ">i", 8: ">q"}[size]
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.fields.append(Field(name, self.pos, size, kind))
        self.pos += size
        return int(value)

    def raw(self, name: str, n: int, kind: str) -> None:
        if n > 0:
            self.fields.append(Field(name, self.pos, n, kind))
        self.pos += n

    def string(self, name: str, optional: bool = False) -> None:
        n = self.num(f"{name}.length", 2, "len")
        if optional and n == -1:
            return
        self.raw(name, n, "text")

    def props(self, name: str) -> int:
        count = self.num(f"{name}.count", 2, "len")
        for i in range(count):
            self.string(f"{name}[{i}].name")
            self.string(f"{name}[{i}].value")
        return count


def walk_client_frame(data: bytes) -> tuple[list[Field], int]:
    """Fields of one client-protocol frame (docs/protocol.md) and its property count."""
    w = _Walk(data)
    w.num("length", 4, "len")
    w.num("requestId", 4)
    code = w.num("code", 2)
    flags = w.num("flags", 2)
    props = 0
    if not flags & 1:
        if code == RequestCode.SEND_MESSAGES:
            w.string("topic")
            w.num("queueId", 4)
            count = w.num("count", 4, "len")
            for i in range(count):
                body_len = w.num(f"m{i}.bodyLength", 4, "len")
                w.raw(f"m{i}.body", body_len, "blob")
                w.string(f"m{i}.key", optional=True)
                w.string(f"m{i}.tags", optional=True)
                props += w.props(f"m{i}.properties")
        elif code == RequestCode.PULL_MESSAGES:
            w.string("topic")
            w.num("queueId", 4)
            w.num("queueOffset", 8)
            w.num("maxCount", 4)
        elif code == RequestCode.QUERY_OFFSETS:
            w.string("topic")
            w.num("queueId", 4)
        elif code == RequestCode.TOPIC_QUEUE_COUNT:
            w.string("topic")
        elif code in (RequestCode.COMMIT_CONSUMER_OFFSET, RequestCode.QUERY_CONSUMER_OFFSET):
            w.string("group")
            w.string("topic")
            w.num("queueId", 4)
            if code == RequestCode.COMMIT_CONSUMER_OFFSET:
                w.num("offset", 8)
        return w.fields, props
    echoed = w.num("requestCode", 2)
    if code != ResponseCode.SUCCESS:
        w.string("message")
        w.string("masterAddress", optional=True)
    elif echoed == RequestCode.SEND_MESSAGES:
        w.num("masterEpoch", 4)
        for i in range(w.num("count", 4, "len")):
            w.num(f"r{i}.queueId", 4)
            w.num(f"r{i}.queueOffset", 8)
            w.num(f"r{i}.physicalOffset", 8)
    elif echoed == RequestCode.PULL_MESSAGES:
        for name in ("nextQueueOffset", "minQueueOffset", "maxQueueOffset"):
            w.num(name, 8)
        for i in range(w.num("count", 4, "len")):
            w.string(f"p{i}.topic")
            w.num(f"p{i}.queueId", 4)
            for name in ("queueOffset", "physicalOffset", "bornTimestamp", "storeTimestamp"):
                w.num(f"p{i}.{name}", 8)
            w.num(f"p{i}.bodyCrc", 4, "uint")
            w.num(f"p{i}.flag", 4)
            body_len = w.num(f"p{i}.bodyLength", 4, "len")
            w.raw(f"p{i}.body", body_len, "blob")
            props += w.props(f"p{i}.properties")
    elif echoed == RequestCode.QUERY_OFFSETS:
        w.num("minQueueOffset", 8)
        w.num("maxQueueOffset", 8)
    elif echoed == RequestCode.TOPIC_QUEUE_COUNT:
        w.num("queueCount", 4)
    elif echoed == RequestCode.QUERY_CONSUMER_OFFSET:
        w.num("offset", 8)
    assert w.pos == len(data), "walker and frame disagree"
    return w.fields, props


# ---------------------------------------------------------------- strategies

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_i32 = st.integers(-(2**31), 2**31 - 1)
_n32 = st.integers(0, 2**31 - 1)
_n63 = st.integers(0, 2**63 - 1)
_props = st.dictionaries(_text, _text, max_size=3)
_produce = st.builds(
    ProduceMessage,
    topic=st.just("T"),
    body=st.binary(max_size=40),
    key=st.none() | _text,
    tags=st.none() | _text,
    properties=_props,
)
requests: st.SearchStrategy[Request] = st.one_of(
    st.builds(
        SendMessagesRequest,
        topic=st.just("T"),
        queue_id=st.none() | _n32,
        messages=st.lists(_produce, min_size=1, max_size=3).map(tuple),
    ),
    st.builds(PullMessagesRequest, _text, _n32, _n63, st.integers(1, 2**31 - 1)),
    st.builds(QueryOffsetsRequest, _text, _i32),
    st.builds(TopicQueueCountRequest, _text),
    st.builds(CommitConsumerOffsetRequest, _text, _text, _i32, st.integers(-(2**63), 2**63 - 1)),
    st.builds(QueryConsumerOffsetRequest, _text, _text, _i32),
)
_pulled = st.builds(
    PulledMessage,
    topic=_text,
    queue_id=_i32,
    queue_offset=_n63,
    physical_offset=_n63,
    body=st.binary(max_size=40),
    properties=_props,
    born_timestamp_ms=_n63,
    store_timestamp_ms=_n63,
    body_crc=st.integers(0, 2**32 - 1),
    flag=_i32,
)
responses: st.SearchStrategy[Response] = st.one_of(
    st.builds(
        SendResult,
        st.lists(st.builds(SentMessage, _i32, _n63, _n63), max_size=3).map(tuple),
        _i32,
    ),
    st.builds(PullResult, st.lists(_pulled, max_size=2).map(tuple), _n63, _n63, _n63),
    st.builds(OffsetsResult, _n63, _n63),
    st.builds(QueueCountResult, _i32),
    st.just(CommitResult()),
    st.builds(ConsumerOffsetResult, st.integers(-(2**63), 2**63 - 1)),
    st.builds(
        ErrorResponse,
        st.sampled_from(list(RequestCode)),
        st.sampled_from([c for c in ResponseCode if c != ResponseCode.SUCCESS]),
        _text,
        st.none() | _text,
    ),
)


def _replacement(draw: Callable[..., object], field: Field, original: bytes) -> bytes:
    """A new value for one field, of the same width."""
    if field.kind in ("text", "blob"):
        new = draw(st.binary(min_size=field.size, max_size=field.size))
        assert isinstance(new, bytes)
        return new
    bits = field.size * 8
    signed = field.kind != "uint"
    low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    old = int.from_bytes(original, "big", signed=signed)
    edges = [v for v in (0, 1, -1, low, high, old - 1, old + 1) if low <= v <= high]
    value = draw(st.sampled_from(edges) | st.integers(low, high))
    assert isinstance(value, int)
    return value.to_bytes(field.size, "big", signed=signed)


def _splice(data: bytes, field: Field, new: bytes) -> bytes:
    return data[: field.offset] + new + data[field.offset + field.size :]


# ------------------------------------------------------------ client protocol


def _decode_client(data: bytes, is_response: bool) -> tuple[Request | Response, int] | None:
    """(decoded value, requestId), or None if the frame is incomplete; ProtocolError passes."""
    decoder = FrameDecoder()
    decoder.feed(data)
    frame = decoder.next_frame()
    if frame is None:
        return None
    value = decode_response(frame) if is_response else decode_request(frame)
    assert decoder.buffered_bytes == len(data) - (12 + len(frame.body))
    return value, frame.request_id


@settings(max_examples=400, deadline=None)
@given(data=st.data(), value=st.one_of(requests, responses))
def test_one_changed_field_of_a_client_frame(data: st.DataObject, value: object) -> None:
    is_response = not isinstance(value, Request)
    frame = (
        encode_response(7, value)  # type: ignore[arg-type]
        if is_response
        else encode_request(7, value)  # type: ignore[arg-type]
    )
    fields, prop_count = walk_client_frame(frame)
    field = data.draw(st.sampled_from(fields), label="field")
    if field.name in ("code", "flags"):
        return  # another frame kind altogether: covered by the garbage fuzzers
    new = _replacement(data.draw, field, frame[field.offset : field.offset + field.size])
    mutated = _splice(frame, field, new)
    try:
        decoded = _decode_client(mutated, is_response)
    except ProtocolError:
        if field.kind == "blob":
            raise AssertionError(f"a body's content must never be refused ({field.name})") from None
        if field.kind == "text":
            try:
                new.decode()
            except UnicodeDecodeError:
                return  # invalid UTF-8: refusing it is right
            raise AssertionError(f"valid UTF-8 in {field.name} was refused") from None
        return
    if decoded is None:
        assert field.name == "length" or field.kind == "len"
        return
    value2, request_id = decoded
    again = (
        encode_response(request_id, value2)  # type: ignore[arg-type]
        if is_response
        else encode_request(request_id, value2)  # type: ignore[arg-type]
    )
    if field.name == "length":
        assert mutated.startswith(again)  # a shorter self-consistent frame, rest left over
        return
    _, new_prop_count = walk_client_frame(again)
    if new_prop_count == prop_count:  # (equal names collapse in a dict: not canonical)
        assert again == mutated, f"{field.name}: decoded {value2!r} re-encodes differently"


# ------------------------------------------------------------------ HA codec


_entries = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 10**6)), max_size=4).map(
    lambda pairs: tuple(
        WireEpochEntry(
            epoch=sum(p[0] for p in pairs[: i + 1]) + i,
            start_offset=sum(p[1] for p in pairs[: i + 1]),
        )
        for i in range(len(pairs))
    )
)
_master_frames = st.one_of(
    _entries.flatmap(
        lambda entries: st.integers(entries[-1].start_offset if entries else 0, 2**62).map(
            lambda top: MasterHandshake(top, entries[-1].epoch if entries else 0, entries)
        )
    ),
    st.tuples(st.integers(0, 2**40), st.integers(0, 2**31 - 1), st.integers(0, 2**40)).flatmap(
        lambda t: st.builds(
            Transfer,
            offset=st.just(t[0]),
            epoch=st.just(t[1]),
            epoch_start_offset=st.integers(0, t[0]),
            confirm_offset=st.just(t[2]),
            body=st.binary(max_size=48),
        )
    ),
)
_slave_frames = st.one_of(
    st.builds(SlaveHandshake, _n63, st.booleans(), st.booleans()),
    st.builds(SlaveAck, _n63),
)


def walk_ha_frame(frame: object, data: bytes) -> list[Field]:
    w = _Walk(data)
    w.num("state", 4)
    if isinstance(frame, SlaveHandshake):
        w.num("isSyncFromLastFile", 2)
        w.num("isAsyncLearner", 2)
        w.num("slaveBrokerId", 8)
    elif isinstance(frame, SlaveAck):
        w.num("maxOffset", 8)
    elif isinstance(frame, MasterHandshake):
        size = w.num("bodySize", 4, "len")
        w.num("maxPhyOffset", 8)
        w.num("lastEpoch", 4)
        for i in range(size // 12):
            w.num(f"e{i}.epoch", 4)
            w.num(f"e{i}.startOffset", 8)
    else:
        size = w.num("bodySize", 4, "len")
        for name, width in (("offset", 8), ("epoch", 4), ("epochStartOffset", 8),
                            ("confirmOffset", 8)):  # fmt: skip
            w.num(name, width)
        w.raw("body", size, "blob")
    assert w.pos == len(data)
    return w.fields


def _ha_valid(frame: object, name: str, v: int) -> bool:
    """The documented value rules (ha/codec.py "Invariants"), as an oracle."""
    if name in ("isSyncFromLastFile", "isAsyncLearner"):
        return v in (0, 1)
    if isinstance(frame, Transfer):
        if name == "offset":
            return v >= frame.epoch_start_offset and v + len(frame.body) <= 2**63 - 1
        if name == "epochStartOffset":
            return 0 <= v <= frame.offset
    if isinstance(frame, MasterHandshake):
        if v < 0:
            return False
        top, last = frame.max_phy_offset, frame.last_epoch
        entries = [(e.epoch, e.start_offset) for e in frame.epoch_entries]
        if name == "maxPhyOffset":
            top = v
        elif name == "lastEpoch":
            last = v
        else:
            index, what = name[1:].split(".")
            epoch, start = entries[int(index)]
            entries[int(index)] = (v, start) if what == "epoch" else (epoch, v)
        return _handshake_consistent(top, last, entries)
    return v >= 0


def _handshake_consistent(top: int, last: int, entries: list[tuple[int, int]]) -> bool:
    """Epochs strictly ascend, start offsets do not descend, the last entry
    starts within maxPhyOffset and is lastEpoch (any lastEpoch with no entries)."""
    for (epoch_a, start_a), (epoch_b, start_b) in itertools.pairwise(entries):
        if epoch_b <= epoch_a or start_b < start_a:
            return False
    return not entries or (entries[-1][1] <= top and entries[-1][0] == last)


def _ha_decode(frame: object, data: bytes) -> object:
    decoder = (
        SlaveFrameDecoder()
        if isinstance(frame, SlaveHandshake | SlaveAck)
        else (MasterFrameDecoder())
    )
    decoder.receive_data(data)
    return decoder.next_event()


@settings(max_examples=400, deadline=None)
@given(data=st.data(), frame=st.one_of(_master_frames, _slave_frames))
def test_one_changed_field_of_an_ha_frame(data: st.DataObject, frame: object) -> None:
    encoded = frame.encode()  # type: ignore[attr-defined]
    fields = walk_ha_frame(frame, encoded)
    field = data.draw(st.sampled_from(fields), label="field")
    if field.name == "state":
        return  # another frame kind: covered by the garbage fuzzers in test_ha_codec
    new = _replacement(data.draw, field, encoded[field.offset : field.offset + field.size])
    mutated = _splice(encoded, field, new)
    try:
        decoded = _ha_decode(frame, mutated)
    except HAProtocolError:
        decoded = None
    if field.kind == "len":
        if isinstance(decoded, NeedData) or decoded is None:
            return
        assert mutated.startswith(decoded.encode())  # type: ignore[attr-defined]
        return
    if field.kind == "blob":
        assert decoded is not None and decoded.encode() == mutated  # type: ignore[attr-defined]
        return
    value = int.from_bytes(new, "big", signed=True)
    valid = _ha_valid(frame, field.name, value)
    assert (decoded is not None) == valid, (field.name, value, decoded)
    if decoded is not None:
        assert decoded.encode() == mutated  # type: ignore[attr-defined]
