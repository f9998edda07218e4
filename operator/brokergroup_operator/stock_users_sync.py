"""`spec.engine: rocketmq` with `spec.rocketmq.aclEnabled`: the stock brokers' ACL 2.0 users
follow the controllers' (the namespace's BrokerGroupUsers, user_sync.py).

A stock broker keeps its users in its own RocksDB and changes them only through its admin codes
(brokergroup_remoting.stock_users). Each pass of a group (reconcile.py) calls
`sync_group_users` after reading the controller's view: it reads the cluster's users-snapshot
(the admin credential may; the one answer that carries SecretKeys) and, for every live broker
of the view, syncs it when `due` says so — a newer usersVersion than its last sync, a broker
not synced at that address yet (a new or rescheduled pod), or a last sync older than
`RESYNC_S` (a container restarted on the same IP keeps its RocksDB, and a user deleted while
it was down must go). The requests are signed with the group's broker pair, derived from the
release's broker credential root as the group Secret's copy is (a Super user of each broker:
its innerClientAuthenticationCredentials); a group on a Secret of the user's own has no pair
the operator can derive, and is skipped with a warning.

Passes run on every wake of the group and at least every resync period, so a new user reaches
the stock brokers within one pass (not the built-in brokers' one second).

What a pass remembers (which broker got which usersVersion, the trust bundle, the TLS context
made from it) lives in the group's runtime memory (`GroupUsersMemory`, runtime.GroupMemory),
never in this module: it goes when the group is deleted, and no group sees another's trust.

With spec.tls (mode permissive or enforcing) the brokers are dialled over TLS (`link_tls`):
under enforcing a plaintext dial is closed unanswered, and the requests carry the users'
SecretKeys, so permissive is dialled over TLS too. The server is verified against the
group's trust bundle when the operator holds it (issuer operator: the cluster CA bundle,
which tls_material.py hands over at each certificate check, `remember_trust`), chain only,
no host name: the view gives pod IPs and the leaf names the Services and the pods' stable
names, and RocketMQ's own clients (tls.client.authServer) check the chain alone too. With
issuer secret or cert-manager the operator cannot read the CA (no `get` on Secrets): the
link is encrypted but the server not verified (RocketMQ's client default), and the address
comes from the controllers' view of registered brokers.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brokergroup_controller.client import ControllerClient
from brokergroup_controller.credentials import Role, derive_rocketmq_pair
from brokergroup_operator.model import Engine
from brokergroup_operator.spec import GroupContext
from brokergroup_remoting.net import RemotingClient
from brokergroup_remoting.stock_users import (
    StockUser,
    StockUsersError,
    SyncResult,
    from_snapshot,
    sync_broker,
)

log = logging.getLogger(__name__)

#: A broker synced longer ago than this is synced again (two list requests when in step).
RESYNC_S = 60.0


@dataclass
class GroupUsersMemory:
    """Per group, in the group's runtime memory (runtime.GroupMemory.stock_users, dropped
    with it when the group is deleted): the last usersVersion each broker address was synced
    to and when, and the trust its links verify against."""

    synced: dict[str, tuple[int, float]] = field(default_factory=dict)
    trust_pem: str = ""
    """The PEM bundle of the CAs the group's pods trust (issuer operator; set by
    tls_material.py at each certificate check, `remember_trust`); "" when not held."""
    context: ssl.SSLContext | None = field(default=None, repr=False)
    """The TLS context made for `context_trust` (`link_tls`): made again when it changes."""
    context_trust: str = ""


def due(
    addresses: Iterable[str],
    version: int,
    memory: GroupUsersMemory,
    now_s: float,
    resync_s: float = RESYNC_S,
) -> list[str]:
    """The addresses to sync now, sorted (pure). Addresses no longer live are forgotten."""
    live = set(addresses)
    for gone in set(memory.synced) - live:
        del memory.synced[gone]
    out = []
    for address in sorted(live):
        last = memory.synced.get(address)
        if last is None or last[0] != version or now_s - last[1] >= resync_s:
            out.append(address)
    return out


Connect = Callable[[str], Awaitable[RemotingClient]]


async def _connect(address: str, tls: ssl.SSLContext | None = None) -> RemotingClient:
    return await RemotingClient.connect(address, name="operator-stock-users", tls=tls)


def remember_trust(memory: GroupUsersMemory, bundle_pem: str) -> None:
    """The group's trust bundle (tls_material.py: issuer operator; "" for an issuer whose CA
    the operator cannot read), for `link_tls`."""
    memory.trust_pem = bundle_pem


def client_context(trust_pem: str) -> ssl.SSLContext:
    """TLS 1.2+; verifies the server's chain against `trust_pem` ("" verifies nothing, as a
    RocketMQ client without tls.client.authServer), never its host name. No system CAs."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    if trust_pem:
        context.load_verify_locations(cadata=trust_pem)
        context.verify_mode = ssl.CERT_REQUIRED
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def link_tls(ctx: GroupContext, memory: GroupUsersMemory) -> ssl.SSLContext | None:
    """How the operator dials the group's stock brokers: None (plaintext) without spec.tls or
    with mode disabled, else a TLS context verifying against the group's trust bundle when
    the operator holds it (`remember_trust`), unverified otherwise. The context is the
    group's own (kept in its memory while its trust is unchanged): no other group's trust
    reaches it."""
    if ctx.tls is None or not ctx.tls.enabled:
        return None
    if memory.context is None or memory.context_trust != memory.trust_pem:
        memory.context = client_context(memory.trust_pem)
        memory.context_trust = memory.trust_pem
    return memory.context


async def sync_group_users(
    controller: ControllerClient,
    cluster: str,
    broker_pair: tuple[str, str],
    addresses: Sequence[str],
    memory: GroupUsersMemory,
    now_s: float,
    connect: Connect = _connect,
) -> dict[str, SyncResult | str]:
    """Sync the brokers that are due; per address what was done, or why it was not."""
    snapshot: Mapping[str, Any] = await controller.users_snapshot(cluster, -1)
    version = int(snapshot["usersVersion"])
    desired: list[StockUser] = from_snapshot(snapshot.get("users") or ())
    results: dict[str, SyncResult | str] = {}
    for address in due(addresses, version, memory, now_s):
        try:
            client = await connect(address)
        except (OSError, TimeoutError) as exc:
            results[address] = f"not reachable: {exc}"
            continue
        try:
            result = await sync_broker(client.invoke, *broker_pair, desired)
        except (StockUsersError, OSError, TimeoutError, ValueError) as exc:
            results[address] = f"not synced: {exc}"
            log.warning("users of stock broker %s not synced yet: %s", address, exc)
            continue
        finally:
            await client.close()
        memory.synced[address] = (version, now_s)
        results[address] = result
        if result.applied:
            log.info(
                "stock broker %s now has usersVersion %d: %s",
                address,
                version,
                ", ".join(result.applied),
            )
    return results


def group_acl_enabled(ctx: GroupContext) -> bool:
    """engine rocketmq with spec.rocketmq.aclEnabled."""
    if ctx.engine is not Engine.ROCKETMQ:
        return False
    raw = ctx.spec.get("rocketmq") or {}
    return raw.get("aclEnabled", False) is True


async def sync_for_pass(
    ctx: GroupContext,
    controller: ControllerClient,
    addresses: Sequence[str],
    now_s: float,
    memory: GroupUsersMemory,
) -> None:
    """reconcile.py's call, with the group's memory (runtime.GroupMemory.stock_users: an
    operator replica's own; a new leader replica syncs every broker once, two list requests
    each when in step). Never fails the pass (a failure is logged; the next pass retries)."""
    if not group_acl_enabled(ctx):
        return
    key = (ctx.namespace, ctx.name)
    if ctx.own_secret is not None or ctx.secrets is None or not ctx.secrets.broker_credential_root:
        log.warning(
            "%s/%s: spec.rocketmq.aclEnabled but the group's broker pair is not the operator's "
            "to derive (a Secret of the user's own): its stock brokers get no users",
            *key,
        )
        return
    pair = derive_rocketmq_pair(ctx.secrets.broker_credential_root, Role.BROKER, *key)
    connect = functools.partial(_connect, tls=link_tls(ctx, memory))
    try:
        await sync_group_users(
            controller,
            ctx.namespace,
            (pair.access_key, pair.secret_key),
            addresses,
            memory,
            now_s,
            connect=connect,
        )
    except Exception as exc:  # the users must never stop a pass's other work
        log.warning("%s/%s: stock brokers' users not synced: %s", *key, exc)
