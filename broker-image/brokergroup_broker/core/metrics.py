"""The broker's Prometheus metrics, served at /metrics on its HTTP port (docs/metrics.md).

Nothing is counted here: at scrape time `BrokerCollector` reads the state the broker keeps
anyway (the `BrokerStats` counters the send and pull paths feed, the commit round's
`LatencyBuckets`, the store's offsets and disk, the role, the HA master's view of its
slaves, the consumer offsets) into a `BrokerFacts` (`gather`), and `families` turns those
into metric families (pure, so a test compares them for a known state). The hot paths pay
only their counters' additions; one registry per broker, no global state.

Label cardinality is bounded by the broker's own bounds: `topic` by maxTopics (the store
refuses more), `group`@`topic` of the counters by `BrokerStats.max_keys`, the consumer lag
series by the consumer offset table's bounds (consumer_offsets.OffsetBounds), `slave` by
the broker set's replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from brokergroup_broker.broker_stats import (
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    SNDBCK_PUT_NUMS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    LatencyBuckets,
)
from brokergroup_broker.store import GroupCommitCounts, MessageStore

PREFIX = "brokergroup_broker"
__all__ = ["CONTENT_TYPE_LATEST", "BrokerCollector", "BrokerFacts", "families", "gather"]


@dataclass(frozen=True)
class SlaveFacts:
    broker_id: int
    ack_offset: int
    connected: bool


@dataclass(frozen=True)
class BrokerFacts:
    """What one scrape reads of the broker (beyond the counters)."""

    cluster_name: str
    broker_name: str
    broker_id: int | None
    role: str
    master_epoch: int
    min_offset: int
    max_offset: int
    confirm_offset: int
    disk_usage_ratio: float | None
    #: The master's SyncStateSet (None on a slave: the master owns it).
    sync_state_set: frozenset[int] | None
    slaves: tuple[SlaveFacts, ...] = ()
    #: (group, topic, queue id) -> readable max queue offset - committed offset (master).
    consumer_lag: Mapping[tuple[str, str, int], int] = field(default_factory=dict)
    #: (segments, bytes) deleted by retention since start; None without retention.
    retention_deleted: tuple[int, int] | None = None
    #: Where the group commit's fdatasyncs ran (SYNC_FLUSH only).
    group_commit: GroupCommitCounts | None = None


def consumer_lag(store: MessageStore, confirm_offset: int) -> dict[tuple[str, str, int], int]:
    """Per committed consumer offset: the queue's readable end (up to confirmOffset) minus
    it, never below 0 (an offset past the end is what a reset can leave)."""
    lag: dict[tuple[str, str, int], int] = {}
    for (group, topic, queue_id), offset in store.consumer_offsets.snapshot().offsets.items():
        _, high = store.queue_offset_range(topic, queue_id, confirm_offset)
        lag[(group, topic, queue_id)] = max(0, high - offset)
    return lag


def retention_counts(store: MessageStore) -> tuple[int, int] | None:
    """The retention's deletions, if this store has retention (`store.retention`)."""
    retention = getattr(store, "retention", None)
    segments = getattr(retention, "deleted_segments_total", None)
    deleted = getattr(retention, "deleted_bytes_total", None)
    if isinstance(segments, int) and isinstance(deleted, int):
        return segments, deleted
    return None


def gather(
    store: MessageStore,
    *,
    cluster_name: str,
    broker_name: str,
    broker_id: int | None,
    role: str,
    master_epoch: int,
    confirm_offset: int,
    sync_state_set: frozenset[int] | None,
    slaves: Iterable[SlaveFacts] = (),
    group_commit: GroupCommitCounts | None = None,
) -> BrokerFacts:
    """Read the store's part of the facts; the caller passes the role's and replication's."""
    try:
        ratio: float | None = store.disk_usage_ratio()
    except OSError:
        ratio = None  # an unreadable disk is left out rather than reported as 0
    is_master = sync_state_set is not None
    return BrokerFacts(
        cluster_name=cluster_name,
        broker_name=broker_name,
        broker_id=broker_id,
        role=role,
        master_epoch=master_epoch,
        min_offset=store.min_offset,
        max_offset=store.max_offset,
        confirm_offset=confirm_offset,
        disk_usage_ratio=ratio,
        sync_state_set=sync_state_set,
        slaves=tuple(sorted(slaves, key=lambda s: s.broker_id)),
        consumer_lag=consumer_lag(store, confirm_offset) if is_master else {},
        retention_deleted=retention_counts(store),
        group_commit=group_commit,
    )


def _counter(
    name: str, doc: str, labels: list[str], rows: Iterable[tuple[list[str], float]]
) -> Metric:
    family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=labels)
    for values, value in rows:
        family.add_metric(values, value)
    return family


def _gauge(name: str, doc: str, value: float, labels: Mapping[str, str] | None = None) -> Metric:
    family = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), value)
    return family


def _topic_group(key: str) -> list[str]:
    topic, _, group = key.partition("@")
    return [group, topic]


def families(facts: BrokerFacts, stats: BrokerStats, rounds: LatencyBuckets) -> list[Metric]:
    """The metric families of one scrape (names and labels in docs/metrics.md)."""
    out: list[Metric] = []
    info = InfoMetricFamily(f"{PREFIX}", "this broker's identity and role")
    info.add_metric(
        [],
        {
            "cluster": facts.cluster_name,
            "broker_name": facts.broker_name,
            "broker_id": "" if facts.broker_id is None else str(facts.broker_id),
            "role": facts.role,
        },
    )
    out.append(info)
    out.append(
        _counter(
            "put_messages",
            "messages put (acknowledged sends) per topic (TOPIC_PUT_NUMS)",
            ["topic"],
            (([k], v) for k, v in stats.values(TOPIC_PUT_NUMS)),
        )
    )
    out.append(
        _counter(
            "put_bytes",
            "record bytes put per topic (TOPIC_PUT_SIZE)",
            ["topic"],
            (([k], v) for k, v in stats.values(TOPIC_PUT_SIZE)),
        )
    )
    out.append(
        _counter(
            "get_messages",
            "messages pulled per group and topic (GROUP_GET_NUMS)",
            ["group", "topic"],
            ((_topic_group(k), v) for k, v in stats.values(GROUP_GET_NUMS)),
        )
    )
    out.append(
        _counter(
            "get_bytes",
            "record bytes pulled per group and topic (GROUP_GET_SIZE)",
            ["group", "topic"],
            ((_topic_group(k), v) for k, v in stats.values(GROUP_GET_SIZE)),
        )
    )
    out.append(
        _counter(
            "send_back_messages",
            "messages sent back by consumers per group and retry/DLQ topic (SNDBCK_PUT_NUMS)",
            ["group", "topic"],
            ((_topic_group(k), v) for k, v in stats.values(SNDBCK_PUT_NUMS)),
        )
    )
    out.append(
        _counter(
            "stats_untracked_keys",
            "counter updates whose topic or topic@group was past the key bound",
            [],
            [([], stats.untracked_keys)],
        )
    )
    histogram = HistogramMetricFamily(
        f"{PREFIX}_commit_round_seconds",
        "an acknowledged send's append to its acknowledgement (group commit and replicas)",
    )
    histogram.add_metric(
        [],
        [(_le(bound), count) for bound, count in rounds.cumulative()],
        rounds.sum_s,
    )
    out.append(histogram)
    roles = GaugeMetricFamily(f"{PREFIX}_role", "1 for this broker's role", labels=["role"])
    roles.add_metric([facts.role], 1)
    out.append(roles)
    out.append(_gauge("master_epoch", "the masterEpoch this broker knows", facts.master_epoch))
    out.append(_gauge("min_offset", "the commit log's first physical offset", facts.min_offset))
    out.append(_gauge("max_offset", "the commit log's end (bytes written)", facts.max_offset))
    out.append(
        _gauge("confirm_offset", "confirmOffset: what consumers may read", facts.confirm_offset)
    )
    if facts.disk_usage_ratio is not None:
        out.append(
            _gauge(
                "disk_usage_ratio",
                "the store filesystem's used / (used + usable), as diskFullRatio reads it",
                facts.disk_usage_ratio,
            )
        )
    if facts.sync_state_set is not None:
        out.append(
            _gauge(
                "sync_state_set_size",
                "members of the master's SyncStateSet (itself included)",
                len(facts.sync_state_set),
            )
        )
        lag = GaugeMetricFamily(
            f"{PREFIX}_slave_lag_bytes",
            "per slave: the master's commit log end minus the slave's acknowledged offset",
            labels=["slave"],
        )
        acked = GaugeMetricFamily(
            f"{PREFIX}_slave_ack_offset", "per slave: its acknowledged offset", labels=["slave"]
        )
        in_set = GaugeMetricFamily(
            f"{PREFIX}_slave_in_sync_state_set",
            "per slave: 1 while it is in the SyncStateSet",
            labels=["slave"],
        )
        for slave in facts.slaves:
            label = [str(slave.broker_id)]
            lag.add_metric(label, max(0, facts.max_offset - slave.ack_offset))
            acked.add_metric(label, slave.ack_offset)
            in_set.add_metric(label, 1 if slave.broker_id in facts.sync_state_set else 0)
        out.extend((lag, acked, in_set))
        consumer = GaugeMetricFamily(
            f"{PREFIX}_consumer_lag_messages",
            "per group and queue: the queue's readable max offset minus the committed offset",
            labels=["group", "topic", "queue_id"],
        )
        for (group, topic, queue_id), behind in sorted(facts.consumer_lag.items()):
            consumer.add_metric([group, topic, str(queue_id)], behind)
        out.append(consumer)
    if facts.retention_deleted is not None:
        segments, deleted = facts.retention_deleted
        out.append(
            _counter(
                "retention_deleted_segments",
                "commit log segments deleted by retention",
                [],
                [([], segments)],
            )
        )
        out.append(
            _counter(
                "retention_deleted_bytes",
                "commit log bytes deleted by retention",
                [],
                [([], deleted)],
            )
        )
    if facts.group_commit is not None:
        counts = facts.group_commit
        out.append(
            _counter(
                "group_commit_syncs",
                "group-commit fdatasyncs by where they ran (the event loop or the thread)",
                ["place"],
                [(["loop"], counts.loop_syncs), (["thread"], counts.thread_syncs)],
            )
        )
        out.append(
            _counter(
                "group_commit_moves_to_thread",
                "times most recent fdatasyncs on the loop were slow and syncing moved to the "
                "thread for a while",
                [],
                [([], counts.moves_to_thread)],
            )
        )
    return out


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class BrokerCollector:
    """A prometheus_client collector over `read_facts` (called once per scrape)."""

    def __init__(
        self,
        read_facts: Callable[[], BrokerFacts | None],
        stats: Callable[[], BrokerStats | None],
        rounds: Callable[[], LatencyBuckets | None],
    ) -> None:
        self._read_facts = read_facts
        self._stats = stats
        self._rounds = rounds

    def collect(self) -> Iterator[Metric]:
        facts, stats, rounds = self._read_facts(), self._stats(), self._rounds()
        if facts is None or stats is None or rounds is None:
            return  # before registration: the broker has no parts yet
        yield from families(facts, stats, rounds)


def registry_of(collector: BrokerCollector) -> CollectorRegistry:
    """One registry per broker (no process-wide default registry)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format of one scrape."""
    return generate_latest(registry)
