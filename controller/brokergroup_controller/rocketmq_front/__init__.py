"""The controller's RocketMQ remoting front end (DESIGN.md §12, docs/controller.md):
RequestCode 1001-1013 and BROKER_HEARTBEAT over `brokergroup_remoting`, so a stock
RocketMQ 5 broker in controller mode runs under this controller."""

from __future__ import annotations

import logging

from brokergroup_controller.config import ControllerConfig
from brokergroup_controller.credentials import RocketMQKeys
from brokergroup_controller.rocketmq_front.front import ControllerRemoting
from brokergroup_controller.rocketmq_keys import load_rocketmq_keys
from brokergroup_controller.server import ControllerService
from brokergroup_remoting.keys import server_auth
from brokergroup_remoting.net import Credentials, ServerAuth

log = logging.getLogger(__name__)


async def start_remoting_front(
    config: ControllerConfig, service: ControllerService
) -> ControllerRemoting | None:
    """Open the remoting port of this node, or None when it stays closed: port 0, or no
    credentials outside `--insecure-no-auth` (every port authenticates, DESIGN.md §11)."""
    if not config.remoting_port:
        return None
    credentials: Credentials | None = None
    keys: RocketMQKeys | None = None
    if config.remoting_credentials_file:
        # The release pair is the admin; every group's derived pair is checked too, and
        # access.decide bounds what it may do (its own group's broker requests, or reads).
        keys = load_rocketmq_keys(
            config.remoting_credentials_file,
            "remoting credentials file",
            config.broker_credential_root,
        )
        assert keys.admin is not None
        credentials = Credentials(keys.admin.access_key, keys.admin.secret_key)
    elif not config.insecure_no_auth:
        log.warning(
            "RocketMQ remoting port %d stays closed: give --remoting-credentials-file "
            "(AccessKey/SecretKey the brokers sign with)",
            config.remoting_port,
        )
        return None
    front = ControllerRemoting(
        service,
        port=config.remoting_port,
        auth=None if keys is None else ServerAuth(secret_for=keys.secret_for),
        credentials=credentials,
        keys=keys,
        tls=config.remoting_tls(),
    )
    await front.start(config.bind_address)
    log.info(
        "RocketMQ controller remoting port on %s:%d (%s; TLS %s)",
        config.bind_address,
        front.listening_port,
        "signed requests only" if credentials else "UNAUTHENTICATED: --insecure-no-auth",
        config.remoting_tls_mode,
    )
    return front


__all__ = ["ControllerRemoting", "server_auth", "start_remoting_front"]
