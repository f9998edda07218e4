"""RemotingCommand: one request or response of RocketMQ's remoting protocol, as values.

Field names and meanings follow RocketMQ's RemotingCommand.java. `flag` bit 0 marks a
response (RPC_TYPE), bit 1 a oneway request (RPC_ONEWAY); `opaque` pairs a response with
its request. `ext_fields` keeps the header's key/value pairs in wire order (None when the
header has no extFields at all, which JSON tells apart from an empty map): a ROCKETMQ
header may repeat a key (a FastCodesHeader writes its fields, then the extFields map holds
them again once AclClientRPCHook has called makeCustomHeaderToNet), so encoding the pairs
back gives the same bytes. `fields()` is the map a Java server sees (the last value wins,
as HashMap.put does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from brokergroup_remoting.codes import LanguageCode, ResponseCode, SerializeType

#: flag bit 0 (RemotingCommand.RPC_TYPE): set on responses.
FLAG_RESPONSE = 1 << 0
#: flag bit 1 (RemotingCommand.RPC_ONEWAY): the sender expects no response.
FLAG_ONEWAY = 1 << 1


@dataclass(frozen=True)
class RemotingLimits:
    """Bounds on every length a peer chooses; over one, decoding stops with a clear error.

    RocketMQ bounds only the frame (NettyDecoder: `com.rocketmq.remoting.frameMaxLength`,
    16 MiB, the 4-byte length field included); the finer bounds here are well above what a
    stock client sends (a SEND_MESSAGE_V2 header is ~0.5 KiB with 13 fields) and well below
    what would let one connection hold much memory.
    """

    max_frame_bytes: int = 16 * 1024 * 1024
    """Whole frame including its 4-byte length field (RocketMQ's frameMaxLength)."""
    max_header_bytes: int = 1024 * 1024
    """Serialized header (JSON or ROCKETMQ). Message properties travel here, ≤ 32 KiB each."""
    max_body_bytes: int = 16 * 1024 * 1024
    """Body; a batch of messages is one body. The frame bound usually binds first."""
    max_ext_fields: int = 1024
    """Key/value pairs in extFields (duplicates counted). A send header has ~15."""
    max_ext_key_bytes: int = 1024
    """One extFields key in UTF-8 bytes; keys are header field names."""
    max_ext_value_bytes: int = 256 * 1024
    """One extFields value; the largest is a message's properties string."""
    max_remark_bytes: int = 64 * 1024
    """The remark (an error text on responses)."""

    def __post_init__(self) -> None:
        if not 8 <= self.max_frame_bytes <= 0x7FFFFFFF:
            raise ValueError(f"max_frame_bytes {self.max_frame_bytes} outside 8..2^31-1")
        if not 0 < self.max_header_bytes <= 0xFFFFFF:
            raise ValueError(
                f"max_header_bytes {self.max_header_bytes} outside 1..2^24-1 (24-bit field)"
            )
        for name in (
            "max_body_bytes",
            "max_ext_fields",
            "max_ext_key_bytes",
            "max_ext_value_bytes",
            "max_remark_bytes",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} is negative")
        if self.max_ext_key_bytes > 0x7FFF:
            raise ValueError("max_ext_key_bytes over 32767 (a key's length is a signed short)")


DEFAULT_LIMITS = RemotingLimits()


@dataclass(frozen=True)
class RemotingCommand:
    """One decoded (or to-be-encoded) frame; `body` is never parsed here."""

    code: int
    opaque: int
    flag: int = 0
    language: LanguageCode = LanguageCode.JAVA
    version: int = 0
    remark: str | None = None
    ext_fields: tuple[tuple[str, str], ...] | None = None
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def fields(self) -> dict[str, str]:
        """extFields as a Java server sees them: one value per key, the last one written."""
        return dict(self.ext_fields or ())


def request(
    code: int,
    opaque: int,
    fields: Mapping[str, str] | None = None,
    body: bytes = b"",
    *,
    serialize_type: SerializeType = SerializeType.JSON,
    oneway: bool = False,
    version: int = 0,
    language: LanguageCode = LanguageCode.JAVA,
) -> RemotingCommand:
    """A request command; `fields` become its extFields in the mapping's order (None: no
    extFields, as a Java request built without a custom header)."""
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=FLAG_ONEWAY if oneway else 0,
        language=language,
        version=version,
        ext_fields=None if fields is None else tuple(fields.items()),
        body=body,
        serialize_type=serialize_type,
    )


def response_to(
    req: RemotingCommand,
    code: int = ResponseCode.SUCCESS,
    remark: str | None = None,
    fields: Mapping[str, str] | None = None,
    body: bytes = b"",
    *,
    version: int = 0,
) -> RemotingCommand:
    """The response to `req`: its opaque and its serialize type (a client decodes responses
    in the serialization it wrote; RocketMQ's processors reply the same way)."""
    return RemotingCommand(
        code=code,
        opaque=req.opaque,
        flag=FLAG_RESPONSE,
        language=LanguageCode.JAVA,
        version=version,
        remark=remark,
        ext_fields=None if fields is None else tuple(fields.items()),
        body=body,
        serialize_type=req.serialize_type,
    )
