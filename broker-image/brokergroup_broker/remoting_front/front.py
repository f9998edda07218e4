"""The broker's RocketMQ remoting front end: one handler per request code, over the one
produce/pull path (`ProduceAndPull`, core/produce.py).

Theory of operation: the transport (`brokergroup_remoting.net`) has already checked the
request's AccessKey/SecretKey signature and its code before a handler runs. A handler
decodes its header with `wire` (a bad field → SYSTEM_ERROR with the reason, as RocketMQ
answers a RemotingCommandException; nothing is stored), calls the produce path, and turns
its answer into RocketMQ's response; a `BrokerError` it lets through becomes RocketMQ's
code in `refusal_of`, the transport's translate hook.

`RemotingFront` only composes: each part owns its state and serves its codes, and the
front builds the one handler table (request code → bound method of a part):

- `sends.Sends`: SEND_MESSAGE/V2/BATCH and CONSUMER_SEND_MSG_BACK, through
  `start_send_batch`; a not-master refusal closes the connection.
- `pulls.Pulls`: PULL_MESSAGE/LITE_PULL_MESSAGE with long polling, the queue offset and
  store time queries; a pull's commit flag goes through `Consumers.commit_offset`.
- `consumers.Consumers`: heartbeats, consumer lists, queue locks and consumer offsets (the
  one offset check), the watch of consumer connections and the group notifier.
- `topics.TopicAdmin` over `topics.DeclaredTopics`, the topic table (the broker's
  metadata, metadata/) sends and consumers use too: UPDATE_AND_CREATE_TOPIC,
  GET_ALL_TOPIC_CONFIG, DELETE_TOPIC_IN_BROKER, VIEW_MESSAGE_BY_ID.
- `groups.GroupAdmin`: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
  DELETE_SUBSCRIPTIONGROUP; a group's consumeEnable guards its pulls, its retryMaxTimes the
  send-backs.
- `admin_queries.AdminQueries`, `dashboard.DashboardQueries` and
  `broker_status.BrokerStatus`: read-only admin codes (the dashboard's and exporter's).
- `replies.Replies`: SEND_REPLY_MESSAGE(_V2), a request-reply reply pushed to its requester
  (PUSH_REPLY_MESSAGE_TO_CLIENT over the requester's own connection) and stored.
- `client_calls.ClientCalls`: GET_CONSUMER_RUNNING_INFO and CONSUME_MESSAGE_DIRECTLY, asked
  of the consumer over its own connection.
- `transactions.Transactions`: END_TRANSACTION over the transaction service, and its
  CHECK_TRANSACTION_STATE to a live producer (docs/transactions.md).
- `client_config.ClientConfigCheck`: CHECK_CLIENT_CONFIG, whether a consumer's subscription
  (SQL92) can be served here; the pulls filter by it (docs/filters.md).
- `offset_reset.OffsetReset`: INVOKE_BROKER_TO_RESET_OFFSET, and the pull guard that tells
  a consumer of its queue's reset (PULL_OFFSET_MOVED).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from brokergroup_broker.broker_stats import BrokerStats
from brokergroup_broker.metadata import PERM_READ, PERM_WRITE, BrokerMetadata, TopicConfig
from brokergroup_broker.pop.service import PopService
from brokergroup_broker.protocol.messages import BrokerError, RecordPull, Response, SendBatch
from brokergroup_broker.remoting_front import acl_admin, wire
from brokergroup_broker.remoting_front.admin_queries import AdminQueries
from brokergroup_broker.remoting_front.assignments import Assignments
from brokergroup_broker.remoting_front.broker_status import BrokerStatus
from brokergroup_broker.remoting_front.client_calls import ClientCalls
from brokergroup_broker.remoting_front.client_config import ClientConfigCheck
from brokergroup_broker.remoting_front.clients import ConsumerGroups, QueueLocks
from brokergroup_broker.remoting_front.consumers import Consumers
from brokergroup_broker.remoting_front.dashboard import DashboardQueries
from brokergroup_broker.remoting_front.groups import GroupAdmin
from brokergroup_broker.remoting_front.key_query import RecordSource
from brokergroup_broker.remoting_front.offset_reset import OffsetReset
from brokergroup_broker.remoting_front.pop import PopHandlers
from brokergroup_broker.remoting_front.pulls import Pulls
from brokergroup_broker.remoting_front.replies import Replies, reply_topic
from brokergroup_broker.remoting_front.sends import Sends, Stamps
from brokergroup_broker.remoting_front.topics import TRACE_TOPIC, DeclaredTopics, TopicAdmin
from brokergroup_broker.remoting_front.transactions import ProducerCheckSender, Transactions
from brokergroup_broker.schedule.admission import ScheduledSends
from brokergroup_broker.store.arrivals import Arrivals
from brokergroup_broker.store.health import DiskSpace
from brokergroup_broker.store.message import StoredMessage
from brokergroup_broker.transaction.service import TransactionService
from brokergroup_remoting import RemotingCommand, RequestCode
from brokergroup_remoting.fields import RequestRefused
from brokergroup_remoting.net import Connection, Dispatch, Handler


def _mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class ProduceAndPull(RecordSource, Protocol):
    """What this front end calls of the broker's one produce/pull path
    (`core.produce.ProducePath` implements it; the broker package's layering keeps this
    package from importing `core`): the union of what its parts read (`SendPath`,
    `PullReads`, `OffsetStore`, `StoredTopics`, `MessageAt`, `AdminReads`, `StatusReads`,
    `DashboardReads`, `ResetReads`)."""

    @property
    def arrivals(self) -> Arrivals: ...

    def start_send_batch(self, batch: SendBatch, reply: Callable[[Response], None]) -> None: ...

    def topic_queue_counts(self) -> dict[str, int]: ...

    def holds_topic(self, topic: str) -> bool: ...

    async def topic_queue_count(self, topic: str) -> int: ...

    async def message_at(self, physical_offset: int) -> tuple[StoredMessage, bytes] | None: ...

    async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]: ...

    async def pull_matching_records(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        max_count: int,
        *,
        keep_tags_code: Callable[[int], bool],
        keep_properties: Callable[[dict[str, str]], bool],
        max_scan: int,
    ) -> RecordPull: ...

    async def commit_consumer_offset(
        self, group: str, topic: str, queue_id: int, offset: int
    ) -> None: ...

    async def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int: ...

    def consumer_offset_keys(self) -> list[tuple[str, str, int]]: ...


@dataclass(frozen=True)
class FrontSettings:
    """What the front end needs of the broker's settings."""

    cluster_name: str
    broker_name: str
    store_host: tuple[str, int]
    """The address records are stored with (offset message ids are built from it)."""
    auto_create_topic: bool = False
    """Create a topic on its first send (RocketMQ's autoCreateTopicEnable): on in the local
    runtime, off by default elsewhere (a typo'd topic then fails instead of existing)."""
    default_queue_nums: int = 4
    """Queues of a created topic (UPDATE_AND_CREATE_TOPIC asks for more: capped here, since
    the produce path's queue choice is bounded by defaultTopicQueueNums)."""
    max_message_size: int = 4 << 20
    """maxMessageSize: a send's body (a batch's whole body) above it is refused
    MESSAGE_ILLEGAL, as RocketMQ bounds a batch by bytes, not by its count."""
    region_id: str = "DefaultRegion"
    """regionId, stamped on stored messages as MSG_REGION and answered with each send."""
    trace_on: bool = True
    """traceOn, stamped on stored messages as TRACE_ON and answered with each send."""
    trace_topic: str | None = None
    """The trace topic served from the start (traceTopicEnable's msgTraceTopicName), or
    None."""
    store_reply_message: bool = True
    """storeReplyMessageEnable: a reply is stored in <cluster>_REPLY_TOPIC besides being
    pushed to its requester (replies.py)."""
    enable_property_filter: bool = False
    """enablePropertyFilter: serve SQL92 subscriptions (client_config.py, pulls.py)."""
    max_held_pulls: int = 100_000
    """Pulls held (long polling) at once on this broker; one more is answered SYSTEM_BUSY
    (a stock consumer pulls again 3 s later), as RocketMQ answers when its pull thread
    pool's queue is full. Each connection holds at most its in-flight limit (net.py)."""
    max_suspend_ms: int = 30_000
    """Upper bound of a pull's suspendTimeoutMillis (the stock consumer asks 15 s)."""
    key_query_budget_bytes: int = 32 << 20
    """Record bytes one QUERY_MESSAGE may look at (key_query.py): more finds older
    messages in a busy topic, at up to that many bytes read per query."""


def rocketmq_config(settings: FrontSettings) -> dict[str, str]:
    """The settings GET_BROKER_CONFIG shows, under RocketMQ's BrokerConfig names (only
    those this broker has; Java's Boolean.toString spelling)."""
    return {
        "brokerClusterName": settings.cluster_name,
        "brokerName": settings.broker_name,
        "brokerIP1": settings.store_host[0],
        "listenPort": str(settings.store_host[1]),
        "autoCreateTopicEnable": str(settings.auto_create_topic).lower(),
        "defaultTopicQueueNums": str(settings.default_queue_nums),
        "longPollingEnable": "true",
        "enablePropertyFilter": str(settings.enable_property_filter).lower(),
        "maxMessageSize": str(settings.max_message_size),
        "regionId": settings.region_id,
        "traceOn": str(settings.trace_on).lower(),
        "traceTopicEnable": str(settings.trace_topic is not None).lower(),
        "msgTraceTopicName": settings.trace_topic or TRACE_TOPIC,
        "storeReplyMessageEnable": str(settings.store_reply_message).lower(),
    }


def system_topics(settings: FrontSettings) -> dict[str, TopicConfig]:
    """The topics every broker serves from its start, one queue each, as RocketMQ's
    TopicConfigManager makes them: the cluster's reply topic (request-reply) and, with
    traceTopicEnable, the trace topic."""
    names = [reply_topic(settings.cluster_name)]
    if settings.trace_topic is not None:
        names.append(settings.trace_topic)
    return {name: TopicConfig(name, 1, 1, PERM_READ | PERM_WRITE) for name in names}


class RemotingFront:
    """Request handlers of the broker's remoting port; `handlers` is what the server serves.
    `consumers` and `locks` are the consumer part's tables, `declared` the declared topics
    (read by the admin queries and by tests)."""

    def __init__(
        self,
        produce: ProduceAndPull,
        settings: FrontSettings,
        *,
        on_new_topic: Callable[[str], None] = lambda _topic: None,
        on_topic_deleted: Callable[[str], None] = lambda _topic: None,
        metadata: BrokerMetadata | None = None,
        disk_space: Callable[[], DiskSpace] | None = None,
        clock_ms: Callable[[], int] = _mono_ms,
        stats: BrokerStats | None = None,
        scheduling: ScheduledSends | None = None,
        transactions: TransactionService | None = None,
        pop: PopService | None = None,
    ) -> None:
        """`scheduling`: delayed and timer sends (the broker's schedule service); None
        refuses them."""
        #: The broker's put/get counters (the produce path's own, `ProducePath.stats`).
        self.stats = (
            BrokerStats(_wall_ms, cluster_name=settings.cluster_name) if stats is None else stats
        )
        self.declared = DeclaredTopics(
            produce,
            default_queue_nums=settings.default_queue_nums,
            on_new_topic=on_new_topic,
            metadata=metadata,
            system=system_topics(settings),
        )
        self.metadata = self.declared.metadata
        groups = GroupAdmin(self.metadata)
        consumers = Consumers(produce, self.declared, clock_ms=clock_ms)
        self._consumer_part = consumers
        self.consumers: ConsumerGroups = consumers.groups
        self.locks: QueueLocks = consumers.locks
        sends = Sends(
            produce,
            self.declared,
            store_host=settings.store_host,
            auto_create_topic=settings.auto_create_topic,
            max_message_size=settings.max_message_size,
            stamps=Stamps(settings.cluster_name, settings.region_id, settings.trace_on),
            stats=self.stats,
            retry_max_times=groups.retry_max_times,
            scheduling=scheduling,
            transactions=transactions is not None,
        )
        pulls = Pulls(
            produce,
            commit_offset=consumers.commit_offset,
            subscriptions=consumers.groups.subscription,
            enable_property_filter=settings.enable_property_filter,
            max_held_pulls=settings.max_held_pulls,
            max_suspend_ms=settings.max_suspend_ms,
            clock_ms=clock_ms,
            stats=self.stats,
        )
        topic_admin = TopicAdmin(
            produce,
            self.declared,
            default_queue_nums=settings.default_queue_nums,
            on_topic_deleted=on_topic_deleted,
        )
        admin = AdminQueries(
            produce,
            broker_name=settings.broker_name,
            topics=self.topics,
            consumers=consumers.groups,
            clock_ms=clock_ms,
            key_query_budget_bytes=settings.key_query_budget_bytes,
            stats=self.stats,
        )
        dashboard = DashboardQueries(
            produce,
            broker_name=settings.broker_name,
            broker_addr=f"{settings.store_host[0]}:{settings.store_host[1]}",
            topics=self.topics,
            consumers=consumers.groups,
            producers=consumers.producers,
            stats=self.stats,
            clock_ms=clock_ms,
        )
        client_calls = ClientCalls(
            produce,
            broker_name=settings.broker_name,
            topics=self.topics,
            consumers=consumers.groups,
            connection=consumers.connection,
            clock_ms=clock_ms,
        )
        resets = OffsetReset(
            produce,
            broker_name=settings.broker_name,
            topics=self.topics,
            consumers=consumers.groups,
            resets=consumers.resets,
            clock_ms=clock_ms,
        )
        status = BrokerStatus(
            produce,
            broker_name=settings.broker_name,
            config=rocketmq_config(settings),
            topics=self.topics,
            disk_space=disk_space,
            stats=self.stats,
        )
        replies = Replies(
            produce,
            self.declared,
            store_host=settings.store_host,
            stamps=Stamps(settings.cluster_name, settings.region_id, settings.trace_on),
            store_reply=settings.store_reply_message,
            max_message_size=settings.max_message_size,
            producers=consumers.producers,
            connection=consumers.connection,
            clock_ms=clock_ms,
        )
        table: dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]] = {
            RequestCode.SEND_MESSAGE: sends.send_message,
            RequestCode.SEND_MESSAGE_V2: sends.send_message,
            RequestCode.SEND_BATCH_MESSAGE: sends.send_message,
            RequestCode.PULL_MESSAGE: resets.guard(
                groups.guard_pull(pulls.pull_message, consumers.groups.message_model)
            ),
            # DefaultLitePullConsumer's pulls (PullSysFlag litePull bit): the same header and
            # answer; RocketMQ's PullMessageProcessor serves both.
            RequestCode.LITE_PULL_MESSAGE: resets.guard(
                groups.guard_pull(pulls.pull_message, consumers.groups.message_model)
            ),
            RequestCode.QUERY_CONSUMER_OFFSET: consumers.query_consumer_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: consumers.update_consumer_offset,
            RequestCode.HEART_BEAT: consumers.heart_beat,
            RequestCode.UNREGISTER_CLIENT: consumers.unregister_client,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: consumers.get_consumer_list,
            RequestCode.GET_MAX_OFFSET: pulls.get_max_offset,
            RequestCode.GET_MIN_OFFSET: pulls.get_min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: pulls.search_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: pulls.earliest_store_time,
            RequestCode.CONSUMER_SEND_MSG_BACK: sends.send_back,
            RequestCode.VIEW_MESSAGE_BY_ID: topic_admin.view_message,
            RequestCode.GET_ALL_TOPIC_CONFIG: topic_admin.all_topic_config,
            RequestCode.UPDATE_AND_CREATE_TOPIC: topic_admin.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: topic_admin.delete_topic,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: groups.update_and_create,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: groups.all_configs,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: groups.delete,
            RequestCode.LOCK_BATCH_MQ: consumers.lock_batch,
            RequestCode.UNLOCK_BATCH_MQ: consumers.unlock_batch,
            RequestCode.QUERY_MESSAGE: admin.query_message,
            RequestCode.GET_CONSUME_STATS: admin.consume_stats,
            RequestCode.GET_TOPIC_CONFIG: admin.topic_config,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: admin.consumer_connections,
            RequestCode.GET_TOPIC_STATS_INFO: status.topic_stats,
            RequestCode.GET_BROKER_RUNTIME_INFO: status.runtime_info,
            RequestCode.GET_BROKER_CONFIG: status.broker_config,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: dashboard.topic_consumed_by,
            RequestCode.VIEW_BROKER_STATS_DATA: dashboard.broker_stats_data,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: dashboard.producer_connections,
            RequestCode.GET_BROKER_CONSUME_STATS: dashboard.broker_consume_stats,
            RequestCode.GET_CONSUMER_RUNNING_INFO: client_calls.consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: client_calls.consume_message_directly,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: resets.reset_offset,
            RequestCode.CHECK_CLIENT_CONFIG: ClientConfigCheck(
                enable_property_filter=settings.enable_property_filter
            ).check_client_config,
            RequestCode.SEND_REPLY_MESSAGE: replies.send_reply,
            RequestCode.SEND_REPLY_MESSAGE_V2: replies.send_reply,
        }
        if pop is not None:  # POP_MESSAGE, ACK_MESSAGE, … (pop.py, docs/pop.md)
            table.update(PopHandlers(pop, max_poll_ms=settings.max_suspend_ms).table())
            # QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE: how a push consumer turns to POP
            table.update(
                Assignments(
                    self.metadata,
                    broker_name=settings.broker_name,
                    topics=self.topics,
                    consumers=consumers.groups,
                    clock_ms=clock_ms,
                ).table()
            )
        self.handlers: dict[int, Handler] = {int(code): h for code, h in table.items()}
        # mqadmin createUser … listAcl: refused with the way that works (acl_admin.py).
        self.handlers.update(acl_admin.table())
        if transactions is not None:  # END_TRANSACTION; checks over producer connections
            self.handlers[int(RequestCode.END_TRANSACTION)] = Transactions(
                transactions
            ).end_transaction
            transactions.attach_checks(
                ProducerCheckSender(
                    broker_name=settings.broker_name,
                    producers=consumers.producers,
                    connection=consumers.connection,
                    clock_ms=clock_ms,
                )
            )
        self.dispatch = Dispatch(translate=refusal_of)

    def topics(self) -> dict[str, int]:
        """Every topic this broker serves, with its queue count."""
        return self.declared.served()

    def topic_configs(self) -> dict[str, dict[str, object]]:
        """Every topic this broker serves, as its TopicConfig JSON (registrations)."""
        return {name: c.to_json() for name, c in self.declared.configs().items()}

    async def close(self) -> None:
        await self._consumer_part.close()


def refusal_of(exc: Exception) -> RequestRefused | None:
    """The one produce path's refusals as RocketMQ answers a read, an offset or an admin
    request (a send maps its own through `wire.SEND_CODE_OF` before it gets here)."""
    if isinstance(exc, BrokerError):
        return RequestRefused(wire.READ_CODE_OF[exc.code], exc.message)
    return None
