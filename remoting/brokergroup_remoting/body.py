"""Request and response bodies as RocketMQ writes them (pure).

Bodies are RemotingSerializable JSON (fastjson: compact, UTF-8, non-ASCII written as is) and
some carry UtilAll.crc32. A body a handler cannot use raises `BadField`, answered like a bad
header field.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from brokergroup_remoting.fields import BadField


def json_body(obj: object) -> bytes:
    """RemotingSerializable.encode: compact JSON in UTF-8."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def json_text(obj: object) -> str:
    """The same JSON as text (a body nested in another as a string)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def decode_json(body: bytes, what: str) -> Any:
    """A JSON body; BadField naming `what` when it is not UTF-8 JSON."""
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadField(f"the {what} body is not JSON: {exc}") from None


def decode_json_object(body: bytes, what: str) -> dict[str, Any]:
    """A JSON object body (RocketMQ's bodies are objects)."""
    data = decode_json(body, what)
    if not isinstance(data, dict):
        raise BadField(f"the {what} body is not a JSON object")
    return data


def crc32(data: bytes) -> int:
    """UtilAll.crc32: CRC32 with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFFFFFF
