"""The topic rule in the store (DESIGN.md §3.4b, issue 7 item 1).

- The rule itself: RocketMQ's `[%|a-zA-Z0-9_-]`, 1..127 bytes; every rejected
  class names the reason and the rule (and hypothesis agrees with a naive
  reference on arbitrary text).
- A master append with a bad topic raises TopicNotStorable and writes nothing.
- A failure after the commit-log write (indexing raised) rolls the append
  back: the log end is unchanged and the next append succeeds.
- A store that already holds a record with a bad topic (written before the
  rule was enforced; built here by patching a valid record's topic bytes,
  which the body CRC does not cover) opens, keeps the record, reports it and
  goes on serving and appending; a slave receiving such bytes keeps them
  (byte-identical with its master), reports them and raises nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_broker.store import MessageInput, MessageStore, StoreConfig
from brokergroup_broker.store.errors import StoreCorruption, TopicNotStorable
from brokergroup_broker.topics import TOPIC_RULE, TopicInvalid, check_topic, topic_error

HOST = ("127.0.0.1", 10911)
REJECTED = ["orders.v1", "orders v1", "orders/v1", "bestellungen-ü", "", "t" * 128]


def cfg() -> StoreConfig:
    return StoreConfig(commit_log_segment_bytes=1 << 16)


def batch(topic: str, n: int = 3) -> list[MessageInput]:
    return [MessageInput(topic, 0, b"body-%d" % i, {}) for i in range(n)]


@pytest.mark.parametrize("topic", REJECTED)
def test_each_rejected_class_names_the_rule(topic: str) -> None:
    error = topic_error(topic)
    assert error is not None and TOPIC_RULE in error
    with pytest.raises(TopicInvalid, match=re.escape(TOPIC_RULE)):
        check_topic(topic)


@pytest.mark.parametrize("topic", ["T", "orders_v1", "%RETRY%group-1", "a|b", "x" * 127])
def test_valid_names(topic: str) -> None:
    assert topic_error(topic) is None


@given(st.text(max_size=140))
def test_rule_matches_a_naive_reference(topic: str) -> None:
    allowed = set("%|_-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    naive = 1 <= len(topic.encode()) <= 127 and all(c in allowed for c in topic)
    assert (topic_error(topic) is None) == naive


@pytest.mark.parametrize("topic", REJECTED)
def test_bad_topic_appends_nothing(tmp_path: Path, topic: str) -> None:
    with MessageStore.open(tmp_path, cfg()) as store:
        store.put_messages(batch("T"), HOST, 1)
        end = store.max_offset
        with pytest.raises(TopicNotStorable):
            store.put_messages(batch(topic), HOST, 2)
        with pytest.raises(TopicNotStorable):
            store.put_run(topic, 0, [b"x"], None, store_host=HOST, born_host=HOST, now_ms=3)
        assert store.max_offset == end and store.writable() == (True, None)
        assert store.put_messages(batch("T"), HOST, 4).start_offset == end


def test_a_failure_after_the_log_write_rolls_the_append_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MessageStore.open(tmp_path, cfg()) as store:
        store.put_messages(batch("T"), HOST, 1)
        end = store.max_offset

        def broken_dispatch(*args: object, **kwargs: object) -> None:
            raise RuntimeError("index bug")

        monkeypatch.setattr(store.queues, "dispatch", broken_dispatch)
        with pytest.raises(StoreCorruption, match="index bug"):
            store.put_messages(batch("T"), HOST, 2)
        monkeypatch.undo()
        assert store.max_offset == end
        assert store.writable() == (True, None)  # rolled back: healthy and consistent
        res = store.put_messages(batch("T"), HOST, 3)
        assert res.start_offset == end
        assert [m.queue_offset for m in res.messages] == [3, 4, 5]


def _store_with_a_bad_topic_record(root: Path) -> tuple[int, int]:
    """good (3) + bad (1) + good (3) records; returns (bad record offset, log end)."""
    with MessageStore.open(root, cfg()) as store:
        store.put_messages(batch("T"), HOST, 1)
        bad_at = store.max_offset
        store.put_messages(batch("orders_v1", 1), HOST, 2)
        store.put_messages(batch("T"), HOST, 3)
        end = store.max_offset
    log = next((root / "commitlog").iterdir())
    data = bytearray(log.read_bytes())
    i = data.index(b"orders_v1", bad_at)
    data[i : i + 9] = b"orders.v1"
    log.write_bytes(bytes(data))
    return bad_at, end


def test_a_store_holding_a_bad_topic_record_opens_reports_and_serves(tmp_path: Path) -> None:
    bad_at, end = _store_with_a_bad_topic_record(tmp_path)
    bodies = [b"body-%d" % i for i in (0, 1, 2, 0, 1, 2)]
    # 1st open: the checkpoint covers the record (nothing to re-index); 2nd open:
    # the consume queues are gone, so the full rebuild meets the record.
    for consume_queues_lost, unindexed in ((False, 0), (True, 1)):
        if consume_queues_lost:
            for f in sorted((tmp_path / "consumequeue").rglob("*"), reverse=True):
                f.unlink() if f.is_file() else f.rmdir()
        with MessageStore.open(tmp_path, cfg()) as store:
            assert store.max_offset == end  # kept, not cut
            assert store.records_unindexed == store.recovery.records_unindexed == unindexed
            got = store.get_messages("T", 0, 0, 20, store.max_offset)
            assert [bytes(m.body) for m in got] == bodies
            first = len(bodies)
            res = store.put_messages(batch("T"), HOST, 9)
            assert [m.queue_offset for m in res.messages] == [first, first + 1, first + 2]
            bodies += [b"body-%d" % i for i in (0, 1, 2)]
            end = store.max_offset
    assert not (tmp_path / "consumequeue" / "orders.v1").exists()
    assert bad_at > 0


def test_a_slave_keeps_reports_and_does_not_refuse_a_bad_topic_record(tmp_path: Path) -> None:
    _, end = _store_with_a_bad_topic_record(tmp_path / "master")
    raw = next((tmp_path / "master" / "commitlog").iterdir()).read_bytes()[:end]
    with MessageStore.open(tmp_path / "slave", cfg()) as slave:
        assert slave.append_replicated(0, raw) == end
        assert slave.records_unindexed == 1
        got = slave.get_messages("T", 0, 0, 10, slave.max_offset)
        assert [m.queue_offset for m in got] == [0, 1, 2, 3, 4, 5]
        assert slave.read_bytes(0, end) == raw  # byte-identical with the master
