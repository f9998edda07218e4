"""Credentials by role against three real controller processes (DESIGN.md §11,
issue 17 item 4; the pure rules are in tests/unit/test_controller_access.py).

Controllers on 127.0.57.1-3. Group A's "broker" connects from 127.0.57.10,
group B's from 127.0.57.20, an intruder from 127.0.57.99 (each request binds
its source address, as a broker's controller client does). Checked:

- a broker credential of group A cannot apply for an id, register, heartbeat
  or elect in group B (403 FORBIDDEN naming both groups), on the leader and
  through a follower; nor clean or force-elect in its own group;
- reads without a credential are 401 (replica-info, watch, groups, raft),
  while /healthz, /readyz and /metrics stay open;
- a heartbeat that claims another address than the registered one, or comes
  from another host, is refused, and a forged "forwarded" request is 401;
- each refusal leaves the state unchanged; the admin credential can do all of it.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from brokergroup_controller.credentials import Role, derive_credential

from .broker_harness import Controllers

pytestmark = pytest.mark.integration

BLOCK = 57
CLUSTER = "creds"
A, B = "broker-a", "broker-b"
HOST_A, HOST_B, INTRUDER = f"127.0.{BLOCK}.10", f"127.0.{BLOCK}.20", f"127.0.{BLOCK}.99"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Controllers]:
    controllers = Controllers(tmp_path / "controllers", block=BLOCK)
    try:
        controllers.start_all()
        controllers.wait_for_leader()
        yield controllers
    finally:
        controllers.stop_all()


def call(
    cluster: Controllers,
    node_id: int,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None,
    source: str,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    """One request, retried while the node answers NOT_LEADER, as a broker's
    controller client does: a stall of a loaded machine can start an election
    between two steps (CI run 50), and NOT_LEADER means nothing was applied."""
    deadline = time.monotonic() + 30
    while True:
        status, reply = _call_once(cluster, node_id, method, path, body, token, source, headers)
        if status != 503 or reply.get("code") != "NOT_LEADER" or time.monotonic() > deadline:
            return status, reply
        time.sleep(0.2)


def _call_once(
    cluster: Controllers,
    node_id: int,
    method: str,
    path: str,
    body: Any,
    token: str | None,
    source: str,
    headers: dict[str, str] | None,
) -> tuple[int, dict[str, Any]]:
    host, port = cluster.api_address(node_id).rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10, source_address=(source, 0))
    try:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        conn.request(method, path, None if body is None else json.dumps(body), sent)
        response = conn.getresponse()
        raw = response.read()
        return response.status, json.loads(raw) if raw.startswith(b"{") else {"raw": raw.decode()}
    finally:
        conn.close()


def heartbeat(group: str, broker_id: int, host: str) -> dict[str, Any]:
    return {"clusterName": CLUSTER, "brokerName": group, "brokerId": broker_id,
            "address": f"{host}:10911", "epoch": 0, "maxOffset": 0, "confirmOffset": 0,
            "heartbeatTimeoutMs": 600_000}  # fmt: skip


def join(cluster: Controllers, node: int, group: str, host: str, token: str) -> None:
    """Apply for BrokerId 1, register, heartbeat and elect, as a broker does."""
    key = {"clusterName": CLUSTER, "brokerName": group}
    steps = [
        ("/v1/brokers/apply-id", {**key, "brokerId": 1, "registerCode": f"rc-{group}", "address": f"{host}:10911"}),
        ("/v1/brokers/register", {**key, "brokerId": 1, "address": f"{host}:10911"}),
        ("/v1/brokers/heartbeat", heartbeat(group, 1, host)),
        ("/v1/elect-master", {**key, "brokerId": 1}),
    ]  # fmt: skip
    for path, body in steps:
        status, reply = call(cluster, node, "POST", path, body, token=token, source=host)
        assert status == 200, (path, reply)


def state(cluster: Controllers, node: int) -> list[dict[str, Any]]:
    status, body = call(cluster, node, "GET", "/v1/groups", token=cluster.token, source=INTRUDER)
    assert status == 200, body
    return [
        {k: g[k] for k in ("brokerName", "masterBrokerId", "masterEpoch", "syncStateSetEpoch")}
        | {"brokers": [(b["brokerId"], b["address"]) for b in g["brokers"]]}
        for g in body["groups"]
    ]


def wait_leader_applied(cluster: Controllers) -> int:
    leader = cluster.wait_for_leader()
    cluster.wait_ready(leader)
    return leader


def test_a_broker_credential_acts_only_for_its_own_group(cluster: Controllers) -> None:
    root = cluster.broker_credential_root
    cred_a = derive_credential(root, Role.BROKER, CLUSTER, A)
    cred_b = derive_credential(root, Role.BROKER, CLUSTER, B)
    leader = wait_leader_applied(cluster)
    follower = next(i for i in cluster.nodes if i != leader)
    join(cluster, leader, A, HOST_A, cred_a)
    join(cluster, follower, B, HOST_B, cred_b)  # through a follower: forwarded with its origin
    before = state(cluster, leader)
    assert [g["brokers"] for g in before] == [[(1, f"{HOST_A}:10911")], [(1, f"{HOST_B}:10911")]]

    key_b = {"clusterName": CLUSTER, "brokerName": B}
    other_group = (
        f"the broker credential of {CLUSTER}/{A} may not act on {CLUSTER}/{B}: "
        "a credential is bound to its own group"
    )
    for node in (leader, follower):
        for path, body in [
            ("/v1/brokers/apply-id", {**key_b, "brokerId": 2, "registerCode": "x", "address": f"{HOST_A}:10911"}),
            ("/v1/brokers/register", {**key_b, "brokerId": 1, "address": f"{HOST_A}:10911"}),
            ("/v1/brokers/heartbeat", heartbeat(B, 1, HOST_B)),
            ("/v1/brokers/inactive", {**key_b, "brokerId": 1, "reason": "blocking B"}),
            ("/v1/elect-master", {**key_b, "brokerId": 1}),
            ("/v1/sync-state-set/alter", {**key_b, "masterBrokerId": 1, "masterEpoch": 1,
                                          "syncStateSet": [1], "syncStateSetEpoch": 1}),
        ]:  # fmt: skip
            status, reply = call(cluster, node, "POST", path, body, token=cred_a, source=HOST_A)
            assert (status, reply) == (403, {"code": "FORBIDDEN", "message": other_group}), path
        status, reply = call(
            cluster,
            node,
            "GET",
            "/v1/replica-info?" + urlencode(key_b),
            token=cred_a,
            source=HOST_A,
        )
        assert (status, reply["code"]) == (403, "FORBIDDEN")

    # Its own group: no clean, no forced election of another broker, no listing.
    key_a = {"clusterName": CLUSTER, "brokerName": A}
    status, reply = call(cluster, leader, "POST", "/v1/brokers/clean", {**key_a, "force": True},
                         token=cred_a, source=HOST_A)  # fmt: skip
    assert (status, reply["code"]) == (403, "FORBIDDEN") and "admin credential" in reply["message"]
    status, reply = call(cluster, leader, "POST", "/v1/elect-master",
                         {**key_a, "brokerId": 1, "designatedBrokerId": 2},
                         token=cred_a, source=HOST_A)  # fmt: skip
    assert (status, reply["code"]) == (403, "FORBIDDEN")
    assert "only the admin credential designates" in reply["message"]
    status, reply = call(cluster, leader, "GET", "/v1/groups", token=cred_a, source=HOST_A)
    assert (status, reply["code"]) == (403, "FORBIDDEN")
    # A client credential reads its group and nothing more.
    client_a = derive_credential(root, Role.CLIENT, CLUSTER, A)
    status, reply = call(cluster, leader, "GET", "/v1/replica-info?" + urlencode(key_a),
                         token=client_a, source=INTRUDER)  # fmt: skip
    assert status == 200 and reply["masterBrokerId"] == 1
    status, reply = call(cluster, leader, "POST", "/v1/brokers/heartbeat", heartbeat(A, 1, HOST_A),
                         token=client_a, source=HOST_A)  # fmt: skip
    assert (status, reply["code"]) == (403, "FORBIDDEN")

    assert state(cluster, leader) == before
    # The admin credential may do what the broker credential may not.
    status, reply = call(cluster, leader, "POST", "/v1/brokers/clean", {**key_b, "force": True},
                         token=cluster.token, source=INTRUDER)  # fmt: skip
    assert (status, reply) == (200, {"code": "SUCCESS", "removed": [1]})


def test_a_heartbeat_from_another_address_than_registered_is_refused(
    cluster: Controllers,
) -> None:
    cred_a = derive_credential(cluster.broker_credential_root, Role.BROKER, CLUSTER, A)
    leader = wait_leader_applied(cluster)
    follower = next(i for i in cluster.nodes if i != leader)
    join(cluster, leader, A, HOST_A, cred_a)
    before = state(cluster, leader)
    for node in (leader, follower):
        # The registered address claimed, but sent from another host.
        status, reply = call(cluster, node, "POST", "/v1/brokers/heartbeat", heartbeat(A, 1, HOST_A),
                             token=cred_a, source=INTRUDER)  # fmt: skip
        assert (status, reply) == (403, {"code": "FORBIDDEN", "message": (
            f"heartbeat as broker 1 came from {INTRUDER}, but broker 1 is registered at "
            f"{HOST_A}:10911")}), node  # fmt: skip
        # Another address claimed (from that address).
        status, reply = call(cluster, node, "POST", "/v1/brokers/heartbeat", heartbeat(A, 1, INTRUDER),
                             token=cred_a, source=INTRUDER)  # fmt: skip
        assert (status, reply) == (403, {"code": "FORBIDDEN", "message": (
            f"heartbeat for broker 1 claims address {INTRUDER}:10911 but broker 1 is registered "
            f"at {HOST_A}:10911: register the new address first")}), node  # fmt: skip
    # Posing as a forwarding node does not help: the origin needs the nodes' proof.
    status, reply = call(
        cluster, leader, "POST", "/v1/brokers/heartbeat", heartbeat(A, 1, HOST_A), token=cred_a,
        source=INTRUDER,
        headers={"X-Brokergroup-Forwarded-By": "x", "X-Brokergroup-Origin": HOST_A},
    )  # fmt: skip
    assert (status, reply["code"]) == (401, "UNAUTHORIZED")
    assert "origin proof" in reply["message"]
    assert state(cluster, leader) == before
    # The real broker, from its own address, still heartbeats.
    status, reply = call(cluster, follower, "POST", "/v1/brokers/heartbeat",
                         heartbeat(A, 1, HOST_A), token=cred_a, source=HOST_A)  # fmt: skip
    assert status == 200, reply


def test_reads_need_a_credential_but_health_and_metrics_are_open(cluster: Controllers) -> None:
    leader = wait_leader_applied(cluster)
    key = urlencode({"clusterName": CLUSTER, "brokerName": A})
    watch = urlencode({"clusterName": CLUSTER, "brokerName": A, "masterEpoch": 0,
                       "syncStateSetEpoch": 0, "timeoutMs": 10})  # fmt: skip
    for node in cluster.nodes:
        for path in (f"/v1/replica-info?{key}", f"/v1/watch?{watch}", "/v1/groups",
                     f"/v1/next-broker-id?{key}", "/v1/raft"):  # fmt: skip
            status, reply = call(cluster, node, "GET", path, token=None, source=INTRUDER)
            assert (status, reply["code"]) == (401, "UNAUTHORIZED"), (node, path)
            assert "missing bearer credential" in reply["message"]
            status, reply = call(cluster, node, "GET", path, token="wrong", source=INTRUDER)
            assert (status, reply["code"]) == (401, "UNAUTHORIZED"), (node, path)
        deadline = time.monotonic() + 30
        while call(cluster, node, "GET", "/readyz", token=None, source=INTRUDER)[0] != 200:
            assert time.monotonic() < deadline, f"node {node} never ready"
            time.sleep(0.1)
        assert call(cluster, node, "GET", "/healthz", token=None, source=INTRUDER)[0] == 200
        status, reply = call(cluster, node, "GET", "/metrics", token=None, source=INTRUDER)
        assert status == 200 and "brokergroup_controller_raft_term" in reply["raw"]
    leader = cluster.wait_for_leader()  # the leader of now: a stall may have moved it
    status, reply = call(cluster, leader, "GET", "/v1/raft", token=cluster.token, source=INTRUDER)
    assert status == 200 and reply["isLeader"] is True
