"""Where the v1 record's fields sit and when a record is valid: written once.

The one decoder has two executors of these rules and no rules of its own:

- the store (`message_scan`: recovery, the slave's dispatch, truncation) reads one
  record at a time with `struct` and calls the rules with Python ints: the slave's
  replicated chains are a few records long, too short for numpy's per-call cost
  (a 1-record numpy scan spent ~170 us in wrappers), and the broker needs no numpy;
- the audit (`record_columns`, `record_walk`) reads a whole slice at once and calls
  the same rules with numpy int64 arrays.

So every rule is arithmetic and comparisons joined with `&` (never `and`, `or`,
`max` or `if`): on ints it gives a bool, on arrays a mask. A test runs both
executors on the same damaged logs against an independent oracle
(tests/unit/test_store_decoder_oracle.py).

The layout (RocketMQ CommitLog v1, big-endian; message.py has the table):
totalSize 0, magic 4, bodyCRC 8, queueId 12, flag 16, queueOffset 20,
physicalOffset 28, sysFlag 36, bornTimestamp 40, bornHost 48 (8 bytes, 20 with
BORNHOST_V6_FLAG), storeTimestamp, storeHost (8/20 with STOREHOSTADDRESS_V6_FLAG),
reconsumeTimes, preparedTransactionOffset, bodyLength, body, topicLength (1 byte),
topic, propertiesLength (2 bytes), properties.

Pure: no I/O, no numpy.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from brokergroup_broker.topics import MAX_TOPIC_BYTES

from .message import (
    BORNHOST_V6_FLAG,
    END_FILE_MIN_BLANK_LENGTH,
    MIN_RECORD_BYTES,
    STOREHOSTADDRESS_V6_FLAG,
)

# Field positions from the record start.
TOTAL_SIZE_AT = 0
MAGIC_AT = 4
BODY_CRC_AT = 8
QUEUE_ID_AT = 12
FLAG_AT = 16
QUEUE_OFFSET_AT = 20
PHYSICAL_OFFSET_AT = 28
SYS_FLAG_AT = 36
BORN_TIMESTAMP_AT = 40
BORN_HOST_AT = 48
HOST_V4_BYTES = 8
HOST_V6_BYTES = 20
#: Bytes a record start needs to be recognised (magic and physicalOffset).
HEAD_BYTES = PHYSICAL_OFFSET_AT + 8
#: Bytes from the record start through sysFlag (what decides the hosts' widths).
THROUGH_SYS_FLAG_BYTES = SYS_FLAG_AT + 4

#: A Python int (the store) or a numpy int64 array (the audit): every rule below
#: takes and gives either (numpy is not a dependency of the broker, so no array type).
N = Any


def host_bytes(sys_flag: N, v6_flag: int) -> N:
    """Width of a host field (address + port): IPv4 or, with `v6_flag` set, IPv6."""
    return HOST_V4_BYTES + (HOST_V6_BYTES - HOST_V4_BYTES) * ((sys_flag & v6_flag) != 0)


def store_timestamp_at(start: N, sys_flag: N) -> N:
    """Position of storeTimestamp (after bornTimestamp and bornHost)."""
    return start + BORN_HOST_AT + host_bytes(sys_flag, BORNHOST_V6_FLAG)


def body_length_at(start: N, sys_flag: N) -> N:
    """Position of bodyLength (storeTimestamp, storeHost, reconsumeTimes and
    preparedTransactionOffset lie before it); the body starts 4 bytes later, the
    topicLength byte right after the body, propertiesLength (2 bytes) right after
    the topic, the properties 2 bytes later."""
    store_host_at = store_timestamp_at(start, sys_flag) + 8
    return store_host_at + host_bytes(sys_flag, STOREHOSTADDRESS_V6_FLAG) + 4 + 8


def record_start_ok(
    total: N, physical_offset_field: N, offset: N, segment_end: N, max_record_bytes: int
) -> N:
    """The record-start rule after the magic code: the record names its own offset
    (physicalOffset == where it sits), and its totalSize is possible there: at least
    the smallest record, at most the limit, and the segment keeps room for its end
    blank. (To ask about the size alone, pass `offset` as the physicalOffset.)"""
    return (
        (physical_offset_field == offset)
        & (total >= MIN_RECORD_BYTES)
        & (total <= max_record_bytes)
        & (total + END_FILE_MIN_BLANK_LENGTH <= segment_end - offset)
    )


def blank_fits(total: N, offset: N, segment_end: N) -> N:
    """A blank record (BLANK_MAGIC_CODE) is valid only when it ends at the segment end."""
    return total == segment_end - offset


def lengths_add_up(
    start: N, size: N, body_len: N, topic_len: N, properties_length_at: N, properties_len: N
) -> N:
    """CommitLog.calMsgLength over the decoded lengths == totalSize, with a topic of
    1..MAX_TOPIC_BYTES and no negative length. `properties_length_at` is where the
    propertiesLength field sits (after body and topic, see `body_length_at`); when
    this holds, every field lies inside the record, so a reader that found a field
    outside it may answer False without reading on."""
    return (
        (body_len >= 0)
        & (topic_len > 0)
        & (topic_len <= MAX_TOPIC_BYTES)
        & (properties_len >= 0)
        & (properties_length_at + 2 + properties_len == start + size)
    )


class ScanStop(StrEnum):
    """Why a scan stopped; the first two are clean ends, the rest mean 'cut here'."""

    END = "end of data"
    PARTIAL = "record incomplete (torn write or still arriving)"
    ZEROS = "zero-filled space (preallocated or never written)"
    BAD_MAGIC = "unknown magic code"
    BAD_SIZE = "record size out of range"
    BAD_BLANK = "blank record does not end at the segment end"
    BAD_PHYSICAL_OFFSET = "physicalOffset field differs from the record position"
    BAD_STRUCTURE = "field lengths do not add up to totalSize"
    BAD_CRC = "body CRC mismatch"

    @property
    def is_corrupt(self) -> bool:
        return self not in (ScanStop.END, ScanStop.PARTIAL, ScanStop.ZEROS)
