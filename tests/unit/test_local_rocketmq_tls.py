"""TLS of `local up --engine rocketmq --set local.tls=permissive|enforcing` without JVMs
(cli/brokergroup_cli/local: rocketmq_engine.stock_tls, rocketmq_stock.StockTls; the rendering
is brokergroup_remoting.stock_tls, shared with the operator's engine rocketmq).

- Each stock broker's JVM gets RocketMQ's TlsSystemConfig properties (the runtime's mode, no
  test certificate, `tls.enable` for its own connections, `tls.config.file`), and its
  tls.properties names the runtime's certificate, key and CA (0600 like broker.conf).
- The stock proxy's rmq-proxy.json names the same certificate for its gRPC and remoting ports
  (tlsTestModeEnable false), and its JVM the same properties.
- local.tls disabled: none of it (RocketMQ's own defaults, as before).
- local.tlsHttp with the stock engine is refused before anything starts (no HTTP port).

The real processes: tests/integration/test_rocketmq_engine_tls.py. Before this, `local up
--engine rocketmq --set local.tls=enforcing` was refused ("local.tls needs --engine builtin").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokergroup_cli.local import rocketmq_engine
from brokergroup_cli.local.config import ConfigError, build_config
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.rocketmq_stock import BROKER_MAIN, PROXY_MAIN, RocketMQHome
from brokergroup_cli.local.supervisor import prepare_dir


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def _home(tmp_path: Path) -> RocketMQHome:
    return RocketMQHome(tmp_path / "lib", tmp_path / "lib" / "rocketmq-namesrv-5.3.1.jar")


def _tls_options(argv: list[str]) -> list[str]:
    return [a for a in argv if a.startswith("-Dtls.")]


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_stock_brokers_serve_the_runtime_certificate_in_its_mode(tmp_path: Path, mode: str) -> None:
    config = build_config(tmp_path, 3, [f"local.tls={mode}"], "rocketmq")
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    broker = rocketmq_engine.broker_config(config, layout, 1, "127.0.0.12")
    broker.base_dir.mkdir(parents=True, exist_ok=True)
    broker.write()
    tls_file = layout.broker_data_dir(1) / "tls.properties"
    assert _tls_options(broker.argv(_home(tmp_path))) == [
        f"-Dtls.server.mode={mode}",
        "-Dtls.test.mode.enable=false",
        f"-Dtls.config.file={tls_file}",
        "-Dtls.enable=true",  # every server a stock broker dials serves TLS in both modes
    ]
    assert broker.argv(_home(tmp_path))[-3:] == [BROKER_MAIN, "-c", str(broker.conf_path)]
    assert _properties(tls_file.read_text()) == {
        "tls.server.certPath": str(layout.tls_cert_file),
        "tls.server.keyPath": str(layout.tls_key_file),
        "tls.server.need.client.auth": "none",
        "tls.server.authClient": "false",
        "tls.client.certPath": str(layout.tls_cert_file),
        "tls.client.keyPath": str(layout.tls_key_file),
        "tls.client.trustCertPath": str(layout.ca_file),
        "tls.client.authServer": "true",
    }
    assert oct(tls_file.stat().st_mode & 0o777) == "0o600"
    # broker.conf itself is unchanged by TLS (TlsSystemConfig reads no broker.conf line).
    plain = build_config(tmp_path, 3, [], "rocketmq")
    assert broker.text() == rocketmq_engine.broker_config(plain, layout, 1, "127.0.0.12").text()


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_the_stock_proxy_serves_the_runtime_certificate_on_grpc_and_remoting(
    tmp_path: Path, mode: str
) -> None:
    config = build_config(tmp_path, 3, [f"local.tls={mode}"], "rocketmq")
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    proxy = rocketmq_engine.proxy_config(config, layout)
    path = proxy.write()
    settings = json.loads(path.read_text())
    assert {k: settings[k] for k in ("tlsTestModeEnable", "tlsCertPath", "tlsKeyPath")} == {
        "tlsTestModeEnable": False,
        "tlsCertPath": str(layout.tls_cert_file),
        "tlsKeyPath": str(layout.tls_key_file),
    }
    tls_file = path.with_name("tls.properties")
    assert _properties(tls_file.read_text())["tls.client.trustCertPath"] == str(layout.ca_file)
    argv = proxy.argv(_home(tmp_path))
    assert _tls_options(argv) == [
        f"-Dtls.server.mode={mode}",
        "-Dtls.test.mode.enable=false",
        f"-Dtls.config.file={tls_file}",
        "-Dtls.enable=true",  # the proxy → name servers and → brokers links
    ]
    assert argv[-5:] == [PROXY_MAIN, "-pc", str(path), "-pm", "cluster"]


def test_without_local_tls_the_stock_processes_keep_rocketmq_defaults(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, [], "rocketmq")
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    broker = rocketmq_engine.broker_config(config, layout, 0, "127.0.0.10")
    proxy = rocketmq_engine.proxy_config(config, layout)
    assert broker.tls is None and proxy.tls is None
    assert _tls_options(broker.argv(_home(tmp_path))) == []
    assert _tls_options(proxy.argv(_home(tmp_path))) == []
    assert "tlsCertPath" not in proxy.settings()


def test_https_broker_ports_are_refused_with_the_stock_engine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"local\.tlsHttp needs --engine builtin"):
        build_config(tmp_path, 3, ["local.tls=enforcing", "local.tlsHttp=true"], engine="rocketmq")
    build_config(tmp_path, 3, ["local.tls=enforcing"], engine="rocketmq")  # accepted


def test_a_tls_mode_rocketmq_does_not_know_is_refused_by_the_rendering() -> None:
    from brokergroup_remoting.stock_tls import tls_jvm_options

    with pytest.raises(ValueError, match=r"tls\.server\.mode 'strict'"):
        tls_jvm_options("strict", "/x/tls.properties", True)
