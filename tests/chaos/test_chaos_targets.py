"""One schedule, one seed, both of brokergroup's targets (issue 37 item 1; docs/reliability.md
"Chaos for every engine"): the stock RocketMQ Java client (ChaosWorkloadMode) sends and
consumes while the master is SIGKILLed twice, against

- `local`: `brokergroup local up` (built-in brokers),
- `local-rocketmq`: `local up --engine rocketmq` (stock RocketMQ 5.3 brokers under
  brokergroup's controllers).

Acknowledged = SEND_OK. After the run every replica's commit log is read from disk and
the checker compares it with the sends: nothing acknowledged may be lost, reordered,
misplaced or corrupt on either target.

The third target, a plain Apache RocketMQ 5.3 controller-mode group (`rocketmq`), and its
negative control (allAckInSyncStateSet=false under lagging-slave kills, apache/rocketmq#7689)
are RocketMQ's numbers, not a property of this project's code: they run in
bench/chaos_compare.py beside the other two targets (the side-by-side comparison and its
scenarios), not in the test tier, where the pair cost ~5 min of a fast 2-core machine
(seven JVMs each) and ~8 min of a slow one (docs/development.md "CI on a slow machine").
The checker's own negative control stays in the tier (test_chaos_negative_control.py),
and tests/unit/test_chaos_targets_unit.py covers the rocketmq target's adapter.

A partition of the stock master must really isolate it on `local-rocketmq` (docs/reliability.md
"Every link of a stock node"): every stock broker dials its links (HA, heartbeats to the
controllers, the name servers) from 127.0.0.1, and our controllers notify brokers from there
too, so an address-pair cut alone leaves them all running and nobody elects. With each node
in a group of its own (`local.nodeGidBase`) the owner rules drop them: the controllers elect
another broker within the window and the rules' dropped-packet count is not zero.
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

#: A master's death noticed in ~3 s (RocketMQ's defaults are 1 s / 10 s).
FAST = tuple(
    f"{k}={v}"
    for k, v in FAST_FAILOVER_SETTINGS.items()
    if k in ("brokerHeartbeatInterval", "controllerHeartBeatTimeoutMills")
)
SETTINGS: dict[str, tuple[str, ...]] = {"local": (), "local-rocketmq": ()}


@pytest.fixture(autouse=True)
def _stock() -> None:
    reason = stock_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.parametrize("target", ["local", "local-rocketmq"])
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
