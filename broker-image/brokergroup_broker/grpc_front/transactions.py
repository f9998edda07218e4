"""Transactional messages over gRPC: EndTransaction and the check-back over Telemetry, as
RocketMQ's proxy does them (proxy/grpc/v2/transaction/EndTransactionActivity,
processor/TransactionProcessor, service/transaction/TransactionDataManager,
grpc/v2/channel/GrpcClientChannel.processCheckTransaction). The decisions stay in the
transaction service (transaction/service.py, half_queue.py): this is the edge.

- A v2 EndTransaction names a half message by (topic, transaction id) only; the broker's
  END_TRANSACTION needs its queue offset and commit log offset. As the proxy, this front end
  keeps them per (producer group = the topic, transaction id) from the half message's send
  and from each check it sends (`TransactionIds`), for transactionDataExpireMillis (30 s),
  at most transactionDataMaxNum (15) per key, and takes them when the transaction ends. A
  transaction id it does not hold (expired, or sent through another broker before a
  failover) is answered as the proxy answers it (INTERNAL_SERVER_ERROR "cannot found
  transaction data"): the half message stays until its check, which this front end (the new
  master's) then sends and remembers.
- `TelemetryChecks` is the transaction service's `ProducerChecks` for gRPC producers: a
  RecoverOrphanedTransactionCommand (transaction id, the half message as a v2 message of its
  real topic) on the Telemetry stream of a live producer of the group (a client whose
  settings publish the topic: the proxy registers a gRPC producer under each topic it
  publishes), taken in turn by the check's number as the remoting front does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_broker.grpc_front.definitions import pb, service_pb
from brokergroup_broker.store.message import StoredMessage
from brokergroup_broker.transaction import rules as tx
from brokergroup_broker.transaction.service import EndTransaction, HalfCheck

log = logging.getLogger(__name__)

#: ProxyConfig.transactionDataExpireMillis and transactionDataMaxNum.
TRANSACTION_DATA_EXPIRE_MS = 30_000
TRANSACTION_DATA_MAX_NUM = 15
#: Live (producer group, transaction id) keys kept at most (the oldest go first).
MAX_KEYS = 65_536
#: Commands waiting to be written on one Telemetry stream.
OUTBOX_SIZE = 1024

_COMMIT_OR_ROLLBACK = {
    int(pb.COMMIT): tx.TRANSACTION_COMMIT_TYPE,
    int(pb.ROLLBACK): tx.TRANSACTION_ROLLBACK_TYPE,
}


@dataclass(frozen=True)
class HalfData:
    """Where a half message is (the proxy's TransactionData)."""

    tran_state_table_offset: int
    commit_log_offset: int
    expire_ms: int


class TransactionIds:
    """(producer group, transaction id) → the half message's offsets, bounded and expiring
    (TransactionDataManager). Times are the caller's."""

    def __init__(
        self,
        *,
        expire_ms: int = TRANSACTION_DATA_EXPIRE_MS,
        max_num: int = TRANSACTION_DATA_MAX_NUM,
        max_keys: int = MAX_KEYS,
    ) -> None:
        self._expire_ms = expire_ms
        self._max_num = max_num
        self._max_keys = max_keys
        self._data: dict[tuple[str, str], deque[HalfData]] = {}

    def add(
        self, group: str, transaction_id: str, queue_offset: int, physical_offset: int, now_ms: int
    ) -> None:
        key = (group, transaction_id)
        entries = self._data.pop(key, None) or deque(maxlen=self._max_num)
        entries.append(HalfData(queue_offset, physical_offset, now_ms + self._expire_ms))
        self._data[key] = entries  # last in insertion order: the newest key
        while len(self._data) > self._max_keys:
            del self._data[next(iter(self._data))]

    def take(self, group: str, transaction_id: str, now_ms: int) -> HalfData | None:
        """pollNoExpireTransactionData: the newest unexpired entry, removed."""
        entries = self._data.get((group, transaction_id))
        if entries is None:
            return None
        found = None
        while entries:
            data = entries.pop()
            if data.expire_ms >= now_ms:
                found = data
                break
        if not entries:
            del self._data[(group, transaction_id)]
        return found

    def put_back(self, group: str, transaction_id: str, data: HalfData) -> None:
        """An end that did not happen (the broker refused it): the entry is kept."""
        entries = self._data.setdefault((group, transaction_id), deque(maxlen=self._max_num))
        entries.append(data)

    def __len__(self) -> int:
        return sum(len(e) for e in self._data.values())


def end_request(request: Any, data: HalfData) -> EndTransaction:
    """The END_TRANSACTION header the proxy builds for an EndTransactionRequest (the
    producer group is the topic; TRANSACTION_RESOLUTION_UNSPECIFIED: not ended)."""
    topic = str(request.topic.name)
    return EndTransaction(
        producer_group=topic,
        tran_state_table_offset=data.tran_state_table_offset,
        commit_log_offset=data.commit_log_offset,
        commit_or_rollback=_COMMIT_OR_ROLLBACK.get(
            int(request.resolution), tx.TRANSACTION_NOT_TYPE
        ),
        from_transaction_check=int(request.source) == int(pb.SOURCE_SERVER_CHECK),
        msg_id=str(request.message_id),
        transaction_id=str(request.transaction_id),
    )


class TelemetryChecks:
    """Live Telemetry streams and the check-back over them (`ProducerChecks`)."""

    def __init__(
        self,
        *,
        ids: TransactionIds,
        settings_of: Mapping[str, Any],
        to_v2_message: Callable[[StoredMessage, Any], Any],
        now_ms: Callable[[], int],
    ) -> None:
        self._ids = ids
        self._settings_of = settings_of
        self._to_v2_message = to_v2_message
        self._now_ms = now_ms
        self._streams: dict[str, asyncio.Queue[Any]] = {}

    def open(self, client_id: str) -> asyncio.Queue[Any]:
        """A stream of `client_id` is open: commands for it go to the returned outbox (a
        client's newer stream replaces an older one, as GrpcClientChannel's observer)."""
        outbox: asyncio.Queue[Any] = asyncio.Queue(OUTBOX_SIZE)
        self._streams[client_id] = outbox
        return outbox

    def close(self, client_id: str, outbox: asyncio.Queue[Any]) -> bool:
        """The stream ended; False when a newer stream of the client replaced it."""
        if self._streams.get(client_id) is not outbox:
            return False
        del self._streams[client_id]
        return True

    def producers_of(self, group: str) -> list[str]:
        """Clients with a live stream whose settings publish topic `group`."""
        live = []
        for client_id in self._streams:
            settings = self._settings_of.get(client_id)
            if settings is None or settings.client_type not in _PRODUCER_TYPES:
                continue
            if any(t.name == group for t in settings.publishing.topics):
                live.append(client_id)
        return live

    def check_producer(self, check: HalfCheck) -> bool:
        live = self.producers_of(check.producer_group)
        if not live:
            return False
        client_id = live[check.check_times % len(live)]
        half = check.message
        transaction_id = half.properties.get(tx.TRANSACTION_ID) or half.properties.get(
            tx.PROPERTY_UNIQ_KEY, ""
        )
        real_topic = half.properties.get(tx.PROPERTY_REAL_TOPIC) or check.producer_group
        message = self._to_v2_message(half, pb.Resource(name=real_topic))
        command = service_pb.TelemetryCommand(
            recover_orphaned_transaction_command=service_pb.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id
            )
        )
        try:
            self._streams[client_id].put_nowait(command)
        except asyncio.QueueFull:
            log.info("transactions: telemetry stream of %s is full; check not sent", client_id)
            return False
        log.info(
            "transactions: check %d of %s (%s) sent to gRPC producer %s",
            check.check_times, transaction_id, real_topic, client_id,
        )  # fmt: skip
        # The answer (EndTransaction, source SERVER_CHECK) names it by transaction id.
        self._ids.add(
            check.producer_group, transaction_id, half.queue_offset, half.physical_offset,
            self._now_ms(),
        )  # fmt: skip
        return True


_PRODUCER_TYPES = (int(pb.PRODUCER),)
