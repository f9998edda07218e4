"""The name server's asyncio shell: request handlers on brokergroup_remoting.net.

The transport checks every request's AccessKey/SecretKey signature before a handler runs
and answers unknown codes REQUEST_CODE_NOT_SUPPORTED; the handlers here decode the header
(`bodies`), update the node's `Registry` or build a route (`routes`) from the registrations
and a fresh read of the controller's replicated state, so a committed election is in the
very next route. A bad field is answered SYSTEM_ERROR with its reason (RocketMQ's answer to
a RemotingCommandException); nothing a peer sends reaches another connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping

from brokergroup_controller.api import BrokerSetKey
from brokergroup_controller.master_address import OWN_ADDRESS, MasterAddressPolicy
from brokergroup_controller.namesrv import bodies, routes
from brokergroup_controller.namesrv.registry import (
    DEFAULT_MAX_REGISTRATIONS,
    Registry,
    RegistryFull,
)
from brokergroup_controller.namesrv.routes import BrokerRegistration, ManagedGroup
from brokergroup_controller.state import ControllerState
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, names
from brokergroup_remoting import fields as header
from brokergroup_remoting.body import crc32, json_body
from brokergroup_remoting.command import response_to
from brokergroup_remoting.fields import quoted
from brokergroup_remoting.net import Connection, Handler, RemotingServer, ServerAuth
from brokergroup_remoting.tls import ServerTls

log = logging.getLogger(__name__)

#: RocketMQ's name server port (NamesrvConfig listenPort).
DEFAULT_NAMESRV_PORT = 9876
#: Bounds on the expiry a broker asks for (heartbeatTimeoutMillis): RocketMQ sends 10 s
#: with slave-acting-master, nothing (120 s) otherwise.
MIN_TIMEOUT_MS = 1_000
MAX_TIMEOUT_MS = 600_000
#: (broker address, topic) pairs whose refusal was logged; past this, refusals are counted
#: in one line per registration instead of named.
MAX_LOGGED_REFUSALS = 4096


def managed_groups(state: ControllerState) -> dict[BrokerSetKey, ManagedGroup]:
    """The controller's broker sets as the route needs them (run under the state lock)."""
    return {
        key: ManagedGroup(
            cluster_name=bs.cluster_name,
            broker_name=bs.broker_name,
            master_broker_id=bs.master_broker_id,
            master_epoch=bs.master_epoch,
            addresses={broker_id: record.address for broker_id, record in bs.brokers.items()},
            rocketmq_brokers=bs.has_rocketmq_brokers,
        )
        for key, bs in state.broker_sets.items()
    }


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class NameServer:
    """One node's name server: its registrations and the handlers over them."""

    def __init__(
        self,
        groups: Callable[[], Mapping[BrokerSetKey, ManagedGroup]],
        *,
        auth: ServerAuth | None,
        clock_ms: Callable[[], int] = _monotonic_ms,
        max_registrations: int = DEFAULT_MAX_REGISTRATIONS,
        master_address: MasterAddressPolicy = OWN_ADDRESS,
        broker_group_of: Callable[[str], BrokerSetKey | None] = lambda _key: None,
        tls: ServerTls | None = None,
    ) -> None:
        self._groups = groups
        self._broker_group_of = broker_group_of
        self._master_address = master_address
        self._clock_ms = clock_ms
        self.registry = Registry(max_registrations)
        self._watched: set[int] = set()
        self._logged_refusals: set[tuple[str, str]] = set()
        handlers: dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
        }
        self.handlers: dict[int, Handler] = {int(code): h for code, h in handlers.items()}
        self._server = RemotingServer(self.handlers, auth=auth, name="namesrv", tls=tls)

    @property
    def port(self) -> int:
        return self._server.port

    async def start(self, host: str, port: int) -> None:
        await self._server.start(host, port)

    async def close(self) -> None:
        await self._server.close()

    def group_routes(self) -> list[routes.GroupRoute]:
        return routes.group_routes(
            self.registry,
            self._groups(),
            self._clock_ms(),
            self._master_address,
            self.registry.group_topics(),
        )

    # Routes (clients, mqadmin) -------------------------------------------------------------

    async def get_route_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        topic = names.topic_name(cmd.fields(), "topic")
        route = routes.topic_route(topic, self.group_routes())
        if route is None:
            return response_to(
                cmd,
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {topic}",
            )
        return response_to(cmd, body=json_body(route))

    async def get_cluster_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return response_to(cmd, body=json_body(routes.cluster_info(self.group_routes())))

    async def get_all_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        return response_to(
            cmd, body=json_body({"topicList": routes.topic_list(self.group_routes())})
        )

    async def get_topics_by_cluster(
        self, cmd: RemotingCommand, conn: Connection
    ) -> RemotingCommand:
        cluster = header.text(cmd.fields(), "cluster")
        topics = routes.topic_list(self.group_routes(), cluster)
        return response_to(cmd, body=json_body({"topicList": topics}))

    async def get_system_topics(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        # RouteInfoManager.getSystemTopicList: cluster and broker names, plus one address.
        group_routes = self.group_routes()
        names: set[str] = set()
        body: dict[str, object] = {}
        for route in group_routes:
            names.update((route.cluster_name, route.broker_name))
            if "brokerAddr" not in body and route.broker_addrs:
                body["brokerAddr"] = route.broker_addrs[min(route.broker_addrs)]
        body["topicList"] = sorted(names)
        return response_to(cmd, body=json_body(body))

    # Brokers --------------------------------------------------------------------------------

    async def register_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        header = bodies.register_header(cmd.fields())
        if header.body_crc32 != 0 and header.body_crc32 != crc32(cmd.body):
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, "crc32 not match")
        body = bodies.register_body(cmd.body, header.compressed)
        data_version, topics = body.data_version, body.topics
        if body.refused_count:
            self._log_refused(header.broker_addr, body)
        now = self._clock_ms()
        timeout_ms = routes.DEFAULT_REGISTRATION_TIMEOUT_MS
        if header.heartbeat_timeout_ms is not None:
            timeout_ms = min(max(header.heartbeat_timeout_ms, MIN_TIMEOUT_MS), MAX_TIMEOUT_MS)
        reg = BrokerRegistration(
            cluster_name=header.cluster_name,
            broker_name=header.broker_name,
            broker_addr=header.broker_addr,
            broker_id=header.broker_id,
            ha_server_addr=header.ha_server_addr,
            zone_name=cmd.fields().get("zoneName"),
            enable_acting_master=bool(header.enable_acting_master),
            topics=topics,
            data_version=data_version,
            last_update_ms=now,
            timeout_ms=timeout_ms,
        )
        try:
            stored = self.registry.register(reg, id(conn), now)
        except RegistryFull as exc:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, str(exc))
        if stored is None:
            return response_to(cmd, ResponseCode.SYSTEM_ERROR, "register broker failed")
        self._watch(conn)
        master, ha = routes.register_answer(stored, self.group_routes(), self.registry)
        fields = {
            name: value
            for name, value in (("haServerAddr", ha), ("masterAddr", master))
            if value is not None
        }
        return response_to(cmd, fields=fields)

    def _log_refused(self, broker_addr: str, body: bodies.RegisterBody) -> None:
        """Say once per broker and topic that a topic name was left out of the routes (the
        set of said ones is bounded; past it a registration logs one counting line)."""
        new = [t for t in body.refused if (broker_addr, t) not in self._logged_refusals]
        room = MAX_LOGGED_REFUSALS - len(self._logged_refusals)
        for topic in new[: max(room, 0)]:
            self._logged_refusals.add((broker_addr, topic))
            log.warning(
                "namesrv: %s registers topic %s, which breaks the topic rule; left out "
                "of the routes (its other topics are registered): %s",
                broker_addr,
                quoted(topic, 200),
                names.topic_error(topic),
            )
        if room < len(new):
            log.warning(
                "namesrv: %s registers %d topics that break the topic rule; left out",
                broker_addr,
                body.refused_count,
            )

    async def unregister_broker(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        broker_name = header.text(fields, "brokerName")
        broker_addr = bodies.address(fields, "brokerAddr")
        cluster = header.text(fields, "clusterName")
        header.int64(fields, "brokerId", low=0)
        if self.registry.unregister(cluster, broker_addr, broker_name):
            log.info("namesrv: %s/%s at %s unregistered", cluster, broker_name, broker_addr)
        return response_to(cmd)

    async def query_data_version(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        header.text(fields, "brokerName")
        broker_addr = bodies.address(fields, "brokerAddr")
        cluster = header.text(fields, "clusterName")
        header.int64(fields, "brokerId", low=0)
        theirs = bodies.decode_data_version(cmd.body)
        held = self.registry.get(cluster, broker_addr)
        changed = held is None or held.data_version != theirs
        self.registry.touch(cluster, broker_addr, self._clock_ms())
        body = b"" if held is None else json_body(held.data_version.to_json())
        return response_to(cmd, fields={"changed": "true" if changed else "false"}, body=body)

    async def broker_heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        cluster = header.text(fields, "clusterName")
        broker_addr = bodies.address(fields, "brokerAddr")
        self.registry.touch(cluster, broker_addr, self._clock_ms())
        return response_to(cmd)

    async def delete_topic(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV (topic, clusterName): from every registration of the
        cluster, as RouteInfoManager.deleteTopic; a broker pair's request (access.py), or
        one naming brokerName (a broker deleting its own topic), from that group's only."""
        fields = cmd.fields()
        topic = names.topic_name(fields, "topic")
        cluster = header.optional_text(fields, "clusterName")
        group = None if conn.access_key is None else self._broker_group_of(conn.access_key)
        broker_name = header.optional_text(fields, "brokerName") or (group and group[1])
        self.registry.delete_topic(topic, cluster, broker_name)
        return response_to(cmd)

    def _watch(self, conn: Connection) -> None:
        """Forget a connection's registrations when it closes (onChannelDestroy)."""
        key = id(conn)
        if key in self._watched:
            return
        self._watched.add(key)

        def forget() -> None:
            self._watched.discard(key)
            for reg in self.registry.drop_owner(key):
                log.info(
                    "namesrv: %s/%s at %s gone with its connection",
                    reg.cluster_name,
                    reg.broker_name,
                    reg.broker_addr,
                )

        conn.on_close(forget)
