"""Operator settings from the environment and the per-group overrides
(docs/kubernetes.md, contract with the Helm chart): addresses split like the
CLI's, the token read from its file (never from a variable), bad values
refused with the variable's name, spec.controller overriding the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.settings import OperatorSettings, SettingsError
from brokergroup_operator.spec import GroupContext, SpecError


def test_from_env_and_token_file(tmp_path: Path) -> None:
    token = tmp_path / "api-token"
    token.write_text("s3cret\n")
    settings = OperatorSettings.from_env(
        {
            "BROKERGROUP_CONTROLLER_ADDRESSES": "ctl-0:9878, ctl-1:9878,,",
            "BROKERGROUP_TOKEN_FILE": str(token),
            "BROKERGROUP_RELEASE_SECRET": "mq/bg-secrets",
            "BROKERGROUP_IMAGE": "brokergroup:1",
            "BROKERGROUP_RESYNC_SECONDS": "2.5",
        }
    )
    assert settings.controller_addresses == ("ctl-0:9878", "ctl-1:9878")
    assert (settings.release_secret_ref(), settings.image, settings.resync_s) == (
        ("mq", "bg-secrets"),
        "brokergroup:1",
        2.5,
    )
    assert settings.read_token() == "s3cret"
    assert OperatorSettings.from_env({}).read_token() is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"BROKERGROUP_RESYNC_SECONDS": "soon"},
            "BROKERGROUP_RESYNC_SECONDS must be a number, got 'soon'",
        ),
        ({"BROKERGROUP_RESYNC_SECONDS": "0"}, "BROKERGROUP_RESYNC_SECONDS must be > 0, got 0.0"),
    ],
)
def test_bad_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as exc:
        OperatorSettings.from_env(env)
    assert str(exc.value) == message


def test_missing_token_file_names_the_variable(tmp_path: Path) -> None:
    settings = OperatorSettings.from_env({"BROKERGROUP_TOKEN_FILE": str(tmp_path / "nope")})
    with pytest.raises(SettingsError, match="cannot read BROKERGROUP_TOKEN_FILE"):
        settings.read_token()


def test_group_overrides_and_missing_defaults() -> None:
    secrets = OperatorSecrets("admin", "root-of-broker-credentials", "ha")
    ctx = GroupContext(
        "g",
        "ns",
        "u",
        {"controller": {"addresses": ["a:1"], "secretName": "own"}, "image": "img:2"},
        "img:1",
        ("d:1",),
    )
    assert (ctx.addresses, ctx.secret, ctx.image) == (("a:1",), "own", "img:2")
    ctx.validate()  # the user's own Secret: the operator needs no root for it
    ctx = GroupContext("g", "ns", "u", {}, "img:1", ("d:1",), secrets)
    assert (ctx.addresses, ctx.secret, ctx.image, ctx.replicas) == (
        ("d:1",), "g-credentials", "img:1", 3,
    )  # fmt: skip
    assert "root-of-broker-credentials" not in repr(ctx)
    with pytest.raises(SpecError, match="no controller addresses"):
        GroupContext("g", "ns", "u", {}, "img", (), secrets).validate()
    with pytest.raises(SpecError, match="no broker credential"):
        GroupContext("g", "ns", "u", {}, "img", ("d:1",)).validate()
    with pytest.raises(SpecError, match="no image"):
        GroupContext("g", "ns", "u", {}, "", ("d:1",), secrets).validate()
