"""The audit's side inputs: the acknowledgement log (`--acks`) and the controller's
event history (`--events`), JSON lines from a local path or a URI (`locations`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from brokergroup_audit.locations import read_text


def read_json_lines(location: str | None) -> list[dict[str, Any]]:
    """JSON lines; blank lines skipped; a line that is not a JSON object is an error."""
    if not location:
        return []
    out: list[dict[str, Any]] = []
    for n, line in enumerate(read_text(location).splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{location}:{n}: not JSON ({exc.msg})") from exc
        if not isinstance(value, dict):
            raise ValueError(f"{location}:{n}: not a JSON object")
        out.append(value)
    return out


def acknowledged(lines: Sequence[dict[str, Any]], groups: Sequence[str]) -> list[dict[str, Any]]:
    """Acknowledged sends of the ack log (brief contract): lines whose `outcome` is present
    and not `ok` are skipped; unknown fields ignored; missing group = the only group."""
    out = []
    for i, a in enumerate(lines):
        if a.get("outcome", "ok") != "ok":
            continue
        group = a.get("brokerName") or (groups[0] if len(groups) == 1 else None)
        try:
            out.append(
                {
                    "ackLine": i + 1,
                    "group": str(group),
                    "topic": str(a["topic"]),
                    "queueId": int(a["queueId"]),
                    "queueOffset": int(a["queueOffset"]),
                    "physicalOffset": physical_offset(a),
                    "key": None if a.get("key") is None else str(a["key"]),
                    "bodyCrc": int(a["bodyCrc"]),
                    "ackTimeMs": int(a.get("ackTimeMs", 0)),
                    "masterEpoch": None if a.get("masterEpoch") is None else int(a["masterEpoch"]),
                    "msgId": None if a.get("msgId") is None else str(a["msgId"]),
                }
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"ack log line {i + 1}: {exc!r} in {a}") from exc
    return out


def physical_offset(ack: dict[str, Any]) -> int:
    """`physicalOffset`, or the commit log offset in a RocketMQ offsetMsgId (store host
    address and port, then the 8-byte offset, in hex: MessageDecoder.createMessageId)."""
    if "physicalOffset" in ack or "offsetMsgId" not in ack:
        return int(ack["physicalOffset"])
    text = str(ack["offsetMsgId"])
    if len(text) not in (32, 56):  # IPv4 / IPv6 store host
        raise ValueError(f"offsetMsgId {text!r} is not 32 or 56 hex digits")
    return int(text[-16:], 16)


#: The acknowledgements `acknowledged` returns, as Spark reads them.
ACK_SCHEMA = pa.schema(
    [
        ("ackLine", pa.int32()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("physicalOffset", pa.int64()),
        ("key", pa.string()),
        ("bodyCrc", pa.int64()),
        ("ackTimeMs", pa.int64()),
        ("masterEpoch", pa.int32()),
        ("msgId", pa.string()),
    ]
)
