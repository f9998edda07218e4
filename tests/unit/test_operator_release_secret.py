"""The release Secret the operator keeps (release_secret.py; docs/kubernetes.md
"Secrets"): created with every key when absent, missing keys added, present
values never changed, a user's Secret only read."""

from __future__ import annotations

import itertools

import pytest

from brokergroup_operator.release_secret import (
    RELEASE_SECRET_KEYS,
    OperatorSecrets,
    ReleaseSecretError,
    ReleaseSecretPlan,
    plan_release_secret,
)


def counter() -> object:
    numbers = itertools.count(1)
    return lambda: f"random-{next(numbers)}"


def test_absent_secret_is_created_with_every_key() -> None:
    plan = plan_release_secret(None, True, counter())  # type: ignore[arg-type]
    assert plan == ReleaseSecretPlan(
        True,
        {
            "api-token": "random-1",
            "broker-credential-root": "random-2",
            "raft-password": "random-3",
            "ha-secret": "random-4",
        },
    )


def test_present_values_are_never_changed_and_missing_ones_added() -> None:
    """An upgrade from the chart that rendered api-token, raft-password and ha-secret
    keeps them and gains the broker credential root."""
    old = {"api-token": "a", "raft-password": "r", "ha-secret": "h"}
    plan = plan_release_secret(old, True, counter())  # type: ignore[arg-type]
    assert plan == ReleaseSecretPlan(False, {"broker-credential-root": "random-1"})
    whole = dict.fromkeys(RELEASE_SECRET_KEYS, "x")
    assert plan_release_secret(whole, True, counter()) == ReleaseSecretPlan(False, {})  # type: ignore[arg-type]
    assert plan_release_secret(whole, False, counter()) == ReleaseSecretPlan(False, {})  # type: ignore[arg-type]


def test_a_users_secret_is_only_read() -> None:
    with pytest.raises(ReleaseSecretError, match=r"lacks key\(s\) \['broker-credential-root'\]"):
        plan_release_secret(
            {"api-token": "a", "raft-password": "r", "ha-secret": "h"}, False, counter()
        )  # type: ignore[arg-type]


def test_operator_secrets_come_from_the_release_data_and_stay_out_of_repr() -> None:
    data = {
        "api-token": "a-1",
        "broker-credential-root": "b-2",
        "raft-password": "r-3",
        "ha-secret": "h-4",
    }
    secrets = OperatorSecrets.from_release_data(data)
    assert (secrets.admin_token, secrets.broker_credential_root, secrets.ha_secret) == (
        "a-1",
        "b-2",
        "h-4",
    )
    assert not any(v in repr(secrets) for v in data.values())
