"""Wire types of the controller HTTP API (docs/architecture.md), shared by
the server, the client, brokers and the operator. JSON uses camelCase."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

BrokerSetKey = tuple[str, str]
"""(clusterName, brokerName): the one key of a broker set (a BrokerGroup's replica group,
RocketMQ's brokerName) in the controller's state, liveness, name server and front ends.
Not the operator's Kubernetes key of a BrokerGroup object, (namespace, name)."""


class RegistrationProtocol(StrEnum):
    """Which of the controller's front ends a broker applied for its id or registered
    through: what tells a stock RocketMQ 5 broker from brokergroup's built-in one."""

    BROKERGROUP = "brokergroup"
    """The HTTP API (`/v1/brokers/apply-id`, `/v1/brokers/register`): the built-in broker."""
    ROCKETMQ = "rocketmq"
    """The RocketMQ remoting port (CONTROLLER_APPLY_BROKER_ID, CONTROLLER_REGISTER_BROKER):
    a stock RocketMQ 5 broker in controller mode (ReplicasManager)."""


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
    #: Why the leader holds it not alive (a heartbeat timeout, a store that cannot take
    #: writes and its error, a report); None while alive.
    inactive_reason: str | None = None

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
            "inactiveReason": self.inactive_reason,
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
            inactive_reason=None if (why := data.get("inactiveReason")) is None else str(why),
        )


@dataclass(frozen=True)
class ReplicaInfo:
    """A broker set as the controller leader sees it.

    `master_broker_id`/`master_address` are the master the Raft state records
    (None only when the set has no master, e.g. after an election that found
    no candidate); `master_alive` says whether the leader sees it alive. A
    reader that wants "where to send writes now" uses `live_master_*`.
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
    master_alive: bool = True
    # How long a master that takes over at this masterEpoch must hold its
    # acknowledgements: the rest of the old master's lease (§3.3 "Fencing").
    master_takeover_wait_ms: int = 0

    @property
    def live_master_broker_id(self) -> int | None:
        return self.master_broker_id if self.master_alive else None

    @property
    def live_master_address(self) -> str | None:
        return self.master_address if self.master_alive else None

    def to_json(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "masterBrokerId": self.master_broker_id,
            "masterAddress": self.master_address,
            "masterAlive": self.master_alive,
            "masterTakeoverWaitMs": self.master_takeover_wait_ms,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "nextBrokerId": self.next_broker_id,
            "brokers": [b.to_json() for b in self.brokers],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplicaInfo:
        master = data.get("masterBrokerId")
        # Controllers before masterAlive sent the id only while it was alive.
        alive = data.get("masterAlive", master is not None)
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
            master_alive=bool(alive) and master is not None,
            master_takeover_wait_ms=int(data.get("masterTakeoverWaitMs", 0) or 0),
        )


@dataclass(frozen=True)
class AppliedBrokerId:
    """ApplyBrokerId's answer: the broker's id and the set's next free one."""

    broker_id: int
    next_broker_id: int


@dataclass(frozen=True)
class SyncStateSet:
    """AlterSyncStateSet's answer: the committed set and its epoch."""

    members: frozenset[int]
    epoch: int


@dataclass(frozen=True)
class InactiveReportAnswer:
    """A report's answer: the set after it, and whether it was ignored (stale incarnation)."""

    replica_info: ReplicaInfo
    ignored: bool


#: The environment variable through which a launcher (the pod spec, the local
#: supervisor) tells a broker its incarnation; reports about it carry the same.
INCARNATION_ENV = "BROKERGROUP_INCARNATION"


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
    # What a master's acknowledgements depend on, for the takeover wait (§3.3
    # "Fencing"). Unknown (None / False) is read the cautious way.
    master_lease_ms: int | None = None
    all_ack_in_sync_state_set: bool = False
    # Which start of the broker this is (its pod's uid, or a per-start token of
    # the local supervisor): reports naming another incarnation are stale.
    incarnation: str = ""

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
            "masterLeaseMs": self.master_lease_ms,
            "allAckInSyncStateSet": self.all_ack_in_sync_state_set,
            "incarnation": self.incarnation,
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
            master_lease_ms=None
            if data.get("masterLeaseMs") is None
            else int(data["masterLeaseMs"]),
            all_ack_in_sync_state_set=bool(data.get("allAckInSyncStateSet", False)),
            incarnation=str(data.get("incarnation") or ""),
        )


def split_addresses(value: str | Sequence[str]) -> list[str]:
    """'h1:p,h2:p' or a list → ['h1:p', 'h2:p'] (blank items dropped)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]
