"""Node loss rounds for `bench/operator_failover.py --node-loss` (issue 17 items 5, 8).

Three nodes of the cluster tier (node-1..node-3, one process kubelet each), a
3-replica BrokerGroup with one pod per node, and producers that run through
every round: one asyncio task per queue, one key per send, one attempt per
send (no client retries, so every outcome is the history's own), through
the controller's view of the master, exactly as the chaos runner's
producers. Per round:

1. wait until the group is healthy (Available, all three in sync);
2. freeze the master pod's node (`ProcessKubelet.freeze`: its kubelet stops
   answering and every container process on it is SIGSTOPped) and time
   - `label_s`: → another pod carries `brokergroup.io/role=master`;
   - `write_s`: → the first acknowledged send after the freeze;
3. keep the node frozen `frozen_s`, then thaw it; the old master must
   rejoin as a slave (the next round's health check waits for it).

At the end every queue is read back from the master and the history is
judged by the chaos checker (`brokergroup_cli.chaos.checker.check`): lost,
duplicated, unexpected, misplaced, order violations; each frozen stretch
is one fault window.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from brokergroup_broker.protocol.client import ClientConfig
from brokergroup_broker.protocol.messages import ProduceMessage
from brokergroup_broker.protocol.producer import Producer
from brokergroup_cli.chaos.checker import OK, FaultWindow, Operation, ReadRecord, check
from brokergroup_cli.chaos.runner import outcome_of, read_log
from brokergroup_remoting.keys import read_key_file
from tests.cluster.operator_env import OperatorEnv, one_pod_per_node, wait_for

TOPIC = "nodeloss"
BROKER_ID = "brokergroup.io/broker-id"


@dataclass
class History:
    t0: float = field(default_factory=time.monotonic)
    operations: list[Operation] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def first_ack_after(self, t: float) -> float | None:
        done = [op.complete_s for op in self.operations if op.outcome == OK and op.invoke_s >= t]
        return min(done) if done else None


async def produce(
    name: str, queue_id: int, producer: Producer, history: History, stop: asyncio.Event
) -> None:
    seq = 0
    while not stop.is_set():
        key = f"{name}-{seq}"
        invoke = history.now()
        try:
            result = await producer.send(
                ProduceMessage(TOPIC, f"{key}|{'x' * 64}".encode(), key=key), queue_id=queue_id
            )
        except Exception as exc:
            history.operations.append(
                Operation(name, seq, key, invoke, history.now(), outcome_of(exc), error=str(exc))
            )
            await asyncio.sleep(0.05)
        else:
            sent = result.messages[0]
            history.operations.append(
                Operation(
                    name, seq, key, invoke, history.now(), OK, sent.queue_id, sent.queue_offset
                )
            )
            await asyncio.sleep(0.01)
        seq += 1


def freeze_round(
    env: OperatorEnv, node_of: Any, name: str, history: History, frozen_s: float
) -> dict[str, Any]:
    env.wait_available(name, 3, 180)
    old = env.master_pod(name)
    assert old is not None
    old_id = old.metadata.labels[BROKER_ID]
    node = node_of(old)
    t_freeze = history.now()
    node.freeze()
    try:

        def moved() -> bool:
            pod = env.master_pod(name)
            return pod is not None and pod.metadata.labels[BROKER_ID] != old_id

        wait_for("the new master label", moved, 60, 0.01)
        label_s = history.now() - t_freeze
        wait_for("a write after the freeze", lambda: history.first_ack_after(t_freeze), 60, 0.02)
        write_s = (history.first_ack_after(t_freeze) or 0.0) - t_freeze
        time.sleep(max(0.0, frozen_s - (history.now() - t_freeze)))
    finally:
        node.thaw()
    t_thaw = history.now()
    return {
        "node": node.node_name,
        "from": int(old_id),
        "label_s": round(label_s, 4),
        "write_s": round(write_s, 4),
        "window": FaultWindow("node-loss", t_freeze, t_thaw, node.node_name),
    }


def run_rounds(
    env: OperatorEnv, node_of: Any, name: str, rounds: int, frozen_s: float, producers: int = 2
) -> dict[str, Any]:
    """Create the group, run `rounds` node losses under producers, judge the history."""
    env.create_group(name, 3, ha={"minInSyncReplicas": 2}, template=one_pod_per_node(name))
    env.wait_available(name, 3, 180)
    history = History()
    config = ClientConfig(
        retry_max_attempts=1,
        request_timeout_ms=4_000,
        connect_timeout_ms=500,
        discovery_timeout_ms=1_000,
    )
    token = env.controllers.client_credential(env.namespace, name)  # the producers' role
    key_file = env.client_key_file(name)  # and the pair every broker connection proves
    pair = None if key_file is None else read_key_file(str(key_file))
    queues = list(range(producers))
    results: list[dict[str, Any]] = []

    async def main() -> list[ReadRecord]:
        stop = asyncio.Event()
        clients = [
            Producer(env.namespace, name, controller_addresses=env.controllers.addresses,
                     token=token, credentials=pair, config=config)
            for _ in queues
        ]  # fmt: skip
        tasks = [
            asyncio.create_task(produce(f"p{q}", q, p, history, stop))
            for q, p in zip(queues, clients, strict=True)
        ]
        try:
            for _ in range(rounds):
                results.append(
                    await asyncio.to_thread(freeze_round, env, node_of, name, history, frozen_s)
                )
            await asyncio.to_thread(env.wait_available, name, 3, 180)
            await asyncio.sleep(1.0)
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            for p in clients:
                await p.close()
        address = await asyncio.to_thread(
            wait_for, "the master Service", lambda: env.service_address(name), 30
        )
        return await read_log(address, TOPIC, queues, pair)

    read_back = asyncio.run(main())
    windows = [r.pop("window") for r in results]
    findings = check(history.operations, read_back, windows)
    return {
        "rounds": results,
        "findings": {
            "operations": findings.operations,
            "acknowledged": findings.acknowledged,
            "failed": findings.failed,
            "indeterminate": findings.indeterminate,
            "lost": len(findings.lost),
            "duplicated": len(findings.duplicated),
            "unexpected": len(findings.unexpected),
            "misplaced": len(findings.misplaced),
            "order_violations": len(findings.order_violations),
            "data_safe": findings.data_safe,
            "lost_keys": findings.lost[:20],
            "unavailable_s": [round(f.unavailable_s, 3) for f in findings.faults],
        },
    }
