"""spec.tls on every port of a built-in broker pod (issue 36, containers.tls_flags): the
client and remoting ports in the group's mode, HA in mutual TLS with the master verified
for the group's Service name, the name servers over TLS only when the release's serve it,
and the controllers' API in mutual TLS when it is HTTPS only — where a group without
spec.tls is refused, since its brokers could not verify the controllers."""

from __future__ import annotations

from typing import Any

import pytest

from brokergroup_operator.containers import TLS_DIR, TRUST_DIR, broker_command, tls_flags
from brokergroup_operator.spec import GroupContext, SpecError


def ctx(spec: dict[str, Any], **kw: Any) -> GroupContext:
    return GroupContext(
        name="orders",
        namespace="prod",
        uid="u1",
        spec=spec,
        default_image="bg:dev",
        controller_addresses=("c-0.c.prod.svc:9878",),
        **kw,
    )


def test_every_port_and_link_gets_tls() -> None:
    flags = tls_flags(
        ctx({"tls": {"mode": "enforcing"}}, namesrv_tls=True, controller_api_tls=True)
    )
    assert flags == [
        "--remoting-tls-mode",
        "enforcing",
        "--client-tls-mode",
        "enforcing",
        "--tls-cert-file",
        f"{TLS_DIR}/tls.crt",
        "--tls-key-file",
        f"{TLS_DIR}/tls.key",
        "--tls-ca-file",
        f"{TRUST_DIR}/ca.crt",
        "--ha-tls-server-name",
        "orders.prod.svc",
        "--controller-tls",
    ]


def test_plaintext_name_servers_and_api() -> None:
    flags = tls_flags(ctx({"tls": {}}))
    assert flags[-1] == "--namesrv-plaintext"
    assert "--controller-tls" not in flags
    assert flags[flags.index("--client-tls-mode") + 1] == "permissive"


def test_no_tls_no_flags() -> None:
    assert tls_flags(ctx({})) == []
    assert tls_flags(ctx({"tls": {"mode": "disabled"}})) == []


def test_https_api_needs_spec_tls() -> None:
    with pytest.raises(SpecError, match=r"needs spec\.tls"):
        broker_command(ctx({}, controller_api_tls=True))
    with pytest.raises(SpecError, match=r"needs spec\.tls"):
        tls_flags(ctx({"tls": {"mode": "disabled"}}, controller_api_tls=True))
