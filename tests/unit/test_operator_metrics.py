"""The operator's metrics (issue 22 item 6): a deleted group leaves no series.

Sets every per-group series for two groups, forgets one, and compares the
exported sample label sets: only the other group's remain."""

from __future__ import annotations

from prometheus_client import REGISTRY

from brokergroup_operator import metrics


def _groups_in_series() -> list[tuple[str, str, str]]:
    names = {m._name for m in metrics.GROUP_SERIES}
    found = []
    for family in REGISTRY.collect():
        if family.name not in names:
            continue
        for sample in family.samples:
            if "group" in sample.labels and sample.labels["namespace"].startswith("metrics-"):
                found.append((family.name, sample.labels["namespace"], sample.labels["group"]))
    return sorted(set(found))


def test_forget_group_removes_every_series_of_that_group_only() -> None:
    for ns in ("metrics-a", "metrics-b"):
        metrics.RECONCILES.labels(ns, "orders").inc()
        metrics.RECONCILE_ERRORS.labels(ns, "orders").inc()
        metrics.MASTER_EPOCH.labels(ns, "orders").set(3)
        metrics.SYNC_STATE_SET_SIZE.labels(ns, "orders").set(2)
        metrics.LAST_FAILOVER_MS.labels(ns, "orders").set(900)
    metrics.forget_group("metrics-a", "orders")
    metrics.forget_group("metrics-a", "never-seen")  # forgetting twice or unknown is harmless
    assert _groups_in_series() == [
        ("brokergroup_last_failover_duration_ms", "metrics-b", "orders"),
        ("brokergroup_master_epoch", "metrics-b", "orders"),
        ("brokergroup_operator_reconcile_errors", "metrics-b", "orders"),
        ("brokergroup_operator_reconciles", "metrics-b", "orders"),
        ("brokergroup_sync_state_set_size", "metrics-b", "orders"),
    ]
    metrics.forget_group("metrics-b", "orders")
    assert _groups_in_series() == []
