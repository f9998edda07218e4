"""The rules and bounds of client state, each on its own (issue 31 item 3; pure).

- names (`brokergroup_remoting.names`): generated legal and illegal topic and group names,
  the length boundaries 127 (topic), 120 (a consumer group: its %RETRY% topic), 255 (a
  producer group) and non-ASCII characters; the header readers raise BadField only; the
  store's topic rule is the same function.
- consumer members (`remoting_front.clients.ConsumerGroups`): bounded per connection, per
  group and in total; a renewal takes no room; expired members are purged oldest first, a
  bounded number per call; a closed connection's members go with it; a group stays known
  (offsets may be committed for it) after its members leave, the most recent 10,000.
- queue locks (`QueueLocks`): expire after 60 s, are taken over, are purged as locks are
  taken, and the table is bounded.
- consumer offsets (`store.consumer_offsets`): per group, groups and total bounds refuse a
  new key and change nothing; a held key is always updated; bounds survive a reload.
- the name server's registration body: a bad topic name is left out and named, the other
  topics kept (JSON and compressed bodies); a broken topic config still refuses the body.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker import topics as store_topics
from brokergroup_broker.remoting_front.clients import (
    CHANNEL_EXPIRED_MS,
    LOCK_EXPIRED_MS,
    PURGE_PER_CALL,
    ConsumerGroups,
    MemberBounds,
    QueueLocks,
)
from brokergroup_broker.store.consumer_offsets import (
    ConsumerOffsetsFull,
    ConsumerOffsetStore,
    OffsetBounds,
)
from brokergroup_controller.namesrv import bodies
from brokergroup_remoting import names
from brokergroup_remoting.fields import BadField

LEGAL = "%|abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
ILLEGAL = st.characters(
    blacklist_characters=LEGAL, blacklist_categories=("Cs",)
)  # any other code point: '.', ' ', '/', 'é', '中', '٣', emoji…


def legal(min_size: int, max_size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=LEGAL, min_size=min_size, max_size=max_size)


def with_one_illegal(max_size: int) -> st.SearchStrategy[str]:
    return st.tuples(legal(0, max_size - 1), ILLEGAL, st.integers(0, max_size)).map(
        lambda t: t[0][: t[2]] + t[1] + t[0][t[2] :]
    )


# ---------------------------------------------------------------- names


@given(legal(1, 127))
def test_every_legal_topic_of_1_to_127_characters_is_a_topic(topic: str) -> None:
    assert names.topic_error(topic) is None
    assert names.topic_name({"topic": topic}) == topic
    assert store_topics.topic_error(topic) is None  # the store's rule is the same one


@given(st.one_of(legal(128, 400), with_one_illegal(127), st.just("")))
def test_a_long_empty_or_non_charset_topic_is_refused_naming_the_rule(topic: str) -> None:
    error = names.topic_error(topic)
    assert error is not None and names.TOPIC_RULE in error
    assert store_topics.topic_error(topic) == error
    with pytest.raises(BadField) as refused:
        names.topic_name({"topic": topic})
    assert "topic" in refused.value.remark


@given(legal(1, 120))
def test_a_consumer_group_of_up_to_120_characters_has_a_retry_and_dlq_topic(group: str) -> None:
    assert names.group_error(group) is None
    assert names.group_name({"consumerGroup": group}, "consumerGroup") == group
    assert names.topic_error(names.retry_topic(group)) is None
    assert names.topic_error(names.dlq_topic(group)) is None


@given(st.one_of(legal(121, 255), legal(256, 600), with_one_illegal(120), st.just("")))
def test_a_consumer_group_beyond_120_or_outside_the_charset_is_refused(group: str) -> None:
    assert names.group_error(group) is not None
    with pytest.raises(BadField):
        names.group_name({"consumerGroup": group}, "consumerGroup")
    with pytest.raises(BadField):
        names.check_group(group, "a groupName")


def test_the_length_boundaries() -> None:
    assert names.topic_error("t" * 127) is None and names.topic_error("t" * 128) is not None
    assert names.group_error("g" * 120) is None and names.group_error("g" * 121) is not None
    assert names.topic_error("%RETRY%" + "g" * 121) is not None  # why 120
    assert names.producer_group_error("p" * 255) is None
    assert names.producer_group_error("p" * 256) is not None
    for bad in ("中文", "grüße", "a.b", "a b", "a/b", "١٢", "a\nb"):
        assert names.topic_error(bad) is not None and names.group_error(bad) is not None
    assert names.optional_group_name({}, "consumerGroup") is None
    assert names.optional_group_name({"consumerGroup": ""}, "consumerGroup") is None


@given(st.dictionaries(st.sampled_from(["topic", "consumerGroup"]), st.text(max_size=300)))
def test_the_readers_raise_bad_field_only(fields: dict[str, str]) -> None:
    for read in (
        lambda: names.topic_name(fields),
        lambda: names.group_name(fields, "consumerGroup"),
        lambda: names.optional_group_name(fields, "consumerGroup"),
    ):
        try:
            read()
        except BadField as exc:
            assert "\n" not in exc.remark  # a remark quotes, it does not echo
    for value in (None, 7, ["t"], {"t": 1}):
        with pytest.raises(BadField):
            names.check_topic(value)
        with pytest.raises(BadField):
            names.check_group(value)


# ---------------------------------------------------------------- consumer members


def test_members_are_bounded_per_connection_per_group_and_in_total() -> None:
    groups = ConsumerGroups(MemberBounds(per_connection=3, per_group=3, total=7))
    for i in range(3):
        assert groups.heartbeat(f"g{i}", "c", 1, 0)
    assert not groups.heartbeat("g3", "c", 1, 0)  # a 4th member on connection 1
    assert "per connection" in (groups.refusal("g3", "c", 1, 0) or "")
    assert groups.heartbeat("g0", "c", 1, 5)  # a renewal takes no room
    assert groups.heartbeat("g3", "c2", 2, 0)  # another connection is not blocked
    for conn in (3, 4):
        assert groups.heartbeat("g0", f"c{conn}", conn, 0)
    assert not groups.heartbeat("g0", "c5", 5, 0)  # g0 has 3 members (per group)
    assert "group g0" in (groups.refusal("g0", "c5", 5, 0) or "")
    assert groups.heartbeat("g4", "c5", 5, 0)
    assert len(groups) == 7
    assert not groups.heartbeat("g5", "c6", 6, 0)  # 7 in total
    assert "7 consumers" in (groups.refusal("g5", "c6", 6, 0) or "")
    assert groups.drop_connection(1) == ["g0", "g1", "g2"]
    assert len(groups) == 4 and groups.heartbeat("g5", "c6", 6, 0)


def test_a_member_moving_to_a_new_connection_is_counted_there() -> None:
    groups = ConsumerGroups(MemberBounds(per_connection=1))
    assert groups.heartbeat("g", "c", 1, 0)
    assert groups.joins("g", "c", 2) and groups.heartbeat("g", "c", 2, 0)
    assert groups.heartbeat("h", "d", 1, 0)  # connection 1 holds nothing any more
    assert groups.connections("g") == [2]
    assert groups.drop_connection(2) == ["g"] and groups.connections("g") == []


def test_a_group_stays_known_after_its_members_leave_within_a_bound() -> None:
    """RocketMQ keeps a group's subscription config after its consumers leave, and a stock
    lite consumer persists its offsets right after UNREGISTER_CLIENT."""
    groups = ConsumerGroups(MemberBounds(heard_groups=2))
    assert not groups.known("g")
    groups.heartbeat("g", "c", 1, 0)
    assert groups.unregister("g", "c") and groups.known("g")
    groups.heartbeat("h", "c", 1, 0)
    groups.heartbeat("g", "c", 1, 0)  # heard again: the most recent
    groups.heartbeat("k", "c", 1, 0)  # a third: the least recently heard (h) is forgotten
    groups.drop_connection(1)
    assert groups.known("g") and groups.known("k") and not groups.known("h")


def test_expired_members_are_purged_oldest_first_a_bounded_number_per_call() -> None:
    groups = ConsumerGroups()
    count = PURGE_PER_CALL * 2 + 1
    for i in range(count):
        groups.heartbeat(f"g{i}", "c", i, i)
    groups.heartbeat("live", "c", 10**6, CHANNEL_EXPIRED_MS)
    later = count + CHANNEL_EXPIRED_MS
    assert len(groups.purge(later)) == PURGE_PER_CALL
    assert "g0" not in groups.groups and f"g{count - 1}" in groups.groups
    groups.purge(later)
    groups.purge(later)
    assert sorted(groups.groups) == ["live"]  # the one heard within 120 s stays


# ---------------------------------------------------------------- queue locks


def test_locks_expire_are_taken_over_purged_and_bounded() -> None:
    locks = QueueLocks(max_locks=3)
    qs = [("g", "T", "b", i) for i in range(4)]
    assert locks.lock(qs, "c1", 0) == qs[:3]  # the table holds 3
    assert locks.lock(qs[:1], "c2", LOCK_EXPIRED_MS) == []  # 60 s is not expired yet
    assert locks.lock(qs[:1], "c1", LOCK_EXPIRED_MS) == qs[:1]  # renewed
    later = 2 * LOCK_EXPIRED_MS
    assert locks.lock(qs[3:], "c2", later) == qs[3:]  # 2 expired ones purged: room
    assert len(locks) == 2  # q0 (renewed at 60 s) and q3
    assert locks.lock(qs[:1], "c2", later + 1) == qs[:1]  # q0 expired: taken over
    locks.unlock(qs, "c1")
    assert len(locks) == 2


# ---------------------------------------------------------------- consumer offsets


def test_offset_bounds_refuse_a_new_key_and_change_nothing(tmp_path: Path) -> None:
    store = ConsumerOffsetStore(tmp_path, OffsetBounds(per_group=2, groups=2, total=3))
    store.commit("g", "T", 0, 1, 1)
    store.commit("g", "T", 1, 1, 1)
    with pytest.raises(ConsumerOffsetsFull, match="group g holds 2"):
        store.commit("g", "T", 2, 1, 1)
    store.commit("g", "T", 0, 9, 2)  # a held key is always updated
    store.commit("h", "T", 0, 1, 3)
    with pytest.raises(ConsumerOffsetsFull, match="consumer groups"):
        store.commit("k", "T", 0, 1, 4)
    with pytest.raises(ConsumerOffsetsFull, match="3 consumer offsets"):
        store.commit("h", "T", 1, 1, 4)
    version = store.version
    assert len(store) == 3 and store.get("g", "T", 0) == 9 and store.version == version
    store.persist()
    reopened = ConsumerOffsetStore(tmp_path, OffsetBounds(per_group=2, groups=2, total=3))
    assert reopened.holds_group("g") and not reopened.holds_group("k")
    with pytest.raises(ConsumerOffsetsFull):
        reopened.commit("g", "T", 5, 1, 5)


# ---------------------------------------------------------------- name server bodies


def _config(name: str) -> dict[str, object]:
    return {"topicName": name, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}


def test_a_registration_keeps_its_good_topics_and_names_its_bad_ones() -> None:
    bad = ["%RETRY%" + "g" * 121, "a.b", "中文"]
    table = {n: _config(n) for n in ["orders", *bad, "payments"]}
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}}).encode()
    decoded = bodies.register_body(body, False)
    assert set(decoded.topics) == {"orders", "payments"}
    assert sorted(decoded.refused) == sorted(bad) and decoded.refused_count == 3

    def part(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    raw = part(b'{"counter":1}') + struct.pack(">i", 3)
    for name in ("orders", "a.b", "payments"):
        raw += part(f"{name} 4 4 6 SINGLE_TAG {{}}".encode())
    decoded = bodies.register_body(zlib.compress(raw + part(b"[]")), True)
    assert set(decoded.topics) == {"orders", "payments"} and decoded.refused == ("a.b",)


def test_refused_names_are_bounded_and_a_broken_config_still_refuses_the_body() -> None:
    table = {f"bad.{i}": _config(f"bad.{i}") for i in range(100)}
    table["orders"] = _config("orders")
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}}).encode()
    decoded = bodies.register_body(body, False)
    assert len(decoded.refused) == bodies.MAX_REFUSED_NAMED and decoded.refused_count == 100
    broken = {"orders": {"topicName": "orders", "readQueueNums": "4"}}
    body = json.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": broken}}).encode()
    with pytest.raises(BadField, match="readQueueNums"):
        bodies.register_body(body, False)
