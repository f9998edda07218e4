"""The POP codes of the broker's remoting port, over `pop.service.PopService`
(docs/pop.md): POP_MESSAGE (with long polling), ACK_MESSAGE, BATCH_ACK_MESSAGE and
CHANGE_MESSAGE_INVISIBLETIME, with RocketMQ 5.3's headers and bodies
(PopMessageRequestHeader/ResponseHeader, AckMessageRequestHeader,
BatchAckMessageRequestBody, ChangeInvisibleTimeRequestHeader/ResponseHeader).

A POP answer's body is the records as stored, as PopMessageProcessor sends them; its
startOffsetInfo / msgOffsetInfo / orderCountInfo let the client build each message's
POP_CK (ExtraInfoUtil), the receipt handle it acks with.

Filters: the subscription (expType TAG or SQL92, exp) through the server-side filter package
(filter/`compile_filter`, as pulls use it): a message it does not match is skipped (done);
an expression it cannot compile is refused SUBSCRIPTION_PARSE_FAILED, as PopMessageProcessor
refuses it. As there, a SQL92 pop is served whatever enablePropertyFilter says (that switch
guards pulls and heartbeats).
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping

from brokergroup_broker.filter import FilterRefused, compile_filter
from brokergroup_broker.pop import records as rec
from brokergroup_broker.pop.service import PopError, PopErrorKind, PopResult, PopService
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import decode_json_object
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import RequestRefused
from brokergroup_remoting.net import Connection

#: ConsumeInitMode.MIN: a queue the group never consumed is read from its first message.
INIT_MODE_MIN = 0

_REFUSAL_CODE: dict[PopErrorKind, int] = {
    PopErrorKind.ILLEGAL_ARGUMENT: ResponseCode.SYSTEM_ERROR,
    PopErrorKind.RECEIPT_INVALID: ResponseCode.NO_MESSAGE,
    PopErrorKind.RECEIPT_EXPIRED: ResponseCode.NO_MESSAGE,
    PopErrorKind.IN_FLIGHT_FULL: ResponseCode.POLLING_FULL,
    PopErrorKind.POLLING_FULL: ResponseCode.POLLING_FULL,
    PopErrorKind.NOT_READY: ResponseCode.SYSTEM_BUSY,
}


def refusal(exc: PopError) -> RequestRefused:
    return RequestRefused(_REFUSAL_CODE[exc.kind], exc.message)


def subscription_filter(
    exp_type: str | None, exp: str | None
) -> Callable[[Mapping[str, str]], bool] | None:
    """A pop's subscription as a predicate on a message's properties (None: all; no
    expression is TAG `*`, as PopMessageProcessor builds it)."""
    if exp is None or exp == "":
        return None
    try:
        matcher = compile_filter(exp_type, exp)
    except FilterRefused as exc:
        raise RequestRefused(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"parse the consumer's subscription failed: {exc}",
        ) from exc
    return None if matcher.matches_all else matcher.matches


class PopHandlers:
    """The POP part of the remoting front (front.py registers `table`)."""

    def __init__(self, service: PopService, *, max_poll_ms: int = 30_000) -> None:
        self._service = service
        self._max_poll_ms = max_poll_ms

    def table(
        self,
    ) -> dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]]:
        return {
            RequestCode.POP_MESSAGE: self.pop_message,
            RequestCode.ACK_MESSAGE: self.ack_message,
            RequestCode.BATCH_ACK_MESSAGE: self.batch_ack_message,
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change_invisible_time,
        }

    async def pop_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        f = cmd.fields()
        group = header.text(f, "consumerGroup")
        topic = header.text(f, "topic")
        queue_id = header.int32(f, "queueId")
        max_nums = header.int32(f, "maxMsgNums")
        invisible_ms = header.int64(f, "invisibleTime")
        poll_ms = header.int64(f, "pollTime", low=0)
        init_mode = header.optional_int32(f, "initMode", INIT_MODE_MIN)
        fifo = header.boolean(f, "order")
        predicate = subscription_filter(
            header.optional_text(f, "expType"), header.optional_text(f, "exp")
        )
        try:
            result = await self._service.pop(
                group,
                topic,
                None if queue_id < 0 else queue_id,
                max_nums,
                invisible_ms,
                min(poll_ms, self._max_poll_ms),
                fifo=fifo,
                filter=predicate,
                init_from_min=init_mode == INIT_MODE_MIN,
            )
        except PopError as exc:
            raise refusal(exc) from None
        fields = {
            "popTime": str(result.pop_time_ms),
            "invisibleTime": str(result.invisible_ms),
            "reviveQid": str(result.revive_qid),
            "restNum": str(result.rest_num),
        }
        if not result.messages:
            code = ResponseCode.POLLING_TIMEOUT if poll_ms > 0 else ResponseCode.PULL_NOT_FOUND
            return response_to(cmd, code, "no new message", fields)
        fields.update(offset_infos(result))
        body = b"".join(p.record for p in result.messages)
        return response_to(cmd, ResponseCode.SUCCESS, None, fields, body)

    async def ack_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        f = cmd.fields()
        group = header.text(f, "consumerGroup")
        topic = header.text(f, "topic")
        header.int32(f, "queueId")
        header.int64(f, "offset")
        extra_info = header.text(f, "extraInfo")
        try:
            await self._service.ack(group, topic, extra_info)
        except PopError as exc:
            raise refusal(exc) from None
        return response_to(cmd, ResponseCode.SUCCESS)

    async def batch_ack_message(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        body = decode_json_object(cmd.body or b"", "BatchAckMessageRequestBody")
        broker_name = str(body.get("brokerName") or self._service.broker_name)
        acks = body.get("acks") or []
        if not isinstance(acks, list):
            raise RequestRefused(ResponseCode.SYSTEM_ERROR, "acks is not a list")
        by_group: dict[tuple[str, str], list[str]] = {}
        for ack in acks:
            for (group, topic), handle in batch_ack_handles(ack, broker_name):
                by_group.setdefault((group, topic), []).append(handle)
        failed = 0
        for (group, topic), handles in by_group.items():
            errors = await self._service.ack_batch(group, topic, handles)
            failed += sum(1 for e in errors if e is not None)
        if failed:
            return response_to(cmd, ResponseCode.NO_MESSAGE,
                               f"{failed} of the acknowledged messages were not in flight")  # fmt: skip
        return response_to(cmd, ResponseCode.SUCCESS)

    async def change_invisible_time(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        f = cmd.fields()
        group = header.text(f, "consumerGroup")
        topic = header.text(f, "topic")
        header.int32(f, "queueId")
        header.int64(f, "offset")
        extra_info = header.text(f, "extraInfo")
        invisible_ms = header.int64(f, "invisibleTime")
        try:
            handle = await self._service.change_invisible(group, topic, extra_info, invisible_ms)
        except PopError as exc:
            raise refusal(exc) from None
        receipt = rec.parse_receipt(handle)
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            None,
            {
                "popTime": str(receipt.pop_time_ms),
                "invisibleTime": str(receipt.invisible_ms),
                "reviveQid": str(receipt.revive_qid),
            },
        )


def offset_infos(result: PopResult) -> dict[str, str]:
    """startOffsetInfo, msgOffsetInfo and (FIFO) orderCountInfo as ExtraInfoUtil builds
    them: per (topic mark, queue) the CK's start offset and the messages' offsets."""
    starts: dict[tuple[str, int], int] = {}
    offsets: dict[tuple[str, int], list[int]] = {}
    counts: list[str] = []
    for popped in result.messages:
        receipt = rec.parse_receipt(popped.receipt_handle)
        key = (receipt.mark, receipt.queue_id)
        starts.setdefault(key, receipt.ck_offset)
        offsets.setdefault(key, []).append(receipt.offset)
        counts.append(f"{receipt.mark} qo{receipt.queue_id}%{receipt.offset} {popped.attempts}")
    out = {
        "startOffsetInfo": ";".join(f"{m} {q} {o}" for (m, q), o in starts.items()),
        "msgOffsetInfo": ";".join(
            f"{m} {q} {','.join(map(str, o))}" for (m, q), o in offsets.items()
        ),
    }
    if result.revive_qid == rec.ORDER_REVIVE_QID:
        out["orderCountInfo"] = ";".join(counts)
    return out


def batch_ack_handles(ack: object, broker_name: str) -> list[tuple[tuple[str, str], str]]:
    """One BatchAck ({c, t, r, so, q, rq, pt, it, b}: b the acknowledged offsets' bits
    from `so`, BitSet.toByteArray in base64) as receipt handles."""
    if not isinstance(ack, dict):
        raise RequestRefused(ResponseCode.SYSTEM_ERROR, "a BatchAck is not an object")
    try:
        group = str(ack.get("c", ack.get("consumerGroup")))
        topic = str(ack.get("t", ack.get("topic")))
        mark = str(ack.get("r", ack.get("retry", rec.NORMAL_MARK)))
        start = int(ack.get("so", ack.get("startOffset")))  # type: ignore[arg-type]
        queue_id = int(ack.get("q", ack.get("queueId")))  # type: ignore[arg-type]
        revive_qid = int(ack.get("rq", ack.get("reviveQueueId", 0)))  # type: ignore[arg-type]
        pop_time = int(ack.get("pt", ack.get("popTime")))  # type: ignore[arg-type]
        invisible = int(ack.get("it", ack.get("invisibleTime")))  # type: ignore[arg-type]
        bits = base64.b64decode(str(ack.get("b", ack.get("bitSet", ""))), validate=True)
    except (TypeError, ValueError) as exc:
        raise RequestRefused(
            ResponseCode.SYSTEM_ERROR, f"a BatchAck is not readable: {exc}"
        ) from None
    out = []
    for i in range(len(bits) * 8):
        if bits[i // 8] >> (i % 8) & 1:
            receipt = rec.Receipt(start, pop_time, invisible, revive_qid, mark, broker_name,
                                  queue_id, start + i)  # fmt: skip
            out.append(((group, topic), receipt.encode()))
    return out
