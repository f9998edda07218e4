"""Wire types of the controller HTTP API (docs/architecture.md), shared by
the server, the client, brokers and the operator. JSON uses camelCase."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BrokerLiveness:
    broker_id: int
    address: str
    alive: bool
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    last_heartbeat_age_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "address": self.address,
            "alive": self.alive,
            "epoch": self.epoch,
            "maxOffset": self.max_offset,
            "confirmOffset": self.confirm_offset,
            "electionPriority": self.election_priority,
            "lastHeartbeatAgeMs": self.last_heartbeat_age_ms,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerLiveness:
        return cls(
            broker_id=int(data["brokerId"]),
            address=str(data["address"]),
            alive=bool(data["alive"]),
            epoch=int(data.get("epoch", 0)),
            max_offset=int(data.get("maxOffset", 0)),
            confirm_offset=int(data.get("confirmOffset", 0)),
            election_priority=int(data.get("electionPriority", 0)),
            last_heartbeat_age_ms=data.get("lastHeartbeatAgeMs"),
        )


@dataclass(frozen=True)
class ReplicaInfo:
    """A broker set as the controller leader sees it.

    `master_broker_id`/`master_address` are None unless the master is alive.
    """

    cluster_name: str
    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    next_broker_id: int = 1
    brokers: tuple[BrokerLiveness, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id,
            "masterAddress": self.master_address,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "nextBrokerId": self.next_broker_id,
            "brokers": [b.to_json() for b in self.brokers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplicaInfo:
        master = data.get("masterBrokerId")
        return cls(
            cluster_name=str(data["clusterName"]),
            broker_name=str(data["brokerName"]),
            master_broker_id=None if master is None else int(master),
            master_address=data.get("masterAddress"),
            master_epoch=int(data["masterEpoch"]),
            sync_state_set=frozenset(int(x) for x in data.get("syncStateSet", [])),
            sync_state_set_epoch=int(data["syncStateSetEpoch"]),
            next_broker_id=int(data.get("nextBrokerId", 1)),
            brokers=tuple(BrokerLiveness.from_json(b) for b in data.get("brokers", [])),
        )


@dataclass(frozen=True)
class BrokerHeartbeat:
    """What a broker reports every heartbeatIntervalMs (DESIGN.md §2.3)."""

    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    epoch: int
    max_offset: int
    confirm_offset: int
    election_priority: int = 0
    heartbeat_timeout_ms: int = 2000
    store_writable: bool = True
    store_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "brokerId": self.broker_id,
            "address": self.address,
            "epoch": self.epoch,
            "maxOffset": self.max_offset,
            "confirmOffset": self.confirm_offset,
            "electionPriority": self.election_priority,
            "heartbeatTimeoutMs": self.heartbeat_timeout_ms,
            "storeWritable": self.store_writable,
            "storeError": self.store_error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerHeartbeat:
        return cls(
            cluster_name=str(data["clusterName"]),
            broker_name=str(data["brokerName"]),
            broker_id=int(data["brokerId"]),
            address=str(data["address"]),
            epoch=int(data["epoch"]),
            max_offset=int(data["maxOffset"]),
            confirm_offset=int(data["confirmOffset"]),
            election_priority=int(data.get("electionPriority", 0)),
            heartbeat_timeout_ms=int(data.get("heartbeatTimeoutMs", 2000)),
            store_writable=bool(data.get("storeWritable", True)),
            store_error=data.get("storeError"),
        )


def split_addresses(value: str | Sequence[str]) -> list[str]:
    """'h1:p,h2:p' or a list → ['h1:p', 'h2:p'] (blank items dropped)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]
