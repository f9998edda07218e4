"""The batch send path in one pass (`wire.decode_batch_send` + `EncodedProperties` through
`encode_run`) against the reference it replaces (`wire.decode_batch_body`, the
`{**request, **message}` merge, `SendBatch.store_properties` and `encode_run` over dicts):
for structured batches, valid and malformed, both give the same records byte for byte, the
same tags codes, the same property maps, and the same refusal (kind and text).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.protocol.messages import SendBatch
from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.sends import _MIN_BATCH_ENTRY, _SCHEDULE_PROPERTIES
from brokergroup_broker.schedule import rules as schedule_rules
from brokergroup_broker.store.errors import MessageInvalid
from brokergroup_broker.store.message_encode import encode_run
from brokergroup_remoting.fields import BadField

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "rocketmq"

Outcome = tuple[Any, ...]


def _store(batch: SendBatch) -> Outcome:
    """What the store writes for `batch` (as `ProducePath.start_send_batch` calls it)."""
    try:
        run = encode_run(
            batch.topic,
            0,
            batch.bodies,
            batch.store_properties(),
            flag=batch.flag,
            born_timestamp_ms=1_700_000_000_000,
            born_host=("10.0.0.7", 40001),
            start_offset=4096,
            segment_bytes=1 << 30,
            store_host=("127.0.0.1", 10911),
            store_timestamp_ms=1_700_000_000_123,
            first_queue_offset=17,
            max_message_bytes=4 << 20,
        )
    except MessageInvalid as exc:
        return ("MessageInvalid", str(exc))
    except UnicodeEncodeError as exc:  # what the reference raises for a lone surrogate
        return ("UnicodeEncodeError", str(exc))
    return ("stored", run.data, run.tags_codes, run.sizes, run.physical_offsets)


def reference(body: bytes, request: Mapping[str, str], max_messages: int) -> Outcome:
    """The send path before the one-pass decoder (sends.py as it was)."""
    try:
        inner = wire.decode_batch_body(body, max_messages=max_messages)
    except BadField as exc:
        return ("BadField", str(exc))
    if any(m.flag != inner[0].flag for m in inner):
        return ("flag",)
    props = [{**request, **m.properties} for m in inner]
    if any(map(schedule_rules.is_scheduled, props)):
        return ("scheduled",)
    batch = SendBatch(
        "BatchTopic", 0, [m.body for m in inner], [(None, None, p) for p in props],
        flag=inner[0].flag,
    )  # fmt: skip
    return (*_store(batch), props)


def one_pass(body: bytes, request: Mapping[str, str], max_messages: int) -> Outcome:
    """The send path now (sends.py's calls, in its order)."""
    try:
        inner = wire.decode_batch_send(
            body, request, max_messages=max_messages, reference_names=_SCHEDULE_PROPERTIES
        )
    except BadField as exc:
        return ("BadField", str(exc))
    if not inner.one_flag:
        return ("flag",)
    if inner.may_name_reference and any(map(schedule_rules.is_scheduled, inner.properties)):
        return ("scheduled",)
    batch = SendBatch(
        "BatchTopic", 0, inner.bodies, [(None, None, p) for p in inner.properties],
        flag=inner.flag,
    )  # fmt: skip
    # The Mapping view (what redirects, half messages and answers read) is the merged dict.
    return (*_store(batch), [dict(p) for p in inner.properties])


def entry(flag: int, msg_body: bytes, props: bytes) -> bytes:
    """One message as MessageDecoder.encodeMessages lays it out."""
    total = 20 + len(msg_body) + 2 + len(props)
    return (
        struct.pack(">iiiii", total, 0, 0, flag, len(msg_body))
        + msg_body
        + (struct.pack(">h", len(props)) + props)
    )


NAMES = st.one_of(
    st.sampled_from(
        ["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "index", "é✓"] * 4 + ["DELAY", "TIMER_DELAY_MS", ""]
    ),
    st.text(min_size=0, max_size=6),
)
VALUES = st.one_of(
    st.sampled_from(["", "true", "TagA", "K1 K2", "0", "3", 'ü\tq"\\'] * 3 + ["a\x01b"]),
    st.text(max_size=8),
)


@st.composite
def message_properties(draw: st.DrawFn) -> bytes:
    """A message's properties bytes: mostly the canonical layout (maybe repeated names),
    sometimes mutated text (a separator dropped or added, text after the last pair), any
    text, or bytes that are not UTF-8."""
    kind = draw(st.sampled_from(["canonical"] * 12 + ["mutated", "text", "bytes", "long"]))
    if kind == "bytes":
        return draw(st.binary(max_size=30))
    if kind == "text":
        return draw(st.text(alphabet=st.sampled_from("ab\x01\x02é"), max_size=20)).encode()
    if kind == "long":
        return b"KEYS\x01" + b"k" * draw(st.integers(32700, 32750)) + b"\x02"
    pairs = draw(st.lists(st.tuples(NAMES, VALUES), max_size=6))
    text = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
    if kind == "mutated" and text:
        at = draw(st.integers(0, len(text) - 1))
        text = text[:at] + draw(st.sampled_from(["", "\x01", "\x02", "x"])) + text[at + 1 :]
    data = text.encode("utf-8", "surrogatepass")
    return data[:32767]


@st.composite
def request_properties(draw: st.DrawFn) -> dict[str, str]:
    """The request header's properties as `wire.decode_properties` gives them (overlapping
    the messages' names), sometimes with a lone surrogate or a huge value."""
    pairs = draw(st.lists(st.tuples(NAMES, VALUES), max_size=4))
    props = wire.decode_properties("".join(f"{k}\x01{v}\x02" for k, v in pairs))
    extra = draw(st.sampled_from([None] * 8 + ["surrogate", "huge"]))
    if extra == "surrogate":
        props["S"] = "\ud800"
    elif extra == "huge":
        props["HUGE"] = "h" * 32700
    return props


@st.composite
def batch_bodies(draw: st.DrawFn) -> bytes:
    """A batch body, sometimes cut, corrupted in a length field, or given mixed flags."""
    count = draw(st.integers(0, 6))
    flag = draw(st.integers(-2, 2))
    parts = []
    for _ in range(count):
        msg_flag = flag if draw(st.integers(0, 29)) else draw(st.integers(-2, 2))
        parts.append(entry(msg_flag, draw(st.binary(max_size=40)), draw(message_properties())))
    body = b"".join(parts)
    damage = draw(st.sampled_from([None] * 9 + ["cut", "length", "trail"]))
    if damage == "cut" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif damage == "length" and parts:
        i = draw(st.integers(0, len(parts) - 1))
        start = sum(map(len, parts[:i]))
        # totalSize, bodyLength (4 bytes) or propertiesLength (2 bytes, after the body)
        field = draw(st.sampled_from(["total", "body", "props"]))
        body_len = struct.unpack_from(">i", parts[i], 16)[0]
        at = start + {"total": 0, "body": 16, "props": 20 + body_len}[field]
        width = 2 if field == "props" else 4
        value = draw(st.integers(-(1 << (8 * width - 1)), (1 << (8 * width - 1)) - 1))
        body = body[:at] + value.to_bytes(width, "big", signed=True) + body[at + width :]
    elif damage == "trail":
        body += draw(st.binary(min_size=1, max_size=25))
    return body


@settings(max_examples=3000, deadline=None)
@given(batch_bodies(), request_properties(), st.one_of(st.none(), st.integers(1, 6)))
def test_one_pass_equals_reference(
    body: bytes, request: dict[str, str], max_messages: int | None
) -> None:
    limit = max(1, len(body) // _MIN_BATCH_ENTRY) if max_messages is None else max_messages
    assert one_pass(body, request, limit) == reference(body, request, limit)


def _golden_batch() -> tuple[bytes, dict[str, str]]:
    manifest = json.loads((GOLDEN / "manifest.json").read_text())
    frame = next(f for f in manifest["frames"] if f["file"] == "json-batch.bin")["java"]
    request = wire.decode_properties(frame["extFields"]["i"])
    return base64.b64decode(frame["body"]), request


def test_the_stock_clients_batch_goes_the_one_pass_path_and_equals_the_reference() -> None:
    body, request = _golden_batch()
    decoded = wire.decode_batch_send(
        body, request, max_messages=128, reference_names=_SCHEDULE_PROPERTIES
    )
    assert not decoded.may_name_reference  # the one pass, not the reference fallback
    assert one_pass(body, request, 128) == reference(body, request, 128)
    # Request properties first (UNIQ_KEY, WAIT: the message's values), then the message's.
    assert list(decoded.properties[0]) == ["UNIQ_KEY", "WAIT", "KEYS", "index", "TAGS"]


def test_encoded_properties_reach_the_store_as_they_are() -> None:
    """The one pass only saves CPU if `SendBatch.store_properties` hands the encoder the
    `EncodedProperties` themselves: a copy into a dict would give the same records (the
    tests above cannot tell) and re-serialize every message."""
    body, request = _golden_batch()
    decoded = wire.decode_batch_send(
        body, request, max_messages=128, reference_names=_SCHEDULE_PROPERTIES
    )
    batch = SendBatch(
        "BatchTopic", 0, decoded.bodies, [(None, None, p) for p in decoded.properties]
    )
    stored = batch.store_properties()
    assert stored is not None and len(stored) == len(decoded.properties) > 1
    assert all(s is p for s, p in zip(stored, decoded.properties, strict=True))
    assert {type(s).__name__ for s in stored} == {"EncodedProperties"}
    # A key or tags named beside the map still merge into a new map, as before.
    keyed = SendBatch("T", 0, [b"x"], [("k", "t", {"a": "1"})]).store_properties()
    assert keyed == [{"a": "1", "KEYS": "k", "TAGS": "t"}]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=50),
            st.dictionaries(st.text(min_size=1).filter(lambda n: "\x01" not in n and "\x02" not in n
                                                       and n not in _SCHEDULE_PROPERTIES),
                            st.text().filter(lambda v: "\x01" not in v and "\x02" not in v),
                            max_size=5),
        ),
        min_size=1,
        max_size=8,
    ),
    st.dictionaries(st.sampled_from(["UNIQ_KEY", "WAIT", "TAGS", "KEYS", "x"]), VALUES.filter(
        lambda v: "\x01" not in v and "\x02" not in v), max_size=3),
)  # fmt: skip
def test_ordinary_batches_take_the_one_pass_path(
    messages: list[tuple[bytes, dict[str, str]]], request: dict[str, str]
) -> None:
    """Any batch a client builds from property maps (no delay) is decoded in one pass; the
    property test above would pass vacuously if everything fell back to the reference."""
    body = b"".join(
        entry(0, b, "".join(f"{k}\x01{v}\x02" for k, v in p.items()).encode("utf-8", "surrogatepass"))
        for b, p in messages
    )  # fmt: skip
    if any("\ud800" <= c <= "\udfff" for _, p in messages for kv in p.items() for c in "".join(kv)):
        return  # not UTF-8: the reference refuses it
    decoded = wire.decode_batch_send(
        body, request, max_messages=64, reference_names=_SCHEDULE_PROPERTIES
    )
    merged_bytes = [len(wire.encode_properties({**request, **p}).encode()) for _, p in messages]
    if max(merged_bytes) <= 32767:
        assert not decoded.may_name_reference
    assert one_pass(body, request, 64) == reference(body, request, 64)
