"""The client protocol's field layout (docs/protocol.md), shared by the request codec
(`codec`) and the response codec (`response_codec`): frame constants, the errors, the
fixed-size formats and the readers and writers of strings, optional strings, properties and
byte runs. Sans-I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

#: Default bound on one frame: a 1,000-message batch of 4 MiB bodies would
#: not fit, a 1,000 × 1 KiB batch (1 MiB) fits 64 times. Both ends check it.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
#: Bytes of the frame header (length, requestId, code, flags).
HEADER_BYTES = 12
#: `flags` bit set on every response frame.
FLAG_RESPONSE = 0x0001
KNOWN_FLAGS = FLAG_RESPONSE
#: Longest string the `short` length prefix carries.
MAX_STRING_BYTES = 0x7FFF

HEADER = struct.Struct(">iihh")
LENGTH = struct.Struct(">i")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
I32_PAIR = struct.Struct(">ii")
I32_I64 = struct.Struct(">iq")
I64_PAIR = struct.Struct(">qq")
I32_I64_I32 = struct.Struct(">iqi")
I64_TRIPLE = struct.Struct(">qqq")
SENT = struct.Struct(">iqq")
PULLED = struct.Struct(">iqqqqIii")  # queueId .. bodyLen, see docs/protocol.md
NULL_STRING = b"\xff\xff"  # short -1
NO_PROPERTIES = b"\x00\x00"


class ProtocolError(Exception):
    """Bytes that do not follow docs/protocol.md (base of both sides)."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the protocol cannot carry."""


# --------------------------------------------------------------------------
# Encoding helpers.


def encode_str(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > MAX_STRING_BYTES:
        raise LocalProtocolError(f"string of {len(raw)} bytes over {MAX_STRING_BYTES}")
    return I16.pack(len(raw)) + raw


def encode_opt_str(value: str | None) -> bytes:
    return NULL_STRING if value is None else encode_str(value)


def encode_props(parts: list[bytes], props: Mapping[str, str]) -> None:
    if not props:
        parts.append(NO_PROPERTIES)
        return
    if len(props) > 0x7FFF:
        raise LocalProtocolError(f"{len(props)} properties over {0x7FFF}")
    parts.append(I16.pack(len(props)))
    for name, value in props.items():
        parts.append(encode_str(name))
        parts.append(encode_str(value))


# --------------------------------------------------------------------------
# Decoding helpers. Each returns (value, new position); overruns surface as
# struct.error / explicit checks and become RemoteProtocolError at the top.


def read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = I16.unpack_from(buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise RemoteProtocolError(f"string length {n} at byte {pos - 2} is invalid")
    return buf[pos : pos + n].decode(), pos + n


def read_opt_str(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = I16.unpack_from(buf, pos)
    if n == -1:
        return None, pos + 2
    return read_str(buf, pos)


def read_props(buf: bytes, pos: int) -> tuple[dict[str, str], int]:
    (count,) = I16.unpack_from(buf, pos)
    pos += 2
    if count < 0:
        raise RemoteProtocolError(f"property count {count} is negative")
    props: dict[str, str] = {}
    for _ in range(count):
        name, pos = read_str(buf, pos)
        value, pos = read_str(buf, pos)
        props[name] = value
    return props, pos


def read_bytes(buf: bytes, pos: int, n: int, what: str) -> tuple[bytes, int]:
    if n < 0 or pos + n > len(buf):
        raise RemoteProtocolError(f"{what} length {n} at byte {pos} is invalid")
    return buf[pos : pos + n], pos + n


def check_count(count: int, min_item_bytes: int, buf: bytes, pos: int, what: str) -> None:
    # Reject absurd counts before looping: each item needs at least
    # `min_item_bytes`, so a 4-byte count can't make us loop 2^31 times.
    if count < 0 or count * min_item_bytes > len(buf) - pos:
        raise RemoteProtocolError(f"{what} count {count} does not fit the body")


def check_end(buf: bytes, pos: int) -> None:
    if pos != len(buf):
        raise RemoteProtocolError(f"{len(buf) - pos} unexpected bytes after the body")
