"""The negative control of the chaos checker: a configuration that gives up
the no-loss promise must be caught losing data.

allAckInSyncStateSet=false with inSyncReplicas=1 lets the master
acknowledge alone, and unclean election is on. The slaves are stopped for a
second (they lag) and then the master and the controller leader are killed
together — the sequence that lost messages in RocketMQ 5.1.4
(apache/rocketmq#7689). The killed master stays down for 5 s (left to
itself, our controller would wait for it or rank its longer log first). A
lagging slave is elected and everything the old
master acknowledged alone is gone when it rejoins and truncates: the
checker must report those keys as lost. If it reported nothing here, a
clean chaos run would prove nothing.

After the last window two more defects are planted (`Schedule.plants`), each
of which the checker must report by name: a second copy of an acknowledged
key (a duplicate) and a planted client's two keys acknowledged in the
opposite order of their seqs (a reorder). The final read-back reads every
replica, so the slaves are compared with the final master as well.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults
from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.runner import PLANT_DUPLICATE, PLANT_REORDER, Schedule

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(300)]

UNSAFE = (
    "allAckInSyncStateSet=false",
    "inSyncReplicas=1",
    "controller.enableElectUncleanMaster=true",
    # The killed master stays down for a while (a machine that does not come
    # straight back), so the controller elects among the lagging slaves.
    "local.restartInitialDelayMs=5000",
)


def test_unsafe_settings_under_lagging_slave_kills_report_losses(tmp_path: Path) -> None:
    schedule = Schedule(
        faults=(faults.LAGGING_KILL,), windows=2, seed=11, normal_s=1.0, fault_s=4.0,
        plants=(PLANT_DUPLICATE, PLANT_REORDER),
    )  # fmt: skip
    result = run_chaos(
        schedule, tmp_path / "out", runtime_dir=tmp_path / "rt", lane=1, settings=UNSAFE
    )
    s = result.summary
    assert s["windows"] == 2, s
    assert s["lost"] > 0, f"the checker saw no loss where the settings allow it: {s}"
    assert not s["data_safe"]
    lost = set(result.findings.lost)
    acked = {op.key for op in result.run.operations if op.outcome == "ok"}
    assert lost <= acked  # only acknowledged keys can be lost
    planted = result.run.planted
    assert result.findings.duplicated.count(planted[PLANT_DUPLICATE][0]) == 1, planted
    first, second = planted[PLANT_REORDER]
    assert (0, first, second) in result.findings.order_violations, result.findings.order_violations
    assert s["order_violations"] >= 1 and s["duplicated"] >= 1
    # Every replica was read back: both slaves, not only the final master.
    assert len({replica for replica, _ in result.run.replicas_read}) == 2
