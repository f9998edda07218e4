"""The local supervisor reports a gone broker through the controller client
(issue 18 item 4: one transport per peer, one retry policy).

How: a real aiohttp server on a loopback address stands in for the one
controller of a `LocalConfig` and records every report. The supervisor's
report of an exited broker (`_report_gone`, DESIGN.md §2.3) must reach it;
a refusal (the controller answered no: here 403) is final and is not sent
again, while a lost answer is (the report is idempotent). Before, the
supervisor had its own POST loop that re-sent a refusal every 100 ms for 2 s.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from brokergroup_cli.local import supervisor as sup_module
from brokergroup_cli.local.config import LocalConfig
from brokergroup_cli.local.plan import Layout
from brokergroup_cli.local.probe import Prober
from brokergroup_cli.local.state import ChildKind
from brokergroup_controller.api import ReplicaInfo
from tests.unit.conftest import listening_sockets

_hosts = itertools.count(1)


@dataclass
class Controller:
    host: str
    port: int
    status: int = 200
    lose_first: bool = False
    reports: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        body["authorization"] = request.headers.get("Authorization")
        self.reports.append(body)
        if self.lose_first and len(self.reports) == 1:
            request.transport.close()  # type: ignore[union-attr]  # the answer is lost
            await asyncio.sleep(1)
        if self.status != 200:
            return web.json_response({"code": "FORBIDDEN", "message": "no"}, status=self.status)
        info = ReplicaInfo(
            "DefaultCluster", "broker-a", 1, "127.0.0.11:10911", 1, frozenset({1}), 1
        )
        return web.json_response({"code": "SUCCESS", **info.to_json(), "reportIgnored": False})


@pytest.fixture
async def controller() -> AsyncIterator[Controller]:
    (sock,) = listening_sockets(1, f"127.0.3.{100 + next(_hosts)}")
    c = Controller(*sock.getsockname())
    app = web.Application()
    app.router.add_post("/v1/brokers/inactive", c.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    try:
        yield c
    finally:
        await runner.cleanup()


async def report_gone(controller: Controller, tmp_path: Path) -> None:
    config = LocalConfig(
        root_dir=tmp_path, controller_hosts=(controller.host,), controller_api_port=controller.port
    )
    supervisor = sup_module.Supervisor(config, Layout(tmp_path))
    supervisor._token = "admin-token"
    slot = sup_module._Slot(ChildKind.BROKER, 0, "127.0.0.10", 10911, tmp_path / "b.log")
    slot.broker_id, slot.incarnation = 2, "start-7"
    async with aiohttp.ClientSession() as session:
        supervisor._prober = Prober(config, session, "admin-token")
        try:
            await supervisor._report_gone(slot, 137)
        finally:
            close = getattr(supervisor, "_close_controller_client", None)
            if close is not None:
                await close()


async def test_the_report_reaches_the_controller(controller: Controller, tmp_path: Path) -> None:
    await report_gone(controller, tmp_path)
    assert len(controller.reports) == 1
    report = controller.reports[0]
    assert (report["brokerId"], report["processGone"], report["incarnation"]) == (
        2,
        True,
        "start-7",
    )
    assert report["authorization"] == "Bearer admin-token"


async def test_a_refused_report_is_not_sent_again(controller: Controller, tmp_path: Path) -> None:
    controller.status = 403
    await report_gone(controller, tmp_path)
    assert len(controller.reports) == 1


async def test_a_report_whose_answer_was_lost_is_sent_again(
    controller: Controller, tmp_path: Path
) -> None:
    controller.lose_first = True
    await report_gone(controller, tmp_path)
    assert len(controller.reports) == 2
