"""The broker's /metrics (core/metrics.py) for a known store state: the text a scrape gets,
parsed with prometheus_client's parser, compared family by family (names, labels, values);
and GET_BROKER_RUNTIME_INFO's counter keys from the same BrokerStats."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from brokergroup_broker.broker_stats import BrokerStats, LatencyBuckets
from brokergroup_broker.core import metrics
from brokergroup_broker.remoting_front.broker_status import BrokerStatus, counters_table
from brokergroup_broker.store import GroupCommitCounts, MessageInput, MessageStore
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.command import request

HOST = ("127.0.0.1", 10911)
T0 = 1_700_006_400_000 + 3_600_000


def _samples(text: bytes) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        out[family.name] = [(s.name, dict(s.labels), s.value) for s in family.samples]
    return out


def _scrape(facts: metrics.BrokerFacts, stats: BrokerStats, rounds: LatencyBuckets) -> bytes:
    collector = metrics.BrokerCollector(lambda: facts, lambda: stats, lambda: rounds)
    return metrics.exposition(metrics.registry_of(collector))


def test_a_masters_scrape_for_a_known_store(store: MessageStore) -> None:
    for queue_id, count in ((0, 3), (1, 2)):
        store.put_messages(
            [MessageInput("Orders", queue_id, b"x" * 10) for _ in range(count)], HOST, T0
        )
    store.consumer_offsets.commit("G", "Orders", 0, 1, T0)
    store.consumer_offsets.commit("G", "Orders", 1, 2, T0)
    stats = BrokerStats(lambda: T0, cluster_name="C")
    stats.on_put("Orders", 3, 300)
    stats.on_put("Orders", 2, 200)
    stats.on_get("G", "Orders", 4, 400)
    rounds = LatencyBuckets((0.001, 0.01))
    rounds.observe(0.00048828125)  # 2**-11 and 2**-8: binary fractions, an exact sum
    rounds.observe(0.00390625)
    facts = metrics.gather(
        store,
        cluster_name="C",
        broker_name="broker-a",
        broker_id=1,
        role="MASTER",
        master_epoch=3,
        confirm_offset=store.max_offset,
        sync_state_set=frozenset({1, 2}),
        slaves=[metrics.SlaveFacts(3, 100, True), metrics.SlaveFacts(2, store.max_offset, True)],
        group_commit=GroupCommitCounts(loop_syncs=7, thread_syncs=2, moves_to_thread=1),
    )
    got = _samples(_scrape(facts, stats, rounds))
    end = float(store.max_offset)
    p = "brokergroup_broker"
    assert got[f"{p}_info"] == [
        (f"{p}_info", {"cluster": "C", "broker_name": "broker-a", "broker_id": "1",
                       "role": "MASTER"}, 1.0),
    ]  # fmt: skip
    assert got[f"{p}_put_messages"] == [(f"{p}_put_messages_total", {"topic": "Orders"}, 5.0)]
    assert got[f"{p}_put_bytes"] == [(f"{p}_put_bytes_total", {"topic": "Orders"}, 500.0)]
    assert got[f"{p}_get_messages"] == [
        (f"{p}_get_messages_total", {"group": "G", "topic": "Orders"}, 4.0)
    ]
    assert got[f"{p}_get_bytes"] == [
        (f"{p}_get_bytes_total", {"group": "G", "topic": "Orders"}, 400.0)
    ]
    assert got[f"{p}_commit_round_seconds"] == [
        (f"{p}_commit_round_seconds_bucket", {"le": "0.001"}, 1.0),
        (f"{p}_commit_round_seconds_bucket", {"le": "0.01"}, 2.0),
        (f"{p}_commit_round_seconds_bucket", {"le": "+Inf"}, 2.0),
        (f"{p}_commit_round_seconds_count", {}, 2.0),
        (f"{p}_commit_round_seconds_sum", {}, 0.00439453125),
    ]
    assert got[f"{p}_role"] == [(f"{p}_role", {"role": "MASTER"}, 1.0)]
    assert got[f"{p}_master_epoch"] == [(f"{p}_master_epoch", {}, 3.0)]
    assert got[f"{p}_min_offset"] == [(f"{p}_min_offset", {}, 0.0)]
    assert got[f"{p}_max_offset"] == [(f"{p}_max_offset", {}, end)]
    assert got[f"{p}_confirm_offset"] == [(f"{p}_confirm_offset", {}, end)]
    assert got[f"{p}_sync_state_set_size"] == [(f"{p}_sync_state_set_size", {}, 2.0)]
    assert got[f"{p}_slave_lag_bytes"] == [
        (f"{p}_slave_lag_bytes", {"slave": "2"}, 0.0),
        (f"{p}_slave_lag_bytes", {"slave": "3"}, end - 100),
    ]
    assert got[f"{p}_slave_in_sync_state_set"] == [
        (f"{p}_slave_in_sync_state_set", {"slave": "2"}, 1.0),
        (f"{p}_slave_in_sync_state_set", {"slave": "3"}, 0.0),
    ]
    # Lag: queue 0 holds 3 and G committed 1; queue 1 holds 2, committed 2.
    assert got[f"{p}_consumer_lag_messages"] == [
        (f"{p}_consumer_lag_messages", {"group": "G", "topic": "Orders", "queue_id": "0"}, 2.0),
        (f"{p}_consumer_lag_messages", {"group": "G", "topic": "Orders", "queue_id": "1"}, 0.0),
    ]
    assert got[f"{p}_group_commit_syncs"] == [
        (f"{p}_group_commit_syncs_total", {"place": "loop"}, 7.0),
        (f"{p}_group_commit_syncs_total", {"place": "thread"}, 2.0),
    ]
    assert got[f"{p}_group_commit_moves_to_thread"] == [
        (f"{p}_group_commit_moves_to_thread_total", {}, 1.0)
    ]
    ratio = got[f"{p}_disk_usage_ratio"][0][2]
    assert ratio == store.disk_usage_ratio()
    # The retention's deletions when the store has retention (none deleted here).
    deleted = metrics.retention_counts(store)
    if deleted is None:
        assert f"{p}_retention_deleted_segments" not in got
    else:
        assert deleted == (0, 0)
        assert got[f"{p}_retention_deleted_segments"] == [
            (f"{p}_retention_deleted_segments_total", {}, 0.0)
        ]


def test_confirm_offset_bounds_the_consumer_lag_and_a_slave_has_no_master_series(
    store: MessageStore,
) -> None:
    store.put_messages([MessageInput("T", 0, b"a"), MessageInput("T", 0, b"b")], HOST, T0)
    first_end = store.put_messages([MessageInput("T", 0, b"c")], HOST, T0).start_offset
    store.consumer_offsets.commit("G", "T", 0, 0, T0)
    facts = metrics.gather(
        store, cluster_name="C", broker_name="b", broker_id=2, role="SLAVE", master_epoch=3,
        confirm_offset=first_end, sync_state_set=None,
    )  # fmt: skip
    got = _samples(_scrape(facts, BrokerStats(lambda: T0, cluster_name="C"), LatencyBuckets()))
    assert got["brokergroup_broker_confirm_offset"][0][2] == first_end
    for master_only in (
        "sync_state_set_size", "slave_lag_bytes", "consumer_lag_messages", "group_commit_syncs",
    ):  # fmt: skip
        assert f"brokergroup_broker_{master_only}" not in got
    master = metrics.gather(
        store, cluster_name="C", broker_name="b", broker_id=1, role="MASTER", master_epoch=3,
        confirm_offset=first_end, sync_state_set=frozenset({1}),
    )  # fmt: skip
    # Only what consumers may read counts: 2 records below confirmOffset, not 3.
    assert master.consumer_lag == {("G", "T", 0): 2}


def test_retention_deletions_are_read_when_the_store_has_them(store: MessageStore) -> None:
    class Retention:
        deleted_segments_total = 4
        deleted_bytes_total = 4096

    vars(store)["retention"] = Retention()  # a stand-in of store/retention.py's counters
    assert metrics.retention_counts(store) == (4, 4096)


def test_nothing_is_served_before_registration() -> None:
    collector = metrics.BrokerCollector(lambda: None, lambda: None, lambda: None)
    assert metrics.exposition(metrics.registry_of(collector)) == b""


async def test_runtime_info_reports_the_counters(tmp_path: Path) -> None:
    clock = [T0]
    stats = BrokerStats(lambda: clock[0], cluster_name="C")
    for _ in range(11):
        stats.on_put("T", 4, 400)
        stats.on_get("G", "T", 1, 100)
        clock[0] += 1_000

    class Reads:
        async def query_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
            return 0, 0

        async def store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int | None:
            return None

    status = BrokerStatus(
        Reads(), broker_name="b", config={}, topics=dict, wall_ms=lambda: T0, stats=stats
    )
    answer = await status.runtime_info(request(RequestCode.GET_BROKER_RUNTIME_INFO, 0, {}), None)  # type: ignore[arg-type]
    assert answer.code == ResponseCode.SUCCESS
    table = json.loads(answer.body)["table"]
    assert {k: v for k, v in table.items() if k not in ("bootTimestamp", "runtime")} == {
        "earliestMessageTimeStamp": "-1",
        "putTps": "4.0  ",
        "getTransferredTps": "1.0  ",
        "getTransferedTps": "1.0  ",
        "putMessageTimesTotal": "44",
        "putMessageSizeTotal": "4400",
        "putMessageAverageSize": "100.0",
        "msgPutTotalTodayNow": "44",
        "msgPutTotalTodayMorning": "0",
        "msgPutTotalYesterdayMorning": "0",
        "msgGetTotalTodayNow": "11",
        "msgGetTotalTodayMorning": "0",
        "msgGetTotalYesterdayMorning": "0",
    }
    # An idle broker: RocketMQ reports putMessageTimesTotal 1 (it divides by it).
    idle = counters_table(BrokerStats(lambda: T0, cluster_name="C").totals())
    assert (idle["putMessageTimesTotal"], idle["putMessageAverageSize"]) == ("1", "0.0")
