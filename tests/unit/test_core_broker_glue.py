"""The broker shell's pure glue (core/broker.py): config translation into the
store's and HA's typed configs, address rules (docs/architecture.md: HA =
client port + 1, HTTP = client port + 2) and ReplicaInfo → GroupView.

How: table-driven; every BrokerConfig the tests and defaults use must yield
an HAConfig/StoreConfig that passes their own start-up validation.
"""

from __future__ import annotations

import pytest

from brokergroup_broker.core.broker_settings import (
    group_view_of,
    ha_address_of,
    ha_config_of,
    http_address_of,
    store_config_of,
)
from brokergroup_broker.core.config import load_broker_config
from brokergroup_controller.api import BrokerLiveness, ReplicaInfo
from tests.integration.broker_harness import FAST_SETTINGS


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        [f"{k}={v}" for k, v in FAST_SETTINGS.items()],
        ["haMaxTimeSlaveNotCatchUpMs=100"],
        ["flushDiskType=ASYNC_FLUSH", "mappedFileSizeCommitLog=4096"],
    ],
)
def test_derived_configs_pass_their_own_validation(overrides: list[str]) -> None:
    config = load_broker_config(None, overrides)
    ha = ha_config_of(config)
    assert ha.ha_max_time_slave_not_catch_up_ms == config.ha_max_time_slave_not_catch_up_ms
    assert ha.heartbeat_interval_ms < config.ha_max_time_slave_not_catch_up_ms
    store = store_config_of(config)
    assert store.commit_log_segment_bytes == config.mapped_file_size_commit_log
    assert store.flush_disk_type.value == config.flush_disk_type
    assert store.default_queue_count == config.default_topic_queue_nums


def test_port_rules() -> None:
    assert ha_address_of("10.0.0.5:10911") == ("10.0.0.5", 10912)
    assert http_address_of("10.0.0.5:10911") == "10.0.0.5:10913"


def test_group_view_counts_only_alive_brokers() -> None:
    info = ReplicaInfo(
        cluster_name="c",
        broker_name="b",
        master_broker_id=None,
        master_address=None,
        master_epoch=3,
        sync_state_set=frozenset({1, 2}),
        sync_state_set_epoch=5,
        brokers=(BrokerLiveness(1, "a:1", False), BrokerLiveness(2, "b:1", True)),
    )
    view = group_view_of(info)
    assert view.alive_broker_ids == {2}
    assert (view.master_epoch, view.sync_state_set_epoch) == (3, 5)
