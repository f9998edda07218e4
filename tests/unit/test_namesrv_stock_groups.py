"""Master-only topic routes decided per group (issue 34, docs/rocketmq-compatibility.md "A
consumer counted twice after a failover"): one set of controllers serves engine rocketmq
groups by their stable master address alone and built-in groups with their slaves.

The fact that tells them apart is which front end a group's brokers applied for their ids
and registered through: a stock RocketMQ 5 broker speaks RocketMQ's controller protocol on
the remoting port (CONTROLLER_APPLY_BROKER_ID, CONTROLLER_REGISTER_BROKER), brokergroup's
built-in broker the HTTP API. The controller records it in its replicated state
(`BrokerRecord.protocol`), and the name server's pure policy (`routes.master_only_for`)
reads it under `--namesrv-master-only-routes stock`, the default.

- the policy alone: each mode over a built-in and a stock group of one controller;
- end to end on one node: a real single-node Raft behind the real `ControllerService` and
  `ControllerRemoting`; group `stock` joins over loopback with the headers a stock 5.3.1
  broker sends, group `builtin` through the HTTP API's parser; the routes the name server
  builds from that node's state name `stock` by its master Service alone and `builtin`
  with its slave (on the code before the record, `stock` was routed with its slave too);
  the record survives a snapshot's encoding and a restart of the node (journal replay);
  a stock broker whose id was recorded without the protocol records it at its next
  registration (an upgraded controller);
- the state: dumps and events of built-in brokers keep their old format, old dumps read as
  built-in, and an event naming an unknown protocol is refused with the state unchanged.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from brokergroup_controller.election import ElectionTrigger
from brokergroup_controller.endpoints import Endpoints
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.master_address import (
    MasterAddressPolicy,
    MasterOnlyRoutes,
    load_policy,
)
from brokergroup_controller.namesrv.routes import (
    BrokerRegistration,
    ManagedGroup,
    TopicConfig,
    group_routes,
    master_only_for,
    topic_route,
)
from brokergroup_controller.namesrv.server import managed_groups
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.raft_storage import Entry, decode_snapshot, encode_snapshot
from brokergroup_controller.request_parsing import parse_apply, parse_heartbeat, parse_register
from brokergroup_controller.requests import Caller
from brokergroup_controller.requests import ElectMaster as ElectMasterRequest
from brokergroup_controller.state import (
    ApplyBrokerId,
    ControllerState,
    RegisterBroker,
    event_from_dict,
)
from brokergroup_remoting import RequestCode, ResponseCode, request
from tests.unit.test_controller_remoting_front import Node, _config, _start

C = "DefaultCluster"
STOCK, BUILTIN = "stock", "builtin"
TEMPLATE = "{broker}.{cluster}.svc:{port}"
TOPIC = TopicConfig("orders", 4, 4)
ANYONE = Caller(None)


def _addr(group: str, broker_id: int) -> str:
    return f"127.0.{1 if group == STOCK else 2}.{broker_id}:10911"


def _stable(group: str) -> str:
    return f"{group}.{C}.svc:10911"


def _registrations(groups: dict[str, int]) -> list[BrokerRegistration]:
    """What each group's brokers send the name server (REGISTER_BROKER): the master claims
    id 0, the others their persistent ids; `groups`: name → its master's id, brokers 1, 2."""
    return [
        BrokerRegistration(
            C, group, _addr(group, i), 0 if i == master else i, topics={"orders": TOPIC}
        )
        for group, master in groups.items()
        for i in (1, 2)
    ]


def _client_addrs(state_groups: dict[tuple[str, str], ManagedGroup], policy: MasterAddressPolicy,
                  masters: dict[str, int]) -> dict[str, dict[str, str]]:  # fmt: skip
    """Topic route of `orders` as a client gets it: group → brokerAddrs."""
    route = topic_route("orders", group_routes(_registrations(masters), state_groups, 0, policy))
    assert route is not None
    datas = route["brokerDatas"]
    assert isinstance(datas, list)
    return {str(d["brokerName"]): dict(d["brokerAddrs"]) for d in datas}


# --- the policy ---------------------------------------------------------------------------


def _group(name: str, master: int, stock: bool) -> ManagedGroup:
    return ManagedGroup(C, name, master, 1, {i: _addr(name, i) for i in (1, 2)}, stock)


def test_each_mode_over_a_built_in_and_a_stock_group_of_one_controller() -> None:
    groups = {(C, STOCK): _group(STOCK, 1, True), (C, BUILTIN): _group(BUILTIN, 2, False)}
    masters = {BUILTIN: 2, STOCK: 1}
    with_slaves = {
        BUILTIN: {"0": _stable(BUILTIN), "1": _addr(BUILTIN, 1)},
        STOCK: {"0": _stable(STOCK), "2": _addr(STOCK, 2)},
    }
    expected = {
        MasterOnlyRoutes.STOCK: {**with_slaves, STOCK: {"0": _stable(STOCK)}},
        MasterOnlyRoutes.ALL: {BUILTIN: {"0": _stable(BUILTIN)}, STOCK: {"0": _stable(STOCK)}},
        MasterOnlyRoutes.NONE: with_slaves,
    }
    for mode, routes in expected.items():
        policy = load_policy(TEMPLATE, [], mode.value)
        assert _client_addrs(groups, policy, masters) == routes, mode
    # Without a stable address no mode changes RocketMQ's route (every member, own address).
    plain = load_policy(None, [], "stock")
    assert _client_addrs(groups, plain, masters)[STOCK] == {
        "0": _addr(STOCK, 1),
        "2": _addr(STOCK, 2),
    }
    assert [master_only_for(m, None) for m in MasterOnlyRoutes] == [False] * 3


# --- end to end on one controller node -----------------------------------------------------


async def _call(node: Node, code: int, fields: dict[str, str]) -> dict[str, str]:
    answer = await node.call(code, fields)
    assert answer.code == ResponseCode.SUCCESS, answer
    return answer.fields()


def _register_fields(group: str, broker_id: int) -> dict[str, str]:
    return {
        "clusterName": C,
        "brokerName": group,
        "brokerId": str(broker_id),
        "brokerAddress": _addr(group, broker_id),
    }


async def _join_stock(node: Node, broker_id: int) -> None:
    """ReplicasManager.register() of a stock broker, then its first heartbeat (oneway)."""
    key = {"clusterName": C, "brokerName": STOCK}
    got = await _call(node, RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, key)
    assert got["nextBrokerId"] == str(broker_id)
    code = f"{_addr(STOCK, broker_id)};1700000000000"
    apply = {**key, "appliedBrokerId": str(broker_id), "registerCheckCode": code}
    await _call(node, RequestCode.CONTROLLER_APPLY_BROKER_ID, apply)
    await _call(node, RequestCode.CONTROLLER_REGISTER_BROKER, _register_fields(STOCK, broker_id))
    heartbeat = {**key, "brokerAddr": _addr(STOCK, broker_id), "brokerId": str(broker_id),
                 "epoch": "0", "maxOffset": "0", "confirmOffset": "-1",
                 "heartbeatTimeoutMills": "60000", "electionPriority": "2147483647"}  # fmt: skip
    await node.client.invoke_oneway(request(RequestCode.BROKER_HEARTBEAT, 0, heartbeat))
    await node.call(RequestCode.CONTROLLER_GET_METADATA_INFO)  # the heartbeat was handled


async def _join_builtin(e: Endpoints, broker_id: int, group: str = BUILTIN) -> None:
    """The built-in broker's registration (core/registration.py) as the HTTP API parses it."""
    body = {"clusterName": C, "brokerName": group, "brokerId": broker_id}
    address = _addr(group, broker_id)
    await e.apply_broker_id(
        parse_apply({**body, "registerCode": f"code-{broker_id}", "address": address}), ANYONE
    )
    await e.register_broker(parse_register({**body, "address": address}), ANYONE)
    heartbeat = {**body, "address": address, "epoch": 0, "maxOffset": 0, "confirmOffset": 0}
    await e.heartbeat(parse_heartbeat(heartbeat), ANYONE)


def _elect(group: str, broker_id: int) -> ElectMasterRequest:
    return ElectMasterRequest(C, group, ElectionTrigger.BROKER, broker_id)


async def _restarted_groups(tmp_path: Path, host: str) -> dict[tuple[str, str], ManagedGroup]:
    """The node's managed groups after a restart over its data directory."""
    raft = ControllerRaftNode(_config(tmp_path, host).raft_settings())
    raft.start()
    try:
        deadline = time.monotonic() + 10
        while not raft.status().caught_up:
            assert time.monotonic() < deadline, "the restarted node never caught up"
            await asyncio.sleep(0.01)
        return raft.read(managed_groups)
    finally:
        await asyncio.to_thread(raft.stop)


async def test_a_stock_group_is_routed_by_its_master_alone_a_built_in_one_with_slaves(
    tmp_path: Path,
) -> None:
    policy = load_policy(TEMPLATE, [])  # the chart's template; the default mode (stock)
    expected = {
        STOCK: {"0": _stable(STOCK)},
        BUILTIN: {"0": _stable(BUILTIN), "2": _addr(BUILTIN, 2)},
    }
    async for node in _start(tmp_path):
        host = node.host
        for broker_id in (1, 2):
            await _join_stock(node, broker_id)
            await _join_builtin(node.service.endpoints, broker_id)
        elect = {"clusterName": C, "brokerName": STOCK, "brokerId": "1",
                 "designateElect": "false", "invokeTime": "1700000000000"}  # fmt: skip
        elected = await _call(node, RequestCode.CONTROLLER_ELECT_MASTER, elect)
        assert elected["masterBrokerId"] == "1"
        await node.service.endpoints.elect_master(_elect(BUILTIN, 1), ANYONE)
        masters = {STOCK: 1, BUILTIN: 1}
        live = node.raft.read(managed_groups)
        assert _client_addrs(live, policy, masters) == expected
        # The record in the dump (built-in records keep the format they had) and through a
        # snapshot's encoding.
        dump = node.state()
        brokers = {s["brokerName"]: s["brokers"] for s in dump["brokerSets"]}
        assert brokers[STOCK]["1"]["protocol"] == "rocketmq"
        assert "protocol" not in brokers[BUILTIN]["1"]
        entry: Entry = (b"", 7, 2)
        restored = ControllerState.from_dict(
            decode_snapshot(encode_snapshot(entry, entry, dump))[2]
        )
        assert managed_groups(restored) == live
        node.raft.force_compaction()
    assert await _restarted_groups(tmp_path, host) == live


async def test_a_stock_broker_recorded_without_the_protocol_records_it_when_it_registers(
    tmp_path: Path,
) -> None:
    """A controller upgraded under a running engine rocketmq group: the ids were applied
    before the record existed (as the HTTP API's default, built-in). The broker's next
    CONTROLLER_REGISTER_BROKER, same address, commits the protocol, and the group's topic
    routes turn master-only; the built-in group's registrations never commit it."""
    async for node in _start(tmp_path):
        e = node.service.endpoints
        for broker_id in (1, 2):
            await _join_builtin(e, broker_id, STOCK)
        await e.elect_master(_elect(STOCK, 1), ANYONE)
        policy = load_policy(TEMPLATE, [])
        before = _client_addrs(node.raft.read(managed_groups), policy, {STOCK: 1})
        assert before == {STOCK: {"0": _stable(STOCK), "2": _addr(STOCK, 2)}}
        await _call(node, RequestCode.CONTROLLER_REGISTER_BROKER, _register_fields(STOCK, 2))
        after = _client_addrs(node.raft.read(managed_groups), policy, {STOCK: 1})
        assert after == {STOCK: {"0": _stable(STOCK)}}


# --- the state: formats, old dumps, refusals -----------------------------------------------


def _state() -> ControllerState:
    state = ControllerState()
    for group, protocol in ((STOCK, "rocketmq"), (BUILTIN, "brokergroup")):
        for i in (1, 2):
            applied = state.apply(ApplyBrokerId(C, group, i, f"c{i}", _addr(group, i), protocol))
            assert applied.ok, applied
    return state


def test_built_in_records_and_events_keep_their_format_old_dumps_read_as_built_in() -> None:
    state = _state()
    assert {k[1]: g.rocketmq_brokers for k, g in managed_groups(state).items()} == {
        STOCK: True,
        BUILTIN: False,
    }
    # An event of a built-in broker is the entry it always was; a stock broker's names it.
    builtin = ApplyBrokerId(C, BUILTIN, 1, "c1", _addr(BUILTIN, 1))
    assert builtin.to_dict() == {"type": "ApplyBrokerId", "cluster_name": C,
                                 "broker_name": BUILTIN, "broker_id": 1,
                                 "register_code": "c1", "address": _addr(BUILTIN, 1)}  # fmt: skip
    stock = RegisterBroker(C, STOCK, 1, _addr(STOCK, 1), "rocketmq")
    assert stock.to_dict()["protocol"] == "rocketmq"
    assert event_from_dict(stock.to_dict()) == stock
    assert event_from_dict(builtin.to_dict()) == builtin
    # A dump round trip keeps the record; a dump written before the field reads as built-in.
    dump = state.to_dict()
    assert ControllerState.from_dict(dump).to_dict() == dump
    for broker_set in dump["brokerSets"]:
        for record in broker_set["brokers"].values():
            record.pop("protocol", None)
    old = ControllerState.from_dict(dump)
    assert not any(g.rocketmq_brokers for g in managed_groups(old).values())
    # A built-in broker registering again clears a stock record (a group whose brokers were
    # replaced by built-in ones under the same name).
    assert state.apply(RegisterBroker(C, STOCK, 1, _addr(STOCK, 1))).ok
    assert state.apply(RegisterBroker(C, STOCK, 2, _addr(STOCK, 2))).ok
    assert not managed_groups(state)[(C, STOCK)].rocketmq_brokers


def test_an_event_naming_an_unknown_protocol_is_refused_and_changes_nothing() -> None:
    state = _state()
    before = state.to_dict()
    for event in (
        ApplyBrokerId(C, "new", 1, "c1", "127.0.9.1:10911", "kafka"),
        ApplyBrokerId(C, STOCK, 3, "c3", "127.0.9.3:10911", "kafka"),
        RegisterBroker(C, STOCK, 1, "127.0.9.9:10911", "kafka"),
    ):
        result = state.apply(event)
        assert (result.code, result.message) == (
            ErrorCode.BAD_REQUEST,
            f"broker {event.broker_name}:{event.broker_id}: "
            "unknown broker registration protocol 'kafka'",
        )
        assert state.to_dict() == before
