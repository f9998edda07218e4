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
"""

from __future__ import annotations

import logging
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
    """Per group: the last usersVersion each broker address was synced to, and when."""

    synced: dict[str, tuple[int, float]] = field(default_factory=dict)


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


async def _connect(address: str) -> RemotingClient:
    return await RemotingClient.connect(address, name="operator-stock-users")


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


#: Per (namespace, group): what was synced (an operator replica's own memory; a new leader
#: replica syncs every broker once, two list requests each when in step).
_MEMORY: dict[tuple[str, str], GroupUsersMemory] = {}


def group_acl_enabled(ctx: GroupContext) -> bool:
    """engine rocketmq with spec.rocketmq.aclEnabled."""
    if ctx.engine is not Engine.ROCKETMQ:
        return False
    raw = ctx.spec.get("rocketmq") or {}
    return raw.get("aclEnabled", False) is True


async def sync_for_pass(
    ctx: GroupContext, controller: ControllerClient, addresses: Sequence[str], now_s: float
) -> None:
    """reconcile.py's call: never fails the pass (a failure is logged; the next pass retries)."""
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
    memory = _MEMORY.setdefault(key, GroupUsersMemory())
    try:
        await sync_group_users(
            controller, ctx.namespace, (pair.access_key, pair.secret_key), addresses, memory, now_s
        )
    except Exception as exc:  # the users must never stop a pass's other work
        log.warning("%s/%s: stock brokers' users not synced: %s", *key, exc)
