"""Leader-local liveness (DESIGN.md §2.3) on the pure `Liveness` class.

Time is an argument (`now_ms`), so every scenario is exact: per-broker
heartbeat timeouts, the store-not-writable / reported / connection-closed
verdicts, the one-timeout grace of a new leader, forward-only progress
(hypothesis), and the election schedule: a master that becomes inactive is
due at once, retried with exponential backoff while attempts fail, and
dropped when an attempt succeeds or the master is alive again.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from brokergroup_controller.api import BrokerHeartbeat
from brokergroup_controller.election import ReplicaHeartbeat
from brokergroup_controller.liveness import InactiveReason, Liveness, WatchedSet

C, B = "DefaultCluster", "broker-a"
SET = (C, B)


def hb(
    broker_id: int,
    *,
    epoch: int = 1,
    max_offset: int = 0,
    timeout_ms: int = 1000,
    writable: bool = True,
    priority: int = 0,
) -> BrokerHeartbeat:
    return BrokerHeartbeat(
        C,
        B,
        broker_id,
        f"10.0.0.{broker_id}:10911",
        epoch=epoch,
        max_offset=max_offset,
        confirm_offset=max_offset,
        election_priority=priority,
        heartbeat_timeout_ms=timeout_ms,
        store_writable=writable,
        store_error=None if writable else "disk 96% full",
    )


def leader(now_ms: int = 0, **kw: int) -> Liveness:
    liveness = Liveness(default_timeout_ms=2000, **kw)
    liveness.become_leader(now_ms)
    return liveness


def test_heartbeat_timeout_is_per_broker() -> None:
    """§2.3: inactive when the heartbeat is older than the broker's own timeout."""
    lv = leader(now_ms=-10_000)  # grace long over
    lv.heartbeat(hb(1, timeout_ms=500), 0)
    lv.heartbeat(hb(2, timeout_ms=3000), 0)
    assert lv.is_alive((C, B, 1), 500) and lv.is_alive((C, B, 2), 500)
    assert not lv.is_alive((C, B, 1), 501)
    assert lv.inactive_reason((C, B, 1), 501) == InactiveReason.HEARTBEAT_TIMEOUT.value
    assert lv.is_alive((C, B, 2), 3000) and not lv.is_alive((C, B, 2), 3001)


def test_store_not_writable_is_inactive_until_writable_again() -> None:
    """§2.3 (RocketMQ issue 6468): a full disk is a reason to fail over."""
    lv = leader()
    lv.heartbeat(hb(1, writable=False), 10)
    reason = lv.inactive_reason((C, B, 1), 10)
    assert reason is not None and "disk 96% full" in reason
    lv.heartbeat(hb(1), 20)
    assert lv.is_alive((C, B, 1), 20)


def test_inactive_reasons_of_a_set_in_broker_order() -> None:
    lv = leader(now_ms=-10_000)  # grace long over
    lv.heartbeat(hb(3, writable=False), 0)
    lv.heartbeat(hb(1), 0)
    assert lv.inactive_reasons(SET, [4, 3, 2, 1], 10) == {
        2: InactiveReason.NEVER_HEARD.value,
        3: f"{InactiveReason.STORE_NOT_WRITABLE.value}: disk 96% full",
        4: InactiveReason.NEVER_HEARD.value,
    }
    assert list(lv.inactive_reasons(SET, [4, 3, 2, 1], 10)) == [2, 3, 4]


def test_report_inactive_holds_until_a_later_heartbeat() -> None:
    """§2.3: the operator or supervisor reporting a pod gone makes it inactive at once."""
    lv = leader()
    lv.heartbeat(hb(1), 0)
    lv.report_inactive((C, B, 1), "pod deleted", 5)
    assert lv.inactive_reason((C, B, 1), 5) == "pod deleted"
    assert lv.inactive_reason((C, B, 1), 100) == "pod deleted"
    lv.heartbeat(hb(1), 200)  # the restarted broker heartbeats again
    assert lv.is_alive((C, B, 1), 200)


def test_report_of_a_broker_never_heard_is_inactive_even_in_grace() -> None:
    lv = leader(now_ms=0)
    lv.report_inactive((C, B, 3), "", 10)
    assert lv.inactive_reason((C, B, 3), 10) == InactiveReason.REPORTED.value


def test_connection_closed_waits_a_grace_for_a_new_heartbeat() -> None:
    """§2.3 connection close: inactive after the close grace unless it heartbeats again."""
    lv = leader(now_ms=-10_000, connection_close_grace_ms=300)
    lv.heartbeat(hb(1, timeout_ms=5000), 0)
    lv.heartbeat(hb(2, timeout_ms=5000), 0)
    lv.connection_closed((C, B, 1), 100)
    lv.connection_closed((C, B, 2), 100)
    lv.heartbeat(hb(2, timeout_ms=5000), 250)  # a pooled connection was recycled
    assert lv.is_alive((C, B, 1), 399)
    assert lv.inactive_reason((C, B, 1), 400) == InactiveReason.CONNECTION_CLOSED.value
    assert lv.is_alive((C, B, 2), 400)


def test_new_leader_gives_one_timeout_of_grace() -> None:
    """§2.3: a new controller leader gives every broker one timeout of grace."""
    lv = Liveness(default_timeout_ms=2000)
    assert not lv.is_alive((C, B, 1), 0)  # not leader: knows nothing
    lv.become_leader(1000)
    assert lv.is_alive((C, B, 1), 1000)
    assert lv.is_alive((C, B, 1), 3000)
    assert lv.inactive_reason((C, B, 1), 3001) == InactiveReason.NEVER_HEARD.value
    # Heartbeats during the grace are kept; grace ends only for the silent ones.
    lv.heartbeat(hb(2, timeout_ms=2000), 2500)
    assert lv.is_alive((C, B, 2), 4000)


def test_step_down_forgets_everything() -> None:
    lv = leader()
    lv.heartbeat(hb(1), 0)
    lv.step_down()
    assert not lv.is_alive((C, B, 1), 0)
    assert lv.tracked() == []


def test_alive_replicas_feed_election_views() -> None:
    """Progress of alive replicas only; graced, unheard replicas rank with zeros."""
    lv = leader(now_ms=0)
    lv.heartbeat(hb(1, epoch=3, max_offset=100, priority=2), 10)
    lv.heartbeat(hb(2, epoch=3, max_offset=90), 10)
    lv.report_inactive((C, B, 2), "gone", 20)
    alive = lv.alive_replicas(SET, [1, 2, 3], 30)
    assert alive == {
        1: ReplicaHeartbeat(1, epoch=3, max_offset=100, confirm_offset=100, election_priority=2),
        3: ReplicaHeartbeat(3),
    }


def test_progress_only_moves_forward() -> None:
    """§2.3: epoch/offset only move forward; a reordered old heartbeat refreshes time only."""
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, epoch=2, max_offset=500, timeout_ms=100), 0)
    lv.heartbeat(hb(1, epoch=2, max_offset=300, timeout_ms=100), 90)
    view = lv.view((C, B, 1), 150)
    assert (view.epoch, view.max_offset) == (2, 500)
    assert view.alive  # the late request still proved liveness
    lv.heartbeat(hb(1, epoch=3, max_offset=10, timeout_ms=100), 160)
    view = lv.view((C, B, 1), 160)
    assert (view.epoch, view.max_offset) == (3, 10)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000)), min_size=1, max_size=40))
def test_progress_is_monotonic_under_any_order(reports: list[tuple[int, int]]) -> None:
    """Property (§2.3): the (epoch, maxOffset) view never decreases, whatever arrives."""
    lv = leader()
    seen: list[tuple[int, int]] = []
    for t, (epoch, offset) in enumerate(reports):
        lv.heartbeat(hb(1, epoch=epoch, max_offset=offset), t)
        view = lv.view((C, B, 1), t)
        seen.append((view.epoch, view.max_offset))
    assert seen == sorted(seen)
    assert seen[-1] == max(reports)


def test_master_inactive_is_due_at_once_then_backs_off() -> None:
    """§2.3: master inactive → election at once, retried with backoff until it succeeds."""
    lv = leader(now_ms=-10_000, election_retry_initial_ms=100, election_retry_max_ms=400)
    lv.heartbeat(hb(1, timeout_ms=1000), 0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1, 2}))}
    assert lv.tick(500, sets) == []
    lv.report_inactive((C, B, 1), "killed", 600)
    assert lv.tick(600, sets) == [SET]  # same tick as the transition
    assert lv.tick(601, sets) == []  # in flight: no duplicate attempt
    lv.election_attempted(SET, 610, succeeded=False)
    assert lv.tick(709, sets) == []
    assert lv.tick(710, sets) == [SET]
    lv.election_attempted(SET, 710, succeeded=False)
    assert lv.tick(909, sets) == [] and lv.tick(910, sets) == [SET]
    lv.election_attempted(SET, 910, succeeded=False)
    assert lv.tick(1309, sets) == [] and lv.tick(1310, sets) == [SET]  # capped at 400
    lv.election_attempted(SET, 1310, succeeded=False)
    assert lv.tick(1710, sets) == [SET]
    lv.election_attempted(SET, 1710, succeeded=True)
    new_sets = {SET: WatchedSet(master=2, broker_ids=frozenset({1, 2}))}
    lv.heartbeat(hb(2, timeout_ms=1000), 1710)
    assert lv.tick(1720, new_sets) == []
    assert lv.pending_elections() == []


def test_pending_election_dropped_when_master_is_back() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, timeout_ms=100), 0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1}))}
    assert lv.tick(200, sets) == [SET]
    lv.election_attempted(SET, 200, succeeded=False)
    lv.heartbeat(hb(1, timeout_ms=100), 250)
    assert lv.tick(300, sets) == []
    assert lv.pending_elections() == []


def test_masterless_set_is_due_when_a_replica_returns() -> None:
    """After a "no master" election, a replica heartbeating again triggers an election."""
    lv = leader(now_ms=-10_000, election_retry_initial_ms=100, election_retry_max_ms=1600)
    sets = {SET: WatchedSet(master=None, broker_ids=frozenset({1, 2}))}
    assert lv.tick(0, sets) == []  # nobody alive: nothing to elect
    lv.heartbeat(hb(2, timeout_ms=5000), 10)
    assert lv.tick(10, sets) == [SET]
    lv.election_attempted(SET, 10, succeeded=False)  # e.g. 2 is not in the SyncStateSet
    assert lv.tick(110, sets) == [SET]
    lv.election_attempted(SET, 110, succeeded=False)  # next retry not before 310
    assert lv.tick(150, sets) == []
    # A SyncStateSet member coming back retries at once instead of after the backoff.
    lv.heartbeat(hb(1, timeout_ms=5000), 150)
    lv.report_inactive((C, B, 1), "flap", 151)
    lv.heartbeat(hb(1, timeout_ms=5000), 152)
    assert lv.tick(152, sets) == [SET]


def test_graced_masters_are_not_elected_away() -> None:
    """A new leader must not replace a healthy master it has not heard from yet."""
    lv = leader(now_ms=0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1, 2}))}
    assert lv.tick(1999, sets) == []
    assert lv.tick(2001, sets) == [SET]  # silent for a whole timeout: now it is dead


# ------------------------------------------------- takeover wait (§3.3 "Fencing")


def master_hb(
    broker_id: int, *, lease_ms: int | None = 700, all_ack: bool = False
) -> BrokerHeartbeat:
    return replace(
        hb(broker_id, timeout_ms=1000), master_lease_ms=lease_ms, all_ack_in_sync_state_set=all_ack
    )


def wait_for(lv: Liveness, old: int, now: int, *, in_set: bool = True) -> int:
    return lv.takeover_wait_ms((C, B, old), now, new_master_in_sync_state_set=in_set)


def test_new_master_waits_out_the_old_lease_after_an_early_election() -> None:
    """An election on a report (not a timeout) leaves the old lease running:
    the wait is its last heartbeat + masterLeaseMs + margin, minus now."""
    lv = leader(now_ms=-10_000)
    lv.heartbeat(master_hb(1, lease_ms=700), 1000)
    lv.report_inactive((C, B, 1), "pod not ready", 1200)
    assert not lv.is_alive((C, B, 1), 1200)
    assert wait_for(lv, 1, 1200) == 1000 + 700 + 35 - 1200  # margin: lease/20, at least 20 ms
    assert wait_for(lv, 1, 5000) == 0


def test_no_wait_when_the_old_master_is_certainly_gone_or_timed_out() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(master_hb(1), 1000)
    lv.report_inactive((C, B, 1), "process exited", 1100, process_gone=True)
    assert wait_for(lv, 1, 1100) == 0
    lv2 = leader(now_ms=-10_000)
    lv2.heartbeat(master_hb(1), 1000)
    # Elected on the heartbeat timeout (1000 ms > lease 700 ms): already over.
    assert wait_for(lv2, 1, 2001) == 0


def test_a_later_certain_report_is_remembered_until_the_broker_speaks() -> None:
    """`process_gone` lets the server waive a recorded wait (takeover.remaining_ms)."""
    lv = leader(now_ms=-10_000)
    lv.heartbeat(master_hb(1), 1000)
    lv.report_inactive((C, B, 1), "pod deleted", 1100)
    assert wait_for(lv, 1, 1100) > 0 and not lv.process_gone((C, B, 1))
    lv.report_inactive((C, B, 2), "pod deleted", 1150, process_gone=True)  # not the old master
    assert not lv.process_gone((C, B, 1))
    lv.report_inactive((C, B, 1), "pod gone", 1200, process_gone=True)
    assert lv.process_gone((C, B, 1))
    lv.heartbeat(master_hb(1), 1300)  # it spoke again: not gone after all
    assert not lv.process_gone((C, B, 1))


def test_all_ack_old_master_needs_no_wait_only_for_an_in_sync_successor() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(master_hb(1, all_ack=True), 1000)
    lv.report_inactive((C, B, 1), "pod not ready", 1100)
    assert wait_for(lv, 1, 1100) == 0
    # An unclean successor was never in the set the old master waits on.
    assert wait_for(lv, 1, 1100, in_set=False) > 0


def test_unknown_lease_reads_as_the_heartbeat_timeout_and_graced_as_the_takeover() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(master_hb(1, lease_ms=None), 1000)  # an old broker: no masterLeaseMs
    lv.report_inactive((C, B, 1), "pod not ready", 1000)
    assert wait_for(lv, 1, 1000) == 1000 + 50
    fresh = leader(now_ms=5000)  # never heard broker 1: the previous leader may have renewed it
    assert fresh.grace_remaining_ms(5500) == 1500
    assert wait_for(fresh, 1, 5500) == 1500


# ------------------------------------------------- the leader's own stalls


def test_a_stalled_leader_forgives_the_heartbeats_it_did_not_read() -> None:
    """Paused (or starved) for longer than the timeout: the brokers were not silent, it was."""
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, timeout_ms=1000), 0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1, 2}))}
    assert lv.tick(100, sets) == [] and lv.tick(200, sets) == []
    assert lv.tick(3000, sets) == []  # 2.8 s without a tick: all of it forgiven
    # Then silence counts again: a full timeout from the resumption (heard at 2800).
    assert [t for t in range(3100, 4000, 100) if lv.tick(t, sets)] == [3900]


def test_without_a_stall_the_same_silence_elects() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, timeout_ms=1000), 0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1, 2}))}
    due_at = next(t for t in range(100, 3100, 100) if lv.tick(t, sets))
    assert due_at == 1100


def test_a_stall_does_not_forgive_a_certain_report() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, timeout_ms=1000), 0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1, 2}))}
    assert lv.tick(100, sets) == []
    lv.report_inactive((C, B, 1), "pod deleted", 150, process_gone=True)
    assert lv.tick(3000, sets) == [SET]


def test_a_closed_connection_grace_moves_with_the_stall() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, timeout_ms=10_000), 0)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1}))}
    assert lv.tick(100, sets) == []
    lv.connection_closed((C, B, 1), 150)
    assert lv.tick(2000, sets) == []  # the close moves to 2000 (capped at now); grace 750
    assert [t for t in range(2100, 3000, 100) if lv.tick(t, sets)] == [2800]


@given(st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=40))
def test_a_broker_heartbeating_between_ticks_is_never_elected_away(gaps: list[int]) -> None:
    """Whatever the leader's tick rhythm, a heartbeat read before every tick keeps the master."""
    lv = leader(now_ms=-10_000)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1}))}
    now = 0
    for gap in gaps:
        now += gap
        lv.heartbeat(hb(1, timeout_ms=1000), now)  # read as the loop resumes
        assert lv.tick(now, sets) == []


def test_a_node_that_is_not_leader_never_answers_no_wait() -> None:
    """A watch that began on the leader and returns after it stepped down must not
    release a new master's hold: without a record it answers a fresh leader's bound."""
    lv = leader(now_ms=0)
    lv.step_down()
    assert lv.grace_remaining_ms(300) == 2000
    fresh = Liveness(default_timeout_ms=2000)
    assert fresh.grace_remaining_ms(300) == 2000


# ------------------------------------------ symptoms and incarnations (issue 17 items 5, 9)


def test_a_not_ready_symptom_counts_only_once_heartbeats_stop() -> None:
    lv = leader(now_ms=-10_000)
    sets = {SET: WatchedSet(master=1, broker_ids=frozenset({1, 2}))}
    lv.heartbeat(hb(1, timeout_ms=1000), 0)
    assert lv.report_inactive((C, B, 1), "pod not ready", 100, symptom_only=True)
    assert [t for t in range(100, 1100, 100) if lv.tick(t, sets)] == []
    assert lv.tick(1100, sets) == [SET]  # silent for its whole timeout: now it counts
    assert lv.inactive_reason((C, B, 1), 1100) == InactiveReason.HEARTBEAT_TIMEOUT.value


def test_a_symptom_never_weakens_a_hard_report() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(hb(1, timeout_ms=1000), 0)
    lv.report_inactive((C, B, 1), "pod deleted", 100)
    lv.report_inactive((C, B, 1), "pod not ready", 150, symptom_only=True)
    assert lv.inactive_reason((C, B, 1), 200) == "pod deleted"
    lv.heartbeat(hb(1, timeout_ms=1000), 300)  # back: both forgotten
    assert lv.is_alive((C, B, 1), 300)


def test_a_report_about_another_incarnation_is_ignored() -> None:
    lv = leader(now_ms=-10_000)
    lv.heartbeat(replace(hb(1), incarnation="pod-b"), 0)
    assert not lv.report_inactive((C, B, 1), "pod deleted", 100, incarnation="pod-a")
    assert not lv.report_inactive(
        (C, B, 1), "broker container terminated", 100, incarnation="pod-a", process_gone=True
    )
    assert lv.is_alive((C, B, 1), 100) and not lv.process_gone((C, B, 1))
    assert lv.report_inactive((C, B, 1), "pod deleted", 100, incarnation="pod-b")
    assert not lv.is_alive((C, B, 1), 100)
    # Unknown on either side: taken as about the current incarnation.
    older_broker = leader(now_ms=-10_000)
    older_broker.heartbeat(hb(2), 0)  # sends no incarnation
    assert older_broker.report_inactive((C, B, 2), "pod deleted", 100, incarnation="pod-c")
    assert lv.report_inactive((C, B, 2), "pod deleted", 100, incarnation="pod-c")  # never heard
