"""The codec's errors, split by who broke the protocol (h11's Local/Remote split).

`RemoteProtocolError` (the peer sent bytes RocketMQ's format or our limits refuse) carries
a `FrameFault` saying what was wrong and the deciding values, so a server can log it and
close the connection without parsing a message. `LocalProtocolError` is ours: we were asked
to encode something the format cannot carry (a code beyond a short in a ROCKETMQ header).
"""

from __future__ import annotations

from enum import Enum


class FrameFault(Enum):
    """What was wrong with a frame (the reason of a `RemoteProtocolError`)."""

    FRAME_TOO_LONG = "total frame length over the limit"
    FRAME_TOO_SHORT = "total frame length below the 4-byte header-length field"
    FRAME_TRUNCATED = "frame ends before its length says"
    FRAME_TRAILING_BYTES = "bytes after the frame its length describes"
    HEADER_TOO_LONG = "header length over the limit"
    HEADER_BEYOND_FRAME = "header length beyond the frame"
    BODY_TOO_LONG = "body length over the limit"
    UNKNOWN_SERIALIZE_TYPE = "serialize type is neither JSON (0) nor ROCKETMQ (1)"
    HEADER_TRUNCATED = "header ends inside a field"
    HEADER_TRAILING_BYTES = "bytes after the header's last field"
    BAD_JSON = "JSON header is not a JSON object of RemotingCommand fields"
    BAD_UTF8 = "string is not UTF-8"
    BAD_FIELD = "header field has the wrong type or range"
    UNKNOWN_LANGUAGE = "language code is not a LanguageCode"
    TOO_MANY_EXT_FIELDS = "more extFields than the limit"
    EXT_KEY_TOO_LONG = "extFields key longer than the limit"
    EXT_VALUE_TOO_LONG = "extFields value longer than the limit"
    REMARK_TOO_LONG = "remark longer than the limit"


class RemotingError(Exception):
    """Base of every error this package raises."""


class RemoteProtocolError(RemotingError):
    """The peer's bytes break the remoting protocol; the stream cannot be trusted after it."""

    def __init__(
        self, fault: FrameFault, detail: str, *, value: int | None = None, limit: int | None = None
    ) -> None:
        self.fault = fault
        self.detail = detail
        self.value = value
        self.limit = limit
        text = f"{fault.value}: {detail}"
        if value is not None:
            text += f" (got {value}" + (f", limit {limit})" if limit is not None else ")")
        super().__init__(text)


class LocalProtocolError(RemotingError):
    """We were asked to encode something the wire format cannot carry (a caller bug)."""
