"""Transactional messages: RocketMQ 5.3's names and record rules (pure).

A transactional producer sends a *half* message: property TRAN_MSG=true (and the prepared
bit in its sysFlag) with its producer group in PGROUP. The broker stores it under
RMQ_SYS_TRANS_HALF_TOPIC queue 0 with its real topic and queue in REAL_TOPIC / REAL_QID and
the transaction bits of its sysFlag cleared (TransactionalMessageBridge.parseHalfMessageInner),
so no consumer of the real topic sees it.

END_TRANSACTION ends it (EndTransactionProcessor): a commit stores the message again under
REAL_TOPIC / REAL_QID with the commit type in its sysFlag (MessageSysFlag.resetTransactionValue)
and every property kept — RocketMQ clears REAL_TOPIC, REAL_QID and TRAN_MSG only after it
wrote the properties string, so the stored record keeps them, and so do we; a rollback stores
nothing for consumers. Either writes an *op* record: RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0
(the half's queue), tag "d" (TransactionalMessageUtil.REMOVE_TAG), body the half queue
offsets it resolves, each followed by "," (getOpMessage's format).

A half message with no op record older than transactionTimeOut (or its
CHECK_IMMUNITY_TIME_IN_SECONDS, never less) is checked back: CHECK_TRANSACTION_STATE to a
live producer of its group, at most transactionCheckMax times, then discarded to
TRANS_CHECK_MAX_TIME_TOPIC queue 0. RocketMQ counts the checks by storing the half message
again with TRANSACTION_CHECK_TIMES; we count them with op records of our own tag "c" (same
body format), so a half message keeps its one queue offset for life (docs/transactions.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from brokergroup_remoting import ResponseCode
from brokergroup_remoting.fields import RequestRefused

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
"""TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC: half messages, queue 0."""
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
"""TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC: op records, queue = the half's queue (0)."""
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
"""TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC: discarded half messages, queue 0."""
HALF_QUEUE = 0
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"
"""MixAll.CID_SYS_RMQ_TRANS: the progress on HALF_TOPIC and OP_TOPIC, as its offsets."""
REMOVE_TAG = "d"
"""TransactionalMessageUtil.REMOVE_TAG: an op record that resolves half messages."""
CHECK_TAG = "c"
"""Ours: an op record that counts one check of each half message it lists."""
OFFSET_SEPARATOR = ","

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_TAGS = "TAGS"
TRANSACTION_ID = "__transactionId__"
"""TransactionalMessageUtil.TRANSACTION_ID: the half's UNIQ_KEY, kept by the broker."""

#: MessageSysFlag's transaction type, bits 2-3.
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
TRANSACTION_TYPE_MASK = TRANSACTION_ROLLBACK_TYPE

#: Topics a client may not send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
SYSTEM_TOPICS = frozenset({HALF_TOPIC, OP_TOPIC, CHECK_MAX_TOPIC})


@dataclass(frozen=True)
class TransactionRules:
    """The broker settings transactions follow (core/config.py, RocketMQ's defaults)."""

    timeout_ms: int = 6_000
    """transactionTimeOut: a half message younger than this is not checked."""
    check_interval_ms: int = 30_000
    """transactionCheckInterval: the time between two check rounds."""
    check_max: int = 15
    """transactionCheckMax: checks of one half message before it is discarded."""


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def reset_transaction_type(sys_flag: int, kind: int) -> int:
    """MessageSysFlag.resetTransactionValue."""
    return (sys_flag & ~TRANSACTION_TYPE_MASK) | kind


def is_prepared(sys_flag: int, properties: Mapping[str, str]) -> bool:
    """Is a send a half message? SendMessageProcessor reads TRAN_MSG (Boolean.parseBoolean);
    the stock client also sets the prepared type, which alone counts too."""
    flagged = properties.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
    return flagged or transaction_type(sys_flag) == TRANSACTION_PREPARED_TYPE


def refuse_system_topic(topic: str) -> None:
    if topic in SYSTEM_TOPICS:
        raise RequestRefused(
            ResponseCode.NO_PERMISSION, f"Sending message to topic[{topic}] is forbidden."
        )


@dataclass(frozen=True)
class HalfSend:
    """Where and how a half message is stored."""

    properties: dict[str, str]
    sys_flag: int
    topic: str = HALF_TOPIC
    queue_id: int = HALF_QUEUE


def half_send(
    topic: str, queue_id: int | None, properties: Mapping[str, str], sys_flag: int
) -> HalfSend:
    """parseHalfMessageInner: the half message a prepared send is stored as. Raises
    RequestRefused (MESSAGE_ILLEGAL) without PGROUP: nobody could end or check it."""
    if not properties.get(PROPERTY_PRODUCER_GROUP):
        raise RequestRefused(
            ResponseCode.MESSAGE_ILLEGAL,
            "a transactional (half) message needs property PGROUP, its producer group",
        )
    props = dict(properties)
    uniq = props.get(PROPERTY_UNIQ_KEY)
    if uniq:
        props[TRANSACTION_ID] = uniq
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QID] = str(-1 if queue_id is None else queue_id)
    return HalfSend(props, reset_transaction_type(sys_flag, TRANSACTION_NOT_TYPE))


def real_queue_of(properties: Mapping[str, str]) -> int | None:
    """REAL_QID as a queue (None: any queue of the topic)."""
    try:
        queue = int(properties.get(PROPERTY_REAL_QID, "-1"))
    except ValueError:
        return None
    return queue if queue >= 0 else None


def check_immunity_ms(properties: Mapping[str, str], rules: TransactionRules) -> int:
    """How old a half message must be before its first check
    (TransactionalMessageUtil.getImmunityTime: never below transactionTimeOut)."""
    raw = properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS)
    try:
        asked = int(raw) * 1000 if raw is not None else 0
    except ValueError:
        asked = 0
    return max(asked, rules.timeout_ms)


def op_body(half_offsets: Iterable[int]) -> bytes:
    """An op record's body: each half queue offset followed by ','."""
    return "".join(f"{o}{OFFSET_SEPARATOR}" for o in half_offsets).encode()


def op_offsets(body: bytes) -> list[int]:
    """The half queue offsets an op record lists; unreadable items are skipped (RocketMQ's
    getLong answers -1 for them, below every offset)."""
    out = []
    for item in body.decode("utf-8", "replace").split(OFFSET_SEPARATOR):
        if item.strip().isdigit():
            out.append(int(item.strip()))
    return out
