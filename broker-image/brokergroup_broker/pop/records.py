"""RocketMQ's POP names, the receipt handle (extraInfo) and the CK/ACK records (pure).

The receipt handle is RocketMQ's extraInfo (`ExtraInfoUtil.buildExtraInfo`, fields joined
by MessageConst.KEY_SEPARATOR " "): ckQueueOffset, popTime, invisibleTime, reviveQid, the
topic mark ("0" the topic, "1" the pop retry topic `%RETRY%<group>_<topic>`, "2" its V2
name `%RETRY%<group>+<topic>`), brokerName, queueId, queue offset. A stock remoting client
builds it from the POP_MESSAGE answer and sends it back in ACK_MESSAGE /
CHANGE_MESSAGE_INVISIBLETIME; the gRPC front end hands it out as the receipt handle.

The CK and ACK records are this broker's own JSON bodies (not RocketMQ's PopCheckPoint),
stored in the revive topic `rmq_sys_REVIVE_LOG_<cluster>` queue 0 with RocketMQ's tags "ck"
and "ack", through the one produce path: replicated and committed like any send, so a new
master rebuilds every queue's in-flight receipts from them (docs/pop.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
#: The revive queue every CK/ACK record goes to (RocketMQ spreads them over reviveQueueNum
#: 8 queues; one is enough here: one master appends them in order).
REVIVE_QUEUE = 0
#: reviveQid of a FIFO pop's receipts (KeyBuilder.POP_ORDER_REVIVE_QUEUE): the client's
#: ExtraInfoUtil.isOrder reads it.
ORDER_REVIVE_QID = 999
CK_TAG = "ck"
ACK_TAG = "ack"
PROPERTY_POP_CK = "POP_CK"
PROPERTY_FIRST_POP_TIME = "1ST_POP_TIME"
#: A message revived more often than this goes to %DLQ%<group> (maxReconsumeTimes).
MAX_RECONSUME_TIMES = 16

NORMAL_MARK = "0"
RETRY_MARK = "1"
RETRY_V2_MARK = "2"


class ReceiptInvalid(ValueError):
    """A receipt handle that is not RocketMQ's extraInfo, or not of this topic/broker."""


def revive_topic(cluster_name: str) -> str:
    return REVIVE_TOPIC_PREFIX + cluster_name


def retry_topic(group: str, topic: str) -> str:
    """The pop retry topic (KeyBuilder.buildPopRetryTopicV1: enableRetryTopicV2 is off by
    default in 5.3)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def retry_topic_v2(group: str, topic: str) -> str:
    return f"{RETRY_PREFIX}{group}+{topic}"


def topic_mark(stored_topic: str) -> str:
    """ExtraInfoUtil.getRetry: which topic a receipt's queue belongs to."""
    if stored_topic.startswith(RETRY_PREFIX) and "+" in stored_topic:
        return RETRY_V2_MARK
    if stored_topic.startswith(RETRY_PREFIX):
        return RETRY_MARK
    return NORMAL_MARK


def stored_topic_of(mark: str, group: str, topic: str) -> str:
    """ExtraInfoUtil.getRealTopic: the topic a receipt's queue is of."""
    if topic.startswith(RETRY_PREFIX):
        return topic  # already the retry topic (a remoting ack names it)
    if mark == NORMAL_MARK:
        return topic
    if mark == RETRY_MARK:
        return retry_topic(group, topic)
    if mark == RETRY_V2_MARK:
        return retry_topic_v2(group, topic)
    raise ReceiptInvalid(f"topic mark {mark!r} is not 0, 1 or 2")


@dataclass(frozen=True)
class Receipt:
    """A parsed receipt handle."""

    ck_offset: int
    pop_time_ms: int
    invisible_ms: int
    revive_qid: int
    mark: str
    broker_name: str
    queue_id: int
    offset: int

    def encode(self) -> str:
        return " ".join(
            str(v)
            for v in (
                self.ck_offset,
                self.pop_time_ms,
                self.invisible_ms,
                self.revive_qid,
                self.mark,
                self.broker_name,
                self.queue_id,
                self.offset,
            )
        )

    @property
    def fifo(self) -> bool:
        return self.revive_qid == ORDER_REVIVE_QID


def parse_receipt(handle: str) -> Receipt:
    """RocketMQ's extraInfo; 7 fields (no queue offset: the ckQueueOffset is it) or 8."""
    parts = handle.split(" ")
    if len(parts) not in (7, 8):
        raise ReceiptInvalid(f"receipt handle {handle[:200]!r} has {len(parts)} fields, not 8")
    try:
        ck, pop_time, invisible, revive_qid = (int(p) for p in parts[:4])
        queue_id = int(parts[6])
        offset = int(parts[7]) if len(parts) == 8 else ck
    except ValueError:
        raise ReceiptInvalid(
            f"receipt handle {handle[:200]!r} has a field that is not a number"
        ) from None
    if parts[4] not in (NORMAL_MARK, RETRY_MARK, RETRY_V2_MARK):
        raise ReceiptInvalid(f"receipt handle {handle[:200]!r}: topic mark is not 0, 1 or 2")
    if min(ck, pop_time, invisible, queue_id, offset) < 0:
        raise ReceiptInvalid(f"receipt handle {handle[:200]!r} has a negative field")
    return Receipt(ck, pop_time, invisible, revive_qid, parts[4], parts[5], queue_id, offset)


# -- CK / ACK records --------------------------------------------------------------------


@dataclass(frozen=True)
class CheckPoint:
    """Receipts handed out (a pop, a FIFO redelivery, a changed invisible time): each of
    `offsets` of the queue is in flight until `pop_time_ms + invisible_ms`, with its
    delivery count in `attempts` (same order); `end` is the queue's next offset to pop
    after this one (offsets below it not in flight are done)."""

    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]
    attempts: tuple[int, ...]
    end: int
    pop_time_ms: int
    invisible_ms: int
    fifo: bool


@dataclass(frozen=True)
class Ack:
    """Offsets of the queue that are done (acknowledged, or revived to the retry topic)."""

    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]


PopRecord = CheckPoint | Ack


class RecordInvalid(ValueError):
    pass


def encode_record(record: PopRecord) -> tuple[str, bytes]:
    """(tag, body) of a revive-topic record."""
    if isinstance(record, CheckPoint):
        body = {
            "g": record.group,
            "t": record.topic,
            "q": record.queue_id,
            "o": list(record.offsets),
            "a": list(record.attempts),
            "e": record.end,
            "pt": record.pop_time_ms,
            "it": record.invisible_ms,
            "f": record.fifo,
        }
        return CK_TAG, json.dumps(body, separators=(",", ":")).encode()
    body = {"g": record.group, "t": record.topic, "q": record.queue_id, "o": list(record.offsets)}
    return ACK_TAG, json.dumps(body, separators=(",", ":")).encode()


def decode_record(tag: str | None, body: bytes) -> PopRecord:
    try:
        raw = json.loads(body)
        group, topic, queue_id = str(raw["g"]), str(raw["t"]), int(raw["q"])
        offsets = tuple(int(o) for o in raw["o"])
        if tag == CK_TAG:
            attempts = tuple(int(a) for a in raw["a"])
            if len(attempts) != len(offsets):
                raise RecordInvalid("a CK record's attempts and offsets differ in length")
            return CheckPoint(
                group,
                topic,
                queue_id,
                offsets,
                attempts,
                int(raw["e"]),
                int(raw["pt"]),
                int(raw["it"]),
                bool(raw["f"]),
            )
        if tag == ACK_TAG:
            return Ack(group, topic, queue_id, offsets)
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordInvalid(f"revive record is not readable: {exc}") from None
    raise RecordInvalid(f"revive record tag {tag!r} is neither {CK_TAG!r} nor {ACK_TAG!r}")
