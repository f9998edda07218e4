"""The controller's replicated state machine (DESIGN.md §2.1, §2.2).

Theory of operation
-------------------
The Raft leader decides (it alone knows liveness, §2.3) and proposes an
*event*; every replica then `apply`s the committed event to its own
`ControllerState`. `apply` is deterministic and re-checks everything that
does not need liveness (epochs, registration, registerCode CAS), so two
concurrent leader decisions based on the same epochs can never both take
effect and all replicas stay identical.

Invariants (asserted by tests/unit/test_controller_properties.py):
- masterEpoch and syncStateSetEpoch of a broker set never decrease, even
  across CleanBrokerData of a whole set (its epochs are kept as a floor).
- At most one master per (broker set, masterEpoch): every change of master
  bumps masterEpoch.
- A rejected event leaves the broker sets unchanged.
- A request id answers once: an event carrying the `request_id` of one of
  the last RECENT_REQUESTS_BOUND answered events (same type and broker set)
  changes nothing and gets that first answer again. A client retries a
  request whose answer it lost (a timeout, a leader change) with the same
  id, so a committed AlterSyncStateSet or ElectMaster is never turned into
  FENCED_SYNC_STATE_SET_EPOCH or MASTER_STILL_EXIST by its own retry. The
  table is part of the replicated state (and of the dump), so it answers
  the same on every replica, after a leader change and after a restart.

No I/O, no clocks, no randomness here.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, ClassVar

from brokergroup_controller.api import BrokerSetKey, RegistrationProtocol
from brokergroup_controller.errors import ErrorCode
from brokergroup_controller.takeover import Takeover
from brokergroup_remoting.authorization import PolicyError, check_access_key, entries_from_json

RequestKey = tuple[str, str, str, str]  # (event type, clusterName, brokerName, requestId)

#: Answered request ids remembered, all broker sets together, oldest forgotten
#: first. A fixed number (not a setting): every replica must forget the same
#: ids at the same entry. A retry is recognised while fewer than this many
#: id-carrying events committed since its first attempt (at 100 events/s,
#: ten seconds; a client retries within its request timeout, seconds). The
#: table costs about 200 bytes of dump per entry.
RECENT_REQUESTS_BOUND = 1024


@dataclass
class BrokerRecord:
    address: str
    register_code: str
    #: The front end of the broker's last committed ApplyBrokerId or RegisterBroker. Its
    #: default is left out of dumps and events, so records and entries of built-in brokers
    #: keep the format they always had (an older controller still applies them), and state
    #: written before the field reads as built-in.
    protocol: RegistrationProtocol = RegistrationProtocol.BROKERGROUP

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"address": self.address, "registerCode": self.register_code}
        if self.protocol is not RegistrationProtocol.BROKERGROUP:
            body["protocol"] = self.protocol.value
        return body

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BrokerRecord:
        return cls(
            address=data["address"],
            register_code=data["registerCode"],
            protocol=protocol_of(data.get("protocol")),
        )


@dataclass
class BrokerSet:
    cluster_name: str
    broker_name: str
    next_broker_id: int = 1
    brokers: dict[int, BrokerRecord] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0
    # False until the first master of this incarnation: a set re-created after a
    # whole-set clean starts at its predecessor's epoch floor, not at masterEpoch 0,
    # yet must still elect its first master like a new set (issue 22).
    has_had_master: bool = False
    #: The latest election's hold on the new master (None: no election carried one).
    takeover: Takeover | None = None

    @property
    def key(self) -> BrokerSetKey:
        return (self.cluster_name, self.broker_name)

    @property
    def has_rocketmq_brokers(self) -> bool:
        """Some member registered through RocketMQ's controller protocol (a stock broker)."""
        return any(r.protocol is RegistrationProtocol.ROCKETMQ for r in self.brokers.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusterName": self.cluster_name,
            "brokerName": self.broker_name,
            "nextBrokerId": self.next_broker_id,
            "brokers": {
                str(broker_id): r.to_dict() for broker_id, r in sorted(self.brokers.items())
            },
            "masterBrokerId": self.master_broker_id,
            "masterEpoch": self.master_epoch,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "hasHadMaster": self.has_had_master,
            "takeover": None if self.takeover is None else self.takeover.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BrokerSet:
        takeover = data.get("takeover")
        return cls(
            cluster_name=data["clusterName"],
            broker_name=data["brokerName"],
            next_broker_id=int(data["nextBrokerId"]),
            brokers={int(k): BrokerRecord.from_dict(v) for k, v in data["brokers"].items()},
            master_broker_id=data["masterBrokerId"],
            master_epoch=int(data["masterEpoch"]),
            sync_state_set={int(x) for x in data["syncStateSet"]},
            sync_state_set_epoch=int(data["syncStateSetEpoch"]),
            # Dumps from before the field: the old rule (a set past masterEpoch 0
            # has had a master), so an old state behaves exactly as it did.
            has_had_master=bool(
                data.get(
                    "hasHadMaster",
                    data["masterBrokerId"] is not None or int(data["masterEpoch"]) > 0,
                )
            ),
            takeover=None if takeover is None else Takeover.from_dict(takeover),
        )


@dataclass
class StoredUser:
    """A user as the replicated state keeps it: the SecretKey sealed (users_seal.py), the
    policies as canonical JSON, `version` the cluster's usersVersion at its last change."""

    access_key: str
    sealed_secret_key: str
    policies_json: str
    enabled: bool
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "accessKey": self.access_key,
            "sealedSecretKey": self.sealed_secret_key,
            "policies": json.loads(self.policies_json),
            "enabled": self.enabled,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StoredUser:
        return cls(
            str(data["accessKey"]),
            str(data["sealedSecretKey"]),
            canonical_policies(data["policies"]),
            bool(data["enabled"]),
            int(data["version"]),
        )


@dataclass
class ClusterUsers:
    """A cluster's users; `version` rises by one on every committed change (brokers refresh
    by it)."""

    version: int = 0
    users: dict[str, StoredUser] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "users": [u.to_dict() for _, u in sorted(self.users.items())],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterUsers:
        users = [StoredUser.from_dict(u) for u in data.get("users", [])]
        return cls(int(data["version"]), {u.access_key: u for u in users})


def canonical_policies(policies: object) -> str:
    """The policy list as one canonical JSON text (what PutUser carries)."""
    return json.dumps(
        [e.to_json() for e in entries_from_json(policies)], sort_keys=True, separators=(",", ":")
    )


def protocol_of(name: object) -> RegistrationProtocol:
    """A dump's or an event's protocol name; absent (None) is the built-in broker's."""
    if name is None:
        return RegistrationProtocol.BROKERGROUP
    try:
        return RegistrationProtocol(str(name))
    except ValueError as exc:
        raise ValueError(f"unknown broker registration protocol {name!r}") from exc


# ---------------------------------------------------------------- events


def request_key_of(
    event_type: str, cluster_name: str, broker_name: str, request_id: str
) -> RequestKey | None:
    """Where the first answer to `request_id` is remembered; None without an id."""
    return (event_type, cluster_name, broker_name, request_id) if request_id else None


@dataclass(frozen=True)
class Event:
    """Base of committed events; `TYPE` names the event in the Raft log."""

    TYPE: ClassVar[str] = ""
    cluster_name: str
    broker_name: str
    # The client's id of the request this event answers ("" : none, never deduplicated).
    request_id: str = field(default="", kw_only=True)

    @property
    def key(self) -> BrokerSetKey:
        return (self.cluster_name, self.broker_name)

    @property
    def request_key(self) -> RequestKey | None:
        return request_key_of(self.TYPE, self.cluster_name, self.broker_name, self.request_id)

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": self.TYPE}
        for name, value in self.__dict__.items():
            if (name == "request_id" and not value) or (
                name == "protocol" and value == RegistrationProtocol.BROKERGROUP
            ):
                continue  # entries without one keep the format they always had
            body[name] = sorted(value) if isinstance(value, frozenset) else value
        return body


@dataclass(frozen=True)
class ApplyBrokerId(Event):
    """`protocol`: the front end it came through, recorded with the id (an entry without
    one, from the HTTP API or written before the field: the built-in broker's)."""

    TYPE: ClassVar[str] = "ApplyBrokerId"
    broker_id: int
    register_code: str
    address: str
    protocol: str = RegistrationProtocol.BROKERGROUP.value


@dataclass(frozen=True)
class RegisterBroker(Event):
    """`protocol` as ApplyBrokerId's."""

    TYPE: ClassVar[str] = "RegisterBroker"
    broker_id: int
    address: str
    protocol: str = RegistrationProtocol.BROKERGROUP.value


@dataclass(frozen=True)
class AlterSyncStateSet(Event):
    TYPE: ClassVar[str] = "AlterSyncStateSet"
    master_broker_id: int
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class ElectMaster(Event):
    """The leader's election decision and the epochs it was based on.

    The takeover fields carry the leader's bound on the replaced master's
    lease (`takeover.py`): `apply` stores them, so the hold survives a
    commit that outlived its request. `takeover_wait_ms` None: an event from
    a log written before the fields existed (nothing is stored)."""

    TYPE: ClassVar[str] = "ElectMaster"
    new_master_broker_id: int | None
    based_on_master_epoch: int
    based_on_sync_state_set_epoch: int
    reason: str = ""
    takeover_old_master_broker_id: int | None = None
    takeover_wait_ms: int | None = None
    decided_at_ms: int = 0


@dataclass(frozen=True)
class CleanBrokerData(Event):
    """Remove ids (None: the whole broker set). Liveness was checked by the leader."""

    TYPE: ClassVar[str] = "CleanBrokerData"
    broker_ids: frozenset[int] | None = None


@dataclass(frozen=True)
class PutUser(Event):
    """Create or replace a user of cluster `cluster_name` (`broker_name` ""): users span every
    group of a cluster (docs/security.md "Users with rights"). `sealed_secret_key` None keeps
    the stored one (an update); `policies_json` is the policy list as canonical JSON."""

    TYPE: ClassVar[str] = "PutUser"
    access_key: str
    sealed_secret_key: str | None
    policies_json: str
    enabled: bool = True


@dataclass(frozen=True)
class DeleteUser(Event):
    TYPE: ClassVar[str] = "DeleteUser"
    access_key: str


_EVENT_TYPES: dict[str, type[Event]] = {
    cls.TYPE: cls
    for cls in (
        ApplyBrokerId,
        RegisterBroker,
        AlterSyncStateSet,
        ElectMaster,
        CleanBrokerData,
        PutUser,
        DeleteUser,
    )
}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Inverse of `Event.to_dict`; raises ValueError on an unknown or malformed event."""
    fields = dict(data)
    event_type = _EVENT_TYPES.get(str(fields.pop("type", "")))
    if event_type is None:
        raise ValueError(f"unknown controller event type {data.get('type')!r}")
    for name in ("sync_state_set", "broker_ids"):
        if fields.get(name) is not None:
            fields[name] = frozenset(int(x) for x in fields[name])
    try:
        return event_type(**fields)
    except TypeError as exc:
        raise ValueError(f"malformed {event_type.TYPE} event: {exc}") from exc


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class BrokerIdApplied:
    """ApplyBrokerId took: the id is the broker's, `next_broker_id` the next free one."""

    broker_id: int
    next_broker_id: int


@dataclass(frozen=True)
class BrokerRegistered:
    """RegisterBroker took (the address is recorded)."""


@dataclass(frozen=True)
class SyncStateSetAltered:
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class MasterElected:
    """The election's outcome (`master_broker_id` None: no candidate, no master)."""

    master_broker_id: int | None
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class BrokersCleaned:
    removed: tuple[int, ...]


@dataclass(frozen=True)
class UserPut:
    created: bool
    users_version: int


@dataclass(frozen=True)
class UserDeleted:
    deleted: bool
    users_version: int


Outcome = (
    BrokerIdApplied
    | BrokerRegistered
    | SyncStateSetAltered
    | MasterElected
    | BrokersCleaned
    | UserPut
    | UserDeleted
)
"""What an event that took changed, one type per event type."""


def _outcome_json(outcome: Outcome | None) -> dict[str, Any]:
    """An outcome as the dump's `details` (camelCase, the format dumps always had)."""
    match outcome:
        case BrokerIdApplied():
            return {"brokerId": outcome.broker_id, "nextBrokerId": outcome.next_broker_id}
        case SyncStateSetAltered():
            return {
                "syncStateSet": sorted(outcome.sync_state_set),
                "syncStateSetEpoch": outcome.sync_state_set_epoch,
            }
        case MasterElected():
            return {
                "masterBrokerId": outcome.master_broker_id,
                "masterEpoch": outcome.master_epoch,
                "syncStateSet": sorted(outcome.sync_state_set),
                "syncStateSetEpoch": outcome.sync_state_set_epoch,
            }
        case BrokersCleaned():
            return {"removed": list(outcome.removed)}
        case UserPut():
            return {"created": outcome.created, "usersVersion": outcome.users_version}
        case UserDeleted():
            return {"deleted": outcome.deleted, "usersVersion": outcome.users_version}
        case _:
            return {}


def _outcome_from_json(event_type: str, data: dict[str, Any]) -> Outcome:
    if event_type == ApplyBrokerId.TYPE:
        return BrokerIdApplied(int(data["brokerId"]), int(data["nextBrokerId"]))
    if event_type == AlterSyncStateSet.TYPE:
        return SyncStateSetAltered(
            frozenset(int(x) for x in data["syncStateSet"]), int(data["syncStateSetEpoch"])
        )
    if event_type == ElectMaster.TYPE:
        master = data["masterBrokerId"]
        return MasterElected(
            None if master is None else int(master),
            int(data["masterEpoch"]),
            frozenset(int(x) for x in data["syncStateSet"]),
            int(data["syncStateSetEpoch"]),
        )
    if event_type == CleanBrokerData.TYPE:
        return BrokersCleaned(tuple(int(x) for x in data["removed"]))
    if event_type == RegisterBroker.TYPE:
        return BrokerRegistered()
    if event_type == PutUser.TYPE:
        return UserPut(bool(data["created"]), int(data["usersVersion"]))
    if event_type == DeleteUser.TYPE:
        return UserDeleted(bool(data["deleted"]), int(data["usersVersion"]))
    raise ValueError(f"unknown controller event type {event_type!r}")


@dataclass(frozen=True)
class ApplyResult:
    """How an event applied: SUCCESS with its typed `outcome`, or a refusal's code and
    message (`next_broker_id`: the id a refused ApplyBrokerId should apply for instead)."""

    code: ErrorCode
    message: str = ""
    outcome: Outcome | None = None
    next_broker_id: int | None = None

    @property
    def ok(self) -> bool:
        return self.code is ErrorCode.SUCCESS

    def to_dict(self) -> dict[str, Any]:
        """The dump's form (recentRequests), unchanged since dumps had request ids."""
        details = _outcome_json(self.outcome)
        if self.next_broker_id is not None:
            details["nextBrokerId"] = self.next_broker_id
        return {"code": self.code.value, "message": self.message, "details": details}

    @classmethod
    def from_dict(cls, data: dict[str, Any], event_type: str) -> ApplyResult:
        code = ErrorCode(data["code"])
        details = dict(data["details"])
        if code is ErrorCode.SUCCESS:
            return cls(code, str(data["message"]), _outcome_from_json(event_type, details))
        next_id = details.get("nextBrokerId")
        return cls(
            code, str(data["message"]), next_broker_id=None if next_id is None else int(next_id)
        )


def _ok(outcome: Outcome) -> ApplyResult:
    return ApplyResult(ErrorCode.SUCCESS, outcome=outcome)


def _reject(code: ErrorCode, message: str, *, next_broker_id: int | None = None) -> ApplyResult:
    return ApplyResult(code, message, next_broker_id=next_broker_id)


# ---------------------------------------------------------------- state


class ControllerState:
    """All broker sets. `apply` is the only mutator."""

    def __init__(self) -> None:
        self.broker_sets: dict[BrokerSetKey, BrokerSet] = {}
        # Epoch floors of wiped broker sets, so a re-created set never reuses an epoch.
        self.retired_epochs: dict[BrokerSetKey, tuple[int, int]] = {}
        # The first answer to each recent request id, oldest first (RECENT_REQUESTS_BOUND).
        # Global rather than per broker set: it outlives a set's whole-set clean,
        # whose retry must still get "removed", not BROKER_SET_NOT_FOUND.
        self.recent_requests: OrderedDict[RequestKey, ApplyResult] = OrderedDict()
        # Users per clusterName (docs/security.md "Users with rights").
        self.users: dict[str, ClusterUsers] = {}

    # -- reads

    def cluster_users(self, cluster_name: str) -> ClusterUsers:
        """A copy of the cluster's users (version 0, none, for an unknown cluster)."""
        users = self.users.get(cluster_name)
        return ClusterUsers() if users is None else copy.deepcopy(users)

    def get(self, cluster_name: str, broker_name: str) -> BrokerSet | None:
        return self.broker_sets.get((cluster_name, broker_name))

    def next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        broker_set = self.get(cluster_name, broker_name)
        return 1 if broker_set is None else broker_set.next_broker_id

    def snapshot(self, cluster_name: str, broker_name: str) -> BrokerSet | None:
        """A deep copy, safe to hand to another thread."""
        broker_set = self.get(cluster_name, broker_name)
        return None if broker_set is None else copy.deepcopy(broker_set)

    def answer_of(self, request_key: RequestKey) -> ApplyResult | None:
        """The first answer to a request id still remembered, else None."""
        return self.recent_requests.get(request_key)

    # -- the transition function

    def apply(self, event: Event) -> ApplyResult:
        request_key = event.request_key
        if request_key is not None:
            answered = self.recent_requests.get(request_key)
            if answered is not None:
                return answered  # a retry: the first answer, nothing applied again
        result = self._apply_rules(event)
        if request_key is not None:
            self.recent_requests[request_key] = result
            while len(self.recent_requests) > RECENT_REQUESTS_BOUND:
                self.recent_requests.popitem(last=False)
        return result

    def _apply_rules(self, event: Event) -> ApplyResult:
        if isinstance(event, ApplyBrokerId):
            return self._apply_broker_id(event)
        if isinstance(event, RegisterBroker):
            return self._register_broker(event)
        if isinstance(event, AlterSyncStateSet):
            return self._alter_sync_state_set(event)
        if isinstance(event, ElectMaster):
            return self._elect_master(event)
        if isinstance(event, CleanBrokerData):
            return self._clean_broker_data(event)
        if isinstance(event, PutUser):
            return self._put_user(event)
        if isinstance(event, DeleteUser):
            return self._delete_user(event)
        raise TypeError(f"not a controller event: {event!r}")

    def _apply_broker_id(self, e: ApplyBrokerId) -> ApplyResult:
        try:
            protocol = protocol_of(e.protocol)
        except ValueError as exc:  # a newer version's entry: refused, nothing changed
            return _reject(ErrorCode.BAD_REQUEST, f"broker {e.broker_name}:{e.broker_id}: {exc}")
        broker_set = self.broker_sets.get(e.key)
        if broker_set is None:
            if e.broker_id != 1:
                return _reject(
                    ErrorCode.BROKER_ID_INVALID,
                    f"broker set {e.broker_name} is new: the first BrokerId must be 1, "
                    f"not {e.broker_id}",
                    next_broker_id=1,
                )
            master_epoch, set_epoch = self.retired_epochs.pop(e.key, (0, 0))
            broker_set = BrokerSet(
                e.cluster_name,
                e.broker_name,
                master_epoch=master_epoch,
                sync_state_set_epoch=set_epoch,
            )
            self.broker_sets[e.key] = broker_set
        elif e.broker_id < 1:
            return _reject(
                ErrorCode.BROKER_ID_INVALID,
                f"BrokerId {e.broker_id} is invalid: ids start at 1",
                next_broker_id=broker_set.next_broker_id,
            )
        else:
            existing = broker_set.brokers.get(e.broker_id)
            if existing is not None and existing.register_code != e.register_code:
                return _reject(
                    ErrorCode.BROKER_ID_INVALID,
                    f"BrokerId {e.broker_id} of {e.broker_name} is held by another broker "
                    f"(registerCode differs); apply for {broker_set.next_broker_id} instead",
                    next_broker_id=broker_set.next_broker_id,
                )
        broker_set.brokers[e.broker_id] = BrokerRecord(e.address, e.register_code, protocol)
        broker_set.next_broker_id = max(broker_set.next_broker_id, e.broker_id + 1)
        return _ok(BrokerIdApplied(e.broker_id, broker_set.next_broker_id))

    def _register_broker(self, e: RegisterBroker) -> ApplyResult:
        try:
            protocol = protocol_of(e.protocol)
        except ValueError as exc:
            return _reject(ErrorCode.BAD_REQUEST, f"broker {e.broker_name}:{e.broker_id}: {exc}")
        broker_set = self.broker_sets.get(e.key)
        if broker_set is None or e.broker_id not in broker_set.brokers:
            return _reject(
                ErrorCode.NEED_TO_BE_REGISTERED,
                f"broker {e.broker_name}:{e.broker_id} has no BrokerId assigned; "
                "run GetNextBrokerId/ApplyBrokerId first",
            )
        record = broker_set.brokers[e.broker_id]
        record.address = e.address
        record.protocol = protocol
        return _ok(BrokerRegistered())

    def _alter_sync_state_set(self, e: AlterSyncStateSet) -> ApplyResult:
        broker_set = self.broker_sets.get(e.key)
        if broker_set is None:
            return _reject(ErrorCode.BROKER_SET_NOT_FOUND, f"no broker set {e.broker_name}")
        if broker_set.master_broker_id != e.master_broker_id:
            return _reject(
                ErrorCode.INVALID_MASTER,
                f"broker {e.master_broker_id} is not the master of {e.broker_name} "
                f"(the master is {broker_set.master_broker_id})",
            )
        if broker_set.master_epoch != e.master_epoch:
            return _reject(
                ErrorCode.FENCED_MASTER_EPOCH,
                f"master {e.master_broker_id} at masterEpoch {e.master_epoch} is fenced: "
                f"controller has masterEpoch {broker_set.master_epoch}",
            )
        if broker_set.sync_state_set_epoch != e.sync_state_set_epoch:
            return _reject(
                ErrorCode.FENCED_SYNC_STATE_SET_EPOCH,
                f"syncStateSetEpoch {e.sync_state_set_epoch} is stale: controller has "
                f"{broker_set.sync_state_set_epoch}",
            )
        unregistered = sorted(set(e.sync_state_set) - set(broker_set.brokers))
        if unregistered:
            return _reject(
                ErrorCode.INVALID_SYNC_STATE_SET,
                f"SyncStateSet members {unregistered} are not registered in {e.broker_name}",
            )
        if e.master_broker_id not in e.sync_state_set:
            return _reject(
                ErrorCode.INVALID_SYNC_STATE_SET,
                f"the new SyncStateSet {sorted(e.sync_state_set)} must contain the master "
                f"{e.master_broker_id}",
            )
        broker_set.sync_state_set = set(e.sync_state_set)
        broker_set.sync_state_set_epoch += 1
        return _ok(
            SyncStateSetAltered(
                frozenset(broker_set.sync_state_set), broker_set.sync_state_set_epoch
            )
        )

    def _elect_master(self, e: ElectMaster) -> ApplyResult:
        broker_set = self.broker_sets.get(e.key)
        if broker_set is None:
            return _reject(ErrorCode.BROKER_SET_NOT_FOUND, f"no broker set {e.broker_name}")
        if broker_set.master_epoch != e.based_on_master_epoch:
            return _reject(
                ErrorCode.FENCED_MASTER_EPOCH,
                f"election based on masterEpoch {e.based_on_master_epoch} lost the race: "
                f"controller has masterEpoch {broker_set.master_epoch}",
            )
        if broker_set.sync_state_set_epoch != e.based_on_sync_state_set_epoch:
            return _reject(
                ErrorCode.FENCED_SYNC_STATE_SET_EPOCH,
                f"election based on syncStateSetEpoch {e.based_on_sync_state_set_epoch} is "
                f"stale: controller has {broker_set.sync_state_set_epoch}",
            )
        new_master = e.new_master_broker_id
        if new_master is not None and new_master not in broker_set.brokers:
            return _reject(
                ErrorCode.NEED_TO_BE_REGISTERED,
                f"broker {e.broker_name}:{new_master} is not registered",
            )
        broker_set.master_broker_id = new_master
        broker_set.master_epoch += 1
        if new_master is not None:
            broker_set.has_had_master = True
            broker_set.sync_state_set = {new_master}
            broker_set.sync_state_set_epoch += 1
        broker_set.takeover = (
            None
            if e.takeover_wait_ms is None
            else Takeover(
                master_epoch=broker_set.master_epoch,
                old_master_broker_id=e.takeover_old_master_broker_id,
                wait_ms=e.takeover_wait_ms,
                decided_at_ms=e.decided_at_ms,
            )
        )
        return _ok(
            MasterElected(
                new_master,
                broker_set.master_epoch,
                frozenset(broker_set.sync_state_set),
                broker_set.sync_state_set_epoch,
            )
        )

    def _clean_broker_data(self, e: CleanBrokerData) -> ApplyResult:
        broker_set = self.broker_sets.get(e.key)
        if broker_set is None:
            return _reject(ErrorCode.BROKER_SET_NOT_FOUND, f"no broker set {e.broker_name}")
        ids = set(broker_set.brokers) if e.broker_ids is None else set(e.broker_ids)
        unknown = sorted(ids - set(broker_set.brokers))
        if unknown:
            return _reject(
                ErrorCode.NEED_TO_BE_REGISTERED,
                f"brokers {unknown} are not registered in {e.broker_name}",
            )
        for broker_id in ids:
            del broker_set.brokers[broker_id]
        if broker_set.master_broker_id in ids:
            broker_set.master_broker_id = None
            broker_set.master_epoch += 1
        if broker_set.sync_state_set & ids:
            broker_set.sync_state_set -= ids
            broker_set.sync_state_set_epoch += 1
        if not broker_set.brokers:
            del self.broker_sets[e.key]
            # +1: a decision taken on the wiped set must never apply to its successor.
            self.retired_epochs[e.key] = (
                broker_set.master_epoch + 1,
                broker_set.sync_state_set_epoch + 1,
            )
        return _ok(BrokersCleaned(tuple(sorted(ids))))

    def _put_user(self, e: PutUser) -> ApplyResult:
        try:
            check_access_key(e.access_key)
            entries_from_json(json.loads(e.policies_json))
        except (PolicyError, ValueError) as exc:
            return _reject(ErrorCode.BAD_REQUEST, f"user {e.access_key}: {exc}")
        existing = self.users.get(e.cluster_name)
        old = None if existing is None else existing.users.get(e.access_key)
        sealed = e.sealed_secret_key
        if sealed is None:
            if old is None:  # refused before anything changes (no empty cluster entry)
                return _reject(
                    ErrorCode.BAD_REQUEST,
                    f"user {e.access_key} does not exist in {e.cluster_name}: a new user needs "
                    "a secretKey",
                )
            sealed = old.sealed_secret_key
        users = self.users.setdefault(e.cluster_name, ClusterUsers())
        users.version += 1
        users.users[e.access_key] = StoredUser(
            e.access_key, sealed, e.policies_json, e.enabled, users.version
        )
        return _ok(UserPut(old is None, users.version))

    def _delete_user(self, e: DeleteUser) -> ApplyResult:
        users = self.users.get(e.cluster_name)
        if users is None or e.access_key not in users.users:
            version = 0 if users is None else users.version
            return _ok(UserDeleted(False, version))
        del users.users[e.access_key]
        users.version += 1
        return _ok(UserDeleted(True, users.version))

    # -- persistence (pysyncobj dumps this through the node's replicated attributes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "brokerSets": [s.to_dict() for _, s in sorted(self.broker_sets.items())],
            "retiredEpochs": [
                {"clusterName": c, "brokerName": b, "masterEpoch": m, "syncStateSetEpoch": s}
                for (c, b), (m, s) in sorted(self.retired_epochs.items())
            ],
            "recentRequests": [
                {"type": t, "clusterName": c, "brokerName": b, "requestId": r, **result.to_dict()}
                for (t, c, b, r), result in self.recent_requests.items()
            ],
            **(
                {"users": {c: u.to_dict() for c, u in sorted(self.users.items())}}
                if self.users
                else {}  # dumps without users keep the format they always had
            ),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ControllerState:
        state = cls()
        for raw in data.get("brokerSets", []):
            broker_set = BrokerSet.from_dict(raw)
            state.broker_sets[broker_set.key] = broker_set
        for raw in data.get("retiredEpochs", []):
            state.retired_epochs[(raw["clusterName"], raw["brokerName"])] = (
                int(raw["masterEpoch"]),
                int(raw["syncStateSetEpoch"]),
            )
        for raw in data.get("recentRequests", []):  # absent from dumps before request ids
            key = (raw["type"], raw["clusterName"], raw["brokerName"], raw["requestId"])
            state.recent_requests[key] = ApplyResult.from_dict(raw, raw["type"])
        for cluster, raw in data.get("users", {}).items():
            state.users[cluster] = ClusterUsers.from_dict(raw)
        return state
