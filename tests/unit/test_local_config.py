"""Local runtime settings, the process plan and the state file format.

Checks `--set` routing (local./controller./broker. prefixes), validation of
the address plan (never inside 127.0.2.0/24, which tests own), the exact
argv of controllers and brokers (docs/architecture.md flags), and JSON
round trips of config.json and state.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokergroup_cli.local.commands import namesrv_fields
from brokergroup_cli.local.config import ConfigError, LocalConfig, build_config
from brokergroup_cli.local.plan import Layout, broker_argv, controller_argv
from brokergroup_cli.local.state import (
    ChildKind,
    ChildRecord,
    Phase,
    RuntimeState,
    read_state,
    write_state,
)
from brokergroup_cli.local.supervisor import prepare_dir
from brokergroup_controller.credentials import (
    CredentialKeys,
    Principal,
    RocketMQKeys,
    Role,
    authenticate,
    derive_rocketmq_pair,
)


def test_defaults_follow_the_address_plan(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, [])
    assert config.controller_peers == ("127.0.1.1:9880", "127.0.1.2:9880", "127.0.1.3:9880")
    assert config.controller_api_addresses[0] == "127.0.1.1:9878"
    assert config.broker_first_host == "127.0.0.10"
    assert config.broker_http_port() == 10913


def test_set_routes_by_prefix(tmp_path: Path) -> None:
    config = build_config(
        tmp_path,
        2,
        [
            "local.restartInitialDelayMs=50",
            "local.reportInactive=false",
            "local.launcher=/usr/bin/python3 fake.py",
            "controller.raftMinTimeout=0.2",
            "broker.heartbeatIntervalMs=200",
            "allAckInSyncStateSet=true",
        ],
    )
    assert config.restart_initial_delay_ms == 50
    assert config.report_inactive is False
    assert config.launcher == ("/usr/bin/python3", "fake.py")
    assert config.controller_settings == (("raftMinTimeout", "0.2"),)
    assert config.broker_settings == (
        ("heartbeatIntervalMs", "200"),
        ("allAckInSyncStateSet", "true"),
    )


@pytest.mark.parametrize(
    ("sets", "brokers", "message"),
    [
        (["nokey"], 3, "expected key=value"),
        (["local.noSuchThing=1"], 3, "unknown local setting"),
        (["local.stopTimeoutMs=soon"], 3, "int expected"),
        ([], 0, "at least 1"),
        (["local.brokerFirstHost=127.0.2.10"], 3, "127.0.2.0/24 and above"),
        (["local.controllerHosts=127.0.3.1,127.0.3.2,127.0.3.3"], 3, "outside"),
        (["local.brokerLastHost=127.0.0.14"], 3, "need at least 6"),
        (["local.controllerHosts=127.0.0.11"], 1, "lies in the broker range"),
        (["local.restartInitialDelayMs=20000"], 3, "restartMaxDelayMs"),
        (["local.controllerApiPort=9880"], 3, "must differ"),
    ],
)
def test_bad_settings_are_refused_with_the_reason(
    tmp_path: Path, sets: list[str], brokers: int, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(tmp_path, brokers, sets)


def test_config_json_round_trip(tmp_path: Path) -> None:
    config = build_config(tmp_path, 4, ["local.pollIntervalMs=250", "controller.x=1", "y=2"])
    again = LocalConfig.from_json(json.loads(json.dumps(config.to_json())))
    assert again == config


def test_controller_argv(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, ["local.launcher=bg"])
    argv = controller_argv(config, Layout(tmp_path), 2)
    assert argv == [
        "bg", "controller", "--node-id", "2",
        "--peers", "127.0.1.1:9880,127.0.1.2:9880,127.0.1.3:9880",
        "--data-dir", str(tmp_path / "controllers" / "2"),
        "--api-port", "9878", "--bind-address", "127.0.1.2",
        "--admin-token-file", str(tmp_path / "token"),
        "--broker-credential-root-file", str(tmp_path / "broker-credential-root"),
        "--raft-password-file", str(tmp_path / "raft-password"),
        "--namesrv-key-file", str(tmp_path / "namesrv-keys.json"),
        "--namesrv-port", "9876",
        "--namesrv-master-address", "DefaultCluster/broker-a=127.0.1.10:10911",
    ]  # fmt: skip
    with_settings = build_config(tmp_path, 3, ["local.launcher=bg", "controller.a=1"])
    assert controller_argv(with_settings, Layout(tmp_path), 1)[-2:] == [
        "--config",
        str(tmp_path / "controller.json"),
    ]


def test_the_stable_master_address_is_a_free_loopback_address(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, [])
    assert config.master_endpoint_address == "127.0.1.10:10911"
    assert config.broker_remoting_port() == 10914
    assert build_config(tmp_path, 3, [], engine="rocketmq").broker_remoting_port() == 10911
    for setting, reason in (
        ("local.masterEndpointHost=127.0.0.20", "broker range"),
        ("local.masterEndpointHost=127.0.1.2", "controller address"),
        ("local.masterEndpointHost=127.0.9.1", "outside"),
        ("local.masterEndpointPort=0", "not a usable port"),
        ("local.masterEndpointHoldMs=0", "must be positive"),
    ):
        with pytest.raises(ConfigError, match=reason):
            build_config(tmp_path, 3, [setting])


def test_broker_argv_binds_and_advertises_its_own_address(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, ["local.launcher=bg", "heartbeatIntervalMs=200"])
    argv = broker_argv(config, Layout(tmp_path), 1, "127.0.0.13")
    assert argv == [
        "bg", "broker", "--cluster-name", "DefaultCluster", "--broker-name", "broker-a",
        "--data-dir", str(tmp_path / "brokers" / "1"),
        "--controller-addresses", "127.0.1.1:9878,127.0.1.2:9878,127.0.1.3:9878",
        "--controller-token-file", str(tmp_path / "broker-credential"),
        "--ha-secret-file", str(tmp_path / "ha-secret"),
        "--bind-address", "127.0.0.13", "--advertise-address", "127.0.0.13",
        "--client-port", "10911",
        "--remoting-key-file", str(tmp_path / "broker-keys.json"),
        "--remoting-client-key-file", str(tmp_path / "client-keys.json"),
        "--namesrv-addresses", "127.0.1.1:9876;127.0.1.2:9876;127.0.1.3:9876",
        "--set", "autoCreateTopicEnable=true", "--set", "traceTopicEnable=true",
        "--set", "heartbeatIntervalMs=200",
    ]  # fmt: skip


def test_up_generates_the_admin_token_and_the_groups_broker_and_client_credentials(
    tmp_path: Path,
) -> None:
    """DESIGN.md §11: brokers get their group's broker credential only; the admin
    token and the root stay with the controllers and the CLI; each file is
    created once (0600) and kept, the derived ones recomputed from the root."""
    config = build_config(tmp_path, 3, ["local.launcher=bg"])
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    files = {p.name: p.read_text().strip() for p in tmp_path.iterdir() if p.is_file()}
    keys = CredentialKeys(files["token"], files["broker-credential-root"])
    group = ("DefaultCluster", "broker-a")
    assert authenticate(f"Bearer {files['token']}", keys) == Principal(Role.ADMIN)
    assert authenticate(f"Bearer {files['broker-credential']}", keys) == Principal(
        Role.BROKER, group
    )
    assert authenticate(f"Bearer {files['client-credential']}", keys) == Principal(
        Role.CLIENT, group
    )
    # DESIGN.md §11: the group's RocketMQ pairs, derived from the same root (own label).
    for name, role in (("broker-keys.json", Role.BROKER), ("client-keys.json", Role.CLIENT)):
        line = derive_rocketmq_pair(files["broker-credential-root"], role, *group).to_json()
        assert files[name] == line
        assert RocketMQKeys(None, files["broker-credential-root"]).principal(
            json.loads(line)["accessKey"]
        ) == Principal(role, group)
    secret_names = ["broker-credential", "broker-credential-root", "broker-keys.json",
                    "client-credential", "client-keys.json", "ha-secret", "namesrv-keys.json",
                    "raft-password", "token"]  # fmt: skip
    assert sorted(n for n in files if n not in ("config.json",)) == secret_names
    assert {oct((tmp_path / n).stat().st_mode & 0o777) for n in secret_names} == {"0o600"}
    prepare_dir(config, layout)  # a second `up` keeps every value
    assert {n: (tmp_path / n).read_text().strip() for n in secret_names} == {
        n: files[n] for n in secret_names
    }
    broker = broker_argv(config, layout, 0, "127.0.0.10")
    for secret in ("token", "broker-credential-root", "client-credential", "raft-password",
                   "namesrv-keys.json"):  # fmt: skip
        assert str(tmp_path / secret) not in broker


def test_state_file_round_trip_and_stopped(tmp_path: Path) -> None:
    state = RuntimeState(
        root_dir=str(tmp_path),
        supervisor_pid=10,
        supervisor_start_ticks=99,
        started_at_ms=1,
        updated_at_ms=2,
        address_cursor=4,
        controllers=(ChildRecord(ChildKind.CONTROLLER, 1, "127.0.1.1", 9878, pid=11),),
        brokers=(
            ChildRecord(
                ChildKind.BROKER,
                0,
                "127.0.0.14",
                10911,
                pid=12,
                start_ticks=5,
                phase=Phase.RUNNING,
                broker_id=1,
                role="master",
                previous_hosts=("127.0.0.10",),
                restarts=1,
            ),
        ),
        config={"brokerCount": 1},
    )
    path = tmp_path / "state.json"
    write_state(path, state)
    assert read_state(path) == state
    assert read_state(tmp_path / "missing.json") is None
    stopped = state.stopped(now_ms=50)
    assert stopped.supervisor_pid is None and stopped.stopped_at_ms == 50
    assert all(c.pid is None and c.phase is Phase.STOPPED for c in stopped.children())
    assert stopped.brokers[0].broker_id == 1  # identity survives a stop


def test_status_json_shows_the_client_pair_and_the_admin_pair(tmp_path: Path) -> None:
    """`local status --json`: accessKey/secretKey are the group's client pair (applications,
    the benchmark, stock clients); adminAccessKey/adminSecretKey the release pair (mqadmin's
    controller commands). DESIGN.md §11."""
    config = build_config(tmp_path, 3, ["local.launcher=bg"])
    layout = Layout(tmp_path)
    prepare_dir(config, layout)
    state = RuntimeState(
        root_dir=str(tmp_path), supervisor_pid=None, supervisor_start_ticks=None,
        started_at_ms=1, updated_at_ms=2, controllers=(), brokers=(), config={},
    )  # fmt: skip
    write_state(layout.state_file, state)
    fields = namesrv_fields(layout)
    client = json.loads(layout.client_key_file.read_text())
    admin = json.loads(layout.namesrv_key_file.read_text())
    assert (fields["accessKey"], fields["secretKey"]) == (client["accessKey"], client["secretKey"])
    assert (fields["adminAccessKey"], fields["adminSecretKey"]) == (
        admin["accessKey"],
        admin["secretKey"],
    )
    assert RocketMQKeys(None, (tmp_path / "broker-credential-root").read_text().strip()).principal(
        str(fields["accessKey"])
    ) == Principal(Role.CLIENT, ("DefaultCluster", "broker-a"))
