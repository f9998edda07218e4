"""The stock brokers' users sync (brokergroup_remoting.stock_users; docs/security.md "Users on
the stock brokers"): the pure plan against a model of a RocketMQ 5.3.1 broker's user store,
the parsers of AUTH_LIST_USER / AUTH_LIST_ACL answers, the requests' wire fields, the local
runtime's broker.conf with ACL 2.0 on and off, and one sync against a fake broker that applies
the requests as AdminBrokerProcessor does.

The model (`_Broker`) follows AdminBrokerProcessor and the auth managers of 5.3.1:
AUTH_CREATE_USER refuses an existing user, AUTH_DELETE_USER drops the user and its ACL (and
answers SUCCESS for an absent one), AUTH_CREATE_ACL needs the user and *merges* entries by
resource into an existing ACL (Policy.updateEntry). Applying `plan`'s requests to any store
must leave exactly the controllers' users, Super users untouched.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from brokergroup_cli.local.rocketmq_stock import StockBrokerConfig
from brokergroup_remoting import RequestCode, ResponseCode
from brokergroup_remoting.acl import ACCESS_KEY, verify
from brokergroup_remoting.command import RemotingCommand
from brokergroup_remoting.stock_users import (
    ACL_PROPERTIES,
    Entry,
    OpKind,
    StockUser,
    acl_enabled,
    from_snapshot,
    held_users,
    merged_entries,
    op_request,
    plan,
    sync_broker,
)

ADMIN = ("bg1.broker.x.y", "broker-secret")


class _Broker:
    """A 5.3.1 broker's users and ACLs, changed only by the admin codes."""

    def __init__(self, users: list[StockUser]) -> None:
        self.users = {u.username: u for u in users}
        self.requests: list[int] = []

    def handle(self, cmd: RemotingCommand) -> RemotingCommand:
        self.requests.append(cmd.code)
        fields = cmd.fields()
        ok = RemotingCommand(code=ResponseCode.SUCCESS, opaque=cmd.opaque, flag=1)

        def refuse(remark: str) -> RemotingCommand:
            return RemotingCommand(
                code=ResponseCode.SYSTEM_ERROR, opaque=cmd.opaque, flag=1, remark=remark
            )

        if cmd.code == RequestCode.AUTH_LIST_USER:
            body = [
                {"username": u.username, "password": u.password, "userType": u.user_type,
                 "userStatus": u.status}
                for u in self.users.values()
            ]  # fmt: skip
            return RemotingCommand(
                code=0, opaque=cmd.opaque, flag=1, body=json.dumps(body).encode() if body else b""
            )
        if cmd.code == RequestCode.AUTH_LIST_ACL:
            acls = [
                {"subject": f"User:{u.username}",
                 "policies": [{"policyType": "CUSTOM",
                               "entries": [e.to_json() for e in u.entries]}]}
                for u in self.users.values() if u.entries
            ]  # fmt: skip
            return RemotingCommand(
                code=0, opaque=cmd.opaque, flag=1, body=json.dumps(acls).encode()
            )
        if cmd.code == RequestCode.AUTH_DELETE_USER:
            self.users.pop(fields["username"], None)
            return ok
        if cmd.code == RequestCode.AUTH_CREATE_USER:
            info = json.loads(cmd.body)
            assert info["username"] == fields["username"]
            if info["username"] in self.users:
                return refuse("The user is existed")
            self.users[info["username"]] = StockUser(
                info["username"], info["password"], info["userStatus"], (), info["userType"]
            )
            return ok
        if cmd.code == RequestCode.AUTH_CREATE_ACL:
            acl = json.loads(cmd.body)
            name = fields["subject"].removeprefix("User:")
            assert acl["subject"] == fields["subject"]
            user = self.users.get(name)
            if user is None:
                return refuse(f"The subject of User:{name} is not exist.")
            merged = {e.resource: e for e in user.entries}
            for policy in acl["policies"]:
                assert policy["policyType"] == "Custom"
                for e in policy["entries"]:
                    merged[e["resource"]] = Entry(
                        e["resource"], tuple(e["actions"]), e["decision"], tuple(e["sourceIps"])
                    )
            self.users[name] = StockUser(
                user.username, user.password, user.status, tuple(merged.values()), user.user_type
            )
            return ok
        raise AssertionError(f"unexpected code {cmd.code}")


def _apply(broker: _Broker, desired: list[StockUser]) -> list[tuple[OpKind, str]]:
    held = held_users(
        broker.handle(RemotingCommand(RequestCode.AUTH_LIST_USER, 1)).body,
        broker.handle(RemotingCommand(RequestCode.AUTH_LIST_ACL, 2)).body,
    )
    ops = plan(desired, held)
    for op in ops:
        answer = broker.handle(op_request(op))
        assert answer.code == ResponseCode.SUCCESS, (op.describe(), answer.remark)
    return [(op.kind, op.user.username) for op in ops]


def _view(broker: _Broker) -> dict[str, tuple[str, str, str, tuple[Entry, ...]]]:
    return {
        n: (u.password, u.status.lower(), u.user_type.lower(), merged_entries(u.entries))
        for n, u in sorted(broker.users.items())
    }


SUPERS = [
    StockUser("bg1.broker.x.y", "broker-secret", user_type="Super"),
    StockUser("bg1.client.x.y", "client-secret", user_type="Super"),
]


def test_a_new_user_is_created_then_given_its_acl() -> None:
    broker = _Broker(list(SUPERS))
    app = StockUser("app", "app-secret-1", entries=(Entry("Topic:T", ("Pub",), "Allow"),))
    assert _apply(broker, [app]) == [(OpKind.CREATE_USER, "app"), (OpKind.CREATE_ACL, "app")]
    assert broker.users["app"].entries == (Entry("Topic:T", ("Pub",), "Allow", ()),)
    assert _apply(broker, [app]) == []  # in step: nothing sent but the two lists
    assert broker.requests[-2:] == [RequestCode.AUTH_LIST_USER, RequestCode.AUTH_LIST_ACL]


def test_a_removed_entry_is_gone_although_create_acl_merges() -> None:
    broker = _Broker(list(SUPERS))
    both = (Entry("Topic:T", ("Pub",), "Allow"), Entry("Topic:U", ("Pub",), "Allow"))
    _apply(broker, [StockUser("app", "s-12345678", entries=both)])
    one = StockUser("app", "s-12345678", entries=both[:1])
    assert _apply(broker, [one]) == [
        (OpKind.DELETE_USER, "app"), (OpKind.CREATE_USER, "app"), (OpKind.CREATE_ACL, "app"),
    ]  # fmt: skip
    assert [e.resource for e in broker.users["app"].entries] == ["Topic:T"]


def test_a_deleted_user_goes_and_super_users_stay() -> None:
    broker = _Broker([*SUPERS, StockUser("old", "old-secret", entries=())])
    assert _apply(broker, []) == [(OpKind.DELETE_USER, "old")]
    assert sorted(broker.users) == ["bg1.broker.x.y", "bg1.client.x.y"]


def test_a_new_secret_or_status_recreates_the_user() -> None:
    """AUTH_UPDATE_USER of 5.3.1 stores the old user unchanged, so it is never used."""
    broker = _Broker(list(SUPERS))
    _apply(broker, [StockUser("app", "first-secret")])
    assert _apply(broker, [StockUser("app", "second-secret")]) == [
        (OpKind.DELETE_USER, "app"), (OpKind.CREATE_USER, "app"),
    ]  # fmt: skip
    assert broker.users["app"].password == "second-secret"
    _apply(broker, [StockUser("app", "second-secret", status="disable")])
    assert broker.users["app"].status == "disable"
    assert RequestCode.AUTH_UPDATE_USER not in broker.requests


def test_the_snapshot_and_the_list_answers_parse() -> None:
    users = from_snapshot(
        [{"accessKey": "app", "secretKey": "s-12345678", "userStatus": "enable", "version": 3,
          "policies": [{"resource": "Topic:T", "actions": ["Pub", "Sub"], "decision": "Deny",
                        "sourceIps": ["10.0.0.0/8"]}]}]
    )  # fmt: skip
    assert users == [
        StockUser("app", "s-12345678", "enable",
                  (Entry("Topic:T", ("Pub", "Sub"), "Deny", ("10.0.0.0/8",)),))
    ]  # fmt: skip
    assert "s-12345678" not in repr(users)
    # RocketMQ answers no body for an empty list; its ACL names and cases are its own.
    assert held_users(b"", b"") == []
    held = held_users(
        b'[{"username":"app","password":"p","userType":"Normal","userStatus":"enable"}]',
        b'[{"subject":"User:app","policies":[{"policyType":"CUSTOM","entries":'
        b'[{"resource":"Topic:T","actions":["Pub"],"sourceIps":null,"decision":"ALLOW"}]}]},'
        b'{"subject":"User:app","policies":[{"policyType":"DEFAULT","entries":'
        b'[{"resource":"*","actions":["All"],"decision":"Allow"}]}]}]',
    )
    assert held == [StockUser("app", "p", "enable", (Entry("Topic:T", ("Pub",), "ALLOW"),))]
    assert plan([StockUser("app", "p", entries=(Entry("Topic:T", ("Pub",), "Allow"),))], held) == []


def test_requests_carry_rocketmq_headers_and_bodies() -> None:
    app = StockUser("app", "s-12345678", entries=(Entry("Topic:T", ("Pub",), "Allow"),))
    create, acl = (op_request(op) for op in plan([app], []))
    assert create.code == RequestCode.AUTH_CREATE_USER == 3001
    assert create.fields() == {"username": "app"}
    assert json.loads(create.body) == {
        "username": "app", "password": "s-12345678", "userType": "Normal", "userStatus": "enable",
    }  # fmt: skip
    assert acl.code == RequestCode.AUTH_CREATE_ACL == 3006
    assert acl.fields() == {"subject": "User:app"}
    assert json.loads(acl.body) == {
        "subject": "User:app",
        "policies": [{"policyType": "Custom", "entries": [
            {"resource": "Topic:T", "actions": ["Pub"], "sourceIps": [], "decision": "Allow"}]}],
    }  # fmt: skip
    (delete,) = (op_request(op) for op in plan([], [app]))
    assert (delete.code, delete.fields()) == (RequestCode.AUTH_DELETE_USER, {"username": "app"})


_names = st.sampled_from(["a", "b", "c", "d"])
_entries = st.lists(
    st.builds(
        Entry,
        resource=st.sampled_from(["Topic:T", "Topic:app-*", "Group:G", "*"]),
        actions=st.lists(st.sampled_from(["Pub", "Sub", "Get"]), min_size=1, max_size=2).map(tuple),
        decision=st.sampled_from(["Allow", "Deny"]),
        source_ips=st.lists(st.sampled_from(["10.0.0.0/8", "127.0.0.1"]), max_size=1).map(tuple),
    ),
    max_size=3,
).map(tuple)
_users = st.lists(
    st.builds(
        StockUser,
        username=_names,
        password=st.sampled_from(["secret-1", "secret-2"]),
        status=st.sampled_from(["enable", "disable"]),
        entries=_entries,
    ),
    max_size=4,
    unique_by=lambda u: u.username,
)


@settings(max_examples=200, deadline=None)
@given(start=_users, desired=_users)
def test_any_store_ends_holding_exactly_the_controllers_users(
    start: list[StockUser], desired: list[StockUser]
) -> None:
    broker = _Broker([*SUPERS])
    _apply(broker, start)
    _apply(broker, desired)
    expected = {
        u.username: (u.password, u.status, "normal", merged_entries(u.entries)) for u in desired
    }
    for s in SUPERS:
        expected[s.username] = (s.password, "enable", "super", ())
    assert _view(broker) == dict(sorted(expected.items()))
    assert _apply(broker, desired) == []  # a second sync changes nothing


def test_sync_broker_signs_every_request_with_the_admin_pair() -> None:
    broker = _Broker(list(SUPERS))
    seen: list[str | None] = []

    async def invoke(cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        check = verify(cmd, lambda key: ADMIN[1] if key == ADMIN[0] else None)
        assert check.fault is None, check
        seen.append(cmd.fields().get(ACCESS_KEY))
        return broker.handle(cmd)

    app = StockUser("app", "s-12345678", entries=(Entry("Topic:T", ("Pub",), "Allow"),))
    result = asyncio.run(sync_broker(invoke, *ADMIN, [app]))
    assert result.applied == ("create user app", "create acl app")
    assert seen == [ADMIN[0]] * 4


def test_broker_conf_turns_acl_on_only_when_asked(tmp_path: Path) -> None:
    def conf(settings: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return StockBrokerConfig(
            base_dir=tmp_path, host="127.0.0.10", port=10911, controllers="c:9879",
            namesrv="n:9876", access_key="bg1.broker.x", secret_key="bs",
            client_pair=("bg1.client.x", "cs"), settings=settings,
        ).properties()  # fmt: skip

    off = conf(())
    assert not acl_enabled(())
    # as before: no check on the client port
    assert not {"authenticationEnabled", "authorizationEnabled", "authorizationProvider"} & set(off)
    on = conf((("authorizationEnabled", "true"),))
    assert acl_enabled((("authorizationEnabled", "true"),))
    assert {k: on[k] for k in ACL_PROPERTIES} == ACL_PROPERTIES
    assert on["authenticationEnabled"] == "true" and on["authorizationEnabled"] == "true"
    assert on["authenticationWhitelist"] == str(RequestCode.NOTIFY_BROKER_ROLE_CHANGED)
    # the group's pairs stay the broker's Super users
    assert json.loads(on["initAuthenticationUser"]) == {
        "username": "bg1.client.x",
        "password": "cs",
    }
    assert json.loads(on["innerClientAuthenticationCredentials"])["accessKey"] == "bg1.broker.x"
    # an explicit setting still wins; the last value of a name counts
    assert (
        conf((("authorizationEnabled", "true"), ("authenticationEnabled", "false")))[
            "authenticationEnabled"
        ]
        == "false"
    )
    assert not acl_enabled((("authorizationEnabled", "true"), ("authorizationEnabled", "false")))
