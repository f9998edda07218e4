"""Transactional messages on the broker's remoting port: END_TRANSACTION (37) and the
broker's CHECK_TRANSACTION_STATE (39) to a producer (docs/transactions.md).

END_TRANSACTION's header (EndTransactionRequestHeader: producerGroup, tranStateTableOffset,
commitLogOffset, commitOrRollback, fromTransactionCheck, msgId, transactionId) is decoded here
and handed to the transaction service (`TransactionService.end_transaction`, which a gRPC
EndTransaction calls too); its refusals are RequestRefused, and a refusal of the produce path
is RocketMQ's send code (`wire.SEND_CODE_OF`). A stock producer sends it oneway, so the answer
mostly goes nowhere: what is not ended stays a half message until its check.

`ProducerCheckSender` is the service's `ProducerChecks`: as Broker2Client.
checkProducerTransactionState, a oneway CHECK_TRANSACTION_STATE goes to one live producer
connection of the half message's group (ProducerManager.getAvailableChannel: the producers of
the group that heartbeat here; we take them in turn by the check's number rather than at
random), with the header AbstractTransactionalMessageCheckListener.sendCheckMessage fills
(topic: the half topic; commitLogOffset; tranStateTableOffset; msgId and transactionId: the
UNIQ_KEY; offsetMsgId; brokerName) and the message as its body (MessageDecoder.encode of the
half message with its real topic and queue, and TRANSACTION_CHECK_TIMES).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from brokergroup_broker.remoting_front import wire
from brokergroup_broker.remoting_front.clients import ProducerGroups
from brokergroup_broker.store.message import MessageInput
from brokergroup_broker.store.message_encode import encode_message
from brokergroup_broker.transaction import rules as tx
from brokergroup_broker.transaction.service import (
    EndTransaction,
    HalfCheck,
    TransactionService,
)
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting import fields as header
from brokergroup_remoting.command import request, response_to
from brokergroup_remoting.net import Connection

log = logging.getLogger(__name__)

_COMMIT_OR_ROLLBACK = (
    tx.TRANSACTION_NOT_TYPE,
    tx.TRANSACTION_COMMIT_TYPE,
    tx.TRANSACTION_ROLLBACK_TYPE,
)


def end_request(fields: dict[str, str]) -> EndTransaction:
    """EndTransactionRequestHeader (checkFields: commitOrRollback is 0, 8 or 12)."""
    kind = header.int32(fields, "commitOrRollback")
    if kind not in _COMMIT_OR_ROLLBACK:
        raise header.BadField("commitOrRollback field wrong")
    return EndTransaction(
        producer_group=header.text(fields, "producerGroup"),
        tran_state_table_offset=header.int64(
            fields, "tranStateTableOffset", low=0, high=header.INT64_MAX
        ),
        commit_log_offset=header.int64(fields, "commitLogOffset", low=0, high=header.INT64_MAX),
        commit_or_rollback=kind,
        from_transaction_check=header.boolean(fields, "fromTransactionCheck"),
        msg_id=header.optional_text(fields, "msgId") or "",
        transaction_id=header.optional_text(fields, "transactionId"),
    )


class Transactions:
    """The END_TRANSACTION handler."""

    def __init__(self, service: TransactionService) -> None:
        self._service = service

    async def end_transaction(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand | None:
        end = end_request(cmd.fields())
        outcome = await self._service.end_transaction(end)
        if outcome is None:
            return None  # TRANSACTION_NOT_TYPE: RocketMQ answers nothing
        if outcome.error is not None:
            return response_to(cmd, wire.SEND_CODE_OF[outcome.error.code], outcome.error.message)
        return response_to(cmd, ResponseCode.SUCCESS)


class ProducerCheckSender:
    """Sends CHECK_TRANSACTION_STATE to a live producer of a group (`ProducerChecks`)."""

    def __init__(
        self,
        *,
        broker_name: str,
        producers: ProducerGroups,
        connection: Callable[[int], Connection | None],
        clock_ms: Callable[[], int],
    ) -> None:
        self._broker_name = broker_name
        self._producers = producers
        self._connection = connection
        self._clock_ms = clock_ms
        self._sending: set[asyncio.Task[None]] = set()

    def check_producer(self, check: HalfCheck) -> bool:
        now = self._clock_ms()
        live = []
        for client_id in self._producers.members(check.producer_group, now):
            key = self._producers.connection_of(check.producer_group, client_id, now)
            conn = None if key is None else self._connection(key)
            if conn is not None:
                live.append(conn)
        if not live:
            return False
        conn = live[check.check_times % len(live)]
        cmd = check_request(check, self._broker_name)

        async def send() -> None:
            try:
                await conn.invoke_oneway(cmd)
            except (ConnectionError, OSError) as exc:
                log.info("transactions: check to %s failed: %r", conn.peer, exc)

        task = asyncio.ensure_future(send())
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)
        return True


def check_request(check: HalfCheck, broker_name: str) -> RemotingCommand:
    """The oneway CHECK_TRANSACTION_STATE for one half message."""
    half = check.message
    props = dict(half.properties)
    props[tx.PROPERTY_TRANSACTION_CHECK_TIMES] = str(check.check_times)
    uniq = props.get(tx.PROPERTY_UNIQ_KEY, "")
    real_queue = tx.real_queue_of(props)
    body = encode_message(
        MessageInput(
            topic=props.get(tx.PROPERTY_REAL_TOPIC) or half.topic,
            queue_id=0 if real_queue is None else real_queue,
            body=half.body,
            properties=props,
            flag=half.flag,
            born_timestamp_ms=half.born_timestamp_ms,
            born_host=half.born_host,
        ),
        queue_offset=half.queue_offset,
        physical_offset=half.physical_offset,
        store_host=half.store_host,
        store_timestamp_ms=half.store_timestamp_ms,
        reconsume_times=half.reconsume_times,
        sys_flag=half.sys_flag,
    )
    fields = {
        "topic": half.topic,
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(half.physical_offset),
        "msgId": uniq,
        "transactionId": uniq,
        "offsetMsgId": wire.offset_message_id(half.store_host, half.physical_offset),
        "brokerName": broker_name,
    }
    return request(RequestCode.CHECK_TRANSACTION_STATE, 0, fields, body, oneway=True)
