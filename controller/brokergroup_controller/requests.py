"""The controller service's typed requests and its caller (DESIGN.md §2.2, §12 "One request
layer").

Every front end decodes its own wire form into one of these at its edge (the HTTP API's
JSON in `request_parsing`, the RocketMQ controller port's header fields in
`rocketmq_front.wire`) and calls the same `endpoints.Endpoints` method, which answers with
the API's types (`api.ReplicaInfo`, ...) or raises `errors.ControllerError`. Nothing here
knows a wire format: the names are Python's, the camelCase stays at the edges.

`ENDPOINT` names each request for access control (`access.AccessRequest.of`) and metrics,
as the HTTP API's endpoint table does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar

from brokergroup_controller import api
from brokergroup_controller.credentials import Principal
from brokergroup_controller.election import ElectionTrigger


@dataclass(frozen=True)
class Caller:
    """Who sends a request, as its front end authenticated it.

    `principal` None: the front end runs without authentication (--insecure-no-auth), so
    nothing is checked. `origin_host` is the host the request came from (the TCP peer, or
    the one a forwarding node vouched for); `address_rules` False: the front end cannot
    know a broker's source address (the RocketMQ port: a stock broker's connections come
    from whatever address the kernel picks), so only role and group rules apply.
    `connection` is a heartbeating broker's own connection (its close makes the broker
    inactive); None when the request was relayed."""

    principal: Principal | None
    origin_host: str | None = None
    address_rules: bool = True
    connection: asyncio.BaseTransport | None = None

    def roles_only(self) -> Caller:
        """The same caller checked by role and group alone (a follower, before forwarding)."""
        return Caller(self.principal, self.origin_host, address_rules=False)


#: The service's own calls (the controller-triggered election): nothing to check.
INTERNAL = Caller(None)


@dataclass(frozen=True)
class GetNextBrokerId:
    ENDPOINT: ClassVar[str] = "next_broker_id"
    cluster_name: str
    broker_name: str


@dataclass(frozen=True)
class ApplyBrokerId:
    ENDPOINT: ClassVar[str] = "apply_broker_id"
    cluster_name: str
    broker_name: str
    broker_id: int
    register_code: str
    address: str
    request_id: str = ""
    #: The front end that decoded it (the HTTP API's parser leaves the default).
    protocol: api.RegistrationProtocol = api.RegistrationProtocol.BROKERGROUP


@dataclass(frozen=True)
class RegisterBroker:
    ENDPOINT: ClassVar[str] = "register"
    cluster_name: str
    broker_name: str
    broker_id: int
    address: str
    request_id: str = ""
    protocol: api.RegistrationProtocol = api.RegistrationProtocol.BROKERGROUP


@dataclass(frozen=True)
class Heartbeat:
    ENDPOINT: ClassVar[str] = "heartbeat"
    heartbeat: api.BrokerHeartbeat


@dataclass(frozen=True)
class ReportInactive:
    ENDPOINT: ClassVar[str] = "inactive"
    cluster_name: str
    broker_name: str
    broker_id: int
    reason: str
    #: True only from a witness of the process's end (exit status, pod gone).
    process_gone: bool = False
    #: The incarnation the report is about ("" unknown: taken as current).
    incarnation: str = ""
    #: A symptom (not ready), not an end: counts only once heartbeats stop too.
    symptom_only: bool = False


@dataclass(frozen=True)
class AlterSyncStateSet:
    ENDPOINT: ClassVar[str] = "alter_sync_state_set"
    cluster_name: str
    broker_name: str
    master_broker_id: int
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    request_id: str = ""


@dataclass(frozen=True)
class ElectMaster:
    """A requested election: a broker asks (`broker_id`), an admin designates
    (`designated_broker_id`), or an admin asks for a switchover (the controller picks
    the target among `eligible_broker_ids`, election.switchover_targets)."""

    ENDPOINT: ClassVar[str] = "elect_master"
    cluster_name: str
    broker_name: str
    trigger: ElectionTrigger
    broker_id: int | None = None
    designated_broker_id: int | None = None
    switchover: bool = False
    eligible_broker_ids: frozenset[int] | None = None
    request_id: str = ""


@dataclass(frozen=True)
class CleanBrokerData:
    ENDPOINT: ClassVar[str] = "clean"
    cluster_name: str
    broker_name: str
    #: None: the whole broker set.
    broker_ids: frozenset[int] | None = None
    force: bool = False
    request_id: str = ""


@dataclass(frozen=True)
class GetReplicaInfo:
    ENDPOINT: ClassVar[str] = "replica_info"
    cluster_name: str
    broker_name: str


@dataclass(frozen=True)
class ListGroups:
    ENDPOINT: ClassVar[str] = "groups"


@dataclass(frozen=True)
class Watch:
    """Wait until the set's epochs pass these (or `timeout_ms`), then its ReplicaInfo."""

    ENDPOINT: ClassVar[str] = "watch"
    cluster_name: str
    broker_name: str
    master_epoch: int
    sync_state_set_epoch: int
    timeout_ms: int


@dataclass(frozen=True)
class PutUser:
    """Create or replace a user of a cluster (admin). `secret_key` None keeps the stored one.
    `broker_name` is always "": users belong to the cluster, not one group."""

    ENDPOINT: ClassVar[str] = "put_user"
    cluster_name: str
    access_key: str
    secret_key: str | None
    policies_json: str
    enabled: bool = True
    broker_name: str = ""

    def __repr__(self) -> str:  # never log the SecretKey
        return f"PutUser({self.cluster_name}, {self.access_key})"


@dataclass(frozen=True)
class GetUser:
    ENDPOINT: ClassVar[str] = "get_user"
    cluster_name: str
    access_key: str
    broker_name: str = ""


@dataclass(frozen=True)
class DeleteUser:
    ENDPOINT: ClassVar[str] = "delete_user"
    cluster_name: str
    access_key: str
    broker_name: str = ""


@dataclass(frozen=True)
class ListUsers:
    ENDPOINT: ClassVar[str] = "list_users"
    cluster_name: str
    broker_name: str = ""


@dataclass(frozen=True)
class UsersSnapshot:
    """A broker's read of its cluster's users with their SecretKeys, when newer than
    `since_version`."""

    ENDPOINT: ClassVar[str] = "users_snapshot"
    cluster_name: str
    since_version: int = -1
    broker_name: str = ""


ServiceRequest = (
    GetNextBrokerId
    | ApplyBrokerId
    | RegisterBroker
    | Heartbeat
    | ReportInactive
    | AlterSyncStateSet
    | ElectMaster
    | CleanBrokerData
    | GetReplicaInfo
    | ListGroups
    | Watch
    | PutUser
    | GetUser
    | DeleteUser
    | ListUsers
    | UsersSnapshot
)
