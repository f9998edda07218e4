"""Users with rights: RocketMQ 5.3 ACL 2.0 policies and the pure authorization decision.

Theory of operation
-------------------
A `User` is an AccessKey (RocketMQ's username), a SecretKey and a list of `PolicyEntry`
(ACL 2.0's CUSTOM policy): a `Resource` (`Topic:T` LITERAL, `Topic:app-*` PREFIXED,
`Topic:*` ANY name, `*` any resource), `Action`s, a `Decision` and optional source IPs.

A request needs one or more `Need`s: a literal resource and the actions any of which
suffices (RocketMQ's DefaultAuthorizationContextBuilder: PULL_MESSAGE needs Sub on its topic
and Sub on its group; QUERY_CONSUMER_OFFSET needs Sub *or* Get). `authorize` decides each
need in turn, as AclAuthorizationHandler does:

1. candidates: entries whose resource matches, whose actions hold a needed action (or
   `All`), whose source IPs admit the caller (none listed: anywhere);
2. none → refused, "no matched policies.";
3. the most specific candidates decide: a LITERAL name before a PREFIXED one (the longer
   prefix first) before an ANY name before the `*` resource; among equally specific
   candidates a Deny wins → "the decision is deny.".

Every need must be allowed; the first refused one is reported, with RocketMQ's remark
(`refusal_remark`). A disabled user is refused whatever its policies. RocketMQ 5.3's
comparator means "deny has higher priority" but sorts an Allow first among equal entries;
here Deny wins, the documented intent (docs/security.md).

`needs_of_fields` maps a remoting request code and its (signed) extFields to its needs for
the codes whose resources are in the header; codes with resources in the body
(HEART_BEAT, LOCK_BATCH_MQ) take them decoded (`needs_of_heartbeat`, `needs_of_lock`).

Pure: no I/O, no clock. `parse_resource`, `parse_entry_arg` and `entries_from_json` raise
`PolicyError` (a ValueError naming the field) on bad input.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

from brokergroup_remoting.codes import RequestCode


class PolicyError(ValueError):
    """A user or policy that cannot be accepted; the text names the field."""


class Action(Enum):
    """RocketMQ 5.3's `org.apache.rocketmq.common.action.Action` names (Unknown, Any left
    out: Any is only ever a request's wildcard)."""

    ALL = "All"
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"

    @classmethod
    def parse(cls, text: str) -> Action:
        """By name, case-insensitive as Action.getByName."""
        for action in cls:
            if action.value.lower() == text.strip().lower():
                return action
        names = ", ".join(a.value for a in cls)
        raise PolicyError(f"unknown action {text!r}: expected one of {names}")


class Decision(Enum):
    ALLOW = "Allow"
    DENY = "Deny"

    @classmethod
    def parse(cls, text: str) -> Decision:
        for decision in cls:
            if decision.value.lower() == text.strip().lower():
                return decision
        raise PolicyError(f"unknown decision {text!r}: expected Allow or Deny")


class ResourceType(Enum):
    ANY = "Any"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(IntEnum):
    """Specificity order: a lower value decides first."""

    LITERAL = 0
    PREFIXED = 1
    ANY = 2


#: RocketMQ's topic/group characters (TopicValidator: `[%|a-zA-Z0-9_-]`), at most 127 bytes.
_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
_ACCESS_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
RETRY_PREFIX = "%RETRY%"


@dataclass(frozen=True, order=True)
class Resource:
    """A resource as an entry names it; `name` is the prefix for PREFIXED, "" for ANY."""

    type: ResourceType
    name: str
    pattern: ResourcePattern

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name, ResourcePattern.LITERAL)

    @classmethod
    def group(cls, name: str) -> Resource:
        return cls(ResourceType.GROUP, name, ResourcePattern.LITERAL)

    @property
    def key(self) -> str:
        """RocketMQ's Resource.getResourceKey: `*`, `Topic:*`, `Topic:T`, `Topic:app-*`."""
        if self.type is ResourceType.ANY:
            return "*"
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:*"
        if self.pattern is ResourcePattern.PREFIXED:
            return f"{self.type.value}:{self.name}*"
        return f"{self.type.value}:{self.name}"

    def matches(self, target: Resource) -> bool:
        """Does this entry's resource cover `target` (a literal)? Resource.isMatch."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not target.type:
            return False
        if self.pattern is ResourcePattern.ANY:
            return True
        if self.pattern is ResourcePattern.PREFIXED:
            return target.name.startswith(self.name)
        return target.name == self.name

    def specificity(self) -> tuple[int, int]:
        """Sort key: lower decides first (LITERAL, longer PREFIXED, ANY name, `*`)."""
        if self.type is ResourceType.ANY:
            return (3, 0)
        return (int(self.pattern), -len(self.name))


def parse_resource(text: str) -> Resource:
    """RocketMQ's Resource.of syntax: `*`, `Topic:*`, `Topic:T`, `Topic:app-*`, `Group:…`."""
    text = text.strip()
    if text == "*":
        return Resource(ResourceType.ANY, "", ResourcePattern.ANY)
    kind, sep, name = text.partition(":")
    types = {t.value.lower(): t for t in (ResourceType.TOPIC, ResourceType.GROUP)}
    if not sep or kind.lower() not in types:
        raise PolicyError(
            f"resource {text!r}: expected Topic:NAME, Group:NAME (a trailing * for a prefix, "
            "* alone for any name) or *"
        )
    kind_type = types[kind.lower()]
    if name == "*":
        return Resource(kind_type, "", ResourcePattern.ANY)
    pattern = ResourcePattern.LITERAL
    if name.endswith("*"):
        name, pattern = name[:-1], ResourcePattern.PREFIXED
    if not _NAME.fullmatch(name):
        raise PolicyError(
            f"resource {text!r}: the name must be 1-127 characters of [%|a-zA-Z0-9_-]"
        )
    return Resource(kind_type, name, pattern)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class PolicyEntry:
    resource: Resource
    actions: frozenset[Action]
    decision: Decision
    source_ips: tuple[Network, ...] = ()

    def __post_init__(self) -> None:
        if not self.actions:
            raise PolicyError(f"policy on {self.resource.key}: actions must not be empty")

    def admits(self, source_ip: str | None) -> bool:
        if not self.source_ips:
            return True
        if source_ip is None:
            return False
        try:
            address = ipaddress.ip_address(source_ip)
        except ValueError:
            return False
        return any(address in network for network in self.source_ips)

    def to_json(self) -> dict[str, Any]:
        return {
            "resource": self.resource.key,
            "actions": [a.value for a in Action if a in self.actions],
            "decision": self.decision.value,
            "sourceIps": [str(n) for n in self.source_ips],
        }


def parse_source_ip(text: str) -> Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise PolicyError(f"sourceIps entry {text!r} is not an IP address or CIDR") from None


def entry_from_json(data: object, where: str = "policy") -> PolicyEntry:
    if not isinstance(data, Mapping):
        raise PolicyError(f"{where} must be an object with resource, actions, decision")
    unknown = set(data) - {"resource", "actions", "decision", "sourceIps"}
    if unknown:
        raise PolicyError(f"{where} has unknown fields {sorted(unknown)}")
    resource = data.get("resource")
    actions = data.get("actions")
    decision = data.get("decision", "Allow")
    ips = data.get("sourceIps") or []
    if not isinstance(resource, str):
        raise PolicyError(f"{where}.resource must be a string such as 'Topic:T'")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise PolicyError(f"{where}.actions must be a list of action names such as ['Pub']")
    if not isinstance(decision, str):
        raise PolicyError(f"{where}.decision must be 'Allow' or 'Deny'")
    if not isinstance(ips, list) or not all(isinstance(i, str) for i in ips):
        raise PolicyError(f"{where}.sourceIps must be a list of IPs or CIDRs")
    try:
        return PolicyEntry(
            parse_resource(resource),
            frozenset(Action.parse(a) for a in actions),
            Decision.parse(decision),
            tuple(parse_source_ip(i) for i in ips),
        )
    except PolicyError as exc:
        raise PolicyError(f"{where}: {exc}") from None


MAX_POLICY_ENTRIES = 1024


def entries_from_json(data: object) -> tuple[PolicyEntry, ...]:
    if not isinstance(data, list):
        raise PolicyError("policies must be a list of policy entries")
    if len(data) > MAX_POLICY_ENTRIES:
        raise PolicyError(f"policies: at most {MAX_POLICY_ENTRIES} entries, got {len(data)}")
    return tuple(entry_from_json(item, f"policies[{i}]") for i, item in enumerate(data))


def parse_entry_arg(text: str, decision: Decision, source_ips: Sequence[str] = ()) -> PolicyEntry:
    """The CLI's `--allow 'Topic:T=Pub,Sub'` (mqadmin createAcl's -r/-a in one word)."""
    resource, sep, actions = text.partition("=")
    if not sep or not actions.strip():
        raise PolicyError(f"{text!r}: expected RESOURCE=ACTION[,ACTION...], e.g. Topic:T=Pub,Sub")
    return PolicyEntry(
        parse_resource(resource),
        frozenset(Action.parse(a) for a in actions.split(",")),
        decision,
        tuple(parse_source_ip(ip) for ip in source_ips),
    )


def check_access_key(access_key: str) -> str:
    if not _ACCESS_KEY.fullmatch(access_key):
        raise PolicyError(f"accessKey {access_key!r}: expected 1-64 characters of [A-Za-z0-9_-]")
    return access_key


def check_secret_key(secret_key: str) -> str:
    if not 8 <= len(secret_key) <= 256 or not all(33 <= ord(c) <= 126 for c in secret_key):
        raise PolicyError("secretKey: expected 8-256 printable ASCII characters without spaces")
    return secret_key


@dataclass(frozen=True)
class User:
    access_key: str
    secret_key: str = field(repr=False)
    policies: tuple[PolicyEntry, ...] = ()
    enabled: bool = True


@dataclass(frozen=True)
class Need:
    """A request's need: a literal resource and the actions any one of which suffices."""

    resource: Resource
    actions: frozenset[Action]


class Refusal(Enum):
    NO_MATCH = "no matched policies."
    DENIED = "the decision is deny."
    DISABLED = "is disabled."


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    need: Need | None = None
    """The first need refused (None when allowed, or a disabled user)."""
    refusal: Refusal | None = None


ALLOWED = Verdict(True)


def decide_need(entries: Iterable[PolicyEntry], need: Need, source_ip: str | None) -> Verdict:
    candidates = [
        e
        for e in entries
        if e.resource.matches(need.resource)
        and (Action.ALL in e.actions or not e.actions.isdisjoint(need.actions))
        and e.admits(source_ip)
    ]
    if not candidates:
        return Verdict(False, need, Refusal.NO_MATCH)
    best = min(c.resource.specificity() for c in candidates)
    deciding = [c for c in candidates if c.resource.specificity() == best]
    if any(c.decision is Decision.DENY for c in deciding):
        return Verdict(False, need, Refusal.DENIED)
    return ALLOWED


def authorize(user: User, needs: Iterable[Need], source_ip: str | None) -> Verdict:
    """Allowed only if every need is (see the module doc)."""
    if not user.enabled:
        return Verdict(False, None, Refusal.DISABLED)
    for need in needs:
        verdict = decide_need(user.policies, need, source_ip)
        if not verdict.allowed:
            return verdict
    return ALLOWED


def refusal_remark(access_key: str, verdict: Verdict, source_ip: str | None) -> str:
    """RocketMQ 5.3's AuthorizationException text for a refused verdict."""
    if verdict.refusal is Refusal.DISABLED or verdict.need is None:
        return f"User:{access_key} is disabled."
    return (
        f"User:{access_key} has no permission to access {verdict.need.resource.key} "
        f"from {source_ip}, {verdict.refusal.value if verdict.refusal else ''}"
    )


# -- which request needs what (DefaultAuthorizationContextBuilder, RocketMQ 5.3)

SEND_MESSAGE = RequestCode.SEND_MESSAGE
PULL_MESSAGE = RequestCode.PULL_MESSAGE
QUERY_MESSAGE = RequestCode.QUERY_MESSAGE
QUERY_CONSUMER_OFFSET = RequestCode.QUERY_CONSUMER_OFFSET
UPDATE_CONSUMER_OFFSET = RequestCode.UPDATE_CONSUMER_OFFSET
UPDATE_AND_CREATE_TOPIC = RequestCode.UPDATE_AND_CREATE_TOPIC
GET_CONSUMER_LIST_BY_GROUP = RequestCode.GET_CONSUMER_LIST_BY_GROUP
END_TRANSACTION = RequestCode.END_TRANSACTION
CONSUMER_SEND_MSG_BACK = RequestCode.CONSUMER_SEND_MSG_BACK
GET_ROUTEINFO_BY_TOPIC = RequestCode.GET_ROUTEINFO_BY_TOPIC
SEND_MESSAGE_V2 = RequestCode.SEND_MESSAGE_V2
SEND_BATCH_MESSAGE = RequestCode.SEND_BATCH_MESSAGE
DELETE_TOPIC_IN_BROKER = RequestCode.DELETE_TOPIC_IN_BROKER

_PUB = frozenset({Action.PUB})
_SUB = frozenset({Action.SUB})
_SUB_GET = frozenset({Action.SUB, Action.GET})
_SUB_UPDATE = frozenset({Action.SUB, Action.UPDATE})


def _is_retry(topic: str | None) -> bool:
    return topic is not None and topic.startswith(RETRY_PREFIX)


def _send_needs(topic: str | None, group: str | None) -> list[Need]:
    if topic is None:
        return []
    if _is_retry(topic):
        return [Need(Resource.group(group or topic), _SUB)]
    return [Need(Resource.topic(topic), _PUB)]


def needs_of_fields(code: int, fields: Mapping[str, str]) -> list[Need]:
    """The needs of a request whose resources are in its header (extFields); [] for a code
    that names none (a valid signature is all it needs)."""
    topic, group = fields.get("topic"), fields.get("consumerGroup")
    if code == SEND_MESSAGE:
        return _send_needs(topic, fields.get("producerGroup"))
    if code in (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE):
        return _send_needs(fields.get("b"), fields.get("a"))
    if code == END_TRANSACTION:
        return [Need(Resource.topic(topic), _PUB)] if topic else []
    if code == CONSUMER_SEND_MSG_BACK:
        return [Need(Resource.group(fields.get("group", "")), _SUB)]
    if code in (PULL_MESSAGE, QUERY_CONSUMER_OFFSET, UPDATE_CONSUMER_OFFSET):
        actions = (
            _SUB
            if code == PULL_MESSAGE
            else _SUB_GET
            if code == QUERY_CONSUMER_OFFSET
            else _SUB_UPDATE
        )
        needs = [] if topic is None or _is_retry(topic) else [Need(Resource.topic(topic), actions)]
        return [*needs, Need(Resource.group(group or ""), actions)]
    if code == QUERY_MESSAGE and topic is not None:
        return [Need(Resource.topic(topic), _SUB_GET)]
    if code == GET_CONSUMER_LIST_BY_GROUP:
        return [Need(Resource.group(group or ""), _SUB_GET)]
    if code == GET_ROUTEINFO_BY_TOPIC and topic is not None:
        if _is_retry(topic):
            return [Need(Resource.group(topic), _SUB_GET)]
        return [Need(Resource.topic(topic), frozenset({Action.PUB, Action.SUB, Action.GET}))]
    if code == UPDATE_AND_CREATE_TOPIC and topic is not None:
        return [Need(Resource.topic(topic), frozenset({Action.CREATE, Action.UPDATE}))]
    if code == DELETE_TOPIC_IN_BROKER and topic is not None:
        return [Need(Resource.topic(topic), frozenset({Action.DELETE}))]
    annotated = _ANNOTATED.get(code)
    if annotated is not None:  # buildContextByAnnotation: the header's @RocketMQResource fields
        needs = []
        if group is not None:
            needs.append(Need(Resource.group(group), annotated))
        if topic is not None:
            resource = Resource.group(topic) if _is_retry(topic) else Resource.topic(topic)
            needs.append(Need(resource, annotated))
        return needs
    return []


#: Codes decided by their header's @RocketMQAction/@RocketMQResource annotations (5.3): the
#: action, on the `consumerGroup` (GROUP) and `topic` (TOPIC, a retry topic as its group).
_ANNOTATED: dict[int, frozenset[Action]] = {
    RequestCode.GET_MAX_OFFSET: frozenset({Action.GET}),
    RequestCode.GET_MIN_OFFSET: frozenset({Action.GET}),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: frozenset({Action.GET}),
    RequestCode.GET_EARLIEST_MSG_STORETIME: frozenset({Action.GET}),
    RequestCode.GET_TOPIC_CONFIG: frozenset({Action.GET}),
    RequestCode.POP_MESSAGE: _SUB,
    RequestCode.ACK_MESSAGE: _SUB,
    RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _SUB,
}


def needs_of_subscriptions(groups: Mapping[str, Sequence[str]]) -> list[Need]:
    """HEART_BEAT and LOCK/UNLOCK_BATCH_MQ: Sub on each consumer group and on each of its
    topics (retry topics left out), from the decoded body: group → topics."""
    needs: list[Need] = []
    for group, topics in groups.items():
        needs.append(Need(Resource.group(group), _SUB))
        needs.extend(Need(Resource.topic(t), _SUB) for t in topics if not _is_retry(t))
    return needs


# -- JSON (the controller's API and state, the brokers' users-snapshot)


def user_to_json(user: User, *, with_secret: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "accessKey": user.access_key,
        "policies": [e.to_json() for e in user.policies],
        "userStatus": "enable" if user.enabled else "disable",
    }
    if with_secret:
        data["secretKey"] = user.secret_key
    return data


def parse_user_status(value: object) -> bool:
    """`enable` → True, `disable` → False (RocketMQ's UserStatus names)."""
    if value in (None, "enable", "Enable", "ENABLE"):
        return True
    if value in ("disable", "Disable", "DISABLE"):
        return False
    raise PolicyError(f"userStatus {value!r}: expected 'enable' or 'disable'")


def user_from_json(data: Mapping[str, Any]) -> User:
    """A user with its SecretKey (the users-snapshot's form)."""
    access_key, secret_key = data.get("accessKey"), data.get("secretKey")
    if not isinstance(access_key, str) or not isinstance(secret_key, str):
        raise PolicyError("a user needs accessKey and secretKey strings")
    return User(
        check_access_key(access_key),
        check_secret_key(secret_key),
        entries_from_json(data.get("policies", [])),
        parse_user_status(data.get("userStatus")),
    )
