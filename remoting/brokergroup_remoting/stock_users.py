"""A stock RocketMQ 5.3 broker's ACL 2.0 users kept in step with the controllers' users.

Theory of operation
-------------------
A stock broker (`engine: rocketmq`) keeps its users and ACLs in its own RocksDB (`authConfigPath`,
LocalAuthenticationMetadataProvider / LocalAuthorizationMetadataProvider) and changes them only
through its admin request codes (RequestCode 5.3.1, AdminBrokerProcessor):

| code | header | body |
|---|---|---|
| AUTH_CREATE_USER 3001 | `username` | UserInfo `{username, password, userType, userStatus}` |
| AUTH_DELETE_USER 3003 | `username` | — (AuthenticationMetadataManagerImpl.deleteUser drops the user's ACL too) |
| AUTH_LIST_USER 3005 | `filter` (optional) | answer: a JSON list of UserInfo, passwords included |
| AUTH_CREATE_ACL 3006 | `subject` (`User:<name>`) | AclInfo `{subject, policies: [{policyType, entries: [{resource, actions, sourceIps, decision}]}]}` |
| AUTH_LIST_ACL 3010 | `subjectFilter`, `resourceFilter` (optional) | answer: a JSON list of AclInfo |

The controllers hold the truth (the cluster's users, `users-snapshot`). `plan` compares it with
what one broker lists and returns the requests that make the broker hold exactly that, in
order; `sync_broker` lists, plans and sends them, signed with a SUPER user of the broker (the
group's broker pair: `innerClientAuthenticationCredentials` makes it one, so no new secret
reaches the broker). The caller runs it on every usersVersion change and on every broker
(re)start: the broker's RocksDB survives a restart, so a user deleted while it was down is
deleted when it comes back.

Rules
-----
- A broker user of type Super is never touched: those are the group's broker and client pairs
  (`innerClientAuthenticationCredentials`, `initAuthenticationUser`).
- A Normal user the controllers do not have is deleted (with its ACL): the controllers are the
  only source of users; one made with `mqadmin createUser` directly on a stock broker is removed
  at the next sync. That is the price of one truth for every group of a cluster.
- A user whose password or status differs is deleted and created again: RocketMQ 5.3.1's
  AUTH_UPDATE_USER stores the old user unchanged (AdminBrokerProcessor.updateUser passes `old`
  to updateUser), so it cannot change a password.
- A user whose ACL differs is also deleted and created again, then its ACL: AUTH_CREATE_ACL
  *merges* into an existing ACL (updatePolicy keeps the entries of other resources), so it
  cannot drop an entry. Between the requests the user is refused for a few milliseconds, never
  allowed more than either version allows.
- A disabled user is created disabled (UserStatus `disable`): RocketMQ refuses it as it refuses
  one, no ACL change needed.
- RocketMQ keeps one entry per resource in a policy (Policy.updateEntry): two entries of one
  user on the same resource (an Allow and a Deny) cannot both live on a stock broker. `plan`
  merges them by RocketMQ's own rule (the later entry replaces the earlier one) and the
  comparison uses the merged form, so such a user does not make every sync rewrite it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from brokergroup_remoting.acl import sign
from brokergroup_remoting.codes import RequestCode, ResponseCode
from brokergroup_remoting.command import RemotingCommand, request

#: RocketMQ's UserType names (UserType.getByName ignores case).
SUPER = "Super"
NORMAL = "Normal"
#: The one policy type a user's ACL is written with (PolicyType.CUSTOM).
CUSTOM = "Custom"


@dataclass(frozen=True)
class Entry:
    """One policy entry as RocketMQ keeps it (PolicyEntryInfo)."""

    resource: str
    actions: tuple[str, ...]
    decision: str
    source_ips: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource,
            "actions": list(self.actions),
            "sourceIps": list(self.source_ips),
            "decision": self.decision,
        }


@dataclass(frozen=True)
class StockUser:
    """A user as a stock broker holds it: name, password, status and its ACL's entries."""

    username: str
    password: str
    status: str = "enable"
    entries: tuple[Entry, ...] = ()
    user_type: str = NORMAL

    def __repr__(self) -> str:  # never log the password
        return f"StockUser(username={self.username!r}, status={self.status!r})"


class OpKind(Enum):
    DELETE_USER = "delete user"
    CREATE_USER = "create user"
    CREATE_ACL = "create acl"


@dataclass(frozen=True)
class Op:
    kind: OpKind
    user: StockUser

    def describe(self) -> str:
        return f"{self.kind.value} {self.user.username}"


def _norm_entry(entry: Entry) -> Entry:
    return Entry(
        resource=entry.resource,
        actions=tuple(sorted({a.lower() for a in entry.actions})),
        decision=entry.decision.lower(),
        source_ips=tuple(sorted(set(entry.source_ips))),
    )


def merged_entries(entries: Iterable[Entry]) -> tuple[Entry, ...]:
    """One entry per resource, the later replacing the earlier (RocketMQ's Policy.updateEntry),
    in resource order, actions/decision/IPs normalized for comparison."""
    by_resource: dict[str, Entry] = {}
    for entry in entries:
        by_resource[entry.resource] = _norm_entry(entry)
    return tuple(by_resource[r] for r in sorted(by_resource))


def _same(desired: StockUser, held: StockUser) -> bool:
    return (
        desired.password == held.password
        and desired.status.lower() == held.status.lower()
        and held.user_type.lower() == NORMAL.lower()
        and merged_entries(desired.entries) == merged_entries(held.entries)
    )


def plan(desired: Sequence[StockUser], held: Sequence[StockUser]) -> list[Op]:
    """The requests that make a broker holding `held` hold exactly `desired` (Super users
    left alone), deletions first, then creations, each in username order."""
    wanted = {u.username: u for u in desired}
    have = {u.username: u for u in held}
    ops: list[Op] = []
    for name in sorted(have):
        user = have[name]
        if user.user_type.lower() == SUPER.lower():
            continue
        if name not in wanted or not _same(wanted[name], user):
            ops.append(Op(OpKind.DELETE_USER, user))
    for name in sorted(wanted):
        user = wanted[name]
        held_user = have.get(name)
        if held_user is not None and held_user.user_type.lower() == SUPER.lower():
            continue  # a group pair's name: never replaced by a user (it cannot be: bg1.… has dots)
        if held_user is None or not _same(user, held_user):
            ops.append(Op(OpKind.CREATE_USER, user))
            if user.entries:
                ops.append(Op(OpKind.CREATE_ACL, user))
    return ops


# --- the broker side: ACL 2.0 switched on ------------------------------------------------------

#: RocketMQ's own switches; either one `true` in a stock broker's settings turns ACL 2.0 on
#: (the local runtime's `--set`, the operator's spec.rocketmq.aclEnabled). Off by default.
ACL_SWITCHES = ("authenticationEnabled", "authorizationEnabled")
#: What a stock broker needs besides the switch. RocketMQ 5.3 leaves the metadata providers
#: blank, and a blank one is none (AuthorizationFactory.getMetadataProvider returns null: the
#: ACLs would have nowhere to live); the providers are RocketMQ's defaults, named so the file
#: says what runs. The caller writes its own settings after these (an explicit
#: `authenticationEnabled=false` wins).
ACL_PROPERTIES: dict[str, str] = {
    # Authorization needs an authenticated user: either switch on turns authentication on.
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "authenticationProvider": (
        "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider"
    ),
    "authenticationMetadataProvider": (
        "org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider"
    ),
    "authorizationProvider": (
        "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider"
    ),
    "authorizationMetadataProvider": (
        "org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider"
    ),
    # NOTIFY_BROKER_ROLE_CHANGED (1008): the controllers push a new master signed with the
    # release's admin pair, which never reaches a broker (so it is no user there); without this
    # a stock broker would learn of a failover only from its own poll, seconds later. The push
    # carries what the broker may read from the controllers anyway, and the broker checks its
    # epochs (a stale push changes nothing), as it did before ACL 2.0 was on.
    "authenticationWhitelist": str(RequestCode.NOTIFY_BROKER_ROLE_CHANGED),
    "authorizationWhitelist": str(RequestCode.NOTIFY_BROKER_ROLE_CHANGED),
}


def acl_enabled(settings: Mapping[str, str] | Iterable[tuple[str, str]]) -> bool:
    """Whether these broker settings turn ACL 2.0 on (either switch `true`; the last value of
    a name wins, as in broker.conf)."""
    values = dict(settings)
    return any(str(values.get(name, "")).strip().lower() == "true" for name in ACL_SWITCHES)


# --- what the controllers and the broker say, parsed ------------------------------------------


def from_snapshot(users: Iterable[Mapping[str, Any]]) -> list[StockUser]:
    """The controller's users-snapshot users (docs/security.md 'Users with rights')."""
    out = []
    for u in users:
        entries = tuple(
            Entry(
                resource=str(p["resource"]),
                actions=tuple(str(a) for a in p.get("actions", ())),
                decision=str(p.get("decision", "Allow")),
                source_ips=tuple(str(ip) for ip in p.get("sourceIps") or ()),
            )
            for p in u.get("policies", ())
        )
        out.append(
            StockUser(
                username=str(u["accessKey"]),
                password=str(u["secretKey"]),
                status=str(u.get("userStatus", "enable")),
                entries=entries,
            )
        )
    return out


def _json_list(body: bytes) -> list[Any]:
    if not body:
        return []  # RocketMQ answers no body for an empty list
    value = json.loads(body.decode("utf-8"))
    if not isinstance(value, list):
        raise ValueError(f"expected a JSON list, got {type(value).__name__}")
    return value


def held_users(user_list_body: bytes, acl_list_body: bytes) -> list[StockUser]:
    """AUTH_LIST_USER's and AUTH_LIST_ACL's answers as users with their CUSTOM entries."""
    acls: dict[str, list[Entry]] = {}
    for acl in _json_list(acl_list_body):
        subject = str(acl.get("subject", ""))
        if not subject.startswith("User:"):
            continue
        name = subject.removeprefix("User:")
        for policy in acl.get("policies") or ():
            if str(policy.get("policyType") or CUSTOM).lower() != CUSTOM.lower():
                continue
            for e in policy.get("entries") or ():
                acls.setdefault(name, []).append(
                    Entry(
                        resource=str(e.get("resource", "")),
                        actions=tuple(str(a) for a in e.get("actions") or ()),
                        decision=str(e.get("decision") or "Allow"),
                        source_ips=tuple(str(ip) for ip in e.get("sourceIps") or ()),
                    )
                )
    return [
        StockUser(
            username=str(u["username"]),
            password=str(u.get("password") or ""),
            status=str(u.get("userStatus") or "enable"),
            user_type=str(u.get("userType") or NORMAL),
            entries=tuple(acls.get(str(u["username"]), ())),
        )
        for u in _json_list(user_list_body)
    ]


# --- requests ---------------------------------------------------------------------------------


def _body(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def list_users_request() -> RemotingCommand:
    return request(RequestCode.AUTH_LIST_USER, 0, {})


def list_acls_request() -> RemotingCommand:
    return request(RequestCode.AUTH_LIST_ACL, 0, {})


def op_request(op: Op) -> RemotingCommand:
    user = op.user
    if op.kind is OpKind.DELETE_USER:
        return request(RequestCode.AUTH_DELETE_USER, 0, {"username": user.username})
    if op.kind is OpKind.CREATE_USER:
        info = {
            "username": user.username,
            "password": user.password,
            "userType": NORMAL,
            "userStatus": user.status,
        }
        return request(RequestCode.AUTH_CREATE_USER, 0, {"username": user.username}, _body(info))
    subject = f"User:{user.username}"
    acl = {
        "subject": subject,
        "policies": [{"policyType": CUSTOM, "entries": [e.to_json() for e in user.entries]}],
    }
    return request(RequestCode.AUTH_CREATE_ACL, 0, {"subject": subject}, _body(acl))


class StockUsersError(Exception):
    """A broker refused or failed an admin request (retry at the next sync)."""


@dataclass(frozen=True)
class SyncResult:
    applied: tuple[str, ...]
    """What was done, in order (`create user app`, …); empty when the broker was in step."""


async def sync_broker(
    invoke: Any,
    access_key: str,
    secret_key: str,
    desired: Sequence[StockUser],
    *,
    timeout_s: float = 5.0,
) -> SyncResult:
    """List the broker's users and ACLs, plan, send the plan (stops at the first refusal).

    `invoke` is a connected RemotingClient's `invoke` (the caller owns the connection)."""

    async def call(cmd: RemotingCommand, what: str) -> RemotingCommand:
        answer: RemotingCommand = await invoke(sign(cmd, access_key, secret_key), timeout_s)
        if answer.code != ResponseCode.SUCCESS:
            raise StockUsersError(f"{what}: code {answer.code}, {answer.remark or 'no remark'}")
        return answer

    users = await call(list_users_request(), "list users")
    acls = await call(list_acls_request(), "list acls")
    ops = plan(desired, held_users(users.body, acls.body))
    for op in ops:
        await call(op_request(op), op.describe())
    return SyncResult(tuple(op.describe() for op in ops))
