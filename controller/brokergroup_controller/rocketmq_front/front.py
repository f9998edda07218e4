"""The controller's RocketMQ remoting port: a second front end over the same `ControllerService`.

Theory of operation
-------------------
`brokergroup_remoting.net` checks each request's AccessKey/SecretKey signature before
anything is decoded (NO_PERMISSION) and answers unknown codes REQUEST_CODE_NOT_SUPPORTED.
A handler here then, in this order:

1. On a node that is not the Raft leader, answers CONTROLLER_NOT_LEADER, as RocketMQ's
   controller does for everything but CONTROLLER_GET_METADATA_INFO, BROKER_HEARTBEAT and the
   config codes. A stock broker asks any node for the metadata (which names the leader's
   remoting address) and sends the rest there; heartbeats go to every node, and only the
   leader keeps them (liveness is leader-local, DESIGN.md §2.3).
2. Translates the header and body (`wire`) into the service's typed request (`requests`,
   through the HTTP API's checks; bad input: CONTROLLER_INVALID_REQUEST, nothing proposed)
   and the signer into a `requests.Caller`.
3. Calls the same `endpoints.Endpoints` method as the HTTP route, which checks access
   (role and group rules), decides with the same pure code and proposes through the same
   Raft log, and translates the typed answer back; a refusal (`ControllerError`) becomes
   RocketMQ's code through `wire.RESPONSE_CODE_OF` in `refusal_of`, the transport's
   translate hook.

After every committed election that names a master, the leader sends
NOTIFY_BROKER_ROLE_CHANGED (oneway) to the set's alive brokers that heartbeat over this port
(stock brokers; this project's own brokers watch the HTTP API). Brokers also poll
CONTROLLER_GET_REPLICA_INFO, so a lost notification only delays a switch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import fields as dataclass_fields

from brokergroup_controller import api
from brokergroup_controller.access import AccessRequest
from brokergroup_controller.api import BrokerSetKey
from brokergroup_controller.credentials import RocketMQKeys
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.request_parsing import BadRequest
from brokergroup_controller.requests import Caller, GetReplicaInfo
from brokergroup_controller.rocketmq_front import wire
from brokergroup_controller.server import ControllerService
from brokergroup_remoting import RemotingCommand, RequestCode, ResponseCode, request, response_to
from brokergroup_remoting.acl import ACCESS_KEY
from brokergroup_remoting.fields import BadField, RequestRefused
from brokergroup_remoting.net import (
    Connection,
    Credentials,
    Dispatch,
    RemotingClient,
    RemotingServer,
    ServerAuth,
)
from brokergroup_remoting.tls import ServerTls

log = logging.getLogger(__name__)

RemotingHandler = Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand | None]]

#: Settings GET_CONTROLLER_CONFIG never shows.
_SECRET_SETTINGS = frozenset({"token", "raft_password", "broker_credential_root"})
_NOTIFY_TIMEOUT_S = 3.0


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


class ControllerRemoting:
    """The remoting port of one controller node (RequestCode 1001-1013, BROKER_HEARTBEAT)."""

    def __init__(
        self,
        service: ControllerService,
        *,
        port: int,
        auth: ServerAuth | None,
        credentials: Credentials | None = None,
        keys: RocketMQKeys | None = None,
        tls: ServerTls | None = None,
    ) -> None:
        self.service = service
        # Who signed a request (the release's admin pair or a group's derived pair), for
        # access.decide: the same role rules as the HTTP API. None: --insecure-no-auth.
        self._keys = keys
        self.port = port
        """Every node's remoting port (the leader's address is its Raft host and this port)."""
        self._credentials = credentials
        self._server = RemotingServer(
            self.handlers(),
            auth=auth,
            dispatch=Dispatch(
                bad_field_code=ResponseCode.CONTROLLER_INVALID_REQUEST, translate=refusal_of
            ),
            name="controller-remoting",
            tls=tls,
        )
        # Brokers heartbeating over this port (stock brokers): they get role notifications.
        self._remoting_brokers: set[tuple[str, str, int]] = set()
        self._notified: dict[BrokerSetKey, int] | None = None
        self._clients: dict[str, RemotingClient] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def handlers(self) -> dict[int, RemotingHandler]:
        leader_only: dict[int, Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]]
        leader_only = {
            RequestCode.CONTROLLER_GET_NEXT_BROKER_ID: self._next_broker_id,
            RequestCode.CONTROLLER_APPLY_BROKER_ID: self._apply_broker_id,
            RequestCode.CONTROLLER_REGISTER_BROKER: self._register,
            RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET: self._alter,
            RequestCode.CONTROLLER_ELECT_MASTER: self._elect,
            RequestCode.CONTROLLER_GET_REPLICA_INFO: self._replica_info,
            RequestCode.CONTROLLER_GET_SYNC_STATE_DATA: self._sync_state_data,
            RequestCode.CLEAN_BROKER_DATA: self._clean,
        }
        table: dict[int, RemotingHandler] = {
            code: self._on_leader(handler) for code, handler in leader_only.items()
        }
        table[RequestCode.CONTROLLER_GET_METADATA_INFO] = self._metadata
        table[RequestCode.BROKER_HEARTBEAT] = self._heartbeat
        table[RequestCode.GET_CONTROLLER_CONFIG] = self._get_config
        table[RequestCode.UPDATE_CONTROLLER_CONFIG] = self._update_config
        return table

    # -- lifecycle

    async def start(self, host: str) -> None:
        await self._server.start(host, self.port)
        self.port = self.port or self._server.port
        self.service.node.add_listener(asyncio.get_running_loop(), self._on_node_changed)
        # Already leader: what is committed now came before this front (brokers poll it).
        # Taken here, not at the first change callback: the Raft thread may apply the next
        # commits (an election) before the loop runs that callback, and a baseline read
        # then would already hold the election and never notify it.
        if self.service.is_leader():
            self._notified = self._master_epochs()

    @property
    def listening_port(self) -> int:
        return self._server.port

    async def close(self) -> None:
        await self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for client in list(self._clients.values()):
            with contextlib.suppress(Exception):
                await client.close()
        self._clients.clear()

    # -- plumbing

    def _on_leader(
        self, handler: Callable[[RemotingCommand, Connection], Awaitable[RemotingCommand]]
    ) -> RemotingHandler:
        """`handler`, served by the leader only (a follower answers CONTROLLER_NOT_LEADER
        with the leader's address, as RocketMQ's controller does)."""

        async def on_leader(cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
            await self.service.wait_leader_current()
            if not self.service.is_leader():
                leader = self.leader_address()
                raise ControllerError(
                    ErrorCode.NOT_LEADER,
                    "The controller is not in leader state"
                    + (f"; the leader is {leader}" if leader else "; no leader is known"),
                )
            return await handler(cmd, conn)

        return on_leader

    def leader_address(self) -> str | None:
        leader = self.service.node.status().leader
        return None if leader is None else self._remoting_address_of(leader)

    def _remoting_address_of(self, raft_address: str) -> str:
        return f"{raft_address.rsplit(':', 1)[0]}:{self.port}"

    def _caller(self, cmd: RemotingCommand, conn: Connection) -> Caller:
        """Who signed `cmd` (the release's admin pair or a group's derived pair), for the
        service's access rules. Role and group rules only: a stock broker's connections come
        from whatever source address the kernel picks, so the address rules stay with the
        HTTP API (docs/security.md). No keys (--insecure-no-auth): nothing is checked."""
        if self._keys is None:
            return Caller(None, connection=conn.transport)
        principal = self._keys.principal(cmd.fields().get(ACCESS_KEY, ""))
        if principal is None:
            raise ControllerError(
                ErrorCode.UNAUTHORIZED, "the request's AccessKey names no principal"
            )
        return Caller(principal, address_rules=False, connection=conn.transport)

    def _authorize(self, cmd: RemotingCommand, conn: Connection, access: AccessRequest) -> None:
        """FORBIDDEN (NO_PERMISSION) unless the signer may do this (requests the service
        has no method for: metadata, config, the SyncStateSet listing)."""
        self.service.endpoints.authorize(self._caller(cmd, conn), access)

    def _key(self, broker_name: str | None, cluster_name: str | None = None) -> BrokerSetKey:
        if not broker_name:
            raise BadField("header field 'brokerName' is required")
        keys = self.service.node.read(lambda s: list(s.broker_sets))
        key = wire.resolve_broker_set(keys, broker_name, cluster_name or None)
        if key is None:
            raise ControllerError(
                ErrorCode.BROKER_SET_NOT_FOUND,
                f"Broker metadata is not existed: no broker set named {broker_name!r}",
            )
        return key

    def _info(self, key: BrokerSetKey) -> api.ReplicaInfo:
        return self.service.replica_info(self.service.require_set(*key))

    # -- handlers

    async def _metadata(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self._authorize(cmd, conn, AccessRequest("raft"))
        status = self.service.node.status()
        peers = status.members or self.service.config.peers
        ids = {peer: f"n{i}" for i, peer in enumerate(self.service.config.peers, start=1)}
        fields = wire.metadata_header(
            leader_id=None if status.leader is None else ids.get(status.leader, status.leader),
            leader_address=self.leader_address(),
            is_leader=status.is_leader,
            peers="".join(f"{ids.get(p, p)}:{self._remoting_address_of(p)};" for p in peers),
        )
        return response_to(cmd, ResponseCode.SUCCESS, fields=fields)

    async def _heartbeat(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        if fields.get("brokerId") in (None, "", "null"):
            return response_to(
                cmd, ResponseCode.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId"
            )
        heartbeat = wire.heartbeat_request(fields)
        caller = self._caller(cmd, conn)
        if self.service.is_leader():
            await self.service.endpoints.heartbeat(heartbeat, caller)
            hb = heartbeat.heartbeat
            self._remoting_brokers.add((hb.cluster_name, hb.broker_name, hb.broker_id))
        else:
            # A follower drops it (the broker sends every heartbeat to every node), once
            # the signer may send it.
            self.service.endpoints.authorize(caller, heartbeat)
        return response_to(cmd, ResponseCode.SUCCESS, "Heart beat success")

    async def _next_broker_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        q = wire.next_broker_id_request(cmd.fields())
        next_id = await self.service.endpoints.next_broker_id(q, self._caller(cmd, conn))
        fields = {
            "clusterName": q.cluster_name,
            "brokerName": q.broker_name,
            "nextBrokerId": str(next_id),
        }
        return response_to(cmd, ResponseCode.SUCCESS, fields=fields)

    async def _apply_broker_id(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        b = wire.apply_broker_id_request(cmd.fields())
        await self.service.endpoints.apply_broker_id(b, self._caller(cmd, conn))
        fields = {"clusterName": b.cluster_name, "brokerName": b.broker_name}
        return response_to(cmd, ResponseCode.SUCCESS, fields=fields)

    async def _register(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        b = wire.register_request(cmd.fields())
        info = await self.service.endpoints.register_broker(b, self._caller(cmd, conn))
        fields = {
            "clusterName": b.cluster_name,
            "brokerName": b.broker_name,
            **wire.master_header(info, only_alive=True),
        }
        return response_to(
            cmd, ResponseCode.SUCCESS, fields=fields, body=wire.sync_state_set_body(info)
        )

    async def _alter(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        key = self._key(fields.get("brokerName"))
        b = wire.alter_request(fields, cmd.body, key)
        altered = await self.service.endpoints.alter_sync_state_set(b, self._caller(cmd, conn))
        body = wire.sync_state_set_json(altered.members, altered.epoch)
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            fields={"newSyncStateSetEpoch": str(altered.epoch)},
            body=body,
        )

    async def _elect(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        cluster = fields.get("clusterName") or None
        try:
            key = self._key(fields.get("brokerName"), cluster)
        except ControllerError as refusal:
            if isinstance(refusal, BadRequest):
                raise
            raise ControllerError(
                ErrorCode.NEED_TO_BE_REGISTERED, "Broker hasn't been registered"
            ) from refusal
        b = wire.elect_request(fields, key)
        if b is None:
            raise BadField(
                "brokerId -1 asks for a controller-triggered election: this controller starts "
                "those itself when a master goes inactive; name a brokerId"
            )
        try:
            info = await self.service.endpoints.elect_master(b, self._caller(cmd, conn))
            code = ResponseCode.SUCCESS
            remark = None
        except ControllerError as refusal:
            if refusal.code is not ErrorCode.MASTER_STILL_EXIST:
                raise
            # A stock broker reads this answer like a success: follow the live master.
            info = self._info(key)
            code = ResponseCode.CONTROLLER_MASTER_STILL_EXIST
            remark = refusal.message
        return response_to(
            cmd,
            code,
            remark,
            fields=wire.master_header(info, only_alive=False),
            body=wire.elect_body(info),
        )

    async def _replica_info(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        key = self._key(cmd.fields().get("brokerName"))
        info = await self.service.endpoints.get_replica_info(
            GetReplicaInfo(*key), self._caller(cmd, conn)
        )
        return response_to(
            cmd,
            ResponseCode.SUCCESS,
            fields=wire.master_header(info, only_alive=False),
            body=wire.sync_state_set_body(info),
        )

    async def _sync_state_data(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self._authorize(cmd, conn, AccessRequest("groups"))
        names = wire.broker_names_body(cmd.body)
        keys = self.service.node.read(lambda s: list(s.broker_sets))
        infos = []
        for name in names:
            key = wire.resolve_broker_set(keys, name)
            if key is not None:  # RocketMQ leaves unknown names out
                infos.append(self._info(key))
        return response_to(cmd, ResponseCode.SUCCESS, body=wire.replicas_info_body(infos))

    async def _clean(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        fields = cmd.fields()
        key = self._key(fields.get("brokerName"), fields.get("clusterName"))
        caller = self._caller(cmd, conn)
        self.service.endpoints.authorize(caller, AccessRequest("clean", key))
        await self.service.endpoints.clean_broker_data(wire.clean_request(fields, key), caller)
        return response_to(cmd, ResponseCode.SUCCESS)

    async def _get_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self._authorize(cmd, conn, AccessRequest("controller_config"))
        config = self.service.config
        settings: dict[str, object] = {
            _camel(f.name): getattr(config, f.name)
            for f in dataclass_fields(config)
            if f.name not in _SECRET_SETTINGS and getattr(config, f.name) is not None
        }
        settings["peers"] = ";".join(config.peers)
        settings["remotingPort"] = self.port
        return response_to(cmd, ResponseCode.SUCCESS, body=wire.properties_text(settings))

    async def _update_config(self, cmd: RemotingCommand, conn: Connection) -> RemotingCommand:
        self._authorize(cmd, conn, AccessRequest("controller_config"))
        if not cmd.body:
            return response_to(cmd, ResponseCode.SUCCESS)
        names = sorted(wire.parse_properties(cmd.body))
        # Every node must decide alike, so settings change in controller.json and a
        # rolling restart, never on one node at run time.
        return response_to(
            cmd,
            ResponseCode.NO_PERMISSION,
            f"controller settings {names} are read at start-up from controller.json on every "
            "node; change them there and restart the nodes one by one",
        )

    # -- role notifications (leader)

    def _on_node_changed(self) -> None:
        if not self.service.is_leader():
            self._notified = None
            return
        epochs = self._master_epochs()
        if self._notified is None:  # just became leader: brokers poll what came before
            self._notified = epochs
            return
        for key, epoch in epochs.items():
            if epoch > self._notified.get(key, -1):
                self._spawn(self._notify_set(key))
        self._notified = epochs

    def _master_epochs(self) -> dict[BrokerSetKey, int]:
        return self.service.node.read(
            lambda s: {
                k: bs.master_epoch
                for k, bs in s.broker_sets.items()
                if bs.master_broker_id is not None
            }
        )

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _notify_set(self, key: BrokerSetKey) -> None:
        broker_set = self.service.snapshot(*key)
        if broker_set is None:
            return
        info = self.service.replica_info(broker_set)
        change = wire.role_change(info)
        if change is None:
            return
        targets = [
            b.address
            for b in info.brokers
            if b.alive and (*key, b.broker_id) in self._remoting_brokers
        ]
        log.info(
            "notifying %s of %s/%s: master %s at masterEpoch %d",
            targets, *key, info.master_broker_id, info.master_epoch,
        )  # fmt: skip
        await asyncio.gather(*(self._notify(address, change) for address in targets))

    async def _notify(self, address: str, change: wire.RoleChange) -> None:
        cmd = request(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, 0, change.fields, change.body)
        client = self._clients.get(address)
        try:
            if client is None or client.closed:
                client = await RemotingClient.connect(
                    address,
                    credentials=self._credentials,
                    connect_timeout_s=_NOTIFY_TIMEOUT_S,
                    name="controller-notify",
                )
                self._clients[address] = client
            await client.invoke_oneway(cmd)
        except (OSError, TimeoutError) as exc:
            log.info("could not notify broker %s of its role (%s); it polls", address, exc)
            stale = self._clients.pop(address, None)
            if stale is not None:
                with contextlib.suppress(Exception):
                    await stale.close()


def refusal_of(exc: Exception) -> RequestRefused | None:
    """The controller's refusals as RocketMQ's codes: a `ControllerError` (a request the
    parser refuses is BAD_REQUEST, CONTROLLER_INVALID_REQUEST) becomes its
    `wire.RESPONSE_CODE_OF` code with its message."""
    if isinstance(exc, ControllerError):
        return RequestRefused(wire.RESPONSE_CODE_OF[exc.code], exc.message)
    return None
