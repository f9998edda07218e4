"""The name server's pure route builder and registration table (DESIGN.md §12).

Checks, with hypothesis over random registrations and controller states, that a managed
group's route names exactly the controller's master as brokerId 0 (MixAll.MASTER_ID) and
every other member by its persistent id, whatever ids the brokers claimed; that a route
never lists an address twice or an id twice; that expired registrations never appear; and
with examples, the RocketMQ shapes of TopicRouteData, ClusterInfo, the topic list and the
RegisterBrokerResult, and the registration table's merge, expiry and bounds. Master-only
routes (`client_broker_addrs`, engine rocketmq): a group with a stable master address is
given to clients by that address alone and left out of topic routes while it has no master,
cluster info keeping every member; groups without a stable address keep RocketMQ's routes.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_controller.master_address import MasterAddressPolicy, MasterOnlyRoutes
from brokergroup_controller.namesrv.registry import Registry, RegistryFull
from brokergroup_controller.namesrv.routes import (
    MASTER_ID,
    BrokerRegistration,
    ManagedGroup,
    TopicConfig,
    client_broker_addrs,
    cluster_info,
    group_routes,
    persistent_id,
    register_answer,
    topic_list,
    topic_route,
)

KEY = ("DefaultCluster", "broker-a")
TOPIC = TopicConfig("orders", 4, 4)


def reg(
    addr: str,
    broker_id: int,
    *,
    at: int = 0,
    name: str = "broker-a",
    topics: dict[str, TopicConfig] | None = None,
) -> BrokerRegistration:
    return BrokerRegistration(
        cluster_name="DefaultCluster",
        broker_name=name,
        broker_addr=addr,
        broker_id=broker_id,
        ha_server_addr=addr.replace(":10911", ":10912"),
        topics={"orders": TOPIC} if topics is None else topics,
        last_update_ms=at,
    )


def managed(
    master: int | None, addresses: dict[int, str], epoch: int = 3
) -> dict[tuple[str, str], ManagedGroup]:
    return {KEY: ManagedGroup(KEY[0], KEY[1], master, epoch, addresses)}


ADDRS = {1: "127.0.0.10:10911", 2: "127.0.0.11:10911", 3: "127.0.0.12:10911"}


def test_the_controllers_master_is_id_0_and_the_others_keep_their_persistent_ids() -> None:
    # Brokers registered while 1 was master (1 claimed 0); the controller then elected 2.
    regs = [reg(ADDRS[1], 0), reg(ADDRS[2], 2), reg(ADDRS[3], 3)]
    before = group_routes(regs, managed(1, ADDRS), now_ms=0)
    assert before[0].broker_addrs == {0: ADDRS[1], 2: ADDRS[2], 3: ADDRS[3]}
    after = group_routes(regs, managed(2, ADDRS, epoch=4), now_ms=0)
    assert after[0].broker_addrs == {0: ADDRS[2], 1: ADDRS[1], 3: ADDRS[3]}
    assert after[0].master_epoch == 4


def test_no_master_in_the_controller_means_no_id_0() -> None:
    regs = [reg(ADDRS[1], 0), reg(ADDRS[2], 2)]
    assert group_routes(regs, managed(None, ADDRS), now_ms=0)[0].broker_addrs == {
        1: ADDRS[1],
        2: ADDRS[2],
    }


def test_a_stranger_claiming_master_in_a_managed_group_is_left_out() -> None:
    regs = [reg("127.0.0.99:10911", 0), reg(ADDRS[2], 2)]
    assert group_routes(regs, managed(2, ADDRS), now_ms=0)[0].broker_addrs == {0: ADDRS[2]}


def test_unmanaged_groups_route_by_the_claimed_ids_latest_wins() -> None:
    regs = [reg("127.0.0.1:1", 0, at=5), reg("127.0.0.1:2", 0, at=9), reg("127.0.0.1:3", 1, at=1)]
    assert group_routes(regs, {}, now_ms=10)[0].broker_addrs == {0: "127.0.0.1:2", 1: "127.0.0.1:3"}


def test_expired_registrations_are_not_routed() -> None:
    regs = [reg(ADDRS[1], 0, at=0), reg(ADDRS[2], 2, at=100_000)]
    assert group_routes(regs, managed(1, ADDRS), now_ms=120_000)[0].broker_addrs == {
        0: ADDRS[1],
        2: ADDRS[2],
    }
    assert group_routes(regs, managed(1, ADDRS), now_ms=120_001)[0].broker_addrs == {2: ADDRS[2]}
    assert group_routes(regs, managed(1, ADDRS), now_ms=220_001) == []


def test_topic_route_cluster_info_and_topic_list_have_rocketmq_shapes() -> None:
    regs = [
        reg(ADDRS[1], 0, topics={"orders": TOPIC, "TBW102": TopicConfig("TBW102", 8, 8, 7)}),
        reg(ADDRS[2], 2, topics={"orders": TOPIC, "slave-only": TopicConfig("slave-only", 1, 1)}),
        reg("127.0.0.50:10911", 0, name="broker-b", topics={"orders": TopicConfig("orders", 2, 2)}),
    ]
    routes = group_routes(regs, managed(1, ADDRS), now_ms=0)
    assert topic_route("orders", routes) == {
        "brokerDatas": [
            {
                "brokerAddrs": {"0": ADDRS[1], "2": ADDRS[2]},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
                "enableActingMaster": False,
            },
            {
                "brokerAddrs": {"0": "127.0.0.50:10911"},
                "brokerName": "broker-b",
                "cluster": "DefaultCluster",
                "enableActingMaster": False,
            },
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "perm": 6,
                "readQueueNums": 4,
                "topicSysFlag": 0,
                "writeQueueNums": 4,
            },
            {
                "brokerName": "broker-b",
                "perm": 6,
                "readQueueNums": 2,
                "topicSysFlag": 0,
                "writeQueueNums": 2,
            },
        ],
    }
    # Queue data come from the master's registration: a topic only a slave reported is not routed.
    assert topic_route("slave-only", routes) is None
    assert topic_route("missing", routes) is None
    info = cluster_info(routes)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    table = info["brokerAddrTable"]
    assert isinstance(table, dict) and set(table) == {"broker-a", "broker-b"}
    assert topic_list(routes) == ["TBW102", "orders"]
    assert topic_list(routes, "OtherCluster") == []


def test_register_answer_names_the_master_to_slaves_only() -> None:
    regs = [reg(ADDRS[1], 0), reg(ADDRS[2], 2)]
    routes = group_routes(regs, managed(1, ADDRS), now_ms=0)
    assert register_answer(regs[1], routes, regs) == (ADDRS[1], "127.0.0.10:10912")
    assert register_answer(regs[0], routes, regs) == (None, None)


# --- the master address policy (issue 19 item 5) ------------------------------------------

STABLE = "127.0.1.1:20911"


def test_a_stable_master_address_is_id_0_and_stays_across_an_election() -> None:
    regs = [reg(ADDRS[1], 0), reg(ADDRS[2], 2), reg(ADDRS[3], 3)]
    fixed = MasterAddressPolicy(fixed={KEY: STABLE})
    before = group_routes(regs, managed(1, ADDRS), 0, fixed)[0]
    after = group_routes(regs, managed(2, ADDRS, epoch=4), 0, fixed)[0]
    assert before.broker_addrs == {0: STABLE, 2: ADDRS[2], 3: ADDRS[3]}
    assert after.broker_addrs == {0: STABLE, 1: ADDRS[1], 3: ADDRS[3]}
    assert (before.master_registered_addr, after.master_registered_addr) == (ADDRS[1], ADDRS[2])
    templated = MasterAddressPolicy(template="{broker}-master.{cluster}:{port}")
    assert group_routes(regs, managed(2, ADDRS), 0, templated)[0].broker_addrs == {
        0: "broker-a-master.DefaultCluster:10911",
        1: ADDRS[1],
        3: ADDRS[3],
    }


def test_no_master_or_an_unregistered_master_gets_no_stable_address() -> None:
    fixed = MasterAddressPolicy(fixed={KEY: STABLE})
    regs = [reg(ADDRS[2], 2), reg(ADDRS[3], 3)]
    assert group_routes(regs, managed(None, ADDRS), 0, fixed)[0].broker_addrs == {
        2: ADDRS[2],
        3: ADDRS[3],
    }
    # The controller's master (1) is not registered here: no id 0, not the stable address.
    assert group_routes(regs, managed(1, ADDRS), 0, fixed)[0].broker_addrs == {
        2: ADDRS[2],
        3: ADDRS[3],
    }


def test_unmanaged_groups_keep_the_addresses_they_registered() -> None:
    policy = MasterAddressPolicy(template="stable:{port}", fixed={KEY: STABLE})
    regs = [reg("127.0.0.1:1", 0), reg("127.0.0.1:2", 1)]
    assert group_routes(regs, {}, 0, policy)[0].broker_addrs == {0: "127.0.0.1:1", 1: "127.0.0.1:2"}


def test_routes_cluster_info_and_register_answers_agree_on_the_stable_master() -> None:
    regs = [reg(ADDRS[1], 1), reg(ADDRS[2], 0), reg(ADDRS[3], 3)]
    routes = group_routes(regs, managed(2, ADDRS), 0, MasterAddressPolicy(fixed={KEY: STABLE}))
    route = topic_route("orders", routes)
    assert route is not None
    assert route["brokerDatas"] == [
        {
            "brokerAddrs": {"0": STABLE, "1": ADDRS[1], "3": ADDRS[3]},
            "brokerName": "broker-a",
            "cluster": "DefaultCluster",
            "enableActingMaster": False,
        }
    ]
    table = cluster_info(routes)["brokerAddrTable"]
    assert isinstance(table, dict) and table["broker-a"] == route["brokerDatas"][0]
    # A slave replicates from the master itself, never through the stable address.
    assert register_answer(regs[0], routes, regs) == (ADDRS[2], "127.0.0.11:10912")
    assert register_answer(regs[1], routes, regs) == (None, None)


@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3, unique=True),
    st.one_of(st.none(), st.integers(1, 3)),
    st.sampled_from(["fixed", "template"]),
)
def test_the_policy_changes_only_the_address_of_id_0(
    registered: list[int], master: int | None, kind: str
) -> None:
    regs = [reg(ADDRS[i], 0 if i == 1 else i) for i in registered]
    policy = (
        MasterAddressPolicy(fixed={KEY: STABLE})
        if kind == "fixed"
        else MasterAddressPolicy(template="{broker}.{cluster}:{port}")
    )
    plain = group_routes(regs, managed(master, ADDRS), 0)
    stable = group_routes(regs, managed(master, ADDRS), 0, policy)
    assert len(plain) == len(stable) == 1
    expected = dict(plain[0].broker_addrs)
    if MASTER_ID in expected:
        assert stable[0].master_registered_addr == expected[MASTER_ID] == ADDRS[master or 0]
        expected[MASTER_ID] = STABLE if kind == "fixed" else "broker-a.DefaultCluster:10911"
    assert stable[0].broker_addrs == expected


# --- master-only routes (issue 34: a consumer counted twice after a failover) -------------

MASTER_ONLY = MasterAddressPolicy(fixed={KEY: STABLE}, master_only=MasterOnlyRoutes.ALL)


def _broker_datas(route: dict[str, object]) -> list[dict[str, object]]:
    datas = route["brokerDatas"]
    assert isinstance(datas, list)
    return datas


def test_the_client_route_decision_for_each_kind_of_group() -> None:
    members = {0: ADDRS[1], 2: ADDRS[2], 3: ADDRS[3]}
    slaves = {2: ADDRS[2], 3: ADDRS[3]}
    # No stable address: RocketMQ's route, master_only or not.
    assert client_broker_addrs(members, None, master_only=True) == members
    assert client_broker_addrs(slaves, None, master_only=True) == slaves
    # A stable address: id 0 named by it; slaves only without master_only.
    assert client_broker_addrs(members, STABLE, master_only=False) == {**members, 0: STABLE}
    assert client_broker_addrs(members, STABLE, master_only=True) == {0: STABLE}
    # No master registered: nothing for clients under master_only (they keep the stable
    # address from their last route), the slaves otherwise.
    assert client_broker_addrs(slaves, STABLE, master_only=False) == slaves
    assert client_broker_addrs(slaves, STABLE, master_only=True) == {}
    assert client_broker_addrs({}, STABLE, master_only=True) == {}


def test_master_only_topic_routes_name_the_stable_address_alone_across_an_election() -> None:
    regs = [reg(ADDRS[1], 0), reg(ADDRS[2], 2), reg(ADDRS[3], 3)]
    for master, slaves in (
        (1, {"2": ADDRS[2], "3": ADDRS[3]}),
        (2, {"1": ADDRS[1], "3": ADDRS[3]}),
    ):
        routes = group_routes(regs, managed(master, ADDRS), 0, MASTER_ONLY)
        route = topic_route("orders", routes)
        assert route is not None
        assert route["brokerDatas"] == [
            {
                "brokerAddrs": {"0": STABLE},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
                "enableActingMaster": False,
            }
        ]
        assert route["queueDatas"] == [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
             "writeQueueNums": 4}
        ]  # fmt: skip
        # mqadmin clusterList still sees every member, and slaves replicate from the master.
        table = cluster_info(routes)["brokerAddrTable"]
        assert isinstance(table, dict)
        assert table["broker-a"]["brokerAddrs"] == {"0": STABLE, **slaves}
        slave = next(r for r in regs if r.broker_addr != ADDRS[master])
        assert register_answer(slave, routes, regs)[0] == ADDRS[master]


def test_master_only_leaves_a_masterless_group_out_of_topic_routes_only() -> None:
    regs = [reg(ADDRS[2], 2), reg(ADDRS[3], 3)]
    routes = group_routes(regs, managed(None, ADDRS), 0, MASTER_ONLY)
    assert topic_route("orders", routes) is None  # TOPIC_NOT_EXIST: the client keeps its own
    table = cluster_info(routes)["brokerAddrTable"]
    assert isinstance(table, dict)
    assert table["broker-a"]["brokerAddrs"] == {"2": ADDRS[2], "3": ADDRS[3]}
    assert topic_list(routes) == ["orders"]
    # Another group with a master still serves the topic.
    other = [*regs, reg("127.0.0.20:10911", 0, name="broker-b")]
    route = topic_route("orders", group_routes(other, managed(None, ADDRS), 0, MASTER_ONLY))
    assert route is not None
    assert [d["brokerName"] for d in _broker_datas(route)] == ["broker-b"]


def test_master_only_keeps_rocketmq_routes_for_groups_without_a_stable_address() -> None:
    regs = [reg(ADDRS[1], 0), reg(ADDRS[2], 2), reg("127.0.0.1:1", 0, name="broker-b"),
            reg("127.0.0.1:2", 1, name="broker-b")]  # fmt: skip
    # broker-b is unmanaged; broker-a managed but without a fixed address under this policy.
    policy = MasterAddressPolicy(
        fixed={("DefaultCluster", "broker-c"): STABLE}, master_only=MasterOnlyRoutes.ALL
    )
    route = topic_route("orders", group_routes(regs, managed(1, ADDRS), 0, policy))
    assert route is not None
    assert [d["brokerAddrs"] for d in _broker_datas(route)] == [
        {"0": ADDRS[1], "2": ADDRS[2]},
        {"0": "127.0.0.1:1", "1": "127.0.0.1:2"},
    ]


@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3, unique=True),
    st.one_of(st.none(), st.integers(1, 3)),
)
def test_master_only_changes_topic_routes_and_nothing_else(
    registered: list[int], master: int | None
) -> None:
    regs = [reg(ADDRS[i], 0 if i == 1 else i) for i in registered]
    full = group_routes(regs, managed(master, ADDRS), 0, MasterAddressPolicy(fixed={KEY: STABLE}))
    only = group_routes(regs, managed(master, ADDRS), 0, MASTER_ONLY)
    assert cluster_info(only) == cluster_info(full)
    assert [r.broker_addrs for r in only] == [r.broker_addrs for r in full]
    route = topic_route("orders", only)
    if MASTER_ID in full[0].broker_addrs:
        assert route is not None
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": STABLE}  # type: ignore[index]
    else:
        assert route is None


# --- properties ---------------------------------------------------------------------------

HOSTS = [f"127.0.0.{i}:10911" for i in range(10, 18)]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[BrokerRegistration], ManagedGroup, int]:
    """Registrations on distinct addresses, claiming any id (0, members, a non-member 7),
    some expired, and a controller state with a master or none."""
    ids = draw(st.lists(st.integers(1, 5), min_size=1, max_size=5, unique=True))
    addresses = {i: draw(st.sampled_from(HOSTS)) for i in ids}
    master = draw(st.one_of(st.none(), st.sampled_from(ids)))
    hosts = draw(st.lists(st.sampled_from(HOSTS), max_size=6, unique=True))
    regs = [
        reg(host, draw(st.sampled_from([0, *ids, 7])), at=draw(st.integers(0, 300_000)))
        for host in hosts
    ]
    return regs, ManagedGroup(KEY[0], KEY[1], master, 1, addresses), draw(st.integers(0, 400_000))


def _check_route(regs: list[BrokerRegistration], group: ManagedGroup, now: int) -> None:
    routes = group_routes(regs, {KEY: group}, now)
    live = [r for r in regs if r.alive(now)]
    addrs = routes[0].broker_addrs if routes else {}
    assert len(set(addrs.values())) == len(addrs)
    by_addr = {r.broker_addr: r for r in live}
    assert set(addrs.values()) <= set(by_addr)
    masters = {
        r.broker_addr
        for r in live
        if group.master_broker_id is not None and persistent_id(r, group) == group.master_broker_id
    }
    # Id 0 is the controller's master exactly when one of its registrations is live.
    assert (addrs.get(MASTER_ID) in masters) if masters else (MASTER_ID not in addrs)
    for route_id, addr in addrs.items():
        if route_id != MASTER_ID:
            assert route_id != group.master_broker_id
            assert persistent_id(by_addr[addr], group) == route_id


@given(scenarios())
def test_id_0_is_the_controllers_master_and_the_others_their_persistent_ids(
    scenario: tuple[list[BrokerRegistration], ManagedGroup, int],
) -> None:
    _check_route(*scenario)


@given(scenarios(), st.integers(1, 5))
def test_an_election_moves_id_0_without_any_new_registration(
    scenario: tuple[list[BrokerRegistration], ManagedGroup, int], new_master: int
) -> None:
    regs, group, now = scenario
    if new_master not in group.addresses:
        return
    elected = ManagedGroup(KEY[0], KEY[1], new_master, group.master_epoch + 1, group.addresses)
    _check_route(regs, elected, now)
    routes = group_routes(regs, {KEY: elected}, now)
    own = [r for r in regs if r.alive(now) and r.broker_id == new_master]
    if own:
        assert routes[0].broker_addrs[MASTER_ID] in {r.broker_addr for r in own} | {
            group.addresses[new_master]
        }


# --- registry -----------------------------------------------------------------------------


def test_registrations_merge_topics_refuse_a_first_single_topic_and_expire() -> None:
    table = Registry(max_registrations=2)
    single = reg(ADDRS[1], 0, topics={"orders": TOPIC})
    assert table.register(single, owner=1, now_ms=0) is None  # the full registration comes first
    full = reg(ADDRS[1], 0, topics={"TBW102": TopicConfig("TBW102", 8, 8), "orders": TOPIC})
    assert table.register(full, owner=1, now_ms=0) is not None
    added = reg(ADDRS[1], 0, topics={"new": TopicConfig("new", 1, 1)})
    stored = table.register(added, owner=1, now_ms=0)
    assert stored is not None and set(stored.topics) == {"TBW102", "orders", "new"}
    assert table.delete_topic("orders", None) == 1
    assert set(table.get("DefaultCluster", ADDRS[1]).topics) == {"TBW102", "new"}  # type: ignore[union-attr]
    table.register(reg(ADDRS[2], 2, topics={}), owner=2, now_ms=0)
    with pytest.raises(RegistryFull):
        table.register(reg(ADDRS[3], 3, topics={}), owner=3, now_ms=0)
    assert [r.broker_addr for r in table.drop_owner(2)] == [ADDRS[2]]
    assert len(table) == 1
    assert table.touch("DefaultCluster", ADDRS[1], now_ms=100_000)
    assert table.expire(now_ms=220_000) == []
    assert [r.broker_addr for r in table.expire(now_ms=220_001)] == [ADDRS[1]]
    assert not table.unregister("DefaultCluster", ADDRS[1], "broker-a")


def test_a_groups_topics_outlive_the_registration_that_announced_them() -> None:
    # The master announces a new topic and is killed before its slaves register again: the
    # topic stays routed, from the group's remaining member, until the group's last member
    # goes (RouteInfoManager keeps topic queue data by brokerName).
    table = Registry()
    base = {"TBW102": TopicConfig("TBW102", 8, 8), "SELF_TEST_TOPIC": TopicConfig("S", 1, 1)}
    table.register(reg(ADDRS[1], 0, topics=base), owner=1, now_ms=0)
    table.register(reg(ADDRS[2], 2, topics=base), owner=2, now_ms=0)
    table.register(reg(ADDRS[1], 0, topics={"orders": TOPIC}), owner=1, now_ms=1)
    table.drop_owner(1)  # the master's connection closed with its process
    after = group_routes(table, managed(2, ADDRS), 2, group_topics=table.group_topics())
    route = topic_route("orders", after)
    assert route is not None and route["queueDatas"] == [
        {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
         "writeQueueNums": 4}
    ]  # fmt: skip
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": ADDRS[2]}  # type: ignore[index]
    table.delete_topic("orders", None)
    assert (
        topic_route(
            "orders", group_routes(table, managed(2, ADDRS), 2, group_topics=table.group_topics())
        )
        is None
    )
    table.register(reg(ADDRS[2], 2, topics={**base, "orders": TOPIC}), owner=2, now_ms=3)
    table.drop_owner(2)  # the group's last member
    assert table.group_topics() == {}
