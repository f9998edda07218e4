"""The requests a forwarded connection still waits on, so the forwarder can answer them when
their master goes away (pure: no sockets, no clocks).

Why: the stock client (RocketMQ 5.3.1 NettyRemotingClient) fails a closed channel's
pending requests only when its I/O thread's `channelInactive` still finds the channel in
its table. Another thread that asks for the address in between (a pull sent, an offset
persisted) finds the channel inactive, drops it from the table and connects anew
(`createChannelAsync`); `channelInactive` then skips the close, so no `failFast`, and each
pull held on the dead master waits out its 30 s timeout (consumerTimeoutMillisWhenSuspend)
plus the 3 s pull back-off. A response written before the close is read before the EOF,
on the same socket, whatever the client's threads do.

`FrameScanner` reads one direction's frames (``int length | int (serializeType << 24 |
headerLength) | header | body``, brokergroup_remoting.frame) header by header: it keeps
at most one prefix and header, and counts a body off without keeping it. Of a header it
reads only opaque and flag (a JSON object's members; a ROCKETMQ header's fixed fields,
header_binary.py), not the extFields: the forwarder carries every request of the group. `InFlight` pairs
the client's requests with the master's responses by opaque. A stream it cannot read stops
the tracking (`broken`), never the bytes: the broker judges every frame.
"""

from __future__ import annotations

import json
import struct
from typing import NamedTuple

from brokergroup_remoting import RemotingCommand, ResponseCode
from brokergroup_remoting.codes import SerializeType
from brokergroup_remoting.command import DEFAULT_LIMITS, FLAG_ONEWAY, FLAG_RESPONSE, response_to
from brokergroup_remoting.frame import PREFIX_BYTES, encode

_PREFIX = struct.Struct(">ii")
#: A ROCKETMQ header's fixed fields: code, language, version, opaque, flag.
_BINARY_FIXED = struct.Struct(">hbhii")

#: The remark of an answer the forwarder writes for a request its master left unanswered.
MASTER_GONE = "the master went away before answering (the stable master address's forwarder)"


class Head(NamedTuple):
    """What the forwarder reads of a frame's header."""

    opaque: int
    flag: int
    serialize_type: SerializeType

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)


class FrameScanner:
    """The headers of one direction's frames, in order; bodies are skipped, not kept."""

    def __init__(self) -> None:
        self._head = bytearray()  # the current frame's prefix, then its header
        self._header_length = -1  # known once the prefix is read
        self._serialize_type = SerializeType.JSON
        self._body_length = 0  # the current frame's, known with its prefix
        self._body_left = 0  # body bytes of the current frame still to come
        self.broken = False

    @property
    def at_boundary(self) -> bool:
        """True between frames: bytes written after these start a frame of their own."""
        return not self._head and self._body_left == 0

    def feed(self, data: bytes) -> list[Head]:
        """The heads of the frames whose header ends in `data`."""
        out: list[Head] = []
        view, at = memoryview(data), 0
        while at < len(view) and not self.broken:
            if self._body_left:
                step = min(self._body_left, len(view) - at)
                self._body_left -= step
                at += step
                continue
            want = PREFIX_BYTES if self._header_length < 0 else PREFIX_BYTES + self._header_length
            step = min(want - len(self._head), len(view) - at)
            self._head += view[at : at + step]
            at += step
            if len(self._head) < want:
                break
            try:
                if self._header_length < 0:
                    self._read_prefix()
                else:
                    out.append(self._read_header())
            except (ValueError, TypeError, struct.error):  # JSONDecodeError is a ValueError
                self.broken = True
        return out

    def _read_prefix(self) -> None:
        length, mark = _PREFIX.unpack_from(self._head)
        self._serialize_type = SerializeType((mark >> 24) & 0xFF)
        self._header_length = mark & 0xFFFFFF
        body = length - 4 - self._header_length
        if body < 0 or not 0 < self._header_length <= DEFAULT_LIMITS.max_header_bytes:
            raise ValueError(f"frame length {length}, header length {self._header_length}")
        self._body_length = body

    def _read_header(self) -> Head:
        header = bytes(self._head[PREFIX_BYTES:])
        self._head.clear()
        self._header_length = -1
        self._body_left = self._body_length
        if self._serialize_type is SerializeType.ROCKETMQ:
            _, _, _, opaque, flag = _BINARY_FIXED.unpack_from(header)
            return Head(opaque, flag, SerializeType.ROCKETMQ)
        obj = json.loads(header)
        if not isinstance(obj, dict):
            raise TypeError(f"a JSON header that is a {type(obj).__name__}")
        opaque, flag = obj.get("opaque", 0), obj.get("flag", 0)  # RemotingCommand's defaults
        if type(opaque) is not int or type(flag) is not int:
            raise TypeError(f"opaque {opaque!r}, flag {flag!r}")
        return Head(opaque, flag, SerializeType.JSON)


class InFlight:
    """One forwarded connection: the client's requests its master has not answered yet."""

    def __init__(self) -> None:
        self._requests = FrameScanner()  # client → master
        self._responses = FrameScanner()  # master → client
        self._waiting: dict[int, Head] = {}

    @property
    def waiting(self) -> list[Head]:
        """Unanswered requests, in the order the client sent them."""
        return list(self._waiting.values())

    def from_client(self, data: bytes) -> None:
        for head in self._requests.feed(data):
            if not head.is_response and not head.is_oneway:
                self._waiting[head.opaque] = head

    def from_master(self, data: bytes) -> None:
        for head in self._responses.feed(data):
            if head.is_response:
                self._waiting.pop(head.opaque, None)

    def answers(self) -> bytes:
        """SYSTEM_ERROR for every unanswered request, to write before closing the client;
        nothing when the master's last frame to the client is cut (a frame after it would
        be read as its rest) or a direction could not be read."""
        if self._requests.broken or self._responses.broken or not self._responses.at_boundary:
            return b""
        return b"".join(
            encode(response_to(_request(req), ResponseCode.SYSTEM_ERROR, MASTER_GONE))
            for req in self._waiting.values()
        )


def _request(head: Head) -> RemotingCommand:
    """What `response_to` reads of a request: its opaque and serialize type."""
    return RemotingCommand(code=0, opaque=head.opaque, serialize_type=head.serialize_type)
