"""Frames: ``int length | int (serializeType << 24 | headerLength) | header | body``.

Theory of operation (h11 style, no sockets, no clocks): `encode(cmd)` returns a whole frame,
ready for one write. `FrameDecoder.feed(bytes)` takes whatever the transport read;
`next_command()` returns one whole `RemotingCommand` or None while more bytes are needed.
`length` counts everything after itself (4 + header + body), as NettyEncoder writes it and
NettyDecoder (LengthFieldBasedFrameDecoder(16 MiB, 0, 4, 0, 4)) reads it: the frame bound
covers the length field too.

Every peer-chosen length is checked against `RemotingLimits` as soon as its bytes arrive —
the total and header lengths from the first 8 bytes, before the rest is buffered — so a
connection holds at most one frame's limit plus one read. A decoding error is final for
the stream (RocketMQ closes the channel on any decode error): the decoder keeps raising it.
The body is never parsed here; its meaning depends on the code.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from brokergroup_remoting.codes import SerializeType
from brokergroup_remoting.command import DEFAULT_LIMITS, RemotingCommand, RemotingLimits
from brokergroup_remoting.errors import FrameFault, LocalProtocolError, RemoteProtocolError
from brokergroup_remoting.header_binary import decode_binary_header, encode_binary_header
from brokergroup_remoting.header_json import decode_json_header, encode_json_header
from brokergroup_remoting.header_limits import check_limit

_PREFIX = struct.Struct(">ii")
#: Bytes before the header: total length and serialize type + header length.
PREFIX_BYTES = _PREFIX.size


def encode_header(cmd: RemotingCommand) -> bytes:
    """The serialized header alone, in the command's serialize type."""
    try:
        if cmd.serialize_type is SerializeType.ROCKETMQ:
            return encode_binary_header(cmd)
        return encode_json_header(cmd)
    except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 spelling
        raise LocalProtocolError(f"header text is not UTF-8 encodable: {exc.reason}") from exc


def encode(cmd: RemotingCommand) -> bytes:
    """One whole frame for `cmd` (what NettyEncoder writes)."""
    header = encode_header(cmd)
    if len(header) > 0xFFFFFF:
        raise LocalProtocolError(f"header of {len(header)} bytes over the 24-bit length field")
    length = 4 + len(header) + len(cmd.body)
    if length > 0x7FFFFFFF - 4:
        raise LocalProtocolError(f"frame of {length} bytes over a Java int")
    return b"".join(
        (_PREFIX.pack(length, (cmd.serialize_type << 24) | len(header)), header, cmd.body)
    )


class _Shape:
    """What the first 8 bytes of a frame promise (checked against the limits)."""

    __slots__ = ("body_length", "header_length", "serialize_type", "total_bytes")

    def __init__(self, prefix: bytes | bytearray, offset: int, limits: RemotingLimits) -> None:
        length, mark = _PREFIX.unpack_from(prefix, offset)
        if length < 4:
            raise RemoteProtocolError(FrameFault.FRAME_TOO_SHORT, "frame length", value=length)
        check_limit(
            FrameFault.FRAME_TOO_LONG,
            "frame bytes incl. length field",
            length + 4,
            limits.max_frame_bytes,
        )
        type_byte = (mark >> 24) & 0xFF
        try:
            self.serialize_type = SerializeType(type_byte)
        except ValueError:
            raise RemoteProtocolError(
                FrameFault.UNKNOWN_SERIALIZE_TYPE, "serialize type", value=type_byte
            ) from None
        self.header_length = mark & 0xFFFFFF
        check_limit(
            FrameFault.HEADER_TOO_LONG, "header bytes", self.header_length, limits.max_header_bytes
        )
        if self.header_length > length - 4:
            raise RemoteProtocolError(
                FrameFault.HEADER_BEYOND_FRAME,
                f"header length vs frame length {length}",
                value=self.header_length,
                limit=length - 4,
            )
        self.body_length = length - 4 - self.header_length
        check_limit(FrameFault.BODY_TOO_LONG, "body bytes", self.body_length, limits.max_body_bytes)
        self.total_bytes = 4 + length


def _command(
    shape: _Shape, data: bytes | bytearray, offset: int, limits: RemotingLimits
) -> RemotingCommand:
    header_at = offset + PREFIX_BYTES
    body_at = header_at + shape.header_length
    header = bytes(data[header_at:body_at])
    body = bytes(data[body_at : body_at + shape.body_length])
    if shape.serialize_type is SerializeType.ROCKETMQ:
        return decode_binary_header(header, body, limits)
    return decode_json_header(header, body, limits)


def decode(frame: bytes, limits: RemotingLimits = DEFAULT_LIMITS) -> RemotingCommand:
    """Exactly one whole frame (with its length field) to a command."""
    if len(frame) < PREFIX_BYTES:
        raise RemoteProtocolError(
            FrameFault.FRAME_TRUNCATED, "frame shorter than 8 bytes", value=len(frame)
        )
    shape = _Shape(frame, 0, limits)
    if len(frame) != shape.total_bytes:
        raise RemoteProtocolError(
            FrameFault.FRAME_TRAILING_BYTES
            if len(frame) > shape.total_bytes
            else FrameFault.FRAME_TRUNCATED,
            f"frame length says {shape.total_bytes} bytes",
            value=len(frame),
        )
    return _command(shape, frame, 0, limits)


class FrameDecoder:
    """Incremental decoder for one connection's byte stream (sans-I/O)."""

    def __init__(self, limits: RemotingLimits = DEFAULT_LIMITS) -> None:
        self._limits = limits
        self._buffer = bytearray()
        self._start = 0
        self._shape: _Shape | None = None
        self._failure: RemoteProtocolError | None = None

    @property
    def limits(self) -> RemotingLimits:
        return self._limits

    @limits.setter
    def limits(self, limits: RemotingLimits) -> None:
        """New bounds for the frames after the one being read (a connection that proved its
        key gets the full ones)."""
        self._limits = limits

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as a command."""
        return len(self._buffer) - self._start

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is buffered (an EOF here is a clean close)."""
        return self.buffered_bytes == 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Bytes the transport read, in order."""
        if self._start and self._start * 2 >= len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += data

    def next_command(self) -> RemotingCommand | None:
        """The next whole command, or None until more bytes are fed.

        Raises RemoteProtocolError when the stream breaks the protocol or a limit; every later
        call raises the same error (the connection must close).
        """
        if self._failure is not None:
            raise self._failure
        try:
            return self._next()
        except RemoteProtocolError as exc:
            self._failure = exc
            raise

    def commands(self) -> Iterator[RemotingCommand]:
        """Every whole command buffered so far."""
        while (cmd := self.next_command()) is not None:
            yield cmd

    def _next(self) -> RemotingCommand | None:
        if self._shape is None:
            if self.buffered_bytes < PREFIX_BYTES:
                return None
            self._shape = _Shape(self._buffer, self._start, self._limits)
        shape = self._shape
        if self.buffered_bytes < shape.total_bytes:
            return None
        cmd = _command(shape, self._buffer, self._start, self._limits)
        self._start += shape.total_bytes
        self._shape = None
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        return cmd
