"""The brokers' HTTP port over HTTPS on Kubernetes (spec.tls.httpPort, issue 36; the pure
builders containers.py, networking.py, tls_spec.py; docs/security.md "TLS on Kubernetes").

- spec.tls.httpPort is false by default, and a group with spec.tls but without it renders
  exactly the objects it rendered before the field existed (every owned object compared
  whole with `httpPort: false` and with the field absent; plain `http` port, no scheme);
- with it on, the broker command gains `--http-tls` after the certificate, key, trust
  bundle and `--ha-tls-server-name` it already had (what `--http-tls` needs, and the name
  the peers verify each other's HTTP ports for), both probes get `scheme: HTTPS` on the
  same path and port, the port is named `https` on the pod and the headless Service, and
  the NetworkPolicy (by port number) is unchanged;
- refusals with the reason: a non-boolean, `httpPort` with mode disabled (no certificate
  mounted), and a stock RocketMQ group (no HTTP port at all);
- the CRD copies carry the field (boolean, default false) and the same rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from brokergroup_operator.containers import (
    TLS_DIR,
    TRUST_DIR,
    broker_command,
    rocketmq_tls_options,
    tls_flags,
)
from brokergroup_operator.model import HTTP_PORT
from brokergroup_operator.networking import network_policy, services
from brokergroup_operator.objects import owned_objects
from brokergroup_operator.spec import GroupContext, SpecError
from brokergroup_operator.tls_spec import TlsSpec, TlsSpecError
from tests.unit.test_operator_owned_objects_golden import APIS, WITH_PAIR

ROOT = Path(__file__).resolve().parents[2]


def ctx(tls: dict[str, Any] | None, engine: str = "brokergroup") -> GroupContext:
    spec: dict[str, Any] = {"engine": engine}
    if tls is not None:
        spec["tls"] = tls
    return GroupContext("orders", "prod", "uid-1", spec, "brokergroup:dev", APIS, WITH_PAIR)


def container(c: GroupContext) -> dict[str, Any]:
    sts = next(o for o in owned_objects(c, 3) if o["kind"] == "StatefulSet")
    return dict(sts["spec"]["template"]["spec"]["containers"][0])


def headless_ports(c: GroupContext) -> list[dict[str, Any]]:
    return list(services(c)[0]["spec"]["ports"])


def test_off_by_default_and_off_renders_what_it_rendered_before() -> None:
    tls = TlsSpec.from_spec({"tls": {"mode": "enforcing"}})
    assert tls is not None and tls.http_port is False
    before = owned_objects(ctx({"mode": "enforcing"}), 3)
    assert owned_objects(ctx({"mode": "enforcing", "httpPort": False}), 3) == before
    c = container(ctx({"mode": "enforcing"}))
    assert "--http-tls" not in c["command"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": HTTP_PORT}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": HTTP_PORT}
    assert {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"} in c["ports"]
    assert headless_ports(ctx(None))[-1]["name"] == "http"
    assert headless_ports(ctx({"mode": "enforcing"}))[-1]["name"] == "http"


def test_on_the_broker_serves_https_with_the_group_certificate() -> None:
    on = ctx({"mode": "enforcing", "httpPort": True})
    flags = tls_flags(on)
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
        "--namesrv-plaintext",
        "--http-tls",
    ]
    command = broker_command(on)
    assert command[-len(flags) :] == flags
    # The rest of the command is the one the group ran without the field.
    off = ctx({"mode": "enforcing"})
    assert tls_flags(off) == flags[:-1]
    assert command[: -len(flags)] == broker_command(off)[: -len(flags) + 1]


def test_on_the_probes_use_https_and_the_port_is_named_https() -> None:
    on = ctx({"mode": "permissive", "httpPort": True})
    off = ctx({"mode": "permissive"})
    c, c_off = container(on), container(off)
    assert c["readinessProbe"] == {
        **c_off["readinessProbe"],
        "httpGet": {"path": "/readyz", "port": HTTP_PORT, "scheme": "HTTPS"},
    }
    assert c["livenessProbe"] == {
        **c_off["livenessProbe"],
        "httpGet": {"path": "/healthz", "port": HTTP_PORT, "scheme": "HTTPS"},
    }
    assert [p["name"] for p in c["ports"]] == ["client", "ha", "https", "remoting"]
    assert [p["name"] for p in c_off["ports"]] == ["client", "ha", "http", "remoting"]
    assert headless_ports(on)[-1] == {
        "name": "https",
        "port": HTTP_PORT,
        "targetPort": HTTP_PORT,
        "protocol": "TCP",
    }
    assert headless_ports(on)[:-1] == headless_ports(off)[:-1]
    assert services(on)[1] == services(off)[1]  # the master Service has no HTTP port
    assert network_policy(on) == network_policy(off)  # by number: still the group's only


@pytest.mark.parametrize(
    ("tls", "reason"),
    [
        ({"httpPort": "yes"}, r"spec\.tls\.httpPort must be true or false"),
        ({"mode": "disabled", "httpPort": True}, r"httpPort needs spec\.tls\.mode permissive"),
    ],
)
def test_bad_values_are_refused_with_the_reason(tls: dict[str, Any], reason: str) -> None:
    with pytest.raises(TlsSpecError, match=reason):
        TlsSpec.from_spec({"tls": tls})
    with pytest.raises(SpecError, match=reason):
        broker_command(ctx(tls))


def test_a_stock_broker_group_is_refused() -> None:
    with pytest.raises(SpecError, match=r"stock RocketMQ brokers .* have none"):
        rocketmq_tls_options(ctx({"mode": "permissive", "httpPort": True}, engine="rocketmq"))
    assert rocketmq_tls_options(ctx({"mode": "permissive"}, engine="rocketmq"))


@pytest.mark.parametrize(
    "path",
    [
        "crds/brokergroup.io_brokergroups.yaml",
        "charts/brokergroup/crds/brokergroup.io_brokergroups.yaml",
    ],
)
def test_both_crd_copies_carry_the_field(path: str) -> None:
    crd = yaml.safe_load((ROOT / path).read_text())
    tls = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]["tls"]
    assert tls["properties"]["httpPort"]["type"] == "boolean"
    assert tls["properties"]["httpPort"]["default"] is False
    assert "!self.httpPort || self.mode != 'disabled'" in [
        r["rule"] for r in tls["x-kubernetes-validations"]
    ]
