"""BrokerGroupUser: an application user with rights on topics and groups (pure;
docs/security.md "Users with rights", crds/brokergroup.io_brokergroupusers.yaml).

A user belongs to a cluster: every BrokerGroup of its namespace (their clusterName is the
namespace), so one key pair signs for a topic spread over several groups, as RocketMQ
scales a topic out. Its rights are RocketMQ 5.3 ACL 2.0 policy entries (`Topic:T`,
`Group:G`, prefixes, `*`; Pub, Sub, …; Allow/Deny), checked by the same parser the
controller and brokers use (brokergroup_remoting.authorization), so a spec the operator
accepts is one the controller accepts.

The SecretKey is derived, not drawn: HMAC-SHA256 over the release's broker credential root
and (namespace, clusterName, accessKey, the object's uid, its rotation annotation). The
operator cannot read Secrets in the namespaces it watches (least privilege), so a random
key could not be kept across passes or operator restarts; a derived one is the same at
every pass (an idempotent Secret and controller PUT), is new for a user deleted and
created again (the old key stops working with the deletion), and a new value of
`brokergroup.io/rotate-secret-key` rotates it.

`plan_user` turns the object into what to write: the Secret, the controller's request
body, the status; or a refusal naming the field. The kopf handlers (user_sync.py) do
the I/O.

One AccessKey, one holder. The controllers keep one user per (cluster, accessKey), so two
BrokerGroupUsers of one namespace naming the same accessKey would overwrite each other's
SecretKey and policies at every resync, and deleting either would delete the user of both.
`access_key_holder` decides who holds a key: the first of the objects that name it and are
not being deleted, by (creationTimestamp, name) — the order Kubernetes gives them and never
changes, so every pass of every operator replica picks the same one. The others are refused
(Ready=False AccessKeyInUse, an Event) and never written; deleting one of them leaves the
holder's user alone, and deleting the holder hands the key to the next in that order.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from brokergroup_remoting.authorization import (
    Action,
    Decision,
    PolicyEntry,
    PolicyError,
    check_access_key,
    parse_resource,
    parse_source_ip,
)

USER_PLURAL = "brokergroupusers"
USER_KIND = "BrokerGroupUser"
ROTATE_ANNOTATION = "brokergroup.io/rotate-secret-key"
SECRET_SUFFIX = "-rocketmq-user"
ACCESS_KEY_KEY = "accessKey"
SECRET_KEY_KEY = "secretKey"
#: `{"accessKey": …, "secretKey": …}` on one line, as the group client Secrets hold it.
CREDENTIALS_KEY = "rocketmq-credentials"
SPEC_FIELDS = ("clusterName", "accessKey", "userStatus", "secretName", "policies")
ENTRY_FIELDS = ("resources", "actions", "decision", "sourceIps")
_LABEL = b"brokergroup user key v1"


#: Ready=False reason of a BrokerGroupUser whose accessKey another one of its namespace holds.
KEY_IN_USE = "AccessKeyInUse"


class UserSpecError(ValueError):
    """The BrokerGroupUser cannot be realised as given (the text names the field)."""


@dataclass(frozen=True)
class UserPlan:
    """What one BrokerGroupUser comes to."""

    namespace: str
    name: str
    cluster_name: str
    access_key: str
    secret_key: str
    secret_name: str
    enabled: bool
    entries: tuple[PolicyEntry, ...]

    def __repr__(self) -> str:  # the SecretKey never reaches a log
        return f"UserPlan({self.namespace}/{self.name}, accessKey={self.access_key})"

    @property
    def controller_path(self) -> str:
        """The controller's users API path of this user."""
        cluster = quote(self.cluster_name, safe="")
        return f"/v1/clusters/{cluster}/users/{quote(self.access_key, safe='')}"

    def controller_body(self) -> dict[str, Any]:
        """The PUT body: the SecretKey, the policy entries (one resource each, the
        controller's canonical form) and the status."""
        return {
            "secretKey": self.secret_key,
            "policies": [e.to_json() for e in self.entries],
            "userStatus": "enable" if self.enabled else "disable",
        }


def derive_secret_key(
    root: str, namespace: str, cluster_name: str, access_key: str, uid: str, rotation: str = ""
) -> str:
    """43 URL-safe characters (256 bits) that only the holder of the root can make."""
    if not root:
        raise ValueError("the broker credential root is empty")
    message = b"\0".join(
        part.encode() for part in (namespace, cluster_name, access_key, uid, rotation)
    )
    mac = hmac.new(root.encode(), _LABEL + b"\0" + message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def parse_entries(raw: object) -> tuple[PolicyEntry, ...]:
    """spec.policies → one PolicyEntry per resource, in order (a CRD item may name several
    resources for the same actions, as `mqadmin createAcl -r a,b` does)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise UserSpecError("spec.policies must be a list")
    entries: list[PolicyEntry] = []
    for i, item in enumerate(raw):
        where = f"spec.policies[{i}]"
        if not isinstance(item, Mapping):
            raise UserSpecError(f"{where} must be an object")
        unknown = sorted(set(item) - set(ENTRY_FIELDS))
        if unknown:
            raise UserSpecError(f"{where} has unknown field(s) {unknown}")
        resources, actions = item.get("resources"), item.get("actions")
        if not isinstance(resources, list) or not resources:
            raise UserSpecError(f"{where}.resources must name at least one resource")
        if not isinstance(actions, list) or not actions:
            raise UserSpecError(f"{where}.actions must name at least one action")
        try:
            parsed_actions = frozenset(Action.parse(str(a)) for a in actions)
            decision = Decision.parse(str(item.get("decision") or "Allow"))
            ips = tuple(parse_source_ip(str(ip)) for ip in item.get("sourceIps") or ())
            for resource in resources:
                entries.append(
                    PolicyEntry(parse_resource(str(resource)), parsed_actions, decision, ips)
                )
        except PolicyError as exc:
            raise UserSpecError(f"{where}: {exc}") from None
    return tuple(entries)


def plan_user(body: Mapping[str, Any], root: str) -> UserPlan:
    """The user a BrokerGroupUser object asks for; UserSpecError says why it cannot be."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    spec = body.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise UserSpecError("spec must be an object")
    unknown = sorted(set(spec) - set(SPEC_FIELDS))
    if unknown:
        raise UserSpecError(f"spec has unknown field(s) {unknown}")
    cluster_name = str(spec.get("clusterName") or namespace)
    if cluster_name != namespace:
        raise UserSpecError(
            f"spec.clusterName {cluster_name!r}: a user's cluster is the BrokerGroups of its "
            f"own namespace ({namespace!r}); create the user there"
        )
    try:
        access_key = check_access_key(str(spec.get("accessKey") or name))
    except PolicyError as exc:
        raise UserSpecError(f"spec.accessKey (default metadata.name): {exc}") from None
    status = spec.get("userStatus", "enable")
    if status not in ("enable", "disable"):
        raise UserSpecError(f"spec.userStatus must be enable or disable, got {status!r}")
    rotation = str((meta.get("annotations") or {}).get(ROTATE_ANNOTATION) or "")
    return UserPlan(
        namespace=namespace,
        name=name,
        cluster_name=cluster_name,
        access_key=access_key,
        secret_key=derive_secret_key(
            root, namespace, cluster_name, access_key, str(meta.get("uid") or ""), rotation
        ),
        secret_name=str(spec.get("secretName") or f"{name}{SECRET_SUFFIX}"),
        enabled=status == "enable",
        entries=parse_entries(spec.get("policies")),
    )


def user_secret(plan: UserPlan, uid: str) -> dict[str, Any]:
    """The Secret applications mount: the pair, and nothing that names a broker. Owned by
    the BrokerGroupUser, so it goes when the user goes."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": plan.secret_name,
            "namespace": plan.namespace,
            "labels": {
                "app.kubernetes.io/name": "brokergroup",
                "app.kubernetes.io/managed-by": "brokergroup-operator",
                "brokergroup.io/user": plan.name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "brokergroup.io/v1alpha1",
                    "kind": USER_KIND,
                    "name": plan.name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "type": "Opaque",
        "stringData": {
            ACCESS_KEY_KEY: plan.access_key,
            SECRET_KEY_KEY: plan.secret_key,
            CREDENTIALS_KEY: json.dumps(
                {"accessKey": plan.access_key, "secretKey": plan.secret_key},
                separators=(",", ":"),
            ),
        },
    }


def ready_condition(
    ok: bool, reason: str, message: str, generation: int, previous: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """metav1.Condition `Ready`; lastTransitionTime kept while the status does not change."""
    status = "True" if ok else "False"
    before = next((c for c in previous.get("conditions") or () if c.get("type") == "Ready"), None)
    since = (
        before.get("lastTransitionTime")
        if before is not None
        and before.get("status") == status
        and before.get("lastTransitionTime")
        else now
    )
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


@dataclass(frozen=True)
class KeyClaim:
    """One BrokerGroupUser naming an accessKey: the order it holds it in, and who."""

    access_key: str
    created: str
    """metadata.creationTimestamp as the API server wrote it (RFC 3339, seconds)."""
    name: str

    def order(self) -> tuple[datetime, str]:
        try:
            created = datetime.fromisoformat(self.created)
        except ValueError:  # never from an API server; sorts last rather than first
            return (datetime.max, self.name)
        if created.tzinfo is not None:
            created = created.astimezone(UTC).replace(tzinfo=None)
        return (created, self.name)


def key_claim(body: Mapping[str, Any], *, even_if_deleted: bool = False) -> KeyClaim | None:
    """The accessKey a BrokerGroupUser claims; None when it claims none: being deleted
    (deletionTimestamp set: its finalizer is releasing the key; `even_if_deleted` asks what
    it claimed before), or an accessKey or clusterName the operator refuses anyway. The rest
    of the spec does not matter: an object whose policies are wrong still holds its key
    (fixing them must not take the key from a later object that meanwhile registered it)."""
    meta = body.get("metadata") or {}
    if meta.get("deletionTimestamp") and not even_if_deleted:
        return None
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    spec = body.get("spec") or {}
    if not isinstance(spec, Mapping) or str(spec.get("clusterName") or namespace) != namespace:
        return None
    try:
        access_key = check_access_key(str(spec.get("accessKey") or name))
    except PolicyError:
        return None
    return KeyClaim(access_key, str(meta.get("creationTimestamp") or ""), name)


def access_key_holder(
    access_key: str, users: Iterable[Mapping[str, Any]], *, leaving: str = ""
) -> KeyClaim | None:
    """Which of a namespace's BrokerGroupUsers holds `access_key`: the first by
    (creationTimestamp, name) of those claiming it (`key_claim`), `leaving` (a name being
    deleted) left out; None when none does (pure)."""
    claims = [
        c
        for c in (key_claim(u) for u in users)
        if c is not None and c.access_key == access_key and c.name != leaving
    ]
    return min(claims, key=KeyClaim.order, default=None)


def key_in_use_message(access_key: str, holder: KeyClaim) -> str:
    """Ready=False AccessKeyInUse's message: who holds the key, since when, what to do."""
    return (
        f"accessKey {access_key} is held by BrokerGroupUser {holder.name} (created "
        f"{holder.created or 'earlier'}): the users of one cluster cannot share an AccessKey, so "
        f"this one is not registered and has no Secret; create it again with another "
        f"spec.accessKey, or delete {holder.name} and this one takes the key over"
    )
