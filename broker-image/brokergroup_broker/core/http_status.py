"""The broker's HTTP side port (client port + 2, docs/architecture.md).

- ``GET /healthz``: the process and its event loop answer (liveness probe).
- ``GET /readyz``: role confirmed and the store's one verdict (`StoreHealth.writable`:
  closed, I/O error, disk above diskFullRatio); readiness probe. Heartbeats and produce
  admission read the same verdict, so probes and controller agree (§3.4a).
- ``GET /v1/status``: JSON of the broker's replication state.
- ``GET /v1/consumer-offsets``: this broker's consumer offsets with their
  data version (RIP-32 pre-online sync: a new master takes the newer ones).

A thin shell: every answer comes from a `StatusSource`, so the broker
decides and this module only serialises.
"""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web


class StatusSource(Protocol):
    def status(self) -> dict[str, Any]: ...

    def readiness(self) -> tuple[bool, list[str]]: ...

    def consumer_offsets_snapshot(self) -> dict[str, Any]: ...


class StatusServer:
    def __init__(self, source: StatusSource) -> None:
        self._source = source
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/consumer-offsets", self._consumer_offsets)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
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
