"""The controller client's one retry policy (issue 18 item 4; DESIGN.md §3.3
"never blindly re-send a mutating request"; docs/controller.md "Request ids").

How: a real aiohttp server on two loopback ports stands in for two controller
nodes. It records every request that arrives and holds the first POST longer
than the client's attempt timeout, so the client gives up on that attempt
with the request's outcome unknown (it may have been applied). Then:
- a POST without a requestId is not sent again: ControllerUnavailable says
  its outcome is unknown, and the server saw it once;
- the same POST with a requestId is sent again, with the same id, to the
  other node, and the client gets that node's answer;
- a refusal (the controller answered no) is never re-sent, id or not;
- the liveness reports (idempotent) are re-sent after a lost answer, and so
  is a read.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError, ErrorCode
from tests.unit.conftest import listening_sockets

BUDGET_S = 4.0  # the client's request budget: 2 s for the first of two addresses
HOLD_S = 2.5  # the first POST's answer comes later than that attempt waits
_hosts = itertools.count(1)
# The attempt timeout and the held answer are loop timers (aiohttp's ClientTimeout and the
# server's sleep, one loop): in fake loop time their order is the same and nobody waits 2 s.
pytestmark = pytest.mark.looptime


@dataclass
class TwoNodes:
    addresses: list[str]
    seen: list[tuple[str, str, Any]] = field(default_factory=list)  # (address, path, requestId)
    refuse: bool = False
    held: bool = False

    async def handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read() or b"{}")
        address = f"{request.url.host}:{request.url.port}"
        self.seen.append((address, request.path, body.get("requestId")))
        if self.refuse:
            answer = {"code": ErrorCode.BROKER_STILL_ALIVE.value, "message": "brokers [1] alive"}
            return web.json_response(answer, status=409)
        if request.method == "POST" and not self.held:
            self.held = True
            await asyncio.sleep(HOLD_S)  # applied, perhaps; the answer is lost to the client
        return web.json_response({"code": "SUCCESS", "removed": [1], "answeredBy": address})


@pytest.fixture
async def nodes() -> AsyncIterator[TwoNodes]:
    host = f"127.0.3.{next(_hosts)}"
    sockets = listening_sockets(2, host)
    state = TwoNodes([f"{host}:{s.getsockname()[1]}" for s in sockets])
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    for sock in sockets:
        await web.SockSite(runner, sock).start()
    try:
        yield state
    finally:
        await runner.cleanup()


async def test_a_post_without_a_request_id_is_not_sent_again(nodes: TwoNodes) -> None:
    async with ControllerClient(nodes.addresses, "t", request_timeout_s=BUDGET_S) as client:
        with pytest.raises(ControllerUnavailable, match="outcome is unknown"):
            await client.request("POST", "/v1/brokers/clean", body={"clusterName": "c"})
    assert [(path, rid) for _a, path, rid in nodes.seen] == [("/v1/brokers/clean", None)]


async def test_a_post_with_a_request_id_is_sent_again_with_the_same_id(nodes: TwoNodes) -> None:
    async with ControllerClient(nodes.addresses, "t", request_timeout_s=BUDGET_S) as client:
        answer = await client.request(
            "POST", "/v1/brokers/clean", body={"clusterName": "c", "requestId": "r-1"}
        )
    assert [(path, rid) for _a, path, rid in nodes.seen] == [
        ("/v1/brokers/clean", "r-1"),
        ("/v1/brokers/clean", "r-1"),
    ]
    first, second = (a for a, _p, _r in nodes.seen)
    assert first != second and answer["answeredBy"] == second


async def test_the_typed_mutating_calls_carry_an_id_and_are_sent_again(nodes: TwoNodes) -> None:
    async with ControllerClient(nodes.addresses, "t", request_timeout_s=BUDGET_S) as client:
        removed = await client.clean_broker_data("c", "g", [1])
    assert removed == [1]
    ids = [rid for _a, _p, rid in nodes.seen]
    assert len(ids) == 2 and ids[0] == ids[1] and ids[0]


async def test_an_idempotent_report_is_sent_again_without_an_id(nodes: TwoNodes) -> None:
    async with ControllerClient(nodes.addresses, "t", request_timeout_s=BUDGET_S) as client:
        await client.request("POST", "/v1/brokers/inactive", body={}, idempotent=True)
    assert [(path, rid) for _a, path, rid in nodes.seen] == [
        ("/v1/brokers/inactive", None),
        ("/v1/brokers/inactive", None),
    ]


async def test_a_refusal_is_never_sent_again(nodes: TwoNodes) -> None:
    nodes.refuse = True
    async with ControllerClient(nodes.addresses, "t", request_timeout_s=BUDGET_S) as client:
        with pytest.raises(ControllerError) as refused:
            await client.clean_broker_data("c", "g", [1])
        with pytest.raises(ControllerError):
            await client.request("POST", "/v1/brokers/inactive", body={}, idempotent=True)
    assert refused.value.code is ErrorCode.BROKER_STILL_ALIVE
    assert [path for _a, path, _r in nodes.seen] == ["/v1/brokers/clean", "/v1/brokers/inactive"]
