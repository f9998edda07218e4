"""A broker's copy of its cluster's users (docs/security.md "Users with rights").

The controller keeps a cluster's users in its replicated state; a broker reads them over its
own authenticated link (its group's broker credential, `GET /v1/clusters/{cluster}/
users-snapshot?sinceVersion=N`) every `refresh_interval_s` and replaces its table when the
usersVersion moved, so a new, changed or deleted user takes effect within about one interval
(seconds). A failed read keeps the last table (logged once per failure streak): the per-group
pairs never depend on it.

The remoting port's one auth step (`with_users`) checks a request's signature against the
group's pairs first, then the users; a request signed by a pair goes on to the pairs' own
rule (`remoting_keys.admin_refusal`), one signed by a user to ACL 2.0
(`brokergroup_remoting.authorization`): the needs of its code from the signed header fields,
for HEART_BEAT and LOCK/UNLOCK_BATCH_MQ from the signed body (decoded only after the
signature verified). A refusal is NO_PERMISSION with RocketMQ 5.3's remark.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from brokergroup_remoting import RemotingCommand, RequestCode
from brokergroup_remoting.authorization import (
    PolicyError,
    User,
    authorize,
    needs_of_fields,
    needs_of_subscriptions,
    refusal_remark,
    user_from_json,
)
from brokergroup_remoting.body import decode_json_object
from brokergroup_remoting.fields import BadField
from brokergroup_remoting.net import ServerAuth

log = logging.getLogger(__name__)

#: How often a broker asks the controller whether its cluster's users changed.
DEFAULT_REFRESH_INTERVAL_S = 1.0


class UsersSource(Protocol):
    async def users_snapshot(
        self, cluster_name: str, since_version: int = -1
    ) -> dict[str, Any]: ...


class BrokerUsers:
    """The users this broker accepts (empty until the first snapshot)."""

    def __init__(self) -> None:
        self.version = -1
        self._users: dict[str, User] = {}

    def replace(self, snapshot: Mapping[str, Any]) -> None:
        """Take a users-snapshot answer (`changed` False: nothing to do). A user that does
        not parse is left out, logged; the others are taken."""
        if not snapshot.get("changed", True):
            return
        users: dict[str, User] = {}
        for raw in snapshot.get("users", []):
            try:
                user = user_from_json(raw)
            except PolicyError as exc:
                log.error("user %r from the controller left out: %s", raw.get("accessKey"), exc)
                continue
            users[user.access_key] = user
        self._users = users
        self.version = int(snapshot["usersVersion"])

    def get(self, access_key: str) -> User | None:
        return self._users.get(access_key)

    def secret_for(self, access_key: str) -> str | None:
        user = self._users.get(access_key)
        return None if user is None else user.secret_key

    def refusal(self, user: User, cmd: RemotingCommand, source_ip: str | None) -> str | None:
        """Why `user` may not make `cmd` (RocketMQ's remark), or None."""
        try:
            needs = needs_of_request(cmd)
        except (BadField, ValueError, TypeError, AttributeError):
            return "parse authorization context error."
        verdict = authorize(user, needs, source_ip)
        return None if verdict.allowed else refusal_remark(user.access_key, verdict, source_ip)

    async def refresh_forever(
        self, source: UsersSource, cluster_name: str, interval_s: float
    ) -> None:
        failing = False
        while True:
            try:
                snapshot = await source.users_snapshot(cluster_name, self.version)
                before = self.version
                self.replace(snapshot)
                if self.version != before:
                    log.info(
                        "users of cluster %s: version %d, %d users",
                        cluster_name, self.version, len(self._users),
                    )  # fmt: skip
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:
                    log.warning(
                        "could not read the users of cluster %s from the controller (%s); "
                        "keeping version %d", cluster_name, exc, self.version,
                    )  # fmt: skip
                failing = True
            await asyncio.sleep(interval_s)


def _subscriptions_of(cmd: RemotingCommand) -> dict[str, list[str]]:
    """Consumer group → topics of a HEART_BEAT or LOCK/UNLOCK_BATCH_MQ body."""
    groups: dict[str, list[str]] = {}
    if cmd.code == RequestCode.HEART_BEAT:
        data = decode_json_object(cmd.body, "HeartbeatData")
        for consumer in data.get("consumerDataSet") or []:
            group = str(consumer["groupName"])
            topics = [str(s["topic"]) for s in consumer.get("subscriptionDataSet") or []]
            groups.setdefault(group, []).extend(topics)
        return groups
    data = decode_json_object(cmd.body, "LockBatchRequestBody")
    group = str(data["consumerGroup"])
    groups[group] = [str(mq["topic"]) for mq in data.get("mqSet") or []]
    return groups


def needs_of_request(cmd: RemotingCommand) -> list[Any]:
    if cmd.code in (RequestCode.HEART_BEAT, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        return needs_of_subscriptions(_subscriptions_of(cmd))
    return needs_of_fields(cmd.code, cmd.fields())


def with_users(auth: ServerAuth, users: BrokerUsers) -> ServerAuth:
    """`auth` (the group's pairs) extended by the cluster's users: a pair is checked first,
    so a user can never shadow one."""
    pair_secret, pair_authorize = auth.secret_for, auth.authorize

    def secret_for(access_key: str) -> str | None:
        secret = pair_secret(access_key)
        return secret if secret is not None else users.secret_for(access_key)

    def authorize_from(access_key: str, cmd: RemotingCommand, source_ip: str | None) -> str | None:
        if pair_secret(access_key) is not None:
            return None if pair_authorize is None else pair_authorize(access_key, cmd)
        user = users.get(access_key)
        if user is None:  # removed between the signature check and now
            return f"User:{access_key} not found."
        return users.refusal(user, cmd, source_ip)

    return replace(auth, secret_for=secret_for, authorize_from=authorize_from)
