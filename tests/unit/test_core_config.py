"""BrokerConfig (DESIGN.md §3.3, §2.3 names and defaults; STYLE.md §6).

How: defaults, camelCase file + `--set` overrides, and each relationship
check rejecting with a message that names the fields.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from brokergroup_broker.core.config import (
    BrokerConfig,
    BrokerConfigError,
    camel,
    load_broker_config,
)
from brokergroup_controller.namesrv.routes import DEFAULT_REGISTRATION_TIMEOUT_MS


def test_defaults_match_the_design() -> None:
    c = BrokerConfig()
    assert (c.heartbeat_interval_ms, c.heartbeat_timeout_ms) == (500, 2000)
    assert c.all_ack_in_sync_state_set is True
    assert (c.in_sync_replicas, c.min_in_sync_replicas, c.slave_timeout_ms) == (1, 1, 3000)
    assert c.ha_max_time_slave_not_catch_up_ms == 5000
    assert c.master_lease_ms < c.heartbeat_timeout_ms
    assert c.disk_full_ratio == 0.95 and c.default_topic_queue_nums == 4
    assert "heartbeatIntervalMs" in c.to_json()
    assert "haMaxTimeSlaveNotCatchUpMs" in c.to_json()
    assert "mappedFileSizeCommitLog" in c.to_json()


def test_every_field_has_a_trade_off_docstring() -> None:
    source = Path(BrokerConfig.__module__.replace(".", "/") + ".py")
    text = (Path(__file__).parents[2] / "broker-image" / source).read_text()
    for spec in dataclasses.fields(BrokerConfig):
        head = text.split(f"    {spec.name}:", 1)[1].split("\n", 2)
        assert head[1].strip().startswith('"""'), f"{camel(spec.name)} lacks a docstring"


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "broker.json"
    path.write_text(json.dumps({"slaveTimeoutMs": 1000, "allAckInSyncStateSet": False}))
    c = load_broker_config(
        path, ["slaveTimeoutMs=1200", "min_in_sync_replicas=2", "diskFullRatio=0.9"]
    )
    assert c.slave_timeout_ms == 1200
    assert c.all_ack_in_sync_state_set is False
    assert c.min_in_sync_replicas == 2
    assert c.disk_full_ratio == 0.9


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        BrokerConfig().slave_timeout_ms = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["masterLeaseMs=2000"], "masterLeaseMs"),
        (["heartbeatIntervalMs=2000"], "heartbeatIntervalMs"),
        (["flushDiskType=SOMETIMES"], "flushDiskType"),
        (["diskFullRatio=1.5"], "diskFullRatio"),
        (["noSuchThing=1"], "unknown broker config field"),
        (["slaveTimeoutMs=soon"], "slaveTimeoutMs must be an integer"),
        (["allAckInSyncStateSet=maybe"], "true or false"),
        (["slaveTimeoutMs"], "name=value"),
        (["mappedFileSizeCommitLog=100"], "mappedFileSizeCommitLog"),
    ],
)
def test_rejections_name_the_field(overrides: list[str], words: str) -> None:
    with pytest.raises(BrokerConfigError, match=words):
        load_broker_config(None, overrides)


@pytest.mark.parametrize("period_ms", [DEFAULT_REGISTRATION_TIMEOUT_MS, 3_600_000])
def test_a_registration_period_not_below_the_route_expiry_is_refused(period_ms: int) -> None:
    """The name servers drop a registration 120 s (RocketMQ's BROKER_CHANNEL_EXPIRED_TIME)
    after its last refresh: a broker registering less often leaves every route between
    registrations. The message names both numbers; the name server's own constant decides."""
    with pytest.raises(BrokerConfigError) as refused:
        load_broker_config(None, [f"registerNameServerPeriodMs={period_ms}"])
    message = str(refused.value)
    assert f"registerNameServerPeriodMs {period_ms}" in message, message
    assert f"route expiry {DEFAULT_REGISTRATION_TIMEOUT_MS}" in message, message
    below = load_broker_config(
        None, [f"registerNameServerPeriodMs={DEFAULT_REGISTRATION_TIMEOUT_MS - 1}"]
    )
    assert below.register_name_server_period_ms == DEFAULT_REGISTRATION_TIMEOUT_MS - 1
