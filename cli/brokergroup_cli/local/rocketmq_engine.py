"""`local up --engine rocketmq`: stock RocketMQ 5.3 brokers under this controller.

The supervisor, status view, `kill` and the restart on a new address are the built-in
engine's; this module only says what differs, and the shared code calls it where the
engine matters (`is_rocketmq`):

- the controllers also open their RocketMQ remoting port (`controllerRemotingPort`, 9879),
  taking the release's admin pair (DIR/namesrv-keys.json) and every pair derived from the
  broker credential root;
- each broker slot runs `java … org.apache.rocketmq.broker.BrokerStartup -c
  DIR/brokers/<slot>/broker.conf` (`rocketmq_stock`), with `enableControllerMode=true`,
  `brokerId=-1`, `controllerAddr` = the nodes' remoting ports, `namesrvAddr` = the nodes'
  name servers, and the group's BROKER pair (DIR/broker-keys.json) as
  `innerClientAuthenticationCredentials`; the store
  under DIR/brokers/<slot>/store keeps `brokerIdentity`, so a restarted broker keeps its id;
- the status view reads a stock broker through the controller (a stock broker has no
  `/v1/status`): BrokerId and address from the broker set, role from the master.

- with ACL 2.0 on (`--set authenticationEnabled=true --set authorizationEnabled=true`,
  `users_enabled`) the supervisor keeps every stock broker's users in step with the
  controllers' (`stock_users_sync`): `brokergroup admin user create` reaches the stock brokers
  within about a second, and a restarted broker is synced again;
- the stock RocketMQ proxy (`ProxyStartup -pm cluster`, DIR/proxy/rmq-proxy.json) serves the
  RocketMQ 5 SDKs over gRPC (`local status --json` grpcEndpoint) and remoting clients; it finds
  the brokers through the nodes' name servers, signs with the group's client pair and takes
  only SDKs that sign with it.

A stock broker signs everything it sends (to the controllers and the name servers) with its
one `innerClientAuthenticationCredentials`: the group's broker pair, which lets it register
and report for its own group only (DESIGN.md §11). Applications get the group's client
pair. `--set name=value` lines go into every broker.conf; the names the built-in broker
shares with RocketMQ (`SHARED_SETTINGS`: delay levels, timers, transaction checks) are
checked before anything starts, as the built-in broker checks them.
"""

from __future__ import annotations

import errno
import json
import re
import socket
from collections.abc import Callable
from pathlib import Path

from brokergroup_cli.local.config import ConfigError, LocalConfig
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.rocketmq_stock import (
    RocketMQHome,
    StockBrokerConfig,
    StockProxyConfig,
    StockTls,
    find_home,
    proxy_missing,
    read_broker_id,
)
from brokergroup_remoting.stock_users import acl_enabled

ENGINE = "rocketmq"
#: A stock broker's HA port is brokerClientPort + this + slot (11011, 11012, …): RocketMQ binds
#: it on every interface, so the slots cannot share one port on different addresses.
HA_PORT_OFFSET = 100


def is_rocketmq(config: LocalConfig) -> bool:
    return config.engine == ENGINE


def require_home() -> RocketMQHome:
    """The cached jars, or a ConfigError saying how to get them (before anything starts)."""
    home = find_home()
    if isinstance(home, str):
        raise ConfigError(f"--engine rocketmq: {home}")
    reason = proxy_missing(home)
    if reason is not None:
        raise ConfigError(f"--engine rocketmq: {reason}")
    return home


_DELAY_LEVELS = re.compile(r"[1-9][0-9]*[smhd]( [1-9][0-9]*[smhd]){0,63}")


def _positive_int(text: str) -> bool:
    return text.isdigit() and int(text) > 0


#: `--set` names the built-in broker and RocketMQ share, with RocketMQ's rule for each value:
#: a stock broker would log a bad one and run on its default (a bad messageDelayLevel even
#: leaves the delay levels unparsed), so they are refused before anything starts.
SHARED_SETTINGS: dict[str, tuple[Callable[[str], bool], str]] = {
    "messageDelayLevel": (
        lambda v: _DELAY_LEVELS.fullmatch(v) is not None,
        "1-64 delays such as '1s 5s 10m 2h' (a number and s, m, h or d, one space apart)",
    ),
    "timerMaxDelaySec": (_positive_int, "a positive number of seconds"),
    "timerPrecisionMs": (_positive_int, "a positive number of milliseconds"),
    "timerWheelEnable": (lambda v: v in ("true", "false"), "true or false"),
    "transactionCheckInterval": (_positive_int, "a positive number of milliseconds"),
    "transactionCheckMax": (_positive_int, "a positive count"),
    "transactionTimeOut": (_positive_int, "a positive number of milliseconds"),
}


def check_settings(config: LocalConfig) -> None:
    """Refuse a shared setting whose value a stock broker would not take (ConfigError)."""
    for key, value in config.broker_settings:
        rule = SHARED_SETTINGS.get(key)
        if rule is not None and not rule[0](value):
            raise ConfigError(f"--set {key}={value!r}: must be {rule[1]}")


def check_proxy_ports(config: LocalConfig) -> None:
    """The proxy binds its ports on every interface: fail early if one is taken."""
    for name, port in (
        ("proxyGrpcPort", config.proxy_grpc_port),
        ("proxyRemotingPort", config.proxy_remoting_port),
    ):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("0.0.0.0", port))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                raise ConfigError(
                    f"port {port} is in use: the stock proxy binds it on every interface "
                    f"(--set local.{name}=<port> moves it)"
                ) from exc


def stock_tls(config: LocalConfig, layout: Layout) -> StockTls | None:
    """The stock brokers' and proxy's TLS under `--set local.tls=permissive|enforcing`
    (docs/security.md "engine rocketmq, locally"): their remoting ports (and the proxy's gRPC
    port) in the runtime's mode with the runtime's server certificate (DIR/tls/, the local CA),
    and `tls.enable` on every connection they open — to the controllers' name servers and
    remoting port, the stable master address and other brokers — verifying the server
    against the CA: every one of those serves TLS in both modes, so permissive encrypts them
    too. None while local.tls is disabled (RocketMQ's defaults). HA replication stays
    plaintext: RocketMQ 5.3 has no TLS there."""
    if config.tls == "disabled":
        return None
    return StockTls(config.tls, layout.tls_cert_file, layout.tls_key_file, layout.ca_file)


def controller_args(config: LocalConfig, layout: Layout) -> list[str]:
    """What a controller node adds: the remoting port, with the release pair as its admin pair
    (the derived pairs it checks against the root it already has); and topic routes that name
    a group of stock brokers by its forwarder alone (a stock broker lists a client once per
    connection: one held straight to a slave that is then elected would count the client
    twice, docs/rocketmq-compatibility.md "A consumer counted twice after a failover"). The
    mode is `stock`, as the chart's: the controllers see the group's brokers register through
    RocketMQ's controller protocol, so the runtime exercises the same per-group decision."""
    return [
        "--remoting-port",
        str(config.controller_remoting_port),
        "--remoting-credentials-file",
        str(layout.namesrv_key_file),
        "--namesrv-master-only-routes",
        "stock",
    ]


def controller_addr(config: LocalConfig) -> str:
    """The brokers' `controllerAddr`: every node's remoting port."""
    return ";".join(f"{h}:{config.controller_remoting_port}" for h in config.controller_hosts)


def broker_config(config: LocalConfig, layout: Layout, slot: int, host: str) -> StockBrokerConfig:
    keys = json.loads(layout.broker_key_file.read_text())  # the group's broker pair
    client = json.loads(layout.client_key_file.read_text())  # a user, for the proxy
    return StockBrokerConfig(
        base_dir=layout.broker_data_dir(slot),
        host=host,
        port=config.broker_client_port,
        controllers=controller_addr(config),
        namesrv=config.namesrv_address,
        access_key=str(keys["accessKey"]),
        secret_key=str(keys["secretKey"]),
        cluster=config.cluster_name,
        name=config.broker_name,
        settings=config.broker_settings,
        client_pair=(str(client["accessKey"]), str(client["secretKey"])),
        ha_port=config.broker_client_port + HA_PORT_OFFSET + slot,
        tls=stock_tls(config, layout),
    )


def broker_argv(config: LocalConfig, layout: Layout, slot: int, host: str) -> list[str]:
    """Write the slot's broker.conf for `host` (its address this start) and return the JVM's
    command line."""
    broker = broker_config(config, layout, slot, host)
    broker.base_dir.mkdir(parents=True, exist_ok=True)
    broker.write()  # 0600: it holds the group's broker pair
    return broker.argv(require_home())


def proxy_config(config: LocalConfig, layout: Layout) -> StockProxyConfig:
    keys = json.loads(layout.client_key_file.read_text())  # the group's client pair
    return StockProxyConfig(
        base_dir=proxy_dir(layout),
        namesrv=config.namesrv_address,
        access_key=str(keys["accessKey"]),
        secret_key=str(keys["secretKey"]),
        grpc_port=config.proxy_grpc_port,
        remoting_port=config.proxy_remoting_port,
        cluster=config.cluster_name,
        tls=stock_tls(config, layout),
    )


def proxy_argv(config: LocalConfig, layout: Layout) -> list[str]:
    """Write DIR/proxy/rmq-proxy.json (0600) and return the proxy JVM's command line."""
    proxy = proxy_config(config, layout)
    proxy.write()
    return proxy.argv(require_home())


def proxy_dir(layout: Layout) -> Path:
    return layout.root / "proxy"


def proxy_log(layout: Layout) -> Path:
    return layout.logs_dir / "proxy.log"


def broker_id(layout: Layout, slot: int) -> int | None:
    """The id the slot's store holds (the controller assigned it; kept across restarts)."""
    return read_broker_id(layout.broker_data_dir(slot) / "store")


def broker_store(layout: Layout, slot: int) -> Path:
    return layout.broker_data_dir(slot) / "store"


def users_enabled(config: LocalConfig) -> bool:
    """Engine rocketmq with ACL 2.0 on in the brokers' settings: the supervisor syncs users."""
    return is_rocketmq(config) and acl_enabled(config.broker_settings)
