"""apache.rocketmq.v2.MessagingService on the built-in broker: the RPCs of RocketMQ's proxy
(proxy/grpc/v2), each a thin edge over the core the remoting port uses.

- QueryRoute / QueryAssignment: the topic's queues (the topic table, `DeclaredTopics`) on
  one broker, the group's, whose endpoints are the access point the client asked through
  (as the proxy in cluster mode answers): the group's stable master endpoint, so an SDK
  follows a failover without a route refresh (docs/grpc.md).
- SendMessage: `convert.store_sends`, then the one produce path (`start_send_batch`); a
  delivery timestamp goes through the schedule admission (`ScheduledSends.redirect`), a
  message group to its queue (`convert.queue_for_group`). A broker that may not take writes
  answers INTERNAL_SERVER_ERROR, which the SDKs retry.
- ReceiveMessage / AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue:
  through the broker's POP service (`consumption.PopConsumption`), NOT_IMPLEMENTED without.
- A transactional send (MessageType TRANSACTION) is stored as a half message by the
  transaction package's rules (`transaction.rules.half_send`: RMQ_SYS_TRANS_HALF_TOPIC,
  REAL_TOPIC / REAL_QID, PGROUP = the topic); EndTransaction ends it through the transaction
  service's `end_transaction`, the check-back goes over Telemetry (transactions.py).
  NOT_IMPLEMENTED on a broker without a transaction service.
- Telemetry: the settings exchange (the client's settings merged with the proxy's defaults,
  `client_settings`) and the server's commands to the client (RecoverOrphanedTransaction-
  Command); metrics and other commands from the client are accepted and ignored.
- Heartbeat / NotifyClientTermination: OK (a client's settings are forgotten at its end).

Every RPC needs the x-mq-client-id header (the proxy's CLIENT_ID_REQUIRED); the signature is
checked before any of this runs (server.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from brokergroup_broker.grpc_front import client_settings, convert
from brokergroup_broker.grpc_front.consumption import stored_to_v2
from brokergroup_broker.grpc_front.convert import GrpcRefusal
from brokergroup_broker.grpc_front.definitions import pb, service_grpc, service_pb
from brokergroup_broker.grpc_front.transactions import TelemetryChecks, TransactionIds, end_request
from brokergroup_broker.metadata.configs import PERM_READ, PERM_WRITE
from brokergroup_broker.protocol.messages import (
    BrokerError,
    ErrorResponse,
    Response,
    SendBatch,
    SendRunResult,
)
from brokergroup_broker.remoting_front.topics import DeclaredTopics
from brokergroup_broker.schedule import rules as schedule_rules
from brokergroup_broker.schedule.admission import ScheduledSends
from brokergroup_broker.transaction import rules as tx_rules
from brokergroup_broker.transaction.service import TransactionService
from brokergroup_remoting import ResponseCode as RemotingCode
from brokergroup_remoting import names
from brokergroup_remoting.fields import RequestRefused

log = logging.getLogger(__name__)

#: Topic attribute message.type (TopicMessageType) → the v2 types its queues accept.
_ACCEPTED_TYPES: dict[str, tuple[int, ...]] = {
    "NORMAL": (pb.NORMAL,),
    "FIFO": (pb.FIFO,),
    "DELAY": (pb.DELAY,),
    "TRANSACTION": (pb.TRANSACTION,),
}
_ANY_TYPE = (pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class SendPath(Protocol):
    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...


@dataclass(frozen=True)
class GrpcSettings:
    broker_name: str
    auto_create_topic: bool
    default_queue_nums: int
    default_endpoint: tuple[str, int]
    """Route endpoints when a request names none (the broker's own gRPC address)."""


def _status(code: int, message: str | None = None) -> Any:
    return convert.status(code, message, pb)


def _peer_host(peer: str) -> str | None:
    """`ipv4:127.0.0.1:5555` → `127.0.0.1:5555` (the proxy's remote address)."""
    kind, _, rest = peer.partition(":")
    return rest if kind in ("ipv4", "ipv6") and rest else None


def _scheme_of(host: str) -> int:
    if host.replace(".", "").isdigit():
        return int(pb.IPv4)
    return int(pb.IPv6 if ":" in host else pb.DOMAIN_NAME)


class MessagingService(service_grpc.MessagingServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        produce: SendPath,
        topics: DeclaredTopics,
        settings: GrpcSettings,
        *,
        scheduling: ScheduledSends | None = None,
        consumption: Any = None,
        transactions: TransactionService | None = None,
        wall_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self._produce = produce
        self._topics = topics
        self._settings = settings
        self._scheduling = scheduling
        self._consumption = consumption
        self._wall_ms = wall_ms
        #: Client id → the settings it sent over Telemetry (bounded by the live clients).
        self.client_settings: dict[str, Any] = {}
        self._transactions = transactions
        self.transaction_ids = TransactionIds()
        self.telemetry = TelemetryChecks(
            ids=self.transaction_ids,
            settings_of=self.client_settings,
            to_v2_message=stored_to_v2,
            now_ms=wall_ms,
        )
        if transactions is not None:
            transactions.attach_checks(self.telemetry)

    # ------------------------------------------------------------------ routes

    def _endpoints(self, requested: Any) -> Any:
        if requested is not None and len(requested.addresses):
            return pb.Endpoints(scheme=requested.scheme, addresses=list(requested.addresses))
        host, port = self._settings.default_endpoint
        return pb.Endpoints(scheme=_scheme_of(host), addresses=[pb.Address(host=host, port=port)])

    async def _route_of(self, topic: str) -> tuple[int, int, int, tuple[int, ...]] | None:
        """(read queues, write queues, perm, accepted types), None: no such topic."""
        config = self._topics.config(topic)
        if config is not None:
            kind = config.attributes.get("message.type", "")
            accepted = _ACCEPTED_TYPES.get(kind, _ANY_TYPE)
            return config.read_queue_nums, config.write_queue_nums, config.perm, accepted
        if self._topics.known(topic):
            count = await self._topics.queue_count(topic)
            return count, count, PERM_READ | PERM_WRITE, _ANY_TYPE
        if self._settings.auto_create_topic:
            # The name server's TBW102 route: the topic is created on its first send.
            n = self._settings.default_queue_nums
            return n, n, PERM_READ | PERM_WRITE, _ANY_TYPE
        return None

    def _broker(self, endpoints: Any) -> Any:
        return pb.Broker(name=self._settings.broker_name, id=0, endpoints=endpoints)

    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            _require_client_id(context)
            topic = _topic_name(request.topic)
            route = await self._route_of(topic)
            if route is None:
                raise GrpcRefusal(convert.TOPIC_NOT_FOUND, f"topic {topic} not found")
        except GrpcRefusal as exc:
            return service_pb.QueryRouteResponse(status=_status(exc.code, exc.message))
        read, write, perm, accepted = route
        broker = self._broker(self._endpoints(request.endpoints))
        queues = []
        for queue_id, permission in enumerate(_queue_permissions(read, write, perm)):
            queues.append(
                pb.MessageQueue(
                    topic=request.topic,
                    id=queue_id,
                    permission=permission,
                    broker=broker,
                    accept_message_types=list(accepted),
                )
            )
        return service_pb.QueryRouteResponse(status=_status(convert.OK), message_queues=queues)

    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        try:
            _require_client_id(context)
            topic = _topic_name(request.topic)
            _group_name(request.group)
            route = await self._route_of(topic)
            if route is None:
                raise GrpcRefusal(convert.TOPIC_NOT_FOUND, f"topic {topic} not found")
        except GrpcRefusal as exc:
            return service_pb.QueryAssignmentResponse(status=_status(exc.code, exc.message))
        read, _write, perm, _accepted = route
        if not perm & PERM_READ or read <= 0:
            return service_pb.QueryAssignmentResponse(
                status=_status(convert.FORBIDDEN, "no readable queue")
            )
        broker = self._broker(self._endpoints(request.endpoints))
        # POP consumption: one assignment of the whole topic (queue -1), as the proxy does
        # for a group that is not consumeMessageOrderly.
        queue = pb.MessageQueue(
            topic=request.topic, id=-1, permission=_permission_of(perm), broker=broker
        )
        return service_pb.QueryAssignmentResponse(
            status=_status(convert.OK), assignments=[pb.Assignment(message_queue=queue)]
        )

    # ------------------------------------------------------------------ sends

    async def SendMessage(self, request: Any, context: Any) -> Any:
        try:
            _require_client_id(context)
            for message in request.messages:
                _topic_name(message.topic)
            sends = convert.store_sends(
                request.messages, _peer_host(context.peer()), self._wall_ms()
            )
            entries = await self._send(sends)
        except GrpcRefusal as exc:
            return service_pb.SendMessageResponse(status=_status(exc.code, exc.message))
        code = convert.merged_code(e.status.code for e in entries)
        return service_pb.SendMessageResponse(status=_status(code), entries=entries)

    async def _send(self, sends: list[convert.StoreSend]) -> list[Any]:
        first = sends[0]
        topic = first.topic
        prepared = any(s.sys_flag & convert.TRANSACTION_PREPARED_TYPE for s in sends)
        if prepared and self._transactions is None:
            raise GrpcRefusal(
                convert.NOT_IMPLEMENTED, "transactional messages are off on this broker"
            )
        if prepared and len(sends) > 1:
            raise GrpcRefusal(convert.BAD_REQUEST, "a batch cannot be a transactional message")
        if self._transactions is not None and topic in tx_rules.SYSTEM_TOPICS:
            raise GrpcRefusal(convert.FORBIDDEN, f"Sending message to topic[{topic}] is forbidden.")
        new_topic = not self._topics.known(topic)
        group_topic = topic.startswith(
            (names.RETRY_GROUP_TOPIC_PREFIX, names.DLQ_GROUP_TOPIC_PREFIX)
        )
        if new_topic and not self._settings.auto_create_topic and not group_topic:
            raise GrpcRefusal(
                convert.TOPIC_NOT_FOUND,
                f"topic {topic} not found (autoCreateTopicEnable is off on this broker)",
            )
        queue_id: int | None = None
        if len(sends) == 1 and first.message_group:
            queue_id = convert.queue_for_group(first.message_group, await self._write_queues(topic))
        props = [s.properties for s in sends]
        store_topic, store_queue = topic, queue_id
        sys_flag = first.sys_flag
        # A half message is not scheduled (the remoting front's rule too).
        scheduled = not prepared and any(schedule_rules.is_scheduled(p) for p in props)
        if scheduled:
            scheduling = self._scheduling
            if scheduling is None:
                raise GrpcRefusal(
                    convert.NOT_IMPLEMENTED,
                    "scheduled (delay/timer) messages are off on this broker",
                )
            if len(sends) > 1:
                raise GrpcRefusal(
                    convert.BAD_REQUEST, "TimeDelayLevel is not supported for batching"
                )
            try:
                schedule_rules.refuse_system_topic(topic)
                redirect = scheduling.redirect(topic, queue_id, props[0])
            except RequestRefused as exc:
                raise GrpcRefusal(convert.ILLEGAL_DELIVERY_TIME, exc.remark or "refused") from exc
            if redirect is not None:
                store_topic, store_queue, props = (
                    redirect.topic,
                    redirect.queue_id,
                    [redirect.properties],
                )
        if prepared:
            half = tx_rules.half_send(topic, queue_id, props[0], sys_flag)
            store_topic, store_queue, props = half.topic, half.queue_id, [half.properties]
            sys_flag = half.sys_flag
        batch = SendBatch(
            store_topic,
            store_queue,
            [s.body for s in sends],
            [(None, None, p) for p in props],
            sys_flag=sys_flag,
            born_timestamp_ms=first.born_timestamp_ms,
            reconsume_times=int(first.properties.get(convert.PROPERTY_RECONSUME_TIME, "0")),
        )
        response = await self._store(batch)
        if isinstance(response, ErrorResponse):
            code = convert.status_of_broker_code(response.code)
            failed = _status(code, f"send message failed: {response.code.name}: {response.message}")
            return [service_pb.SendResultEntry(status=failed) for _ in sends]
        assert isinstance(response, SendRunResult)
        if new_topic:
            self._topics.stored_first(topic)
        ok = _status(convert.OK)
        if prepared:
            # The proxy's TransactionData: EndTransaction names the half by this id only.
            self.transaction_ids.add(
                topic, first.message_id, response.first_queue_offset,
                response.physical_offsets[0], self._wall_ms(),
            )  # fmt: skip
        return [
            service_pb.SendResultEntry(
                status=ok,
                message_id=s.message_id,
                offset=response.first_queue_offset + i,
                transaction_id=s.message_id if prepared else "",
            )
            for i, s in enumerate(sends)
        ]

    async def _write_queues(self, topic: str) -> int:
        config = self._topics.config(topic)
        if config is not None and config.write_queue_nums > 0:
            return config.write_queue_nums
        count = await self._topics.queue_count(topic)
        return count if count > 0 else self._settings.default_queue_nums

    async def _store(self, batch: SendBatch) -> Response:
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def reply(response: Response) -> None:
            if not future.done():
                future.set_result(response)

        try:
            self._produce.start_send_batch(batch, reply)
        except BrokerError as exc:
            return ErrorResponse(0, exc.code, exc.message, exc.master_address)
        return await future

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        """EndTransactionActivity + TransactionProcessor: the half message this front end
        holds for (topic, transaction id), ended by the transaction service."""
        try:
            _require_client_id(context)
            topic = _topic_name(request.topic)
            transaction_id = str(request.transaction_id)
            if not transaction_id.strip():
                raise GrpcRefusal(convert.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
            service = self._transactions
            if service is None:
                raise GrpcRefusal(convert.NOT_IMPLEMENTED, "transactions are off on this broker")
            data = self.transaction_ids.take(topic, transaction_id, self._wall_ms())
            if data is None:
                raise GrpcRefusal(convert.INTERNAL_SERVER_ERROR, "cannot found transaction data")
            try:
                outcome = await service.end_transaction(end_request(request, data))
            except RequestRefused as exc:
                self.transaction_ids.put_back(topic, transaction_id, data)
                raise GrpcRefusal(_end_refusal_code(exc.code), exc.remark or "refused") from exc
            if outcome is not None and outcome.error is not None:
                self.transaction_ids.put_back(topic, transaction_id, data)
                error = outcome.error
                raise GrpcRefusal(
                    convert.status_of_broker_code(error.code),
                    f"end transaction failed: {error.code.name}: {error.message}",
                )
            if outcome is None:
                # TRANSACTION_RESOLUTION_UNSPECIFIED: still open; its check names it again.
                self.transaction_ids.put_back(topic, transaction_id, data)
        except GrpcRefusal as exc:
            log.info("EndTransaction of %s refused: %s", request.transaction_id, exc.message)
            return service_pb.EndTransactionResponse(status=_status(exc.code, exc.message))
        return service_pb.EndTransactionResponse(status=_status(convert.OK))

    # ------------------------------------------------------------------ clients

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        try:
            _require_client_id(context)
            if request.HasField("group"):
                _group_name(request.group)
        except GrpcRefusal as exc:
            return service_pb.HeartbeatResponse(status=_status(exc.code, exc.message))
        return service_pb.HeartbeatResponse(status=_status(convert.OK))

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        try:
            client_id = _require_client_id(context)
        except GrpcRefusal as exc:
            return service_pb.NotifyClientTerminationResponse(status=_status(exc.code, exc.message))
        self.client_settings.pop(client_id, None)
        return service_pb.NotifyClientTerminationResponse(status=_status(convert.OK))

    async def Telemetry(self, request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        try:
            client_id = _require_client_id(context)
        except GrpcRefusal as exc:
            yield service_pb.TelemetryCommand(status=_status(exc.code, exc.message))
            return
        # The client's commands are read by a task of their own, so the server's (a
        # transaction check) are written between them; None ends the stream.
        outbox = self.telemetry.open(client_id)
        reader = asyncio.ensure_future(self._read_telemetry(client_id, request_iterator, outbox))
        try:
            while True:
                command = await outbox.get()
                if command is None:
                    break
                yield command
        finally:
            reader.cancel()
            if self.telemetry.close(client_id, outbox):
                # A reconnected client's newer stream keeps its settings.
                self.client_settings.pop(client_id, None)

    async def _read_telemetry(
        self, client_id: str, request_iterator: Any, outbox: asyncio.Queue[Any]
    ) -> None:
        try:
            async for command in request_iterator:
                if command.HasField("settings"):
                    merged = client_settings.merge(
                        command.settings, self._retry_max_times, self._orderly
                    )
                    self.client_settings[client_id] = merged
                    # An answer to the client's own command waits for room; never dropped.
                    await outbox.put(
                        service_pb.TelemetryCommand(status=_status(convert.OK), settings=merged)
                    )
                # Thread stack traces, verify results, metrics: accepted and ignored.
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            log.debug("telemetry of %s ended: %r", client_id, exc)
        finally:
            # Room or not, the end is seen: the writer drains the outbox.
            while True:
                try:
                    outbox.put_nowait(None)
                    break
                except asyncio.QueueFull:
                    outbox.get_nowait()

    def _retry_max_times(self, group: str) -> int | None:
        config = self._topics.metadata.groups.get(group)
        return None if config is None else config.retry_max_times

    def _orderly(self, group: str) -> bool:
        config = self._topics.metadata.groups.get(group)
        return config is not None and config.consume_message_orderly

    # ------------------------------------------------------------------ consumption

    def _consuming(self, context: Any, topic: Any, group: Any) -> tuple[Any, str, str]:
        """The POP consumption and the checked topic and group names of a consumer's call,
        or GrpcRefusal (no client id, a bad name, no POP service on this broker)."""
        _require_client_id(context)
        topic_name, group_name = _topic_name(topic), _group_name(group)
        if self._consumption is None:
            raise GrpcRefusal(convert.NOT_IMPLEMENTED, "POP consumption is not on this broker")
        return self._consumption, topic_name, group_name

    async def ReceiveMessage(self, request: Any, context: Any) -> AsyncIterator[Any]:
        try:
            consumption, topic, group = self._consuming(
                context, request.message_queue.topic, request.group
            )
        except GrpcRefusal as exc:
            yield service_pb.ReceiveMessageResponse(status=_status(exc.code, exc.message))
            return
        async for response in consumption.receive(request, group, topic, context):
            yield response

    async def AckMessage(self, request: Any, context: Any) -> Any:
        try:
            consumption, _, _ = self._consuming(context, request.topic, request.group)
        except GrpcRefusal as exc:
            return service_pb.AckMessageResponse(status=_status(exc.code, exc.message))
        return await consumption.ack(request)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        try:
            consumption, _, _ = self._consuming(context, request.topic, request.group)
        except GrpcRefusal as exc:
            return service_pb.ChangeInvisibleDurationResponse(status=_status(exc.code, exc.message))
        return await consumption.change_invisible_duration(request)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        try:
            consumption, _, _ = self._consuming(context, request.topic, request.group)
            # As the proxy: the message to %DLQ%<group> through the one produce path,
            # then, once it is stored, the receipt handle acked.
            batch = consumption.dead_letter_batch(request)
            new_topic = not self._topics.known(batch.topic)
            response = await self._store(batch)
            if isinstance(response, ErrorResponse):
                raise GrpcRefusal(
                    convert.status_of_broker_code(response.code),
                    f"forward to dead letter queue failed: {response.code.name}: "
                    f"{response.message}",
                )
            if new_topic:
                self._topics.stored_first(batch.topic)
        except GrpcRefusal as exc:
            return service_pb.ForwardMessageToDeadLetterQueueResponse(
                status=_status(exc.code, exc.message)
            )
        return service_pb.ForwardMessageToDeadLetterQueueResponse(
            status=await consumption.ack_one(request)
        )


def _end_refusal_code(code: int) -> int:
    """The transaction service's refusal of an end as an apache.rocketmq.v2.Code: a broker
    that is not the master, or a new master still reading, is retryable."""
    if code == RemotingCode.SLAVE_NOT_AVAILABLE:
        return convert.INTERNAL_SERVER_ERROR
    if code == RemotingCode.SYSTEM_BUSY:
        return convert.TOO_MANY_REQUESTS
    if code == RemotingCode.ILLEGAL_OPERATION:
        return convert.FORBIDDEN
    return convert.BAD_REQUEST


def _require_client_id(context: Any) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == "x-mq-client-id" and value:
            return str(value)
    raise GrpcRefusal(convert.CLIENT_ID_REQUIRED, "client id cannot be empty")


def _topic_name(resource: Any) -> str:
    name = str(resource.name)
    error = names.topic_error(name) if name else "topic name cannot be empty"
    if error is not None:
        raise GrpcRefusal(convert.ILLEGAL_TOPIC, error)
    return name


def _group_name(resource: Any) -> str:
    name = str(resource.name)
    error = names.group_error(name) if name else "consumer group cannot be empty"
    if error is not None:
        raise GrpcRefusal(convert.ILLEGAL_CONSUMER_GROUP, error)
    return name


def _permission_of(perm: int) -> int:
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        return int(pb.READ_WRITE)
    return int(pb.READ if readable else pb.WRITE if writable else pb.NONE)


def _queue_permissions(read: int, write: int, perm: int) -> list[int]:
    """RouteActivity.genMessageQueueFromQueueData: read-only queues first, then write-only,
    then read-write, ids counted across them."""
    readable, writable = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
    if readable and writable:
        both = min(read, write)
        return [pb.READ] * (read - both) + [pb.WRITE] * (write - both) + [pb.READ_WRITE] * both
    if writable:
        return [pb.WRITE] * write
    if readable:
        return [pb.READ] * read
    return [pb.NONE] * max(1, read, write)
