"""Helpers the unit tests share (one copy each; import them, don't copy them).

- `store`: a fixture, a broker's MessageStore in tmp_path with the store settings a
  default `BrokerConfig` gives; closed after the test.
- `Clock`: a fake clock to pass where code takes one (`now_ms=`, `clock_ms=`,
  `clock=`): call it for the time, set `now` or `advance`/`sleep` to move it.
- `free_ports` (ports to hand to another process) and `listening_sockets` (for a server
  of the test's own: no window in which the port may be taken).
- `eventually`: wait for a condition under a generous real-time deadline (liveness,
  never a timing assertion). Under `@pytest.mark.looptime` its polls cost fake loop
  time only, and the deadline stays real.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

import pytest

if TYPE_CHECKING:  # imported by the fixture: a test that needs no broker loads none
    from brokergroup_broker.store import MessageStore

EVENTUALLY_DEADLINE_S = 30.0

Number = TypeVar("Number", int, float)


def free_ports(count: int = 1, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free on `host` now: all are held bound until each is known,
    since two binds to port 0 one after the other can be given the same port (seen about
    once in 10,000 pairs here); a test asking for two then started two servers on one."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            s = held.enter_context(socket.socket())
            s.bind((host, 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def listening_sockets(count: int = 1, host: str = "127.0.0.1") -> list[socket.socket]:
    """`count` sockets bound to fresh ports of `host` and listening, for a server started
    on them (aiohttp `web.SockSite`). A port only known to be free gives another process
    the time to take it before the server binds: an outgoing connection's ephemeral source
    port took one in CI ("address already in use" on 127.0.0.1:48265)."""
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        s.listen(128)
        sockets.append(s)
    return sockets


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    from brokergroup_broker.core.broker_settings import store_config_of
    from brokergroup_broker.core.config import BrokerConfig
    from brokergroup_broker.store import MessageStore

    s = MessageStore.open(tmp_path / "store", store_config_of(BrokerConfig()))
    yield s
    s.close()


@dataclass
class Clock(Generic[Number]):
    """`Clock(1_000)` counts int milliseconds, `Clock(0.0)` float seconds."""

    now: Number

    def __call__(self) -> Number:
        return self.now

    def advance(self, by: Number) -> None:
        self.now += by

    def sleep(self, by: Number) -> None:
        """`advance`, shaped as the `sleep=` argument of code that waits in turns."""
        self.now += by


async def eventually(
    condition: Callable[[], bool],
    what: str,
    *,
    deadline_s: float = EVENTUALLY_DEADLINE_S,
    poll_s: float = 0.01,
) -> None:
    """Until `condition()` holds; fails naming `what` after `deadline_s` real seconds."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(poll_s)


async def closed_by_server(reader: asyncio.StreamReader, within_s: float = 10.0) -> bool:
    """True when the server closes (EOF or reset) within `within_s`, reading what it sends."""
    try:
        async with asyncio.timeout(within_s):
            while await reader.read(65536):
                pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True
