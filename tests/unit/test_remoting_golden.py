"""The remoting codec against frames a stock RocketMQ 5.3.1 Java client sent (DESIGN.md §12).

tests/fixtures/rocketmq/ holds one frame per request kind in each serialization, recorded by
tools/rocketmq/record_golden.py, and manifest.json holds Java's own RemotingCommand.decode
of each. Here, without Java:
- every frame decodes to exactly what Java decoded (code, language, version, opaque, flag,
  remark, every extField, body);
- re-encoding the decoded command gives the very bytes the client sent, in both
  serializations (fastjson's member order and escapes, RocketMQSerializable's layout,
  including the duplicated pairs of a signed FastCodesHeader request);
- the frames mean what the client was asked to send (topic, tags, keys, properties, flags);
- the stream decoder gives the same commands whether the bytes come whole, one at a time,
  or in uneven chunks, and keeps a trailing partial frame buffered.
"""

from __future__ import annotations

import itertools
import json

import pytest

from brokergroup_remoting import (
    FLAG_ONEWAY,
    FrameDecoder,
    RequestCode,
    SerializeType,
    decode,
    encode,
    response_to,
)
from tests.rocketmq_golden import frame_bytes, java_view, manifest

FRAMES = manifest()["frames"]
NAMES = [frame["file"] for frame in FRAMES]


def test_manifest_names_the_stock_client_and_every_kind_in_both_serializations() -> None:
    assert manifest()["writtenBy"].startswith("org.apache.rocketmq:rocketmq-client:5.3.1 ")
    kinds = ["route", "send", "batch", "oneway", "heartbeat", "pull", "signed-route", "signed-send"]
    assert [f"{t}-{k}.bin" for t in ("json", "rocketmq") for k in kinds] == NAMES


@pytest.mark.parametrize("frame", FRAMES, ids=NAMES)
def test_golden_frame_decodes_as_java_decodes_it(frame: dict[str, object]) -> None:
    cmd = decode(frame_bytes(str(frame["file"])))
    expected = dict(frame["java"])  # type: ignore[call-overload]
    del expected["file"]
    assert java_view(cmd) == expected


@pytest.mark.parametrize("name", NAMES)
def test_golden_frame_reencodes_to_the_same_bytes(name: str) -> None:
    raw = frame_bytes(name)
    assert encode(decode(raw)) == raw


def _properties(text: str) -> dict[str, str]:
    pairs = [item.split("\u0001", 1) for item in text.split("\u0002") if item]
    return {name: value for name, value in pairs}


@pytest.mark.parametrize("serialization", ["json", "rocketmq"])
def test_send_frame_carries_what_the_producer_sent(serialization: str) -> None:
    cmd = decode(frame_bytes(f"{serialization}-send.bin"))
    fields = cmd.fields()
    assert (cmd.code, cmd.flag, cmd.is_response, cmd.is_oneway) == (
        RequestCode.SEND_MESSAGE_V2,
        0,
        False,
        False,
    )
    assert cmd.serialize_type is SerializeType[serialization.upper()]
    # SendMessageRequestHeaderV2: a producerGroup, b topic, c defaultTopic, d queue count, e queueId.
    assert (fields["a"], fields["b"], fields["c"], fields["d"], fields["e"]) == (
        "golden_producer",
        "GoldenTopic",
        "TBW102",
        "4",
        "0",
    )
    properties = _properties(fields["i"])
    assert properties["TAGS"] == "TagA"
    assert properties["KEYS"] == "KEY-1 KEY-2"
    assert properties["color"] == "blue"
    assert properties["note"] == 'tab\there "quoted" back\\slash é ✓'
    assert cmd.body == b"hello, golden frame"


@pytest.mark.parametrize("serialization", ["json", "rocketmq"])
def test_oneway_and_batch_frames(serialization: str) -> None:
    oneway = decode(frame_bytes(f"{serialization}-oneway.bin"))
    assert oneway.flag == FLAG_ONEWAY and oneway.is_oneway and not oneway.is_response
    assert oneway.body == b"oneway body"
    batch = decode(frame_bytes(f"{serialization}-batch.bin"))
    assert (
        batch.code == RequestCode.SEND_BATCH_MESSAGE and batch.fields()["m"] == "true"
    )  # m: batch
    # The body is MessageDecoder.encodeMessages: each message's body and properties inside.
    for i in range(3):
        assert f"batch body {i}".encode() in batch.body and f"BATCH-{i}".encode() in batch.body


@pytest.mark.parametrize("serialization", ["json", "rocketmq"])
def test_pull_and_route_and_heartbeat_frames(serialization: str) -> None:
    pull = decode(frame_bytes(f"{serialization}-pull.bin"))
    assert pull.code == RequestCode.PULL_MESSAGE
    assert pull.fields() == {
        "bname": "golden-broker",
        "commitOffset": "0",
        "consumerGroup": "golden_consumer",
        "expressionType": "TAG",
        "maxMsgNums": "32",
        "queueId": "0",
        "queueOffset": "5",
        "subVersion": "1700000000000",
        "subscription": "TagA || TagB",
        "suspendTimeoutMillis": "15000",
        "sysFlag": "2",
        "topic": "GoldenTopic",
    }
    route = decode(frame_bytes(f"{serialization}-route.bin"))
    assert (route.code, route.fields(), route.body) == (
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        {"topic": "GoldenTopic"},
        b"",
    )
    heartbeat = decode(frame_bytes(f"{serialization}-heartbeat.bin"))
    assert heartbeat.code == RequestCode.HEART_BEAT and heartbeat.fields() == {}
    data = json.loads(heartbeat.body)  # HeartbeatData; its sets come in HashSet order
    assert sorted(p["groupName"] for p in data["producerDataSet"]) == [
        "CLIENT_INNER_PRODUCER",
        "golden_producer",
    ]
    assert data["clientID"].endswith("@golden_producer") and data["consumerDataSet"] == []
    # JSON tells an empty extFields map from none at all; the ROCKETMQ layout cannot.
    assert heartbeat.ext_fields == (() if serialization == "json" else None)


def test_signed_rocketmq_send_repeats_fast_header_pairs_as_java_writes_them() -> None:
    # AclClientRPCHook calls makeCustomHeaderToNet (filling extFields), then the FastCodesHeader
    # writes its own fields first: the header carries 13 header pairs twice.
    cmd = decode(frame_bytes("rocketmq-signed-send.bin"))
    keys = [key for key, _ in cmd.ext_fields or ()]
    assert len(keys) == 28 and len(set(keys)) == 15
    assert {"AccessKey", "Signature"} <= set(keys)


@pytest.mark.parametrize("serialization", ["json", "rocketmq"])
def test_response_goes_back_in_the_request_serialization(serialization: str) -> None:
    req = decode(frame_bytes(f"{serialization}-send.bin"))
    answer = decode(
        encode(response_to(req, fields={"msgId": "X", "queueId": "0", "queueOffset": "7"}))
    )
    assert (answer.serialize_type, answer.opaque, answer.is_response) == (
        req.serialize_type,
        req.opaque,
        True,
    )
    assert answer.fields() == {"msgId": "X", "queueId": "0", "queueOffset": "7"}


def _stream() -> bytes:
    return b"".join(frame_bytes(name) for name in NAMES)


def _decoded_in_chunks(sizes: itertools.cycle[int]) -> list[object]:
    data = _stream()
    decoder = FrameDecoder()
    out: list[object] = []
    at = 0
    while at < len(data):
        step = next(sizes)
        decoder.feed(data[at : at + step])
        at += step
        out.extend(decoder.commands())
    assert decoder.at_frame_boundary
    return out


def test_stream_decoder_whole_byte_by_byte_and_uneven_chunks_agree() -> None:
    expected = [decode(frame_bytes(name)) for name in NAMES]
    assert _decoded_in_chunks(itertools.cycle([len(_stream())])) == expected
    assert _decoded_in_chunks(itertools.cycle([1])) == expected
    assert _decoded_in_chunks(itertools.cycle([7, 1, 300, 2, 4096])) == expected


def test_stream_decoder_keeps_a_partial_trailing_frame() -> None:
    decoder = FrameDecoder()
    first, second = frame_bytes("json-send.bin"), frame_bytes("rocketmq-pull.bin")
    decoder.feed(first + second[:-1])
    assert list(decoder.commands()) == [decode(first)]
    assert decoder.buffered_bytes == len(second) - 1 and not decoder.at_frame_boundary
    decoder.feed(second[-1:])
    assert list(decoder.commands()) == [decode(second)]
    assert decoder.at_frame_boundary
