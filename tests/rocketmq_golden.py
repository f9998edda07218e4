"""The golden RocketMQ frames (tests/fixtures/rocketmq/) and how to compare them.

Each frame was sent by a stock RocketMQ Java client (manifest.json names the version) and
the manifest carries Java's own RemotingCommand.decode of it: `java_view` turns a Python
decode into the same shape, so a test compares the two field by field. `stable_view` drops
what changes from one recording to the next (opaque, born timestamp, the message's unique
key, and the signature over them), so a fresh recording can be compared with the checked-in
one.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from brokergroup_remoting import RemotingCommand, SerializeType

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rocketmq"

# SendMessageRequestHeaderV2 letters: g = bornTimestamp, i = properties (holds UNIQ_KEY).
_VOLATILE_FIELDS = {"g", "Signature"}
_PROPERTIES_FIELD = "i"
_UNIQ_KEY = "UNIQ_KEY"


def manifest(directory: Path = FIXTURES) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((directory / "manifest.json").read_text())
    return loaded


def frame_bytes(name: str, directory: Path = FIXTURES) -> bytes:
    return (directory / name).read_bytes()


def java_view(cmd: RemotingCommand) -> dict[str, Any]:
    """`cmd` as GoldenClient's `decode` prints a Java RemotingCommand.

    Java's ROCKETMQ reader turns a zero-length string into null (RocketMQSerializable.readStr),
    so an empty value, or an empty map, reads as null there and as "" / None here.
    """
    fields: dict[str, str | None] | None = None
    if cmd.ext_fields is not None:
        fields = {
            key: (None if value == "" and cmd.serialize_type is SerializeType.ROCKETMQ else value)
            for key, value in sorted(cmd.fields().items())
        }
    return {
        "serializeType": cmd.serialize_type.name,
        "code": cmd.code,
        "language": cmd.language.name,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "remark": cmd.remark,
        "extFields": fields,
        "body": base64.b64encode(cmd.body).decode("ascii"),
    }


def _properties_without_unique_key(text: str) -> list[str]:
    # MessageDecoder.messageProperties2String: name \u0001 value \u0002, repeated.
    return [item for item in text.split("\u0002") if not item.startswith(_UNIQ_KEY + "\u0001")]


def stable_view(cmd: RemotingCommand) -> dict[str, Any]:
    """What two recordings of the same request must agree on."""
    fields: dict[str, Any] = {}
    for key, value in cmd.fields().items():
        if key in _VOLATILE_FIELDS:
            fields[key] = "<varies>"
        elif key == _PROPERTIES_FIELD and cmd.code in (310, 320):  # SEND_MESSAGE_V2, batch
            fields[key] = _properties_without_unique_key(value)
        else:
            fields[key] = value
    body: Any = cmd.body
    if cmd.code == 34:  # HEART_BEAT: HeartbeatData JSON, its sets in HashSet order
        data = json.loads(cmd.body)
        data["producerDataSet"] = sorted(p["groupName"] for p in data["producerDataSet"])
        # clientID is "<the client's IP>@<instance>": the recording machine's address.
        data["clientID"] = "<client ip>@" + str(data["clientID"]).partition("@")[2]
        body = data
    elif cmd.code == 320:  # SEND_BATCH_MESSAGE: every message carries its own UNIQ_KEY
        body = "<batch of encoded messages>"
    return {
        "serializeType": cmd.serialize_type.name,
        "code": cmd.code,
        "flag": cmd.flag,
        "language": cmd.language.name,
        "version": cmd.version,
        "remark": cmd.remark,
        "extFields": fields,
        "body": body,
    }
