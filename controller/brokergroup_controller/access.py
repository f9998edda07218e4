"""Who may do what on the controller API: the pure access decision (DESIGN.md §11).

Theory of operation
-------------------
`decide` takes the authenticated principal (credentials.py), the request in
the terms that matter for access (`AccessRequest`), the host the request
came from and the addresses the controller registered for the group, and
returns a `Verdict`. The service calls it (`endpoints.Endpoints.authorize`,
with the caller's principal from its front end, `requests.Caller`), for the
HTTP API twice:

1. on the node that received the request, without the registered addresses
   (role and group rules only; a follower then forwards);
2. on the leader, with the addresses from the replicated state (the
   address rules below). A forwarded request carries the origin host the
   follower saw, MAC'd with the nodes' shared secret.

The RocketMQ controller port checks role and group rules only (its callers'
source addresses say nothing; docs/security.md).

Role rules (least privilege):

- admin: every endpoint, every group.
- broker of (clusterName, brokerName): identity, registration, heartbeats,
  inactive reports, AlterSyncStateSet, ElectMaster as the requester (never
  naming another broker), and the reads of its own group. No clean, no
  listing of every group, nothing of another group.
- client of a group: the reads of that group (replica-info, watch) only.
- every authenticated principal: GET /v1/raft (no group state in it).

Address rules (the leader; DESIGN.md §11 "a brokerId is accepted only from
the address the controller registered for it"):

- a heartbeat must claim the address registered for its brokerId (any role);
- a broker credential acts for brokerId N only from the host registered for
  N (heartbeat, inactive, AlterSyncStateSet as master, ElectMaster as
  requester), and registers or applies only the address it connects from.

The host check applies when the address's host is an IP literal (brokers
advertise their pod or loopback IP); a DNS-named address is checked by its
exact string only, since resolving would put I/O in this decision.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass

from brokergroup_controller import requests as rq
from brokergroup_controller.credentials import Principal, Role
from brokergroup_controller.requests import ServiceRequest

# Endpoint names as in app.py's table (plus "raft" for GET /v1/raft).
GROUP_READS = frozenset({"replica_info", "watch"})
BROKER_ENDPOINTS = GROUP_READS | frozenset(
    {
        "next_broker_id",
        "apply_broker_id",
        "register",
        "heartbeat",
        "inactive",
        "alter_sync_state_set",
        "elect_master",
    }
)
USER_ADMIN = frozenset({"put_user", "get_user", "delete_user", "list_users"})
ADMIN_ONLY = frozenset({"clean", "groups", "controller_config"}) | USER_ADMIN
OPEN_TO_ANY_PRINCIPAL = frozenset({"raft"})


@dataclass(frozen=True)
class AccessRequest:
    """What access depends on, extracted from a typed request (`of`)."""

    endpoint: str
    group: tuple[str, str] | None = None
    acting_broker_id: int | None = None
    """The brokerId the request acts as (heartbeat's, inactive's, the master of an
    AlterSyncStateSet, the requester of an election)."""
    claimed_address: str | None = None
    """The broker address the body states (heartbeat, register, apply-id)."""
    designated_broker_id: int | None = None

    @classmethod
    def of(cls, request: ServiceRequest) -> AccessRequest:
        """The fields of a typed service request that access depends on."""
        match request:
            case rq.Heartbeat(heartbeat=hb):
                return cls(
                    request.ENDPOINT,
                    (hb.cluster_name, hb.broker_name),
                    acting_broker_id=hb.broker_id,
                    claimed_address=hb.address,
                )
            case rq.ListGroups():
                return cls(request.ENDPOINT)
            case rq.ApplyBrokerId():  # claims a new id: it acts as none yet
                return cls(request.ENDPOINT, _group(request), claimed_address=request.address)
            case rq.RegisterBroker():
                return cls(
                    request.ENDPOINT,
                    _group(request),
                    acting_broker_id=request.broker_id,
                    claimed_address=request.address,
                )
            case rq.ReportInactive():
                return cls(request.ENDPOINT, _group(request), acting_broker_id=request.broker_id)
            case rq.AlterSyncStateSet():
                return cls(
                    request.ENDPOINT, _group(request), acting_broker_id=request.master_broker_id
                )
            case rq.ElectMaster():
                return cls(
                    request.ENDPOINT,
                    _group(request),
                    acting_broker_id=request.broker_id,
                    designated_broker_id=request.designated_broker_id,
                )
            case _:  # reads and clean (its ids are ones to remove, not ones it acts as)
                return cls(request.ENDPOINT, _group(request))


def _group(request: ServiceRequest) -> tuple[str, str]:
    assert not isinstance(request, rq.Heartbeat | rq.ListGroups)
    return (request.cluster_name, request.broker_name)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""


ALLOW = Verdict(True)


def _deny(reason: str) -> Verdict:
    return Verdict(False, reason)


def _ip_host(address: str) -> str | None:
    """The host of `host:port` when it is an IP literal, else None."""
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return None


def _same_host(origin_host: str | None, address: str) -> bool:
    expected = _ip_host(address)
    if origin_host is None or expected is None:
        return True  # nothing to compare (module docstring)
    try:
        return str(ipaddress.ip_address(origin_host)) == expected
    except ValueError:
        return False


def decide_role(principal: Principal, request: AccessRequest) -> Verdict:
    """Role and group rules: may this principal call this endpoint for this group?"""
    if principal.role is Role.ADMIN:
        return ALLOW
    who = principal.describe()
    if request.endpoint in OPEN_TO_ANY_PRINCIPAL:
        return ALLOW
    if request.endpoint == "users_snapshot":
        # The users of a cluster (with SecretKeys) go to its brokers, whatever their group.
        cluster = None if request.group is None else request.group[0]
        if principal.role is Role.BROKER and principal.group and principal.group[0] == cluster:
            return ALLOW
        return _deny(
            f"{who} may not read the users of cluster {cluster}: it needs a broker "
            "credential of that cluster"
        )
    if request.endpoint in ADMIN_ONLY:
        return _deny(f"{who} may not call {request.endpoint}: it needs the admin credential")
    allowed = GROUP_READS if principal.role is Role.CLIENT else BROKER_ENDPOINTS
    if request.endpoint not in allowed:
        return _deny(f"{who} may not call {request.endpoint}")
    if request.group != principal.group:
        group = "no group" if request.group is None else "/".join(request.group)
        return _deny(f"{who} may not act on {group}: a credential is bound to its own group")
    if request.endpoint == "elect_master":
        if request.acting_broker_id is None:
            return _deny(f"{who} may elect only as the requester (brokerId)")
        if request.designated_broker_id not in (None, request.acting_broker_id):
            return _deny(
                f"{who} may not designate broker {request.designated_broker_id} as master: "
                "only the admin credential designates another broker"
            )
    return ALLOW


def decide_addresses(
    principal: Principal,
    request: AccessRequest,
    origin_host: str | None,
    registered: Mapping[int, str],
) -> Verdict:
    """Address rules (leader side): a brokerId is accepted only from its registered address."""
    acting = request.acting_broker_id
    registered_address = None if acting is None else registered.get(acting)
    if (
        request.endpoint == "heartbeat"
        and registered_address is not None
        and request.claimed_address != registered_address
    ):
        return _deny(
            f"heartbeat for broker {acting} claims address {request.claimed_address} but "
            f"broker {acting} is registered at {registered_address}: register the new "
            "address first"
        )
    if principal.role is not Role.BROKER:
        return ALLOW
    if request.endpoint in ("register", "apply_broker_id"):
        claimed = request.claimed_address
        if claimed is not None and not _same_host(origin_host, claimed):
            return _deny(
                f"{principal.describe()} may register only the address it connects from: "
                f"the request came from {origin_host}, the body says {claimed}"
            )
        return ALLOW
    if registered_address is not None and not _same_host(origin_host, registered_address):
        return _deny(
            f"{request.endpoint} as broker {acting} came from {origin_host}, but broker "
            f"{acting} is registered at {registered_address}"
        )
    return ALLOW


def decide(
    principal: Principal,
    request: AccessRequest,
    origin_host: str | None = None,
    registered: Mapping[int, str] | None = None,
) -> Verdict:
    """Role rules, then (with `registered`, i.e. on the leader) address rules."""
    verdict = decide_role(principal, request)
    if not verdict.allowed or registered is None:
        return verdict
    return decide_addresses(principal, request, origin_host, registered)
