"""The broker's name-server link registers again soon with a name server it lost
(brokergroup_broker.remoting_front.namesrv_link), not at the next period.

Found by the issue-37 full chaos run (seed 3702, window 97): a name server restarted with
its controller (window 96 killed the controller leader) held no registration of the new
master until that broker's next 30 s period, and a stock producer that switched to it got a
route without brokerId 0 and failed every send for 9.3 s. Here the period is 100 s, so a
registration that reaches the restarted name server within the wait can only come from the
quick re-registration.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from brokergroup_broker.remoting_front.namesrv_link import NameServerLink, Registration
from brokergroup_controller.namesrv.server import NameServer
from brokergroup_remoting.net import Credentials, ServerAuth
from tests.unit.conftest import free_ports

KEYS = {"brokerAccessKey": "brokerSecretKey-1234"}
PAIR = Credentials("brokerAccessKey", "brokerSecretKey-1234")
BROKER_ADDR = "127.0.0.1:10911"
PERIOD_MS = 100_000
#: Far below the period, far above the retry (0.5 s doubling) on a loaded machine.
WAIT_S = 20.0


def _link(port: int) -> NameServerLink:
    registration = Registration(
        cluster_name="DefaultCluster",
        broker_name="broker-a",
        broker_id=0,
        broker_addr=BROKER_ADDR,
        ha_server_addr="127.0.0.1:10912",
        auto_create_topic=False,
        default_queue_nums=4,
    )
    return NameServerLink(
        (f"127.0.0.1:{port}",),
        registration,
        lambda: {"Orders": 4},
        PAIR,
        register_interval_ms=PERIOD_MS,
        timeout_ms=2000,
    )


async def _name_server(port: int = 0) -> NameServer:
    namesrv = NameServer(dict, auth=ServerAuth(secret_for=KEYS.get))
    await namesrv.start("127.0.0.1", port)
    return namesrv


async def _registered_topics(namesrv: NameServer) -> list[str] | None:
    """The topics of this broker's registration once `namesrv` holds it (None: not within
    WAIT_S)."""
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while asyncio.get_running_loop().time() < deadline:
        reg = namesrv.registry.get("DefaultCluster", BROKER_ADDR)
        if reg is not None:
            return sorted(reg.topics)
        await asyncio.sleep(0.05)
    return None


@contextlib.asynccontextmanager
async def _running(port: int) -> AsyncIterator[list[NameServer]]:
    """A link to 127.0.0.1:`port` running; closes it and every name server put in the list."""
    link = _link(port)
    task = asyncio.create_task(link.run())
    started: list[NameServer] = []
    try:
        yield started
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await link.close()
        for namesrv in started:
            await namesrv.close()


async def test_a_name_server_back_from_a_restart_is_registered_with_before_the_period() -> None:
    first = await _name_server()
    port = first.port
    async with _running(port) as started:
        before = await _registered_topics(first)
        await first.close()  # the name server's process ends: its connections close
        started.append(await _name_server(port))  # back on its address, with an empty table
        after = await _registered_topics(started[0])
    assert before is not None and "Orders" in before
    assert after == before


async def test_a_name_server_down_at_start_is_registered_with_once_it_is_up() -> None:
    port = free_ports()[0]
    async with _running(port) as started:
        await asyncio.sleep(1.0)  # the first attempts are refused
        started.append(await _name_server(port))
        topics = await _registered_topics(started[0])
    assert topics is not None and "Orders" in topics
