"""Master lease (DESIGN.md §3.3 "Fencing").

How: explicit times; the lease runs from the *send* time of the last
confirmed heartbeat and config validation rejects a lease that could
outlive the controller's inactive timeout.
"""

from __future__ import annotations

import pytest

from brokergroup_broker.core.lease import LeaseConfigError, MasterLease, validate_lease


def test_lease_runs_from_the_send_time() -> None:
    lease = MasterLease(1500)
    assert not lease.valid(0)
    lease.renew(request_sent_ms=1000)
    assert lease.valid(2499)
    assert not lease.valid(2500)
    assert lease.remaining_ms(2000) == 500


def test_an_older_answer_never_shortens_the_lease() -> None:
    lease = MasterLease(1500)
    lease.renew(2000)
    lease.renew(1000)  # reordered answer of an earlier heartbeat
    assert lease.valid(3000)


def test_revoke() -> None:
    lease = MasterLease(1500)
    lease.renew(0)
    lease.revoke()
    assert not lease.valid(1) and lease.remaining_ms(1) == 0


@pytest.mark.parametrize(
    ("lease_ms", "timeout_ms", "interval_ms", "ok"),
    [
        (1500, 2000, 500, True),
        (2000, 2000, 500, False),
        (400, 2000, 500, False),
        (0, 2000, 500, False),
    ],
)
def test_validation(lease_ms: int, timeout_ms: int, interval_ms: int, ok: bool) -> None:
    if ok:
        validate_lease(
            master_lease_ms=lease_ms,
            heartbeat_timeout_ms=timeout_ms,
            heartbeat_interval_ms=interval_ms,
        )
    else:
        with pytest.raises(LeaseConfigError, match="masterLeaseMs"):
            validate_lease(
                master_lease_ms=lease_ms,
                heartbeat_timeout_ms=timeout_ms,
                heartbeat_interval_ms=interval_ms,
            )
