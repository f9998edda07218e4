"""Controller node settings (DESIGN.md §2, §10): one frozen, typed object
loaded once from `controller.json` (camelCase) and command-line flags, with
the relationships pysyncobj and the liveness rules need checked at start-up."""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from brokergroup_controller.credentials import CredentialKeys
from brokergroup_controller.master_address import (
    MasterAddressPolicy,
    load_policy,
    parse_master_only_routes,
)
from brokergroup_controller.raft_settings import RaftSettings, parse_peers
from brokergroup_remoting.tls import ServerTls, client_context, load_server_tls, server_context

DEFAULT_API_PORT = 9878
DEFAULT_RAFT_PORT = 9880
#: The RocketMQ controller remoting port (RocketMQ's own controller uses 9878, our HTTP API).
DEFAULT_REMOTING_PORT = 9879


@dataclass(frozen=True)
class ControllerConfig:
    """Everything a controller node reads at start-up, validated once.

    controller.json uses the camelCase of each field name (e.g.
    `enableElectUncleanMaster`); command-line flags override the file.
    """

    node_id: int
    """1-based index of this node's own address in `peers`."""
    peers: tuple[str, ...]
    """Stable `host:raftPort` of every node (StatefulSet DNS names, never pod IPs)."""
    data_dir: str
    api_port: int = DEFAULT_API_PORT
    bind_address: str = "0.0.0.0"
    """Bind host of the HTTP API (token-authenticated, so all interfaces is the default)."""
    raft_bind_address: str | None = None
    """Bind host of the Raft port; None = the host of this node's own peer address.
    Never all interfaces (DESIGN.md §11): the Raft port is internal."""
    token: str | None = None
    """The admin credential (operator, `brokergroup admin`): may call everything.
    None only with insecure_no_auth."""
    broker_credential_root: str | None = None
    """Root secret that broker and client credentials are derived from
    (credentials.py: HMAC of clusterName/brokerName); only controllers and the
    operator hold it. None only with insecure_no_auth."""
    raft_password: str | None = None
    """Shared secret of the Raft port (pysyncobj `password`: every frame is a Fernet
    token, authenticated before it is unpickled); None only with insecure_no_auth."""
    insecure_no_auth: bool = False
    """Dev only: no API token and an unauthenticated Raft port (anyone who reaches it
    can run code as the controller)."""
    enable_elect_unclean_master: bool = False
    """Elect outside the SyncStateSet when no member is alive: availability over no-loss."""
    heartbeat_timeout_ms: int = 2000
    """Grace a new leader gives every broker; timeout of heartbeats that carry none."""
    connection_close_grace_ms: int = 750
    """After a broker's heartbeat connection closes, wait this long for a new heartbeat."""
    liveness_tick_ms: int = 100
    election_retry_initial_ms: int = 100
    election_retry_max_ms: int = 2000
    commit_timeout_ms: int = 3000
    """Bound on one Raft commit; past it the caller gets COMMIT_TIMEOUT (outcome unknown)."""
    forward_timeout_ms: int = 5000
    watch_max_timeout_ms: int = 60000
    raft_min_timeout_ms: int = 200
    raft_max_timeout_ms: int = 400
    append_entries_period_ms: int = 25
    connection_timeout_ms: int = 2000
    connection_retry_ms: int = 500
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 300.0
    raft_fsync: bool = True
    """fdatasync the Raft journal before acknowledging (power-loss safe)."""
    dns_cache_ms: int = 2000
    remoting_port: int = DEFAULT_REMOTING_PORT
    """RocketMQ controller remoting port for stock brokers and mqadmin (0: closed)."""
    remoting_credentials_file: str | None = None
    """JSON {"accessKey", "secretKey"} every remoting request must be signed with; without
    it the remoting port stays closed unless insecure_no_auth."""
    namesrv_port: int = 9876
    """RocketMQ name server port (docs/controller.md "Name server"); 0 turns it off."""
    namesrv_bind_address: str | None = None
    """Bind host of the name server; None = the HTTP API's bind address."""
    namesrv_key_file: str | None = None
    """JSON file with the clients' accessKey/secretKey (brokergroup_remoting.keys); without it the
    name server runs only under insecure_no_auth."""
    namesrv_master_address_template: str | None = None
    """The stable address routes name as a managed group's master (brokerId 0), with
    `{cluster}`, `{broker}`, `{port}` filled in (master_address.py); None = the
    master's own address, which clients follow only at their 30 s route refresh."""
    namesrv_master_addresses: tuple[str, ...] = ()
    """`CLUSTER/BROKER=HOST:PORT` fixed master addresses, ahead of the template."""
    namesrv_master_only_routes: str = "stock"
    """Which groups with a stable master address topic routes name by that address alone,
    no slaves (namesrv/routes.py `master_only_for`): `stock` the groups of stock RocketMQ
    brokers (registered through the remoting port), which then never count one client twice
    after a failover, at the cost of reads from slaves; `all` every group (needs a template
    or fixed address); `none` no group. controller.json's true/false read as all/none."""
    remoting_tls_mode: str = "disabled"
    """RocketMQ's `tls.server.mode` of the name server and the remoting port: disabled,
    permissive (plaintext and TLS clients on one port) or enforcing (docs/security.md
    "TLS"); anything but disabled needs `tls_cert_file` and `tls_key_file`."""
    tls_cert_file: str | None = None
    """PEM certificate (chain) the TLS ports present."""
    tls_key_file: str | None = None
    """PEM private key of `tls_cert_file`."""
    tls_ca_file: str | None = None
    """The CA of the internal links (`--tls-ca-file`): with `api_tls`, the controllers
    verify each other against it when forwarding to the leader and present
    `tls_cert_file` (mutual TLS), and the API verifies a client certificate against it
    when one is presented (brokers and controllers do; probes and the admin CLI hold none
    and authenticate by their bearer credential alone)."""
    api_tls: bool = False
    """The HTTP API serves HTTPS only (`--api-tls`; needs the certificate, key and CA).
    docs/security.md "TLS"."""

    def remoting_tls(self) -> ServerTls:
        """The name server's and remoting port's TLS (ValueError when it cannot load)."""
        return load_server_tls(self.remoting_tls_mode, self.tls_cert_file, self.tls_key_file)

    def api_server_tls(self) -> ssl.SSLContext | None:
        """The HTTP API's server context (None: plain HTTP): a client certificate is asked
        for and, when presented, must chain to `tls_ca_file` (CERT_OPTIONAL)."""
        if not self.api_tls:
            return None
        if not (self.tls_cert_file and self.tls_key_file and self.tls_ca_file):
            raise ValueError("--api-tls needs --tls-cert-file, --tls-key-file and --tls-ca-file")
        try:
            context = server_context(
                Path(self.tls_cert_file),
                Path(self.tls_key_file),
                client_ca_file=Path(self.tls_ca_file),
            )
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the API's TLS files: {exc}") from exc
        context.verify_mode = ssl.CERT_OPTIONAL
        return context

    def forward_tls(self) -> ssl.SSLContext | None:
        """The context of forwarding to the leader's HTTPS API (this node's certificate
        presented, the leader's verified against the CA); None: plain HTTP."""
        if not self.api_tls:
            return None
        try:
            return client_context(
                Path(str(self.tls_ca_file)),
                cert_file=Path(str(self.tls_cert_file)),
                key_file=Path(str(self.tls_key_file)),
            )
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load the API's TLS files: {exc}") from exc

    def master_address_policy(self) -> MasterAddressPolicy:
        return load_policy(
            self.namesrv_master_address_template,
            self.namesrv_master_addresses,
            self.namesrv_master_only_routes,
        )

    @property
    def self_address(self) -> str:
        return self.peers[self.node_id - 1]

    def api_address_of(self, raft_address: str) -> str:
        host = raft_address.rsplit(":", 1)[0]
        return f"{host}:{self.api_port}"

    def credential_keys(self) -> CredentialKeys | None:
        """What API credentials are checked against; None = insecure_no_auth."""
        if self.insecure_no_auth:
            return None
        assert self.token is not None and self.broker_credential_root is not None
        return CredentialKeys(self.token, self.broker_credential_root)

    def raft_settings(self) -> RaftSettings:
        return RaftSettings(
            self_address=self.self_address,
            peers=self.peers,
            data_dir=self.data_dir,
            bind_host=self.raft_bind_address,
            password=self.raft_password,
            raft_min_timeout_s=self.raft_min_timeout_ms / 1000,
            raft_max_timeout_s=self.raft_max_timeout_ms / 1000,
            append_entries_period_s=self.append_entries_period_ms / 1000,
            connection_timeout_s=self.connection_timeout_ms / 1000,
            connection_retry_s=self.connection_retry_ms / 1000,
            log_compaction_min_entries=self.log_compaction_min_entries,
            log_compaction_min_time_s=self.log_compaction_min_time_s,
            fsync=self.raft_fsync,
            dns_cache_s=self.dns_cache_ms / 1000,
        )

    def validate(self) -> None:
        """Relationships between settings (STYLE.md §6); ValueError names the rule."""
        if not self.peers:
            raise ValueError("--peers is empty")
        if not 1 <= self.node_id <= len(self.peers):
            raise ValueError(f"--node-id {self.node_id} is not in 1..{len(self.peers)}")
        if not 0 < self.api_port < 65536:
            raise ValueError(f"apiPort {self.api_port} is not a TCP port")
        if not 0 <= self.remoting_port < 65536 or self.remoting_port == self.api_port:
            raise ValueError(f"remotingPort {self.remoting_port} is not a free TCP port (0: off)")
        if not 0 <= self.namesrv_port < 65536:
            raise ValueError(f"namesrvPort {self.namesrv_port} is not a TCP port (0: off)")
        if self.namesrv_port and self.namesrv_port in (self.api_port, self.remoting_port):
            raise ValueError(f"namesrvPort {self.namesrv_port} is already the API or remoting port")
        self.master_address_policy()  # a bad template or address stops start-up here
        self.remoting_tls()  # a bad mode or an unreadable certificate too
        self.api_server_tls()
        self.forward_tls()
        if self.insecure_no_auth and (
            self.token is not None
            or self.raft_password is not None
            or self.broker_credential_root is not None
        ):
            raise ValueError("--insecure-no-auth cannot be combined with a token or other secret")
        if self.token is None and not self.insecure_no_auth:
            raise ValueError("a token is required (--token-file) unless --insecure-no-auth")
        if self.token is not None and not self.token.strip():
            raise ValueError("the token file is empty")
        if self.broker_credential_root is None and not self.insecure_no_auth:
            raise ValueError(
                "a broker credential root is required (--broker-credential-root-file) "
                "unless --insecure-no-auth"
            )
        if self.broker_credential_root is not None and len(self.broker_credential_root) < 16:
            raise ValueError("the broker credential root file must hold at least 16 characters")
        if (
            self.token is not None
            and self.broker_credential_root is not None
            and self.token.strip() == self.broker_credential_root.strip()
        ):
            raise ValueError("the admin token and the broker credential root must differ")
        if self.raft_password is None and not self.insecure_no_auth:
            raise ValueError(
                "a Raft password is required (--raft-password-file) unless --insecure-no-auth"
            )
        if self.raft_password is not None and len(self.raft_password) < 16:
            raise ValueError("the Raft password file must hold at least 16 characters")
        if self.liveness_tick_ms <= 0 or self.liveness_tick_ms >= self.heartbeat_timeout_ms:
            raise ValueError("need 0 < livenessTickMs < heartbeatTimeoutMs")
        if self.connection_close_grace_ms >= self.heartbeat_timeout_ms:
            raise ValueError("connectionCloseGraceMs must be below heartbeatTimeoutMs")
        if not 0 < self.election_retry_initial_ms <= self.election_retry_max_ms:
            raise ValueError("need 0 < electionRetryInitialMs <= electionRetryMaxMs")
        if self.commit_timeout_ms <= self.raft_max_timeout_ms:
            raise ValueError("commitTimeoutMs must exceed raftMaxTimeoutMs (survive one election)")
        if self.forward_timeout_ms <= self.commit_timeout_ms:
            raise ValueError("forwardTimeoutMs must exceed commitTimeoutMs")
        self.raft_settings().validate()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


_CONFIG_FIELDS = {_camel(f.name): f for f in fields(ControllerConfig)}
# Identity and secrets come from flags and files, never from controller.json.
_FILE_ONLY_EXCLUDED = {
    "token", "brokerCredentialRoot", "raftPassword", "nodeId", "peers", "namesrvKeyFile",
}  # fmt: skip


def config_from_sources(
    file_values: Mapping[str, Any], overrides: Mapping[str, Any]
) -> ControllerConfig:
    """Build the config from controller.json values (camelCase) and flag overrides
    (snake_case field names, None = not given). Raises ValueError on unknown or
    wrongly-typed settings and on broken relationships."""
    values: dict[str, Any] = {}
    for key, raw in file_values.items():
        field = _CONFIG_FIELDS.get(key)
        if field is None or key in _FILE_ONLY_EXCLUDED:
            raise ValueError(
                f"unknown controller setting {key!r} (node identity and the token come from flags)"
            )
        values[field.name] = raw
    values.update({k: v for k, v in overrides.items() if v is not None})
    if "peers" in values:
        values["peers"] = parse_peers(values["peers"])
    if "namesrv_master_only_routes" in values:  # true/false (its first form) or a mode
        values["namesrv_master_only_routes"] = parse_master_only_routes(
            values["namesrv_master_only_routes"]
        ).value
    addresses = values.get("namesrv_master_addresses")
    if addresses is not None:
        if not isinstance(addresses, list | tuple) or not all(
            isinstance(a, str) for a in addresses
        ):
            raise ValueError("setting namesrvMasterAddresses must be a list of strings")
        values["namesrv_master_addresses"] = tuple(addresses)
    for f in fields(ControllerConfig):
        if f.name not in values:
            continue
        value = values[f.name]
        expected: dict[str, type | tuple[type, ...]] = {
            "int": int,
            "float": (int, float),
            "bool": bool,
        }
        kind = expected.get(str(f.type))
        if kind is not None and (
            not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))
        ):
            raise ValueError(f"setting {_camel(f.name)} must be {f.type}, got {value!r}")
    config = ControllerConfig(**values)
    config.validate()
    return config


def read_secret_file(path: str, what: str = "token") -> str:
    """A secret from a file (a mounted Secret key or the local runtime's file)."""
    with open(path, encoding="utf-8") as f:
        secret = f.read().strip()
    if not secret:
        raise ValueError(f"{what} file {path} is empty")
    return secret


def read_token_file(path: str) -> str:
    return read_secret_file(path, "token")


def load_config(
    *,
    config_path: str | None,
    node_id: int,
    peers: str,
    data_dir: str,
    api_port: int | None = None,
    bind_address: str | None = None,
    raft_bind_address: str | None = None,
    token_file: str | None = None,
    raft_password_file: str | None = None,
    broker_credential_root_file: str | None = None,
    insecure_no_auth: bool = False,
    remoting_port: int | None = None,
    remoting_credentials_file: str | None = None,
    namesrv_key_file: str | None = None,
    namesrv_port: int | None = None,
    namesrv_master_address_template: str | None = None,
    namesrv_master_addresses: list[str] | None = None,
    namesrv_master_only_routes: str | None = None,
    remoting_tls_mode: str | None = None,
    tls_cert_file: str | None = None,
    tls_key_file: str | None = None,
    tls_ca_file: str | None = None,
    api_tls: bool = False,
) -> ControllerConfig:
    file_values: dict[str, Any] = {}
    if config_path:
        with open(config_path, encoding="utf-8") as f:
            loaded = json.load(f)
        if not isinstance(loaded, dict):
            raise ValueError(f"{config_path} must hold a JSON object")
        file_values = loaded
    token = read_token_file(token_file) if token_file else None
    raft_password = (
        read_secret_file(raft_password_file, "Raft password") if raft_password_file else None
    )
    if namesrv_key_file:
        _read_namesrv_keys(namesrv_key_file)  # a broken key file stops start-up here
    root = (
        read_secret_file(broker_credential_root_file, "broker credential root")
        if broker_credential_root_file
        else None
    )
    return config_from_sources(
        file_values,
        {
            "node_id": node_id,
            "peers": peers,
            "data_dir": os.path.abspath(data_dir),
            "api_port": api_port,
            "bind_address": bind_address,
            "raft_bind_address": raft_bind_address,
            "token": token,
            "raft_password": raft_password,
            "broker_credential_root": root,
            "insecure_no_auth": insecure_no_auth or None,
            "remoting_port": remoting_port,
            "remoting_credentials_file": remoting_credentials_file
            and os.path.abspath(remoting_credentials_file),
            "namesrv_key_file": os.path.abspath(namesrv_key_file) if namesrv_key_file else None,
            "namesrv_port": namesrv_port,
            "namesrv_master_address_template": namesrv_master_address_template,
            "namesrv_master_addresses": namesrv_master_addresses or None,
            "namesrv_master_only_routes": namesrv_master_only_routes,
            "remoting_tls_mode": remoting_tls_mode,
            "tls_cert_file": tls_cert_file and os.path.abspath(tls_cert_file),
            "tls_key_file": tls_key_file and os.path.abspath(tls_key_file),
            "tls_ca_file": tls_ca_file and os.path.abspath(tls_ca_file),
            "api_tls": api_tls or None,
        },
    )


def _read_namesrv_keys(path: str) -> None:
    from brokergroup_remoting.keys import read_key_file

    read_key_file(path, "name server key file")
