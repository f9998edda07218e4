"""Facts the operator's decisions take as input, gathered once per pass.

`GroupView` is the controller's view of one broker set (from ReplicaInfo);
`PodFacts` is what the operator read from one broker pod. Both are frozen so
a decision cannot change its input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from brokergroup_controller import api

CLIENT_PORT = 10911
HA_PORT = CLIENT_PORT + 1
HTTP_PORT = CLIENT_PORT + 2
#: The built-in broker's RocketMQ remoting port (its CLI's default, client port + 3).
REMOTING_PORT = CLIENT_PORT + 3
#: The built-in broker's gRPC port for the RocketMQ 5 SDKs (its CLI's default, client port +
#: 4), and the master Service's port for it: RocketMQ's proxy's gRPC port (docs/grpc.md).
GRPC_PORT = CLIENT_PORT + 4
GRPC_SERVICE_PORT = 8081

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_GROUP = "brokergroup.io/group"
LABEL_ROLE = "brokergroup.io/role"
LABEL_BROKER_ID = "brokergroup.io/broker-id"
APP_NAME = "brokergroup"
REVISION_LABEL = "controller-revision-hash"
SWITCHOVER_ANNOTATION = "brokergroup.io/switchover-to"
BROKER_CONTAINER = "broker"


class Engine(StrEnum):
    """spec.engine: which broker a group's pods run."""

    BROKERGROUP = "brokergroup"
    ROCKETMQ = "rocketmq"


class Role(StrEnum):
    MASTER = "master"
    SLAVE = "slave"


@dataclass(frozen=True)
class BrokerRow:
    broker_id: int
    address: str
    alive: bool
    max_offset: int = 0
    epoch: int = 0
    inactive_reason: str | None = None  # the controller leader's verdict while not alive


@dataclass(frozen=True)
class GroupView:
    """One broker set as the controller leader sees it.

    `master_broker_id` is the id the controller records as master;
    `master_alive` says whether that broker is alive. Older controllers send
    the id only while the master is alive (then `master_alive` follows it).
    """

    master_broker_id: int | None
    master_alive: bool
    master_address: str | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    brokers: tuple[BrokerRow, ...] = ()

    @property
    def live_master(self) -> int | None:
        return self.master_broker_id if self.master_alive else None

    def broker(self, broker_id: int) -> BrokerRow | None:
        for row in self.brokers:
            if row.broker_id == broker_id:
                return row
        return None

    @classmethod
    def from_replica_info(
        cls, info: api.ReplicaInfo, raw: dict[str, Any] | None = None
    ) -> GroupView:
        """Both shapes of /v1/replica-info: with or without `masterAlive`."""
        master_alive_raw = (raw or {}).get("masterAlive", getattr(info, "master_alive", None))
        master_id = info.master_broker_id
        master_alive = master_id is not None if master_alive_raw is None else bool(master_alive_raw)
        brokers = tuple(
            BrokerRow(b.broker_id, b.address, b.alive, b.max_offset, b.epoch, b.inactive_reason)
            for b in info.brokers
        )
        address = info.master_address
        if address is None and master_id is not None:
            row = next((b for b in brokers if b.broker_id == master_id), None)
            address = row.address if row else None
        return cls(
            master_broker_id=master_id,
            master_alive=master_alive and master_id is not None,
            master_address=address,
            master_epoch=info.master_epoch,
            sync_state_set=info.sync_state_set,
            sync_state_set_epoch=info.sync_state_set_epoch,
            brokers=brokers,
        )


@dataclass(frozen=True)
class PodFacts:
    """One broker pod as read from the API server."""

    name: str
    ordinal: int
    uid: str = ""
    ip: str | None = None
    ready: bool = False
    deleting: bool = False
    revision: str = ""
    broker_terminated: bool = False
    restart_count: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    phase: str = ""  # status.phase: Failed/Succeeded means every container ended

    @property
    def process_ended(self) -> bool:
        """The kubelet itself said the broker process ended."""
        return self.broker_terminated or self.phase in ("Failed", "Succeeded")

    @property
    def address(self) -> str | None:
        return None if not self.ip else f"{self.ip}:{CLIENT_PORT}"

    @property
    def labelled_broker_id(self) -> int | None:
        raw = self.labels.get(LABEL_BROKER_ID)
        return int(raw) if raw is not None and raw.isdigit() else None

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> PodFacts:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        name = str(meta.get("name", ""))
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        terminated = False
        restarts = 0
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") != BROKER_CONTAINER:
                continue
            restarts = int(cs.get("restartCount") or 0)
            terminated = "terminated" in (cs.get("state") or {})
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        return cls(
            name=name,
            ordinal=pod_ordinal(name),
            uid=str(meta.get("uid", "")),
            ip=status.get("podIP") or None,
            ready=ready,
            deleting=meta.get("deletionTimestamp") is not None,
            revision=labels.get(REVISION_LABEL, ""),
            broker_terminated=terminated,
            restart_count=restarts,
            labels=labels,
            phase=str(status.get("phase") or ""),
        )


def pod_ordinal(name: str) -> int:
    """The StatefulSet ordinal at the end of a pod name (-1 if none)."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def group_labels(group: str) -> dict[str, str]:
    """The labels every object of a group carries (and its pods' selector)."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: group, LABEL_GROUP: group}


def selector_string(group: str) -> str:
    return ",".join(f"{k}={v}" for k, v in group_labels(group).items())
