"""The controller event export's pure part (event_export): two views in, event lines out,
and where the old master's last heartbeat comes from when the view after an election has
none of it (a new controller leader never heard from it; a restarted broker has not
heartbeated yet)."""

from __future__ import annotations

from dataclasses import replace

from brokergroup_controller.api import BrokerLiveness, ReplicaInfo
from brokergroup_controller.event_export import Heartbeat, change_events, heartbeats_seen


def _view(master: int | None, epoch: int, ages: dict[int, int | None]) -> ReplicaInfo:
    return ReplicaInfo(
        cluster_name="c",
        broker_name="b",
        master_broker_id=master,
        master_address=None,
        master_alive=master is not None,
        master_epoch=epoch,
        sync_state_set=frozenset(ages),
        sync_state_set_epoch=epoch,
        brokers=tuple(
            BrokerLiveness(
                broker_id=i,
                address=f"a{i}",
                alive=age is not None,
                max_offset=1000 * i,
                last_heartbeat_age_ms=age,
            )
            for i, age in ages.items()
        ),
    )


def test_the_view_after_the_election_names_the_old_masters_last_heartbeat() -> None:
    before = _view(1, 1, {1: 100, 2: 50})
    after = _view(2, 2, {1: 3000, 2: 40})
    seen = {1: Heartbeat(1_000, 7)}
    (line,) = change_events(before, 1, after, 10_000, seen)
    assert (line["type"], line["masterBrokerId"], line["previousMasterBrokerId"]) == (
        "MasterElected", 2, 1,
    )  # fmt: skip
    # The controller's own view wins over what the recorder saw earlier.
    assert line["previousMasterLastHeartbeatMs"] == 7_000
    assert line["previousMasterMaxOffset"] == 1000
    assert line["previousMasterHeartbeatFrom"] == "controller"


def test_without_it_the_recorders_last_sight_of_the_old_master_stands_in() -> None:
    before = _view(1, 1, {1: 100, 2: 50})
    after = _view(2, 2, {1: None, 2: 40})  # a new leader, or broker 1 restarted: never heard
    seen = heartbeats_seen({}, _view(1, 1, {1: 300, 2: 200}), 5_000)
    seen = heartbeats_seen(seen, before, 6_000)
    (line,) = change_events(before, 1, after, 10_000, seen)
    assert line["previousMasterLastHeartbeatMs"] == 5_900
    assert line["previousMasterMaxOffset"] == 1000
    assert line["previousMasterHeartbeatFrom"] == "recorder"


def test_with_neither_the_fields_are_absent_not_guessed() -> None:
    before = _view(1, 1, {1: 100, 2: 50})
    after = _view(2, 2, {1: None, 2: 40})
    for seen in (None, {}, {2: Heartbeat(9_000, 5)}):
        (line,) = change_events(before, 1, after, 10_000, seen)
        for field in ("previousMasterLastHeartbeatMs", "previousMasterMaxOffset",
                      "previousMasterHeartbeatFrom"):  # fmt: skip
            assert field not in line, (seen, line)


def test_heartbeats_seen_keeps_each_brokers_latest_and_skips_the_unheard() -> None:
    seen = heartbeats_seen({}, _view(1, 1, {1: 100, 2: None}), 10_000)
    assert seen == {1: Heartbeat(9_900, 1000)}
    # A later view with an older heartbeat (a view from a lagging leader) changes nothing.
    assert heartbeats_seen(seen, _view(1, 1, {1: 500, 2: None}), 10_200) == seen
    later = heartbeats_seen(seen, _view(1, 1, {1: 0, 2: 20}), 11_000)
    assert later == {1: Heartbeat(11_000, 1000), 2: Heartbeat(10_980, 2000)}
    assert seen == {1: Heartbeat(9_900, 1000)}  # not modified in place


def test_a_sync_state_set_change_and_a_first_view_carry_no_heartbeat_fields() -> None:
    first = _view(1, 1, {1: 100})
    (snap,) = change_events(None, None, first, 1_000, {1: Heartbeat(900, 1)})
    assert snap["type"] == "Snapshot"
    grown = replace(first, sync_state_set=frozenset({1, 2}), sync_state_set_epoch=2)
    (changed,) = change_events(first, 1, grown, 2_000, {1: Heartbeat(900, 1)})
    assert changed["type"] == "SyncStateSetChanged"
    assert not any(k.startswith("previousMaster") for k in (*snap, *changed))
