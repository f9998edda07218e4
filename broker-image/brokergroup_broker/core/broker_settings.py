"""What a broker process is given and derives once: `BrokerSettings` (identity,
addresses, secrets), the store and HA configs derived from `BrokerConfig`,
the clocks the shell passes to the pure cores, and a few bounded waits."""

from __future__ import annotations

import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path

from brokergroup_broker.core import role as roles
from brokergroup_broker.core.commit_rule import (
    AckOutcome,
)
from brokergroup_broker.core.config import BrokerConfig
from brokergroup_broker.core.remoting_keys import group_server_auth
from brokergroup_broker.ha import HAConfig
from brokergroup_broker.protocol.messages import (
    BrokerError,
    ResponseCode,
)
from brokergroup_broker.store import (
    FlushDiskType,
    StoreConfig,
)
from brokergroup_broker.topics import topic_error
from brokergroup_controller.api import ReplicaInfo
from brokergroup_remoting.net import Credentials, ServerAuth
from brokergroup_remoting.tls import ServerTls

log = logging.getLogger(__name__)


# Bounded waits of the I/O shell that are not worth a config field.
TICK_MS = 50


PEER_HTTP_TIMEOUT_S = 0.5


STOP_TASK_TIMEOUT_S = 3.0


CONSUMER_OFFSET_SYNC_MS = 1000


OUTCOME_CODES: dict[AckOutcome, ResponseCode] = {
    AckOutcome.IN_SYNC_REPLICAS_NOT_ENOUGH: ResponseCode.IN_SYNC_REPLICAS_NOT_ENOUGH,
    AckOutcome.SLAVE_TIMEOUT: ResponseCode.SLAVE_TIMEOUT,
    AckOutcome.SYSTEM_BUSY: ResponseCode.SYSTEM_BUSY,
    AckOutcome.FENCED: ResponseCode.FENCED,
    AckOutcome.NOT_MASTER: ResponseCode.NOT_MASTER,
}


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class BrokerSettings:
    """Command-line identity and addresses (docs/architecture.md, Commands)."""

    cluster_name: str
    broker_name: str
    data_dir: Path
    controller_addresses: tuple[str, ...]
    controller_token: str | None
    bind_address: str
    advertise_address: str
    client_port: int = 10911
    ha_secret: bytes | None = field(default=None, repr=False)
    """The group's HA secret (`--ha-secret-file`); None only with `--insecure-no-ha-auth`."""
    remoting_port: int | None = None
    """The RocketMQ remoting port for stock clients (None: not served)."""
    grpc_port: int | None = None
    """The gRPC port for the RocketMQ 5 SDKs (apache.rocketmq.v2.MessagingService, docs/
    grpc.md; None: not served). It takes the remoting port's key pairs."""
    remoting_credentials: Credentials | None = field(default=None, repr=False)
    """The group's BROKER key pair (`--remoting-key-file`): the name server link signs with
    it and the remoting port accepts it; None with the port open means unsigned requests
    are taken (dev only)."""
    remoting_client_credentials: Credentials | None = field(default=None, repr=False)
    """The group's CLIENT key pair (`--remoting-client-key-file`), also accepted by the
    remoting port (core.remoting_keys); None: the broker pair only."""
    namesrv_addresses: tuple[str, ...] = ()
    """Name servers the remoting port is registered with (REGISTER_BROKER)."""
    remoting_tls: ServerTls | None = field(default=None, repr=False)
    """The remoting port's TLS (`--remoting-tls-mode`, `--tls-cert-file`, `--tls-key-file`);
    None: plaintext."""
    namesrv_tls: ssl.SSLContext | None = field(default=None, repr=False)
    """TLS to the name servers (`--tls-ca-file`: verified against that CA); None: plaintext."""
    client_tls: ServerTls | None = field(default=None, repr=False)
    """The client protocol port's TLS (`--client-tls-mode`, by default the remoting port's
    mode; protocol/server.py); None: plaintext."""
    grpc_tls: ServerTls | None = field(default=None, repr=False)
    """The gRPC port's TLS (`--grpc-tls-mode`, by default the remoting port's mode; ALPN h2;
    grpc_front/tls_front.py); None: plaintext."""
    ha_tls_server: ssl.SSLContext | None = field(default=None, repr=False)
    """Mutual TLS on the HA port as master (certificate, key and CA all given; ha/link.py)."""
    ha_tls_client: ssl.SSLContext | None = field(default=None, repr=False)
    """Mutual TLS to the master's HA port as slave (the same material)."""
    ha_tls_server_name: str | None = None
    """`--ha-tls-server-name`: the master's certificate is verified for this name instead
    of its address."""
    controller_tls: ssl.SSLContext | None = field(default=None, repr=False)
    """HTTPS to the controllers' API (`--controller-tls`), this broker's certificate
    presented; None: plain HTTP."""
    http_tls: ssl.SSLContext | None = field(default=None, repr=False)
    """`--http-tls`: the HTTP port (probes, status, metrics) serves HTTPS only, with this
    broker's certificate; None: plain HTTP (the default)."""
    http_tls_client: ssl.SSLContext | None = field(default=None, repr=False)
    """`--http-tls`: how this broker reads its peers' HTTP ports (peer_http.py): verified
    against the CA, its own certificate presented."""
    incarnation: str = ""
    """Which start of this broker this is, sent in every heartbeat: the pod's
    uid in Kubernetes, the local supervisor's per-start token, else a random
    id per process. The controller ignores a report about another one."""

    @property
    def own_host(self) -> str:
        """The address this broker's outgoing HA connections leave from."""
        if self.bind_address in ("0.0.0.0", "::", ""):
            return self.advertise_address
        return self.bind_address

    @property
    def address(self) -> str:
        """What the controller records: advertiseHost:clientPort."""
        return f"{self.advertise_address}:{self.client_port}"

    @property
    def store_host(self) -> tuple[str, int]:
        """The address records are stored with (storeHost): the RocketMQ remoting address when
        that port is served, as RocketMQ stores its listen address, so a stock client's
        offset message id leads to the port that can answer VIEW_MESSAGE_BY_ID."""
        return (self.advertise_address, self.remoting_port or self.client_port)

    @property
    def ha_port(self) -> int:
        return self.client_port + 1

    @property
    def http_port(self) -> int:
        return self.client_port + 2


def ha_address_of(client_address: str) -> tuple[str, int]:
    host, _, port = client_address.rpartition(":")
    return host, int(port) + 1


def http_address_of(client_address: str) -> str:
    host, _, port = client_address.rpartition(":")
    return f"{host}:{int(port) + 2}"


def store_config_of(config: BrokerConfig) -> StoreConfig:
    return StoreConfig(
        commit_log_segment_bytes=config.mapped_file_size_commit_log,
        flush_disk_type=FlushDiskType(config.flush_disk_type),
        flush_interval_ms=config.flush_interval_ms,
        disk_full_ratio=config.disk_full_ratio,
        default_queue_count=config.default_topic_queue_nums,
        max_topics=config.max_topics,
        max_open_queue_files=config.max_open_queue_files,
    )


def remoting_auth_of(settings: BrokerSettings) -> ServerAuth | None:
    """What the remoting port checks: the group's broker and client pairs (None: unsigned,
    `--insecure-no-remoting-auth`)."""
    pairs = tuple(
        p
        for p in (settings.remoting_credentials, settings.remoting_client_credentials)
        if p is not None
    )
    group = (settings.cluster_name, settings.broker_name)
    client = settings.remoting_client_credentials
    return group_server_auth(pairs, group, client_pair=client) if pairs else None


def ha_config_of(config: BrokerConfig) -> HAConfig:
    # The HA heartbeat refreshes an idle slave's lastCaughtUpTimeMs; keep it
    # well inside the shrink window and the read timeout above two of them.
    heartbeat_ms = max(10, min(500, config.ha_max_time_slave_not_catch_up_ms // 4))
    return HAConfig(
        heartbeat_interval_ms=heartbeat_ms,
        read_timeout_ms=max(3000, heartbeat_ms * 3),
        ha_max_time_slave_not_catch_up_ms=config.ha_max_time_slave_not_catch_up_ms,
    )


def group_view_of(info: ReplicaInfo) -> roles.GroupView:
    return roles.GroupView(
        master_broker_id=info.master_broker_id,
        master_address=info.master_address,
        master_alive=info.master_alive,
        master_epoch=info.master_epoch,
        sync_state_set=frozenset(info.sync_state_set),
        sync_state_set_epoch=info.sync_state_set_epoch,
        alive_broker_ids=frozenset(b.broker_id for b in info.brokers if b.alive),
    )


def require_valid_topic(topic: str) -> None:
    """Every request that names a topic checks it first (DESIGN.md §3.4b)."""
    error = topic_error(topic)
    if error is not None:
        raise BrokerError(ResponseCode.TOPIC_INVALID, error)
