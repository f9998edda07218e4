"""`local up --groups N` (issue 36 item 3; docs/local.md): N BrokerGroups under one set of
controllers. Pure checks of the plan: group names, which slot runs which group, each group's
own derived credential and key pairs (files under DIR/groups/<name>/, derived for that
group), the first group's argv and files exactly as with one group, validation; and
prepare_dir writing every group's files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from brokergroup_cli.local.config import ConfigError, build_config
from brokergroup_cli.local.plan import Layout, broker_argv
from brokergroup_cli.local.supervisor import prepare_dir
from brokergroup_controller.credentials import Role, derive_credential, derive_rocketmq_pair


def _argv_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_group_names_and_slots(tmp_path: Path) -> None:
    config = build_config(tmp_path, 3, [], groups=3)
    assert config.group_names == ("broker-a", "broker-b", "broker-c")
    assert [config.group_of_slot(s) for s in range(9)] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    other = build_config(tmp_path, 1, ["local.brokerName=orders"], groups=2)
    assert other.group_names == ("orders", "orders-b")


def test_each_group_runs_with_its_own_credentials(tmp_path: Path) -> None:
    one = build_config(tmp_path, 2, [])
    two = build_config(tmp_path, 2, [], groups=2)
    layout = Layout(tmp_path)
    # the first group exactly as with one group
    assert broker_argv(one, layout, 1, "127.0.0.11") == broker_argv(two, layout, 1, "127.0.0.11")
    assert "groups" not in one.to_json() and two.to_json()["groups"] == 2
    argv = broker_argv(two, layout, 2, "127.0.0.12")
    assert _argv_value(argv, "--broker-name") == "broker-b"
    group_dir = tmp_path / "groups" / "broker-b"
    assert _argv_value(argv, "--controller-token-file") == str(group_dir / "broker-credential")
    assert _argv_value(argv, "--remoting-key-file") == str(group_dir / "broker-keys.json")
    assert _argv_value(argv, "--remoting-client-key-file") == str(group_dir / "client-keys.json")
    assert _argv_value(argv, "--data-dir") == str(layout.broker_data_dir(2))


def test_prepare_dir_writes_every_groups_derived_files(tmp_path: Path) -> None:
    config = build_config(tmp_path / "dir", 1, [], groups=2)
    layout = Layout(config.root_dir)
    prepare_dir(config, layout)
    root = layout.broker_credential_root_file.read_text().strip()
    group_dir = layout.root / "groups" / "broker-b"
    assert (group_dir / "broker-credential").read_text().strip() == derive_credential(
        root, Role.BROKER, "DefaultCluster", "broker-b"
    )
    pair = json.loads((group_dir / "client-keys.json").read_text())
    derived = derive_rocketmq_pair(root, Role.CLIENT, "DefaultCluster", "broker-b")
    assert (pair["accessKey"], pair["secretKey"]) == (derived.access_key, derived.secret_key)
    assert (group_dir / "client-keys.json").stat().st_mode & 0o077 == 0
    first = json.loads(layout.client_key_file.read_text())
    assert first["accessKey"].endswith(".YnJva2VyLWE")  # broker-a's, where it always was
    assert layout.broker_data_dir(1).is_dir()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"groups": 0}, "--groups must be 1 to 26"),
        ({"groups": 27}, "--groups must be 1 to 26"),
        ({"groups": 2, "engine": "rocketmq"}, "needs --engine builtin"),
    ],
)
def test_bad_groups(tmp_path: Path, kw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(tmp_path, 3, [], **kw)  # type: ignore[arg-type]


def test_the_address_range_must_hold_every_group(tmp_path: Path) -> None:
    settings = ["local.brokerFirstHost=127.0.0.10", "local.brokerLastHost=127.0.0.21"]
    build_config(tmp_path, 3, settings, groups=2)
    with pytest.raises(ConfigError, match="6 brokers need at least 12"):
        build_config(tmp_path, 3, [*settings[:1], "local.brokerLastHost=127.0.0.20"], groups=2)
    assert replace(build_config(tmp_path, 3, []), groups=1).groups == 1


def test_the_state_file_keeps_the_other_groups_brokers(tmp_path: Path) -> None:
    from brokergroup_cli.local.state import RuntimeState
    from brokergroup_cli.local.supervisor import Supervisor

    one = Supervisor(build_config(tmp_path, 1, []), Layout(tmp_path)).runtime_state()
    assert "otherGroupsBrokers" not in one.to_json()
    supervisor = Supervisor(build_config(tmp_path, 1, [], groups=2), Layout(tmp_path))
    supervisor._other_groups_brokers[0].host = "127.0.0.12"
    state = supervisor.runtime_state()
    assert [(b.index, b.host) for b in state.other_groups_brokers] == [(1, "127.0.0.12")]
    assert RuntimeState.from_json(json.loads(json.dumps(state.to_json()))) == state
    assert state.other_groups_brokers[0] in state.children()  # `local down` stops it by pid
    assert state.stopped(1).other_groups_brokers[0].pid is None


class _FakeController:
    """replica_info of broker-b names broker 2 at 127.0.0.12; reports are recorded."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str, int]] = []

    async def replica_info(self, cluster: str, name: str) -> object:
        from brokergroup_controller.api import BrokerLiveness, ReplicaInfo

        brokers = (BrokerLiveness(2, "127.0.0.12:10911", True),)
        return ReplicaInfo(
            cluster, name, 2, "127.0.0.12:10911", 1, frozenset({2}), 1, brokers=brokers
        )

    async def report_inactive(self, cluster: str, name: str, broker_id: int, *_a: object,
                              **_k: object) -> None:  # fmt: skip
        self.reports.append((cluster, name, broker_id))


async def test_another_groups_broker_exit_is_reported_for_its_group(tmp_path: Path) -> None:
    from brokergroup_cli.local.supervisor import Supervisor

    supervisor = Supervisor(build_config(tmp_path, 1, [], groups=2), Layout(tmp_path))
    fake = _FakeController()
    supervisor._controller_client = lambda: fake  # type: ignore[assignment,method-assign,return-value]
    supervisor._token = "t"
    slot = supervisor._other_groups_brokers[0]
    slot.host = "127.0.0.12"
    slot.alive = lambda: True  # type: ignore[method-assign]
    await supervisor._learn_other_groups()
    assert slot.broker_id == 2
    await supervisor._report_gone(slot, -9)
    assert fake.reports == [("DefaultCluster", "broker-b", 2)]
