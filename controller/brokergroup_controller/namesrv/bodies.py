"""Headers and bodies of the name server's requests, decoded and bounded (pure).

Header fields come from a request's extFields (`RemotingCommand.fields()`, the view the
signature covers), read by `brokergroup_remoting.fields` (Java's parsing rules). Missing or
malformed fields and bodies raise `BadField` naming what and why, which the transport answers
as RocketMQ answers a RemotingCommandException: SYSTEM_ERROR with the reason. REGISTER_BROKER's body is RegisterBrokerBody (remoting/protocol/body,
5.3.1): JSON (the broker default), or with compressedRegister=true a zlib stream (recognized
by its header: 5.3.1 brokers send it with `compressed=false`) of length-prefixed parts (DataVersion JSON, N × TopicConfig.encode() strings,
filter-server JSON, topic-queue mappings, which routes do not use). Decompression is bounded
so a small body cannot inflate without limit.

A topic whose name breaks RocketMQ's topic rule (`brokergroup_remoting.names`) is left out
of the registration and named in `RegisterBody.refused`; the broker's other topics are
registered. RocketMQ's name server refuses the whole registration instead, which takes
every topic of that broker out of the routes once the last good registration expires
(one consumer group of 121 characters made its retry topic too long for exactly that).
A topic config that is not a topic config at all (not an object, bad numbers) still
refuses the registration: that broker's body is broken, not one of its names.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_controller.namesrv.routes import PERM_READ_WRITE, DataVersion, TopicConfig
from brokergroup_remoting import fields as header
from brokergroup_remoting import names
from brokergroup_remoting.body import decode_json
from brokergroup_remoting.fields import BadField, quoted

#: Inflated REGISTER_BROKER body at most (a broker with 100k topics compresses to a few MiB).
MAX_INFLATED_BYTES = 64 * 1024 * 1024
#: Topics one registration may carry.
MAX_TOPICS = 200_000
#: Queue numbers RocketMQ accepts for a topic are far below this.
MAX_QUEUE_NUMS = 65_535
#: TopicValidator.TOPIC_MAX_LENGTH.
MAX_TOPIC_BYTES = names.TOPIC_MAX_LENGTH
#: Refused topic names one registration reports (the rest are only counted).
MAX_REFUSED_NAMED = 16
_INT32 = struct.Struct(">i")


@dataclass(frozen=True)
class RegisterHeader:
    """RegisterBrokerRequestHeader."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    heartbeat_timeout_ms: int | None
    enable_acting_master: bool | None
    compressed: bool
    body_crc32: int


def address(fields: Mapping[str, str], name: str) -> str:
    value = header.text(fields, name)
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadField(f"the header field {name} is not host:port: {quoted(value, 80)}")
    return value


def register_header(fields: Mapping[str, str]) -> RegisterHeader:
    ha = fields.get("haServerAddr")
    if ha is None:
        raise BadField("the header field haServerAddr is missing")
    return RegisterHeader(
        broker_name=header.text(fields, "brokerName"),
        broker_addr=address(fields, "brokerAddr"),
        cluster_name=header.text(fields, "clusterName"),
        ha_server_addr=ha[:255],
        broker_id=header.int64(fields, "brokerId", low=0),
        heartbeat_timeout_ms=header.optional_int64(
            fields, "heartbeatTimeoutMillis", None, low=1, high=24 * 3600 * 1000
        ),
        enable_acting_master=header.optional_boolean(fields, "enableActingMaster"),
        compressed=header.boolean(fields, "compressed"),
        body_crc32=header.optional_int32(fields, "bodyCrc32", 0),
    )


def _int_field(
    obj: Mapping[str, Any], name: str, default: int, low: int, high: int, what: str
) -> int:
    value = obj.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadField(f"{what}: {name} must be an integer in {low}..{high}, got {value!r}")
    return value


def data_version(obj: Any, what: str = "dataVersion") -> DataVersion:
    if obj is None:
        return DataVersion()
    if not isinstance(obj, dict):
        raise BadField(f"{what} must be a JSON object")
    big = (1 << 63) - 1
    counter = obj.get("counter", 0)
    if isinstance(counter, dict):  # an AtomicLong written by a lenient serializer
        counter = counter.get("value", 0)
    return DataVersion(
        state_version=_int_field(obj, "stateVersion", 0, -big - 1, big, what),
        timestamp=_int_field(obj, "timestamp", 0, -big - 1, big, what),
        counter=_int_field({"counter": counter}, "counter", 0, -big - 1, big, what),
    )


def decode_data_version(body: bytes) -> DataVersion:
    """QUERY_DATA_VERSION's body: DataVersion JSON (absent = zero)."""
    return data_version(decode_json(body, "DataVersion") if body else None)


@dataclass(frozen=True)
class RegisterBody:
    """A RegisterBrokerBody: its DataVersion, the topic configs whose names follow the
    topic rule, and the names that do not (at most MAX_REFUSED_NAMED of them; `refused_count`
    counts all)."""

    data_version: DataVersion
    topics: dict[str, TopicConfig]
    refused: tuple[str, ...] = ()
    refused_count: int = 0


class InvalidTopicName(Exception):
    """A topic config whose name breaks the topic rule: skipped, not the registration."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _topic_name(name: Any, what: str) -> str:
    if not isinstance(name, str):
        raise BadField(f"{what}: topicName must be a string, got {name!r:.80}")
    if names.topic_error(name) is not None:
        raise InvalidTopicName(name)
    return name


def topic_config(obj: Any, what: str) -> TopicConfig:
    if not isinstance(obj, dict):
        raise BadField(f"{what} must be a JSON object")
    order = obj.get("order", False)
    if not isinstance(order, bool):
        raise BadField(f"{what}: order must be true or false")
    return TopicConfig(
        topic_name=_topic_name(obj.get("topicName"), what),
        read_queue_nums=_int_field(obj, "readQueueNums", 16, 0, MAX_QUEUE_NUMS, what),
        write_queue_nums=_int_field(obj, "writeQueueNums", 16, 0, MAX_QUEUE_NUMS, what),
        perm=_int_field(obj, "perm", PERM_READ_WRITE, 0, 0xFF, what),
        topic_sys_flag=_int_field(obj, "topicSysFlag", 0, -(1 << 31), (1 << 31) - 1, what),
        order=order,
    )


def _encoded_topic_config(line: str, what: str) -> TopicConfig:
    # TopicConfig.encode(): "name read write perm filterType [attributes JSON]", space-separated.
    parts = line.split(" ")
    if len(parts) < 5:
        raise BadField(f"{what}: {line[:80]!r} has fewer than 5 space-separated parts")
    numbers = []
    for part in parts[1:4]:
        if not part.isascii() or not part.lstrip("-").isdigit() or len(part) > 11:
            raise BadField(f"{what}: {part[:20]!r} is not a number")
        numbers.append(int(part))
    read, write, perm = numbers
    for name, value, high in (
        ("read", read, MAX_QUEUE_NUMS),
        ("write", write, MAX_QUEUE_NUMS),
        ("perm", perm, 0xFF),
    ):
        if not 0 <= value <= high:
            raise BadField(f"{what}: {name} {value} outside 0..{high}")
    return TopicConfig(_topic_name(parts[0], what), read, write, perm)


class _Collected:
    """Topic configs as they are decoded, the ones with a bad name set aside."""

    def __init__(self) -> None:
        self.topics: dict[str, TopicConfig] = {}
        self.refused: list[str] = []
        self.refused_count = 0

    def add(self, decode: Any) -> None:
        try:
            config: TopicConfig = decode()
        except InvalidTopicName as exc:
            self.refused_count += 1
            if len(self.refused) < MAX_REFUSED_NAMED:
                self.refused.append(exc.name[:200])
            return
        self.topics[config.topic_name] = config

    def body(self, version: DataVersion) -> RegisterBody:
        return RegisterBody(version, self.topics, tuple(self.refused), self.refused_count)


def _topics(table: Any, collected: _Collected) -> None:
    if table is None:
        return
    if not isinstance(table, dict):
        raise BadField("topicConfigTable must be a JSON object")
    if len(table) > MAX_TOPICS:
        raise BadField(f"{len(table)} topics in one registration (limit {MAX_TOPICS})")
    for key, value in table.items():
        collected.add(lambda v=value, k=key: topic_config(v, f"topic {k!r:.80}"))


def register_body(body: bytes, compressed: bool) -> RegisterBody:
    """RegisterBrokerBody → its DataVersion, its topic configs by name, the refused names."""
    collected = _Collected()
    if not body:
        return collected.body(DataVersion())
    if compressed or _zlib_header(body):
        return _decode_compressed(body, collected)
    obj = decode_json(body, "RegisterBrokerBody")
    if not isinstance(obj, dict):
        raise BadField("RegisterBrokerBody must be a JSON object")
    wrapper = obj.get("topicConfigSerializeWrapper")
    if wrapper is None:
        return collected.body(DataVersion())
    if not isinstance(wrapper, dict):
        raise BadField("topicConfigSerializeWrapper must be a JSON object")
    version = data_version(wrapper.get("dataVersion"))
    _topics(wrapper.get("topicConfigTable"), collected)
    return collected.body(version)


def decode_register_body(
    body: bytes, compressed: bool
) -> tuple[DataVersion, dict[str, TopicConfig]]:
    """RegisterBrokerBody → (its DataVersion, its valid topic configs by name)."""
    decoded = register_body(body, compressed)
    return decoded.data_version, decoded.topics


def _zlib_header(body: bytes) -> bool:
    """A zlib stream's first two bytes (deflate, window ≤ 32 KiB, FCHECK): a 5.3.1 broker with
    compressedRegister=true sends its compressed body with `compressed=false` in the header
    (BrokerOuterAPI.registerBrokerAll), which RocketMQ's own name server then fails to parse.
    JSON never starts so ('{' is 0x7B), so sniffing is unambiguous."""
    return (
        len(body) >= 2
        and body[0] & 0x0F == 8
        and body[0] >> 4 <= 7
        and (body[0] << 8 | body[1]) % 31 == 0
    )


class _Inflated:
    def __init__(self, body: bytes) -> None:
        try:
            inflater = zlib.decompressobj()
            self._data = inflater.decompress(body, MAX_INFLATED_BYTES)
        except zlib.error as exc:
            raise BadField(f"compressed RegisterBrokerBody is not a zlib stream: {exc}") from None
        if inflater.unconsumed_tail:
            raise BadField(
                f"compressed RegisterBrokerBody inflates beyond {MAX_INFLATED_BYTES} bytes"
            )
        self._pos = 0

    def int32(self, what: str) -> int:
        if self._pos + 4 > len(self._data):
            raise BadField(f"compressed RegisterBrokerBody ends before {what}")
        (value,) = _INT32.unpack_from(self._data, self._pos)
        self._pos += 4
        if value < 0:
            raise BadField(f"compressed RegisterBrokerBody: negative {what} {value}")
        return int(value)

    def chunk(self, what: str) -> bytes:
        length = self.int32(f"the length of {what}")
        if self._pos + length > len(self._data):
            raise BadField(f"compressed RegisterBrokerBody ends inside {what}")
        data = self._data[self._pos : self._pos + length]
        self._pos += length
        return data


def _decode_compressed(body: bytes, collected: _Collected) -> RegisterBody:
    reader = _Inflated(body)
    version = data_version(decode_json(reader.chunk("the DataVersion"), "DataVersion"))
    count = reader.int32("the topic count")
    if count > MAX_TOPICS:
        raise BadField(f"{count} topics in one registration (limit {MAX_TOPICS})")
    for index in range(count):
        raw = reader.chunk(f"topic config {index}")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadField(f"topic config {index} is not UTF-8") from None
        collected.add(lambda li=line, i=index: _encoded_topic_config(li, f"topic config {i}"))
    # The filter-server list and topic-queue mappings follow; routes use neither.
    return collected.body(version)
