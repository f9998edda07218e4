"""The controller's users API (docs/security.md "Users with rights", the HTTP contract):
parsers of the path/body into the typed requests (`requests.PutUser` ...), the handlers on
the leader, and their JSON answers. `app` routes

    PUT    /v1/clusters/{cluster}/users/{accessKey}   admin: create or replace
    GET    /v1/clusters/{cluster}/users/{accessKey}   admin
    DELETE /v1/clusters/{cluster}/users/{accessKey}   admin (idempotent)
    GET    /v1/clusters/{cluster}/users               admin
    GET    /v1/clusters/{cluster}/users-snapshot      a broker credential of that cluster

here. Users live in the replicated state (`state.PutUser` / `state.DeleteUser`); the leader
seals a SecretKey before proposing (`users_seal`) and opens it only for a users-snapshot.
Answers never carry a SecretKey except the snapshot's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from brokergroup_controller import requests as rq
from brokergroup_controller import state as st
from brokergroup_controller.endpoints import Endpoints
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_controller.request_parsing import BadRequest
from brokergroup_controller.requests import Caller
from brokergroup_controller.users_seal import SealError, SecretSealer
from brokergroup_remoting.authorization import (
    PolicyError,
    check_access_key,
    check_secret_key,
    parse_user_status,
)

log = logging.getLogger(__name__)


def _cluster(data: Mapping[str, Any]) -> str:
    cluster = data.get("cluster")
    if not isinstance(cluster, str) or not cluster or len(cluster) > 255:
        raise BadRequest("the path's cluster must be a clusterName of 1-255 characters")
    return cluster


def _access_key(data: Mapping[str, Any]) -> str:
    value = data.get("accessKey")
    try:
        return check_access_key(value if isinstance(value, str) else "")
    except PolicyError as exc:
        raise BadRequest(str(exc)) from None


def parse_put_user(data: Mapping[str, Any]) -> rq.PutUser:
    unknown = set(data) - {"cluster", "accessKey", "secretKey", "policies", "userStatus"}
    if unknown:
        raise BadRequest(f"unknown fields {sorted(unknown)} in the user")
    secret = data.get("secretKey")
    try:
        if secret is not None:
            if not isinstance(secret, str):
                raise PolicyError("secretKey must be a string")
            check_secret_key(secret)
        policies = st.canonical_policies(data.get("policies", []))
        enabled = parse_user_status(data.get("userStatus"))
    except PolicyError as exc:
        raise BadRequest(str(exc)) from None
    return rq.PutUser(_cluster(data), _access_key(data), secret, policies, enabled)


def parse_user(data: Mapping[str, Any]) -> rq.GetUser:
    return rq.GetUser(_cluster(data), _access_key(data))


def parse_delete_user(data: Mapping[str, Any]) -> rq.DeleteUser:
    return rq.DeleteUser(_cluster(data), _access_key(data))


def parse_list_users(data: Mapping[str, Any]) -> rq.ListUsers:
    return rq.ListUsers(_cluster(data))


def parse_users_snapshot(data: Mapping[str, Any]) -> rq.UsersSnapshot:
    since = data.get("sinceVersion", "-1")
    try:
        since_version = int(since)
    except (TypeError, ValueError):
        raise BadRequest(f"field 'sinceVersion' must be an integer, got {since!r}") from None
    return rq.UsersSnapshot(_cluster(data), since_version)


def _user_json(user: st.StoredUser) -> dict[str, Any]:
    return {
        "accessKey": user.access_key,
        "policies": json.loads(user.policies_json),
        "userStatus": "enable" if user.enabled else "disable",
        "version": user.version,
    }


def _users(e: Endpoints, cluster: str) -> st.ClusterUsers:
    return e.service.node.read(lambda s: s.cluster_users(cluster))


def _sealer(e: Endpoints) -> SecretSealer:
    return SecretSealer(e.service.config.broker_credential_root)


async def put_user(e: Endpoints, r: rq.PutUser, c: Caller) -> dict[str, Any]:
    e.authorize(c, r)
    sealed = None if r.secret_key is None else _sealer(e).seal(r.secret_key)
    event = st.PutUser(
        r.cluster_name, "", r.access_key, sealed, r.policies_json, r.enabled
    )  # sealed on the leader: every replica applies the same bytes
    put = await e.service.propose(event, st.UserPut)
    log.info("user %s of cluster %s %s", r.access_key, r.cluster_name,
             "created" if put.created else "updated")  # fmt: skip
    user = _users(e, r.cluster_name).users[r.access_key]
    return {"user": _user_json(user), "created": put.created, "usersVersion": put.users_version}


async def get_user(e: Endpoints, r: rq.GetUser, c: Caller) -> dict[str, Any]:
    e.authorize(c, r)
    user = _users(e, r.cluster_name).users.get(r.access_key)
    if user is None:
        raise ControllerError(
            ErrorCode.USER_NOT_FOUND, f"no user {r.access_key} in cluster {r.cluster_name}"
        )
    return {"user": _user_json(user)}


async def delete_user(e: Endpoints, r: rq.DeleteUser, c: Caller) -> dict[str, Any]:
    e.authorize(c, r)
    deleted = await e.service.propose(
        st.DeleteUser(r.cluster_name, "", r.access_key), st.UserDeleted
    )
    if deleted.deleted:
        log.info("user %s of cluster %s deleted", r.access_key, r.cluster_name)
    return {"deleted": deleted.deleted, "usersVersion": deleted.users_version}


async def list_users(e: Endpoints, r: rq.ListUsers, c: Caller) -> dict[str, Any]:
    e.authorize(c, r)
    users = _users(e, r.cluster_name)
    return {
        "usersVersion": users.version,
        "users": [_user_json(u) for _, u in sorted(users.users.items())],
    }


async def users_snapshot(e: Endpoints, r: rq.UsersSnapshot, c: Caller) -> dict[str, Any]:
    e.authorize(c, r)
    users = _users(e, r.cluster_name)
    if users.version <= r.since_version:
        return {"usersVersion": users.version, "changed": False, "users": []}
    sealer = _sealer(e)
    answer = []
    for _, user in sorted(users.users.items()):
        try:
            secret = sealer.open(user.sealed_secret_key, user.access_key)
        except SealError as exc:
            log.error("%s; the user is left out of the brokers' snapshot", exc)
            continue
        answer.append({**_user_json(user), "secretKey": secret})
    return {"usersVersion": users.version, "changed": True, "users": answer}
