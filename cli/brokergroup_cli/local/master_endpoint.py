"""The local runtime's stable master address: one TCP forwarder per group (issue 19 item 5).

Theory of operation
-------------------
A stock RocketMQ client sends to the route's brokerId 0 address and re-reads routes only
every 30 s. The controllers' name servers name this forwarder's fixed loopback address as
the group's master (`--namesrv-master-address CLUSTER/BROKER=HOST:PORT`), so the address a
client holds never moves; what moves is where the forwarder sends new connections:

- `MasterWatch` long-polls the controller (`GET /v1/watch`, returns as soon as a new
  masterEpoch is committed) and hands each answer to `target_of` (pure), which names the
  master's RocketMQ remoting port: the built-in broker's (client port + 3) or a stock
  broker's listen port, on the host the master registered.
- `MasterForwarder.set_target` closes every forwarded connection when the target changes,
  so a client reconnects (to the same address) and lands on the new master; a deposed
  master that is still running also closes its own client connections, and answers a send
  SERVICE_NOT_AVAILABLE and closes (broker remoting_front).
- Before it closes a client's connection (its master died or was replaced), the forwarder
  answers every request the master left unanswered SYSTEM_ERROR (in_flight.py): the stock
  client fails a closed channel's requests only when no other thread reconnected first,
  else a pull held on the dead master waits out its 30 s timeout.
- A connection that arrives while no master is known waits for one, at most `hold_ms`,
  instead of being refused; a master that refuses the forwarder's connect (it just died)
  is retried the same way until the target changes or the hold ends.

The forwarder copies bytes and reads only the frame headers' opaque and flag: it checks no
request. Every request is signed by the client and checked by the broker, as it would be
without the forwarder.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from brokergroup_cli.local.in_flight import InFlight
from brokergroup_controller.api import ReplicaInfo
from brokergroup_controller.client import ControllerClient, ControllerUnavailable
from brokergroup_controller.errors import ControllerError
from brokergroup_remoting.tls import (
    Accept,
    ServerTls,
    SniffingListener,
    TlsMode,
    sniff,
)

log = logging.getLogger(__name__)

#: How long a `GET /v1/watch` waits on the controller before it is asked again.
WATCH_TIMEOUT_MS = 10_000
#: Pause after a failed watch (no controller leader answering) before the next one.
WATCH_RETRY_MS = 100
#: Bound on one connect to the master.
CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class RemotingPorts:
    """Where a group's brokers serve RocketMQ clients, relative to the controller address."""

    remoting_port: int
    """The built-in broker: its client port + 3; `--engine rocketmq`: the listen port."""


def target_of(info: ReplicaInfo, ports: RemotingPorts) -> str | None:
    """The master's RocketMQ remoting address, or None while the group has no live master."""
    address = info.live_master_address
    if not address:
        return None
    host = address.rpartition(":")[0]
    return f"{host}:{ports.remoting_port}" if host else None


class MasterForwarder:
    """One listening loopback address; each accepted connection is piped to the target."""

    def __init__(
        self,
        *,
        name: str,
        hold_ms: int,
        remoting: bool = True,
        tls: ServerTls | None = None,
        upstream_tls: ssl.SSLContext | None = None,
    ) -> None:
        """`remoting`: the connections carry RocketMQ remoting frames, whose unanswered
        requests are answered before a close (in_flight.py); False for the gRPC endpoint
        (HTTP/2: a closed connection fails its calls in the client, which retries them)."""
        self._name = name
        self._remoting = remoting
        # `tls`: the address's TLS mode (RocketMQ's); a TLS client's session ends here, so
        # the in-flight answers still read its frames. `upstream_tls`: reach the master over
        # TLS too (a master whose port enforces it).
        self._tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        self._upstream_tls = upstream_tls
        self._sniffing: SniffingListener | None = None
        self._hold_s = hold_ms / 1000
        self._target: str | None = None
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        #: The connections piping to a master now, by the master they reach.
        self._piping: dict[asyncio.Task[None], str] = {}
        self.target_changes = 0

    @property
    def target(self) -> str | None:
        return self._target

    @property
    def held_connections(self) -> int:
        """Accepted connections not piping to a master yet (waiting for one)."""
        return len(self._pipes) - len(self._piping)

    @property
    def port(self) -> int:
        if self._sniffing is not None:
            return self._sniffing.port
        assert self._server is not None and self._server.sockets
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self, host: str, port: int) -> None:
        if self._tls is None:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _ClientEnd(self._attach, self._remoting), host, port
            )
        else:
            self._sniffing = SniffingListener()
            self._sniffing.start(
                host,
                port,
                self._accept_socket,
                lambda exc: log.warning("%s: accept failed: %s", self._name, exc),
            )
        log.info(
            "%s: stable master address %s:%d (TLS %s)",
            self._name,
            host,
            port,
            "disabled" if self._tls is None else self._tls.mode,
        )

    async def _accept_socket(self, sock: socket.socket) -> None:
        """A connection to a TLS address: TLS (ended here) or plaintext by its first byte."""
        tls = self._tls
        assert tls is not None
        try:
            how = await sniff(sock, tls)
            if how is None or how is Accept.REFUSE:
                if how is Accept.REFUSE:
                    log.info("%s: closing a plaintext connection (TLS %s)", self._name, tls.mode)
                sock.close()
                return
            sealed = how is Accept.TLS
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _ClientEnd(self._attach, self._remoting),
                sock,
                ssl=tls.context if sealed else None,
                ssl_handshake_timeout=tls.handshake_timeout_s if sealed else None,
            )
        except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError
            log.info("%s: closing a connection: no TLS session: %s", self._name, exc)
            sock.close()

    async def close(self) -> None:
        if self._sniffing is not None:
            await self._sniffing.close()
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        if self._pipes:
            await asyncio.wait(list(self._pipes), timeout=1)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    def set_target(self, target: str | None) -> None:
        """Forward new connections to `target` (None: hold them); a change cuts the open ones."""
        if target == self._target:
            return
        log.info("%s: master %s -> %s", self._name, self._target, target)
        self._target = target
        self.target_changes += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for task, reached in list(self._piping.items()):
            if reached != target:  # held connections wait on: they go to the new target
                task.cancel()

    async def _wait_for_change(self, seen: str | None, deadline: float) -> bool:
        """Wait until the target differs from `seen` and is known; False at the deadline."""
        while self._target == seen or self._target is None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return True

    async def _connect(self) -> tuple[str, _End] | None:
        deadline = time.monotonic() + self._hold_s
        if self._target is None and not await self._wait_for_change(None, deadline):
            return None
        loop = asyncio.get_running_loop()
        while True:
            target = self._target
            assert target is not None
            host, _, port = target.rpartition(":")
            try:
                sealed = self._upstream_tls
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(
                        _End,
                        host,
                        int(port),
                        ssl=sealed,
                        server_hostname=None if sealed is None else host,
                    ),
                    CONNECT_TIMEOUT_S,
                )
                return target, upstream
            except (OSError, TimeoutError) as exc:
                log.info("%s: master %s not reachable: %s", self._name, target, exc)
            if not await self._wait_for_change(target, deadline):
                return None

    def _attach(self, client: _ClientEnd) -> None:
        task = asyncio.ensure_future(self._pipe(client))
        self._pipes.add(task)
        task.add_done_callback(self._pipes.discard)

    async def _pipe(self, client: _ClientEnd) -> None:
        task = asyncio.current_task()
        assert task is not None
        upstream: _End | None = None
        try:
            connected = await self._connect()
            if connected is None:
                log.info("%s: no master within %.1f s; closing", self._name, self._hold_s)
                return
            target, upstream = connected
            if target != self._target or client.lost.done():
                return  # the master changed while connecting, or the client left
            self._piping[task] = target
            client.join(upstream)
            await asyncio.wait((client.lost, upstream.lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._piping.pop(task, None)
            client.close()
            if upstream is not None:
                upstream.close()


class _End(asyncio.Protocol):
    """One socket of a forwarded connection: what it reads is written to its peer's socket
    as it arrives (no stream buffer, no task per copy: the forwarder carries every request
    and answer of the group). A full peer pauses this side's reading; either side's end
    closes both (a half-closed RocketMQ connection is dead)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _End | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Told every chunk this side reads, after it is forwarded.
        self.seen: Callable[[bytes], None] | None = None
        #: What arrived before a peer was joined, written to the peer at the join: a gRPC
        #: server speaks first (its HTTP/2 SETTINGS), and a client's first request can come
        #: before its end is joined (uvloop starts reading after `connection_made` even when
        #: it paused the transport; the standard loop honours that pause). Reading pauses at
        #: the first such chunk, so this holds one read's worth at most.
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but no isinstance check: uvloop's transports implement
        # asyncio.Transport without subclassing it (the check failed every forwarded
        # connection under uvloop; event_loop.py).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer.transport if self.peer is not None else None
        if peer is None:
            self.early.append(data)
            if self.transport is not None:
                self.transport.pause_reading()  # until the join resumes it
        elif not peer.is_closing():
            peer.write(data)
        if self.seen is not None:
            self.seen(data)

    def eof_received(self) -> bool:
        return False  # close this side; connection_lost closes the other

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:  # our socket is full: stop reading what fills it
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()  # what is buffered still goes out


class _ClientEnd(_End):
    """The accepted side: reads nothing (the kernel keeps what the client sends) until it
    is joined to a master; under uvloop, whose pause in `connection_made` does not hold,
    at most its first chunk, kept for the join (`_End.early`)."""

    def __init__(self, on_accept: Callable[[_ClientEnd], None], remoting: bool = True) -> None:
        super().__init__()
        self._on_accept = on_accept
        self.in_flight = InFlight() if remoting else None
        self.seen = None if self.in_flight is None else self.in_flight.from_client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.pause_reading()
        self._on_accept(self)

    def join(self, upstream: _End) -> None:
        self.peer, upstream.peer = upstream, self
        if self.in_flight is not None:
            upstream.seen = self.in_flight.from_master
        assert self.transport is not None and upstream.transport is not None
        early, upstream.early = upstream.early, []
        for chunk in early:
            self.transport.write(chunk)
            if upstream.seen is not None:
                upstream.seen(chunk)
        sent_early, self.early = self.early, []  # already seen by in_flight as it came
        for chunk in sent_early:
            upstream.transport.write(chunk)
        self.transport.resume_reading()
        upstream.transport.resume_reading()

    def close(self) -> None:
        # Answered before the EOF, on the same socket: the client fails them at once.
        if (
            self.in_flight is not None
            and self.transport is not None
            and not self.transport.is_closing()
        ):
            answers = self.in_flight.answers()
            if answers:
                self.transport.write(answers)
        super().close()


class MasterWatch:
    """Keeps a `MasterForwarder`'s target on the controller's current live master."""

    def __init__(
        self,
        client: ControllerClient,
        cluster_name: str,
        broker_name: str,
        ports: RemotingPorts,
        forwarder: MasterForwarder,
        *,
        also: tuple[tuple[RemotingPorts, MasterForwarder], ...] = (),
    ) -> None:
        """`also`: further forwarders of the same group's master (its gRPC port), moved with
        `forwarder` by the one long-poll."""
        self._client = client
        self._group = (cluster_name, broker_name)
        self._targets = ((ports, forwarder), *also)

    async def run(self) -> None:
        """Until cancelled: read the group, then long-poll for the next epoch."""
        master_epoch, set_epoch = -1, -1
        while True:
            try:
                if master_epoch < 0:
                    info = await self._client.replica_info(*self._group)
                else:
                    info = await self._client.watch(
                        *self._group, master_epoch, set_epoch, WATCH_TIMEOUT_MS
                    )
            except (ControllerError, ControllerUnavailable, OSError, TimeoutError) as exc:
                log.debug("master watch of %s/%s: %s", *self._group, exc)
                master_epoch = -1  # read afresh: the group may not exist yet
                await asyncio.sleep(WATCH_RETRY_MS / 1000)
                continue
            master_epoch, set_epoch = info.master_epoch, info.sync_state_set_epoch
            for ports, forwarder in self._targets:
                forwarder.set_target(target_of(info, ports))
