"""Typed async client of the controller HTTP API (docs/architecture.md).

Brokers and the operator use it. Any node answers (followers forward), but
the client remembers the leader each answer names (`X-Brokergroup-Leader`)
and goes there first to save a hop.

Request ids (docs/controller.md "Request ids"): every mutating call carries
a fresh `requestId`, the same across all its attempts. The controller
remembers the first answer to each id in its replicated state, so a retry
of a request that committed while its answer was lost (an attempt timed
out, the leader changed) gets that first answer — a committed
AlterSyncStateSet or ElectMaster is never turned into
FENCED_SYNC_STATE_SET_EPOCH or MASTER_STILL_EXIST by its own retry.

This is the one place that re-sends a controller request: callers (the
broker's controller link, the operator, the admin CLI, the local runtime's
supervisor) call once and act on the answer or on `ControllerUnavailable`.

Failure handling, by what the caller does next:
- `errors.ControllerError(code, message, **details)`: the controller
  answered and refused (4xx/409). Never retried here.
- `ControllerUnavailable`: no node gave an answer within `request_timeout_s`.
  Until then connection errors, attempt timeouts, 503 NOT_LEADER during an
  election and 503 COMMIT_TIMEOUT are retried across the addresses with a
  short backoff — for reads, for the idempotent liveness reports
  (heartbeat, inactive) and for requests carrying a requestId. A POST with
  none that may have reached a node is not re-sent: its outcome is unknown.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

from aiohttp import ClientConnectorError, ClientError, ClientSession, ClientTimeout, TCPConnector

from brokergroup_controller import api
from brokergroup_controller.backoff import BackoffPolicy
from brokergroup_controller.errors import ControllerError, ErrorCode
from brokergroup_remoting.tls import client_context

# Between rounds over every address: 20, 40, 80, 100, 100 ms ... within the budget.
_RETRY_BACKOFF = BackoffPolicy(initial_ms=20, max_ms=100)

LEADER_HEADER = "X-Brokergroup-Leader"


class ControllerUnavailable(Exception):
    """No controller node answered in time; retry later (the cluster may be electing)."""

    def __init__(self, message: str, attempts: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.attempts = list(attempts)


def tls_context(
    ca_file: str | None, cert_file: str | None = None, key_file: str | None = None
) -> ssl.SSLContext | None:
    """The context of an HTTPS controller API's clients: None without a CA (plain HTTP);
    with `cert_file`/`key_file`, this process's certificate for mutual TLS (a broker, a
    controller forwarding to its leader). Raises ValueError naming an unreadable file."""
    if ca_file is None:
        return None
    try:
        return client_context(
            Path(ca_file),
            cert_file=None if cert_file is None else Path(cert_file),
            key_file=None if key_file is None else Path(key_file),
        )
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the TLS files {ca_file}, {cert_file}: {exc}") from exc


def _normalize(address: str) -> str:
    for prefix in ("http://", "https://"):
        if address.startswith(prefix):
            address = address[len(prefix) :]
    return address.rstrip("/")


class ControllerClient:
    """Async client; use as `async with ControllerClient([...], token) as client:`."""

    def __init__(
        self,
        addresses: Sequence[str],
        token: str | None = None,
        *,
        request_timeout_s: float = 3.0,
        max_connections: int = 1000,
        source_host: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`source_host`: connect from this local address (a broker's own
        address), so the controller and the network see one host per broker.
        `tls`: the API is HTTPS, reached with this context (`tls_context`: the controllers
        verified against a CA, this process's certificate presented when it holds one)."""
        self._source_host = source_host
        self._tls = tls
        self._scheme = "http" if tls is None else "https"
        self._addresses = [_normalize(a) for a in api.split_addresses(addresses)]
        if not self._addresses:
            raise ValueError("ControllerClient needs at least one controller address")
        if request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be positive")
        self._token = token
        self._timeout_s = request_timeout_s
        self._leader: str | None = None
        self._session: ClientSession | None = None
        # aiohttp's default pool of 100 left queued requests waiting past their
        # timeout under heavy concurrency (bench): keep the pool above the callers.
        self._max_connections = max_connections

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def leader_address(self) -> str | None:
        """The leader's API address as last reported by a node (a hint)."""
        return self._leader

    # -------------------------------------------------------------- transport

    def _candidates(self) -> list[str]:
        order = [self._leader] if self._leader else []
        return order + [a for a in self._addresses if a != self._leader]

    def _get_session(self) -> ClientSession:
        if self._session is None or self._session.closed:
            local_addr = None if self._source_host is None else (self._source_host, 0)
            self._session = ClientSession(
                connector=TCPConnector(
                    limit=self._max_connections,
                    local_addr=local_addr,
                    ssl=True if self._tls is None else self._tls,
                )
            )
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: dict[str, Any] | None = None,
        extra_timeout_s: float = 0.0,
        only: str | None = None,
        idempotent: bool = False,
    ) -> dict[str, Any]:
        """One API call under the client's retry policy (the module doc; `may_resend`).
        The typed methods below all come here; so may a caller with an endpoint
        they do not cover. `idempotent`: re-sending it can do no harm (the
        liveness reports); `only`: this node, no other."""
        session = self._get_session()
        retry_safe = may_resend(method, body, idempotent=idempotent)
        headers = {}
        if self._token is not None:  # reads need a credential too (DESIGN.md §11)
            headers["Authorization"] = f"Bearer {self._token}"
        query = None if params is None else {k: str(v) for k, v in params.items()}
        budget_s = self._timeout_s + extra_timeout_s
        deadline = time.monotonic() + budget_s
        attempts: list[str] = []
        backoff_ms = _RETRY_BACKOFF.initial_ms
        while True:
            candidates = [_normalize(only)] if only else self._candidates()
            for address in candidates:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                # One hung node must not eat the whole budget when others may answer.
                share = remaining if len(candidates) == 1 else max(remaining / 2, 0.5)
                attempt_s = min(remaining, share + extra_timeout_s)
                try:
                    async with session.request(
                        method,
                        f"{self._scheme}://{address}{path}",
                        params=query,
                        json=body,
                        headers=headers,
                        timeout=ClientTimeout(total=attempt_s, sock_connect=min(attempt_s, 1.0)),
                        allow_redirects=True,
                    ) as response:
                        leader = response.headers.get(LEADER_HEADER)
                        try:
                            payload = await response.json(content_type=None)
                        except ValueError:
                            payload = None
                        status = response.status
                except (ClientError, TimeoutError, OSError) as exc:
                    attempts.append(f"{address}: {type(exc).__name__} {exc}".strip())
                    if self._leader == address:
                        self._leader = None
                    if not retry_safe and not isinstance(exc, ClientConnectorError):
                        raise ControllerUnavailable(
                            f"{method} {path} got no answer and carries no requestId: "
                            "its outcome is unknown, read the state before sending it again",
                            attempts,
                        ) from exc
                    continue
                if not isinstance(payload, dict):
                    attempts.append(f"{address}: HTTP {status} without a JSON body")
                    continue
                if leader and not only:
                    self._leader = _normalize(leader)
                if status == 200:
                    return payload
                code = _code(payload.get("code"))
                if status == 503 and code is ErrorCode.COMMIT_TIMEOUT and retry_safe:
                    attempts.append(f"{address}: COMMIT_TIMEOUT")
                    continue  # the same id again: its first answer, or a first commit
                if status == 503 and code is ErrorCode.NOT_LEADER and retry_safe:
                    hinted = payload.get("leader")
                    attempts.append(f"{address}: NOT_LEADER (leader {hinted})")
                    self._leader = _normalize(hinted) if isinstance(hinted, str) else None
                    continue
                details = {k: v for k, v in payload.items() if k not in ("code", "message")}
                raise ControllerError(
                    code, str(payload.get("message", f"HTTP {status}")), **details
                )
            backoff_s = backoff_ms / 1000
            if time.monotonic() + backoff_s >= deadline:
                raise ControllerUnavailable(
                    f"no controller answered {method} {path} within {budget_s:.1f}s "
                    f"(tried {', '.join(candidates)})",
                    attempts,
                )
            await asyncio.sleep(backoff_s)
            backoff_ms = _RETRY_BACKOFF.next_ms(backoff_ms)

    # -------------------------------------------------------------- identity

    async def get_next_broker_id(self, cluster_name: str, broker_name: str) -> int:
        body = await self.request(
            "GET", "/v1/next-broker-id", params=_key(cluster_name, broker_name)
        )
        return int(body["nextBrokerId"])

    async def apply_broker_id(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        register_code: str,
        address: str,
    ) -> int:
        """The applied BrokerId; ControllerError BROKER_ID_INVALID carries `nextBrokerId`."""
        body = await self.request(
            "POST",
            "/v1/brokers/apply-id",
            body={
                **_key(cluster_name, broker_name),
                "brokerId": broker_id,
                "registerCode": register_code,
                "address": address,
                "requestId": new_request_id(),
            },
        )
        return int(body["brokerId"])

    async def register_broker(
        self, cluster_name: str, broker_name: str, broker_id: int, address: str
    ) -> api.ReplicaInfo:
        body = await self.request(
            "POST",
            "/v1/brokers/register",
            body={
                **_key(cluster_name, broker_name),
                "brokerId": broker_id,
                "address": address,
                "requestId": new_request_id(),
            },
        )
        return api.ReplicaInfo.from_json(body)

    # -------------------------------------------------------------- liveness

    async def heartbeat(self, hb: api.BrokerHeartbeat) -> api.ReplicaInfo:
        body = await self.request(
            "POST", "/v1/brokers/heartbeat", body=hb.to_json(), idempotent=True
        )
        return api.ReplicaInfo.from_json(body)

    async def report_inactive(
        self,
        cluster_name: str,
        broker_name: str,
        broker_id: int,
        reason: str,
        *,
        process_gone: bool = False,
        incarnation: str = "",
        symptom_only: bool = False,
    ) -> api.ReplicaInfo:
        """`process_gone`: say so only when the process certainly ended (an
        exit status, a terminated container): a new master then need not wait
        out the old one's lease (DESIGN.md §3.3 "Fencing"). `incarnation`:
        the broker start the report is about (a pod uid); the controller
        ignores it once it hears another. `symptom_only`: not ready, not
        ended: it counts only once the broker's heartbeats stop too."""
        body = await self.request(
            "POST",
            "/v1/brokers/inactive",
            body={
                **_key(cluster_name, broker_name),
                "brokerId": broker_id,
                "reason": reason,
                "processGone": process_gone,
                "incarnation": incarnation,
                "symptomOnly": symptom_only,
            },
            idempotent=True,
        )
        return api.ReplicaInfo.from_json(body)

    # -------------------------------------------------------------- SyncStateSet / election

    async def alter_sync_state_set(
        self,
        cluster_name: str,
        broker_name: str,
        master_broker_id: int,
        master_epoch: int,
        sync_state_set: Iterable[int],
        sync_state_set_epoch: int,
    ) -> tuple[frozenset[int], int]:
        body = await self.request(
            "POST",
            "/v1/sync-state-set/alter",
            body={
                **_key(cluster_name, broker_name),
                "masterBrokerId": master_broker_id,
                "masterEpoch": master_epoch,
                "syncStateSet": sorted(set(sync_state_set)),
                "syncStateSetEpoch": sync_state_set_epoch,
                "requestId": new_request_id(),
            },
        )
        return frozenset(int(x) for x in body["syncStateSet"]), int(body["syncStateSetEpoch"])

    async def elect_master(
        self,
        cluster_name: str,
        broker_name: str,
        *,
        requester_broker_id: int | None = None,
        designated_broker_id: int | None = None,
    ) -> api.ReplicaInfo:
        payload: dict[str, Any] = {**_key(cluster_name, broker_name), "requestId": new_request_id()}
        if requester_broker_id is not None:
            payload["brokerId"] = requester_broker_id
        if designated_broker_id is not None:
            payload["designatedBrokerId"] = designated_broker_id
            payload["trigger"] = "admin"
        else:
            payload["trigger"] = "broker"
        body = await self.request("POST", "/v1/elect-master", body=payload)
        return api.ReplicaInfo.from_json(body)

    async def switchover(
        self,
        cluster_name: str,
        broker_name: str,
        *,
        eligible_broker_ids: Iterable[int] | None = None,
    ) -> api.ReplicaInfo:
        """Admin ElectMaster with `switchover`: the controller moves the live master to the
        best other in-sync replica, ranked as its elections rank (electionPriority
        honoured), within `eligible_broker_ids` if given (e.g. those whose pods are ready).
        Refused ELECT_TARGET_NOT_ELIGIBLE when none can take over, MASTER_NOT_AVAILABLE
        when there is no live master."""
        payload: dict[str, Any] = {
            **_key(cluster_name, broker_name),
            "switchover": True,
            "trigger": "admin",
            "requestId": new_request_id(),
        }
        if eligible_broker_ids is not None:
            payload["eligibleBrokerIds"] = sorted(set(eligible_broker_ids))
        body = await self.request("POST", "/v1/elect-master", body=payload)
        return api.ReplicaInfo.from_json(body)

    async def clean_broker_data(
        self,
        cluster_name: str,
        broker_name: str,
        broker_ids: Iterable[int] | None = None,
        force: bool = False,
    ) -> list[int]:
        payload: dict[str, Any] = {
            **_key(cluster_name, broker_name),
            "force": force,
            "requestId": new_request_id(),
        }
        if broker_ids is not None:
            payload["brokerIds"] = sorted(set(broker_ids))
        body = await self.request("POST", "/v1/brokers/clean", body=payload)
        return [int(x) for x in body["removed"]]

    # -------------------------------------------------------------- reads

    async def replica_info(self, cluster_name: str, broker_name: str) -> api.ReplicaInfo:
        body = await self.request("GET", "/v1/replica-info", params=_key(cluster_name, broker_name))
        return api.ReplicaInfo.from_json(body)

    async def groups(self) -> list[api.ReplicaInfo]:
        body = await self.request("GET", "/v1/groups")
        return [api.ReplicaInfo.from_json(g) for g in body["groups"]]

    async def watch(
        self,
        cluster_name: str,
        broker_name: str,
        master_epoch: int,
        sync_state_set_epoch: int,
        timeout_ms: int,
    ) -> api.ReplicaInfo:
        """Long-poll: returns once either epoch is above the given one, else at timeout."""
        body = await self.request(
            "GET",
            "/v1/watch",
            params={
                **_key(cluster_name, broker_name),
                "masterEpoch": master_epoch,
                "syncStateSetEpoch": sync_state_set_epoch,
                "timeoutMs": timeout_ms,
            },
            extra_timeout_s=max(0, timeout_ms) / 1000,
        )
        return api.ReplicaInfo.from_json(body)

    # -------------------------------------------------------------- users

    @staticmethod
    def _user_path(cluster_name: str, access_key: str = "") -> str:
        path = f"/v1/clusters/{quote(cluster_name, safe='')}/users"
        return f"{path}/{quote(access_key, safe='')}" if access_key else path

    async def put_user(
        self,
        cluster_name: str,
        access_key: str,
        *,
        secret_key: str | None,
        policies: list[dict[str, Any]],
        enabled: bool = True,
    ) -> dict[str, Any]:
        """Create or replace a user (docs/security.md "Users with rights"); `secret_key`
        None keeps the stored one. The answer's `user`, `created`, `usersVersion`.
        Idempotent: the same PUT again leaves the same user."""
        body: dict[str, Any] = {
            "policies": policies,
            "userStatus": "enable" if enabled else "disable",
        }
        if secret_key is not None:
            body["secretKey"] = secret_key
        return await self.request(
            "PUT", self._user_path(cluster_name, access_key), body=body, idempotent=True
        )

    async def get_user(self, cluster_name: str, access_key: str) -> dict[str, Any]:
        body = await self.request("GET", self._user_path(cluster_name, access_key))
        return dict(body["user"])

    async def delete_user(self, cluster_name: str, access_key: str) -> bool:
        """True if the user existed (deleting an absent user is not an error)."""
        body = await self.request(
            "DELETE", self._user_path(cluster_name, access_key), idempotent=True
        )
        return bool(body["deleted"])

    async def list_users(self, cluster_name: str) -> dict[str, Any]:
        """`usersVersion` and `users` (no SecretKeys)."""
        return await self.request("GET", self._user_path(cluster_name))

    async def users_snapshot(self, cluster_name: str, since_version: int = -1) -> dict[str, Any]:
        """A broker's read of its cluster's users with their SecretKeys (`changed` False and
        no users when `usersVersion` is not above `since_version`)."""
        return await self.request(
            "GET",
            f"/v1/clusters/{quote(cluster_name, safe='')}/users-snapshot",
            params={"sinceVersion": since_version},
        )

    async def raft_status(self, address: str | None = None) -> dict[str, Any]:
        """`GET /v1/raft` of one node (`address`), or of whichever node answers."""
        return await self.request("GET", "/v1/raft", only=address)


def may_resend(method: str, body: dict[str, Any] | None, *, idempotent: bool = False) -> bool:
    """Whether a request whose answer was lost may be sent again: reads, idempotent
    reports, and requests carrying a requestId (the controller answers an id once).
    Any other POST is sent again only if it certainly never left (connect failed)."""
    return method == "GET" or idempotent or (body is not None and "requestId" in body)


def new_request_id() -> str:
    """A mutating request's id, kept across its retries (unique per request)."""
    return uuid.uuid4().hex


def _key(cluster_name: str, broker_name: str) -> dict[str, Any]:
    return {"clusterName": cluster_name, "brokerName": broker_name}


def _code(raw: object) -> ErrorCode:
    try:
        return ErrorCode(str(raw))
    except ValueError:
        return ErrorCode.INTERNAL_ERROR
