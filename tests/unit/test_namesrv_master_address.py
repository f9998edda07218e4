"""The name server's master address policy (master_address.py) and its start-up
contract: `--namesrv-master-address-template`, `--namesrv-master-address` and
`--namesrv-master-only-routes [stock|all|none]` (stock, the per-group decision, by default).

Checks which address a managed group's master gets (fixed ahead of template ahead of the
master's own), and that a bad template or address stops the controller at load with a
message naming the bad part, through the controller's own flag parser and config loader.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from brokergroup_controller import cli
from brokergroup_controller.config import config_from_sources
from brokergroup_controller.master_address import (
    OWN_ADDRESS,
    MasterAddressPolicy,
    MasterOnlyRoutes,
    load_policy,
    parse_master_only_routes,
)

GROUP = ("DefaultCluster", "broker-a")


def test_fixed_wins_then_the_template_then_the_masters_own_address() -> None:
    policy = load_policy(
        "{broker}-master.{cluster}.svc:{port}", ["DefaultCluster/broker-b=127.0.0.1:20911"]
    )
    assert policy.address(("DefaultCluster", "broker-b"), "10.0.0.5:10911") == "127.0.0.1:20911"
    assert policy.address(GROUP, "10.0.0.5:30911") == "broker-a-master.DefaultCluster.svc:30911"
    assert OWN_ADDRESS.address(GROUP, "10.0.0.5:10911") == "10.0.0.5:10911"
    only_fixed = load_policy(None, ["DefaultCluster/broker-a=127.0.0.1:20911"])
    assert only_fixed.address(("Other", "broker-a"), "10.0.0.5:10911") == "10.0.0.5:10911"


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{broker}-master:{prot}", "unknown placeholder {prot}"),
        ("{0}:{port}", "unknown placeholder {0}"),
        ("{broker!r}:{port}", "unknown placeholder {broker}"),
        ("{broker:>9}:{port}", "unknown placeholder {broker}"),
        (":{port}", "empty host"),
        ("{broker}-master", "empty host"),
        ("{broker}-master:99999", "not a TCP port"),
        ("{broker}-master:{port}x", "not a TCP port"),
        ("{broker-master:{port}", "master address template"),
    ],
)
def test_a_bad_template_is_refused_at_load(template: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason.replace("{", r"\{").replace("}", r"\}")):
        MasterAddressPolicy(template=template)


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("broker-a=127.0.0.1:1", "CLUSTER/BROKER=HOST:PORT"),
        ("DefaultCluster/broker-a", "CLUSTER/BROKER=HOST:PORT"),
        ("/broker-a=127.0.0.1:1", "CLUSTER/BROKER=HOST:PORT"),
        ("DefaultCluster/broker-a=127.0.0.1", "empty host"),
        ("DefaultCluster/broker-a=:10911", "empty host"),
        ("DefaultCluster/broker-a=127.0.0.1:0", "not a TCP port"),
        ("DefaultCluster/broker-a=127.0.0.1:ten", "not a TCP port"),
    ],
)
def test_a_bad_fixed_address_is_refused_at_load(entry: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        load_policy(None, [entry])
    with pytest.raises(ValueError, match="twice"):
        load_policy(None, ["C/b=127.0.0.1:1", "C/b=127.0.0.1:2"])


def _base(tmp_path: Path) -> dict[str, object]:
    return {"node_id": 1, "peers": "h1:9880", "data_dir": str(tmp_path), "insecure_no_auth": True}


def test_the_controller_config_carries_the_policy_and_refuses_a_bad_one(tmp_path: Path) -> None:
    config = config_from_sources(
        {"namesrvMasterAddresses": ["DefaultCluster/broker-a=127.0.0.1:20911"]},
        {**_base(tmp_path), "namesrv_master_address_template": "{broker}:{port}"},
    )
    policy = config.master_address_policy()
    assert policy.address(GROUP, "127.0.0.9:10911") == "127.0.0.1:20911"
    assert policy.address(("DefaultCluster", "b"), "127.0.0.9:10911") == "b:10911"
    assert config_from_sources({}, _base(tmp_path)).master_address_policy() == OWN_ADDRESS
    with pytest.raises(ValueError, match="unknown placeholder"):
        config_from_sources({"namesrvMasterAddressTemplate": "{nope}:1"}, _base(tmp_path))
    with pytest.raises(ValueError, match="list of strings"):
        config_from_sources({"namesrvMasterAddresses": "C/b=h:1"}, _base(tmp_path))


def test_the_controller_cli_stops_on_a_bad_flag_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["controller", "--node-id", "1", "--peers", "127.0.0.1:1", "--data-dir"]
    argv += [str(tmp_path), "--insecure-no-auth"]
    assert cli.main([*argv, "--namesrv-master-address", "C/b=127.0.0.1:70000"]) == 2
    assert "C/b" in capsys.readouterr().err
    assert cli.main([*argv, "--namesrv-master-address-template", "{host}:{port}"]) == 2
    assert "unknown placeholder {host}" in capsys.readouterr().err


def test_master_only_routes_for_all_need_a_stable_address_and_reach_the_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ValueError, match="need a stable master address"):
        load_policy(None, [], master_only="all")
    with pytest.raises(ValueError, match="need a stable master address"):
        config_from_sources({"namesrvMasterOnlyRoutes": True}, _base(tmp_path))
    with pytest.raises(ValueError, match="namesrvMasterOnlyRoutes 'yes' is not one of"):
        config_from_sources({"namesrvMasterOnlyRoutes": "yes"}, _base(tmp_path))
    policy = config_from_sources(
        {"namesrvMasterOnlyRoutes": True, "namesrvMasterAddresses": ["C/b=127.0.0.1:20911"]},
        _base(tmp_path),
    ).master_address_policy()
    assert (policy.master_only, policy.stable(("C", "b")), policy.stable(("C", "x"))) == (
        MasterOnlyRoutes.ALL,
        True,
        False,
    )
    assert load_policy("{broker}:{port}", [], master_only="all").stable(("C", "x"))
    argv = ["controller", "--node-id", "1", "--peers", "127.0.0.1:1", "--data-dir"]
    argv += [str(tmp_path), "--insecure-no-auth", "--namesrv-master-only-routes"]
    assert cli.main(argv) == 2
    assert "need a stable master address" in capsys.readouterr().err


def test_the_per_group_mode_is_the_default_and_needs_no_stable_address(tmp_path: Path) -> None:
    """`stock` (routes.master_only_for decides per group) is what a controller runs without
    the flag, a stable address or not; true/false of the setting's first form read as
    all/none; the flag takes each mode by name."""
    assert OWN_ADDRESS.master_only is MasterOnlyRoutes.STOCK
    assert config_from_sources({}, _base(tmp_path)).master_address_policy() == OWN_ADDRESS
    assert load_policy(None, [], master_only="none").master_only is MasterOnlyRoutes.NONE
    none = config_from_sources({"namesrvMasterOnlyRoutes": False}, _base(tmp_path))
    assert none.master_address_policy().master_only is MasterOnlyRoutes.NONE
    assert parse_master_only_routes("stock") is MasterOnlyRoutes.STOCK
    with pytest.raises(ValueError, match="not one of none, stock, all"):
        parse_master_only_routes(1)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command", required=True))
    base = ["controller", "--node-id", "1", "--peers", "127.0.0.1:1", "--data-dir", "d"]
    for flags, mode in (([], None), (["--namesrv-master-only-routes"], "all"),
                        (["--namesrv-master-only-routes", "stock"], "stock"),
                        (["--namesrv-master-only-routes", "none"], "none")):  # fmt: skip
        assert parser.parse_args([*base, *flags]).namesrv_master_only_routes == mode
