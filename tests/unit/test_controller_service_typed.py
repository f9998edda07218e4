"""The controller service without a front end (issue 32 item 2, DESIGN.md §12 "One request
layer"): typed requests in, the API's types out, one refusal type (`ControllerError`) that
each front end maps at its own edge.

A real single-node Raft (`ControllerRaftNode` on its own loopback address in
127.0.12.0/24) behind the real `ControllerService`; no aiohttp and no remoting here. Also:
`state.apply`'s typed outcomes read and write the dump format they always had, and the
RocketMQ port's `refusal_of` maps every `ControllerError` through `wire.RESPONSE_CODE_OF`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from brokergroup_controller import api
from brokergroup_controller import requests as rq
from brokergroup_controller.credentials import Principal, Role
from brokergroup_controller.election import ElectionTrigger
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.request_parsing import BadRequest
from brokergroup_controller.rocketmq_front import wire
from brokergroup_controller.rocketmq_front.front import refusal_of
from brokergroup_controller.server import ControllerConfig, ControllerService
from brokergroup_controller.state import (
    ApplyResult,
    BrokerIdApplied,
    BrokerRegistered,
    BrokersCleaned,
    ControllerState,
    MasterElected,
    SyncStateSetAltered,
)
from brokergroup_remoting import ResponseCode

C, B = "DefaultCluster", "broker-a"
ANYONE = rq.Caller(None)
_hosts = itertools.count(1)


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[ControllerService]:
    host = f"127.0.12.{next(_hosts)}"
    config = ControllerConfig(
        node_id=1,
        peers=(f"{host}:9880",),
        data_dir=str(tmp_path / "data"),
        bind_address=host,
        token="api-token",
        raft_password="raft-secret-of-this-test",
    )
    raft = ControllerRaftNode(config.raft_settings())
    raft.start()
    service = ControllerService(config, raft)
    try:
        deadline = time.monotonic() + 10
        while not raft.status().caught_up:
            assert time.monotonic() < deadline, "single node never became leader"
            await asyncio.sleep(0.01)
        await service.start()
        yield service
    finally:
        await service.close()
        await asyncio.to_thread(raft.stop)


def _heartbeat(broker_id: int) -> rq.Heartbeat:
    return rq.Heartbeat(api.BrokerHeartbeat(C, B, broker_id, f"127.0.0.{broker_id}:10911", 0, 0, 0))


async def _group_of_two(service: ControllerService) -> None:
    e = service.endpoints
    for broker_id in (1, 2):
        address = f"127.0.0.{broker_id}:10911"
        applied = await e.apply_broker_id(
            rq.ApplyBrokerId(C, B, broker_id, f"code-{broker_id}", address), ANYONE
        )
        assert applied == api.AppliedBrokerId(broker_id, broker_id + 1)
        info = await e.register_broker(rq.RegisterBroker(C, B, broker_id, address), ANYONE)
        assert isinstance(info, api.ReplicaInfo) and info.broker_name == B
        await e.heartbeat(_heartbeat(broker_id), ANYONE)
    elected = await e.elect_master(rq.ElectMaster(C, B, ElectionTrigger.BROKER, 1), ANYONE)
    assert elected.master_broker_id == 1 and elected.master_epoch == 1


def _ageless(info: api.ReplicaInfo) -> api.ReplicaInfo:
    """`info` with every heartbeat's age at 0 (it is read on the real clock)."""
    brokers = tuple(dataclasses.replace(b, last_heartbeat_age_ms=0) for b in info.brokers)
    return dataclasses.replace(info, brokers=brokers)


async def test_typed_requests_get_the_apis_types(service: ControllerService) -> None:
    e = service.endpoints
    assert await e.next_broker_id(rq.GetNextBrokerId(C, B), ANYONE) == 1
    await _group_of_two(service)
    alter = rq.AlterSyncStateSet(C, B, 1, 1, frozenset({1, 2}), 1, request_id="grow")
    grown = await e.alter_sync_state_set(alter, ANYONE)
    assert grown == api.SyncStateSet(frozenset({1, 2}), 2)
    # A retry of the same id gets the first answer, typed the same, nothing applied again.
    assert await e.alter_sync_state_set(alter, ANYONE) == grown
    info = await e.get_replica_info(rq.GetReplicaInfo(C, B), ANYONE)
    assert info.sync_state_set == frozenset({1, 2}) and info.sync_state_set_epoch == 2
    # Two reads on the real clock: each heartbeat's age may have grown by a millisecond.
    assert tuple(map(_ageless, await e.groups(rq.ListGroups(), ANYONE))) == (_ageless(info),)
    watched = await e.watch(rq.Watch(C, B, 0, 0, 1000), ANYONE)
    assert watched.master_epoch == 1
    report = await e.report_inactive(
        rq.ReportInactive(C, B, 2, "gone", process_gone=True, incarnation="old"), ANYONE
    )
    assert isinstance(report, api.InactiveReportAnswer)


async def test_refusals_are_controller_errors_with_codes(service: ControllerService) -> None:
    e = service.endpoints
    with pytest.raises(ControllerError) as refused:
        await e.apply_broker_id(rq.ApplyBrokerId(C, B, 2, "x", "127.0.0.2:10911"), ANYONE)
    assert refused.value.code is ErrorCode.BROKER_ID_INVALID
    assert refused.value.details == {"nextBrokerId": 1}
    with pytest.raises(ControllerError) as missing:
        await e.get_replica_info(rq.GetReplicaInfo(C, "nope"), ANYONE)
    assert missing.value.code is ErrorCode.BROKER_SET_NOT_FOUND
    await _group_of_two(service)
    with pytest.raises(ControllerError) as still:
        await e.elect_master(rq.ElectMaster(C, B, ElectionTrigger.BROKER, 2), ANYONE)
    assert still.value.code is ErrorCode.MASTER_STILL_EXIST
    assert isinstance(still.value.details["replicaInfo"], api.ReplicaInfo)
    with pytest.raises(ControllerError) as alive:
        await e.clean_broker_data(rq.CleanBrokerData(C, B, frozenset({2})), ANYONE)
    assert alive.value.code is ErrorCode.BROKER_STILL_ALIVE
    assert await e.clean_broker_data(rq.CleanBrokerData(C, B, frozenset({2}), True), ANYONE) == (2,)


async def test_the_caller_principal_decides_access(service: ControllerService) -> None:
    await _group_of_two(service)
    e = service.endpoints
    broker_a = rq.Caller(Principal(Role.BROKER, (C, B)), "127.0.0.1")
    client_a = rq.Caller(Principal(Role.CLIENT, (C, B)), "10.1.1.1")
    other = rq.Caller(Principal(Role.BROKER, (C, "broker-b")), "127.0.0.1")
    assert (await e.get_replica_info(rq.GetReplicaInfo(C, B), client_a)).broker_name == B
    await e.heartbeat(_heartbeat(1), broker_a)
    for caller, request in (
        (other, rq.GetReplicaInfo(C, B)),
        (client_a, rq.CleanBrokerData(C, B, None)),
        (broker_a, rq.ListGroups()),
        # Broker 2's heartbeat from broker 1's host: the address rules.
        (broker_a, _heartbeat(2)),
    ):
        with pytest.raises(ControllerError) as refused:
            if isinstance(request, rq.GetReplicaInfo):
                await e.get_replica_info(request, caller)
            elif isinstance(request, rq.CleanBrokerData):
                await e.clean_broker_data(request, caller)
            elif isinstance(request, rq.ListGroups):
                await e.groups(request, caller)
            else:
                await e.heartbeat(request, caller)
        assert refused.value.code is ErrorCode.FORBIDDEN, request
    # Role rules alone (the RocketMQ port, a follower): no address check.
    await e.heartbeat(_heartbeat(2), broker_a.roles_only())


def test_typed_outcomes_keep_the_dump_format() -> None:
    """recentRequests in a dump (the persisted state) reads and writes as it always did."""
    old_dump = {
        "brokerSets": [],
        "retiredEpochs": [],
        "recentRequests": [
            {"type": "ApplyBrokerId", "clusterName": C, "brokerName": B, "requestId": "a",
             "code": "SUCCESS", "message": "", "details": {"brokerId": 1, "nextBrokerId": 2}},
            {"type": "ApplyBrokerId", "clusterName": C, "brokerName": B, "requestId": "b",
             "code": "BROKER_ID_INVALID", "message": "no", "details": {"nextBrokerId": 2}},
            {"type": "RegisterBroker", "clusterName": C, "brokerName": B, "requestId": "c",
             "code": "SUCCESS", "message": "", "details": {}},
            {"type": "AlterSyncStateSet", "clusterName": C, "brokerName": B, "requestId": "d",
             "code": "SUCCESS", "message": "",
             "details": {"syncStateSet": [1, 2], "syncStateSetEpoch": 3}},
            {"type": "ElectMaster", "clusterName": C, "brokerName": B, "requestId": "e",
             "code": "SUCCESS", "message": "", "details": {"masterBrokerId": None,
             "masterEpoch": 4, "syncStateSet": [], "syncStateSetEpoch": 3}},
            {"type": "CleanBrokerData", "clusterName": C, "brokerName": B, "requestId": "f",
             "code": "SUCCESS", "message": "", "details": {"removed": [1, 2]}},
        ],
    }  # fmt: skip
    state = ControllerState.from_dict(old_dump)
    assert state.to_dict() == old_dump
    answers = [state.answer_of(("ApplyBrokerId", C, B, r)) for r in "ab"]
    assert answers == [
        ApplyResult(ErrorCode.SUCCESS, outcome=BrokerIdApplied(1, 2)),
        ApplyResult(ErrorCode.BROKER_ID_INVALID, "no", next_broker_id=2),
    ]
    assert state.answer_of(("RegisterBroker", C, B, "c")) == ApplyResult(
        ErrorCode.SUCCESS, outcome=BrokerRegistered()
    )
    alter = state.answer_of(("AlterSyncStateSet", C, B, "d"))
    assert alter is not None and alter.outcome == SyncStateSetAltered(frozenset({1, 2}), 3)
    elect = state.answer_of(("ElectMaster", C, B, "e"))
    assert elect is not None and elect.outcome == MasterElected(None, 4, frozenset(), 3)
    clean = state.answer_of(("CleanBrokerData", C, B, "f"))
    assert clean is not None and clean.outcome == BrokersCleaned((1, 2))


def test_refusal_of_maps_every_controller_error_through_the_one_table() -> None:
    for code in ErrorCode:
        if code is ErrorCode.SUCCESS:
            continue
        refused = refusal_of(ControllerError(code, f"because {code}"))
        assert refused is not None
        assert (refused.code, refused.remark) == (wire.RESPONSE_CODE_OF[code], f"because {code}")
    bad = refusal_of(BadRequest("field 'brokerName' is required"))
    assert bad is not None and bad.code == ResponseCode.CONTROLLER_INVALID_REQUEST
    assert refusal_of(ValueError("a bug")) is None


def test_the_service_imports_no_front_end() -> None:
    """The service knows no wire format: neither it nor anything it imports reaches aiohttp
    or a front end's module (the edges import the service, never the other way)."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(
        "brokergroup_controller", "brokergroup_remoting", include_external_packages=True
    )
    front_ends = {"app", "api_auth", "http_support", "request_parsing", "rocketmq_front", "cli"}
    for module in ("requests", "endpoints", "server", "state", "access", "election"):
        imported = graph.find_upstream_modules(f"brokergroup_controller.{module}")
        edges = sorted(
            m
            for m in imported
            if m.split(".")[0] == "aiohttp"
            or (m.startswith("brokergroup_controller.") and m.split(".")[1] in front_ends)
        )
        assert edges == [], (module, edges)


async def test_a_watch_that_outlived_leadership_refuses_to_answer(
    service: ControllerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: a long-poll watch begun while this node led, answered after it lost
    leadership, would carry this node's stale liveness (every broker dead: masterAlive
    false at the new epoch), which fenced a resumed master. It answers NOT_LEADER
    instead (the client asks the leader); while it leads, the same watch answers."""
    e = service.endpoints
    await _group_of_two(service)
    answered = await e.watch(rq.Watch(C, B, 0, 0, 1000), ANYONE)
    assert answered.master_epoch == 1 and answered.master_alive
    monkeypatch.setattr(service, "is_leader", lambda: False)
    with pytest.raises(ControllerError) as lost:
        await e.watch(rq.Watch(C, B, 0, 0, 1000), ANYONE)
    assert lost.value.code is ErrorCode.NOT_LEADER
