"""Settings and status of one controller's Raft node: `RaftSettings` (peers,
timeouts, read lease, password) validated once, `RaftStatus` (an immutable
snapshot the asyncio side reads), `parse_peers`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

_ALL_INTERFACES = frozenset({"0.0.0.0", "::", "", "*"})

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RaftSettings:
    """Raft tuning (docs/controller.md explains each choice)."""

    self_address: str
    """This node's stable `host:port` (a DNS name in Kubernetes, never a pod IP)."""
    peers: tuple[str, ...]
    """Every member's `host:port`, this node included."""
    data_dir: str
    bind_host: str | None = None
    """Host the Raft port binds; None = the host of `self_address` (never all interfaces)."""
    password: str | None = None
    """pysyncobj `password`: frames are Fernet tokens (AES + HMAC) checked before
    unpickling. None leaves the port open to anyone who can reach it (dev only)."""
    raft_min_timeout_s: float = 0.2
    """Election timeout lower bound: lower is faster failover, more spurious elections."""
    raft_max_timeout_s: float = 0.4
    append_entries_period_s: float = 0.025
    """Heartbeat period of an idle leader (new entries do not wait for it)."""
    entries_batch_s: float = 0.01
    """While earlier entries are uncommitted, new ones leave at most this long after the
    leader's previous append: concurrent proposals share one append (and one fdatasync per
    node) instead of one each. With nothing in flight they leave at once."""
    connection_timeout_s: float = 2.0
    connection_retry_s: float = 0.5
    log_compaction_min_entries: int = 5000
    log_compaction_min_time_s: float = 300.0
    fsync: bool = True
    """fdatasync before acknowledging; False survives kill -9 but not power loss."""
    dns_cache_s: float = 2.0
    """Short, so a peer pod that comes back with a new IP is reached quickly."""
    snapshots_kept: int = 3

    @property
    def read_lease_s(self) -> float:
        """How long a majority's last answers keep a leader's reads current: below the
        election timeout by two heartbeat periods (answers arrive after the followers
        reset their timers)."""
        return self.raft_min_timeout_s - 2 * self.append_entries_period_s

    @property
    def raft_bind_host(self) -> str:
        return self.bind_host or self.self_address.rsplit(":", 1)[0]

    def validate(self) -> None:
        if self.raft_bind_host in _ALL_INTERFACES:
            raise ValueError(
                f"the Raft port may not bind all interfaces ({self.raft_bind_host}): "
                "bind it to the node's own address"
            )
        if self.self_address not in self.peers:
            raise ValueError(f"self address {self.self_address} is not in peers {self.peers}")
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"duplicate peers in {self.peers}")
        if not 0 <= self.entries_batch_s <= self.append_entries_period_s:
            raise ValueError("the entries batch must lie in [0, appendEntriesPeriod]")
        if not self.raft_min_timeout_s > 3 * self.append_entries_period_s:
            raise ValueError("raftMinTimeout must exceed 3 x appendEntriesPeriod")
        if not self.raft_max_timeout_s > self.raft_min_timeout_s:
            raise ValueError("raftMaxTimeout must exceed raftMinTimeout")
        if not self.connection_timeout_s >= self.raft_max_timeout_s:
            raise ValueError("connectionTimeout must be >= raftMaxTimeout")
        if self.log_compaction_min_entries < 2 or self.log_compaction_min_time_s <= 0:
            raise ValueError("log compaction needs minEntries >= 2 and minTime > 0")


@dataclass(frozen=True)
class RaftStatus:
    """Immutable view of the Raft node, published after every tick."""

    self_address: str
    members: tuple[str, ...]
    connected: frozenset[str]
    leader: str | None
    is_leader: bool
    term: int
    commit_index: int
    last_applied: int
    leader_commit_index: int | None
    has_quorum: bool
    log_entries: int
    snapshots_loaded: int
    caught_up: bool
    """Leader known and applied: a follower once caught up with the leader's commit
    index since start (latched, so it does not flap under load); a leader has
    applied every entry up to its own first entry of this term (reads are current)."""


def parse_peers(value: str | Sequence[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    peers = tuple(item.strip() for item in items if item.strip())
    for peer in peers:
        host, _, port = peer.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"peer {peer!r} is not host:port")
    return peers
