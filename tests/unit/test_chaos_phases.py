"""How `brokergroup chaos` splits a schedule over runtimes (cli.plan_phases):
the power-loss fault, which needs ASYNC_FLUSH, gets its share of the windows
on a runtime of its own; every other fault runs on the default settings
(SYNC_FLUSH), so the defaults are what a run measures."""

from __future__ import annotations

from brokergroup_cli.chaos import faults
from brokergroup_cli.chaos.cli import ASYNC_FLUSH_SETTING, plan_phases
from brokergroup_cli.chaos.runner import Schedule


def test_every_fault_splits_into_a_default_phase_and_an_async_flush_phase() -> None:
    # 14 faults over 42 windows: the power-loss fault's share is 42 / 14 = 3.
    assert len(faults.ALL_FAULTS) == 14
    schedule = Schedule(faults=faults.ALL_FAULTS, windows=42, seed=1)
    first, second = plan_phases(schedule, ())
    assert faults.TRUNCATE_TAIL not in first.schedule.faults
    assert set(first.schedule.faults) == set(faults.ALL_FAULTS) - {faults.TRUNCATE_TAIL}
    assert ASYNC_FLUSH_SETTING not in first.settings
    assert second.schedule.faults == (faults.TRUNCATE_TAIL,)
    assert ASYNC_FLUSH_SETTING in second.settings
    assert (first.schedule.windows, second.schedule.windows) == (39, 3)
    # Different clients (so different keys and a different topic) in the second phase.
    assert (first.schedule.client_prefix, second.schedule.client_prefix) == ("", "a")


def test_one_window_each_still_gives_the_power_loss_fault_its_window() -> None:
    schedule = Schedule(faults=faults.ALL_FAULTS, windows=len(faults.ALL_FAULTS), seed=1)
    phases = plan_phases(schedule, ("allAckInSyncStateSet=false",))
    assert [p.schedule.windows for p in phases] == [len(faults.ALL_FAULTS) - 1, 1]
    assert all("allAckInSyncStateSet=false" in p.settings for p in phases)


def test_a_schedule_without_the_power_loss_fault_is_one_default_phase() -> None:
    (only,) = plan_phases(Schedule(faults=(faults.KILL_MASTER,), windows=5, seed=1), ())
    assert only.schedule.windows == 5 and ASYNC_FLUSH_SETTING not in only.settings
    (alone,) = plan_phases(Schedule(faults=(faults.TRUNCATE_TAIL,), windows=4, seed=1), ())
    assert alone.schedule.windows == 4 and ASYNC_FLUSH_SETTING in alone.settings
    assert alone.schedule.client_prefix == ""
