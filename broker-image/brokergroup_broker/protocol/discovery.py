"""Where a broker group's master and readable replicas are (DESIGN.md §3.5).

Two sources: the controller (`ControllerDiscovery`, `GET /v1/replica-info`
through `brokergroup_controller.client.ControllerClient`) or fixed addresses
(`StaticDiscovery`, e.g. the Kubernetes Service selecting `role=master`,
which follows the master by itself). Clients ask again after every failure
rather than caching: the moment they ask is exactly when a cached answer is
likely stale.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Sequence
from typing import Protocol

from brokergroup_broker.protocol.auth import AuthenticationError
from brokergroup_controller.api import ReplicaInfo
from brokergroup_controller.errors import ControllerError, ErrorCode

log = logging.getLogger(__name__)


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


class MasterDiscovery(Protocol):
    async def master_address(self) -> str | None:
        """The master's client address, None when the group has none now."""
        ...

    async def read_addresses(self) -> list[str]:
        """Replicas to read from, best first: the master, then live slaves by
        brokerId (the smallest is the acting master, DESIGN.md §3.6)."""
        ...

    async def close(self) -> None: ...


class StaticDiscovery:
    """Fixed addresses: the first is taken as the master. With a Kubernetes
    Service selecting `role=master` the Service itself follows failovers."""

    def __init__(self, addresses: Sequence[str]) -> None:
        if not addresses:
            raise ValueError("StaticDiscovery needs at least one address")
        for address in addresses:
            parse_address(address)
        self._addresses = list(addresses)

    async def master_address(self) -> str | None:
        return self._addresses[0]

    async def read_addresses(self) -> list[str]:
        return list(self._addresses)

    async def close(self) -> None:
        return None


class ReplicaInfoSource(Protocol):
    """The part of `brokergroup_controller.client.ControllerClient` used here."""

    async def replica_info(self, cluster_name: str, broker_name: str) -> ReplicaInfo: ...

    async def watch(
        self,
        cluster_name: str,
        broker_name: str,
        master_epoch: int,
        sync_state_set_epoch: int,
        timeout_ms: int,
    ) -> ReplicaInfo: ...

    async def close(self) -> None: ...


#: Controller answers that a retry with the same credential cannot change.
_REFUSED = frozenset({ErrorCode.UNAUTHORIZED, ErrorCode.FORBIDDEN})

#: A syncStateSetEpoch no set reaches: the watch then wakes on masterEpoch only.
_IGNORE_SYNC_STATE_SET = 2**62


def _default_controller_client(
    addresses: Sequence[str], token: str | None, timeout_s: float, tls: ssl.SSLContext | None
) -> ReplicaInfoSource:
    # Imported at call time so `brokergroup produce --help` and users of a
    # static address never import aiohttp.
    from brokergroup_controller.client import ControllerClient

    return ControllerClient(list(addresses), token, request_timeout_s=timeout_s, tls=tls)


class ControllerDiscovery:
    """Asks the controller (`GET /v1/replica-info`) on every call.

    No caching: it is only called after a failure, when a cached answer is
    exactly what is likely stale.
    """

    def __init__(
        self,
        cluster_name: str,
        broker_name: str,
        controller_addresses: Sequence[str],
        *,
        token: str | None = None,
        timeout_ms: int = 3_000,
        client: ReplicaInfoSource | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: the controllers' API is HTTPS, reached with this context."""
        if client is None and not controller_addresses:
            raise ValueError("ControllerDiscovery needs controller addresses or a client")
        self._cluster = cluster_name
        self._broker = broker_name
        self._addresses = list(controller_addresses)
        self._token = token
        self._timeout_s = timeout_ms / 1000
        self._client = client
        self._tls = tls
        self._owns_client = client is None
        self.last_error: str | None = None

    async def _info(self) -> ReplicaInfo | None:
        if self._client is None:
            self._client = _default_controller_client(
                self._addresses, self._token, self._timeout_s, self._tls
            )
        try:
            async with asyncio.timeout(self._timeout_s):
                info = await self._client.replica_info(self._cluster, self._broker)
        except ControllerError as exc:
            if exc.code in _REFUSED:  # the same credential is refused again: say so now
                raise AuthenticationError(
                    f"controller {','.join(self._addresses) or '(client)'}",
                    f"{exc.code}: {exc.message} (the client credential of "
                    f"{self._cluster}/{self._broker}: --controller-token-file)",
                ) from exc
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.info(
                "replica-info for %s/%s failed: %s", self._cluster, self._broker, self.last_error
            )
            return None
        except Exception as exc:  # any failure means "unknown now": retry later
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.info(
                "replica-info for %s/%s failed: %s", self._cluster, self._broker, self.last_error
            )
            return None
        self.last_error = None
        return info

    async def master_address(self) -> str | None:
        info = await self._info()
        if info is None:
            return None
        return info.live_master_address

    async def next_master_change(self, known_master_epoch: int, wait_ms: int) -> ReplicaInfo | None:
        """Long-poll the controller (`GET /v1/watch`) until its masterEpoch
        passes `known_master_epoch`, or `wait_ms` passes: the ReplicaInfo then
        (same epoch on a timeout), None if the controller could not answer.
        Lets a producer leave a partitioned master as soon as the controller
        has elected another, instead of waiting out its request timeout."""
        if self._client is None:
            self._client = _default_controller_client(
                self._addresses, self._token, self._timeout_s, self._tls
            )
        try:
            async with asyncio.timeout(self._timeout_s + wait_ms / 1000):
                return await self._client.watch(
                    self._cluster, self._broker, known_master_epoch, _IGNORE_SYNC_STATE_SET, wait_ms
                )
        except Exception as exc:  # unknown now: the caller retries later
            self.last_error = f"{type(exc).__name__}: {exc}"
            return None

    async def read_addresses(self) -> list[str]:
        info = await self._info()
        if info is None:
            return []
        result: list[str] = []
        if info.live_master_address:
            result.append(info.live_master_address)
        for broker in sorted(info.brokers, key=lambda b: b.broker_id):
            if broker.alive and broker.address and broker.address not in result:
                result.append(broker.address)
        return result

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.close()


def make_discovery(
    cluster_name: str,
    broker_name: str,
    *,
    controller_addresses: str | Sequence[str] = (),
    token: str | None = None,
    static_address: str | Sequence[str] | None = None,
    discovery_timeout_ms: int = 3_000,
    controller_tls: ssl.SSLContext | None = None,
) -> MasterDiscovery:
    """Static addresses win over the controller when both are given."""
    if static_address:
        addresses = [static_address] if isinstance(static_address, str) else static_address
        return StaticDiscovery(_split(addresses))
    controllers = _split(controller_addresses)
    if not controllers:
        raise ValueError("give controller addresses or a static broker address")
    return ControllerDiscovery(
        cluster_name,
        broker_name,
        controllers,
        token=token,
        timeout_ms=discovery_timeout_ms,
        tls=controller_tls,
    )


def _split(value: str | Sequence[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else [x for v in value for x in v.split(",")]
    return [item.strip() for item in items if item.strip()]
