"""Users with rights (issue 36 item 3; docs/security.md "Users with rights"): the pure ACL 2.0
decision of brokergroup_remoting.authorization.

- `authorize` against a tiny reference evaluator written the way RocketMQ 5.3's
  AclAuthorizationHandler is (filter the matching entries, sort them with a pairwise
  comparator, take the first), with the documented Deny-wins tie-break, on random users and
  requests (hypothesis);
- worked examples: Pub on one topic, prefixes, `*`, Deny over Allow, the more specific entry
  deciding, source IPs, a disabled user, RocketMQ's refusal remark;
- which request code needs what (DefaultAuthorizationContextBuilder's table);
- the policy parsers (`--allow 'Topic:T=Pub,Sub'`, JSON) fuzzed: any text yields an entry
  or a PolicyError, never another exception, and a parsed entry round-trips.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_remoting import authorization as az
from brokergroup_remoting.authorization import (
    Action,
    Decision,
    Need,
    PolicyEntry,
    PolicyError,
    Resource,
    User,
    authorize,
    parse_entry_arg,
    parse_resource,
)
from brokergroup_remoting.codes import RequestCode

# -- the reference evaluator (AclAuthorizationHandler's shape)


def _ref_matches(entry_key: str, kind: str, name: str) -> bool:
    if entry_key == "*":
        return True
    ekind, _, ename = entry_key.partition(":")
    if ekind != kind:
        return False
    if ename == "*":
        return True
    if ename.endswith("*"):
        return name.startswith(ename[:-1])
    return name == ename


def _ref_pattern(entry_key: str) -> str:
    if entry_key == "*":
        return "ANYTYPE"
    name = entry_key.partition(":")[2]
    return "ANY" if name == "*" else "PREFIXED" if name.endswith("*") else "LITERAL"


def _ref_compare(a: dict[str, object], b: dict[str, object]) -> int:
    ka, kb = str(a["resource"]), str(b["resource"])
    pa, pb = _ref_pattern(ka), _ref_pattern(kb)
    compare = 0
    if (pa == "ANYTYPE") != (pb == "ANYTYPE"):
        compare = 1 if pa == "ANYTYPE" else -1
    elif pa == pb:
        if pa == "PREFIXED":
            compare = -1 * ((len(ka) > len(kb)) - (len(ka) < len(kb)))
    else:
        order = {"LITERAL": 0, "PREFIXED": 1, "ANY": 2}
        compare = -1 if order[pa] < order[pb] else 1
    if compare:
        return compare
    # the documented intent: Deny first among equals
    da, db = a["decision"] == "Deny", b["decision"] == "Deny"
    return -1 if da and not db else 1 if db and not da else 0


def _ref_decide(
    policies: list[dict[str, object]], kind: str, name: str, actions: set[str], ip: str
) -> bool:
    matched = [
        p
        for p in policies
        if _ref_matches(str(p["resource"]), kind, name)
        and ("All" in p["actions"] or bool(actions & set(p["actions"])))  # type: ignore[operator,call-overload]
        and (
            not p["sourceIps"]
            or any(
                ipaddress.ip_address(ip) in ipaddress.ip_network(n)
                for n in p["sourceIps"]  # type: ignore[attr-defined]
            )
        )
    ]
    if not matched:
        return False
    matched.sort(key=functools.cmp_to_key(_ref_compare))
    return matched[0]["decision"] == "Allow"


# -- strategies

_names = st.sampled_from(["T", "U", "app-1", "app-2", "app", "G", "orders"])
_actions = st.sets(st.sampled_from([a.value for a in Action]), min_size=1, max_size=3)


@st.composite
def _resource_keys(draw: st.DrawFn) -> str:
    shape = draw(st.sampled_from(["literal", "prefix", "anyname", "star"]))
    kind = draw(st.sampled_from(["Topic", "Group"]))
    name = draw(_names)
    if shape == "star":
        return "*"
    if shape == "anyname":
        return f"{kind}:*"
    if shape == "prefix":
        return f"{kind}:{name[: draw(st.integers(1, len(name)))]}*"
    return f"{kind}:{name}"


_policy = st.fixed_dictionaries(
    {
        "resource": _resource_keys(),
        "actions": _actions.map(sorted),
        "decision": st.sampled_from(["Allow", "Deny"]),
        "sourceIps": st.sampled_from([[], ["127.0.0.0/8"], ["10.0.0.0/8"], ["127.0.0.2/32"]]),
    }
)


@settings(max_examples=400, deadline=None)
@given(
    policies=st.lists(_policy, max_size=6),
    kind=st.sampled_from(["Topic", "Group"]),
    name=_names,
    needed=st.sets(st.sampled_from(["Pub", "Sub", "Get", "Update", "Create"]), min_size=1),
    ip=st.sampled_from(["127.0.0.1", "127.0.0.2", "10.1.2.3"]),
)
def test_authorize_agrees_with_the_reference_evaluator(
    policies: list[dict[str, object]], kind: str, name: str, needed: set[str], ip: str
) -> None:
    user = User("alice", "secret-key-1", az.entries_from_json(policies))
    resource = Resource.topic(name) if kind == "Topic" else Resource.group(name)
    need = Need(resource, frozenset(Action.parse(a) for a in needed))
    verdict = authorize(user, [need], ip)
    assert verdict.allowed == _ref_decide(policies, kind, name, needed, ip)


# -- worked examples


def _user(*entries: str, deny: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> User:
    policies = [parse_entry_arg(e, Decision.ALLOW, ips) for e in entries]
    policies += [parse_entry_arg(e, Decision.DENY, ips) for e in deny]
    return User("alice", "secret-key-1", tuple(policies))


PUB = frozenset({Action.PUB})
SUB = frozenset({Action.SUB})


def test_pub_on_one_topic_only() -> None:
    user = _user("Topic:T=Pub")
    assert authorize(user, [Need(Resource.topic("T"), PUB)], "127.0.0.1").allowed
    refused = authorize(user, [Need(Resource.topic("U"), PUB)], "127.0.0.1")
    assert refused == az.Verdict(False, Need(Resource.topic("U"), PUB), az.Refusal.NO_MATCH)
    assert not authorize(user, [Need(Resource.topic("T"), SUB)], "127.0.0.1").allowed
    assert az.refusal_remark("alice", refused, "127.0.0.1") == (
        "User:alice has no permission to access Topic:U from 127.0.0.1, no matched policies."
    )


def test_every_need_must_be_allowed_and_the_first_refused_is_named() -> None:
    user = _user("Topic:T=Sub")
    needs = [Need(Resource.topic("T"), SUB), Need(Resource.group("G"), SUB)]
    verdict = authorize(user, needs, None)
    assert verdict.need == needs[1] and verdict.refusal is az.Refusal.NO_MATCH
    assert authorize(_user("Topic:T=Sub", "Group:G=Sub"), needs, None).allowed


def test_prefix_any_and_all() -> None:
    assert authorize(_user("Topic:app-*=Pub"), [Need(Resource.topic("app-1"), PUB)], None).allowed
    assert not authorize(_user("Topic:app-*=Pub"), [Need(Resource.topic("ap"), PUB)], None).allowed
    assert authorize(_user("Topic:*=All"), [Need(Resource.topic("x"), SUB)], None).allowed
    assert not authorize(_user("Topic:*=All"), [Need(Resource.group("x"), SUB)], None).allowed
    assert authorize(_user("*=Sub"), [Need(Resource.group("x"), SUB)], None).allowed


def test_deny_wins_among_equals_and_the_more_specific_entry_decides() -> None:
    need = Need(Resource.topic("app-1"), PUB)
    assert not authorize(_user("Topic:app-1=Pub", deny=("Topic:app-1=Pub",)), [need], None).allowed
    denied = authorize(_user("Topic:app-1=Pub", deny=("Topic:app-1=Pub",)), [need], "1.2.3.4")
    assert az.refusal_remark("alice", denied, "1.2.3.4").endswith(", the decision is deny.")
    # a literal Allow beats a prefix Deny; a longer prefix beats a shorter one
    assert authorize(_user("Topic:app-1=Pub", deny=("Topic:app-*=Pub",)), [need], None).allowed
    assert not authorize(_user("Topic:app-*=Pub", deny=("Topic:app-1*=Pub",)), [need], None).allowed
    assert authorize(_user("Topic:app-1*=Pub", deny=("Topic:*=Pub",)), [need], None).allowed


def test_source_ips_and_disabled_users() -> None:
    user = _user("Topic:T=Pub", ips=("10.0.0.0/8",))
    need = Need(Resource.topic("T"), PUB)
    assert authorize(user, [need], "10.9.9.9").allowed
    assert not authorize(user, [need], "127.0.0.1").allowed
    assert not authorize(user, [need], None).allowed
    disabled = User("bob", "secret-key-1", user.policies, enabled=False)
    verdict = authorize(disabled, [need], "10.9.9.9")
    assert not verdict.allowed and az.refusal_remark("bob", verdict, "") == "User:bob is disabled."


# -- which request needs what


@pytest.mark.parametrize(
    ("code", "fields", "expected"),
    [
        (RequestCode.SEND_MESSAGE, {"topic": "T", "producerGroup": "P"}, [("Topic:T", {"Pub"})]),
        (RequestCode.SEND_MESSAGE_V2, {"b": "T", "a": "P"}, [("Topic:T", {"Pub"})]),
        (RequestCode.SEND_BATCH_MESSAGE, {"b": "%RETRY%G", "a": "G"}, [("Group:G", {"Sub"})]),
        (
            RequestCode.PULL_MESSAGE,
            {"topic": "T", "consumerGroup": "G"},
            [("Topic:T", {"Sub"}), ("Group:G", {"Sub"})],
        ),
        (
            RequestCode.PULL_MESSAGE,
            {"topic": "%RETRY%G", "consumerGroup": "G"},
            [("Group:G", {"Sub"})],
        ),
        (
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"topic": "T", "consumerGroup": "G"},
            [("Topic:T", {"Sub", "Update"}), ("Group:G", {"Sub", "Update"})],
        ),
        (
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"topic": "T", "consumerGroup": "G"},
            [("Topic:T", {"Sub", "Get"}), ("Group:G", {"Sub", "Get"})],
        ),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "G"}, [("Group:G", {"Sub"})]),
        (RequestCode.END_TRANSACTION, {"topic": "T"}, [("Topic:T", {"Pub"})]),
        (RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"}, [("Topic:T", {"Pub", "Sub", "Get"})]),
        (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "T"}, [("Topic:T", {"Create", "Update"})]),
        (RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}, [("Topic:T", {"Get"})]),
        (
            RequestCode.POP_MESSAGE,
            {"topic": "T", "consumerGroup": "G"},
            [("Group:G", {"Sub"}), ("Topic:T", {"Sub"})],
        ),
        (RequestCode.GET_BROKER_CLUSTER_INFO, {}, []),
    ],
)
def test_needs_of_fields(
    code: int, fields: dict[str, str], expected: list[tuple[str, set[str]]]
) -> None:
    needs = az.needs_of_fields(code, fields)
    assert [(n.resource.key, {a.value for a in n.actions}) for n in needs] == expected


def test_needs_of_subscriptions_leave_retry_topics_out() -> None:
    needs = az.needs_of_subscriptions({"G": ["T", "%RETRY%G"]})
    assert [n.resource.key for n in needs] == ["Group:G", "Topic:T"]


# -- parsers


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=60))
def test_entry_arg_parser_never_crashes(text: str) -> None:
    try:
        entry = parse_entry_arg(text, Decision.ALLOW)
    except PolicyError:
        return
    again = az.entry_from_json(entry.to_json())
    assert again == entry


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=12),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
        max_leaves=12,
    )
)
def test_json_policies_parser_never_crashes(data: object) -> None:
    with contextlib.suppress(PolicyError):
        az.entries_from_json(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Topic:T", "expected RESOURCE=ACTION"),
        ("Queue:T=Pub", "expected Topic:NAME"),
        ("Topic:T=Publish", "unknown action 'Publish'"),
        ("Topic:a b=Pub", "the name must be"),
        ("Topic:=Pub", "the name must be"),
    ],
)
def test_bad_entry_args_are_named(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_entry_arg(text, Decision.ALLOW)


def test_resource_keys_round_trip() -> None:
    for key in ("*", "Topic:*", "Topic:T", "Topic:app-*", "Group:G", "Group:%RETRY%G"):
        assert parse_resource(key).key == key
    assert parse_resource("topic:T").key == "Topic:T"  # case-insensitive, as Resource.of


def test_user_json_round_trip_and_secret_kept_out() -> None:
    user = User("alice", "secret-key-1", (PolicyEntry(Resource.topic("T"), PUB, Decision.ALLOW),))
    assert "secretKey" not in az.user_to_json(user)
    assert az.user_from_json(az.user_to_json(user, with_secret=True)) == user
    assert "secret-key-1" not in repr(user)
