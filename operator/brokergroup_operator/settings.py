"""Operator-wide settings, from the environment (docs/kubernetes.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from brokergroup_controller.api import split_addresses
from brokergroup_operator.release_secret import OperatorSecrets


class SettingsError(ValueError):
    """A setting cannot be used; the message names the variable."""


@dataclass(frozen=True)
class OperatorSettings:
    controller_addresses: tuple[str, ...] = ()
    """BROKERGROUP_CONTROLLER_ADDRESSES: controller API host:port list."""
    token_file: Path | None = None
    """BROKERGROUP_TOKEN_FILE: the controller's admin token (a file, never a value)."""
    broker_credential_root_file: Path | None = None
    """BROKERGROUP_BROKER_CREDENTIAL_ROOT_FILE: the root each group's broker and client
    credentials are derived from (a file)."""
    ha_secret_file: Path | None = None
    """BROKERGROUP_HA_SECRET_FILE: the HA secret every group's Secret carries (a file)."""
    rocketmq_credentials_file: Path | None = None
    """BROKERGROUP_ROCKETMQ_CREDENTIALS_FILE: the controllers' RocketMQ admin key pair (JSON, a
    file). Given, the operator writes each group its own broker and client pairs, derived
    from the broker credential root; it never hands this one out."""
    release_secret: str = ""
    """BROKERGROUP_RELEASE_SECRET: `namespace/name` of the chart's release Secret; the
    operator creates it if absent (never rotates it) and reads the three secrets
    above from it instead of files (release_secret.py)."""
    release_secret_managed: bool = True
    """BROKERGROUP_RELEASE_SECRET_MANAGED: false when the user brought the release
    Secret (the chart's secrets.existingSecret): then it is read, never written."""
    image: str = ""
    """BROKERGROUP_IMAGE: broker image when a BrokerGroup names none."""
    rocketmq_image: str = ""
    """BROKERGROUP_ROCKETMQ_IMAGE: stock RocketMQ image for groups of spec.engine rocketmq
    that name none (make image-rocketmq)."""
    resync_s: float = 5.0
    """BROKERGROUP_RESYNC_SECONDS: re-read the controller at least this often
    even when its watch is quiet. Shorter: quicker repair of a missed change;
    longer: less load."""
    watch_timeout_ms: int = 5_000
    """Long-poll duration of the controller watch per pass."""
    apply_interval_s: float = 60.0
    """Owned objects are re-applied at least this often (and on every spec change)."""
    controller_timeout_s: float = 3.0
    """Budget of one controller request across all addresses."""
    operator_id: str = ""
    """BROKERGROUP_OPERATOR_ID: this operator's release, `<namespace>/<release>`
    (the chart sets it). A group whose spec.controller.release names another
    release is left alone (docs/kubernetes.md "Release scoping")."""
    deployment: str = ""
    """BROKERGROUP_OPERATOR_DEPLOYMENT: `<namespace>/<name>` of the Deployment
    running this operator (the chart sets it). When the operator stops and
    that Deployment is gone (`helm uninstall`), it lets go of its groups
    (finalizers removed, a Warning Event each) so deleting them later does not
    hang on an operator that no longer exists. Empty: never."""
    cleanup_timeout_s: float = 120.0
    """BROKERGROUP_CLEANUP_TIMEOUT_SECONDS: how long a deleted group's finalizer
    retries its cleanup before it releases the group with a Warning Event.
    Longer: more chances to clean the controller's BrokerIds; shorter: a
    deletion (or a namespace's) ends sooner when the controller is gone."""

    cluster_ca_secret: str = ""
    """BROKERGROUP_CLUSTER_CA_SECRET: `namespace/name` of the release's cluster CA Secret
    (ca.crt, ca.key, ca-bundle.crt, and after a renewal ca-previous.crt and ca-previous.key
    until the previous CA expires; tls_material.py). The operator creates and renews it
    unless BROKERGROUP_CLUSTER_CA_MANAGED is false (the user's own CA, Strimzi's
    generateCertificateAuthority: false). Empty: groups with spec.tls issuer operator wait."""
    cluster_ca_managed: bool = True
    """BROKERGROUP_CLUSTER_CA_MANAGED."""
    tls_check_s: float = 3600.0
    """BROKERGROUP_TLS_CHECK_SECONDS: each group's certificates are checked at least this
    often (and on every spec change or force-renew request); renewal happens renewalDays
    before expiry, so an hour is ample."""
    controller_tls: bool = False
    """BROKERGROUP_CONTROLLER_TLS: the release's name servers serve TLS, so brokers of a
    group with spec.tls register over TLS (the chart: tls.controllers.mode)."""
    controller_api_tls: bool = False
    """BROKERGROUP_CONTROLLER_API_TLS: the controllers serve their HTTP API over HTTPS only
    (controller --api-tls; the chart: tls.controllers.httpsApi). The operator verifies them
    against the cluster CA and presents a client certificate of its own; brokers of groups
    with spec.tls reach them with --controller-tls (mutual TLS); a group without spec.tls
    is refused (its brokers hold no certificate to verify the API with)."""
    controller_tls_secret: str = ""
    """BROKERGROUP_CONTROLLER_TLS_SECRET: `namespace/name` of the controllers' certificate
    Secret the operator keeps (tls.crt, tls.key, ca.crt), signed by the cluster CA."""
    controller_tls_names: tuple[str, ...] = ()
    """BROKERGROUP_CONTROLLER_TLS_NAMES: the controllers' certificate names besides their
    hosts in BROKERGROUP_CONTROLLER_ADDRESSES (the chart: the name server Service's)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> OperatorSettings:
        token = env.get("BROKERGROUP_TOKEN_FILE") or None
        try:
            resync = float(env.get("BROKERGROUP_RESYNC_SECONDS", "5"))
        except ValueError:
            raise SettingsError(
                f"BROKERGROUP_RESYNC_SECONDS must be a number, got "
                f"{env.get('BROKERGROUP_RESYNC_SECONDS')!r}"
            ) from None
        if resync <= 0:
            raise SettingsError(f"BROKERGROUP_RESYNC_SECONDS must be > 0, got {resync}")
        cleanup = _seconds(env, "BROKERGROUP_CLEANUP_TIMEOUT_SECONDS", "120")
        return cls(
            controller_addresses=tuple(
                split_addresses(env.get("BROKERGROUP_CONTROLLER_ADDRESSES", ""))
            ),
            token_file=Path(token) if token else None,
            broker_credential_root_file=_path(env, "BROKERGROUP_BROKER_CREDENTIAL_ROOT_FILE"),
            ha_secret_file=_path(env, "BROKERGROUP_HA_SECRET_FILE"),
            rocketmq_credentials_file=_path(env, "BROKERGROUP_ROCKETMQ_CREDENTIALS_FILE"),
            release_secret=env.get("BROKERGROUP_RELEASE_SECRET", ""),
            release_secret_managed=env.get("BROKERGROUP_RELEASE_SECRET_MANAGED", "true").lower()
            != "false",
            image=env.get("BROKERGROUP_IMAGE", ""),
            rocketmq_image=env.get("BROKERGROUP_ROCKETMQ_IMAGE", ""),
            resync_s=resync,
            operator_id=env.get("BROKERGROUP_OPERATOR_ID", ""),
            cleanup_timeout_s=cleanup,
            deployment=env.get("BROKERGROUP_OPERATOR_DEPLOYMENT", ""),
            cluster_ca_secret=env.get("BROKERGROUP_CLUSTER_CA_SECRET", ""),
            cluster_ca_managed=env.get("BROKERGROUP_CLUSTER_CA_MANAGED", "true").lower() != "false",
            tls_check_s=_seconds(env, "BROKERGROUP_TLS_CHECK_SECONDS", "3600") or 3600.0,
            controller_tls=env.get("BROKERGROUP_CONTROLLER_TLS", "false").lower() == "true",
            controller_api_tls=env.get("BROKERGROUP_CONTROLLER_API_TLS", "false").lower() == "true",
            controller_tls_secret=env.get("BROKERGROUP_CONTROLLER_TLS_SECRET", ""),
            controller_tls_names=tuple(
                n for n in env.get("BROKERGROUP_CONTROLLER_TLS_NAMES", "").split(",") if n
            ),
        )

    def read_token(self) -> str | None:
        return _read(self.token_file, "BROKERGROUP_TOKEN_FILE")

    def release_secret_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of BROKERGROUP_RELEASE_SECRET, or None."""
        if not self.release_secret:
            return None
        namespace, _, name = self.release_secret.partition("/")
        if not namespace or not name:
            raise SettingsError(
                f"BROKERGROUP_RELEASE_SECRET must be namespace/name, got {self.release_secret!r}"
            )
        return namespace, name

    def cluster_ca_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of BROKERGROUP_CLUSTER_CA_SECRET, or None."""
        return _ref(self.cluster_ca_secret, "BROKERGROUP_CLUSTER_CA_SECRET")

    def controller_tls_ref(self) -> tuple[str, str] | None:
        """(namespace, name) of BROKERGROUP_CONTROLLER_TLS_SECRET, or None."""
        return _ref(self.controller_tls_secret, "BROKERGROUP_CONTROLLER_TLS_SECRET")

    def secrets_from_files(self) -> OperatorSecrets | None:
        """The secrets from their files (None without an admin token file)."""
        token = self.read_token()
        if token is None:
            return None
        return OperatorSecrets(
            admin_token=token,
            broker_credential_root=_read(
                self.broker_credential_root_file, "BROKERGROUP_BROKER_CREDENTIAL_ROOT_FILE"
            ),
            ha_secret=_read(self.ha_secret_file, "BROKERGROUP_HA_SECRET_FILE"),
            rocketmq_credentials=_read(
                self.rocketmq_credentials_file, "BROKERGROUP_ROCKETMQ_CREDENTIALS_FILE"
            ),
        )


def _ref(value: str, variable: str) -> tuple[str, str] | None:
    if not value:
        return None
    namespace, _, name = value.partition("/")
    if not namespace or not name:
        raise SettingsError(f"{variable} must be namespace/name, got {value!r}")
    return namespace, name


def _path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name) or None
    return None if value is None else Path(value)


def _read(path: Path | None, variable: str) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text().strip() or None
    except OSError as exc:
        raise SettingsError(f"cannot read {variable} {path}: {exc}") from exc


def _seconds(env: Mapping[str, str], name: str, default: str) -> float:
    try:
        value = float(env.get(name, default))
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {env.get(name)!r}") from None
    if value < 0:
        raise SettingsError(f"{name} must be ≥ 0, got {value}")
    return value
