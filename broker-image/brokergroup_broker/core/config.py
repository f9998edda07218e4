"""Broker configuration: one frozen, typed object, loaded once (DESIGN.md §3.3, §2.3).

The JSON file (``--config broker.json``) uses the camelCase names of
DESIGN.md (``heartbeatIntervalMs``); ``--set name=value`` overrides one
field (camelCase or snake_case). Attributes are snake_case. Relationships
between fields are checked at construction, so a broker never starts with
a configuration that could acknowledge a write a failover then loses.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brokergroup_broker.core.lease import LeaseConfigError, validate_lease
from brokergroup_broker.schedule.rules import DEFAULT_MESSAGE_DELAY_LEVEL, parse_delay_levels
from brokergroup_broker.store.retention_policy import parse_delete_when
from brokergroup_remoting import names
from brokergroup_remoting.codes import BROKER_CHANNEL_EXPIRED_TIME_MS

FLUSH_DISK_TYPES = ("SYNC_FLUSH", "ASYNC_FLUSH")
#: regionId: a message property value and a trace topic suffix (TRACE_TOPIC_PREFIX + it).
MAX_REGION_ID_CHARS = 64
_REGION_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_REGION_ID_CHARS}}}")


class BrokerConfigError(ValueError):
    """The configuration cannot be used; the message names the field and values."""


@dataclass(frozen=True)
class BrokerConfig:
    heartbeat_interval_ms: int = 500
    """How often the broker heartbeats to the controller. Shorter: the
    controller (and the role it pushes back) reacts sooner; longer: less
    controller load. Must stay well below heartbeatTimeoutMs."""

    heartbeat_timeout_ms: int = 2000
    """After this long without a heartbeat the controller declares the broker
    inactive (and elects a new master if it was one). Shorter: faster
    failover; longer: fewer false failovers under GC or I/O stalls."""

    all_ack_in_sync_state_set: bool = True
    """Acknowledge a produce only when every SyncStateSet member holds it
    (end offset ≤ confirmOffset). True: no acknowledged message is lost by a
    failover; false: lower latency, at the risk of losing what only
    inSyncReplicas members held."""

    in_sync_replicas: int = 1
    """With allAckInSyncStateSet false: how many replicas (the master
    included) must hold a message before it is acknowledged."""

    min_in_sync_replicas: int = 1
    """Refuse produces with IN_SYNC_REPLICAS_NOT_ENOUGH while the
    SyncStateSet is smaller than this. Higher: writes stop rather than run
    on too few copies; lower: writes continue with less redundancy."""

    slave_timeout_ms: int = 3000
    """How long a produce waits for its acknowledgements before failing with
    SLAVE_TIMEOUT. Should exceed haMaxTimeSlaveNotCatchUpMs' share of a
    shrink so a stalled slave is usually shrunk out before producers time
    out; shorter fails fast, longer rides out slow slaves."""

    ha_max_time_slave_not_catch_up_ms: int = 5000
    """A SyncStateSet member that has not caught up for this long is shrunk
    out. Shorter: a slow slave stops holding up acknowledgements sooner;
    longer: fewer set changes (and fewer electable replicas lost) on
    transient lag."""

    master_lease_ms: int = 1500
    """A master that has not had a heartbeat answered by the controller
    leader for this long stops acknowledging (FENCED). Must be <
    heartbeatTimeoutMs so a partitioned master stops before a new one is
    elected; longer rides out more controller hiccups. A master elected
    before an old lease surely ended holds its acknowledgements for the rest
    of it (docs/reliability.md "Lease fencing")."""

    flush_disk_type: str = "SYNC_FLUSH"
    """SYNC_FLUSH: fsync every appended batch before it counts (durable on
    power loss, slower); ASYNC_FLUSH: fsync every flushIntervalMs (faster;
    a power loss of every replica may lose acknowledged messages)."""

    flush_interval_ms: int = 500
    """ASYNC_FLUSH cadence: the window of data a machine crash may lose."""

    mapped_file_size_commit_log: int = 1 << 30
    """Commit log segment size in bytes. Larger: fewer files; smaller: finer
    retention and faster tests."""

    disk_full_ratio: float = 0.95
    """Above this disk usage the store refuses writes and the broker reports
    itself not writable, so the controller fails over (RocketMQ issue 6468)."""

    election_priority: int = 0
    """Tie-breaker among equally up-to-date candidates; lower wins."""

    default_topic_queue_nums: int = 4
    """Queues of an auto-created topic. More: more consumer parallelism; fewer:
    less per-queue bookkeeping."""

    max_topics: int = 10000
    """Topics the store creates (auto-created on first produce). Past it a produce
    to a new topic is refused (BAD_REQUEST naming the limit); existing topics go on."""

    max_open_queue_files: int = 1024
    """Consume-queue files kept open at once (idle ones are closed), capped at half
    the process's descriptor limit, so thousands of topics never cause EMFILE."""

    max_pending_acks: int = 10_000
    """Produces waiting for replication at once (DLedger's
    maxPendingRequestsNum). Beyond it produces fail with SYSTEM_BUSY at once:
    back-pressure instead of unbounded memory."""

    sync_state_set_check_interval_ms: int = 500
    """How often the master re-evaluates SyncStateSet shrink/expand. Shorter:
    a caught-up slave rejoins sooner (more electable replicas after a
    failover); longer: fewer checks."""

    controller_request_timeout_ms: int = 1000
    """Timeout of one controller request (a heartbeat, an alter)."""

    controller_retry_backoff_ms: int = 200
    """First delay before repeating a failed controller request (doubles up to
    controllerRetryBackoffMaxMs)."""

    controller_retry_backoff_max_ms: int = 2000
    """Upper bound of the controller retry backoff."""

    watch_timeout_ms: int = 10_000
    """Long-poll duration of the controller watch. Longer: fewer requests;
    shorter: quicker notice of a dead watch connection."""

    enable_slave_acting_master: bool = True
    """With no master alive, the live slave with the smallest brokerId serves
    reads and offset queries read-only (RIP-32)."""

    max_pull_messages: int = 256
    """Upper bound of messages returned by one pull."""

    max_send_batch_messages: int = 262_144
    """Upper bound of messages in one produce batch: a bound of work per request only.
    Bytes are the real bound, as RocketMQ bounds a batch (a remoting batch's body ≤
    maxMessageSize, 4 MiB; the project's own protocol by its 8 MiB frame): a 4 MiB
    RocketMQ batch of 1-byte bodies holds 182,361 messages, below this default."""

    auto_create_topic_enable: bool = False
    """RocketMQ remoting port: create a topic on its first send (RocketMQ's
    autoCreateTopicEnable; the name servers learn it at once). On in the local runtime;
    off elsewhere so a mistyped topic fails (TOPIC_NOT_EXIST) instead of existing."""

    register_name_server_period_ms: int = 30_000
    """How often the RocketMQ remoting port registers with every name server again
    (RocketMQ's registerNameServerPeriod). A new topic and a role change register at once;
    the period only refreshes the routes (and is the name servers' liveness signal), so it
    must stay below the name servers' route expiry (120 s); RocketMQ clamps it to 10–60 s."""

    file_reserved_time: float = 72.0
    """fileReservedTime: hours a commit log segment is kept after its last write (a
    fraction of an hour is accepted, e.g. 0.05 = 3 min). Longer: consumers may fall
    further behind without skipping; shorter: less disk (docs/retention.md)."""

    delete_when: str = "04"
    """deleteWhen: the local hours at which expired segments are deleted ("04;05").
    Outside them only disk pressure deletes."""

    disk_max_used_space_ratio: int = 75
    """diskMaxUsedSpaceRatio (percent): above it expired segments are deleted at any hour."""

    disk_space_clean_forcibly_ratio: int = 85
    """diskSpaceCleanForciblyRatio (percent): above it the oldest segments go even unexpired,
    until usage is back at it; must stay below diskFullRatio so cleaning starts before
    writes are refused and the group keeps a master."""

    clean_file_forcibly_enable: bool = True
    """cleanFileForciblyEnable: above diskSpaceCleanForciblyRatio delete unexpired segments
    too. False keeps every unexpired message and lets a full disk stop writes instead
    (diskFullRatio) until space is freed or the volume grows."""

    delete_commit_log_files_interval: int = 100
    """deleteCommitLogFilesInterval (ms) between two segment deletions of one run, so a
    large cleanup does not stall the disk."""

    clean_resource_interval: int = 10_000
    """cleanResourceInterval (ms): how often the retention policy runs."""

    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL
    """messageDelayLevel: the delay of each level 1, 2, … (s, m, h, d), RocketMQ's 18 by
    default. A send with property DELAY=L is delivered after level L's delay (above the last
    level: the last); a consumer's retry (CONSUMER_SEND_MSG_BACK, RECONSUME_LATER) waits
    level 3 + reconsumeTimes (docs/scheduled-messages.md)."""

    timer_max_delay_sec: int = 3 * 86_400
    """timerMaxDelaySec: the longest a timer message (TIMER_DELIVER_MS, TIMER_DELAY_SEC,
    TIMER_DELAY_MS) may wait; a longer one is refused MESSAGE_ILLEGAL, as RocketMQ does."""

    timer_max_pending: int = 1_000_000
    """Timer messages a broker holds undelivered at most (about 50 bytes of memory each
    on the master, docs/scheduled-messages.md); one more is refused (SYSTEM_ERROR naming
    the limit, RocketMQ's timer flow-control code) until some are delivered."""

    transaction_time_out: int = 6_000
    """transactionTimeOut (ms): a half message (transactional, not yet committed or rolled
    back) younger than this is not checked back (its CHECK_IMMUNITY_TIME_IN_SECONDS may ask
    longer). Shorter: an undecided transaction is asked about sooner, at the price of
    checks that race the producer's own END_TRANSACTION (docs/transactions.md)."""

    transaction_check_interval: int = 30_000
    """transactionCheckInterval (ms): the time between two check rounds, each of which asks
    a live producer of the group about every half message past its timeout."""

    transaction_check_max: int = 15
    """transactionCheckMax: checks of one half message before it is discarded (stored in
    TRANS_CHECK_MAX_TIME_TOPIC, never delivered), as RocketMQ does."""

    region_id: str = "DefaultRegion"
    """regionId: stamped on every message stored from a send (property MSG_REGION) and
    answered with each send; a consumer's trace hook drops traces of a message without it
    (RocketMQ's BrokerConfig.regionId, MixAll.DEFAULT_TRACE_REGION_ID)."""

    trace_on: bool = True
    """traceOn: stamped on every message stored from a send (property TRACE_ON) and
    answered with each send; false tells the clients' trace hooks to skip the message."""

    trace_topic_enable: bool = False
    """traceTopicEnable: serve msgTraceTopicName (1 queue) from the start, so clients with
    enableMsgTrace have a route to write their traces to. Off by default as in RocketMQ;
    on in the local runtime (docs/rocketmq-compatibility.md "Traces")."""

    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"
    """msgTraceTopicName: the trace topic traceTopicEnable serves (TopicValidator's
    RMQ_SYS_TRACE_TOPIC by default; a client's customizedTraceTopic names another)."""

    store_reply_message_enable: bool = True
    """storeReplyMessageEnable: a reply (SEND_REPLY_MESSAGE) is stored in
    <cluster>_REPLY_TOPIC besides being pushed to the requester, as RocketMQ does."""

    enable_property_filter: bool = False
    """enablePropertyFilter: serve SQL92 subscriptions (CHECK_CLIENT_CONFIG, pulls filtered
    on message properties; docs/filters.md). Off by default as in RocketMQ, where a SQL92
    consumer then fails at its start; `local up --set enablePropertyFilter=true` or
    spec.broker.config turns it on. Tag filtering needs no setting."""

    pop_max_in_flight_per_group: int = 100_000
    """popMaxInFlightPerGroup (ours: RocketMQ bounds per queue, and only with
    enablePopMessageThreshold): POP receipts one consumer group may hold in flight on this
    broker (popped, neither acked nor revived yet); a pop beyond it is refused POLLING_FULL
    naming the bound until some are acked. Each costs about 100 bytes of the master's
    memory and is rebuilt from the revive records after a failover (docs/pop.md)."""

    max_pop_polling_size: int = 10_000
    """maxPopPollingSize: pops held at once waiting for a message (long polling); one more
    is answered POLLING_FULL at once (RocketMQ's name; its default is 100,000)."""

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise BrokerConfigError(f"{camel(spec.name)} must be ≥ 0, got {value}")
        positive = (
            "heartbeat_interval_ms",
            "heartbeat_timeout_ms",
            "in_sync_replicas",
            "min_in_sync_replicas",
            "slave_timeout_ms",
            "ha_max_time_slave_not_catch_up_ms",
            "flush_interval_ms",
            "default_topic_queue_nums",
            "max_pending_acks",
            "max_topics",
            "max_open_queue_files",
            "sync_state_set_check_interval_ms",
            "controller_request_timeout_ms",
            "controller_retry_backoff_ms",
            "watch_timeout_ms",
            "max_pull_messages",
            "max_send_batch_messages",
            "register_name_server_period_ms",
            "disk_max_used_space_ratio",
            "clean_resource_interval",
            "timer_max_delay_sec",
            "timer_max_pending",
            "transaction_check_interval",
            "transaction_check_max",
            "pop_max_in_flight_per_group",
            "max_pop_polling_size",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise BrokerConfigError(f"{camel(name)} must be > 0, got {getattr(self, name)}")
        if self.heartbeat_interval_ms >= self.heartbeat_timeout_ms:
            raise BrokerConfigError(
                f"heartbeatIntervalMs {self.heartbeat_interval_ms} must be < "
                f"heartbeatTimeoutMs {self.heartbeat_timeout_ms}: every heartbeat would "
                "arrive after the controller declared the broker inactive"
            )
        if self.register_name_server_period_ms >= BROKER_CHANNEL_EXPIRED_TIME_MS:
            # Refused rather than clamped as RocketMQ does (10-60 s): a period other than
            # the one set would surprise its owner. Equal is refused too: every registration
            # would then arrive just after the route expired.
            raise BrokerConfigError(
                f"registerNameServerPeriodMs {self.register_name_server_period_ms} must be < "
                f"the name servers' route expiry {BROKER_CHANNEL_EXPIRED_TIME_MS} (RocketMQ's "
                "BROKER_CHANNEL_EXPIRED_TIME): a broker registering less often drops out of "
                "every route between its registrations"
            )
        try:
            validate_lease(
                master_lease_ms=self.master_lease_ms,
                heartbeat_timeout_ms=self.heartbeat_timeout_ms,
                heartbeat_interval_ms=self.heartbeat_interval_ms,
            )
        except LeaseConfigError as exc:
            raise BrokerConfigError(str(exc)) from exc
        if self.flush_disk_type not in FLUSH_DISK_TYPES:
            raise BrokerConfigError(
                f"flushDiskType must be one of {', '.join(FLUSH_DISK_TYPES)}, "
                f"got {self.flush_disk_type!r}"
            )
        if not 0.0 < self.disk_full_ratio <= 1.0:
            raise BrokerConfigError(f"diskFullRatio must be in (0, 1], got {self.disk_full_ratio}")
        self._check_retention()
        try:
            parse_delay_levels(self.message_delay_level)
        except ValueError as exc:
            raise BrokerConfigError(str(exc)) from None
        self._check_trace()
        if self.mapped_file_size_commit_log < 4096:
            raise BrokerConfigError(
                f"mappedFileSizeCommitLog must be ≥ 4096 bytes, got "
                f"{self.mapped_file_size_commit_log}"
            )
        if self.controller_retry_backoff_ms > self.controller_retry_backoff_max_ms:
            raise BrokerConfigError(
                f"controllerRetryBackoffMs {self.controller_retry_backoff_ms} must be ≤ "
                f"controllerRetryBackoffMaxMs {self.controller_retry_backoff_max_ms}"
            )

    def _check_trace(self) -> None:
        # Both end up in message properties (name\x01value\x02) and topic routes.
        if not _REGION_ID.fullmatch(self.region_id):
            raise BrokerConfigError(
                f"regionId must be 1..{MAX_REGION_ID_CHARS} letters, digits, '-' or '_', "
                f"got {self.region_id!r}"
            )
        error = names.topic_error(self.msg_trace_topic_name)
        if error is not None:
            raise BrokerConfigError(f"msgTraceTopicName: {error}")

    def _check_retention(self) -> None:
        if not (math.isfinite(self.file_reserved_time) and self.file_reserved_time > 0):
            raise BrokerConfigError(
                f"fileReservedTime must be > 0 hours, got {self.file_reserved_time}"
            )
        try:
            parse_delete_when(self.delete_when)
        except ValueError as exc:
            raise BrokerConfigError(str(exc)) from None
        used, forcibly = self.disk_max_used_space_ratio, self.disk_space_clean_forcibly_ratio
        if used > forcibly:
            raise BrokerConfigError(
                f"diskMaxUsedSpaceRatio {used} must be ≤ diskSpaceCleanForciblyRatio {forcibly}"
            )
        if self.clean_file_forcibly_enable and forcibly >= 100 * self.disk_full_ratio:
            raise BrokerConfigError(
                f"diskSpaceCleanForciblyRatio {forcibly} % must be below diskFullRatio "
                f"{100 * self.disk_full_ratio:g} %: forced cleaning must start before the "
                "store refuses writes, or a full disk leaves the group without a master "
                "(or set cleanFileForciblyEnable=false to keep unexpired data and let a full "
                "disk stop writes)"
            )

    def to_json(self) -> dict[str, Any]:
        return {camel(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig)}


def _field_name(key: str) -> str:
    name = key if key in _FIELDS else snake(key)
    if name not in _FIELDS:
        known = ", ".join(sorted(camel(n) for n in _FIELDS))
        raise BrokerConfigError(f"unknown broker config field {key!r}; known fields: {known}")
    return name


def _coerce(name: str, value: Any) -> Any:
    default = _FIELDS[name].default
    label = camel(name)
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise BrokerConfigError(f"{label} must be true or false, got {value!r}")
    if isinstance(default, int):
        if isinstance(value, bool):
            raise BrokerConfigError(f"{label} must be an integer, got {value!r}")
        try:
            return int(value)
        except (TypeError, ValueError):
            raise BrokerConfigError(f"{label} must be an integer, got {value!r}") from None
    if isinstance(default, float):
        try:
            return float(value)
        except (TypeError, ValueError):
            raise BrokerConfigError(f"{label} must be a number, got {value!r}") from None
    return str(value)


def config_from_mapping(values: Mapping[str, Any]) -> BrokerConfig:
    kwargs = {}
    for key, value in values.items():
        name = _field_name(key)
        kwargs[name] = _coerce(name, value)
    return BrokerConfig(**kwargs)


def load_broker_config(path: Path | None = None, overrides: Sequence[str] = ()) -> BrokerConfig:
    """File (if any), then each ``name=value`` override, validated once."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise BrokerConfigError(f"cannot read broker config {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise BrokerConfigError(f"broker config {path} must hold a JSON object")
        values.update(raw)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BrokerConfigError(f"--set expects name=value, got {item!r}")
        values[key.strip()] = value.strip()
    return config_from_mapping(values)
