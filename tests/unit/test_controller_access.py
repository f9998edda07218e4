"""Controller API credentials and the access decision (DESIGN.md §11; docs/security.md).

Pure functions, no sockets: `credentials.authenticate` (a header → who) and
`access.decide` (who, endpoint, group, origin host, registered addresses →
allow/deny). The table below is the role matrix of docs/security.md, one row
per (role, endpoint, group) case; the integration test
tests/integration/test_controller_credentials.py drives the same rules
through real controller processes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brokergroup_controller import cli as controller_cli
from brokergroup_controller import requests as rq
from brokergroup_controller.access import AccessRequest, decide
from brokergroup_controller.credentials import (
    AuthenticationError,
    CredentialKeys,
    Principal,
    RocketMQKeys,
    Role,
    authenticate,
    derive_credential,
    derive_rocketmq_pair,
    verify_credential,
)
from brokergroup_controller.request_parsing import parse_elect

ROOT = "root-secret-of-this-test-0123456789"
KEYS = CredentialKeys(admin_token="admin-token-of-this-test", broker_credential_root=ROOT)
A = ("DefaultCluster", "broker-a")
B = ("DefaultCluster", "broker-b")
ADMIN = Principal(Role.ADMIN)
BROKER_A = Principal(Role.BROKER, A)
CLIENT_A = Principal(Role.CLIENT, A)


def bearer(token: str) -> str:
    return f"Bearer {token}"


# ---------------------------------------------------------------- authentication


def test_admin_token_and_derived_credentials_authenticate_to_their_role_and_group() -> None:
    assert authenticate(bearer(KEYS.admin_token), KEYS) == ADMIN
    broker = derive_credential(ROOT, Role.BROKER, *A)
    client = derive_credential(ROOT, Role.CLIENT, *A)
    assert authenticate(bearer(broker), KEYS) == BROKER_A
    assert authenticate(bearer(client), KEYS) == CLIENT_A
    # The same group and role always derive the same token (the operator and
    # the local runtime recompute it; nothing is stored per group).
    assert derive_credential(ROOT, Role.BROKER, *A) == broker
    assert derive_credential(ROOT, Role.BROKER, *B) != broker
    assert derive_credential(ROOT, Role.CLIENT, *A) != broker


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (None, "missing bearer credential"),
        ("", "missing bearer credential"),
        ("Basic abc", "missing bearer credential"),
        (KEYS.admin_token, "missing bearer credential"),  # no scheme
        ("Bearer wrong", "not the controller's admin token"),
        ("Bearer bg1.broker.x", "malformed derived credential"),
        ("Bearer bg1.admin.eA.eA.eA", "malformed derived credential"),
        ("Bearer bg1.broker.!!.eA.eA", "does not verify"),
    ],
)
def test_missing_wrong_or_malformed_credentials_are_refused(
    header: str | None, message: str
) -> None:
    with pytest.raises(AuthenticationError, match=message):
        authenticate(header, KEYS)


def test_a_credential_derived_from_another_root_or_retargeted_does_not_verify() -> None:
    foreign = derive_credential("another-root-0123456789", Role.BROKER, *A)
    with pytest.raises(AuthenticationError, match="does not verify"):
        authenticate(bearer(foreign), KEYS)
    # Group A's MAC with group B's name in front: the name is covered by the MAC.
    prefix, role, _cluster, _name, mac = derive_credential(ROOT, Role.BROKER, *A).split(".")
    b_parts = derive_credential(ROOT, Role.BROKER, *B).split(".")
    forged = ".".join((prefix, role, b_parts[2], b_parts[3], mac))
    with pytest.raises(AuthenticationError, match="does not verify"):
        authenticate(bearer(forged), KEYS)
    # Group A's broker MAC relabelled as a client credential, and the reverse.
    relabelled = ".".join((prefix, "client", _cluster, _name, mac))
    with pytest.raises(AuthenticationError, match="does not verify"):
        authenticate(bearer(relabelled), KEYS)


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_every_group_name_round_trips_through_its_credential(cluster: str, name: str) -> None:
    token = derive_credential(ROOT, Role.BROKER, cluster, name)
    assert authenticate(bearer(token), KEYS) == Principal(Role.BROKER, (cluster, name))


def test_the_credential_check_is_the_same_without_the_http_header() -> None:
    """verify_credential is what every front end calls (the HTTP API through
    authenticate; the remoting ports later): same principals, same refusals."""
    for token, principal in (
        (KEYS.admin_token, ADMIN),
        (derive_credential(ROOT, Role.BROKER, *A), BROKER_A),
        (derive_credential(ROOT, Role.CLIENT, *A), CLIENT_A),
    ):
        assert verify_credential(token, KEYS) == principal == authenticate(bearer(token), KEYS)
    for token in ("wrong", bearer(KEYS.admin_token), derive_credential("x" * 20, Role.CLIENT, *A)):
        with pytest.raises(AuthenticationError):
            verify_credential(token, KEYS)


def _derive_credential(tmp_path: Path, role: str, *extra: str) -> int:
    """Run `brokergroup admin derive-credential` for group A with the root in a file."""
    root_file = tmp_path / "root"
    root_file.write_text(ROOT + "\n")
    parser = argparse.ArgumentParser()
    controller_cli.register(parser.add_subparsers())
    args = parser.parse_args(
        ["admin", "derive-credential", "--role", role, "--broker-name", A[1],
         "--cluster-name", A[0], "--root-file", str(root_file), *extra]
    )  # fmt: skip
    result: int = args.func(args)
    return result


def test_admin_derive_credential_prints_what_the_operator_derives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`brokergroup admin derive-credential`: the manual setup's way to hand a
    broker (or a producer) its group's credential without the admin token."""
    assert _derive_credential(tmp_path, "broker") == 0
    printed = capsys.readouterr().out.strip()
    assert printed == derive_credential(ROOT, Role.BROKER, *A)
    assert verify_credential(printed, KEYS) == BROKER_A


def test_admin_derive_credential_rocketmq_prints_the_groups_key_pair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`brokergroup admin derive-credential --rocketmq`: the pair a user's own group Secret
    or a stock client needs, as the operator derives it (the key-file JSON line)."""
    assert _derive_credential(tmp_path, "client", "--rocketmq") == 0
    printed = json.loads(capsys.readouterr().out)
    pair = derive_rocketmq_pair(ROOT, Role.CLIENT, *A)
    assert printed == {"accessKey": pair.access_key, "secretKey": pair.secret_key}
    assert RocketMQKeys(None, ROOT).principal(printed["accessKey"]) == Principal(Role.CLIENT, A)


def test_credential_keys_keep_secrets_out_of_repr() -> None:
    assert ROOT not in repr(KEYS) and KEYS.admin_token not in repr(KEYS)


# ---------------------------------------------------------------- role rules

# The role matrix of docs/security.md: endpoint → roles that may call it (for
# their own group; admin for every group).
MAY_CALL = {
    "next_broker_id": "admin broker",
    "apply_broker_id": "admin broker",
    "register": "admin broker",
    "heartbeat": "admin broker",
    "inactive": "admin broker",
    "alter_sync_state_set": "admin broker",
    "elect_master": "admin broker",
    "clean": "admin",
    "controller_config": "admin",  # the remoting port's GET/UPDATE_CONTROLLER_CONFIG
    "replica_info": "admin broker client",
    "watch": "admin broker client",
}


def request(endpoint: str, group: tuple[str, str] | None = A, **kw: object) -> AccessRequest:
    acting = kw.pop("acting_broker_id", 1 if endpoint == "elect_master" else None)
    return AccessRequest(endpoint, group, acting_broker_id=acting, **kw)  # type: ignore[arg-type]


def matrix() -> list[tuple[str, str, str, bool]]:
    return [
        (who, endpoint, group, who in roles.split() and (who == "admin" or group == "A"))
        for endpoint, roles in MAY_CALL.items()
        for who in ("admin", "broker", "client")
        for group in ("A", "B")
    ]


PRINCIPALS = {"admin": ADMIN, "broker": BROKER_A, "client": CLIENT_A}
GROUPS = {"A": A, "B": B}


@pytest.mark.parametrize(("who", "endpoint", "group", "allowed"), matrix())
def test_role_matrix(who: str, endpoint: str, group: str, allowed: bool) -> None:
    """Admin: everything. Broker of A: its group's broker calls, never clean, never B.
    Client of A: A's reads only."""
    verdict = decide(PRINCIPALS[who], request(endpoint, GROUPS[group]))
    assert verdict.allowed is allowed, verdict.reason
    if not allowed:
        assert verdict.reason


def test_listing_every_group_is_admin_only_and_raft_status_is_open_to_any_principal() -> None:
    assert decide(ADMIN, request("groups", None)).allowed
    for principal in (BROKER_A, CLIENT_A):
        listing = decide(principal, request("groups", None))
        assert not listing.allowed and "admin credential" in listing.reason
        assert decide(principal, request("raft", None)).allowed


def test_refusal_names_the_credential_and_the_other_group() -> None:
    verdict = decide(BROKER_A, request("heartbeat", B, acting_broker_id=1))
    assert verdict.reason == (
        "the broker credential of DefaultCluster/broker-a may not act on "
        "DefaultCluster/broker-b: a credential is bound to its own group"
    )


def test_a_broker_elects_only_as_requester_and_designates_only_itself() -> None:
    assert decide(BROKER_A, request("elect_master", acting_broker_id=2)).allowed
    assert decide(
        BROKER_A, request("elect_master", acting_broker_id=2, designated_broker_id=2)
    ).allowed
    forced = decide(BROKER_A, request("elect_master", acting_broker_id=2, designated_broker_id=3))
    assert not forced.allowed and "only the admin credential designates" in forced.reason
    no_requester = decide(
        BROKER_A, request("elect_master", acting_broker_id=None, designated_broker_id=3)
    )
    assert not no_requester.allowed and "only as the requester" in no_requester.reason
    assert decide(
        ADMIN, request("elect_master", acting_broker_id=None, designated_broker_id=3)
    ).allowed


def test_a_switchover_is_the_admin_credentials_alone() -> None:
    """A switchover (the controller picks the target, issue 32 item 3) names no requester,
    so a broker credential is refused as for any election it does not request."""
    parsed = parse_elect({"clusterName": A[0], "brokerName": A[1], "switchover": True})
    as_parsed = AccessRequest.of(parsed)
    refused = decide(BROKER_A, as_parsed)
    assert not refused.allowed and "only as the requester" in refused.reason
    assert decide(ADMIN, as_parsed).allowed


# ---------------------------------------------------------------- address rules (leader)

REGISTERED = {1: "10.0.0.1:10911", 2: "10.0.0.2:10911"}


def test_a_heartbeat_must_claim_the_registered_address_whoever_sends_it() -> None:
    ok = request("heartbeat", acting_broker_id=1, claimed_address="10.0.0.1:10911")
    assert decide(BROKER_A, ok, "10.0.0.1", REGISTERED).allowed
    moved = request("heartbeat", acting_broker_id=1, claimed_address="10.0.0.9:10911")
    for principal in (ADMIN, BROKER_A):
        verdict = decide(principal, moved, "10.0.0.9", REGISTERED)
        assert not verdict.allowed
        assert verdict.reason == (
            "heartbeat for broker 1 claims address 10.0.0.9:10911 but broker 1 is "
            "registered at 10.0.0.1:10911: register the new address first"
        )


def test_a_broker_credential_acts_for_a_broker_id_only_from_its_registered_host() -> None:
    for endpoint in ("heartbeat", "inactive", "alter_sync_state_set", "elect_master"):
        req = request(endpoint, acting_broker_id=1, claimed_address="10.0.0.1:10911")
        assert decide(BROKER_A, req, "10.0.0.1", REGISTERED).allowed, endpoint
        spoofed = decide(BROKER_A, req, "10.0.0.2", REGISTERED)
        assert not spoofed.allowed, endpoint
        assert "came from 10.0.0.2, but broker 1 is registered at 10.0.0.1:10911" in spoofed.reason
        # The admin credential (operator, supervisor) reports from anywhere.
        if endpoint != "heartbeat":
            assert decide(ADMIN, req, "10.9.9.9", REGISTERED).allowed, endpoint


def test_a_broker_registers_only_the_address_it_connects_from() -> None:
    for endpoint in ("register", "apply_broker_id"):
        req = request(endpoint, acting_broker_id=1, claimed_address="10.0.0.7:10911")
        assert decide(BROKER_A, req, "10.0.0.7", REGISTERED).allowed
        verdict = decide(BROKER_A, req, "10.0.0.8", REGISTERED)
        assert (
            not verdict.allowed
            and "may register only the address it connects from" in verdict.reason
        )


def test_without_registered_addresses_only_role_rules_apply() -> None:
    """A follower checks roles only; the leader checks addresses with its state."""
    req = request("heartbeat", acting_broker_id=1, claimed_address="10.0.0.9:10911")
    assert decide(BROKER_A, req, "10.0.0.9", None).allowed
    assert not decide(BROKER_A, req, "10.0.0.9", REGISTERED).allowed


def test_dns_named_addresses_are_compared_by_string_only() -> None:
    registered = {1: "broker-a-0.broker-a.ns.svc:10911"}
    req = request("inactive", acting_broker_id=1)
    assert decide(BROKER_A, req, "10.0.0.5", registered).allowed


def test_of_reads_the_fields_access_depends_on() -> None:
    alter = rq.AlterSyncStateSet(*A, 2, 1, frozenset({2}), 1)
    assert AccessRequest.of(alter) == AccessRequest("alter_sync_state_set", A, acting_broker_id=2)
    apply = rq.ApplyBrokerId(*A, broker_id=3, register_code="x", address="h:1")
    assert AccessRequest.of(apply) == AccessRequest("apply_broker_id", A, claimed_address="h:1")
    clean = rq.CleanBrokerData(*A, broker_ids=frozenset({1}))
    assert AccessRequest.of(clean) == AccessRequest("clean", A)
    assert AccessRequest.of(rq.ListGroups()) == AccessRequest("groups")
