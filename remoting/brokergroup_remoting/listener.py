"""What one listening port bounds about its peers, as decisions (pure: no sockets, no clock).

One misbehaving client must not take a server down (docs/security.md "Limits"): it gets a
bounded share of connections, of memory before it has proved a key, of the server's log,
and of its time. The transports (`net` for remoting, the broker's own client protocol) ask a
`ListenerGuard` and act on its answers; the numbers are `ListenerLimits`, one set per port.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from brokergroup_remoting.command import RemotingLimits

#: RocketMQ's maxMessageSize (4 MiB) plus room for its header: a stock client's first frame
#: to a broker may be a send, so a connection that has not signed yet may still send one.
PRE_AUTH_FRAME_BYTES = 4 * 1024 * 1024 + 64 * 1024
#: Frame bounds until a connection's first request passes the signature check: a send's
#: header has ~15 fields and its properties are at most 32 KiB.
PRE_AUTH_LIMITS = RemotingLimits(
    max_frame_bytes=PRE_AUTH_FRAME_BYTES,
    max_header_bytes=64 * 1024,
    max_body_bytes=PRE_AUTH_FRAME_BYTES,
    max_ext_fields=64,
    max_ext_value_bytes=48 * 1024,
)


@dataclass(frozen=True)
class ListenerLimits:
    """The bounds of one listening port; every default is in docs/security.md."""

    max_connections: int = 10_000
    """Open connections on the port; one more is closed at accept."""
    max_connections_per_source: int = 1_000
    """Open connections from one source address (every pod of a client Deployment has its
    own; the local runtime's clients all come from 127.0.0.1)."""
    max_in_flight: int = 256
    """Requests of one connection being handled or refused at once; more are answered
    SYSTEM_BUSY (RocketMQ's full thread pool), and reading stops while answers queue."""
    max_unsent_bytes: int = 4 * 1024 * 1024
    """Answers of one connection the socket has not taken: above it the connection is not
    read (RocketMQ's write-buffer high-water mark), so a peer that never reads its answers
    cannot make the server queue them without end."""
    idle_timeout_s: float = 120.0
    """A connection with nothing read or written for this long is closed
    (RocketMQ's serverChannelMaxIdleTimeSeconds)."""
    pre_auth_limits: RemotingLimits = PRE_AUTH_LIMITS
    """Frame bounds until a connection's first request passes the signature check."""
    max_refusals_before_auth: int = 32
    """Requests refused (no or a wrong signature) on a connection that has not had one
    request accepted yet: then it is closed. A client with the wrong key learns why from
    the first answers; a flood of unsigned frames costs the port this many answers per
    connection, not as many as fit in `max_unsent_bytes`."""
    pre_auth_budget_bytes: int = 64 * 1024 * 1024
    """Bytes of partial frames that connections which have not signed yet may hold together;
    the one that would go over it is closed."""
    log_lines_per_minute: int = 60
    """Refusals and failures logged per minute; the rest are counted in one line."""

    def __post_init__(self) -> None:
        for name in (
            "max_connections",
            "max_connections_per_source",
            "max_in_flight",
            "max_refusals_before_auth",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.idle_timeout_s <= 0 or self.max_unsent_bytes < 0:
            raise ValueError("idle_timeout_s must be > 0 and max_unsent_bytes >= 0")


DEFAULT_LISTENER_LIMITS = ListenerLimits()


class ListenerGuard:
    """Connection counts per source and the shared pre-authentication byte budget."""

    def __init__(self, limits: ListenerLimits = DEFAULT_LISTENER_LIMITS) -> None:
        self.limits = limits
        self._per_source: Counter[str] = Counter()
        self._pre_auth: dict[int, int] = {}
        self._pre_auth_total = 0

    @property
    def connections(self) -> int:
        return sum(self._per_source.values())

    def admit(self, source: str) -> str | None:
        """Count a new connection from `source`, or say why it is refused."""
        if self.connections >= self.limits.max_connections:
            return f"over {self.limits.max_connections} connections on this port"
        if self._per_source[source] >= self.limits.max_connections_per_source:
            return f"over {self.limits.max_connections_per_source} connections from {source}"
        self._per_source[source] += 1
        return None

    def release(self, source: str, connection: int) -> None:
        """A connection admitted from `source` closed (`connection`: its id)."""
        self._per_source[source] -= 1
        if self._per_source[source] <= 0:
            del self._per_source[source]
        self.authenticated(connection)

    def hold_pre_auth(self, connection: int, buffered_bytes: int) -> bool:
        """A connection that has not signed yet now buffers `buffered_bytes`; False when
        that would take the port's pre-authentication budget over its limit."""
        before = self._pre_auth.get(connection, 0)
        total = self._pre_auth_total - before + buffered_bytes
        if buffered_bytes > before and total > self.limits.pre_auth_budget_bytes:
            return False
        self._pre_auth[connection] = buffered_bytes
        self._pre_auth_total = total
        return True

    def authenticated(self, connection: int) -> None:
        """The connection signed (or closed): its bytes leave the budget."""
        self._pre_auth_total -= self._pre_auth.pop(connection, 0)

    @property
    def pre_auth_bytes(self) -> int:
        return self._pre_auth_total


class LogBudget:
    """At most `per_minute` lines a minute; the lines held back are counted and reported
    with the next line let through."""

    def __init__(self, per_minute: int) -> None:
        self._per_minute = per_minute
        self._window_start = float("-inf")
        self._used = 0
        self._held_back = 0

    def allow(self, now: float) -> tuple[bool, int]:
        """(log this line?, lines held back since the last one logged)."""
        if now - self._window_start >= 60.0:
            self._window_start = now
            self._used = 0
        if self._used >= self._per_minute:
            self._held_back += 1
            return False, 0
        self._used += 1
        held, self._held_back = self._held_back, 0
        return True, held
