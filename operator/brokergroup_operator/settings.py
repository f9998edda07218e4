"""Operator-wide settings, from the environment (docs/kubernetes.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from brokergroup_controller.api import split_addresses


class SettingsError(ValueError):
    """A setting cannot be used; the message names the variable."""


@dataclass(frozen=True)
class OperatorSettings:
    controller_addresses: tuple[str, ...] = ()
    """BROKERGROUP_CONTROLLER_ADDRESSES: controller API host:port list."""
    token_file: Path | None = None
    """BROKERGROUP_TOKEN_FILE: the controller API bearer token (a file, never a value)."""
    secret_name: str = ""
    """BROKERGROUP_SECRET_NAME: Secret with api-token and ha-secret broker pods mount."""
    image: str = ""
    """BROKERGROUP_IMAGE: broker image when a BrokerGroup names none."""
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
            secret_name=env.get("BROKERGROUP_SECRET_NAME", ""),
            image=env.get("BROKERGROUP_IMAGE", ""),
            resync_s=resync,
            operator_id=env.get("BROKERGROUP_OPERATOR_ID", ""),
            cleanup_timeout_s=cleanup,
            deployment=env.get("BROKERGROUP_OPERATOR_DEPLOYMENT", ""),
        )

    def read_token(self) -> str | None:
        if self.token_file is None:
            return None
        try:
            return self.token_file.read_text().strip() or None
        except OSError as exc:
            raise SettingsError(
                f"cannot read BROKERGROUP_TOKEN_FILE {self.token_file}: {exc}"
            ) from exc


def _seconds(env: Mapping[str, str], name: str, default: str) -> float:
    try:
        value = float(env.get(name, default))
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {env.get(name)!r}") from None
    if value < 0:
        raise SettingsError(f"{name} must be ≥ 0, got {value}")
    return value
