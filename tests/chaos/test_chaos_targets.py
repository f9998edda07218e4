"""One schedule, one seed, three targets (issue 37 item 1; docs/reliability.md "Chaos
for every engine"): the stock RocketMQ Java client (ChaosWorkloadMode) sends and
consumes while the master is SIGKILLed twice, against

- `local`: `brokergroup local up` (built-in brokers),
- `local-rocketmq`: `local up --engine rocketmq` (stock RocketMQ 5.3 brokers under
  brokergroup's controllers),
- `rocketmq`: a plain Apache RocketMQ 5.3 controller-mode group (three DLedger
  controllers, a name server, three brokers, allAckInSyncStateSet, SYNC_FLUSH).

Acknowledged = SEND_OK. After the run every replica's commit log is read from disk and
the checker compares it with the sends: nothing acknowledged may be lost, reordered,
misplaced or corrupt on any target (all three promise it with these settings).

The negative control must fail: the plain RocketMQ group with allAckInSyncStateSet=false
(the master acknowledges alone) and its slaves cut off for a second before the master
and the controller leader are SIGKILLed (apache/rocketmq#7689's sequence): a lagging
slave is elected and the checker must report acknowledged keys lost. One window is
enough, whatever the machine's speed: the kill waits for a send invoked after it was
asked for to be acknowledged (the target's `acknowledged_since`: on a loaded machine the
lag's second could pass with no acknowledgment at all), and the killed master stays down
until the controllers have elected a lagging slave (`REPLACEMENT_HOLD_S`: restarted before
that, it is master again with everything it acknowledged — CI run 42, a loaded machine:
in both windows the master killed was broker-1, back at the window's end before any
election, and nothing was lost).

A partition of the stock master must really isolate it on `local-rocketmq` (docs/reliability.md
"Every link of a stock node"): every stock broker dials its links (HA, heartbeats to the
controllers, the name servers) from 127.0.0.1, and our controllers notify brokers from there
too, so an address-pair cut alone leaves them all running and nobody elects. With each node
in a group of its own (`local.nodeGidBase`) the owner rules drop them: the controllers elect
another broker within the window and the rules' dropped-packet count is not zero.

The rocketmq target runs with a 500 ms broker heartbeat and a 3 s heartbeat timeout
(RocketMQ's defaults are 1 s / 10 s: each failover would take 7 s longer; the killed
master stays down until it is replaced either way), so each test stays within a few
minutes.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest

from brokergroup_cli.chaos import faults, netfault
from brokergroup_cli.chaos.cli import run_chaos
from brokergroup_cli.chaos.runner import Schedule
from brokergroup_cli.chaos.stock_run import consumer_log_excerpt, stock_unavailable_reason
from brokergroup_cli.chaos.targets import NodeKind, make_target
from brokergroup_cli.local.rocketmq_stock import FAST_FAILOVER_SETTINGS

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(420)]

#: A master's death noticed in ~3 s on the plain RocketMQ group (see the docstring).
FAST = tuple(
    f"{k}={v}"
    for k, v in FAST_FAILOVER_SETTINGS.items()
    if k in ("brokerHeartbeatInterval", "controllerHeartBeatTimeoutMills")
)
SETTINGS = {"local": (), "local-rocketmq": (), "rocketmq": FAST}


@pytest.fixture(autouse=True)
def _stock() -> None:
    reason = stock_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("target", ["local", "local-rocketmq", "rocketmq"])
def test_kill_master_twice_loses_nothing_acknowledged(tmp_path: Path, target: str) -> None:
    schedule = Schedule(
        faults=(faults.KILL_MASTER,), windows=2, seed=37, normal_s=3.0, fault_s=5.0,
        producers=2, recovery_s=3.0, healthy_timeout_s=90.0,
    )  # fmt: skip
    result = run_chaos(
        schedule, tmp_path / "out", runtime_dir=tmp_path / "rt", lane=1,
        settings=SETTINGS[target], target=target, workload="stock",
    )  # fmt: skip
    s = result.summary
    said = json.dumps(s, default=str)  # a str is printed whole (a dict's repr is cut at 240)
    assert (s["target"], s["workload"], s["windows"]) == (target, "stock", 2), said
    assert s["acknowledged"] > 20, said
    findings = result.findings
    assert (
        findings.lost, findings.order_violations, findings.misplaced, findings.unexpected,
        findings.corrupt, findings.reused_offsets,
    ) == ([], [], [], [], [], []), said  # fmt: skip
    # Every replica read back from disk: the final master's log and both others.
    assert len(result.run.read_back) >= s["acknowledged"], said
    assert len({replica for replica, _ in result.run.replicas_read}) == 2
    # The stock consumer received during the run (the windows wait for its first
    # message), and what it was shown stayed.
    work = next((tmp_path / "rt").glob("*/workload"), tmp_path)
    assert s["reads"] > 0, f"{said}\n{consumer_log_excerpt(work)}"
    assert not findings.unstable_reads, said


def test_rocketmq_acking_alone_under_lagging_slave_kills_reports_losses(tmp_path: Path) -> None:
    # Its lag cuts the stock slaves' links by owner (iptables): without it the runner skips
    # the window and the test would fail on "windows 0" instead of saying why.
    reason = faults.unavailable_reason(faults.LAGGING_KILL)
    reason = reason or faults.target_unavailable_reason(faults.LAGGING_KILL, node_gids=True)
    if reason is not None:
        pytest.skip(reason)
    schedule = Schedule(
        faults=(faults.LAGGING_KILL,), windows=1, seed=11, normal_s=3.0, fault_s=8.0,
        producers=2, recovery_s=3.0, healthy_timeout_s=90.0,
    )  # fmt: skip
    result = run_chaos(
        schedule, tmp_path / "out", runtime_dir=tmp_path / "rt", lane=1,
        settings=(*FAST, "allAckInSyncStateSet=false"), target="rocketmq", workload="stock",
    )  # fmt: skip
    s = result.summary
    assert s["windows"] == 1, s
    assert s["lost"] > 0, f"the checker saw no loss where the settings allow it: {s}"
    # Lost: acknowledged sends, among them one invoked after the window began (the
    # fresh acknowledgment the kill waited for, on the master alone).
    window = result.run.windows[0]
    acked = {op.key: op for op in result.run.operations if op.outcome == "ok"}
    assert set(result.findings.lost) <= set(acked), s
    assert any(acked[key].invoke_s >= window.start_s for key in result.findings.lost), s
    assert not s["data_safe"]


#: Liveness bounds, not speed asserts: a loaded two-core machine starts three stock JVMs.
HEALTHY_WAIT_S = 150.0
ELECTION_WAIT_S = 45.0


def test_a_partition_of_the_stock_master_isolates_it_on_local_rocketmq(tmp_path: Path) -> None:
    reason = faults.unavailable_reason(faults.PARTITION_MASTER)
    reason = reason or netfault.owner_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    target = make_target("local-rocketmq", tmp_path / "rt", lane=1, settings=FAST)
    target.up()
    try:
        deadline = time.monotonic() + HEALTHY_WAIT_S
        while not target.healthy():
            assert time.monotonic() < deadline, "local-rocketmq never became healthy"
            time.sleep(0.5)
        before = target.master()
        assert before is not None
        injected = faults.inject(faults.PARTITION_MASTER, target, random.Random(37))
        try:
            deadline = time.monotonic() + ELECTION_WAIT_S
            after = target.master()
            while after is None or after.name == before.name:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
                after = target.master()
            nodes = target.nodes()
        finally:
            injected.heal()
        # The controllers (cut off from it) elected another broker while it was isolated.
        assert after is not None and after.name != before.name, (
            f"{before.name} on {before.host} still master {ELECTION_WAIT_S} s into the "
            f"partition: {injected.note}"
        )
        dropped = re.search(r"owner rules dropped (\d+) packets", injected.note)
        assert dropped is not None and int(dropped.group(1)) > 0, injected.note
        # Each controller and broker in a group of its own, recorded in state.json.
        gids = {n.name: n.gid for n in nodes}
        assert None not in gids.values() and len(set(gids.values())) == len(gids), gids
        assert {n.kind for n in nodes} == {NodeKind.BROKER, NodeKind.CONTROLLER}
    finally:
        target.down()
