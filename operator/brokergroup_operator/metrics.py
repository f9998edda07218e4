"""Prometheus metrics of the operator (served by `brokergroup operator --metrics-port`)."""

from __future__ import annotations

import contextlib

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "brokergroup_operator_reconciles_total", "Reconcile passes", ["namespace", "group"]
)
RECONCILE_ERRORS = Counter(
    "brokergroup_operator_reconcile_errors_total",
    "Reconcile passes that failed",
    ["namespace", "group"],
)
RECONCILE_SECONDS = Histogram(
    "brokergroup_operator_reconcile_seconds", "Duration of one reconcile pass"
)
INACTIVE_REPORTS = Counter(
    "brokergroup_operator_inactive_reports_total",
    "Brokers reported inactive to the controller, by reason",
    ["reason"],
)
LABEL_PATCHES = Counter("brokergroup_operator_label_patches_total", "Pod label patches", ["role"])
SWITCHOVERS = Counter(
    "brokergroup_operator_switchovers_total", "Switchovers asked of the controller", ["cause"]
)
POD_RESTARTS = Counter(
    "brokergroup_operator_rolling_restarts_total", "Pods deleted by the rolling update"
)
MASTER_EPOCH = Gauge(
    "brokergroup_master_epoch", "Master epoch as last seen", ["namespace", "group"]
)
SYNC_STATE_SET_SIZE = Gauge(
    "brokergroup_sync_state_set_size", "SyncStateSet members", ["namespace", "group"]
)
LAST_FAILOVER_MS = Gauge(
    "brokergroup_last_failover_duration_ms",
    "From the master's loss (as the operator saw it) to the new master's label",
    ["namespace", "group"],
)
GROUPS_FOLLOWED = Gauge(
    "brokergroup_operator_groups_followed",
    "BrokerGroups this replica runs passes for: the active replica's count; 0 on a standby",
)

# The series labelled by one group: forgotten when the group is deleted or stops
# being this operator's, so no gauge of a gone group stays at its last value.
GROUP_SERIES = (RECONCILES, RECONCILE_ERRORS, MASTER_EPOCH, SYNC_STATE_SET_SIZE, LAST_FAILOVER_MS)


def forget_group(namespace: str, group: str) -> None:
    for metric in GROUP_SERIES:
        with contextlib.suppress(KeyError):
            metric.remove(namespace, group)
