"""The release Secret the operator keeps (release_secret.py; docs/kubernetes.md
"Secrets"): created with every key when absent, missing keys added, present
values never changed, a user's Secret only read."""

from __future__ import annotations

import itertools
from pathlib import Path

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
            "rocketmq-credentials": '{"accessKey":"bg-random-5","secretKey":"random-6"}',
        },
    )


def test_present_values_are_never_changed_and_missing_ones_added() -> None:
    """An upgrade from the chart that rendered api-token, raft-password and ha-secret
    keeps them and gains the broker credential root."""
    old = {"api-token": "a", "raft-password": "r", "ha-secret": "h"}
    plan = plan_release_secret(old, True, counter())  # type: ignore[arg-type]
    assert plan == ReleaseSecretPlan(
        False,
        {
            "broker-credential-root": "random-1",
            "rocketmq-credentials": '{"accessKey":"bg-random-2","secretKey":"random-3"}',
        },
    )
    whole = dict.fromkeys(RELEASE_SECRET_KEYS, "x")
    assert plan_release_secret(whole, True, counter()) == ReleaseSecretPlan(False, {})  # type: ignore[arg-type]
    assert plan_release_secret(whole, False, counter()) == ReleaseSecretPlan(False, {})  # type: ignore[arg-type]


def test_a_users_secret_is_only_read() -> None:
    with pytest.raises(
        ReleaseSecretError,
        match=r"lacks key\(s\) \['broker-credential-root', 'rocketmq-credentials'\]",
    ):
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


def test_the_rocketmq_pair_is_json_both_the_controller_and_a_stock_broker_read(
    tmp_path: Path,
) -> None:
    """Issue 20 item 4: the controllers' remoting port and name server check this pair and
    stock brokers sign with it, so it must be one line of JSON the ports' one reader
    (brokergroup_remoting.keys) accepts, with the pair a stock broker reads."""
    import json

    from brokergroup_operator.release_secret import ROCKETMQ_CREDENTIALS_KEY, OperatorSecrets
    from brokergroup_remoting.keys import read_key_file

    counter = itertools.count()
    plan = plan_release_secret(None, True, lambda: f"v{next(counter)}-0123456789abcdefghij")
    text = plan.add[ROCKETMQ_CREDENTIALS_KEY]
    assert "\n" not in text
    path = tmp_path / "pair"
    path.write_text(text)
    pair = read_key_file(str(path))
    stock = json.loads(text)  # what a stock broker's innerClientAuthenticationCredentials reads
    assert (pair.access_key, pair.secret_key) == (stock["accessKey"], stock["secretKey"])
    assert OperatorSecrets.from_release_data(plan.add).rocketmq_credentials == text
    # An older release Secret without it gets it added, nothing else changed.
    older = {k: v for k, v in plan.add.items() if k != ROCKETMQ_CREDENTIALS_KEY}
    assert list(plan_release_secret(older, True, lambda: "w" * 32).add) == [
        ROCKETMQ_CREDENTIALS_KEY
    ]
