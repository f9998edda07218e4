"""The broker registrations one name server node holds (pure: `now_ms` is an argument).

Keyed as RouteInfoManager keys its brokerLiveTable: (clusterName, brokerAddr). A
registration's topics accumulate as RocketMQ's topicQueueTable does: a broker announces a
new topic with a registration that carries only that topic (registerIncrementBrokerData),
so a later registration adds and updates topics and never drops the others; only
DELETE_TOPIC_IN_NAMESRV, UNREGISTER_BROKER, expiry and the broker's connection closing
remove them. A group's topics also outlive the registration that announced them while any
member of the group is registered (RouteInfoManager keys topic queue data by brokerName and
drops it only with the group's last broker): a master killed right after a new topic's
first send must not take the topic out of the routes until the new master re-registers.
The table is bounded (`max_registrations`): a full table refuses new brokers,
never forgets live ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from brokergroup_controller.api import BrokerSetKey
from brokergroup_controller.namesrv.routes import BrokerRegistration, TopicConfig

RegistrationKey = tuple[str, str]  # (clusterName, brokerAddr)

#: Registrations one node keeps at most (every broker of every group registers once).
DEFAULT_MAX_REGISTRATIONS = 4096


class RegistryFull(Exception):
    """No room for another broker's registration."""


class Registry:
    """Registrations by (clusterName, brokerAddr), with the connection that made each."""

    def __init__(self, max_registrations: int = DEFAULT_MAX_REGISTRATIONS) -> None:
        self._entries: dict[RegistrationKey, BrokerRegistration] = {}
        self._owners: dict[RegistrationKey, int] = {}
        self._group_topics: dict[BrokerSetKey, dict[str, TopicConfig]] = {}
        self._max = max_registrations

    def __iter__(self) -> Iterator[BrokerRegistration]:
        return iter(list(self._entries.values()))

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, cluster_name: str, broker_addr: str) -> BrokerRegistration | None:
        return self._entries.get((cluster_name, broker_addr))

    def register(
        self, reg: BrokerRegistration, owner: int, now_ms: int
    ) -> BrokerRegistration | None:
        """Store `reg` (its topics merged over the ones held); None when RocketMQ would refuse
        it: a single-topic registration from a broker not registered yet (its full
        registration must come first)."""
        self.expire(now_ms)
        key = (reg.cluster_name, reg.broker_addr)
        held = self._entries.get(key)
        if held is None:
            if len(reg.topics) == 1:
                return None
            if len(self._entries) >= self._max:
                raise RegistryFull(
                    f"{len(self._entries)} brokers registered on this name server "
                    f"(limit {self._max}); {reg.broker_addr} refused"
                )
            merged = reg
        else:
            merged = dataclasses.replace(reg, topics={**held.topics, **reg.topics})
        self._entries[key] = merged
        self._owners[key] = owner
        self._group_topics.setdefault(reg.group, {}).update(reg.topics)
        return merged

    def group_topics(self) -> dict[BrokerSetKey, dict[str, TopicConfig]]:
        """Every topic some registration of each group announced, while the group has one."""
        return {group: dict(topics) for group, topics in self._group_topics.items()}

    def _forget_groups_without_members(self) -> None:
        live = {reg.group for reg in self._entries.values()}
        for group in [g for g in self._group_topics if g not in live]:
            del self._group_topics[group]

    def touch(self, cluster_name: str, broker_addr: str, now_ms: int) -> bool:
        """Refresh a registration's expiry (BROKER_HEARTBEAT, QUERY_DATA_VERSION)."""
        key = (cluster_name, broker_addr)
        held = self._entries.get(key)
        if held is None:
            return False
        self._entries[key] = dataclasses.replace(held, last_update_ms=now_ms)
        return True

    def unregister(self, cluster_name: str, broker_addr: str, broker_name: str) -> bool:
        key = (cluster_name, broker_addr)
        held = self._entries.get(key)
        if held is None or held.broker_name != broker_name:
            return False
        del self._entries[key]
        self._owners.pop(key, None)
        self._forget_groups_without_members()
        return True

    def drop_owner(self, owner: int) -> list[BrokerRegistration]:
        """Forget what connection `owner` registered (RouteInfoManager.onChannelDestroy)."""
        keys = [key for key, who in self._owners.items() if who == owner]
        dropped = [self._entries.pop(key) for key in keys]
        for key in keys:
            del self._owners[key]
        self._forget_groups_without_members()
        return dropped

    def delete_topic(
        self, topic: str, cluster_name: str | None, broker_name: str | None = None
    ) -> int:
        """Remove `topic` from every registration (of `cluster_name`, of the group
        `broker_name` when given); how many held it."""

        def chosen(cluster: str, broker: str) -> bool:
            return (cluster_name is None or cluster == cluster_name) and (
                broker_name is None or broker == broker_name
            )

        count = 0
        for key, reg in list(self._entries.items()):
            if topic in reg.topics and chosen(reg.cluster_name, reg.broker_name):
                topics = {name: c for name, c in reg.topics.items() if name != topic}
                self._entries[key] = dataclasses.replace(reg, topics=topics)
                count += 1
        for (cluster, broker), topics in self._group_topics.items():
            if chosen(cluster, broker):
                topics.pop(topic, None)
        return count

    def expire(self, now_ms: int) -> list[BrokerRegistration]:
        """Drop registrations past their timeout (RouteInfoManager.scanNotActiveBroker)."""
        dead = [key for key, reg in self._entries.items() if not reg.alive(now_ms)]
        dropped = [self._entries.pop(key) for key in dead]
        for key in dead:
            self._owners.pop(key, None)
        self._forget_groups_without_members()
        return dropped
