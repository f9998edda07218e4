"""A retried controller request gets its first answer (issue 17 item 2;
docs/controller.md "Request ids"; DESIGN.md §3.3 "never blindly re-send").

How: a real single-node Raft (`ControllerRaftNode`) behind the real aiohttp
app, served on two ports so `ControllerClient` has two addresses to rotate
over. The node holds the first proposal of one event type for longer than
the client's per-attempt timeout, so the client gives up on that attempt and
re-sends the request to the other address:

- "answer late": the first attempt commits at once but answers late, so the
  retry arrives after the commit (without request ids: FENCED_SYNC_STATE_SET_EPOCH
  for AlterSyncStateSet, MASTER_STILL_EXIST for an election);
- "commit late": the first attempt's proposal waits, so the retry commits
  first and the first attempt's late commit is the repeat (without request
  ids its handler answers FENCED; nobody hears it, but it is wrong).

Either way the client must get SUCCESS, the state must show exactly one
change, both attempts carry the same requestId, and every answer the
controller gave (its own request metrics) is SUCCESS. Only the delay is
injected; the rules, the state and the dedup are the real ones.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from brokergroup_controller import api
from brokergroup_controller.app import SERVICE_KEY, create_app
from brokergroup_controller.client import ControllerClient
from brokergroup_controller.raft_node import ControllerRaftNode
from brokergroup_controller.raft_settings import RaftSettings
from brokergroup_controller.server import ControllerConfig
from brokergroup_controller.state import ApplyResult, Event
from tests.unit.conftest import listening_sockets

TOKEN = "retry-test-token"
C, B = "DefaultCluster", "broker-r"
ATTEMPT_TIMEOUT_S = 2.0  # the client's first attempt: half of its 4 s budget (two addresses)
INJECTED_DELAY_S = 2.5  # longer than that attempt, shorter than the rest of the budget
_hosts = itertools.count(1)


class SlowFirstProposal(ControllerRaftNode):
    """Holds the first proposal of `slow_type`: before committing it or before answering."""

    def __init__(self, settings: RaftSettings, slow_type: str, where: str) -> None:
        super().__init__(settings)
        self.slow_type = slow_type
        self.where = where
        self.slowed = False

    async def propose(self, event: Event, timeout_s: float) -> ApplyResult:
        if self.slow_type != event.TYPE or self.slowed:
            return await super().propose(event, timeout_s)
        self.slowed = True
        if self.where == "commit late":
            await asyncio.sleep(INJECTED_DELAY_S)
        result = await super().propose(event, timeout_s)
        if self.where == "answer late":
            await asyncio.sleep(INJECTED_DELAY_S)
        return result


@dataclass
class Controller:
    node: SlowFirstProposal
    app: web.Application
    client: ControllerClient
    seen: list[tuple[str, str | None]]  # (path, requestId) of every POST, in arrival order

    def answers(self, endpoint: str) -> dict[str, float]:
        """How many answers of each code the controller gave on `endpoint`."""
        registry = self.app[SERVICE_KEY].metrics.registry
        codes: dict[str, float] = {}
        for metric in registry.collect():
            for sample in metric.samples:
                if (
                    sample.name.endswith("_requests_total")
                    and sample.labels["endpoint"] == endpoint
                ):
                    codes[sample.labels["code"]] = sample.value
        return codes

    async def wait_answers(self, endpoint: str, count: int) -> dict[str, float]:
        deadline = time.monotonic() + 30
        while sum(self.answers(endpoint).values()) < count:
            assert time.monotonic() < deadline, self.answers(endpoint)
            await asyncio.sleep(0.05)
        return self.answers(endpoint)


Factory = Callable[[str, str], Awaitable[Controller]]


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[Factory]:
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def make(slow_type: str, where: str) -> Controller:
        host = f"127.0.33.{next(_hosts)}"
        config = ControllerConfig(
            node_id=1,
            peers=(f"{host}:9880",),
            data_dir=str(tmp_path / "data"),
            bind_address=host,
            token=TOKEN,
            broker_credential_root="retry-test-broker-credential-root",
            raft_password="retry-test-raft-password",
        )
        node = SlowFirstProposal(config.raft_settings(), slow_type, where)
        node.start()
        cleanups.append(lambda: asyncio.to_thread(node.stop))
        deadline = time.monotonic() + 10
        while not node.status().caught_up:
            assert time.monotonic() < deadline, "single node never became leader"
            await asyncio.sleep(0.01)
        seen: list[tuple[str, str | None]] = []

        @web.middleware
        async def record(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            if request.method == "POST":
                seen.append((request.path, json.loads(await request.read()).get("requestId")))
            return await handler(request)

        app = create_app(config, node)
        app.middlewares.append(record)
        runner = web.AppRunner(app)
        await runner.setup()
        cleanups.append(runner.cleanup)
        sockets = listening_sockets(2)
        ports = [s.getsockname()[1] for s in sockets]
        for sock in sockets:
            await web.SockSite(runner, sock).start()
        client = ControllerClient(
            [f"127.0.0.1:{port}" for port in ports], TOKEN, request_timeout_s=2 * ATTEMPT_TIMEOUT_S
        )
        cleanups.append(client.close)
        return Controller(node, app, client, seen)

    try:
        yield make
    finally:
        for cleanup in reversed(cleanups):
            await cleanup()


async def setup_group(controller: Controller, *, elect: bool = True) -> None:
    """Brokers 1..3 registered and alive; with `elect`, 1 master and SyncStateSet {1, 2}."""
    client = controller.client
    for broker_id in (1, 2, 3):
        address = f"10.0.0.{broker_id}:10911"
        await client.apply_broker_id(C, B, broker_id, f"rc{broker_id}", address)
        await client.heartbeat(
            api.BrokerHeartbeat(C, B, broker_id, address, 0, 0, 0, heartbeat_timeout_ms=60_000)
        )
    if elect:
        assert (await client.elect_master(C, B, requester_broker_id=1)).master_broker_id == 1


def retried_with_one_id(controller: Controller, path: str) -> None:
    """The last request on `path` was sent twice (one retry), with one id."""
    ids = [request_id for p, request_id in controller.seen if p == path]
    assert len(ids) >= 2 and ids[-2] is not None and ids[-2] == ids[-1], ids
    assert ids[-2] not in ids[:-2], ids


@pytest.mark.parametrize("where", ["answer late", "commit late"])
async def test_a_retried_alter_sync_state_set_gets_its_first_answer(
    controller: Factory, where: str
) -> None:
    c = await controller("AlterSyncStateSet", where)
    await setup_group(c)
    answer = await c.client.alter_sync_state_set(C, B, 1, 1, {1, 2}, 1)
    assert answer == (frozenset({1, 2}), 2)
    info = await c.client.replica_info(C, B)
    assert (info.sync_state_set, info.sync_state_set_epoch) == (frozenset({1, 2}), 2)
    assert await c.wait_answers("alter_sync_state_set", 2) == {"SUCCESS": 2}
    retried_with_one_id(c, "/v1/sync-state-set/alter")


@pytest.mark.parametrize("where", ["answer late", "commit late"])
async def test_a_retried_switchover_gets_its_first_answer(controller: Factory, where: str) -> None:
    c = await controller("ElectMaster", where)
    c.node.slowed = True  # the group's first election is not the one under test
    await setup_group(c)
    assert await c.client.alter_sync_state_set(C, B, 1, 1, {1, 2}, 1) == (frozenset({1, 2}), 2)
    c.node.slowed = False
    info = await c.client.elect_master(C, B, designated_broker_id=2)
    assert (info.master_broker_id, info.master_epoch) == (2, 2)
    assert (info.sync_state_set, info.sync_state_set_epoch) == (frozenset({2}), 3)
    answers = await c.wait_answers("elect_master", 3)
    assert answers == {"SUCCESS": 3}  # the first election, the switchover and its retry
    retried_with_one_id(c, "/v1/elect-master")


async def test_a_retried_first_election_gets_its_first_answer(controller: Factory) -> None:
    c = await controller("ElectMaster", "answer late")
    await setup_group(c, elect=False)
    info = await c.client.elect_master(C, B, requester_broker_id=1)
    assert (info.master_broker_id, info.master_epoch) == (1, 1)
    assert await c.wait_answers("elect_master", 2) == {"SUCCESS": 2}
    retried_with_one_id(c, "/v1/elect-master")
