"""spec.tls of a BrokerGroup, typed and checked (pure; docs/kubernetes.md "TLS").

Absent, the group runs without TLS (as every group did before: nothing new is made or
mounted). Present, `mode` is RocketMQ's `tls.server.mode` of the brokers' remoting port
(default permissive, RocketMQ's own server default: plaintext and TLS clients both), and
`issuer` says where the server certificate comes from:

- `operator` (default): signed by the release's cluster CA, renewed `renewalDays` before
  expiry, valid `validityDays` (Strimzi's clusterCa.renewalDays / validityDays);
- `secret`: the user's own Secret `secretName` with tls.crt, tls.key and ca.crt (a
  cert-manager or hand-made Secret); the operator mounts it and cannot read it, so the
  user rolls the pods (`kubectl brokergroup restart`) when they change it;
- `cert-manager`: the operator writes a cert-manager `Certificate` for the group's names
  (its `issuerRef`, renewal `renewalDays` before expiry) into the Secret `<bg>-tls`, and
  rolls the pods when cert-manager renews it (the Certificate's status.revision).

`httpPort` (default false, so no existing group changes): the brokers' HTTP port (probes,
status, `/metrics`) serves HTTPS only with the same certificate (`brokergroup broker
--http-tls`); it needs a mode other than disabled (the certificate is mounted only then).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from brokergroup_operator.certificates import RenewalPolicy

FIELDS = (
    "mode",
    "issuer",
    "renewalDays",
    "validityDays",
    "secretName",
    "certManager",
    "httpPort",
)
ISSUER_REF_KINDS = ("Issuer", "ClusterIssuer")


class TlsSpecError(ValueError):
    """spec.tls cannot be realised (the message says why)."""


class Issuer(enum.StrEnum):
    OPERATOR = "operator"
    SECRET = "secret"
    CERT_MANAGER = "cert-manager"


MODES = ("disabled", "permissive", "enforcing")


@dataclass(frozen=True)
class IssuerRef:
    """A cert-manager issuerRef."""

    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"


@dataclass(frozen=True)
class TlsSpec:
    mode: str
    issuer: Issuer
    policy: RenewalPolicy
    secret_name: str | None = None
    issuer_ref: IssuerRef | None = None
    http_port: bool = False
    """spec.tls.httpPort: the brokers' HTTP port over HTTPS only (`--http-tls`)."""

    @property
    def enabled(self) -> bool:
        return self.mode != "disabled"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> TlsSpec | None:
        """spec.tls read with the CRD's defaults; None without spec.tls."""
        raw = spec.get("tls")
        if raw is None:
            return None
        if not isinstance(raw, Mapping):
            raise TlsSpecError(f"spec.tls must be an object, got {raw!r}")
        unknown = sorted(set(raw) - set(FIELDS))
        if unknown:
            raise TlsSpecError(f"spec.tls has unknown field(s) {unknown}")
        mode = str(raw.get("mode", "permissive"))
        if mode not in MODES:
            raise TlsSpecError(f"spec.tls.mode must be one of {', '.join(MODES)}, got {mode!r}")
        try:
            issuer = Issuer(str(raw.get("issuer", Issuer.OPERATOR)))
        except ValueError:
            choices = ", ".join(i.value for i in Issuer)
            raise TlsSpecError(
                f"spec.tls.issuer must be one of {choices}, got {raw.get('issuer')!r}"
            ) from None
        renewal, validity = raw.get("renewalDays", 30), raw.get("validityDays", 365)
        for key, value in (("renewalDays", renewal), ("validityDays", validity)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TlsSpecError(f"spec.tls.{key} must be a whole number of days, got {value!r}")
        try:
            policy = RenewalPolicy(renewal_days=renewal, validity_days=validity)
        except ValueError as exc:
            raise TlsSpecError(f"spec.tls: {exc}") from None
        secret_name = raw.get("secretName") or None
        if issuer is Issuer.SECRET and not secret_name:
            raise TlsSpecError(
                "spec.tls.issuer secret needs spec.tls.secretName: a Secret with tls.crt, "
                "tls.key and ca.crt"
            )
        if issuer is not Issuer.SECRET and secret_name:
            raise TlsSpecError("spec.tls.secretName is read only with spec.tls.issuer secret")
        issuer_ref = _issuer_ref(raw.get("certManager"), issuer)
        http_port = raw.get("httpPort", False)
        if not isinstance(http_port, bool):
            raise TlsSpecError(f"spec.tls.httpPort must be true or false, got {http_port!r}")
        if http_port and mode == "disabled":
            raise TlsSpecError(
                "spec.tls.httpPort needs spec.tls.mode permissive or enforcing: with disabled "
                "the brokers get no certificate to serve it with"
            )
        return cls(
            mode,
            issuer,
            policy,
            None if secret_name is None else str(secret_name),
            issuer_ref,
            http_port,
        )


def _issuer_ref(raw: Any, issuer: Issuer) -> IssuerRef | None:
    if issuer is not Issuer.CERT_MANAGER:
        if raw:
            raise TlsSpecError(
                "spec.tls.certManager is read only with spec.tls.issuer cert-manager"
            )
        return None
    ref = (raw or {}).get("issuerRef") if isinstance(raw, Mapping) else None
    if not isinstance(ref, Mapping) or not ref.get("name"):
        raise TlsSpecError(
            "spec.tls.issuer cert-manager needs spec.tls.certManager.issuerRef.name (an Issuer "
            "or ClusterIssuer of cert-manager)"
        )
    unknown = sorted(set(raw) - {"issuerRef"}) + sorted(set(ref) - {"name", "kind", "group"})
    if unknown:
        raise TlsSpecError(f"spec.tls.certManager has unknown field(s) {unknown}")
    kind = str(ref.get("kind") or "Issuer")
    if kind not in ISSUER_REF_KINDS:
        raise TlsSpecError(
            f"spec.tls.certManager.issuerRef.kind must be Issuer or ClusterIssuer, got {kind!r}"
        )
    return IssuerRef(str(ref["name"]), kind, str(ref.get("group") or "cert-manager.io"))
