"""`local up --engine rocketmq` without JVMs: the engine setting, what the controllers and
stock brokers are started with (broker.conf, the java command line), and the id a stock
store holds. The JVM run is tests/integration/test_local_rocketmq_engine.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokergroup_cli.local import rocketmq_engine
from brokergroup_cli.local.config import ConfigError, LocalConfig, build_config
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.rocketmq_stock import (
    BROKER_MAIN,
    RocketMQHome,
    StockBrokerConfig,
    read_broker_id,
)
from brokergroup_cli.local.supervisor import prepare_dir
from brokergroup_controller.credentials import Role, derive_rocketmq_pair


def _properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_the_engine_is_builtin_unless_asked_and_must_be_known(tmp_path: Path) -> None:
    assert build_config(tmp_path, 3, []).engine == "builtin"
    config = build_config(tmp_path, 3, ["local.controllerRemotingPort=19879"], "rocketmq")
    assert rocketmq_engine.is_rocketmq(config)
    assert LocalConfig.from_json(config.to_json()) == config
    with pytest.raises(ConfigError, match="engine 'kafka' is not one of builtin, rocketmq"):
        build_config(tmp_path, 3, [], "kafka")
    with pytest.raises(ConfigError, match="unknown local setting"):
        build_config(tmp_path, 3, ["local.engine=rocketmq"])  # --engine only


def test_controllers_open_the_remoting_port_signed_with_the_runtime_key_pair(
    tmp_path: Path,
) -> None:
    config = build_config(tmp_path, 3, ["local.controllerRemotingPort=19879"], "rocketmq")
    layout = Layout(tmp_path)
    assert rocketmq_engine.controller_args(config, layout) == [
        "--remoting-port",
        "19879",
        "--remoting-credentials-file",
        str(layout.namesrv_key_file),
        "--namesrv-master-only-routes",
        "stock",
    ]
    assert rocketmq_engine.controller_addr(config) == (
        "127.0.1.1:19879;127.0.1.2:19879;127.0.1.3:19879"
    )


def test_a_stock_broker_runs_in_controller_mode_under_the_runtime(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, ["autoCreateTopicEnable=false"], "rocketmq")
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    # DESIGN.md §11: a stock broker signs with its group's broker pair, not the release's.
    keys = json.loads(derive_rocketmq_pair(
        layout.broker_credential_root_file.read_text().strip(), Role.BROKER,
        "DefaultCluster", "broker-a",
    ).to_json())  # fmt: skip
    assert keys != json.loads(layout.namesrv_key_file.read_text())
    broker = rocketmq_engine.broker_config(config, layout, 1, "127.0.0.12")
    p = _properties(broker.text())
    assert p["enableControllerMode"] == "true" and p["brokerId"] == "-1"
    assert p["allAckInSyncStateSet"] == "true"  # acks wait for the whole SyncStateSet
    assert p["controllerAddr"] == "127.0.1.1:9879;127.0.1.2:9879;127.0.1.3:9879"
    assert p["namesrvAddr"] == "127.0.1.1:9876;127.0.1.2:9876;127.0.1.3:9876"
    assert p["brokerIP1"] == p["brokerIP2"] == p["bindAddress"] == "127.0.0.12"
    # RocketMQ binds the HA port on every interface: one per slot.
    assert (p["listenPort"], p["haListenPort"]) == ("10911", "11012")
    assert p["storePathRootDir"] == str(layout.broker_data_dir(1) / "store")
    assert json.loads(p["innerClientAuthenticationCredentials"]) == keys
    assert p["autoCreateTopicEnable"] == "false"  # --set name=value reaches broker.conf
    home = RocketMQHome(tmp_path / "lib", tmp_path / "lib" / "rocketmq-namesrv-5.3.3.jar")
    argv = broker.argv(home)
    assert argv[0] == "java" and argv[-3:] == [BROKER_MAIN, "-c", str(broker.conf_path)]
    assert f"-Drocketmq.home.dir={layout.broker_data_dir(1)}" in argv


def test_broker_conf_holds_the_broker_pair_and_is_owner_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DESIGN.md §11: broker.conf carries innerClientAuthenticationCredentials (the
    group's broker pair), so it is 0600 like every secret file, also when a broader file
    was there before (a start by an older version)."""
    config = build_config(tmp_path, 3, [], "rocketmq")
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    conf = rocketmq_engine.broker_config(config, layout, 0, "127.0.0.10").conf_path
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text("old\n")
    conf.chmod(0o644)

    class NoJava(Exception):
        pass

    def no_home() -> RocketMQHome:
        raise NoJava  # broker_argv writes broker.conf before it looks for the JVM

    monkeypatch.setattr(rocketmq_engine, "require_home", no_home)
    with pytest.raises(NoJava):
        rocketmq_engine.broker_argv(config, layout, 0, "127.0.0.10")
    assert "innerClientAuthenticationCredentials" in conf.read_text()
    assert oct(conf.stat().st_mode & 0o777) == "0o600"
    assert not conf.with_name("broker.conf.tmp").exists()


def test_a_later_setting_overrides_a_default() -> None:
    broker = StockBrokerConfig(
        base_dir=Path("/x"), host="127.0.0.10", port=10911, controllers="c", namesrv="n",
        access_key="ak1234", secret_key="sk1234", settings=(("brokerHeartbeatInterval", "900"),),
    )  # fmt: skip
    assert _properties(broker.text())["brokerHeartbeatInterval"] == "900"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("DefaultCluster#broker-a#2\n", 2), ("DefaultCluster#broker-a", None), ("a#b#x", None)],
)
def test_the_broker_id_comes_from_the_store(
    tmp_path: Path, text: str, expected: int | None
) -> None:
    assert read_broker_id(tmp_path) is None
    (tmp_path / "brokerIdentity").write_text(text)
    assert read_broker_id(tmp_path) == expected


def test_stock_brokers_run_their_timer_wheel_and_hold_the_client_pair_as_a_user(
    tmp_path: Path,
) -> None:
    config = build_config(tmp_path, 3, ["messageDelayLevel=1s 3s 1m"], "rocketmq")
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    p = _properties(rocketmq_engine.broker_config(config, layout, 0, "127.0.0.10").text())
    assert (p["timerWheelEnable"], p["mappedFileSizeTimerLog"]) == ("true", str(16 << 20))
    assert p["messageDelayLevel"] == "1s 3s 1m"
    client = json.loads(layout.client_key_file.read_text())
    # The proxy checks SDK signatures against the brokers' users (GET_USER).
    assert json.loads(p["initAuthenticationUser"]) == {
        "username": client["accessKey"],
        "password": client["secretKey"],
    }


@pytest.mark.parametrize(
    ("setting", "rule"),
    [
        ("messageDelayLevel=1s 5x", "1-64 delays"),
        ("messageDelayLevel=", "1-64 delays"),
        ("timerMaxDelaySec=0", "a positive number of seconds"),
        ("transactionCheckInterval=-5", "a positive number of milliseconds"),
        ("transactionCheckMax=many", "a positive count"),
        ("timerWheelEnable=yes", "true or false"),
    ],
)
def test_shared_settings_a_stock_broker_would_not_take_are_refused(
    tmp_path: Path, setting: str, rule: str
) -> None:
    config = build_config(tmp_path, 3, [setting], "rocketmq")
    with pytest.raises(ConfigError, match=f"--set {setting.split('=')[0]}=.*must be {rule}"):
        rocketmq_engine.check_settings(config)
    good = ["messageDelayLevel=1s 5s 10m 2h", "timerMaxDelaySec=60", "transactionTimeOut=3000"]
    rocketmq_engine.check_settings(build_config(tmp_path, 3, good, "rocketmq"))


def test_the_stock_proxy_is_configured_for_the_group_owner_only(tmp_path: Path) -> None:
    config = build_config(
        tmp_path, 3, ["local.proxyGrpcPort=18081", "local.proxyRemotingPort=18080"], "rocketmq"
    )
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    proxy = rocketmq_engine.proxy_config(config, layout)
    path = proxy.write()
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # it holds the client pair
    settings = json.loads(path.read_text())
    client = json.loads(layout.client_key_file.read_text())
    assert json.loads(settings.pop("innerClientAuthenticationCredentials")) == client
    assert {k: settings[k] for k in (
        "proxyMode", "namesrvAddr", "grpcServerPort", "remotingListenPort",
        "enableAclRpcHookForClusterMode", "authenticationEnabled", "enableTopicMessageTypeCheck",
    )} == {
        "proxyMode": "cluster",
        "namesrvAddr": "127.0.1.1:9876;127.0.1.2:9876;127.0.1.3:9876",
        "grpcServerPort": 18081,
        "remotingListenPort": 18080,
        "enableAclRpcHookForClusterMode": True,
        "authenticationEnabled": True,
        "enableTopicMessageTypeCheck": False,
    }  # fmt: skip
    assert config.proxy_grpc_endpoint == "127.0.1.10:18081"
    home = RocketMQHome(tmp_path / "lib", tmp_path / "lib" / "rocketmq-namesrv-5.3.3.jar")
    argv = proxy.argv(home)
    assert argv[0] == "java" and argv[-5:] == [
        "org.apache.rocketmq.proxy.ProxyStartup", "-pc", str(path), "-pm", "cluster",
    ]  # fmt: skip


def test_the_proxy_is_a_child_of_the_state_file(tmp_path: Path) -> None:
    from brokergroup_cli.local.state import ChildKind, ChildRecord, Phase, RuntimeState

    proxy = ChildRecord(
        kind=ChildKind.PROXY, index=0, host="127.0.1.10", port=8081, pid=4242,
        start_ticks=7, phase=Phase.RUNNING, started_at_ms=1, restarts=0, last_exit_code=None,
        restart_at_ms=None, broker_id=None, role=None, previous_hosts=(), log_file="p.log",
    )  # fmt: skip
    state = RuntimeState(
        root_dir=str(tmp_path), supervisor_pid=1, supervisor_start_ticks=1,
        started_at_ms=1, updated_at_ms=2, proxies=(proxy,),
    )  # fmt: skip
    again = RuntimeState.from_json(json.loads(json.dumps(state.to_json())))
    assert again == state
    assert [c.name for c in again.children()] == ["proxy"]  # `local down` stops it too
    assert again.stopped(3).proxies[0].pid is None


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ((), None),  # RocketMQ's own: 30 s rounds, 3 s op batches
        ((("transactionCheckInterval", "30000"),), "3000"),
        ((("transactionCheckInterval", "2000"),), "500"),
        ((("transactionCheckInterval", "100"),), "100"),
        ((("transactionCheckInterval", "2000"), ("transactionOpBatchInterval", "50")), "50"),
    ],
)
def test_op_records_are_stored_within_a_quarter_of_a_check_round(
    settings: tuple[tuple[str, str], ...], expected: str | None
) -> None:
    """A stock master buffers END_TRANSACTION op records for transactionOpBatchInterval; a
    check round that starts before they are stored checks (and a COMMIT answer stores) the
    same transaction again, so a short transactionCheckInterval brings the batch down."""
    broker = StockBrokerConfig(
        base_dir=Path("/x"), host="127.0.0.10", port=10911, controllers="c", namesrv="n",
        access_key="ak1234", secret_key="sk1234", settings=settings,
    )  # fmt: skip
    assert _properties(broker.text()).get("transactionOpBatchInterval") == expected
