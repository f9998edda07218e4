"""HA codec (DESIGN.md §3.2; seed controller-mode-design, protocol section).

What: every frame of both directions round-trips through its decoder fed
whole, byte by byte, and followed by trailing bytes (STYLE §2, h11
test_io.py); the exact byte layouts match the DESIGN; bad headers and values
fail with HAProtocolError naming the field; hypothesis feeds random bytes in
random chunks and accepts only frames or HAProtocolError.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_broker.ha.codec import (
    ACK_SIZE,
    EPOCH_ENTRY_SIZE,
    MASTER_HANDSHAKE_HEADER_SIZE,
    NEED_DATA,
    SLAVE_HANDSHAKE_SIZE,
    TRANSFER_HEADER_SIZE,
    HAConnectionState,
    HAProtocolError,
    MasterFrame,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrame,
    SlaveFrameDecoder,
    SlaveHandshake,
    Transfer,
    WireEpochEntry,
    encode_transfer_header,
)

SLAVE_FRAMES: list[SlaveFrame] = [
    SlaveHandshake(slave_broker_id=2),
    SlaveHandshake(slave_broker_id=2**63 - 1, is_sync_from_last_file=True, is_async_learner=True),
    SlaveAck(max_offset=0),
    SlaveAck(max_offset=123_456_789_012),
]

MASTER_FRAMES: list[MasterFrame] = [
    MasterHandshake(max_phy_offset=0, last_epoch=0, epoch_entries=()),
    MasterHandshake(
        max_phy_offset=5000,
        last_epoch=3,
        epoch_entries=(
            WireEpochEntry(1, 0),
            WireEpochEntry(2, 1200),
            WireEpochEntry(3, 1200),
        ),
    ),
    Transfer(offset=0, epoch=1, epoch_start_offset=0, confirm_offset=0),
    Transfer(offset=4096, epoch=7, epoch_start_offset=1024, confirm_offset=2048, body=b"x" * 333),
]


def _drain_slave(decoder: SlaveFrameDecoder) -> list[SlaveFrame]:
    out: list[SlaveFrame] = []
    while (event := decoder.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def _drain_master(decoder: MasterFrameDecoder) -> list[MasterFrame]:
    out: list[MasterFrame] = []
    while (event := decoder.next_event()) is not NEED_DATA:
        out.append(event)
    return out


# ---------------------------------------------------------------- exact layouts (DESIGN §3.2)


def test_slave_handshake_layout_is_16_bytes_state_flags_broker_id() -> None:
    """DESIGN §3.2: int state, short isSyncFromLastFile, short isAsyncLearner, long id."""
    data = SlaveHandshake(slave_broker_id=9, is_async_learner=True).encode()
    assert len(data) == SLAVE_HANDSHAKE_SIZE == 16
    assert data == struct.pack(">ihhq", 1, 0, 1, 9)


def test_ack_layout_is_state_and_max_offset() -> None:
    """DESIGN §3.2 / seed: ack = current state(4) + maxOffset(8), state TRANSFER."""
    data = SlaveAck(max_offset=77).encode()
    assert len(data) == ACK_SIZE == 12
    assert data == struct.pack(">iq", 2, 77)


def test_master_handshake_layout() -> None:
    """DESIGN §3.2: int state, int bodySize, long maxPhyOffset, int lastEpoch + N x (int, long)."""
    frame = MasterHandshake(
        max_phy_offset=900,
        last_epoch=4,
        epoch_entries=(WireEpochEntry(2, 0), WireEpochEntry(4, 500)),
    )
    data = frame.encode()
    assert MASTER_HANDSHAKE_HEADER_SIZE == 20 and EPOCH_ENTRY_SIZE == 12
    assert data == struct.pack(">iiqi", 1, 24, 900, 4) + struct.pack(">iqiq", 2, 0, 4, 500)


def test_transfer_layout() -> None:
    """DESIGN §3.2: int state, int bodySize, long offset, int epoch, long epochStart, long confirm."""
    frame = Transfer(offset=10, epoch=3, epoch_start_offset=5, confirm_offset=8, body=b"abc")
    assert TRANSFER_HEADER_SIZE == 36
    assert frame.encode() == struct.pack(">iiqiqq", 2, 3, 10, 3, 5, 8) + b"abc"
    header = encode_transfer_header(
        offset=10, epoch=3, epoch_start_offset=5, confirm_offset=8, body_size=3
    )
    assert header == frame.encode()[:36]


def test_state_ordinals_are_rocketmq_haconnectionstate() -> None:
    """Seed: state fields carry HAConnectionState; RocketMQ's enum order is kept."""
    assert [s.name for s in HAConnectionState] == [
        "READY",
        "HANDSHAKE",
        "TRANSFER",
        "SUSPEND",
        "SHUTDOWN",
    ]
    assert [int(s) for s in HAConnectionState] == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------- whole, byte by byte, trailing


@pytest.mark.parametrize("frame", SLAVE_FRAMES, ids=repr)
def test_slave_frame_whole(frame: SlaveFrame) -> None:
    decoder = SlaveFrameDecoder()
    decoder.receive_data(frame.encode())
    assert _drain_slave(decoder) == [frame]
    assert decoder.trailing_data == b""


@pytest.mark.parametrize("frame", SLAVE_FRAMES, ids=repr)
def test_slave_frame_byte_by_byte(frame: SlaveFrame) -> None:
    decoder = SlaveFrameDecoder()
    data = frame.encode()
    events: list[SlaveFrame] = []
    for i in range(len(data)):
        decoder.receive_data(data[i : i + 1])
        events.extend(_drain_slave(decoder))
        if i < len(data) - 1:
            assert events == []
    assert events == [frame]


@pytest.mark.parametrize("frame", SLAVE_FRAMES, ids=repr)
def test_slave_frame_with_trailing_bytes(frame: SlaveFrame) -> None:
    decoder = SlaveFrameDecoder()
    trailing = SlaveAck(max_offset=5).encode()[:7]
    decoder.receive_data(frame.encode() + trailing)
    assert _drain_slave(decoder) == [frame]
    assert decoder.trailing_data == trailing


@pytest.mark.parametrize("frame", MASTER_FRAMES, ids=repr)
def test_master_frame_whole(frame: MasterFrame) -> None:
    decoder = MasterFrameDecoder()
    decoder.receive_data(frame.encode())
    assert _drain_master(decoder) == [frame]
    assert decoder.trailing_data == b""


@pytest.mark.parametrize("frame", MASTER_FRAMES, ids=repr)
def test_master_frame_byte_by_byte(frame: MasterFrame) -> None:
    decoder = MasterFrameDecoder()
    data = frame.encode()
    events: list[MasterFrame] = []
    for i in range(len(data)):
        decoder.receive_data(data[i : i + 1])
        events.extend(_drain_master(decoder))
        if i < len(data) - 1:
            assert events == []
    assert events == [frame]


@pytest.mark.parametrize("frame", MASTER_FRAMES, ids=repr)
def test_master_frame_with_trailing_bytes(frame: MasterFrame) -> None:
    decoder = MasterFrameDecoder()
    trailing = b"\x00\x00\x00\x02\x00"
    decoder.receive_data(frame.encode() + trailing)
    assert _drain_master(decoder) == [frame]
    assert decoder.trailing_data == trailing


def test_stream_of_all_master_frames_in_one_buffer() -> None:
    decoder = MasterFrameDecoder()
    decoder.receive_data(b"".join(f.encode() for f in MASTER_FRAMES))
    assert _drain_master(decoder) == MASTER_FRAMES


def test_stream_of_all_slave_frames_in_one_buffer() -> None:
    decoder = SlaveFrameDecoder()
    decoder.receive_data(b"".join(f.encode() for f in SLAVE_FRAMES))
    assert _drain_slave(decoder) == SLAVE_FRAMES


# ---------------------------------------------------------------- garbage -> HAProtocolError


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (struct.pack(">iq", 7, 0), "unknown state 7"),
        (struct.pack(">iq", 0, 0), "READY"),
        (struct.pack(">iq", 2, -1), "negative maxOffset"),
        (struct.pack(">ihhq", 1, 2, 0, 1), "isSyncFromLastFile=2"),
        (struct.pack(">ihhq", 1, 0, -1, 1), "isAsyncLearner=-1"),
        (struct.pack(">ihhq", 1, 0, 0, -5), "negative slaveBrokerId"),
    ],
)
def test_slave_decoder_rejects_garbage(data: bytes, needle: str) -> None:
    decoder = SlaveFrameDecoder()
    decoder.receive_data(data)
    with pytest.raises(HAProtocolError, match=needle):
        decoder.next_event()
    # Sticky: the stream lost framing for good.
    with pytest.raises(HAProtocolError, match=needle):
        decoder.next_event()
    with pytest.raises(HAProtocolError):
        decoder.receive_data(b"more")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (struct.pack(">iiqiqq", 3, 0, 0, 0, 0, 0), "SUSPEND"),
        (struct.pack(">iiqiqq", 2, -1, 0, 0, 0, 0), "negative bodySize"),
        (struct.pack(">iiqiqq", 2, 5000, 0, 0, 0, 0), "exceeds the limit of 4096"),
        (struct.pack(">iiqiqq", 2, 0, -1, 0, 0, 0), "negative offset"),
        (struct.pack(">iiqiqq", 2, 0, 0, -1, 0, 0), "negative epoch"),
        (struct.pack(">iiqiqq", 2, 0, 10, 1, 11, 0), "epochStartOffset 11"),
        (struct.pack(">iiqiqq", 2, 0, 10, 1, 0, -3), "negative confirmOffset"),
        (struct.pack(">iiqi", 1, 13, 0, 0), "not a multiple"),
        (struct.pack(">iiqi", 1, 0, -2, 0), "negative maxPhyOffset"),
        (struct.pack(">iiqi", 1, 0, 0, -2), "negative lastEpoch"),
        (struct.pack(">iiqi", 1, 24, 100, 1) + struct.pack(">iqiq", 2, 0, 1, 50), "not ascending"),
        (struct.pack(">iiqi", 1, 24, 100, 2) + struct.pack(">iqiq", 1, 50, 2, 10), "not ascending"),
        (struct.pack(">iiqi", 1, 12, 100, 3) + struct.pack(">iq", 2, 0), "lastEpoch 3 differs"),
        (struct.pack(">iiqi", 1, 12, 100, 2) + struct.pack(">iq", 2, 101), "beyond maxPhyOffset"),
        (struct.pack(">iiqi", 1, 12, 100, 2) + struct.pack(">iq", -2, 0), "negative field"),
    ],
)
def test_master_decoder_rejects_garbage(data: bytes, needle: str) -> None:
    decoder = MasterFrameDecoder(max_body_bytes=4096)
    decoder.receive_data(data)
    with pytest.raises(HAProtocolError, match=needle):
        decoder.next_event()
    with pytest.raises(HAProtocolError, match=needle):
        decoder.next_event()


def test_oversized_body_fails_on_the_header_before_the_body_arrives() -> None:
    """Bounded buffers (STYLE §6): a hostile length never makes us wait for/allocate it."""
    decoder = MasterFrameDecoder(max_body_bytes=1024)
    decoder.receive_data(struct.pack(">iiqiqq", 2, 2**31 - 1, 0, 0, 0, 0))
    with pytest.raises(HAProtocolError, match="exceeds the limit"):
        decoder.next_event()


def test_encoding_out_of_range_values_is_a_local_error() -> None:
    with pytest.raises(ValueError):
        SlaveAck(max_offset=-1)
    with pytest.raises(ValueError):
        Transfer(offset=5, epoch=1, epoch_start_offset=6, confirm_offset=0)
    with pytest.raises(ValueError):
        MasterHandshake(max_phy_offset=0, last_epoch=2, epoch_entries=(WireEpochEntry(1, 0),))


# ---------------------------------------------------------------- hypothesis


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=400)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_fuzz_master_decoder_yields_frames_or_protocol_error(data: bytes, cuts: list[int]) -> None:
    """STYLE §2: garbage yields a valid frame or our own protocol error, never a crash."""
    decoder = MasterFrameDecoder(max_body_bytes=256)
    try:
        for chunk in _chunks(data, cuts):
            decoder.receive_data(chunk)
            for event in _drain_master(decoder):
                assert isinstance(event, MasterHandshake | Transfer)
                # A decoded frame re-encodes to the bytes it came from.
                assert event.encode() in data
    except HAProtocolError:
        pass


@settings(max_examples=400)
@given(data=st.binary(max_size=120), cuts=st.lists(st.integers(min_value=0), max_size=8))
def test_fuzz_slave_decoder_yields_frames_or_protocol_error(data: bytes, cuts: list[int]) -> None:
    decoder = SlaveFrameDecoder()
    try:
        for chunk in _chunks(data, cuts):
            decoder.receive_data(chunk)
            for event in _drain_slave(decoder):
                assert isinstance(event, SlaveHandshake | SlaveAck)
                assert event.encode() in data
    except HAProtocolError:
        pass


_entries = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 10**6)), max_size=6).map(
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
        lambda entries: st.integers(
            min_value=entries[-1].start_offset if entries else 0, max_value=2**62
        ).map(
            lambda max_off: MasterHandshake(
                max_phy_offset=max_off,
                last_epoch=entries[-1].epoch if entries else 0,
                epoch_entries=entries,
            )
        )
    ),
    st.tuples(
        st.integers(0, 2**40),
        st.integers(0, 2**31 - 1),
        st.integers(0, 2**40),
        st.binary(max_size=64),
    ).map(
        lambda t: Transfer(
            offset=t[0], epoch=t[1], epoch_start_offset=t[0] // 2, confirm_offset=t[2], body=t[3]
        )
    ),
)

_slave_frames = st.one_of(
    st.builds(
        SlaveHandshake,
        slave_broker_id=st.integers(0, 2**63 - 1),
        is_sync_from_last_file=st.booleans(),
        is_async_learner=st.booleans(),
    ),
    st.builds(SlaveAck, max_offset=st.integers(0, 2**63 - 1)),
)


@given(frames=st.lists(_master_frames, max_size=6), cuts=st.lists(st.integers(0), max_size=10))
def test_roundtrip_master_frames_any_chunking(frames: list[MasterFrame], cuts: list[int]) -> None:
    data = b"".join(f.encode() for f in frames)
    decoder = MasterFrameDecoder()
    out: list[MasterFrame] = []
    for chunk in _chunks(data, cuts):
        decoder.receive_data(chunk)
        out.extend(_drain_master(decoder))
    assert out == frames
    assert decoder.buffered_bytes == 0


@given(frames=st.lists(_slave_frames, max_size=8), cuts=st.lists(st.integers(0), max_size=10))
def test_roundtrip_slave_frames_any_chunking(frames: list[SlaveFrame], cuts: list[int]) -> None:
    data = b"".join(f.encode() for f in frames)
    decoder = SlaveFrameDecoder()
    out: list[SlaveFrame] = []
    for chunk in _chunks(data, cuts):
        decoder.receive_data(chunk)
        out.extend(_drain_slave(decoder))
    assert out == frames


@settings(max_examples=400)
@given(
    frames=st.lists(_master_frames, min_size=1, max_size=3),
    flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0), max_size=6),
)
def test_fuzz_mutated_master_frames(
    frames: list[MasterFrame], flips: list[tuple[int, int]], cuts: list[int]
) -> None:
    """Valid frames with a few bytes overwritten reach the deeper checks (sizes, epoch
    order, offsets) that random bytes rarely do: still frame-or-HAProtocolError only."""
    data = bytearray(b"".join(f.encode() for f in frames))
    for position, value in flips:
        data[position % len(data)] = value
    decoder = MasterFrameDecoder(max_body_bytes=1024)
    try:
        for chunk in _chunks(bytes(data), cuts):
            decoder.receive_data(chunk)
            for event in _drain_master(decoder):
                assert isinstance(event, MasterHandshake | Transfer)
    except HAProtocolError:
        pass


@settings(max_examples=300)
@given(
    frames=st.lists(_slave_frames, min_size=1, max_size=3),
    flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_fuzz_mutated_slave_frames(frames: list[SlaveFrame], flips: list[tuple[int, int]]) -> None:
    data = bytearray(b"".join(f.encode() for f in frames))
    for position, value in flips:
        data[position % len(data)] = value
    decoder = SlaveFrameDecoder()
    try:
        decoder.receive_data(bytes(data))
        for event in _drain_slave(decoder):
            assert isinstance(event, SlaveHandshake | SlaveAck)
    except HAProtocolError:
        pass
