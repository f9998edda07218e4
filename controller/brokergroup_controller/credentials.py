"""Controller API credentials by role (DESIGN.md §11; docs/security.md).

Theory of operation
-------------------
Three roles:

- **admin** (the operator, `brokergroup admin`, the local supervisor): one
  random token, compared in constant time. It never reaches a broker pod.
- **broker** of one group (clusterName, brokerName): a token *derived* from
  a root secret that only the controllers and the operator (or the local
  runtime) hold:

      bg1.broker.<b64url(clusterName)>.<b64url(brokerName)>.<b64url(mac)>
      mac = HMAC-SHA256(root, "brokergroup credential v1" 0 role 0 cluster 0 name)

- **client** of one group (producers, consumers: reads of that group only),
  derived the same way with role `client`.

The token names its group, so the controller authenticates from the header
alone (before it reads a body) by recomputing the MAC and comparing in
constant time. No per-group registry is needed in Raft: adding a group needs
no controller change, and the controllers keep nothing but the root.
Revoking one group's credential means rotating the root (every group gets a
new one); that is the price of keeping no registry, written down in
docs/security.md.

RocketMQ key pairs (the remoting ports: name server, controller remoting,
built-in broker remoting) follow the same scheme, so a stock client or broker
signs with a pair that names its group:

      AccessKey = bg1.<role>.<b64url(clusterName)>.<b64url(brokerName)>
      SecretKey = b64url(HMAC-SHA256(root, "brokergroup rocketmq key v1" 0 role 0 cluster 0 name))

The AccessKey is public (it travels in every request); the SecretKey is what
AclClientRPCHook signs with. A controller recomputes the SecretKey from the
AccessKey (`RocketMQKeys.secret_for`) and knows the principal once the
signature verifies. The release's own pair (`rocketmq-credentials`, from a
file) is the admin pair. A broker pod gets its group's broker and client pairs
only; it never holds the root.

Pure: no I/O, no clock. The operator and the local runtime import
`derive_credential` and `derive_rocketmq_pair` to hand each group its token
and its pairs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from enum import StrEnum

TOKEN_PREFIX = "bg1"
_MAC_LABEL = b"brokergroup credential v1"
_ROCKETMQ_LABEL = b"brokergroup rocketmq key v1"


class Role(StrEnum):
    ADMIN = "admin"
    BROKER = "broker"
    CLIENT = "client"


_DERIVED_ROLES = (Role.BROKER, Role.CLIENT)


@dataclass(frozen=True)
class Principal:
    """Who a request comes from, as far as its credential says."""

    role: Role
    group: tuple[str, str] | None = None
    """(clusterName, brokerName) of a broker or client credential; None for admin."""

    def describe(self) -> str:
        if self.group is None:
            return f"the {self.role} credential"
        return f"the {self.role} credential of {self.group[0]}/{self.group[1]}"


@dataclass(frozen=True)
class CredentialKeys:
    """What a controller checks credentials against; kept out of logs (`repr`)."""

    admin_token: str
    broker_credential_root: str

    def __repr__(self) -> str:
        return "CredentialKeys(<secret>)"


class AuthenticationError(Exception):
    """No credential, or one that does not verify (401); the text says which."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(
    root: str, role: Role, cluster_name: str, broker_name: str, label: bytes = _MAC_LABEL
) -> bytes:
    message = b"\0".join((label, role.value.encode(), cluster_name.encode(), broker_name.encode()))
    return hmac.new(root.encode(), message, hashlib.sha256).digest()


def derive_credential(root: str, role: Role, cluster_name: str, broker_name: str) -> str:
    """The token of `role` for group (cluster_name, broker_name)."""
    if role not in _DERIVED_ROLES:
        raise ValueError(f"only {', '.join(_DERIVED_ROLES)} credentials are derived, not {role}")
    if not root:
        raise ValueError("the broker credential root is empty")
    if not cluster_name or not broker_name:
        raise ValueError("clusterName and brokerName must be non-empty")
    mac = _mac(root, role, cluster_name, broker_name)
    return ".".join(
        (
            TOKEN_PREFIX,
            role.value,
            _b64(cluster_name.encode()),
            _b64(broker_name.encode()),
            _b64(mac),
        )
    )


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def authenticate(authorization: str | None, keys: CredentialKeys) -> Principal:
    """The principal of an Authorization header; AuthenticationError if none verifies."""
    token = bearer_token(authorization)
    if token is None:
        raise AuthenticationError(
            "missing bearer credential: send 'Authorization: Bearer <credential>' "
            "(the admin token, or a group's broker or client credential)"
        )
    return verify_credential(token, keys)


def verify_credential(token: str, keys: CredentialKeys) -> Principal:
    """The one credential check, whatever carried the token (the HTTP API's bearer
    header; later the remoting ports, whose AccessKey/SecretKey pairs map onto
    the same three roles): the principal, or AuthenticationError. Pure, constant
    time in the secret parts; what the principal may then do is access.decide."""
    if not token.startswith(TOKEN_PREFIX + "."):
        if hmac.compare_digest(token.encode(), keys.admin_token.strip().encode()):
            return Principal(Role.ADMIN)
        raise AuthenticationError("wrong bearer credential: not the controller's admin token")
    parts = token.split(".")
    try:
        if len(parts) != 5:
            raise ValueError("expected 5 dot-separated parts")
        role = Role(parts[1])
        if role not in _DERIVED_ROLES:
            raise ValueError(f"role {role} is never derived")
        cluster, name = _unb64(parts[2]).decode(), _unb64(parts[3]).decode()
        provided = _unb64(parts[4])
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise AuthenticationError(f"malformed derived credential: {exc}") from None
    expected = _mac(keys.broker_credential_root, role, cluster, name)
    if not cluster or not name or not hmac.compare_digest(provided, expected):
        raise AuthenticationError(
            f"the {role} credential for {cluster}/{name} does not verify: it was not derived "
            "from this controller's broker credential root"
        )
    return Principal(role, (cluster, name))


@dataclass(frozen=True)
class RocketMQKeyPair:
    """An AccessKey/SecretKey pair; `to_json` is the key file's one line (what
    `brokergroup_remoting.keys.read_key_file` and a stock broker's
    innerClientAuthenticationCredentials read)."""

    access_key: str
    secret_key: str

    def to_json(self) -> str:
        return json.dumps(
            {"accessKey": self.access_key, "secretKey": self.secret_key}, separators=(",", ":")
        )

    def __repr__(self) -> str:  # never log the secret
        return f"RocketMQKeyPair(access_key={self.access_key!r})"


def rocketmq_access_key(role: Role, cluster_name: str, broker_name: str) -> str:
    """The AccessKey naming `role` of group (cluster_name, broker_name)."""
    if role not in _DERIVED_ROLES:
        raise ValueError(f"only {', '.join(_DERIVED_ROLES)} key pairs are derived, not {role}")
    if not cluster_name or not broker_name:
        raise ValueError("clusterName and brokerName must be non-empty")
    return ".".join(
        (TOKEN_PREFIX, role.value, _b64(cluster_name.encode()), _b64(broker_name.encode()))
    )


def derive_rocketmq_pair(
    root: str, role: Role, cluster_name: str, broker_name: str
) -> RocketMQKeyPair:
    """The RocketMQ key pair of `role` for group (cluster_name, broker_name)."""
    if not root:
        raise ValueError("the broker credential root is empty")
    access_key = rocketmq_access_key(role, cluster_name, broker_name)
    secret = _b64(_mac(root, role, cluster_name, broker_name, _ROCKETMQ_LABEL))
    return RocketMQKeyPair(access_key, secret)


def rocketmq_principal_of(access_key: str) -> Principal | None:
    """The principal a derived AccessKey names (not verified: that is the signature's job),
    or None when it is not a well-formed derived AccessKey."""
    parts = access_key.split(".")
    if len(parts) != 4 or parts[0] != TOKEN_PREFIX:
        return None
    try:
        role = Role(parts[1])
        cluster, name = _unb64(parts[2]).decode(), _unb64(parts[3]).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    if role not in _DERIVED_ROLES or not cluster or not name:
        return None
    if rocketmq_access_key(role, cluster, name) != access_key:
        return None  # one spelling per principal (no padding or alphabet variants)
    return Principal(role, (cluster, name))


@dataclass(frozen=True)
class RocketMQKeys:
    """What a controller checks RocketMQ signatures against: the release's admin pair and
    the root every group pair is derived from (either may be absent)."""

    admin: RocketMQKeyPair | None
    root: str | None

    def secret_for(self, access_key: str) -> str | None:
        """The SecretKey of `access_key`, or None when no pair of ours has it."""
        if self.admin is not None and hmac.compare_digest(
            access_key.encode(), self.admin.access_key.encode()
        ):
            return self.admin.secret_key
        principal = rocketmq_principal_of(access_key)
        if principal is None or principal.group is None or not self.root:
            return None
        cluster, name = principal.group
        return derive_rocketmq_pair(self.root, principal.role, cluster, name).secret_key

    def principal(self, access_key: str) -> Principal | None:
        """Who signed with `access_key`; call only after its signature verified."""
        if self.admin is not None and hmac.compare_digest(
            access_key.encode(), self.admin.access_key.encode()
        ):
            return Principal(Role.ADMIN)
        return rocketmq_principal_of(access_key)

    def __repr__(self) -> str:
        return "RocketMQKeys(<secret>)"
