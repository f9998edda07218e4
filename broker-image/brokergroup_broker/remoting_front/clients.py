"""Who consumes and produces in which group, who holds which queue lock, and which queues
wait to be told of an offset reset (pure; time is an argument).

RocketMQ's ConsumerManager, ProducerManager and RebalanceLockManager, kept in memory as
RocketMQ keeps them: a client is a member of its group from its HEART_BEAT until
UNREGISTER_CLIENT, its connection closing, or `CHANNEL_EXPIRED_MS` without a heartbeat
(`joins`, `unregister` and `drop_connection` tell the caller when membership changed, so it
can notify the group); each member keeps what ClientChannelInfo keeps (address, language,
version: the connection lists show them), and a consumer group the consumer data of its
latest heartbeat (consume type, message model, consume-from-where and subscriptions, what
ConsumerGroupInfo keeps, until its last member leaves); a queue lock (orderly consumers'
LOCK_BATCH_MQ) is held until unlocked or `LOCK_EXPIRED_MS` after its last renewal, and
another client takes an expired one over. `PendingResets` is ConsumerOffsetManager's
resetOffsetTable: the offset a reset assigned to a (group, topic, queue), until that
queue's next pull is told (offset_reset.py).

Both tables are bounded, and neither can be filled by one client (docs/security.md "Client
state"): members per connection (`MemberBounds.per_connection`: a stock client holds one
clientId per connection, one member per consumer group it runs), per group and in total;
groups remembered as heard (`known`, what offsets may be committed for); the consumer data
kept in all (`MAX_CONSUMER_DATA_BYTES`); locks and pending resets in total. Expired members,
locks and resets are purged as the tables are used, oldest first, a bounded number per call
(`PURGE_PER_CALL`), so a connection that stopped heartbeating holds its members 120 s at
most, and an expired lock never keeps a slot.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass, field

#: ClientHousekeepingService: a client without a heartbeat for 120 s is gone.
CHANNEL_EXPIRED_MS = 120_000
#: RebalanceLockManager's rocketmq.broker.rebalance.lockMaxLiveTime.
LOCK_EXPIRED_MS = 60_000
#: Consumer members (group, clientId) on one connection: a stock client sends one clientId
#: per connection and one member per consumer group of its process.
MAX_MEMBERS_PER_CONNECTION = 1024
#: Members of one consumer group (more consumers than queues consume nothing).
MAX_MEMBERS_PER_GROUP = 4096
MAX_CLIENTS = 100_000
MAX_LOCKS = 100_000
#: Expired entries purged at most per call, so no single request does unbounded work.
PURGE_PER_CALL = 64
#: Consumer groups remembered as heard (RocketMQ's subscription group configs, created at
#: a group's heartbeat); past it the least recently heard is forgotten.
MAX_HEARD_GROUPS = 10_000
#: Bytes of consumer data (the subscriptions' JSON) kept for all consumer groups together.
MAX_CONSUMER_DATA_BYTES = 16 << 20
#: Offset resets waiting for their queue's next pull; past it the oldest is forgotten (its
#: offset is committed already: only the running consumer's correction is lost).
MAX_PENDING_RESETS = 100_000
#: A reset not asked for by a pull within this long is forgotten: a running consumer pulls
#: every queue it holds well within it, a stopped one reads the committed offset at start.
RESET_EXPIRED_MS = CHANNEL_EXPIRED_MS


@dataclass(frozen=True)
class MemberBounds:
    per_connection: int = MAX_MEMBERS_PER_CONNECTION
    per_group: int = MAX_MEMBERS_PER_GROUP
    total: int = MAX_CLIENTS
    heard_groups: int = MAX_HEARD_GROUPS
    consumer_data_bytes: int = MAX_CONSUMER_DATA_BYTES


@dataclass(frozen=True)
class ClientInfo:
    """What RocketMQ's ClientChannelInfo keeps of a member besides its clientId: the
    connection's remote address, the request's language (LanguageCode's name) and version
    (MQVersion ordinal), as a Connection in the connection lists shows them."""

    address: str = ""
    language: str = "JAVA"
    version: int = 0


@dataclass(frozen=True)
class ConsumerData:
    """A consumer group as its latest heartbeat described it (ConsumerGroupInfo): the enum
    values by name (None where the heartbeat left one out) and each subscription's
    SubscriptionData JSON, by topic."""

    consume_type: str | None
    message_model: str | None
    consume_from_where: str | None
    subscriptions: tuple[tuple[str, str], ...] = ()

    @property
    def size(self) -> int:
        """What the bound counts: the subscriptions' JSON text."""
        return sum(len(topic) + len(text) for topic, text in self.subscriptions)


@dataclass
class _Member:
    connection: int
    seen_ms: int
    info: ClientInfo = field(default_factory=ClientInfo)


MemberKey = tuple[str, str]  # group, clientId


@dataclass
class ClientGroups:
    """group → clientId → (connection key, last heartbeat, client info): ProducerManager's
    table as it is (`ProducerGroups`), and ConsumerManager's with more (`ConsumerGroups`)."""

    bounds: MemberBounds = field(default_factory=MemberBounds)
    groups: dict[str, dict[str, _Member]] = field(default_factory=dict)
    #: Every member, least recently heard first (purge order).
    _by_seen: OrderedDict[MemberKey, None] = field(default_factory=OrderedDict)
    _by_connection: dict[int, set[MemberKey]] = field(default_factory=dict)
    #: "consumer" or "producer": what the refusals call a member.
    kind: str = "consumer"

    def __len__(self) -> int:
        return len(self._by_seen)

    def refusal(self, group: str, client_id: str, connection: int, now_ms: int) -> str | None:
        """Why a heartbeat of `client_id` in `group` over `connection` would not be recorded
        (None: it would); expired members are purged first."""
        self.purge(now_ms)
        member = self.groups.get(group, {}).get(client_id)
        if member is not None and member.connection == connection:
            return None  # a renewal takes no new room
        held = len(self._by_connection.get(connection, ()))
        if held >= self.bounds.per_connection:
            return (
                f"this connection already holds {held} {self.kind} members (group, clientId); "
                f"at most {self.bounds.per_connection} per connection"
            )
        if member is not None:
            return None  # a known member moving to this connection
        in_group = len(self.groups.get(group, {}))
        if in_group >= self.bounds.per_group:
            return (
                f"group {group} already has {in_group} {self.kind}s "
                f"(at most {self.bounds.per_group})"
            )
        if len(self._by_seen) >= self.bounds.total:
            return f"{len(self._by_seen)} {self.kind}s on this broker (at most {self.bounds.total})"
        return None

    def heartbeat(
        self,
        group: str,
        client_id: str,
        connection: int,
        now_ms: int,
        info: ClientInfo | None = None,
    ) -> bool:
        """Record a heartbeat; False when a bound refuses it (see `refusal`)."""
        if self.refusal(group, client_id, connection, now_ms) is not None:
            return False
        key = (group, client_id)
        old = self.groups.get(group, {}).get(client_id)
        if old is not None and old.connection != connection:
            self._off_connection(old.connection, key)
        self.groups.setdefault(group, {})[client_id] = _Member(
            connection, now_ms, info or ClientInfo()
        )
        self._by_seen[key] = None
        self._by_seen.move_to_end(key)
        self._by_connection.setdefault(connection, set()).add(key)
        self._heard_now(group)
        return True

    def _heard_now(self, group: str) -> None:
        """A heartbeat of `group` was recorded (ConsumerGroups remembers the group)."""

    def _emptied(self, group: str) -> None:
        """`group` lost its last member (ConsumerGroups forgets its consumer data)."""

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
        member = None if members is None else members.pop(client_id, None)
        if members is None or member is None:
            return False
        if not members:
            del self.groups[group]
            self._emptied(group)
        key = (group, client_id)
        self._by_seen.pop(key, None)
        self._off_connection(member.connection, key)
        return True

    def _off_connection(self, connection: int, key: MemberKey) -> None:
        keys = self._by_connection.get(connection)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_connection[connection]

    def drop_connection(self, connection: int) -> list[str]:
        """Forget the members on a closed connection; the groups that lost one."""
        changed: list[str] = []
        for group, client_id in sorted(self._by_connection.get(connection, ())):
            if self.unregister(group, client_id) and group not in changed:
                changed.append(group)
        return changed

    def purge(self, now_ms: int, limit: int = PURGE_PER_CALL) -> list[str]:
        """Forget up to `limit` members without a heartbeat for CHANNEL_EXPIRED_MS, oldest
        first; the groups that lost one."""
        changed: list[str] = []
        for _ in range(limit):
            oldest = next(iter(self._by_seen), None)
            if oldest is None:
                break
            group, client_id = oldest
            if now_ms - self.groups[group][client_id].seen_ms <= CHANNEL_EXPIRED_MS:
                break
            self.unregister(group, client_id)
            if group not in changed:
                changed.append(group)
        return changed

    def members(self, group: str, now_ms: int) -> list[str]:
        """Live clientIds of `group`, sorted (expired ones are forgotten here)."""
        return [client_id for client_id, _ in self.member_infos(group, now_ms)]

    def member_infos(self, group: str, now_ms: int) -> list[tuple[str, ClientInfo]]:
        """Live members of `group` with their client info, by clientId (expired ones are
        forgotten here)."""
        members = self.groups.get(group, {})
        for client_id, member in list(members.items()):
            if now_ms - member.seen_ms > CHANNEL_EXPIRED_MS:
                self.unregister(group, client_id)
        live = self.groups.get(group, {})
        return [(client_id, live[client_id].info) for client_id in sorted(live)]

    def connection_of(self, group: str, client_id: str, now_ms: int) -> int | None:
        """The connection key of a live member (ConsumerManager.findChannel), or None."""
        member = self.groups.get(group, {}).get(client_id)
        if member is None or now_ms - member.seen_ms > CHANNEL_EXPIRED_MS:
            return None
        return member.connection


@dataclass
class ProducerGroups(ClientGroups):
    """ProducerManager's groupChannelTable: producer group → its live clients (every stock
    client also heartbeats CLIENT_INNER_PRODUCER, the group of its inner producer)."""

    kind: str = "producer"


@dataclass
class ConsumerGroups(ClientGroups):
    """ConsumerManager: the members, the groups heard (`known`), and each group's consumer
    data from its latest heartbeat (`consumer_data`), bounded in bytes in all."""

    #: Groups whose heartbeat was recorded, least recently heard first (members or not).
    _heard: OrderedDict[str, None] = field(default_factory=OrderedDict)
    consumer_data: dict[str, ConsumerData] = field(default_factory=dict)
    _data_bytes: int = 0

    def _heard_now(self, group: str) -> None:
        self._heard[group] = None
        self._heard.move_to_end(group)
        if len(self._heard) > self.bounds.heard_groups:
            self._heard.popitem(last=False)

    def _emptied(self, group: str) -> None:
        old = self.consumer_data.pop(group, None)
        if old is not None:
            self._data_bytes -= old.size

    def message_model(self, group: str) -> str | None:
        """The group's messageModel as its latest heartbeat named it (None: not heard, or
        not named)."""
        data = self.consumer_data.get(group)
        return None if data is None else data.message_model

    def known(self, group: str) -> bool:
        """Was a consumer heartbeat of `group` heard here (a member now, or one of the
        `heard_groups` most recently heard groups: RocketMQ keeps a group's subscription
        config after its consumers leave, and a stock client persists its offsets after it
        unregisters)?"""
        return group in self.groups or group in self._heard

    def data_refusal(self, group: str, data: ConsumerData) -> str | None:
        """Why `data` would not be kept for `group` (None: it would)."""
        old = self.consumer_data.get(group)
        after = self._data_bytes - (0 if old is None else old.size) + data.size
        if after > self.bounds.consumer_data_bytes:
            return (
                f"the consumer data of all groups would take {after} bytes on this broker "
                f"(at most {self.bounds.consumer_data_bytes})"
            )
        return None

    def describe(self, group: str, data: ConsumerData) -> bool:
        """Keep `data` as `group`'s (a member's heartbeat, recorded first); False when the
        bound refuses it (`data_refusal`) or the group has no member."""
        if group not in self.groups or self.data_refusal(group, data) is not None:
            return False
        self._emptied(group)
        self.consumer_data[group] = data
        self._data_bytes += data.size
        return True

    def subscription(self, group: str, topic: str) -> tuple[str | None, str | None] | None:
        """(expressionType, subString) of `group`'s subscription to `topic` in its latest
        heartbeat (ConsumerGroupInfo.findSubscriptionData; the pulls filter by it), or None."""
        data = self.consumer_data.get(group)
        for name, text in () if data is None else data.subscriptions:
            if name == topic:
                sub = json.loads(text)
                return sub.get("expressionType"), sub.get("subString")
        return None

    def subscribers(self, topic: str) -> list[str]:
        """Groups with a member whose subscriptions name `topic`
        (ConsumerManager.queryTopicConsumeByWho), sorted."""
        return sorted(
            group
            for group, data in self.consumer_data.items()
            if any(t == topic for t, _ in data.subscriptions)
        )


QueueKey = tuple[str, str, str, int]  # group, topic, brokerName, queueId


@dataclass
class QueueLocks:
    """(group, topic, brokerName, queueId) → (clientId, last renewal), least recently
    renewed first."""

    max_locks: int = MAX_LOCKS
    locks: OrderedDict[QueueKey, tuple[str, int]] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self.locks)

    def lock(self, keys: list[QueueKey], client_id: str, now_ms: int) -> list[QueueKey]:
        """Lock or renew each free, expired or own key; the ones this client now holds.
        Expired locks are purged first (another client's expired lock is taken over)."""
        self.purge(now_ms, max(PURGE_PER_CALL, len(keys)))
        held: list[QueueKey] = []
        for key in keys:
            owner = self.locks.get(key)
            free = owner is None or owner[0] == client_id or now_ms - owner[1] > LOCK_EXPIRED_MS
            if free and (owner is not None or len(self.locks) < self.max_locks):
                self.locks[key] = (client_id, now_ms)
                self.locks.move_to_end(key)
                held.append(key)
        return held

    def unlock(self, keys: list[QueueKey], client_id: str) -> None:
        for key in keys:
            owner = self.locks.get(key)
            if owner is not None and owner[0] == client_id:
                del self.locks[key]

    def purge(self, now_ms: int, limit: int = PURGE_PER_CALL) -> int:
        """Drop up to `limit` locks not renewed for LOCK_EXPIRED_MS, oldest first; how many."""
        dropped = 0
        while dropped < limit and self.locks:
            key, (_, renewed_ms) = next(iter(self.locks.items()))
            if now_ms - renewed_ms <= LOCK_EXPIRED_MS:
                break
            del self.locks[key]
            dropped += 1
        return dropped


ResetKey = tuple[str, str, int]  # group, topic, queueId


@dataclass
class PendingResets:
    """ConsumerOffsetManager's resetOffsetTable: (group, topic, queueId) → the offset a reset
    assigned and when, oldest first, until that queue's next pull takes it (`take`)."""

    max_resets: int = MAX_PENDING_RESETS
    resets: OrderedDict[ResetKey, tuple[int, int]] = field(default_factory=OrderedDict)

    def __len__(self) -> int:
        return len(self.resets)

    def assign(self, group: str, topic: str, queue_id: int, offset: int, now_ms: int) -> None:
        self.purge(now_ms)
        key = (group, topic, queue_id)
        self.resets.pop(key, None)
        self.resets[key] = (offset, now_ms)
        while len(self.resets) > self.max_resets:
            self.resets.popitem(last=False)

    def pending(self, group: str, topic: str, queue_id: int, now_ms: int) -> int | None:
        """The offset a reset assigned to the queue and no pull took yet, or None."""
        held = self.resets.get((group, topic, queue_id))
        if held is None or now_ms - held[1] > RESET_EXPIRED_MS:
            return None
        return held[0]

    def take(self, group: str, topic: str, queue_id: int, now_ms: int) -> int | None:
        """`pending`, and forget it (queryThenEraseResetOffset)."""
        offset = self.pending(group, topic, queue_id, now_ms)
        self.resets.pop((group, topic, queue_id), None)
        return offset

    def purge(self, now_ms: int, limit: int = PURGE_PER_CALL) -> int:
        """Forget up to `limit` resets older than RESET_EXPIRED_MS, oldest first; how many."""
        dropped = 0
        while dropped < limit and self.resets:
            _, (_, at_ms) = next(iter(self.resets.items()))
            if now_ms - at_ms <= RESET_EXPIRED_MS:
                break
            self.resets.popitem(last=False)
            dropped += 1
        return dropped
