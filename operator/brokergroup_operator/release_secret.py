"""The operator's secrets and the release Secret it keeps (DESIGN.md §11;
docs/kubernetes.md "Secrets").

Theory of operation
-------------------
The chart renders no secret values: `helm template` cannot `lookup`, so any
random value it rendered would change on every render and a GitOps tool
(Argo CD, Flux) would rotate it on every sync. Instead the operator, at
start-up, makes sure the release Secret exists with every key, creating
random values only for keys that are absent and never changing a present
one (`plan_release_secret`, pure). The controller pods mount that Secret
and wait until it exists; the operator reads it through the API (it never
mounts it, so it cannot wait on itself).

The release Secret holds the admin token (`api-token`, the name it always
had, so an upgrade keeps the value), the broker credential root, the Raft
password, the HA secret and the key pair of the controllers' RocketMQ ports
(`rocketmq-credentials`, JSON `{"accessKey", "secretKey"}`: the admin pair of
the controller remoting port and the name server, which also accept every pair
derived from the broker credential root).
Broker pods never see the Secret: each group gets its own Secret
(`group_secrets.group_secret`) with its derived broker and client credentials, its
derived RocketMQ broker and client pairs and the HA secret.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ADMIN_TOKEN_KEY = "api-token"
BROKER_CREDENTIAL_ROOT_KEY = "broker-credential-root"
RAFT_PASSWORD_KEY = "raft-password"
HA_SECRET_KEY = "ha-secret"
ROCKETMQ_CREDENTIALS_KEY = "rocketmq-credentials"
RELEASE_SECRET_KEYS = (
    ADMIN_TOKEN_KEY,
    BROKER_CREDENTIAL_ROOT_KEY,
    RAFT_PASSWORD_KEY,
    HA_SECRET_KEY,
    ROCKETMQ_CREDENTIALS_KEY,
)
#: Set on a release Secret the operator created (for people: the operator trusts
#: BROKERGROUP_RELEASE_SECRET_MANAGED, not a label anyone could set).
MANAGED_LABEL = ("app.kubernetes.io/managed-by", "brokergroup-operator")


@dataclass(frozen=True)
class OperatorSecrets:
    """What the operator holds: never logged, never given to a broker pod."""

    admin_token: str
    broker_credential_root: str | None = None
    ha_secret: str | None = None
    rocketmq_credentials: str | None = None
    """JSON {"accessKey", "secretKey"}: the admin pair of the controllers' RocketMQ ports
    (None: not given, and then no group gets a pair either)."""

    def __repr__(self) -> str:
        return "OperatorSecrets(<secret>)"

    @classmethod
    def from_release_data(cls, data: Mapping[str, str]) -> OperatorSecrets:
        return cls(
            admin_token=data[ADMIN_TOKEN_KEY],
            broker_credential_root=data[BROKER_CREDENTIAL_ROOT_KEY],
            ha_secret=data[HA_SECRET_KEY],
            rocketmq_credentials=data.get(ROCKETMQ_CREDENTIALS_KEY) or None,
        )


class ReleaseSecretError(ValueError):
    """The release Secret cannot be used as it is; the message says what to fix."""


@dataclass(frozen=True)
class ReleaseSecretPlan:
    """What to write: nothing (`add` empty), or `add` these keys (create if `create`)."""

    create: bool
    add: Mapping[str, str]


def plan_release_secret(
    existing: Mapping[str, str] | None,
    managed: bool,
    new_value: Callable[[], str],
) -> ReleaseSecretPlan:
    """Keys to add to the release Secret (decoded `existing` data, None = absent).

    Present keys are never changed. A Secret the operator did not create
    (`managed` False: `secrets.existingSecret`) must already hold every key.
    """
    if existing is None and not managed:
        raise ReleaseSecretError(
            "it does not exist and was brought by the user (the chart's secrets.existingSecret), "
            f"so the operator does not create it: create it with keys {list(RELEASE_SECRET_KEYS)}"
        )
    if existing is None:
        return ReleaseSecretPlan(True, {key: _value(key, new_value) for key in RELEASE_SECRET_KEYS})
    missing = [key for key in RELEASE_SECRET_KEYS if not existing.get(key)]
    if missing and not managed:
        raise ReleaseSecretError(
            f"the release Secret lacks key(s) {missing} and was not created by the operator; "
            "add them (random values of 32+ characters) or delete the Secret to have it created"
        )
    return ReleaseSecretPlan(False, {key: _value(key, new_value) for key in missing})


def _value(key: str, new_value: Callable[[], str]) -> str:
    """A new value for `key`: random, or for the RocketMQ pair two random halves as the
    JSON both the controller and a stock broker read (one line: it ends up in a properties
    file)."""
    if key == ROCKETMQ_CREDENTIALS_KEY:
        pair = {"accessKey": f"bg-{new_value()[:16]}", "secretKey": new_value()}
        return json.dumps(pair, separators=(",", ":"))
    return new_value()
