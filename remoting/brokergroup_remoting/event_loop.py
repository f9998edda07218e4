"""The event loop every server process runs on (issue 38 item 1): uvloop where installed.

Every long-running process of brokergroup (broker, controller with its name server, the
local supervisor with its master-address forwarders) starts its one asyncio loop through
`run`, so the choice is made once, at start, in this module:

- `auto` (the default): uvloop when the `uvloop` package imports (the `fast` extra, which
  `make venv` and the image install), else the standard library's loop;
- `asyncio` / `uvloop`: that loop; asking for uvloop where it is not installed is an error
  at start, never a silent fallback (a benchmark that asked for it must get it).

The choice comes from the environment (`BROKERGROUP_EVENT_LOOP`), so one setting reaches
every process of an installation: the local supervisor passes the loop it runs on to every
child it starts, and names it in `local status --json` (`eventLoop`); the benchmarks
record it in their JSON.

Why uvloop and not more: on 2 cores the master broker's one loop is the serial stage of a
commit round, and libuv's loop spends less CPU per callback and per socket operation than
the selector loop (measured +9 % single sends in issue 38). The code written against
asyncio works on both; what differs is documented where it matters: uvloop's transports
do not subclass `asyncio.Transport` (they implement its methods), so code must not
`isinstance`-check a transport (the local forwarder did, and every forwarded connection
failed under uvloop).

`choose` is the decision (pure); `run` the one place a process's loop is made.
"""

from __future__ import annotations

import asyncio
import enum
import importlib.util
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from brokergroup_remoting.choice import choose_implementation

#: The environment variable naming the loop: auto, asyncio or uvloop.
EVENT_LOOP_ENV = "BROKERGROUP_EVENT_LOOP"

T = TypeVar("T")


class LoopKind(enum.StrEnum):
    """An event loop implementation a process can run on."""

    ASYNCIO = "asyncio"
    """The standard library's selector loop."""
    UVLOOP = "uvloop"
    """libuv's loop through the uvloop package."""


class EventLoopError(ValueError):
    """The requested loop is unknown or not installed (a start-up error)."""


def uvloop_installed() -> bool:
    """Whether the uvloop package can be imported here."""
    return importlib.util.find_spec("uvloop") is not None


def choose(requested: str | None, *, uvloop_available: bool) -> LoopKind:
    """The loop for a process asked for `requested` (None or empty: auto)."""
    return choose_implementation(
        LoopKind, requested, env=EVENT_LOOP_ENV, native=LoopKind.UVLOOP,
        fallback=LoopKind.ASYNCIO, native_available=uvloop_available,
        missing="the uvloop package is not installed "
        "(pip install 'brokergroup[fast]', or use auto or asyncio)",
        error=EventLoopError,
    )  # fmt: skip


def configured(environ: Mapping[str, str] | None = None) -> LoopKind:
    """The loop this process is configured for (the environment, auto by default)."""
    env = os.environ if environ is None else environ
    return choose(env.get(EVENT_LOOP_ENV), uvloop_available=uvloop_installed())


def loop_factory(kind: LoopKind) -> Callable[[], asyncio.AbstractEventLoop]:
    """A constructor of a new loop of `kind`."""
    if kind is LoopKind.UVLOOP:
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def kind_of(loop: asyncio.AbstractEventLoop) -> LoopKind:
    """Which kind `loop` is (what a status page names)."""
    return LoopKind.UVLOOP if type(loop).__module__.startswith("uvloop") else LoopKind.ASYNCIO


def running() -> LoopKind:
    """The kind of the loop running this coroutine."""
    return kind_of(asyncio.get_running_loop())


def run(main: Coroutine[Any, Any, T], *, kind: LoopKind | None = None) -> T:
    """`asyncio.run(main)` on the configured loop (or `kind`): a server process's one loop.
    Raises EventLoopError (before anything runs) for a loop that cannot be had."""
    try:
        chosen = configured() if kind is None else kind
    except EventLoopError:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=loop_factory(chosen)) as runner:
        return runner.run(main)
