"""spec.tls for `spec.engine: rocketmq` (issue 36 item 2/3, containers.py and
rocketmq_config.py): the stock broker's JVM gets RocketMQ's TlsSystemConfig properties
(`tls.server.mode`, no test mode, `tls.config.file`, `tls.enable` only with the release's
name servers on TLS), its ConfigMap the tls.properties file naming the mounted certificate
and trust bundle (the same Secret and ConfigMap the built-in engine mounts), and the
combinations that cannot work are refused with the reason."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import pytest

from brokergroup_operator import rocketmq_config as rmq
from brokergroup_operator import rocketmq_proxy as proxy
from brokergroup_operator.containers import config_data, engine_container, engine_volumes
from brokergroup_operator.release_secret import OperatorSecrets
from brokergroup_operator.runtime import Runtime
from brokergroup_operator.spec import GroupContext, SpecError
from brokergroup_operator.status_writer import why_blocked
from brokergroup_operator.tls_material import group_server_names


def ctx(spec: dict[str, Any], **kw: Any) -> GroupContext:
    return GroupContext(
        name="orders",
        namespace="prod",
        uid="u1",
        spec={"engine": "rocketmq", **spec},
        default_image="bg:dev",
        default_rocketmq_image="rmq:5.3",
        controller_addresses=("c-0.c.prod.svc:9878",),
        **kw,
    )


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_stock_broker_serves_the_group_certificate() -> None:
    c = ctx({"tls": {"mode": "permissive"}}, namesrv_tls=True)
    files = config_data(c)
    assert _properties(files[rmq.TLS_CONFIG_KEY]) == {
        "tls.server.certPath": "/etc/rocketmq/tls/tls.crt",
        "tls.server.keyPath": "/etc/rocketmq/tls/tls.key",
        "tls.server.need.client.auth": "none",
        "tls.server.authClient": "false",
        "tls.client.certPath": "/etc/rocketmq/tls/tls.crt",
        "tls.client.keyPath": "/etc/rocketmq/tls/tls.key",
        "tls.client.trustCertPath": "/etc/rocketmq/tls-trust/ca.crt",
        "tls.client.authServer": "true",
    }
    script = engine_container(c)["command"][2]
    java = script[script.index("exec java") :]
    assert (
        "-Dtls.server.mode=permissive -Dtls.test.mode.enable=false "
        "-Dtls.config.file=/etc/rocketmq/config/tls.properties -Dtls.enable=true " in java
    )
    assert java.index("-Dtls.enable=true") < java.index(rmq.MAIN_CLASS)
    mounts = {m["name"]: m["mountPath"] for m in engine_container(c)["volumeMounts"]}
    assert (mounts["tls"], mounts["tls-trust"]) == (rmq.TLS_DIR, rmq.TLS_TRUST_DIR)
    volumes = {v["name"]: v for v in engine_volumes(c)}
    assert volumes["tls"]["secret"]["secretName"] == "orders-tls"
    assert volumes["tls-trust"]["configMap"]["name"] == "orders-tls-trust"


def test_plaintext_name_servers_keep_tls_enable_off() -> None:
    script = engine_container(ctx({"tls": {}}))["command"][2]
    assert "-Dtls.server.mode=permissive" in script
    assert "-Dtls.enable" not in script


def test_without_spec_tls_nothing_changes() -> None:
    c = ctx({})
    assert list(config_data(c)) == [rmq.CONFIG_KEY]
    assert "-Dtls" not in engine_container(c)["command"][2]
    assert {"tls", "tls-trust"}.isdisjoint(v["name"] for v in engine_volumes(c))


def test_enforcing_refusals() -> None:
    with pytest.raises(SpecError, match=r"tls\.controllers\.mode"):
        engine_container(ctx({"tls": {"mode": "enforcing"}}))
    quiet = ctx(
        {"tls": {"mode": "enforcing"}, "rocketmq": {"proxy": {"enabled": False}}}, namesrv_tls=True
    )
    assert "-Dtls.server.mode=enforcing" in engine_container(quiet)["command"][2]


def _proxy(c: GroupContext) -> tuple[dict[str, str], dict[str, Any]]:
    objects = {o["kind"]: o for o in proxy.proxy_objects(c)}
    return objects["ConfigMap"]["data"], objects["Deployment"]["spec"]["template"]["spec"]


def test_the_stock_proxy_of_an_enforcing_group_serves_and_dials_tls() -> None:
    """Until this change an enforcing engine rocketmq group with its proxy was refused ("the
    stock proxy is not wired yet"): the proxy dialled the brokers in plaintext. Now it
    serves the group's certificate in the group's mode and dials the name servers and
    brokers over TLS, verified against the group's trust bundle, as the brokers do."""
    c = ctx({"tls": {"mode": "enforcing"}}, namesrv_tls=True)
    engine_container(c)  # no refusal
    data, pod = _proxy(c)
    assert _properties(data[rmq.TLS_CONFIG_KEY]) == _properties(config_data(c)[rmq.TLS_CONFIG_KEY])
    settings = json.loads(data[proxy.CONFIG_KEY])
    assert (settings["tlsTestModeEnable"], settings["tlsCertPath"], settings["tlsKeyPath"]) == (
        False,
        "/etc/rocketmq/tls/tls.crt",
        "/etc/rocketmq/tls/tls.key",
    )
    (container,) = pod["containers"]
    java = container["command"][2]
    java = java[java.index("exec java") :]
    assert (
        "-Dtls.server.mode=enforcing -Dtls.test.mode.enable=false "
        "-Dtls.config.file=/etc/rocketmq/proxy/tls.properties -Dtls.enable=true " in java
    )
    assert java.index("-Dtls.enable=true") < java.index(proxy.MAIN_CLASS)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert (mounts["tls"], mounts["tls-trust"]) == (rmq.TLS_DIR, rmq.TLS_TRUST_DIR)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"] == {v["name"]: v for v in engine_volumes(c)}["tls"]
    assert volumes["tls-trust"]["configMap"]["name"] == "orders-tls-trust"
    # The SDKs verify the host name they dial: the group's certificate names the proxy.
    names = group_server_names(c)
    assert names[-3:] == ("orders-proxy", "orders-proxy.prod", "orders-proxy.prod.svc")
    off = ctx({"tls": {"mode": "enforcing"}, "rocketmq": {"proxy": {"enabled": False}}})
    assert not any("proxy" in n for n in group_server_names(off))


def test_a_permissive_proxy_beside_plaintext_name_servers_dials_plaintext() -> None:
    data, pod = _proxy(ctx({"tls": {"mode": "permissive"}}))
    java = pod["containers"][0]["command"][2]
    assert "-Dtls.server.mode=permissive" in java and "-Dtls.enable" not in java
    assert rmq.TLS_CONFIG_KEY in data


def test_a_proxy_without_spec_tls_is_unchanged() -> None:
    data, pod = _proxy(ctx({}))
    assert list(data) == [proxy.CONFIG_KEY]
    assert "tlsCertPath" not in json.loads(data[proxy.CONFIG_KEY])
    assert "-Dtls" not in pod["containers"][0]["command"][2]
    assert {"tls", "tls-trust"}.isdisjoint(v["name"] for v in pod["volumes"])


def _blocked(spec: dict[str, Any], **kw: Any) -> tuple[str, str] | None:
    pair = '{"accessKey": "admin", "secretKey": "s3cret-s3cret"}'
    secrets = OperatorSecrets("admin", "r" * 32, "h" * 32, rocketmq_credentials=pair)
    rt = cast(Runtime, SimpleNamespace(secrets_problem=None))
    return why_blocked(rt, ctx(spec, secrets=secrets, **kw))


def test_the_operator_runs_an_engine_rocketmq_group_with_tls() -> None:
    """What reconcile asks before it renders (status_writer.why_blocked): a stale check in
    GroupContext.validate refused every spec.tls of engine rocketmq ("wired for the
    built-in broker only so far"), so none of the above ever reached a pod."""
    assert _blocked({}) is None
    assert _blocked({"tls": {"mode": "permissive"}}) is None
    no_proxy = {"rocketmq": {"proxy": {"enabled": False}}}
    assert _blocked({"tls": {"mode": "enforcing"}, **no_proxy}, namesrv_tls=True) is None
    # The stock container's own refusals still hold, with their reasons.
    reason, message = _blocked({"tls": {"mode": "enforcing"}, **no_proxy}) or ("", "")
    assert reason == "InvalidSpec" and "needs the release's controllers on TLS" in message
    assert _blocked({"tls": {"mode": "enforcing"}}, namesrv_tls=True) is None  # with its proxy
    reason, message = _blocked({"tls": {"mode": "permissive", "httpPort": True}}) or ("", "")
    assert reason == "InvalidSpec" and "have none" in message
