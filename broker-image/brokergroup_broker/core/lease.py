"""Master lease fencing (DESIGN.md §3.3 "Fencing").

Theory of operation
-------------------
The controller leader declares a broker inactive when its last heartbeat
is older than ``heartbeatTimeoutMs`` (§2.3) and only then elects a new
master. A master therefore knows: if the leader answered a heartbeat that
I *sent* at time t (and the answer still names me master at my epoch), no
other master can be elected before t + heartbeatTimeoutMs — the leader
received it no earlier than t. Holding acknowledgements to
t + ``masterLeaseMs`` with masterLeaseMs < heartbeatTimeoutMs means a
partitioned old master stops acknowledging before a new master can start,
so it never acknowledges what the new master will truncate.

Renewal uses the *send* time, never the receive time: a slow answer must
not stretch the lease. The clock is the driver's monotonic clock, passed
in. A new controller leader gives every broker one more timeout of grace
(§2.3), which only widens the margin. Clock *rate* drift between the two
machines is the residual risk; keep heartbeatTimeoutMs − masterLeaseMs
well above a few heartbeat intervals (validated in config).
"""

from __future__ import annotations


class LeaseConfigError(ValueError):
    pass


def validate_lease(
    *, master_lease_ms: int, heartbeat_timeout_ms: int, heartbeat_interval_ms: int
) -> None:
    """Start-up check; raises LeaseConfigError naming the values."""
    if master_lease_ms <= 0:
        raise LeaseConfigError(f"masterLeaseMs must be positive, got {master_lease_ms}")
    if master_lease_ms >= heartbeat_timeout_ms:
        raise LeaseConfigError(
            f"masterLeaseMs {master_lease_ms} must be < heartbeatTimeoutMs "
            f"{heartbeat_timeout_ms}: otherwise a partitioned master could still "
            "acknowledge writes after the controller elected a new master"
        )
    if master_lease_ms <= heartbeat_interval_ms:
        raise LeaseConfigError(
            f"masterLeaseMs {master_lease_ms} must be > heartbeatIntervalMs "
            f"{heartbeat_interval_ms}: a healthy master would expire its lease between "
            "two heartbeats and refuse writes"
        )


class MasterLease:
    def __init__(self, master_lease_ms: int) -> None:
        self.master_lease_ms = master_lease_ms
        self._valid_until_ms: int | None = None

    def renew(self, request_sent_ms: int) -> None:
        """The controller leader confirmed us master for a request sent then."""
        until = request_sent_ms + self.master_lease_ms
        if self._valid_until_ms is None or until > self._valid_until_ms:
            self._valid_until_ms = until

    def revoke(self) -> None:
        self._valid_until_ms = None

    def valid(self, now_ms: int) -> bool:
        return self._valid_until_ms is not None and now_ms < self._valid_until_ms

    def remaining_ms(self, now_ms: int) -> int:
        if self._valid_until_ms is None:
            return 0
        return max(0, self._valid_until_ms - now_ms)
