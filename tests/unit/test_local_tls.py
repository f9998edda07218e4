"""The local runtime's TLS setting (`--set local.tls=...`, cli/brokergroup_cli/local: config,
plan, certs, supervisor.prepare_dir, status).

A mode that is not RocketMQ's, or HTTPS broker ports with the stock engine, is refused before anything
starts; with TLS on, every controller and broker gets the mode, the certificate and the key
(a broker also the CA, to reach the name servers over TLS), `up` makes a CA and a server
certificate naming every address the runtime is dialled at, keeps them across `up`s, and
makes the server certificate again when the address plan changes or its expiry nears;
`local status --json` shows the mode and the CA file.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest

from brokergroup_cli.local.certs import RENEW_BEFORE, SERVER_DAYS, ensure_certificates
from brokergroup_cli.local.config import ConfigError, build_config
from brokergroup_cli.local.plan import Layout, broker_argv, controller_argv
from brokergroup_cli.local.supervisor import forwarder_tls, prepare_dir
from brokergroup_remoting.certificates import names_of, not_after
from brokergroup_remoting.tls import TlsMode

NOW = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(
    ("settings", "engine", "reason"),
    [
        (["local.tls=strict"], "builtin", "local.tls 'strict' is not one of disabled"),
        (
            ["local.tls=enforcing", "local.tlsHttp=true"],
            "rocketmq",
            "local.tlsHttp needs --engine builtin",
        ),
    ],
)
def test_a_tls_setting_that_cannot_work_is_refused_before_anything_starts(
    tmp_path: Path, settings: list[str], engine: str, reason: str
) -> None:
    with pytest.raises(ConfigError, match=reason):
        build_config(tmp_path, 3, settings, engine=engine)


def _flags(argv: list[str]) -> dict[str, str]:
    """The TLS flags of an argv: valued ones with their value, switches with ""."""
    switches = ("--api-tls", "--controller-tls")
    return {
        a: "" if a in switches else argv[i + 1]
        for i, a in enumerate(argv)
        if a.startswith("--tls") or a == "--remoting-tls-mode" or a in switches
    }


def test_every_controller_and_broker_gets_the_mode_and_the_certificate(tmp_path: Path) -> None:
    """Every process holds the certificate and the CA: client-facing ports take the mode,
    internal links are mutual TLS (the controllers' HTTPS API, broker → controller, HA)."""
    layout = Layout(tmp_path)
    plain = build_config(tmp_path, 3, [])
    assert _flags(controller_argv(plain, layout, 1)) == {}
    assert _flags(broker_argv(plain, layout, 0, "127.0.0.10")) == {}
    sealed = build_config(tmp_path, 3, ["local.tls=enforcing"])
    served = {
        "--remoting-tls-mode": "enforcing",
        "--tls-cert-file": str(tmp_path / "tls" / "server.crt"),
        "--tls-key-file": str(tmp_path / "tls" / "server.key"),
        "--tls-ca-file": str(tmp_path / "tls" / "ca.crt"),
    }
    assert _flags(controller_argv(sealed, layout, 2)) == {**served, "--api-tls": ""}
    assert _flags(broker_argv(sealed, layout, 0, "127.0.0.10")) == {
        **served,
        "--controller-tls": "",
    }


def test_up_makes_a_ca_and_a_certificate_naming_every_address_and_keeps_them(
    tmp_path: Path,
) -> None:
    config = build_config(
        tmp_path, 1, ["local.tls=permissive", "local.brokerFirstHost=127.0.0.10",
                      "local.brokerLastHost=127.0.0.12"],
    )  # fmt: skip
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    names = names_of(layout.tls_cert_file.read_bytes())
    assert names == [
        "localhost", "127.0.0.1", "127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.1.10",
        "127.0.0.10", "127.0.0.11", "127.0.0.12",
    ]  # fmt: skip
    for key in (layout.ca_key_file, layout.tls_key_file):
        assert key.stat().st_mode & 0o077 == 0, key
    ca, cert = layout.ca_file.read_bytes(), layout.tls_cert_file.read_bytes()
    prepare_dir(config, layout)  # a second `up`: the same CA and certificate
    assert (layout.ca_file.read_bytes(), layout.tls_cert_file.read_bytes()) == (ca, cert)
    forwarder = forwarder_tls(config, layout)
    assert forwarder["tls"].mode is TlsMode.PERMISSIVE and forwarder["upstream_tls"] is None


def test_the_certificate_is_made_again_when_the_addresses_change_or_expiry_nears(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)
    narrow = build_config(tmp_path, 1, ["local.tls=enforcing", "local.brokerLastHost=127.0.0.11"])
    ensure_certificates(narrow, layout, NOW)
    ca, first = layout.ca_file.read_bytes(), layout.tls_cert_file.read_bytes()
    ensure_certificates(narrow, layout, NOW + datetime.timedelta(days=1))
    assert layout.tls_cert_file.read_bytes() == first
    wide = build_config(tmp_path, 1, ["local.tls=enforcing", "local.brokerLastHost=127.0.0.12"])
    ensure_certificates(wide, layout, NOW + datetime.timedelta(days=1))
    second = layout.tls_cert_file.read_bytes()
    assert names_of(second)[-1] == "127.0.0.12" and second != first
    assert not_after(second) - (NOW + datetime.timedelta(days=1)) == datetime.timedelta(
        days=SERVER_DAYS
    )
    almost = not_after(second) - RENEW_BEFORE - datetime.timedelta(hours=1)
    ensure_certificates(wide, layout, almost)
    assert layout.tls_cert_file.read_bytes() == second  # still over 30 days left
    late = not_after(second) - RENEW_BEFORE + datetime.timedelta(hours=1)
    ensure_certificates(wide, layout, late)
    third = layout.tls_cert_file.read_bytes()
    assert third != second and not_after(third) > not_after(second)
    assert layout.ca_file.read_bytes() == ca  # the CA outlives its server certificates
