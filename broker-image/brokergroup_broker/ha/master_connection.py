"""One slave connection as the HA master sees it, and what it publishes about
it (`SlaveProgress`)."""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
from dataclasses import dataclass, field

from brokergroup_broker.ha.codec import (
    SlaveFrameDecoder,
)
from brokergroup_broker.ha.link import PlainLink, TlsLink

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlaveProgress:
    """What the master knows about one slave (a snapshot; see ``HAMasterService.slaves``).

    ``ack_offset`` is -1 until the slave's first ack; ``last_caught_up_ms`` is 0
    until it first caught up (seed: lastCaughtUpTimeMs).
    """

    broker_id: int
    ack_offset: int
    last_caught_up_ms: int
    connected: bool
    is_async_learner: bool
    address: str


class ConnectionClosed(Exception):
    """The peer closed the socket."""


@dataclass(eq=False)  # identity semantics: connections live in a set
class SlaveConnection:
    """The master's side of one slave's HA connection: its socket, decoder and ack state."""

    sock: socket.socket
    address: str
    decoder: SlaveFrameDecoder
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    broker_id: int | None = None
    is_async_learner: bool = False
    ack_offset: int = -1
    last_caught_up_ms: int = 0
    # First offset not yet sent; acks above it are a protocol violation.
    next_offset: int = -1
    # (lastMasterMaxOffset, lastTransferTimeMs) of sent but not yet covered batches.
    inflight: collections.deque[tuple[int, int]] = field(default_factory=collections.deque)
    task: asyncio.Task[None] | None = None
    #: The bytes' way: the socket itself, or mutual TLS over it (ha/link.py).
    link: PlainLink | TlsLink | None = None

    def __post_init__(self) -> None:
        if self.link is None:
            self.link = PlainLink(self.sock)


def set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
