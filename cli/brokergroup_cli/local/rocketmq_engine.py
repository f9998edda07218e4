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

A stock broker signs everything it sends (to the controllers and the name servers) with its
one `innerClientAuthenticationCredentials`: the group's broker pair, which lets it register
and report for its own group only (DESIGN.md §11). Applications get the group's client
pair. `--set name=value` lines go into every broker.conf.
"""

from __future__ import annotations

import json
from pathlib import Path

from brokergroup_cli.local.config import ConfigError, LocalConfig
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.rocketmq_stock import (
    RocketMQHome,
    StockBrokerConfig,
    find_home,
    read_broker_id,
)

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
    return home


def controller_args(config: LocalConfig, layout: Layout) -> list[str]:
    """What a controller node adds: the remoting port, with the release pair as its admin pair
    (the derived pairs it checks against the root it already has)."""
    return [
        "--remoting-port",
        str(config.controller_remoting_port),
        "--remoting-credentials-file",
        str(layout.namesrv_key_file),
    ]


def controller_addr(config: LocalConfig) -> str:
    """The brokers' `controllerAddr`: every node's remoting port."""
    return ";".join(f"{h}:{config.controller_remoting_port}" for h in config.controller_hosts)


def broker_config(config: LocalConfig, layout: Layout, slot: int, host: str) -> StockBrokerConfig:
    keys = json.loads(layout.broker_key_file.read_text())  # the group's broker pair
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
        ha_port=config.broker_client_port + HA_PORT_OFFSET + slot,
    )


def broker_argv(config: LocalConfig, layout: Layout, slot: int, host: str) -> list[str]:
    """Write the slot's broker.conf for `host` (its address this start) and return the JVM's
    command line."""
    broker = broker_config(config, layout, slot, host)
    broker.base_dir.mkdir(parents=True, exist_ok=True)
    broker.write()  # 0600: it holds the group's broker pair
    return broker.argv(require_home())


def broker_id(layout: Layout, slot: int) -> int | None:
    """The id the slot's store holds (the controller assigned it; kept across restarts)."""
    return read_broker_id(layout.broker_data_dir(slot) / "store")


def broker_store(layout: Layout, slot: int) -> Path:
    return layout.broker_data_dir(slot) / "store"
