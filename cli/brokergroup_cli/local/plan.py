"""What `local up` runs and where its files live (pure).

Files under DIR (`--dir`, default ~/.brokergroup/local):

    token                    the admin credential of the controllers' API (0600):
                             `brokergroup admin` and the supervisor use it
    broker-credential-root   root secret broker and client credentials are
                             derived from (0600); only the controllers read it
    broker-credential        the group's broker credential (derived, 0600):
                             the only credential brokers get
    client-credential        the group's client credential (derived, 0600):
                             reads of this group, for produce/consume
    raft-password            shared secret of the controllers' Raft port (0600)
    ha-secret                HMAC key brokers prove on the HA port (0600)
    namesrv-keys.json        the release's RocketMQ key pair (accessKey/secretKey, 0600): the
                             admin pair of the name servers and the controllers' remoting
                             port (mqadmin's controller commands); never a broker's
    broker-keys.json         the group's RocketMQ BROKER pair (derived from the root, 0600):
                             brokers sign their registrations with it
    client-keys.json         the group's RocketMQ CLIENT pair (derived, 0600): what
                             applications sign with (`local status --json` accessKey)
    config.json              the resolved LocalConfig (the detached supervisor reads it)
    controller.json          controller settings from `--set controller.x=…` (if any)
    state.json               every child's pid/address/role, rewritten by the supervisor
    supervisor.pid           pid of the running supervisor
    controllers/<n>/         controller n's data dir (Raft journal, dump)
    brokers/<slot>/          broker slot's data dir: store + identity files, kept
                             across restarts so the broker keeps its BrokerId
    logs/                    supervisor.log, controller-<n>.log, broker-<slot>.log
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from brokergroup_cli.local.config import LocalConfig
from brokergroup_controller.credentials import Role


@dataclass(frozen=True)
class Layout:
    root: Path

    @property
    def token_file(self) -> Path:
        return self.root / "token"

    @property
    def tls_dir(self) -> Path:
        return self.root / "tls"

    @property
    def ca_file(self) -> Path:
        return self.tls_dir / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        return self.tls_dir / "ca.key"

    @property
    def tls_cert_file(self) -> Path:
        return self.tls_dir / "server.crt"

    @property
    def tls_key_file(self) -> Path:
        return self.tls_dir / "server.key"

    def tls_argv(self, config: LocalConfig, *, broker: bool) -> list[str]:
        """The TLS flags of a controller or a broker (none while local.tls is disabled).
        Client-facing ports (remoting, name server, the broker's client port) take the mode;
        every process holds the certificate and the CA, so the internal links are mutual
        TLS: the controllers' HTTPS API and their forwarding, broker → controller, HA."""
        if config.tls == "disabled":
            return []
        argv = ["--remoting-tls-mode", config.tls, "--tls-cert-file", str(self.tls_cert_file),
                "--tls-key-file", str(self.tls_key_file), "--tls-ca-file", str(self.ca_file)]  # fmt: skip
        if not broker:
            return [*argv, "--api-tls"]
        return [*argv, "--controller-tls", *(["--http-tls"] if config.tls_http else [])]

    @property
    def broker_credential_root_file(self) -> Path:
        return self.root / "broker-credential-root"

    @property
    def broker_credential_file(self) -> Path:
        return self.root / "broker-credential"

    @property
    def client_credential_file(self) -> Path:
        return self.root / "client-credential"

    @property
    def raft_password_file(self) -> Path:
        return self.root / "raft-password"

    @property
    def ha_secret_file(self) -> Path:
        return self.root / "ha-secret"

    @property
    def namesrv_key_file(self) -> Path:
        return self.root / "namesrv-keys.json"

    @property
    def broker_key_file(self) -> Path:
        return self.root / "broker-keys.json"

    @property
    def client_key_file(self) -> Path:
        return self.root / "client-keys.json"

    @property
    def secret_files(self) -> tuple[Path, ...]:
        """Every secret the runtime generates once and keeps (DESIGN.md §11)."""
        return (
            self.token_file,
            self.broker_credential_root_file,
            self.raft_password_file,
            self.ha_secret_file,
        )

    def derived_credentials(self, config: LocalConfig) -> dict[Path, tuple[Role, str, str]]:
        """Files holding the groups' derived credentials: path → (role, cluster, broker)."""
        out = {}
        for name in config.group_names:
            group = (config.cluster_name, name)
            out[self.group_file(config, name, self.broker_credential_file)] = (Role.BROKER, *group)
            out[self.group_file(config, name, self.client_credential_file)] = (Role.CLIENT, *group)
        return out

    def derived_key_pairs(self, config: LocalConfig) -> dict[Path, tuple[Role, str, str]]:
        """Files holding the groups' derived RocketMQ key pairs: path → (role, cluster,
        broker). DESIGN.md §11: a broker signs with its group's pair, never the release's."""
        out = {}
        for name in config.group_names:
            group = (config.cluster_name, name)
            out[self.group_file(config, name, self.broker_key_file)] = (Role.BROKER, *group)
            out[self.group_file(config, name, self.client_key_file)] = (Role.CLIENT, *group)
        return out

    def group_file(self, config: LocalConfig, broker_name: str, first_group_file: Path) -> Path:
        """A group's copy of a per-group file: the first group's at DIR/<file> (as with one
        group), another's at DIR/groups/<brokerName>/<file> (`local up --groups`)."""
        if broker_name == config.group_names[0]:
            return first_group_file
        return self.root / "groups" / broker_name / first_group_file.name

    @property
    def config_file(self) -> Path:
        return self.root / "config.json"

    @property
    def controller_config_file(self) -> Path:
        return self.root / "controller.json"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def pid_file(self) -> Path:
        return self.root / "supervisor.pid"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def supervisor_log(self) -> Path:
        return self.logs_dir / "supervisor.log"

    def controller_data_dir(self, node_id: int) -> Path:
        return self.root / "controllers" / str(node_id)

    def broker_data_dir(self, slot: int) -> Path:
        return self.root / "brokers" / str(slot)

    def controller_log(self, node_id: int) -> Path:
        return self.logs_dir / f"controller-{node_id}.log"

    def broker_log(self, slot: int) -> Path:
        return self.logs_dir / f"broker-{slot}.log"


def controller_argv(config: LocalConfig, layout: Layout, node_id: int) -> list[str]:
    """Controller `node_id` (1-based index into the peers), bound to its stable address."""
    assert 1 <= node_id <= len(config.controller_hosts), node_id
    argv = [
        *config.launcher,
        "controller",
        "--node-id",
        str(node_id),
        "--peers",
        ",".join(config.controller_peers),
        "--data-dir",
        str(layout.controller_data_dir(node_id)),
        "--api-port",
        str(config.controller_api_port),
        "--bind-address",
        config.controller_hosts[node_id - 1],
        "--admin-token-file",
        str(layout.token_file),
        "--broker-credential-root-file",
        str(layout.broker_credential_root_file),
        "--raft-password-file",
        str(layout.raft_password_file),
        "--namesrv-key-file",
        str(layout.namesrv_key_file),
        "--namesrv-port",
        str(config.namesrv_port),
        # Routes name the supervisor's forwarder as the master (local/master_endpoint.py).
        "--namesrv-master-address",
        f"{config.cluster_name}/{config.broker_name}={config.master_endpoint_address}",
    ]
    if config.controller_settings:
        argv += ["--config", str(layout.controller_config_file)]
    return argv + layout.tls_argv(config, broker=False)


def broker_argv(config: LocalConfig, layout: Layout, slot: int, host: str) -> list[str]:
    """Broker `slot` bound to and advertising `host` (its current loopback address); the
    slot's group (`config.group_of_slot`) names its brokerName, credential and key pairs."""
    name = config.group_names[config.group_of_slot(slot)]
    argv = [
        *config.launcher,
        "broker",
        "--cluster-name",
        config.cluster_name,
        "--broker-name",
        name,
        "--data-dir",
        str(layout.broker_data_dir(slot)),
        "--controller-addresses",
        ",".join(config.controller_api_addresses),
        "--controller-token-file",
        str(layout.group_file(config, name, layout.broker_credential_file)),
        "--ha-secret-file",
        str(layout.ha_secret_file),
        "--bind-address",
        host,
        "--advertise-address",
        host,
        "--client-port",
        str(config.broker_client_port),
        # The RocketMQ remoting port (client port + 3) takes the group's broker and client
        # pairs; the broker pair signs the registrations with every name server. Topics
        # are created on first send locally.
        "--remoting-key-file",
        str(layout.group_file(config, name, layout.broker_key_file)),
        "--remoting-client-key-file",
        str(layout.group_file(config, name, layout.client_key_file)),
        "--namesrv-addresses",
        config.namesrv_address,
        "--set",
        "autoCreateTopicEnable=true",
        # Clients with enableMsgTrace have a trace topic to write to (RocketMQ's default
        # is off; a development runtime wants traces like its topics, at once).
        "--set",
        "traceTopicEnable=true",
    ]
    for key, value in config.broker_settings:
        argv += ["--set", f"{key}={value}"]
    return argv + layout.tls_argv(config, broker=True)


def controller_settings_json(config: LocalConfig) -> dict[str, object]:
    """DIR/controller.json from `--set controller.name=value` (numbers/bools typed)."""
    return {key: _json_scalar(value) for key, value in config.controller_settings}


def _json_scalar(text: str) -> object:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
