"""Three real controller processes (127.0.3.x): a re-created group gets a
master, and a request id is answered once across nodes, a leader change and
a restart of every node (DESIGN.md §2.2; docs/controller.md "Request ids").

- Issue 22 item 1: create a broker set, elect, clean the whole set (what the
  operator's finalizer does when a BrokerGroup is deleted), create it again
  under the same name, SIGKILL and restart every node (the re-created set
  without a master must come back as such, through journal and snapshot),
  elect: a master, at a masterEpoch above every one the name used before.
- Issue 17 item 2: the same AlterSyncStateSet and switchover bodies (same
  requestId) sent to the leader, to a follower (forwarded), to the next
  leader after a SIGKILL and after a restart of every node all get the first
  answer, and the state moved once.

The tests run one after another on one block (integration runs are
serialized); no timing is asserted.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .controller_harness import IDEMPOTENT_PATHS, ControllerCluster

pytestmark = pytest.mark.integration

BLOCK = 3
C, B = "DefaultCluster", "recreated"
CONFIG = {"heartbeatTimeoutMs": 600_000, "logCompactionMinEntries": 5}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ControllerCluster]:
    with ControllerCluster(tmp_path, block=BLOCK, config=CONFIG) as cluster:
        cluster.start_all()
        cluster.wait_for_leader(60.0)
        yield cluster


def post(cluster: ControllerCluster, node_id: int, path: str, body: dict[str, Any]) -> Any:
    """One call as a broker or the operator makes it: a requestId (unless the body
    names its own) and NOT_LEADER retried, since a stall of a loaded machine can
    move the Raft leader between two steps (CI run 50)."""
    if path not in IDEMPOTENT_PATHS:
        body = {"requestId": uuid.uuid4().hex, **body}
    result = cluster.request_retrying(node_id, "POST", path, body)
    return result.status, result.body


def create(cluster: ControllerCluster, leader: int, generation: str) -> None:
    """Brokers 1..3 apply for their ids and heartbeat (alive for the whole test)."""
    for broker_id in (1, 2, 3):
        address = f"10.3.0.{broker_id}:10911"
        status, body = post(
            cluster,
            leader,
            "/v1/brokers/apply-id",
            {"clusterName": C, "brokerName": B, "brokerId": broker_id,
             "registerCode": f"{generation}-{broker_id}", "address": address},
        )  # fmt: skip
        assert status == 200, body
        status, body = post(
            cluster,
            leader,
            "/v1/brokers/heartbeat",
            {"clusterName": C, "brokerName": B, "brokerId": broker_id, "address": address,
             "epoch": 0, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMs": 600_000},
        )  # fmt: skip
        assert status == 200, body


def restart_all(cluster: ControllerCluster) -> int:
    cluster.kill_all()
    cluster.start_all()
    return cluster.wait_for_leader(60.0)


def info(cluster: ControllerCluster, node_id: int) -> dict[str, Any]:
    path = f"/v1/replica-info?clusterName={C}&brokerName={B}"
    return cluster.request_retrying(node_id, "GET", path).body


def test_a_recreated_group_elects_its_first_master(cluster: ControllerCluster) -> None:
    leader = cluster.wait_for_leader(60.0)
    create(cluster, leader, "first")
    elect = {"clusterName": C, "brokerName": B, "brokerId": 1}
    status, body = post(cluster, leader, "/v1/elect-master", elect)
    assert status == 200 and body["masterBrokerId"] == 1, body
    alter = {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1,
             "syncStateSet": [1, 2, 3], "syncStateSetEpoch": 1}  # fmt: skip
    assert post(cluster, leader, "/v1/sync-state-set/alter", alter)[0] == 200
    clean = {"clusterName": C, "brokerName": B, "force": True}
    status, body = post(cluster, leader, "/v1/brokers/clean", clean)
    assert status == 200 and body["removed"] == [1, 2, 3], body

    create(cluster, leader, "second")
    leader = restart_all(cluster)
    before = info(cluster, leader)
    assert before["masterBrokerId"] is None
    assert (before["masterEpoch"], before["syncStateSetEpoch"]) == (3, 4)  # the floor

    create(cluster, leader, "second")  # heartbeats again, for the new leader's liveness
    status, body = post(cluster, leader, "/v1/elect-master", {**elect, "brokerId": 2})
    assert status == 200, body
    assert (body["masterBrokerId"], body["masterEpoch"]) == (2, 4)
    assert (body["syncStateSet"], body["syncStateSetEpoch"]) == ([2], 5)


def test_a_request_id_is_answered_once_across_nodes_and_leaders(
    cluster: ControllerCluster,
) -> None:
    leader = cluster.wait_for_leader(60.0)
    create(cluster, leader, "ids")
    first_election = {"clusterName": C, "brokerName": B, "brokerId": 1, "requestId": "elect-1"}
    status, elected = post(cluster, leader, "/v1/elect-master", first_election)
    assert status == 200 and elected["masterBrokerId"] == 1, elected
    alter = {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1,
             "syncStateSet": [1, 2], "syncStateSetEpoch": 1, "requestId": "alter-1"}  # fmt: skip
    switchover = {"clusterName": C, "brokerName": B, "designatedBrokerId": 2,
                  "requestId": "switch-1"}  # fmt: skip
    follower = next(i for i in cluster.nodes if i != leader)
    answers: dict[str, list[tuple[int, Any]]] = {"alter": [], "switch": []}
    for node_id in (leader, follower, leader):
        answers["alter"].append(post(cluster, node_id, "/v1/sync-state-set/alter", alter))
    for node_id in (leader, follower):
        answers["switch"].append(post(cluster, node_id, "/v1/elect-master", switchover))

    leader = cluster.wait_for_leader(60.0)  # the leader of now: a stall may have moved it
    cluster.kill(leader)
    new_leader = cluster.wait_for_leader(60.0, exclude={leader})
    create(cluster, new_leader, "ids")  # heartbeats for the new leader's liveness
    answers["alter"].append(post(cluster, new_leader, "/v1/sync-state-set/alter", alter))
    answers["switch"].append(post(cluster, new_leader, "/v1/elect-master", switchover))
    cluster.start(leader)
    latest = restart_all(cluster)
    create(cluster, latest, "ids")
    answers["alter"].append(post(cluster, latest, "/v1/sync-state-set/alter", alter))
    answers["switch"].append(post(cluster, latest, "/v1/elect-master", switchover))
    assert post(cluster, latest, "/v1/elect-master", first_election)[0] == 200

    assert answers["alter"] == [(200, {"code": "SUCCESS", "syncStateSet": [1, 2],
                                       "syncStateSetEpoch": 2})] * 5  # fmt: skip
    assert [status for status, _ in answers["switch"]] == [200] * 4, answers["switch"]
    assert {(b["masterBrokerId"], b["masterEpoch"]) for _, b in answers["switch"]} == {(2, 2)}
    final = info(cluster, latest)
    assert (final["masterBrokerId"], final["masterEpoch"]) == (2, 2)
    assert (final["syncStateSet"], final["syncStateSetEpoch"]) == ([2], 3)
