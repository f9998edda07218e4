"""The controller HTTP API (DESIGN.md §2.2–§2.4, docs/architecture.md) on one node.

A real single-node Raft (`ControllerRaftNode`, its own loopback address in
127.0.3.0/24 and a temp data dir) behind the real aiohttp app, driven by
aiohttp's test client and by `ControllerClient`. Checks input validation
(400 naming the field), auth (401, state unchanged), rule rejections (409
with the ErrorCode), register-only-on-address-change, immediate elections
on store failure, long-poll watch, metrics/health, config validation, and a
stubbed follower that cannot reach its leader (503 NOT_LEADER + leader).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from brokergroup_controller import api
from brokergroup_controller.api_auth import origin_proof
from brokergroup_controller.app import SERVICE_KEY, create_app
from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.raft_settings import RaftStatus
from brokergroup_controller.server import ControllerConfig, config_from_sources
from brokergroup_controller.state import ControllerState

TOKEN = "s3cret"
RAFT_PASSWORD = "raft-secret-of-this-test"
BROKER_CREDENTIAL_ROOT = "broker-credential-root-of-this-test"
C, B = "DefaultCluster", "broker-a"
_hosts = itertools.count(1)


def _config(tmp_path: Path, host: str, **kw: Any) -> ControllerConfig:
    return ControllerConfig(
        node_id=1,
        peers=(f"{host}:9880",),
        data_dir=str(tmp_path / "data"),
        bind_address=host,
        token=TOKEN,
        broker_credential_root=BROKER_CREDENTIAL_ROOT,
        raft_password=RAFT_PASSWORD,
        **kw,
    )


@pytest.fixture
async def node_and_client(
    tmp_path: Path,
) -> AsyncIterator[tuple[ControllerRaftNode, TestClient[Any, Any]]]:
    host = f"127.0.3.{next(_hosts)}"
    config = _config(tmp_path, host)
    node = ControllerRaftNode(config.raft_settings())
    node.start()
    try:
        deadline = time.monotonic() + 10
        while not node.status().caught_up:
            assert time.monotonic() < deadline, "single node never became leader"
            await asyncio.sleep(0.01)
        client = TestClient(TestServer(create_app(config, node), host="127.0.0.1"))
        await client.start_server()
        try:
            yield node, client
        finally:
            await client.close()
    finally:
        await asyncio.to_thread(node.stop)


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def get(client: TestClient[Any, Any], path: str, **kw: Any) -> Any:
    """GET with the admin credential (reads need one too, DESIGN.md §11)."""
    return client.get(path, headers=kw.pop("headers", AUTH), **kw)


async def post(
    client: TestClient[Any, Any], path: str, body: Any, **kw: Any
) -> tuple[int, dict[str, Any]]:
    headers = kw.pop("headers", AUTH)
    response = await client.post(path, json=body, headers=headers, **kw)
    return response.status, await response.json()


def state_of(node: ControllerRaftNode) -> dict[str, Any]:
    return node.read(lambda s: s.to_dict())


async def setup_group(client: TestClient[Any, Any], n: int = 3) -> None:
    for i in range(1, n + 1):
        status, body = await post(
            client,
            "/v1/brokers/apply-id",
            {
                "clusterName": C,
                "brokerName": B,
                "brokerId": i,
                "registerCode": f"rc{i}",
                "address": f"10.0.0.{i}:10911",
            },
        )
        assert status == 200, body
        status, body = await post(
            client,
            "/v1/brokers/heartbeat",
            {"clusterName": C, "brokerName": B, "brokerId": i, "address": f"10.0.0.{i}:10911",
             "epoch": 0, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMs": 60000},
        )  # fmt: skip
        assert status == 200, body
    status, body = await post(
        client, "/v1/elect-master", {"clusterName": C, "brokerName": B, "brokerId": 1}
    )
    assert status == 200 and body["masterBrokerId"] == 1, body


# ---------------------------------------------------------------- auth (§2.4)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}]
)
async def test_wrong_or_missing_token_is_401_and_changes_nothing(
    node_and_client: Any, headers: dict[str, str]
) -> None:
    """§2.4: mutating calls need the bearer token; a refused call leaves the state unchanged."""
    node, client = node_and_client
    await setup_group(client)
    before = state_of(node)
    commit_before = node.status().commit_index
    for path, body in [
        ("/v1/brokers/apply-id", {"clusterName": C, "brokerName": B, "brokerId": 4, "registerCode": "x", "address": "a:1"}),
        ("/v1/brokers/clean", {"clusterName": C, "brokerName": B, "force": True}),
        ("/v1/elect-master", {"clusterName": C, "brokerName": B, "designatedBrokerId": 2}),
    ]:  # fmt: skip
        status, reply = await post(client, path, body, headers=headers)
        assert status == 401 and reply["code"] == "UNAUTHORIZED", reply
    assert state_of(node) == before
    assert node.status().commit_index == commit_before


# ---------------------------------------------------------------- input (§2.4)


async def test_malformed_json_is_400_with_a_clear_message(node_and_client: Any) -> None:
    node, client = node_and_client
    before = state_of(node)
    response = await client.post("/v1/brokers/apply-id", data=b'{"clusterName": ', headers=AUTH)
    body = await response.json()
    assert response.status == 400 and body["code"] == "BAD_REQUEST"
    assert "not valid JSON" in body["message"]
    response = await client.post("/v1/brokers/apply-id", data=b"[1, 2]", headers=AUTH)
    assert response.status == 400 and "JSON object" in (await response.json())["message"]
    assert state_of(node) == before


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/brokers/apply-id", {"clusterName": C, "brokerName": B, "registerCode": "x", "address": "a:1"}, "brokerId"),
        ("/v1/brokers/apply-id", {"clusterName": C, "brokerName": B, "brokerId": True, "registerCode": "x", "address": "a:1"}, "brokerId"),
        ("/v1/brokers/apply-id", {"clusterName": C, "brokerName": 7, "brokerId": 1, "registerCode": "x", "address": "a:1"}, "brokerName"),
        ("/v1/brokers/register", {"clusterName": C, "brokerName": B, "brokerId": 1}, "address"),
        ("/v1/brokers/heartbeat", {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "a:1", "epoch": "1", "maxOffset": 0, "confirmOffset": 0}, "epoch"),
        ("/v1/brokers/heartbeat", {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "a:1", "epoch": 1, "maxOffset": 0, "confirmOffset": 0, "storeWritable": "no"}, "storeWritable"),
        ("/v1/sync-state-set/alter", {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, "2"], "syncStateSetEpoch": 1}, "syncStateSet"),
        ("/v1/elect-master", {"clusterName": C, "brokerName": B}, "brokerId"),
        ("/v1/elect-master", {"clusterName": C, "brokerName": B, "brokerId": 1, "trigger": "controller"}, "trigger"),
        ("/v1/brokers/clean", {"clusterName": C, "brokerName": B, "brokerIds": "1,2"}, "brokerIds"),
        ("/v1/brokers/inactive", {"clusterName": C, "brokerName": B, "brokerId": -1}, "brokerId"),
    ],
)  # fmt: skip
async def test_missing_or_wrongly_typed_field_is_400_naming_it(
    node_and_client: Any, path: str, body: dict[str, Any], field: str
) -> None:
    node, client = node_and_client
    before = state_of(node)
    status, reply = await post(client, path, body)
    assert status == 400 and reply["code"] == "BAD_REQUEST", reply
    assert f"'{field}'" in reply["message"]
    assert state_of(node) == before


async def test_bad_query_parameters_are_400(node_and_client: Any) -> None:
    _, client = node_and_client
    response = await get(client, "/v1/next-broker-id", params={"clusterName": C})
    assert response.status == 400 and "'brokerName'" in (await response.json())["message"]
    response = await get(
        client,
        "/v1/watch",
        params={
            "clusterName": C,
            "brokerName": B,
            "masterEpoch": "x",
            "syncStateSetEpoch": 0,
            "timeoutMs": 1,
        },
    )
    assert response.status == 400 and "'masterEpoch'" in (await response.json())["message"]


# ---------------------------------------------------------------- rules (§2.2)


async def test_rule_rejections_are_409_with_codes_and_leave_state_unchanged(
    node_and_client: Any,
) -> None:
    node, client = node_and_client
    await setup_group(client)
    cases = [
        ("/v1/brokers/apply-id", {"clusterName": C, "brokerName": B, "brokerId": 2, "registerCode": "other", "address": "x:1"}, "BROKER_ID_INVALID"),
        ("/v1/brokers/register", {"clusterName": C, "brokerName": B, "brokerId": 9, "address": "x:1"}, "NEED_TO_BE_REGISTERED"),
        ("/v1/sync-state-set/alter", {"clusterName": C, "brokerName": B, "masterBrokerId": 2, "masterEpoch": 1, "syncStateSet": [1, 2], "syncStateSetEpoch": 1}, "INVALID_MASTER"),
        ("/v1/sync-state-set/alter", {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 0, "syncStateSet": [1, 2], "syncStateSetEpoch": 1}, "FENCED_MASTER_EPOCH"),
        ("/v1/sync-state-set/alter", {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [1, 2], "syncStateSetEpoch": 0}, "FENCED_SYNC_STATE_SET_EPOCH"),
        ("/v1/sync-state-set/alter", {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1, "syncStateSet": [2], "syncStateSetEpoch": 1}, "INVALID_SYNC_STATE_SET"),
        ("/v1/elect-master", {"clusterName": C, "brokerName": B, "brokerId": 2}, "MASTER_STILL_EXIST"),
        ("/v1/elect-master", {"clusterName": C, "brokerName": B, "designatedBrokerId": 3}, "ELECT_TARGET_NOT_ELIGIBLE"),
        ("/v1/brokers/clean", {"clusterName": C, "brokerName": B, "brokerIds": [3]}, "BROKER_STILL_ALIVE"),
    ]  # fmt: skip
    for path, body, code in cases:
        before = state_of(node)
        status, reply = await post(client, path, body)
        assert (status, reply["code"]) == (409, code), (path, reply)
        assert reply["message"]
        assert state_of(node) == before, code
    status, reply = await post(client, "/v1/brokers/apply-id", cases[0][1])
    assert reply["nextBrokerId"] == 4  # the BROKER_ID_INVALID body tells where to go next
    response = await get(
        client, "/v1/replica-info", params={"clusterName": C, "brokerName": "nope"}
    )
    assert response.status == 404 and (await response.json())["code"] == "BROKER_SET_NOT_FOUND"


async def test_alter_refuses_members_that_are_not_alive(node_and_client: Any) -> None:
    _node, client = node_and_client
    await setup_group(client)
    await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 3, "reason": "gone"},
    )
    status, reply = await post(
        client,
        "/v1/sync-state-set/alter",
        {
            "clusterName": C,
            "brokerName": B,
            "masterBrokerId": 1,
            "masterEpoch": 1,
            "syncStateSet": [1, 3],
            "syncStateSetEpoch": 1,
        },
    )
    assert (status, reply["code"]) == (409, "BROKER_NOT_ALIVE")
    status, reply = await post(
        client,
        "/v1/sync-state-set/alter",
        {
            "clusterName": C,
            "brokerName": B,
            "masterBrokerId": 1,
            "masterEpoch": 1,
            "syncStateSet": [1, 2],
            "syncStateSetEpoch": 1,
        },
    )
    assert status == 200 and reply == {
        "code": "SUCCESS",
        "syncStateSet": [1, 2],
        "syncStateSetEpoch": 2,
    }


async def test_register_commits_only_when_the_address_changed(node_and_client: Any) -> None:
    """Persistent-broker-id seed §5.1: RegisterBroker updates the address only if it changed."""
    node, client = node_and_client
    await setup_group(client, n=1)
    commit = node.status().commit_index
    body = {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "10.0.0.1:10911"}
    status, reply = await post(client, "/v1/brokers/register", body)
    assert status == 200 and reply["masterBrokerId"] == 1
    assert node.status().commit_index == commit
    status, reply = await post(
        client, "/v1/brokers/register", {**body, "address": "10.9.9.9:10911"}
    )
    assert status == 200 and reply["masterAddress"] == "10.9.9.9:10911"
    assert node.status().commit_index == commit + 1


async def test_store_not_writable_master_fails_over_before_the_answer(node_and_client: Any) -> None:
    """§2.3: a heartbeat saying the store cannot take writes triggers an election at once."""
    _node, client = node_and_client
    await setup_group(client)
    await post(
        client,
        "/v1/sync-state-set/alter",
        {
            "clusterName": C,
            "brokerName": B,
            "masterBrokerId": 1,
            "masterEpoch": 1,
            "syncStateSet": [1, 2],
            "syncStateSetEpoch": 1,
        },
    )
    status, reply = await post(
        client,
        "/v1/brokers/heartbeat",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "10.0.0.1:10911", "epoch": 1,
         "maxOffset": 10, "confirmOffset": 10, "storeWritable": False, "storeError": "disk full"},
    )  # fmt: skip
    assert status == 200
    assert (
        reply["masterBrokerId"] == 2 and reply["masterEpoch"] == 2 and reply["syncStateSet"] == [2]
    )
    # Replica-info says why broker 1 is not alive (the operator's NoMaster message uses it).
    async with ControllerClient([str(client.make_url("/")).rstrip("/")], TOKEN) as cc:
        info = await cc.replica_info(C, B)
    assert [(b.broker_id, b.alive, b.inactive_reason) for b in info.brokers] == [
        (1, False, "store cannot take writes: disk full"),
        (2, True, None),
        (3, True, None),
    ]


async def test_replica_info_names_a_dead_master_and_says_it_is_not_alive(
    node_and_client: Any,
) -> None:
    """§2.4: replica-info always names the master the Raft state records, with
    `masterAlive`; it used to hide the id while the master was not alive, so
    readers could not tell "no master" from "master 1, dead, election pending".
    Also (§3.3 "Fencing"): a master elected while the old one may hold its
    lease is told how long to hold its acknowledgements (`masterTakeoverWaitMs`)."""
    _node, client = node_and_client
    await setup_group(client)
    alter = {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1,
             "syncStateSet": [1, 2], "syncStateSetEpoch": 1}  # fmt: skip
    assert (await post(client, "/v1/sync-state-set/alter", alter))[0] == 200
    query = {"clusterName": C, "brokerName": B}
    alive = await (await get(client, "/v1/replica-info", params=query)).json()
    assert (alive["masterBrokerId"], alive["masterAlive"], alive["masterTakeoverWaitMs"]) == (
        1, True, 0,
    )  # fmt: skip
    # A leadership change: everyone is alive by grace only, and member 2 has
    # not proved itself yet, so the election for a dead master 1 must wait.
    service = client.server.app[SERVICE_KEY]
    service.liveness.become_leader(service.clock_ms())
    status, reply = await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "pod not ready"},
    )
    assert status == 200
    assert (reply["masterBrokerId"], reply["masterAddress"], reply["masterAlive"]) == (
        1, "10.0.0.1:10911", False,
    )  # fmt: skip
    assert reply["masterEpoch"] == 1
    async with ControllerClient([str(client.make_url("/")).rstrip("/")], TOKEN) as cc:
        info = await cc.replica_info(C, B)
    assert info.master_broker_id == 1 and not info.master_alive
    assert info.live_master_broker_id is None and info.live_master_address is None
    # Member 2 proves itself: elected; broker 1 was never heard by this leader,
    # so its lease may have been renewed by the previous one: 2 must hold.
    status, reply = await post(
        client,
        "/v1/brokers/heartbeat",
        {"clusterName": C, "brokerName": B, "brokerId": 2, "address": "10.0.0.2:10911",
         "epoch": 1, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMs": 60000},
    )  # fmt: skip
    assert status == 200
    deadline = time.monotonic() + 10
    while True:  # the retry of the waiting election is due after its backoff
        after = await (await get(client, "/v1/replica-info", params=query)).json()
        if after["masterBrokerId"] != 1 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert (after["masterBrokerId"], after["masterAlive"], after["masterEpoch"]) == (2, True, 2)
    assert 0 < after["masterTakeoverWaitMs"] <= service.config.heartbeat_timeout_ms


async def test_an_election_whose_commit_timed_out_still_holds_the_new_master(
    node_and_client: Any,
) -> None:
    """Issue 17 item 3 (§3.3 "Fencing"): an ElectMaster whose commit outlives
    the request's timeout but applies later must still tell the new master to
    wait out the old master's lease; the wait lives in the replicated state,
    not in the request path that gave up."""
    node, client = node_and_client
    await setup_group(client)
    alter = {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1,
             "syncStateSet": [1, 2], "syncStateSetEpoch": 1}  # fmt: skip
    assert (await post(client, "/v1/sync-state-set/alter", alter))[0] == 200
    # Master 1 renewed its 60 s lease just now; it is only reported not ready.
    status, _ = await post(
        client,
        "/v1/brokers/heartbeat",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "10.0.0.1:10911",
         "epoch": 1, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMs": 60000,
         "masterLeaseMs": 30000},
    )  # fmt: skip
    assert status == 200
    real_propose = node.propose

    async def slow_commit(event: Any, timeout_s: float) -> Any:
        result = await real_propose(event, timeout_s)
        if event.TYPE == "ElectMaster":  # applied, but the caller timed out first
            raise ControllerError(ErrorCode.COMMIT_TIMEOUT, "not committed in time")
        return result

    node.propose = slow_commit  # type: ignore[method-assign]
    status, _ = await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "pod not ready"},
    )
    assert status == 200
    query = {"clusterName": C, "brokerName": B}
    info = await (await get(client, "/v1/replica-info", params=query)).json()
    assert (info["masterBrokerId"], info["masterEpoch"]) == (2, 2)
    assert info["masterTakeoverWaitMs"] > 20_000


async def master_1_heartbeats(client: TestClient[Any, Any], incarnation: str = "") -> None:
    """Master 1 (SyncStateSet {1, 2}) heartbeats with a 60 s timeout."""
    status, body = await post(
        client,
        "/v1/brokers/heartbeat",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "10.0.0.1:10911",
         "epoch": 1, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMs": 60000,
         "incarnation": incarnation},
    )  # fmt: skip
    assert status == 200, body


async def with_in_sync_slave(client: TestClient[Any, Any]) -> None:
    await setup_group(client)
    alter = {"clusterName": C, "brokerName": B, "masterBrokerId": 1, "masterEpoch": 1,
             "syncStateSet": [1, 2], "syncStateSetEpoch": 1}  # fmt: skip
    assert (await post(client, "/v1/sync-state-set/alter", alter))[0] == 200


async def test_a_not_ready_blip_of_a_heartbeating_master_costs_no_election(
    node_and_client: Any,
) -> None:
    """Issue 17 item 9: "not ready" is a symptom; while the master's heartbeats
    stay fresh it stays master. Its heartbeats stopping would still fail it
    over after its own timeout, and a deletion still fails over at once."""
    _node, client = node_and_client
    await with_in_sync_slave(client)
    await master_1_heartbeats(client)
    status, reply = await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "pod not ready",
         "symptomOnly": True},
    )  # fmt: skip
    assert status == 200
    assert (reply["masterBrokerId"], reply["masterEpoch"], reply["masterAlive"]) == (1, 1, True)
    status, reply = await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "pod deleted"},
    )
    assert (reply["masterBrokerId"], reply["masterEpoch"]) == (2, 2)


async def test_a_report_about_an_older_incarnation_is_ignored(node_and_client: Any) -> None:
    """Issue 17 item 5: the old pod's deletion, reported after the broker came
    back in a new pod (a new incarnation heartbeating), must not fail over."""
    _node, client = node_and_client
    await with_in_sync_slave(client)
    await master_1_heartbeats(client, incarnation="pod-uid-new")
    status, reply = await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "pod deleted",
         "processGone": True, "incarnation": "pod-uid-old"},
    )  # fmt: skip
    assert status == 200
    assert (reply["masterBrokerId"], reply["masterEpoch"], reply["masterAlive"]) == (1, 1, True)
    status, reply = await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "pod deleted",
         "incarnation": "pod-uid-new"},
    )  # fmt: skip
    assert (reply["masterBrokerId"], reply["masterEpoch"]) == (2, 2)


async def test_watch_returns_on_epoch_change_or_timeout(node_and_client: Any) -> None:
    """§2.3: `GET /v1/watch` long-polls until an epoch moves past the given one."""
    _node, client = node_and_client
    await setup_group(client)
    params = {
        "clusterName": C,
        "brokerName": B,
        "masterEpoch": 1,
        "syncStateSetEpoch": 1,
        "timeoutMs": 100,
    }
    started = time.monotonic()
    response = await get(client, "/v1/watch", params=params)
    assert response.status == 200 and (await response.json())["masterEpoch"] == 1
    assert time.monotonic() - started >= 0.09
    waiter = asyncio.ensure_future(get(client, "/v1/watch", params={**params, "timeoutMs": 10000}))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await post(
        client, "/v1/elect-master", {"clusterName": C, "brokerName": B, "designatedBrokerId": 1}
    )
    await post(
        client,
        "/v1/brokers/inactive",
        {"clusterName": C, "brokerName": B, "brokerId": 1, "reason": "x"},
    )
    response = await asyncio.wait_for(waiter, 5)
    body = await response.json()
    assert body["masterEpoch"] >= 2


async def test_clean_broker_data_removes_and_forgets(node_and_client: Any) -> None:
    node, client = node_and_client
    await setup_group(client)
    status, reply = await post(
        client,
        "/v1/brokers/clean",
        {"clusterName": C, "brokerName": B, "brokerIds": [3], "force": True},
    )
    assert status == 200 and reply["removed"] == [3]
    assert "3" not in state_of(node)["brokerSets"][0]["brokers"]


async def test_health_ready_metrics_and_raft(node_and_client: Any) -> None:
    _node, client = node_and_client
    await setup_group(client, n=1)
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    text = await (await client.get("/metrics")).text()
    assert "brokergroup_controller_requests_total" in text
    assert "brokergroup_controller_raft_is_leader 1.0" in text
    raft = await (await get(client, "/v1/raft")).json()
    assert raft["isLeader"] and raft["nodeId"] == 1 and raft["leader"] == raft["self"]
    assert set(raft) >= {
        "nodeId",
        "self",
        "leader",
        "term",
        "commitIndex",
        "lastApplied",
        "members",
        "isLeader",
    }


async def test_typed_client_round_trip(node_and_client: Any) -> None:
    """The client used by brokers and the operator: results typed, rejections raised."""
    _, client = node_and_client
    address = f"{client.server.host}:{client.server.port}"
    async with ControllerClient([address], TOKEN, request_timeout_s=3) as cc:
        assert await cc.get_next_broker_id(C, "g") == 1
        assert await cc.apply_broker_id(C, "g", 1, "rc1", "10.1.0.1:10911") == 1
        assert await cc.apply_broker_id(C, "g", 2, "rc2", "10.1.0.2:10911") == 2
        with pytest.raises(ControllerError) as err:
            await cc.apply_broker_id(C, "g", 1, "intruder", "10.1.0.3:10911")
        assert (
            err.value.code is ErrorCode.BROKER_ID_INVALID and err.value.details["nextBrokerId"] == 3
        )
        info = await cc.register_broker(C, "g", 1, "10.1.0.1:10911")
        assert isinstance(info, api.ReplicaInfo) and info.master_broker_id is None
        await cc.heartbeat(api.BrokerHeartbeat(C, "g", 2, "10.1.0.2:10911", 0, 0, 0))
        info = await cc.elect_master(C, "g", requester_broker_id=1)
        assert info.master_broker_id == 1 and info.master_epoch == 1
        assert await cc.alter_sync_state_set(C, "g", 1, 1, [1, 2], 1) == (frozenset({1, 2}), 2)
        info = await cc.elect_master(C, "g", designated_broker_id=2)
        assert info.master_broker_id == 2
        info = await cc.report_inactive(C, "g", 2, "pod deleted")
        assert info.master_epoch >= 3
        assert [g.broker_name for g in await cc.groups()] == ["g"]
        watched = await cc.watch(C, "g", 0, 0, 1000)
        assert watched.master_epoch >= 3
        assert (await cc.raft_status())["isLeader"]
        assert await cc.clean_broker_data(C, "g", [1], force=True) == [1]
    async with ControllerClient([address], "wrong") as cc:
        with pytest.raises(ControllerError) as err:
            await cc.clean_broker_data(C, "g", force=True)
        assert err.value.code is ErrorCode.UNAUTHORIZED


async def test_client_raises_unavailable_when_nothing_answers() -> None:
    async with ControllerClient(["127.0.3.250:1", "127.0.3.251:1"], request_timeout_s=0.5) as cc:
        with pytest.raises(ControllerUnavailable) as err:
            await cc.get_next_broker_id(C, B)
    assert err.value.attempts


# ---------------------------------------------------------------- follower with no reachable leader


class _FollowerStub:
    """A follower that believes 127.0.3.250 leads but cannot reach it."""

    def __init__(self) -> None:
        self.state = ControllerState()

    def status(self) -> RaftStatus:
        return RaftStatus(
            "127.0.3.249:9880", ("127.0.3.249:9880", "127.0.3.250:9880"), frozenset(),
            "127.0.3.250:9880", False, 3, 5, 5, 5, True, 5, 0, True,
        )  # fmt: skip

    def add_listener(self, loop: Any, callback: Any) -> None:
        pass

    def read(self, reader: Any) -> Any:
        return reader(self.state)


async def test_follower_that_cannot_forward_answers_503_with_the_leader(tmp_path: Path) -> None:
    config = replace(_config(tmp_path, "127.0.3.249"), forward_timeout_ms=3500)
    app: web.Application = create_app(config, _FollowerStub())  # type: ignore[arg-type]
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        status, body = await post(
            client,
            "/v1/brokers/register",
            {"clusterName": C, "brokerName": B, "brokerId": 1, "address": "a:1"},
        )
        assert status == 503 and body["code"] == "NOT_LEADER"
        assert body["leader"] == "127.0.3.250:9878"
        status, body = await post(client, "/v1/brokers/register", {"clusterName": C}, headers={})
        assert status == 401  # auth is checked before anything else, even on followers
        forged = {**AUTH, "X-Brokergroup-Forwarded-By": "x", "X-Brokergroup-Origin": "10.0.0.1"}
        response = await get(client, "/v1/groups", headers=forged)
        assert response.status == 401  # only a node can say where a request came from
        proof = origin_proof(RAFT_PASSWORD, "10.0.0.1", "GET", "/v1/groups", AUTH["Authorization"])
        response = await get(
            client, "/v1/groups", headers={**forged, "X-Brokergroup-Origin-Proof": proof}
        )
        assert response.status == 503  # never forwarded twice


# ---------------------------------------------------------------- config (STYLE §6)


def test_config_defaults_and_relationships(tmp_path: Path) -> None:
    base = {
        "node_id": 1,
        "peers": "h1:9880,h2:9880,h3:9880",
        "data_dir": str(tmp_path),
        "token": "t",
        "broker_credential_root": BROKER_CREDENTIAL_ROOT,
        "raft_password": RAFT_PASSWORD,
    }
    config = config_from_sources({}, base)
    assert config.enable_elect_unclean_master is False
    assert config.self_address == "h1:9880" and config.api_address_of("h2:9880") == "h2:9878"
    assert config_from_sources({"enableElectUncleanMaster": True}, base).enable_elect_unclean_master
    bad: list[tuple[dict[str, Any], dict[str, Any], str]] = [
        ({"raftMinTimeoutMs": 20}, {}, "appendEntriesPeriod"),
        ({"commitTimeoutMs": 300}, {}, "commitTimeoutMs"),
        ({"connectionCloseGraceMs": 5000}, {}, "connectionCloseGraceMs"),
        ({"heartbeatTimeoutMs": "2000"}, {}, "heartbeatTimeoutMs"),
        ({"noSuchSetting": 1}, {}, "noSuchSetting"),
        ({"token": "in-the-file"}, {}, "token"),
        ({}, {"node_id": 4}, "--node-id"),
        ({}, {"token": None, "insecure_no_auth": None}, "token"),
        ({"raftPassword": "in-the-file-is-refused"}, {}, "raftPassword"),
        ({}, {"raft_password": None}, "Raft password is required"),
        ({}, {"raft_password": "short"}, "at least 16"),
        ({"brokerCredentialRoot": "in-the-file-is-refused"}, {}, "brokerCredentialRoot"),
        ({}, {"broker_credential_root": None}, "broker credential root is required"),
        ({}, {"broker_credential_root": "short"}, "at least 16"),
        ({}, {"token": BROKER_CREDENTIAL_ROOT}, "must differ"),
        ({}, {"raft_bind_address": "0.0.0.0"}, "all interfaces"),
        ({}, {"insecure_no_auth": True}, "cannot be combined"),
        ({}, {"peers": "h1:9880,h1:9880"}, "duplicate"),
    ]
    for file_values, overrides, needle in bad:
        with pytest.raises(ValueError, match=needle):
            config_from_sources(
                file_values,
                {**base, **overrides}
                if overrides.get("token", 1)
                else {k: v for k, v in base.items() if k != "token"},
            )


async def test_switchover_is_the_controllers_pick_by_the_election_ranking(
    node_and_client: Any,
) -> None:
    """Issue 32 item 3: an admin ElectMaster with `switchover` (no target named) moves
    the live master to the best other in-sync replica as elections rank it, here by
    electionPriority between equal logs, within the caller's eligible ids; with none
    able to take over it is refused and nothing changes."""
    _, client = node_and_client
    address = f"{client.server.host}:{client.server.port}"
    async with ControllerClient([address], TOKEN, request_timeout_s=3) as cc:
        for i in (1, 2, 3):
            assert await cc.apply_broker_id(C, "s", i, f"rc{i}", f"10.1.0.{i}:10911") == i
            await cc.register_broker(C, "s", i, f"10.1.0.{i}:10911")
        priorities = {1: 0, 2: 7, 3: 3}

        async def heartbeats(epoch: int) -> None:
            for i, priority in priorities.items():
                await cc.heartbeat(
                    api.BrokerHeartbeat(C, "s", i, f"10.1.0.{i}:10911", epoch, 100, 100,
                                        election_priority=priority,
                                        heartbeat_timeout_ms=600_000)
                )  # fmt: skip

        await heartbeats(0)
        assert (await cc.elect_master(C, "s", requester_broker_id=1)).master_broker_id == 1
        await cc.alter_sync_state_set(C, "s", 1, 1, [1, 2, 3], 1)
        await heartbeats(1)
        info = await cc.switchover(C, "s")
        assert (info.master_broker_id, info.master_epoch) == (3, 2)  # priority 3 beats 7
        await cc.alter_sync_state_set(C, "s", 3, 2, [1, 2, 3], info.sync_state_set_epoch)
        await heartbeats(2)
        info = await cc.switchover(C, "s", eligible_broker_ids=[2])
        assert (info.master_broker_id, info.master_epoch) == (2, 3)
        with pytest.raises(ControllerError) as err:  # 1 and 3 are out of the set now
            await cc.switchover(C, "s", eligible_broker_ids=[1, 3])
        assert err.value.code is ErrorCode.ELECT_TARGET_NOT_ELIGIBLE
        assert (await cc.replica_info(C, "s")).master_epoch == 3
