"""Start-up of the name server inside a controller process (one call from `app.serve`)."""

from __future__ import annotations

import logging

from brokergroup_controller.config import ControllerConfig
from brokergroup_controller.credentials import RocketMQKeys, Role
from brokergroup_controller.namesrv import access
from brokergroup_controller.namesrv.server import NameServer, managed_groups
from brokergroup_controller.namesrv.users import StateUsers, with_users
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.rocketmq_keys import load_rocketmq_keys
from brokergroup_remoting import RemotingCommand
from brokergroup_remoting.net import ServerAuth

log = logging.getLogger(__name__)


async def start_name_server(
    config: ControllerConfig, node: ControllerRaftNode
) -> NameServer | None:
    """Serve the name server on `namesrvPort` (0: off). Signed requests only: the key pair
    of `--namesrv-key-file` (admin) or a group's pair derived from the broker credential
    root (namesrv/access.py bounds it); without the file it runs only under
    --insecure-no-auth (unauthenticated), else it stays off and says so."""
    if config.namesrv_port == 0:
        return None
    keys: RocketMQKeys | None = None
    if config.namesrv_key_file is not None:
        keys = load_rocketmq_keys(
            config.namesrv_key_file, "name server key file", config.broker_credential_root
        )
        # The cluster's users may read routes too (namesrv/users.py).
        auth: ServerAuth | None = with_users(
            name_server_auth(keys), StateUsers(node.read, config.broker_credential_root)
        )
    elif config.insecure_no_auth:
        auth = None
    else:
        log.warning("name server off: no --namesrv-key-file (it never serves unsigned requests)")
        return None
    server = NameServer(
        lambda: node.read(managed_groups),
        auth=auth,
        master_address=config.master_address_policy(),
        broker_group_of=lambda key: broker_group_of(keys, key),
        tls=config.remoting_tls(),
    )
    host = config.namesrv_bind_address or config.bind_address
    await server.start(host, config.namesrv_port)
    log.info(
        "name server on %s:%d (%s; TLS %s; master address: %s)",
        host,
        server.port,
        "AccessKey/SecretKey signatures" if auth else "UNAUTHENTICATED",
        config.remoting_tls_mode,
        config.master_address_policy(),
    )
    return server


def broker_group_of(keys: RocketMQKeys | None, access_key: str) -> tuple[str, str] | None:
    """The (clusterName, brokerName) of a verified broker pair (None: not a broker's)."""
    principal = None if keys is None else keys.principal(access_key)
    if principal is None or principal.role is not Role.BROKER:
        return None
    return principal.group


def name_server_auth(keys: RocketMQKeys) -> ServerAuth:
    """Signatures checked against `keys`, then namesrv/access.py's decision."""

    def authorize(access_key: str, cmd: RemotingCommand) -> str | None:
        return access.decide(keys.principal(access_key), cmd.code, cmd.fields())

    return ServerAuth(secret_for=keys.secret_for, authorize=authorize)
