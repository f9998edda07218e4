"""The broker's view of the controller: one broker set, typed calls, two error kinds.

A small adapter over `brokergroup_controller.client.ControllerClient` so the
core depends on exactly the calls it makes (and tests can stub them):

- `ControllerUnavailable`: no answer (no leader, timeout, connection
  refused, or COMMIT_TIMEOUT — outcome unknown). Retry after a backoff; a
  master's lease is not renewed.
- `ControllerRefused(code, message)`: the controller answered and said no
  (an `ErrorCode` name). What to do depends on the code.

Client exceptions are converted here, once, with the original chained.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from brokergroup_controller.api import BrokerHeartbeat, ReplicaInfo
from brokergroup_controller.client import ControllerClient
from brokergroup_controller.client import ControllerUnavailable as ClientUnavailable
from brokergroup_controller.errors import ControllerError, ErrorCode

T = TypeVar("T")

# Answers that say "nobody could decide", not "the rule said no".
_UNAVAILABLE_CODES = frozenset(
    {ErrorCode.NOT_LEADER, ErrorCode.COMMIT_TIMEOUT, ErrorCode.INTERNAL_ERROR}
)


class ControllerUnavailable(Exception):
    pass


class ControllerRefused(Exception):
    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.details = details or {}


async def _converted(call: Awaitable[T]) -> T:
    try:
        return await call
    except ControllerError as exc:
        if exc.code in _UNAVAILABLE_CODES:
            raise ControllerUnavailable(str(exc)) from exc
        raise ControllerRefused(exc.code.value, exc.message, dict(exc.details)) from exc
    except (ClientUnavailable, OSError, TimeoutError) as exc:
        raise ControllerUnavailable(f"{type(exc).__name__}: {exc}") from exc


class ControllerLink:
    """Calls about one broker set (clusterName, brokerName)."""

    def __init__(self, client: ControllerClient, cluster_name: str, broker_name: str) -> None:
        self._client = client
        self.cluster_name = cluster_name
        self.broker_name = broker_name

    async def close(self) -> None:
        await self._client.close()

    async def get_next_broker_id(self) -> int:
        return await _converted(
            self._client.get_next_broker_id(self.cluster_name, self.broker_name)
        )

    async def apply_broker_id(self, broker_id: int, register_code: str, address: str) -> int:
        return await _converted(
            self._client.apply_broker_id(
                self.cluster_name, self.broker_name, broker_id, register_code, address
            )
        )

    async def register_broker(self, broker_id: int, address: str) -> ReplicaInfo:
        return await _converted(
            self._client.register_broker(self.cluster_name, self.broker_name, broker_id, address)
        )

    async def heartbeat(self, heartbeat: BrokerHeartbeat) -> ReplicaInfo:
        return await _converted(self._client.heartbeat(heartbeat))

    async def users_snapshot(self, cluster_name: str, since_version: int = -1) -> dict[str, Any]:
        """The cluster's users with their SecretKeys when newer than `since_version`
        (core/users.py; docs/security.md "Users with rights")."""
        return await _converted(self._client.users_snapshot(cluster_name, since_version))

    async def elect_master(
        self, requester_broker_id: int, *, designate: bool = False
    ) -> ReplicaInfo:
        """Ask for an election; `designate` names the requester itself (a new masterEpoch
        even while it is the live master: used after a restart at an unchanged epoch)."""
        return await _converted(
            self._client.elect_master(
                self.cluster_name,
                self.broker_name,
                requester_broker_id=requester_broker_id,
                designated_broker_id=requester_broker_id if designate else None,
            )
        )

    async def alter_sync_state_set(
        self,
        master_broker_id: int,
        master_epoch: int,
        sync_state_set: Iterable[int],
        sync_state_set_epoch: int,
    ) -> tuple[frozenset[int], int]:
        return await _converted(
            self._client.alter_sync_state_set(
                self.cluster_name,
                self.broker_name,
                master_broker_id,
                master_epoch,
                sync_state_set,
                sync_state_set_epoch,
            )
        )

    async def watch(
        self, master_epoch: int, sync_state_set_epoch: int, timeout_ms: int
    ) -> ReplicaInfo:
        return await _converted(
            self._client.watch(
                self.cluster_name, self.broker_name, master_epoch, sync_state_set_epoch, timeout_ms
            )
        )

    async def report_inactive(
        self, broker_id: int, reason: str, *, process_gone: bool = False, incarnation: str = ""
    ) -> ReplicaInfo:
        return await _converted(
            self._client.report_inactive(
                self.cluster_name,
                self.broker_name,
                broker_id,
                reason,
                process_gone=process_gone,
                incarnation=incarnation,
            )
        )
