"""Retention settings (docs/retention.md): RocketMQ's names and defaults in the broker's
typed config, their relationships checked before anything runs (cleaning must start
below diskFullRatio), and `brokergroup local up --set fileReservedTime=0.05` reaching
every broker: the local runtime's broker command line is parsed by the broker's own
argument parser and config loader, and the value arrives as a fraction of an hour.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from brokergroup_broker.core.cli_broker import register
from brokergroup_broker.core.config import BrokerConfig, BrokerConfigError, load_broker_config
from brokergroup_broker.core.retention_service import retention_settings_of
from brokergroup_cli.local.config import build_config
from brokergroup_cli.local.plan import Layout, broker_argv


def test_rocketmqs_names_and_defaults() -> None:
    c = BrokerConfig()
    assert (
        c.file_reserved_time,
        c.delete_when,
        c.disk_max_used_space_ratio,
        c.disk_space_clean_forcibly_ratio,
        c.delete_commit_log_files_interval,
        c.clean_resource_interval,
    ) == (72.0, "04", 75, 85, 100, 10_000)
    s = retention_settings_of(c)
    assert (s.file_reserved_ms, s.delete_when_hours) == (72 * 3_600_000, frozenset({4}))
    assert (s.disk_max_used_space_ratio, s.disk_space_clean_forcibly_ratio) == (0.75, 0.85)
    assert c.to_json()["fileReservedTime"] == 72.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["fileReservedTime=0"], "fileReservedTime must be > 0"),
        (["fileReservedTime=-1"], "fileReservedTime must be > 0"),
        (["fileReservedTime=nan"], "fileReservedTime must be > 0"),
        (["fileReservedTime=inf"], "fileReservedTime must be > 0"),
        (["fileReservedTime=soon"], "fileReservedTime must be a number"),
        (["deleteWhen=4,5"], "deleteWhen '4,5'"),
        (["deleteWhen=24"], "not an hour"),
        (["diskMaxUsedSpaceRatio=90"], "must be ≤ diskSpaceCleanForciblyRatio 85"),
        (["diskSpaceCleanForciblyRatio=95"], "must be below diskFullRatio 95"),
        (["diskFullRatio=0.8"], "must be below diskFullRatio 80"),
        (["diskMaxUsedSpaceRatio=0"], "diskMaxUsedSpaceRatio must be > 0"),
        (["deleteCommitLogFilesInterval=-1"], "must be ≥ 0"),
    ],
)
def test_bad_retention_settings_are_refused_with_the_reason(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(BrokerConfigError, match=message):
        load_broker_config(None, overrides)


def test_without_forced_cleaning_any_disk_full_ratio_is_accepted() -> None:
    """A full disk then stops writes (the tests that simulate one set a tiny ratio)."""
    c = load_broker_config(None, ["diskFullRatio=0.0001", "cleanFileForciblyEnable=false"])
    assert not retention_settings_of(c).clean_file_forcibly_enable


def test_cleaning_below_a_lowered_disk_full_ratio_is_accepted() -> None:
    c = load_broker_config(
        None, ["diskFullRatio=0.8", "diskSpaceCleanForciblyRatio=70", "diskMaxUsedSpaceRatio=60"]
    )
    assert (c.disk_max_used_space_ratio, c.disk_space_clean_forcibly_ratio) == (60, 70)


def test_local_up_set_reaches_every_brokers_config(tmp_path: Path) -> None:
    config = build_config(
        tmp_path,
        3,
        ["fileReservedTime=0.05", "broker.deleteWhen=00;12", "mappedFileSizeCommitLog=65536"],
    )
    for slot in (0, 1, 2):
        argv = broker_argv(config, Layout(tmp_path), slot, f"127.0.0.{10 + slot}")
        assert argv[argv.index("broker") :][0] == "broker"
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        args = parser.parse_args(argv[argv.index("broker") :])
        broker = load_broker_config(args.config, args.overrides)
        assert broker.file_reserved_time == 0.05
        assert broker.delete_when == "00;12"
        assert broker.mapped_file_size_commit_log == 65536
        assert retention_settings_of(broker).file_reserved_ms == 180_000


def test_the_brokergroup_spec_carries_the_retention_fields() -> None:
    """spec.config: the operator's checks and both CRD copies agree with the broker."""
    from brokergroup_operator.spec import DELETE_WHEN_PATTERN, config_value_error

    good = {
        "fileReservedTime": 0.05,
        "deleteWhen": "04;05",
        "diskMaxUsedSpaceRatio": 70,
        "diskSpaceCleanForciblyRatio": 80,
        "cleanFileForciblyEnable": False,
        "deleteCommitLogFilesInterval": 0,
        "cleanResourceInterval": 1000,
    }
    for key, value in good.items():
        assert config_value_error(key, value) is None, key
    bad = {
        "fileReservedTime": 0,
        "deleteWhen": "4,5",
        "diskMaxUsedSpaceRatio": 100,
        "diskSpaceCleanForciblyRatio": 0,
        "cleanFileForciblyEnable": "no",
        "deleteCommitLogFilesInterval": -1,
        "cleanResourceInterval": 0,
    }
    for key, value in bad.items():
        assert config_value_error(key, value) is not None, key
    broker = load_broker_config(None, [f"{k}={str(v).lower()}" for k, v in good.items()])
    assert (broker.file_reserved_time, broker.delete_when) == (0.05, "04;05")
    assert not broker.clean_file_forcibly_enable
    root = Path(__file__).resolve().parents[2]
    for crd in ("crds", "charts/brokergroup/crds"):
        text = (root / crd / "brokergroup.io_brokergroups.yaml").read_text()
        assert f"deleteWhen: {{type: string, pattern: '{DELETE_WHEN_PATTERN}'}}" in text
