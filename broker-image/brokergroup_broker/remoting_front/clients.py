"""Who consumes in which group, and who holds which queue lock (pure; time is an argument).

RocketMQ's ConsumerManager and RebalanceLockManager, kept in memory as RocketMQ keeps them:
a consumer is a member of its group from its HEART_BEAT until UNREGISTER_CLIENT, its
connection closing, or `CHANNEL_EXPIRED_MS` without a heartbeat (`joins`, `unregister` and
`drop_connection` tell the caller when membership changed, so it can notify the group); a queue lock
(orderly consumers' LOCK_BATCH_MQ) is held until unlocked or `LOCK_EXPIRED_MS` after its
last renewal. Both tables are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ClientHousekeepingService: a client without a heartbeat for 120 s is gone.
CHANNEL_EXPIRED_MS = 120_000
#: RebalanceLockManager's rocketmq.broker.rebalance.lockMaxLiveTime.
LOCK_EXPIRED_MS = 60_000
MAX_CLIENTS = 10_000
MAX_LOCKS = 100_000


@dataclass
class _Member:
    connection: int
    seen_ms: int


@dataclass
class ConsumerGroups:
    """group → clientId → (connection key, last heartbeat)."""

    groups: dict[str, dict[str, _Member]] = field(default_factory=dict)

    def heartbeat(self, group: str, client_id: str, connection: int, now_ms: int) -> bool:
        """Record a heartbeat; False when the table is full (the caller answers SYSTEM_BUSY)."""
        members = self.groups.get(group)
        known = members is not None and client_id in members
        if not known and sum(len(m) for m in self.groups.values()) >= MAX_CLIENTS:
            return False
        self.groups.setdefault(group, {})[client_id] = _Member(connection, now_ms)
        return True

    def joins(self, group: str, client_id: str, connection: int) -> bool:
        """Would a heartbeat of `client_id` over `connection` change `group`'s membership
        (a new client, or a known one on a new connection: ConsumerGroupInfo.updateChannel)?"""
        member = self.groups.get(group, {}).get(client_id)
        return member is None or member.connection != connection

    def connections(self, group: str) -> list[int]:
        """The connection keys of `group`'s members."""
        return sorted({m.connection for m in self.groups.get(group, {}).values()})

    def unregister(self, group: str, client_id: str) -> bool:
        """Forget a member; True if it was one."""
        members = self.groups.get(group)
        if members is None or members.pop(client_id, None) is None:
            return False
        if not members:
            del self.groups[group]
        return True

    def drop_connection(self, connection: int) -> list[str]:
        """Forget the members on a closed connection; the groups that lost one."""
        changed: list[str] = []
        for group in list(self.groups):
            for client_id, member in list(self.groups[group].items()):
                if member.connection == connection and self.unregister(group, client_id):
                    changed.append(group)
        return changed

    def members(self, group: str, now_ms: int) -> list[str]:
        """Live clientIds of `group`, sorted (expired ones are forgotten here)."""
        members = self.groups.get(group, {})
        for client_id, member in list(members.items()):
            if now_ms - member.seen_ms > CHANNEL_EXPIRED_MS:
                self.unregister(group, client_id)
        return sorted(self.groups.get(group, {}))


QueueKey = tuple[str, str, str, int]  # group, topic, brokerName, queueId


@dataclass
class QueueLocks:
    """(group, topic, brokerName, queueId) → (clientId, last renewal)."""

    locks: dict[QueueKey, tuple[str, int]] = field(default_factory=dict)

    def lock(self, keys: list[QueueKey], client_id: str, now_ms: int) -> list[QueueKey]:
        """Lock or renew each free, expired or own key; the ones this client now holds."""
        held: list[QueueKey] = []
        for key in keys:
            owner = self.locks.get(key)
            free = owner is None or owner[0] == client_id or now_ms - owner[1] > LOCK_EXPIRED_MS
            if free and (owner is not None or len(self.locks) < MAX_LOCKS):
                self.locks[key] = (client_id, now_ms)
                held.append(key)
        return held

    def unlock(self, keys: list[QueueKey], client_id: str) -> None:
        for key in keys:
            owner = self.locks.get(key)
            if owner is not None and owner[0] == client_id:
                del self.locks[key]
