"""What one operator process holds: its settings, its Kubernetes client, its
secrets, a controller client per address list, and a little memory per group.

Every other module of the operator's shell takes a `Runtime` and the group's
`GroupContext`; none keeps state of its own. The memory is not state anyone
depends on: a fresh operator (or a second replica taking over) rebuilds it
from the cluster and the controller.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_operator.kube import Kube
from brokergroup_operator.model import GroupView, PodFacts
from brokergroup_operator.release_secret import OperatorSecrets, ReleaseSecretError
from brokergroup_operator.settings import OperatorSettings, SettingsError
from brokergroup_operator.spec import RESTARTED_AT_ANNOTATION, GroupContext
from brokergroup_operator.stock_users_sync import GroupUsersMemory

log = logging.getLogger("brokergroup_operator")

PostEvent = Callable[[str, str, str], None]
"""Post a Kubernetes Event on the group: (type, reason, message)."""
BrokerGroupRef = tuple[str, str]
"""(namespace, name) of a BrokerGroup object: the operator's key of what it remembers.
The controller's key of the same group's broker set is `api.BrokerSetKey`
(clusterName, brokerName)."""


@dataclass
class GroupMemory:
    """What the operator remembers about one group between passes."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    view: GroupView | None = None
    master_lost_at_ms: int | None = None
    applied: tuple[int, int, str, str] | None = None
    addresses: tuple[str, ...] = ()
    applied_at: float = 0.0
    tls_digest: str = ""
    """The group's TLS digest at its last certificate check (tls_material.py)."""
    tls_checked: tuple[float, int, str] | None = None
    """(monotonic time, generation, force-renew token) of that check."""
    tls_status: dict[str, Any] | None = None
    """The status.tls this operator last wrote: newer than a body whose watch event has
    not come yet (the operator is its only writer)."""
    stock_users: GroupUsersMemory = field(default_factory=GroupUsersMemory)
    """engine rocketmq with aclEnabled: which stock broker got which usersVersion, and the
    trust the operator's links to them verify against (stock_users_sync.py)."""


@dataclass
class Runtime:
    settings: OperatorSettings
    kube: Kube
    clients: dict[tuple[tuple[str, ...], str | None], ControllerClient] = field(
        default_factory=dict
    )
    pods: dict[tuple[str, str], PodFacts] = field(default_factory=dict)
    groups: dict[BrokerGroupRef, GroupMemory] = field(default_factory=dict)
    namespaces: tuple[str, ...] = ()
    """The namespaces this operator watches (empty: every namespace)."""
    secrets: OperatorSecrets | None = field(default=None, repr=False)
    """The admin token, broker credential root and HA secret (None until loaded)."""
    secrets_problem: str | None = None
    controller_tls_checked: float | None = None
    """When (monotonic) the controllers' certificate was last checked (tls_material.py)."""
    controller_link: ssl.SSLContext | None = field(default=None, repr=False)
    """HTTPS to the controllers' API (BROKERGROUP_CONTROLLER_API_TLS; controller_link.py):
    the cluster CA verifies them, the operator's own certificate is presented."""
    controller_link_checked: float | None = None
    """Why they could not be loaded (the groups say so: Ready=False, SecretMissing)."""

    async def ensure_secrets(self) -> str | None:
        """Load the secrets once: the release Secret (created once when the chart
        brings none, never rotated) or the files. Retried by every pass until it
        works; returns the problem, None when loaded."""
        if self.secrets is not None:
            return None
        ref = None
        try:
            ref = self.settings.release_secret_ref()
            if ref is None:
                self.secrets = self.settings.secrets_from_files()
                if self.secrets is None:
                    raise SettingsError(
                        "no BROKERGROUP_RELEASE_SECRET and no BROKERGROUP_TOKEN_FILE"
                    )
            else:
                data = await self.kube.ensure_release_secret(
                    *ref, self.settings.release_secret_managed
                )
                self.secrets = OperatorSecrets.from_release_data(data)
        except (ReleaseSecretError, SettingsError) as exc:
            where = "its secret files" if ref is None else f"the release Secret {'/'.join(ref)}"
            self.secrets_problem = f"the operator could not create or read {where}: {exc}"
            log.warning("%s", self.secrets_problem)
            return self.secrets_problem
        self.secrets_problem = None
        return None

    def context(self, body: Mapping[str, Any]) -> GroupContext:
        return context_of(body, self.settings, self.secrets)

    def controller(self, addresses: tuple[str, ...]) -> ControllerClient:
        """The client of the controllers at `addresses`; over HTTPS when the release's API
        is (controller_link.py has made the context: until then every call fails with
        ControllerUnavailable naming why, and the pass retries)."""
        token = self.secrets.admin_token if self.secrets else None
        key = (addresses, token)
        if key not in self.clients:
            if self.settings.controller_api_tls and self.controller_link is None:
                raise ControllerUnavailable(
                    "the controllers' API is HTTPS only and the operator's TLS context to "
                    "it is not made yet (the cluster CA Secret unreadable?)"
                )
            self.clients[key] = ControllerClient(
                list(addresses),
                token,
                request_timeout_s=self.settings.controller_timeout_s,
                tls=self.controller_link if self.settings.controller_api_tls else None,
            )
        return self.clients[key]

    async def set_controller_link(self, context: ssl.SSLContext) -> None:
        """Use `context` from now on: the clients made with the previous one are closed
        (the next call makes new ones)."""
        self.controller_link = context
        old = list(self.clients.values())
        self.clients.clear()
        for c in old:
            await c.close()

    def memory(self, key: BrokerGroupRef) -> GroupMemory:
        if key not in self.groups:
            self.groups[key] = GroupMemory()
        return self.groups[key]

    async def close(self) -> None:
        for c in self.clients.values():
            await c.close()
        self.clients.clear()


def now_ms() -> int:
    return int(time.time() * 1000)


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def context_of(
    body: Mapping[str, Any], settings: OperatorSettings, secrets: OperatorSecrets | None = None
) -> GroupContext:
    meta = body.get("metadata") or {}
    return GroupContext(
        name=str(meta["name"]),
        namespace=str(meta["namespace"]),
        uid=str(meta.get("uid", "")),
        spec=dict(body.get("spec") or {}),
        default_image=settings.image,
        default_rocketmq_image=settings.rocketmq_image,
        controller_addresses=settings.controller_addresses,
        secrets=secrets,
        restarted_at=str((meta.get("annotations") or {}).get(RESTARTED_AT_ANNOTATION) or ""),
        namesrv_tls=settings.controller_tls,
        controller_api_tls=settings.controller_api_tls,
    )


async def read_view(client: ControllerClient, ctx: GroupContext) -> GroupView | None:
    """The controller's view of the group; None when it knows no such group yet."""
    try:
        info = await client.replica_info(ctx.namespace, ctx.name)
    except ControllerError as exc:
        if exc.code is ErrorCode.BROKER_SET_NOT_FOUND:
            return None
        raise
    return GroupView.from_replica_info(info)
