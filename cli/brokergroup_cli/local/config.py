"""Typed settings of the local runtime (`brokergroup local up`).

`--set key=value` on `local up` is routed by prefix:

- `local.<name>=v`      one field of `LocalConfig` below (camelCase name),
- `controller.<name>=v` written into DIR/controller.json for every controller
  (`brokergroup controller --config`),
- `broker.<name>=v` or a bare `<name>=v` passed to every broker as
  `--set <name>=v` (the broker validates its own names).

The address plan (docs/architecture.md): controllers on 127.0.1.1-3, brokers
from 127.0.0.10 upward. Both stay below 127.0.2.0, which tests own.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network
from pathlib import Path
from typing import Any

#: RocketMQ's tls.server.mode values (brokergroup_remoting.tls.TlsMode).
TLS_MODES = ("disabled", "permissive", "enforcing")
#: What `--engine` accepts: this project's brokers, or stock RocketMQ 5.3 brokers.
ENGINES = ("builtin", "rocketmq")

#: The largest group id (Linux's gid_t is 32 bits; (gid_t)-1 means "unchanged").
MAX_GID = 2**32 - 2

#: `local up --groups`: broker-a … broker-z.
MAX_GROUPS = 26

#: The local runtime must stay inside this block; tests use 127.0.2.0/24 and above.
LOCAL_RUNTIME_NETWORK = IPv4Network("127.0.0.0/23")


class ConfigError(ValueError):
    """A setting the user gave cannot be used; the message says which and why."""


def default_launcher() -> tuple[str, ...]:
    """How a child process runs the `brokergroup` command."""
    return (sys.executable, "-m", "brokergroup_cli.main")


@dataclass(frozen=True)
class LocalConfig:
    root_dir: Path
    """Everything of this installation lives here: token, data dirs, logs, state."""

    broker_count: int = 3
    """Brokers in the BrokerGroup (replicas of one broker set)."""

    groups: int = 1
    """BrokerGroups of the cluster under the one set of controllers (`local up --groups N`):
    broker-a, broker-b, … (`group_names`), each of `broker_count` brokers with its own
    derived credentials and key pairs; a topic created on the cluster spans them. The first
    group is the one the status view, the stable master address and `local kill` follow."""

    engine: str = "builtin"
    """Which brokers run: `builtin` (this project's) or `rocketmq` (stock RocketMQ 5.3
    brokers in controller mode, `local/rocketmq_engine.py`)."""

    controller_remoting_port: int = 9879
    """The controllers' RocketMQ remoting port (engine rocketmq: the brokers' controllerAddr)."""

    cluster_name: str = "DefaultCluster"
    broker_name: str = "broker-a"

    controller_hosts: tuple[str, ...] = ("127.0.1.1", "127.0.1.2", "127.0.1.3")
    """Stable controller addresses: a restarted controller keeps its address
    because Raft members are named by address (DESIGN.md §2)."""

    controller_raft_port: int = 9880
    controller_api_port: int = 9878
    namesrv_port: int = 9876
    """RocketMQ name server of every controller node (its own 127.0.1.x)."""

    master_endpoint_host: str = "127.0.1.10"
    master_endpoint_port: int = 10911
    """The group's stable master address (`local status --json` `masterAddress`): the
    supervisor's forwarder to the current master's RocketMQ remoting port, named by the
    name servers as brokerId 0 (local/master_endpoint.py). RocketMQ's listen port."""
    master_endpoint_hold_ms: int = 5_000
    """How long the forwarder holds a new connection while no master is known."""

    broker_first_host: str = "127.0.0.10"
    broker_last_host: str = "127.0.0.254"
    """Brokers take addresses from this range; a restarted broker takes the
    next unused one, like a rescheduled pod."""

    broker_client_port: int = 10911
    """HA port is +1, HTTP status port is +2 (docs/architecture.md)."""

    proxy_grpc_port: int = 8081
    proxy_remoting_port: int = 8080
    """Engine rocketmq: the stock RocketMQ proxy's gRPC port (the RocketMQ 5 SDKs; `local
    status --json` grpcEndpoint) and its remoting port, RocketMQ's defaults. The proxy binds
    both on every interface (docs/local.md)."""

    restart_initial_delay_ms: int = 200
    """Delay before the first restart of a child that crashed after running a
    while. Short, so a killed broker is back quickly (failover does not wait for
    it: the controller elects from the SyncStateSet)."""

    restart_max_delay_ms: int = 10_000
    """Upper bound of the doubling backoff of a crash-looping child."""

    restart_multiplier: float = 2.0
    restart_reset_after_ms: int = 30_000
    """A child that ran at least this long before exiting starts its backoff anew."""

    stop_timeout_ms: int = 5_000
    """SIGTERM → SIGKILL grace for each child on `down` / Ctrl-C."""

    poll_interval_ms: int = 1_000
    """Status refresh and state-file cadence."""

    http_timeout_ms: int = 800
    """One status request to a controller or broker."""

    controller_ready_timeout_ms: int = 15_000
    """How long brokers wait for a controller leader before starting anyway."""

    up_wait_timeout_ms: int = 60_000
    """`up --detach` waits this long for the group to have a master."""

    report_inactive: bool = True
    """Tell the controller at once when a broker process exits
    (POST /v1/brokers/inactive, DESIGN.md §2.3), so failover does not wait for
    a heartbeat timeout."""

    launcher: tuple[str, ...] = field(default_factory=default_launcher)
    """Command prefix of every child (`… controller …`, `… broker …`). Tests
    swap in stand-ins; users never need to."""

    tls: str = "disabled"
    """RocketMQ's `tls.server.mode` of the runtime's remoting addresses (the name servers,
    the controllers' remoting port, the stable master address, the brokers' remoting
    ports): disabled, permissive (plaintext and TLS clients on one port) or enforcing;
    `up` then makes a CA and a server certificate under DIR/tls/ (`local status --json`
    caFile; docs/local.md "TLS"). Under --engine rocketmq: the stock brokers' remoting ports
    and the stock proxy's ports (rocketmq_engine.stock_tls)."""

    tls_http: bool = False
    """`--set local.tlsHttp=true`: the brokers' HTTP ports (probes, `/v1/status`, `/metrics`)
    serve HTTPS only (`brokergroup broker --http-tls`), read by the supervisor and `local
    status` verifying the CA. Needs local.tls other than disabled (the certificates); off by
    default (docs/security.md)."""

    node_gid_base: int = 0
    """`--set local.nodeGidBase=N` (N > 0, root only; 0: off): every controller and broker
    process runs in a group id of its own (the uid stays), controller node n in N + n and
    broker slot s in N + (controllers) + 1 + s (`node_gids`), kept across restarts and
    recorded in state.json (`gid`). What the `local-rocketmq` chaos target sets: a stock
    RocketMQ broker dials every link from 127.0.0.1, so only its group tells a partition
    which node sent a packet (docs/reliability.md "Every link of a stock node")."""

    broker_settings: tuple[tuple[str, str], ...] = ()
    controller_settings: tuple[tuple[str, str], ...] = ()

    def validate(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.broker_count < 1:
            raise ConfigError(f"--brokers must be at least 1, got {self.broker_count}")
        if not 1 <= self.groups <= MAX_GROUPS:
            raise ConfigError(f"--groups must be 1 to {MAX_GROUPS}, got {self.groups}")
        if self.groups > 1 and self.engine != "builtin":
            raise ConfigError(
                "--groups above 1 needs --engine builtin (not wired for stock brokers)"
            )
        if self.tls not in TLS_MODES:
            raise ConfigError(f"local.tls {self.tls!r} is not one of {', '.join(TLS_MODES)}")
        if self.tls_http and self.engine != "builtin":
            raise ConfigError(
                "local.tlsHttp needs --engine builtin: stock RocketMQ brokers have no HTTP "
                "port (local.tls alone covers their remoting ports and the stock proxy)"
            )
        if self.tls_http and self.tls == "disabled":
            raise ConfigError(
                "local.tlsHttp needs local.tls=permissive or enforcing (its certificates)"
            )
        if len(self.controller_hosts) < 1:
            raise ConfigError("controllerHosts must name at least one address")
        if len(set(self.controller_hosts)) != len(self.controller_hosts):
            raise ConfigError(f"controllerHosts repeat an address: {self.controller_hosts}")
        for host in (
            *self.controller_hosts,
            self.broker_first_host,
            self.broker_last_host,
            self.master_endpoint_host,
        ):
            try:
                address = IPv4Address(host)
            except ValueError as exc:
                raise ConfigError(f"{host!r} is not an IPv4 address") from exc
            if address not in LOCAL_RUNTIME_NETWORK:
                raise ConfigError(
                    f"{host} is outside {LOCAL_RUNTIME_NETWORK}: the local runtime stays there "
                    "so it never collides with tests, which use 127.0.2.0/24 and above"
                )
        first, last = IPv4Address(self.broker_first_host), IPv4Address(self.broker_last_host)
        if last < first:
            raise ConfigError(f"brokerLastHost {last} is below brokerFirstHost {first}")
        pool_size = int(last) - int(first) + 1
        brokers = self.broker_count * self.groups
        if pool_size < 2 * brokers:
            raise ConfigError(
                f"the broker address range {first}-{last} has {pool_size} addresses; "
                f"{brokers} brokers need at least {2 * brokers} so a "
                "restarted broker can always move to an unused one"
            )
        for host in self.controller_hosts:
            if first <= IPv4Address(host) <= last:
                raise ConfigError(f"controller address {host} lies in the broker range")
        endpoint = IPv4Address(self.master_endpoint_host)
        if first <= endpoint <= last or self.master_endpoint_host in self.controller_hosts:
            raise ConfigError(
                f"masterEndpointHost {endpoint} must be neither a controller address nor in "
                "the broker range (a broker restarted there would collide with it)"
            )
        for name, port in (
            ("controllerRaftPort", self.controller_raft_port),
            ("controllerApiPort", self.controller_api_port),
            ("namesrvPort", self.namesrv_port),
            ("controllerRemotingPort", self.controller_remoting_port),
            ("brokerClientPort", self.broker_client_port),
            ("masterEndpointPort", self.master_endpoint_port),
            ("proxyGrpcPort", self.proxy_grpc_port),
            ("proxyRemotingPort", self.proxy_remoting_port),
        ):
            if not 1 <= port <= 65533:
                raise ConfigError(f"{name} {port} is not a usable port")
        if self.controller_raft_port == self.controller_api_port:
            raise ConfigError("controllerRaftPort and controllerApiPort must differ")
        if not 0 < self.restart_initial_delay_ms <= self.restart_max_delay_ms:
            raise ConfigError(
                f"need 0 < restartInitialDelayMs ({self.restart_initial_delay_ms}) <= "
                f"restartMaxDelayMs ({self.restart_max_delay_ms})"
            )
        if self.restart_multiplier < 1.0:
            raise ConfigError(f"restartMultiplier must be >= 1, got {self.restart_multiplier}")
        for name, value in (
            ("stopTimeoutMs", self.stop_timeout_ms),
            ("pollIntervalMs", self.poll_interval_ms),
            ("httpTimeoutMs", self.http_timeout_ms),
            ("upWaitTimeoutMs", self.up_wait_timeout_ms),
            ("restartResetAfterMs", self.restart_reset_after_ms),
            ("masterEndpointHoldMs", self.master_endpoint_hold_ms),
        ):
            if value <= 0:
                raise ConfigError(f"{name} must be positive, got {value}")
        if self.controller_ready_timeout_ms < 0:
            raise ConfigError("controllerReadyTimeoutMs must not be negative")
        if not self.launcher:
            raise ConfigError("launcher must not be empty")
        if self.node_gid_base:
            last_gid = self.node_gid_base + len(self.controller_hosts) + brokers
            if self.node_gid_base < 0 or last_gid > MAX_GID:
                raise ConfigError(
                    f"local.nodeGidBase {self.node_gid_base}: its groups run to {last_gid}; "
                    f"need 0 < nodeGidBase and the last at most {MAX_GID} (0 turns it off)"
                )
            if os.geteuid() != 0:
                raise ConfigError(
                    "local.nodeGidBase needs root: a child's group is set with setgid"
                )

    # --- process groups (local.nodeGidBase) ------------------------------------

    def controller_gid(self, node_id: int) -> int | None:
        """Controller node `node_id`'s own group (1-based; None: local.nodeGidBase off)."""
        return node_gids(self.node_gid_base, len(self.controller_hosts), 0)[0][node_id - 1]

    def broker_gid(self, slot: int) -> int | None:
        """Broker slot `slot`'s own group (None: local.nodeGidBase off)."""
        slots = self.broker_count * self.groups
        return node_gids(self.node_gid_base, len(self.controller_hosts), slots)[1][slot]

    # --- addresses derived from the plan -------------------------------------

    @property
    def controller_peers(self) -> tuple[str, ...]:
        return tuple(f"{h}:{self.controller_raft_port}" for h in self.controller_hosts)

    @property
    def controller_api_addresses(self) -> tuple[str, ...]:
        return tuple(f"{h}:{self.controller_api_port}" for h in self.controller_hosts)

    @property
    def namesrv_address(self) -> str:
        """RocketMQ's namesrvAddr: every node's name server, ';'-separated."""
        return ";".join(f"{h}:{self.namesrv_port}" for h in self.controller_hosts)

    @property
    def master_endpoint_address(self) -> str:
        """The stable master address clients get as brokerId 0 (`masterAddress`)."""
        return f"{self.master_endpoint_host}:{self.master_endpoint_port}"

    def broker_remoting_port(self) -> int:
        """Where the group's brokers serve RocketMQ clients: the built-in broker's remoting
        port (client port + 3), a stock broker's listen port."""
        return self.broker_client_port + (0 if self.engine == "rocketmq" else 3)

    @property
    def proxy_grpc_endpoint(self) -> str:
        """Engine rocketmq: where the RocketMQ 5 SDKs reach the stock proxy (`grpcEndpoint`):
        the proxy listens on every interface, the group's stable host names it."""
        return f"{self.master_endpoint_host}:{self.proxy_grpc_port}"

    def broker_grpc_port(self) -> int:
        """The built-in broker's gRPC port (client port + 4), where the stable gRPC endpoint
        forwards (docs/grpc.md)."""
        return self.broker_client_port + 4

    def broker_http_port(self) -> int:
        return self.broker_client_port + 2

    @property
    def group_names(self) -> tuple[str, ...]:
        """The brokerNames of the groups: `broker_name` first, then the next letters
        (broker-a, broker-b, …; a name not ending in -a gets -b, -c, … appended)."""
        base, first = self.broker_name, "a"
        if base.endswith("-a"):
            base = base[:-2]
            return tuple(f"{base}-{chr(ord(first) + g)}" for g in range(self.groups))
        return (base, *(f"{base}-{chr(ord(first) + g)}" for g in range(1, self.groups)))

    def group_of_slot(self, slot: int) -> int:
        """Broker slots run group by group: slots 0..N-1 the first group, N..2N-1 the next."""
        return slot // self.broker_count

    # --- JSON (DIR/config.json, read by the detached supervisor) ---------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "groups" and value == 1:
                continue  # one group: config.json as it always was
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            out[_camel(f.name)] = value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LocalConfig:
        kwargs: dict[str, Any] = {}
        by_camel = {_camel(f.name): f for f in dataclasses.fields(cls)}
        for key, value in data.items():
            f = by_camel.get(key)
            if f is None:
                continue  # written by a newer version; ignore
            if f.name == "root_dir":
                kwargs[f.name] = Path(value)
            elif f.name in ("broker_settings", "controller_settings"):
                kwargs[f.name] = tuple((str(k), str(v)) for k, v in value)
            elif f.name in ("controller_hosts", "launcher"):
                kwargs[f.name] = tuple(str(v) for v in value)
            else:
                kwargs[f.name] = value
        config = cls(**kwargs)
        config.validate()
        return config


def node_gids(
    base: int, controllers: int, broker_slots: int
) -> tuple[tuple[int | None, ...], tuple[int | None, ...]]:
    """(each controller node's group, each broker slot's) under local.nodeGidBase `base`
    (`LocalConfig.node_gid_base`): N + n for node n, N + controllers + 1 + s for slot s;
    all None when `base` is 0. A chaos target computes the same before anything starts."""
    if not base:
        return (None,) * controllers, (None,) * broker_slots
    return (
        tuple(base + n for n in range(1, controllers + 1)),
        tuple(base + controllers + 1 + s for s in range(broker_slots)),
    )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_SETTABLE: dict[str, dataclasses.Field[Any]] = {
    _camel(f.name): f
    for f in dataclasses.fields(LocalConfig)
    if f.name
    not in (
        "root_dir",
        "broker_count",
        "groups",
        "engine",
        "broker_settings",
        "controller_settings",
    )
}


def _parse_field(f: dataclasses.Field[Any], key: str, text: str) -> Any:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
        if kind == "bool":
            lowered = text.lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError(text)
        if kind == "str":
            return text
        if f.name == "launcher":
            return tuple(shlex.split(text))
        if f.name == "controller_hosts":
            return tuple(h.strip() for h in text.split(",") if h.strip())
    except ValueError as exc:
        raise ConfigError(f"local.{key}: cannot use {text!r} ({kind} expected)") from exc
    raise AssertionError(f"no parser for LocalConfig.{f.name} ({kind})")


def build_config(
    root_dir: Path,
    broker_count: int,
    settings: Sequence[str],
    engine: str = "builtin",
    groups: int = 1,
) -> LocalConfig:
    """`local up` arguments → validated `LocalConfig` (prefix routing above)."""
    local_overrides: dict[str, Any] = {}
    broker_settings: list[tuple[str, str]] = []
    controller_settings: list[tuple[str, str]] = []
    for item in settings:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value")
        if key.startswith("local."):
            name = key.removeprefix("local.")
            f = _SETTABLE.get(name)
            if f is None:
                known = ", ".join(sorted(_SETTABLE))
                raise ConfigError(f"--set {key}: unknown local setting; known: {known}")
            local_overrides[f.name] = _parse_field(f, name, value)
        elif key.startswith("controller."):
            controller_settings.append((key.removeprefix("controller."), value))
        else:
            broker_settings.append((key.removeprefix("broker."), value))
    config = LocalConfig(
        root_dir=root_dir.expanduser().resolve(),
        broker_count=broker_count,
        groups=groups,
        engine=engine,
        broker_settings=tuple(broker_settings),
        controller_settings=tuple(controller_settings),
        **local_overrides,
    )
    config.validate()
    return config
