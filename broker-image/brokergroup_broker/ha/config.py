"""HA replication settings (DESIGN.md §3.2/§3.3): every bound and timeout, named.

The relationships between fields are checked once, at construction
(``HAConfig.__post_init__``), so a bad broker.json fails at start-up with a
message naming both values rather than as a flapping connection later.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from brokergroup_broker.ha.codec import DEFAULT_MAX_BODY_BYTES

__all__ = ["HAConfig"]


@dataclass(frozen=True, slots=True)
class HAConfig:
    """Settings of HAMasterService / HASlaveService.

    Units are in the names. Master and slaves of one group should share a
    config: a master batch larger than a slave's ``max_frame_body_bytes`` is a
    protocol error on that slave.
    """

    transfer_batch_bytes: int = 256 * 1024
    """haTransferBatchSize: most commit-log bytes in one transfer frame. Larger
    batches mean fewer acks and syscalls per MB (throughput); smaller ones mean
    earlier acks for the first records of a burst (latency). RocketMQ uses 32 KiB;
    Python's per-frame cost favours bigger batches."""

    heartbeat_interval_ms: int = 500
    """haSendHeartbeatInterval: an idle master sends an empty transfer this often.
    Each heartbeat is acked, which refreshes the slave's lastCaughtUpTimeMs on an
    idle group and keeps both read timeouts quiet. Must be well under
    ``read_timeout_ms`` and under ``ha_max_time_slave_not_catch_up_ms``."""

    confirm_publish_delay_ms: int = 5
    """How long an idle master waits for a batch to carry a moved confirmOffset
    before it sends the slaves a heartbeat with it. Under load the next batch
    carries it, so a commit round costs one frame and one ack per slave instead
    of two of each; an idle group's slaves see the new confirmOffset (their
    consumers' read limit) this much later. 0 sends it at once."""

    stop_drain_timeout_ms: int = 1000
    """How long ``HAMasterService.stop`` waits for each streaming slave to receive the
    master's last confirmOffset (sent at once, then a half-close the slave reads to
    its end) before the connections are cut. The slave promoted next, or acting
    as master, then serves everything this master acknowledged. A healthy slave
    needs one round trip; a stopped or unreachable one holds the master's step
    down (and a graceful shutdown) this long."""

    read_timeout_ms: int = 3000
    """haHousekeepingInterval: a connection with no frame received for this long is
    closed (master side: slave presumed dead; slave side: reconnect). Shorter
    detects a silent peer sooner but risks closing a link during a long GC/fsync
    stall."""

    write_timeout_ms: int = 3000
    """Bound on one frame's send: a slave that stops reading (full socket buffer)
    must not pin a master task forever."""

    connect_timeout_ms: int = 1000
    """Slave's TCP connect + master handshake reply deadline."""

    reconnect_backoff_min_ms: int = 50
    """First retry delay after a failed/closed connection; doubles per failure."""

    reconnect_backoff_max_ms: int = 2000
    """Cap of the reconnect delay. Low enough that a slave follows a new master
    within a heartbeat or two of the controller announcing it."""

    ha_max_time_slave_not_catch_up_ms: int = 5000
    """haMaxTimeSlaveNotCatchUpMs: a slave whose lastCaughtUpTimeMs is older than
    this is shrunk out of the SyncStateSet (decided by the core, §3.3). Smaller
    shrinks a slow slave faster (writes resume sooner with allAck) but drops a
    slave on a short hiccup."""

    max_frame_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Decoder bound on one frame's body (transfer data or epoch entries): a
    garbage length is rejected before any allocation."""

    read_chunk_bytes: int = 256 * 1024
    """Largest single socket read; with ``max_frame_body_bytes`` this bounds a
    decoder's buffer (one frame plus one chunk)."""

    max_inflight_batches: int = 1024
    """Master side: how many sent-but-unacked (masterMaxOffset, transferTime)
    marks are remembered per slave for lastCaughtUpTimeMs; beyond it the oldest
    mark is dropped (only ever makes caught-up detection more conservative)."""

    secret: bytes | None = field(default=None, repr=False)
    """The group's HA secret (`--ha-secret-file`): both sides run the mutual HMAC
    challenge of ha/auth.py before any frame. None disables authentication: only
    in-process tests, or a broker started with `--insecure-no-ha-auth`."""

    tls_server: ssl.SSLContext | None = field(default=None, repr=False)
    """Master side: mutual TLS on every HA connection (ha/link.py), this context asking for
    the slave's certificate (`tls.server_context` with the CA: CERT_REQUIRED). None: bare
    TCP."""
    tls_client: ssl.SSLContext | None = field(default=None, repr=False)
    """Slave side: TLS to the master with this context (the master verified against the
    CA, this broker's certificate presented). None: bare TCP."""
    tls_server_name: str | None = None
    """Slave side: the name the master's certificate is verified for; None: the master's
    address (Kubernetes dials a pod IP no certificate names, so the operator passes the
    group's Service name, which every leaf of the group carries)."""
    source_host: str | None = None
    """Slave side: the local address HA connections leave from (the broker's own
    advertised address), so the master sees the address the controller registered
    for this broker id."""

    sync_from_last_file: bool = False
    """isSyncFromLastFile: a new, empty slave starts at the master's last segment
    instead of its min offset (faster start, no history)."""

    async_learner: bool = False
    """isAsyncLearner: the slave replicates but never joins the SyncStateSet."""

    def __post_init__(self) -> None:
        positive = {
            "transfer_batch_bytes": self.transfer_batch_bytes,
            "heartbeat_interval_ms": self.heartbeat_interval_ms,
            "read_timeout_ms": self.read_timeout_ms,
            "write_timeout_ms": self.write_timeout_ms,
            "connect_timeout_ms": self.connect_timeout_ms,
            "reconnect_backoff_min_ms": self.reconnect_backoff_min_ms,
            "reconnect_backoff_max_ms": self.reconnect_backoff_max_ms,
            "ha_max_time_slave_not_catch_up_ms": self.ha_max_time_slave_not_catch_up_ms,
            "max_frame_body_bytes": self.max_frame_body_bytes,
            "read_chunk_bytes": self.read_chunk_bytes,
            "max_inflight_batches": self.max_inflight_batches,
            "stop_drain_timeout_ms": self.stop_drain_timeout_ms,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"HAConfig.{name}={value} must be > 0")
        if not 0 <= self.confirm_publish_delay_ms < self.heartbeat_interval_ms:
            raise ValueError(
                f"HAConfig.confirm_publish_delay_ms={self.confirm_publish_delay_ms} must be "
                f">= 0 and below heartbeat_interval_ms={self.heartbeat_interval_ms}"
            )
        if self.transfer_batch_bytes > self.max_frame_body_bytes:
            raise ValueError(
                f"HAConfig.transfer_batch_bytes={self.transfer_batch_bytes} exceeds "
                f"max_frame_body_bytes={self.max_frame_body_bytes}: slaves would reject "
                "every full batch"
            )
        if self.heartbeat_interval_ms * 2 > self.read_timeout_ms:
            raise ValueError(
                f"HAConfig.read_timeout_ms={self.read_timeout_ms} must be at least twice "
                f"heartbeat_interval_ms={self.heartbeat_interval_ms}, or an idle but healthy "
                "link is closed"
            )
        if self.heartbeat_interval_ms >= self.ha_max_time_slave_not_catch_up_ms:
            raise ValueError(
                f"HAConfig.heartbeat_interval_ms={self.heartbeat_interval_ms} must be below "
                f"ha_max_time_slave_not_catch_up_ms={self.ha_max_time_slave_not_catch_up_ms}, "
                "or idle in-sync slaves are shrunk between heartbeats"
            )
        if self.reconnect_backoff_min_ms > self.reconnect_backoff_max_ms:
            raise ValueError(
                f"HAConfig.reconnect_backoff_min_ms={self.reconnect_backoff_min_ms} exceeds "
                f"reconnect_backoff_max_ms={self.reconnect_backoff_max_ms}"
            )
