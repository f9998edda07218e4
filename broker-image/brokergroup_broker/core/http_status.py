"""The broker's HTTP side port (client port + 2, docs/architecture.md).

- ``GET /healthz``: the process and its event loop answer (liveness probe).
- ``GET /readyz``: role confirmed and the store's one verdict (`StoreHealth.writable`:
  closed, I/O error, disk above diskFullRatio); readiness probe. Heartbeats and produce
  admission read the same verdict, so probes and controller agree (§3.4a).
- ``GET /v1/status``: JSON of the broker's replication state.
- ``GET /v1/consumer-offsets``: this broker's consumer offsets with their
  data version (RIP-32 pre-online sync: a new master takes the newer ones).
- ``GET /v1/metadata``: this broker's topic and subscription-group tables with their
  data versions (peer_metadata.py: slaves copy the master's, a new master the newer ones).
- ``GET /metrics``: Prometheus text (core/metrics.py, docs/metrics.md).

A thin shell: every answer comes from a `StatusSource`, so the broker
decides and this module only serialises.

Authentication (DESIGN.md §11, docs/security.md): `/healthz` and `/readyz` are open (the
kubelet probes them), and so is `/metrics`, as the controller's is (a scraper needs no
group secret; the page names topics and groups and counts, no message and no credential;
docs/metrics.md); every other path needs ``Authorization: Bearer <the group's broker
credential>`` — the controller API's per-group token, which every broker of the group
holds (`--controller-token-file`) and compares in constant time, before any handler runs.
Its readers hold it too: the group's other brokers (consumer offsets), the local runtime's
supervisor and status view. A missing or wrong one is 401. A broker without a token (a
controller run with `--insecure-no-auth`) serves these paths open.

TLS (`--http-tls`, off by default; docs/security.md): HTTPS only on the whole port, with the
broker's certificate; no client certificate is asked for (the kubelet's probes and a
Prometheus scraper hold none), the bearer credential inside decides as above.
"""

from __future__ import annotations

import hmac
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from brokergroup_remoting.net import budgeted_logger

#: Paths served without a credential: the kubelet's probes.
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class StatusSource(Protocol):
    def status(self) -> dict[str, Any]: ...

    def readiness(self) -> tuple[bool, list[str]]: ...

    def consumer_offsets_snapshot(self) -> dict[str, Any]: ...

    def metadata_snapshot(self) -> dict[str, Any]: ...

    def metrics_text(self) -> bytes: ...


def bearer_header(token: str | None) -> dict[str, str]:
    """The request header a reader of the broker's HTTP port sends (none without a token)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class StatusServer:
    """`token`: the bearer credential every path but OPEN_PATHS needs (None: all open)."""

    def __init__(self, source: StatusSource, *, token: str | None = None) -> None:
        self._source = source
        self._token = token
        self._runner: web.AppRunner | None = None

    @web.middleware
    async def _authenticate(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if self._token is None or request.path in OPEN_PATHS:
            return await handler(request)
        header = request.headers.get("Authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), self._token.encode()
        ):
            return await handler(request)
        reason = (
            "no credential: this path needs 'Authorization: Bearer <the group's broker "
            "credential>' (only /healthz, /readyz and /metrics are open)"
            if not header
            else "the credential is not this group's broker credential"
        )
        return web.json_response({"error": "UNAUTHORIZED", "message": reason}, status=401)

    async def start(self, host: str, port: int, *, tls: ssl.SSLContext | None = None) -> None:
        """`tls`: serve HTTPS only (`--http-tls`); None: plain HTTP."""
        app = web.Application(middlewares=[self._authenticate])
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/consumer-offsets", self._consumer_offsets)
        app.router.add_get("/v1/metadata", self._metadata)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            logger=budgeted_logger("brokergroup_broker.http"),
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=tls)
        await site.start()
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, _: web.Request) -> web.Response:
        ready, problems = self._source.readiness()
        return web.json_response(
            {"ready": ready, "problems": problems}, status=200 if ready else 503
        )

    async def _status(self, _: web.Request) -> web.Response:
        return web.json_response(self._source.status())

    async def _consumer_offsets(self, _: web.Request) -> web.Response:
        return web.json_response(self._source.consumer_offsets_snapshot())

    async def _metadata(self, _: web.Request) -> web.Response:
        return web.json_response(self._source.metadata_snapshot())

    async def _metrics(self, _: web.Request) -> web.Response:
        # CONTENT_TYPE_LATEST carries a charset, which aiohttp wants apart.
        return web.Response(
            body=self._source.metrics_text(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )
