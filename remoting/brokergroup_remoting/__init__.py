"""RocketMQ's remoting protocol as a sans-I/O library (DESIGN.md §12, docs/rocketmq-compatibility.md).

Shared by the broker, the name server and the controller, so it imports no other brokergroup
package and does no I/O: bytes in, `RemotingCommand` values out, and back.
"""

from brokergroup_remoting.acl import (
    SignatureCheck,
    SignatureFault,
    sign,
    signature,
    signed_content,
    verify,
)
from brokergroup_remoting.codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from brokergroup_remoting.command import (
    DEFAULT_LIMITS,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    RemotingCommand,
    RemotingLimits,
    request,
    response_to,
)
from brokergroup_remoting.errors import (
    FrameFault,
    LocalProtocolError,
    RemoteProtocolError,
    RemotingError,
)
from brokergroup_remoting.frame import FrameDecoder, decode, encode, encode_header

__all__ = [
    "DEFAULT_LIMITS",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "FrameDecoder",
    "FrameFault",
    "LanguageCode",
    "LocalProtocolError",
    "RemoteProtocolError",
    "RemotingCommand",
    "RemotingError",
    "RemotingLimits",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "SignatureCheck",
    "SignatureFault",
    "decode",
    "encode",
    "encode_header",
    "request",
    "response_to",
    "sign",
    "signature",
    "signed_content",
    "verify",
]
