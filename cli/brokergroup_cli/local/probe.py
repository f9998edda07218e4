"""HTTP I/O of the local runtime's status view: read the controllers and
brokers (reports of a dead broker go through the controller client,
supervisor.py). Plain aiohttp against the documented API (docs/architecture.md),
every request bounded by `httpTimeoutMs`; a failed source becomes a
"problem" line in the snapshot, never an exception.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from brokergroup_cli.local.config import LocalConfig
from brokergroup_cli.local.state import ChildRecord, RuntimeState
from brokergroup_cli.local.status import StatusSnapshot, build_snapshot


class Prober:
    def __init__(
        self,
        config: LocalConfig,
        session: aiohttp.ClientSession,
        admin_token: str | None,
        *,
        broker_token: str | None = None,
        controller_tls: ssl.SSLContext | None = None,
        broker_tls: ssl.SSLContext | None = None,
    ) -> None:
        """`admin_token`: the runtime's admin credential (controller reads need one);
        `broker_token`: the group's broker credential, which a broker's HTTP port asks of
        every path but its probes (brokergroup_broker.core.http_status);
        `controller_tls`: the controllers' API is HTTPS, verified with this context
        (local.tls; certs.controller_tls); `broker_tls`: the brokers' HTTP ports are HTTPS
        (local.tlsHttp; certs.broker_http_tls)."""
        self._config = config
        self._controller_tls = controller_tls
        self._scheme = "http" if controller_tls is None else "https"
        self._broker_tls = broker_tls
        self._broker_scheme = "http" if broker_tls is None else "https"
        self._session = session
        self._headers = {} if admin_token is None else {"Authorization": f"Bearer {admin_token}"}
        self._broker_headers = (
            {} if broker_token is None else {"Authorization": f"Bearer {broker_token}"}
        )
        self._timeout = aiohttp.ClientTimeout(total=config.http_timeout_ms / 1000)

    async def _get(
        self,
        url: str,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> tuple[int, dict[str, Any] | None]:
        async with self._session.get(
            url,
            params=params,
            headers=self._headers if headers is None else headers,
            timeout=self._timeout,
            ssl=True if tls is None else tls,
        ) as response:
            try:
                body = await response.json(content_type=None)
            except ValueError:
                body = None
            return response.status, body if isinstance(body, dict) else None

    async def raft(self, controller: ChildRecord) -> dict[str, Any] | None:
        try:
            status, body = await self._get(
                f"{self._scheme}://{controller.address}/v1/raft", tls=self._controller_tls
            )
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None
        return body if status == 200 else None

    async def broker_status(self, broker: ChildRecord) -> dict[str, Any] | None:
        if self._config.engine == "rocketmq":
            return None  # a stock broker has no /v1/status: the controller's view stands
        port = self._config.broker_http_port()
        url = f"{self._broker_scheme}://{broker.host}:{port}/v1/status"
        try:
            status, body = await self._get(url, headers=self._broker_headers, tls=self._broker_tls)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return None
        return body if status == 200 else None

    async def replica_info(
        self, controller_addresses: Sequence[str]
    ) -> tuple[dict[str, Any] | None, str | None]:
        """(ReplicaInfo JSON or None, a problem line or None)."""
        params = {"clusterName": self._config.cluster_name, "brokerName": self._config.broker_name}
        last_problem = "no controller answered /v1/replica-info"
        for address in controller_addresses:
            try:
                status, body = await self._get(
                    f"{self._scheme}://{address}/v1/replica-info", params, tls=self._controller_tls
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                last_problem = f"controller {address}: {type(exc).__name__} {exc}".strip()
                continue
            if status == 200 and body is not None:
                return body, None
            if status == 404:
                return None, "the broker set is not registered with the controller yet"
            code = body.get("code") if body else None
            last_problem = f"controller {address}: HTTP {status} {code or ''}".strip()
        return None, last_problem

    async def snapshot(
        self,
        state: RuntimeState,
        *,
        process_alive: Mapping[tuple[str, int], bool],
        supervisor_alive: bool,
        now_ms: int,
    ) -> StatusSnapshot:
        raft_answers, broker_answers = await asyncio.gather(
            asyncio.gather(*(self.raft(c) for c in state.controllers)),
            asyncio.gather(*(self.broker_status(b) for b in state.brokers)),
        )
        raft = {c.index: a for c, a in zip(state.controllers, raft_answers, strict=True)}
        brokers = {b.index: a for b, a in zip(state.brokers, broker_answers, strict=True)}
        order = sorted(
            state.controllers, key=lambda c: (not (raft.get(c.index) or {}).get("isLeader"),)
        )
        info, problem = await self.replica_info([c.address for c in order])
        problems = (problem,) if problem else ()
        return build_snapshot(
            state,
            cluster_name=self._config.cluster_name,
            broker_name=self._config.broker_name,
            raft_port=self._config.controller_raft_port,
            replica_info=info,
            raft=raft,
            broker_status=brokers,
            process_alive=process_alive,
            supervisor_alive=supervisor_alive,
            now_ms=now_ms,
            problems=problems,
        )

    async def controller_leader_ready(self, controllers: Sequence[ChildRecord]) -> bool:
        answers = await asyncio.gather(*(self.raft(c) for c in controllers))
        return any(a and a.get("isLeader") for a in answers)
