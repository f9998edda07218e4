"""Routes of the embedded name server, pure (DESIGN.md §12; RocketMQ 5.3.1 RouteInfoManager).

Theory of operation
-------------------
Two sources meet here:
- `BrokerRegistration`: what a broker said in its last REGISTER_BROKER to *this* node (its
  remoting address, HA address, the id it claims and its topic configs). Brokers register
  with every name server, so every controller node holds its own table (not replicated), and
  a registration lives `timeout_ms` (RocketMQ's 120 s broker channel expiry) past its last
  refresh.
- `ManagedGroup`: a broker set of the controller's replicated state (master id, masterEpoch,
  the persistent BrokerIds and the addresses they registered with the controller).

For a group the controller manages, *the controller says who the master is*: a registration
is mapped to its persistent BrokerId (the id it claims when that is a persistent id of the
set, else the id whose controller address equals its remoting address), and the route names
the persistent id that is the controller's master as brokerId 0 (MixAll.MASTER_ID) and every
other one by its persistent id. So a committed election shows in the next route this node
builds, whatever the brokers last registered; a deposed master that still claims id 0 is
listed by its persistent id. A registration claiming id 0 that maps to no persistent id of a
managed set is left out: the controller knows no such member. Groups the controller does not
manage (plain stock RocketMQ brokers) are routed as RocketMQ does, by the ids they claim.

The route's brokerId 0 *address* of a managed group comes from the `MasterAddressPolicy`
(`master_address`): a stable address that follows the master (a Service, the local
forwarder) or, without a policy, the master's own. Everything a client or mqadmin reads
(topic routes, cluster info, system topics) takes it from `GroupRoute.broker_addrs`;
only the answer to a broker's own registration uses the master's registered address.

What a *client* is given differs from that in one case (`client_broker_addrs`): a group
whose master is served at a stable address and whose brokers are stock RocketMQ brokers is
named in topic routes by that address alone, as brokerId 0, and not at all while it has no
master (the client keeps the route it had, which names the stable address). A stock client
heartbeats every address its topic routes name and keeps those connections; had it held one
to a slave, the slave's election would leave the new master with two connections for one
client (that one and the one through the stable address), and a stock RocketMQ 5.3 broker
lists a client once per connection (`ConsumerGroupInfo.getAllClientId`), so the group's
rebalance gave the client half the queues until the direct connection idled out
(docs/rocketmq-compatibility.md "A consumer counted twice after a failover"). The cost: such
a group's clients never read from a slave (`slaveReadEnable` / suggested brokerId 1), which
engine rocketmq does not turn on. Cluster info (GET_BROKER_CLUSTER_INFO, mqadmin
clusterList) keeps every member. The built-in broker keeps its full routes: it lists a
client once however many connections it has, and its slaves serve reads.

Which groups (`master_only_for`, the policy's `master_only`, `--namesrv-master-only-routes`):
`stock` (the default) decides per group from the controller's replicated state: a group is
stock when one of its brokers applied for its id or registered through RocketMQ's controller
protocol (the remoting port, RequestCode 1013/1003), which only a stock RocketMQ 5 broker
speaks; brokergroup's built-in broker uses the HTTP API. So one set of controllers serves
built-in groups with their slaves in routes and engine rocketmq groups by their master alone,
with no per-group setting to keep in step. `all` and `none` override it for every group.

Two registrations under one route id (a broker back on a new address before its old entry
expired): the latest refresh wins. The queue data of a group comes from the registration
routed as id 0, else from the one with the smallest id (RocketMQ's "prime slave").

No I/O and no clocks: `now_ms` is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from brokergroup_controller.api import BrokerSetKey
from brokergroup_controller.master_address import (
    OWN_ADDRESS,
    MasterAddressPolicy,
    MasterOnlyRoutes,
)
from brokergroup_remoting.codes import BROKER_CHANNEL_EXPIRED_TIME_MS

#: MixAll.MASTER_ID.
MASTER_ID = 0
#: RouteInfoManager.DEFAULT_BROKER_CHANNEL_EXPIRED_TIME (the broker's config checks its
#: registration period against the same number).
DEFAULT_REGISTRATION_TIMEOUT_MS = BROKER_CHANNEL_EXPIRED_TIME_MS
#: PermName.PERM_READ | PermName.PERM_WRITE.
PERM_READ_WRITE = 6


@dataclass(frozen=True)
class TopicConfig:
    """One topic of a broker's TopicConfigSerializeWrapper (common/TopicConfig.java)."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE
    topic_sys_flag: int = 0
    order: bool = False


@dataclass(frozen=True)
class DataVersion:
    """RocketMQ's DataVersion: a broker's topic-config version."""

    state_version: int = 0
    timestamp: int = 0
    counter: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "counter": self.counter,
            "stateVersion": self.state_version,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True)
class BrokerRegistration:
    """A broker's last REGISTER_BROKER to this node."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    broker_id: int
    """The id the broker claims (0 = "I am the master")."""
    ha_server_addr: str = ""
    zone_name: str | None = None
    enable_acting_master: bool = False
    topics: Mapping[str, TopicConfig] = field(default_factory=dict)
    data_version: DataVersion = DataVersion()
    last_update_ms: int = 0
    timeout_ms: int = DEFAULT_REGISTRATION_TIMEOUT_MS

    @property
    def group(self) -> BrokerSetKey:
        return (self.cluster_name, self.broker_name)

    def alive(self, now_ms: int) -> bool:
        # RouteInfoManager.scanNotActiveBroker: expired when last + timeout < now.
        return self.last_update_ms + self.timeout_ms >= now_ms


@dataclass(frozen=True)
class ManagedGroup:
    """A broker set of the controller's replicated state, as the route needs it."""

    cluster_name: str
    broker_name: str
    master_broker_id: int | None
    master_epoch: int
    addresses: Mapping[int, str]
    """Persistent BrokerId → the address the broker registered with the controller."""
    rocketmq_brokers: bool = False
    """Some member applied for its id or registered through RocketMQ's controller protocol
    (the controller's remoting port): a stock RocketMQ 5 broker (state.BrokerRecord)."""


@dataclass(frozen=True)
class GroupRoute:
    """One broker group as a route shows it: BrokerData plus where its queue data came from."""

    cluster_name: str
    broker_name: str
    broker_addrs: Mapping[int, str]
    """Route id (0 = master) → remoting address."""
    zone_name: str | None
    enable_acting_master: bool
    topics: Mapping[str, TopicConfig]
    master_epoch: int | None
    """The controller's masterEpoch for a managed group; None for an unmanaged one."""
    master_registered_addr: str | None = None
    """The master's own registered remoting address (brokerId 0 may name a stable one)."""
    client_addrs: Mapping[int, str] | None = None
    """What topic routes name (`client_broker_addrs`); None = `broker_addrs`."""

    def routed_addrs(self) -> Mapping[int, str]:
        """The addresses a topic route names (empty: the group is left out of them)."""
        return self.broker_addrs if self.client_addrs is None else self.client_addrs

    def broker_data(self, for_clients: bool = False) -> dict[str, object]:
        """BrokerData: every member (cluster info), or what topic routes name."""
        addrs = self.routed_addrs() if for_clients else self.broker_addrs
        data: dict[str, object] = {
            "brokerAddrs": {str(k): v for k, v in sorted(addrs.items())},
            "brokerName": self.broker_name,
            "cluster": self.cluster_name,
            "enableActingMaster": self.enable_acting_master,
        }
        if self.zone_name is not None:
            data["zoneName"] = self.zone_name
        return data


def persistent_id(reg: BrokerRegistration, group: ManagedGroup) -> int | None:
    """The persistent BrokerId `reg` belongs to in a managed group, or None (a stranger)."""
    if reg.broker_id != MASTER_ID and reg.broker_id in group.addresses:
        return reg.broker_id
    for broker_id, address in sorted(group.addresses.items()):
        if address == reg.broker_addr:
            return broker_id
    if reg.broker_id != MASTER_ID:
        return reg.broker_id
    return None


def _route_ids(
    regs: Iterable[BrokerRegistration], group: ManagedGroup | None
) -> dict[int, BrokerRegistration]:
    chosen: dict[int, BrokerRegistration] = {}
    for reg in regs:
        if group is None:
            route_id: int | None = reg.broker_id
        else:
            pid = persistent_id(reg, group)
            route_id = (
                None if pid is None else (MASTER_ID if pid == group.master_broker_id else pid)
            )
        if route_id is None:
            continue
        held = chosen.get(route_id)
        if held is None or (reg.last_update_ms, reg.broker_addr) > (
            held.last_update_ms,
            held.broker_addr,
        ):
            chosen[route_id] = reg
    # One address, one route id (RouteInfoManager: "the same IP:PORT must only have one
    # record"): keep the id its latest registration gives it.
    by_addr: dict[str, int] = {}
    for route_id, reg in sorted(chosen.items()):
        other = by_addr.get(reg.broker_addr)
        if other is None or reg.last_update_ms > chosen[other].last_update_ms:
            by_addr[reg.broker_addr] = route_id
    return {rid: reg for rid, reg in chosen.items() if by_addr[reg.broker_addr] == rid}


def master_only_for(mode: MasterOnlyRoutes, group: ManagedGroup | None) -> bool:
    """Whether topic routes name `group` by its stable address alone (module doc): `all`,
    or `stock` and its brokers are stock RocketMQ brokers. A group the controller does not
    manage never (it has no stable address either)."""
    if group is None or mode is MasterOnlyRoutes.NONE:
        return False
    return mode is MasterOnlyRoutes.ALL or group.rocketmq_brokers


def client_broker_addrs(
    registered: Mapping[int, str], stable_address: str | None, master_only: bool
) -> dict[int, str]:
    """The addresses a topic route names for one group (module doc).

    `registered`: route id → the broker's own registered address (id 0 = the controller's
    master, when it is registered); `stable_address`: where the group's master is served for
    clients (the master Service, the local forwarder), None when the group has none;
    `master_only`: name only that address. Without a stable address the route is RocketMQ's
    (every member by its own address); with one, id 0 is the stable address and, unless
    `master_only`, the slaves follow by their own addresses; with `master_only` and no
    master registered, nothing (a client keeps its last route: the stable address)."""
    if stable_address is None:
        return dict(registered)
    has_master = MASTER_ID in registered
    if master_only:
        return {MASTER_ID: stable_address} if has_master else {}
    return {**registered, MASTER_ID: stable_address} if has_master else dict(registered)


def group_routes(
    registrations: Iterable[BrokerRegistration],
    managed: Mapping[BrokerSetKey, ManagedGroup],
    now_ms: int,
    policy: MasterAddressPolicy = OWN_ADDRESS,
    group_topics: Mapping[BrokerSetKey, Mapping[str, TopicConfig]] | None = None,
) -> list[GroupRoute]:
    """Every group with at least one live, routable registration, sorted by name; a managed
    group's master named by `policy`. `group_topics` (the registry's): topics the group's
    members announced before, kept under the queue data's own (Registry doc)."""
    by_group: dict[BrokerSetKey, list[BrokerRegistration]] = {}
    for reg in registrations:
        if reg.alive(now_ms):
            by_group.setdefault(reg.group, []).append(reg)
    routes: list[GroupRoute] = []
    for key in sorted(by_group):
        group = managed.get(key)
        ids = _route_ids(by_group[key], group)
        if not ids:
            continue
        source = ids[min(ids)]
        registered = {rid: reg.broker_addr for rid, reg in ids.items()}
        master = ids.get(MASTER_ID)
        stable = None
        if group is not None and policy.stable(key):
            # The template's {port} is the master's; without a master, any member's (the
            # address is then not named: client_broker_addrs).
            stable = policy.address(key, (master or source).broker_addr)
        addrs = client_broker_addrs(registered, stable, master_only=False)
        client = client_broker_addrs(
            registered, stable, master_only=master_only_for(policy.master_only, group)
        )
        routes.append(
            GroupRoute(
                cluster_name=key[0],
                broker_name=key[1],
                broker_addrs=addrs,
                zone_name=source.zone_name,
                enable_acting_master=source.enable_acting_master,
                topics={**(group_topics or {}).get(key, {}), **source.topics},
                master_epoch=None if group is None else group.master_epoch,
                master_registered_addr=None if master is None else master.broker_addr,
                client_addrs=None if client == addrs else client,
            )
        )
    return routes


def _queue_data(route: GroupRoute, config: TopicConfig) -> dict[str, object]:
    return {
        "brokerName": route.broker_name,
        "perm": config.perm,
        "readQueueNums": config.read_queue_nums,
        "topicSysFlag": config.topic_sys_flag,
        "writeQueueNums": config.write_queue_nums,
    }


def topic_route(topic: str, routes: Iterable[GroupRoute]) -> dict[str, object] | None:
    """TopicRouteData of `topic` (JSON fields), or None when no group serves it
    (TOPIC_NOT_EXIST). Broker names may repeat across clusters; RocketMQ keys groups by
    brokerName alone, so the first cluster's group wins there too."""
    queue_datas: list[dict[str, object]] = []
    broker_datas: list[dict[str, object]] = []
    seen: set[str] = set()
    for route in routes:
        config = route.topics.get(topic)
        if config is None or route.broker_name in seen or not route.routed_addrs():
            continue
        seen.add(route.broker_name)
        queue_datas.append(_queue_data(route, config))
        broker_datas.append(route.broker_data(for_clients=True))
    if not queue_datas:
        return None
    return {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}


def cluster_info(routes: Iterable[GroupRoute]) -> dict[str, object]:
    """ClusterInfo (GET_BROKER_CLUSTER_INFO)."""
    broker_addr_table: dict[str, object] = {}
    cluster_addr_table: dict[str, list[str]] = {}
    for route in routes:
        if route.broker_name in broker_addr_table:
            continue
        broker_addr_table[route.broker_name] = route.broker_data()
        cluster_addr_table.setdefault(route.cluster_name, []).append(route.broker_name)
    return {"brokerAddrTable": broker_addr_table, "clusterAddrTable": cluster_addr_table}


def topic_list(routes: Iterable[GroupRoute], cluster: str | None = None) -> list[str]:
    """Every topic some group serves (GET_ALL_TOPIC_LIST_FROM_NAMESERVER), or only those of
    `cluster`'s groups (GET_TOPICS_BY_CLUSTER)."""
    topics: set[str] = set()
    for route in routes:
        if cluster is None or route.cluster_name == cluster:
            topics.update(route.topics)
    return sorted(topics)


def master_of(route: GroupRoute | None) -> str | None:
    """The master's own registered address (what a slave replicates from)."""
    return None if route is None else route.master_registered_addr


def register_answer(
    reg: BrokerRegistration,
    routes: Iterable[GroupRoute],
    registrations: Iterable[BrokerRegistration],
) -> tuple[str | None, str | None]:
    """RegisterBrokerResult for `reg`: (masterAddr, haServerAddr), both None unless `reg` is
    not the group's master and the group has one."""
    route = next((r for r in routes if (r.cluster_name, r.broker_name) == reg.group), None)
    master = master_of(route)
    if master is None or master == reg.broker_addr:
        return None, None
    ha = next(
        (
            r.ha_server_addr
            for r in registrations
            if r.group == reg.group and r.broker_addr == master
        ),
        None,
    )
    return master, ha
