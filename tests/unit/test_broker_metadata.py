"""The broker's metadata tables (issue 33 item 3; broker-image/brokergroup_broker/metadata):
DataVersion ordered as RocketMQ's DataVersion.compare; the rules between replicas (a slave
takes any different master table, a new master only a newer peer table, whole, so a
deletion stays deleted; store topics without a config are adopted, deleted ones are not);
bounds that refuse and change nothing; RocketMQ's attribute modifications; and the files: a
real process killed between the temp file's fsync and the rename leaves the old table, one
killed after the rename the new one, never a torn file, and a bad file is set aside, not
trusted. On the old code (08e4c59) the package does not exist: every test fails at import.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from brokergroup_broker.metadata import (
    BadMetadata,
    BrokerMetadata,
    DataVersion,
    GroupTable,
    MetadataBounds,
    MetadataFull,
    MetadataWriteFailed,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicTable,
)
from brokergroup_broker.metadata.attributes import TOPIC_ATTRIBUTES, alter, parse_modification
from brokergroup_broker.metadata.files import GROUPS_FILE, TOPICS_FILE
from brokergroup_broker.metadata.tables import merged_newer, synced_from_master

T0 = 1_700_000_000_000
BOUNDS = MetadataBounds()


def test_data_version_orders_as_rocketmq_compare() -> None:
    """DataVersion.compare: stateVersion, then counter, then timestamp."""
    versions = [
        DataVersion(0, T0 + 5, 1),
        DataVersion(0, T0, 2),
        DataVersion(0, T0 + 1, 2),
        DataVersion(1, 0, 0),
    ]
    assert sorted(reversed(versions), key=DataVersion.order_key) == versions
    assert all(b.is_newer(a) and not a.is_newer(b) for a, b in itertools.pairwise(versions))
    assert not DataVersion(0, T0, 2).is_newer(DataVersion(0, T0, 2))
    # nextVersion: counter + 1 and the clock given, even one that went back.
    assert DataVersion(0, T0, 7).next(T0 - 10) == DataVersion(0, T0 - 10, 8)
    assert DataVersion(0, T0, 7).next(T0 - 10).is_newer(DataVersion(0, T0, 7))
    assert DataVersion.from_json({"counter": 3, "stateVersion": 0, "timestamp": T0}) == (
        DataVersion(0, T0, 3)
    )
    for bad in ({"counter": -1}, {"timestamp": "1"}, [1]):
        with pytest.raises(BadMetadata):
            DataVersion.from_json(bad)


def _table(*names: str, at: int = T0) -> TopicTable:
    table = TopicTable()
    for i, name in enumerate(names):
        table = table.put(TopicConfig(name, 4, 4), at + i, BOUNDS)
    return table


def test_a_slave_takes_any_different_master_table_a_new_master_only_a_newer_one() -> None:
    mine = _table("A", "B")
    newer_without_b = mine.delete("B", T0 + 100, BOUNDS)
    assert newer_without_b.version.is_newer(mine.version)
    # Whole: B's deletion is kept, not merged back from the older table.
    assert merged_newer(mine, newer_without_b) is newer_without_b
    assert list(merged_newer(mine, newer_without_b).entries) == ["A"]
    assert merged_newer(newer_without_b, mine) is newer_without_b  # older: nothing taken
    assert merged_newer(mine, mine) is mine
    # A slave follows its master whatever the order (a master that restarted older).
    assert synced_from_master(newer_without_b, mine) is mine
    assert synced_from_master(mine, _table("A", "B")) is mine  # same version: kept


def test_store_topics_are_adopted_unless_deleted_and_within_the_bound() -> None:
    table = _table("Kept").delete("Gone", T0 + 50, BOUNDS)
    adopted = table.adopt({"Kept": 8, "Gone": 4, "New": 6, "bad name": 4}, T0 + 60, BOUNDS)
    assert sorted(adopted.entries) == ["Kept", "New"]
    assert adopted.entries["New"] == TopicConfig("New", 6, 6)
    assert adopted.entries["Kept"].queue_count == 4  # a config wins over the store
    assert adopted.version == table.version.next(T0 + 60)
    assert table.adopt({"Kept": 4}, T0 + 70, BOUNDS) is table  # nothing new: no new version
    small = MetadataBounds(topics=2)
    assert sorted(table.adopt({"X": 1, "Y": 1}, T0, small).entries) == ["Kept", "X"]
    # Creating a deleted topic again forgets its deletion.
    again = table.put(TopicConfig("Gone", 1, 1), T0 + 80, BOUNDS)
    assert "Gone" not in again.deleted and "Gone" in again
    # The remembered deletions are bounded, oldest forgotten first.
    few = MetadataBounds(deleted_topics=2)
    gone = TopicTable()
    for i, name in enumerate(("D1", "D2", "D3")):
        gone = gone.delete(name, T0 + i, few)
    assert list(gone.deleted) == ["D2", "D3"]


def test_bounds_refuse_new_entries_and_change_nothing() -> None:
    bounds = MetadataBounds(topics=1, groups=1)
    table = TopicTable().put(TopicConfig("A", 1, 1), T0, bounds)
    with pytest.raises(MetadataFull, match="maxTopics 1"):
        table.put(TopicConfig("B", 1, 1), T0, bounds)
    assert list(table.entries) == ["A"]
    assert table.put(TopicConfig("A", 2, 2), T0 + 1, bounds).entries["A"].queue_count == 2
    groups = GroupTable().put(SubscriptionGroupConfig("g1"), T0, bounds)
    with pytest.raises(MetadataFull):
        groups.put(SubscriptionGroupConfig("g2"), T0, bounds)
    assert list(groups.entries) == ["g1"]


def test_attribute_modifications_follow_rocketmqs_rules() -> None:
    assert parse_modification("+message.type=FIFO,-cleanup.policy") == {
        "+message.type": "FIFO",
        "-cleanup.policy": "",
    }
    for bad in ("message.type=FIFO", "cleanup.policy", "+a=1,+a=2"):
        with pytest.raises(BadMetadata):
            parse_modification(bad)
    created = alter(
        {}, {"+message.type": "FIFO", "+queue.type": "SimpleCQ"}, create=True,
        rules=TOPIC_ATTRIBUTES,
    )  # fmt: skip
    assert created == {"message.type": "FIFO", "queue.type": "SimpleCQ"}
    changed = alter(created, {"+message.type": "NORMAL"}, create=False, rules=TOPIC_ATTRIBUTES)
    assert changed == {"message.type": "NORMAL", "queue.type": "SimpleCQ"}
    refusals = [
        ({"-message.type": ""}, True, "only add"),
        ({"+queue.type": "BatchCQ"}, False, "unchangeable"),
        ({"-nope.key": ""}, False, "unsupported key"),
        ({"+message.type": "MIXED"}, True, "not in set"),
        ({"-cleanup.policy": ""}, False, "nonexistent"),
    ]
    for modification, create, why in refusals:
        with pytest.raises(BadMetadata, match=why):
            alter(created, modification, create=create, rules=TOPIC_ATTRIBUTES)


def test_configs_round_trip_rocketmqs_json_and_refuse_bad_fields() -> None:
    java_group = {  # SubscriptionGroupConfig as fastjson writes mqadmin updateSubGroup's
        "attributes": {}, "brokerId": 0, "consumeBroadcastEnable": False,
        "consumeEnable": True, "consumeFromMinEnable": False, "consumeMessageOrderly": False,
        "consumeTimeoutMinute": 15, "groupName": "g", "groupRetryPolicy": {"type": "CUSTOMIZED"},
        "groupSysFlag": 0, "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 3,
        "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1,
    }  # fmt: skip
    assert SubscriptionGroupConfig.from_json(java_group).to_json() == java_group
    topic = {
        "attributes": {"message.type": "FIFO"}, "order": True, "perm": 4,
        "readQueueNums": 3, "topicFilterType": "SINGLE_TAG", "topicName": "T",
        "topicSysFlag": 0, "writeQueueNums": 2,
    }  # fmt: skip
    assert TopicConfig.from_json(topic).to_json() == topic
    for bad in (
        {**topic, "topicName": "a b"},
        {**topic, "readQueueNums": 5000},
        {**topic, "perm": "6"},
        {**topic, "topicFilterType": "SQL"},
        {**topic, "attributes": {"reserve.time": "1"}},
    ):
        with pytest.raises(BadMetadata):
            TopicConfig.from_json(bad)
    for bad_group in ({**java_group, "retryMaxTimes": -2}, {**java_group, "consumeEnable": 1},
                      {**java_group, "groupName": "%bad group"}):  # fmt: skip
        with pytest.raises(BadMetadata):
            SubscriptionGroupConfig.from_json(bad_group)


# ---------------------------------------------------------------- files

_CRASH = """
import os, sys
from pathlib import Path
from brokergroup_broker.metadata import BrokerMetadata, TopicConfig

def crash(step: str) -> None:
    if step == sys.argv[2]:
        os._exit(137)  # as SIGKILL: nothing after this step runs

m = BrokerMetadata(Path(sys.argv[1]), crash_point=crash)
m.put_topic(TopicConfig("New", 2, 2), 1_700_000_000_999)
"""


def _crash_writing(root: Path, step: str) -> int:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _CRASH, str(root), step], env=env, check=False)
    return done.returncode


@pytest.mark.parametrize(("step", "expected"), [("written", ["Old"]), ("renamed", ["New", "Old"])])
def test_a_process_killed_mid_write_leaves_the_old_or_the_new_table_whole(
    tmp_path: Path, step: str, expected: list[str]
) -> None:
    BrokerMetadata(tmp_path).put_topic(TopicConfig("Old", 1, 1), T0)
    assert _crash_writing(tmp_path, step) == 137
    leftover = (tmp_path / TOPICS_FILE).with_name("topics.json.tmp")
    assert leftover.exists() == (step == "written")  # the killed write's temp file
    reopened = BrokerMetadata(tmp_path)
    assert sorted(reopened.topics.entries) == expected
    assert not leftover.exists()  # removed unread
    # The file is one whole JSON document either way.
    assert sorted(json.loads((tmp_path / TOPICS_FILE).read_text())["topicConfigTable"]) == expected


def test_a_torn_temp_file_is_never_read_and_a_bad_table_file_is_set_aside(tmp_path: Path) -> None:
    m = BrokerMetadata(tmp_path)
    m.put_topic(TopicConfig("Old", 1, 1), T0)
    m.put_group(SubscriptionGroupConfig("g", retry_max_times=2), T0)
    tmp = (tmp_path / TOPICS_FILE).with_name("topics.json.tmp")
    tmp.write_text('{"topicConfigTable": {"Torn"')
    assert sorted(BrokerMetadata(tmp_path).topics.entries) == ["Old"]
    # A file that is not a table (a hand edit, a disk fault): kept aside, not trusted.
    (tmp_path / GROUPS_FILE).write_text('{"subscriptionGroupTable": {"g": {"groupName": 7}}}')
    reopened = BrokerMetadata(tmp_path)
    assert len(reopened.groups) == 0 and reopened.groups.version == DataVersion()
    aside = (tmp_path / GROUPS_FILE).with_name("subscriptionGroup.json.corrupt")
    assert json.loads(aside.read_text()) == {"subscriptionGroupTable": {"g": {"groupName": 7}}}
    assert sorted(reopened.topics.entries) == ["Old"]


def test_a_change_that_cannot_be_written_changes_nothing(tmp_path: Path) -> None:
    def fail(step: str) -> None:
        if step == "written":
            raise OSError(28, "No space left on device")

    m = BrokerMetadata(tmp_path)
    m.put_topic(TopicConfig("Old", 1, 1), T0)
    before = m.topics
    failing = BrokerMetadata(tmp_path, crash_point=fail)
    with pytest.raises(MetadataWriteFailed, match="No space left"):
        failing.put_topic(TopicConfig("New", 1, 1), T0 + 1)
    assert failing.topics.version == before.version and sorted(failing.topics.entries) == ["Old"]
    assert sorted(BrokerMetadata(tmp_path).topics.entries) == ["Old"]


def test_peer_snapshots_are_checked_whole_and_merged_by_version(tmp_path: Path) -> None:
    master = BrokerMetadata(tmp_path / "master")
    master.put_topic(TopicConfig("T", 2, 2), T0)
    master.put_group(SubscriptionGroupConfig("g", consume_enable=False), T0)
    slave = BrokerMetadata(tmp_path / "slave")
    assert slave.sync_from_master(*slave.parse_snapshot(master.snapshot()))
    assert slave.snapshot() == master.snapshot()
    assert BrokerMetadata(tmp_path / "slave").snapshot() == master.snapshot()  # durable
    assert not slave.sync_from_master(*slave.parse_snapshot(master.snapshot()))
    bad = master.snapshot()
    bad["topics"]["topicConfigTable"]["T"]["readQueueNums"] = -1
    with pytest.raises(BadMetadata):
        slave.parse_snapshot(bad)
    # A new master takes only newer tables.
    master.delete_topic("T", T0 + 5)
    assert slave.merge_newer(*slave.parse_snapshot(master.snapshot()))
    assert "T" not in slave.topics and "T" in slave.topics.deleted
    old = BrokerMetadata(tmp_path / "old")
    old.put_topic(TopicConfig("T", 2, 2), T0)
    assert not slave.merge_newer(*slave.parse_snapshot(old.snapshot()))
    assert "T" not in slave.topics
