"""An independent decoder of RocketMQ's v1 commit log record, for tests only.

Written from the layout table (RocketMQ CommitLog / MessageDecoder v1; DESIGN.md
§3.1), with `struct` and nothing from the store: one record at a time, every field
read in order. It exists so the store's one decoder (record_columns, record_walk,
message_scan) is checked against something that does not share its code.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from dataclasses import dataclass

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
BORN_V6 = 1 << 4
STORE_V6 = 1 << 5
#: totalSize .. bodyLength with IPv4 hosts, plus topicLength and propertiesLength.
MIN_RECORD = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2 + 1


@dataclass(frozen=True)
class OracleRecord:
    physical_offset: int
    size: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: tuple[str, int]
    store_timestamp_ms: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]

    @property
    def tags_code(self) -> int:
        """Java's String.hashCode() of the TAGS property (0 when absent)."""
        tags = self.properties.get("TAGS")
        if not tags:
            return 0
        h = 0
        units = tags.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        return h - (1 << 32) if h >= 1 << 31 else h


@dataclass(frozen=True)
class OracleScan:
    records: list[OracleRecord]
    end: int
    """Commit log offset after the last valid record or blank."""
    clean: bool
    """The data ends there (end of data, zeros, a record still arriving), not damage."""


def _host(data: bytes, at: int, v6: bool) -> tuple[tuple[str, int], int]:
    width = 16 if v6 else 4
    address = str(ipaddress.ip_address(data[at : at + width]))
    (port,) = struct.unpack_from(">i", data, at + width)
    return (address, port), at + width + 4


def _properties(raw: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw.decode("utf-8", "replace").split("\x02"):
        parts = item.split("\x01")
        if len(parts) == 2 and parts[0] and parts[1]:
            out[parts[0]] = parts[1]
    return out


def decode_one(
    data: bytes, pos: int, phys: int, max_record: int, space: int
) -> OracleRecord | None:
    """The record at `pos` (commit log offset `phys`, `space` bytes left in its segment)
    if it is whole and valid; None otherwise."""
    if len(data) - pos < 8:
        return None
    total, magic = struct.unpack_from(">iI", data, pos)
    if magic != MESSAGE_MAGIC or not MIN_RECORD <= total <= max_record or total + 8 > space:
        return None
    if len(data) - pos < total:
        return None
    rec = data[pos : pos + total]
    crc, queue_id, flag, queue_offset, physical, sys_flag, born_ts = struct.unpack_from(
        ">iiiqqiq", rec, 8
    )
    if physical != phys:
        return None
    born, at = _host(rec, 48, bool(sys_flag & BORN_V6))
    (store_ts,) = struct.unpack_from(">q", rec, at)
    store, at = _host(rec, at + 8, bool(sys_flag & STORE_V6))
    reconsume, prepared, body_len = struct.unpack_from(">iqi", rec, at)
    at += 16
    if body_len < 0 or at + body_len + 3 > total:
        return None
    body = rec[at : at + body_len]
    at += body_len
    topic_len = rec[at]
    if not 1 <= topic_len <= 127 or at + 1 + topic_len + 2 > total:
        return None
    topic_raw = rec[at + 1 : at + 1 + topic_len]
    at += 1 + topic_len
    (props_len,) = struct.unpack_from(">h", rec, at)
    at += 2
    if props_len < 0 or at + props_len != total:
        return None
    if zlib.crc32(body) & 0x7FFFFFFF != crc:
        return None
    try:
        topic = topic_raw.decode()
    except UnicodeDecodeError:
        return None
    return OracleRecord(
        phys, total, crc, queue_id, flag, queue_offset, sys_flag, born_ts, born, store_ts,
        store, reconsume, prepared, body, topic, _properties(rec[at : at + props_len]),
    )  # fmt: skip


def scan(data: bytes, base: int, segment_bytes: int, max_record: int) -> OracleScan:
    """Walk from `base` (a record start) record by record until the data ends or breaks."""
    records: list[OracleRecord] = []
    pos = 0
    while True:
        phys = base + pos
        space = segment_bytes - phys % segment_bytes
        left = len(data) - pos
        if left == 0:
            return OracleScan(records, phys, True)
        if left < 8:
            return OracleScan(records, phys, True)  # a header still arriving, or zeros
        total, magic = struct.unpack_from(">iI", data, pos)
        if magic == BLANK_MAGIC:
            if total != space:
                return OracleScan(records, phys, False)
            if left < total:
                return OracleScan(records, phys, True)
            pos += total
            continue
        if magic != MESSAGE_MAGIC:
            return OracleScan(records, phys, total == 0 and magic == 0)
        if MIN_RECORD <= total <= max_record and total + 8 <= space and left < total:
            return OracleScan(records, phys, True)  # torn or still arriving
        record = decode_one(data, pos, phys, max_record, space)
        if record is None:
            return OracleScan(records, phys, False)
        records.append(record)
        pos += total
