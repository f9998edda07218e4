"""Master side of AutoSwitch HA (DESIGN.md §3.2/§3.3; seed controller-mode-design;
RocketMQ ``AutoSwitchHAConnection``).

Theory of operation
-------------------
One listening socket; one connection per slave, driven by two tasks once the
handshake is done (a sender and an ack reader). Per connection::

    slave  -> SlaveHandshake(brokerId, flags)
    master -> MasterHandshake(maxPhyOffset, lastEpoch, all epoch entries)
              (the slave computes its truncation point and truncates)
    slave  -> SlaveAck(maxOffset)          <- the *transfer request*
    master -> Transfer(offset = that maxOffset, ...) ... (stream)
    slave  -> SlaveAck(new maxOffset) after every Transfer, heartbeats included

**The first ack is the transfer request** (as ``slaveRequestOffset`` in
RocketMQ): the slave's max offset *after* truncation is exactly where its log
and the master's agree, so the master streams from there. If that offset is
below the master's min offset (the master already deleted those segments, or
the slave is new and empty) the master starts at its min offset -- or, with
``isSyncFromLastFile`` and an empty slave, at its last segment's start -- and
the slave, seeing a first batch beyond its own end, resets its log there (a
full resync). An offset beyond the master's max is a protocol violation (the
slave did not truncate) and closes the connection.

Sending: each batch is at most ``transfer_batch_bytes``, ends at the segment's
end (one ``FileRange``), and is cut at the next epoch's start offset so that
**no batch spans two epochs** (seed: currentTransferEpochEndOffset); the
header names the batch's epoch and that epoch's start offset. The 36-byte
header goes out with ``sock_sendall``; the body goes from the segment file
straight to the socket with ``os.sendfile`` on the store's ``read_range``
slice -- no copy through Python bytes. When there is nothing to send the
sender sleeps on an event set by ``notify_appended()`` (no polling) or by a
changed confirm offset, and sends an empty-body heartbeat every
``heartbeat_interval_ms`` of silence.

Caught-up tracking (seed, "Shrink SyncStateSet"): when a batch (or heartbeat)
is sent the master records ``(lastMasterMaxOffset = its max offset,
lastTransferTimeMs = now)``; an ack >= lastMasterMaxOffset sets
``lastCaughtUpTimeMs = lastTransferTimeMs``. Because batches are pipelined (the
master does not wait for an ack before the next batch) a single pair would be
overwritten before its ack arrives and a slave that keeps up under steady load
would never count as caught up; so the pairs of unacked sends are kept in a
bounded FIFO and an ack consumes every pair it covers. With one batch in
flight this is exactly the seed's rule.

Stopping (``stop``): the last confirmOffset is what the master acknowledged, and
at any instant it may still be held back by ``confirm_publish_delay_ms`` or ride on
no batch at all. So a stop drains each streaming connection, bounded by
``stop_drain_timeout_ms``: the sender sends the confirmOffset its slave has not
heard (no more data: what a slave lacks was not acknowledged), half-closes, and
reads acks until the slave closes its side -- the slave has then read that frame.
A role that stopped taking writes (``writes_stopped``) sends a moved confirmOffset
at once, since no batch will come to carry it. A slave promoted next thus starts
from what this master acknowledged; a new master does not rely on it either
(core/replication.py computes its confirmOffset from its SyncStateSet at once).

Invariants
----------
* A batch's bytes all lie in one epoch: ``epochStartOffset <= offset`` and
  ``offset + bodySize <= next epoch's start``.
* Batches of one connection are contiguous: each starts where the last ended.
* Acks of one connection never decrease and never exceed what was sent.
* At most one live connection per slave brokerId: a newer one replaces (and
  closes) the older, and only the current one reports the disconnect.
* Every wait is bounded: reads by ``read_timeout_ms`` (the slave acks each
  heartbeat), writes by ``write_timeout_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable

from brokergroup_broker.ha import auth
from brokergroup_broker.ha.codec import (
    HAProtocolError,
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    WireEpochEntry,
)
from brokergroup_broker.ha.config import HAConfig
from brokergroup_broker.ha.link import TlsLink
from brokergroup_broker.ha.master_connection import (
    ConnectionClosed,
    SlaveConnection,
    SlaveProgress,
)
from brokergroup_broker.ha.master_stream import SlaveNeedsDeletedData, SlaveStreams
from brokergroup_broker.store import MessageStore

__all__ = ["HAMasterService", "SlaveProgress"]

log = logging.getLogger(__name__)


class HAMasterService:
    """Streams the master's commit log to its slaves (one listener, one task per slave).

    Call ``start`` only after the epoch file holds this master's entry
    ``(master_epoch, startOffset)`` (DESIGN §3.2, "On becoming master").
    Callbacks run on the event loop and must not block.
    """

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        *,
        master_epoch: int,
        on_slave_ack: Callable[[int, int], None],
        on_slave_disconnect: Callable[[int], None],
        now_ms: Callable[[], int],
        registered_host: Callable[[int], str | None] | None = None,
    ) -> None:
        """`registered_host(broker_id)`: the host the controller registered for that
        broker (None if unknown); a handshake from any other host is refused. None
        skips the check (in-process tests)."""
        self._store = store
        self._registered_host = registered_host
        self._config = config
        self._master_epoch = master_epoch
        self._on_slave_ack = on_slave_ack
        self._on_slave_disconnect = on_slave_disconnect
        self._now_ms = now_ms
        self._confirm_offset = 0
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._connections: set[SlaveConnection] = set()
        self._by_broker: dict[int, SlaveConnection] = {}
        self._progress: dict[int, SlaveProgress] = {}
        self._stopping = False
        self._writes_stopped = False
        self._streams = SlaveStreams(
            store,
            config,
            master_epoch=master_epoch,
            now_ms=now_ms,
            confirm_offset=lambda: self._confirm_offset,
            publish=self._publish,
            on_slave_ack=on_slave_ack,
            writes_stopped=lambda: self._writes_stopped,
            stopping=lambda: self._stopping,
        )

    # ------------------------------------------------------------------ public API

    @property
    def bound_address(self) -> tuple[str, int]:
        """The listening (host, port); useful with port 0."""
        if self._listener is None:
            raise RuntimeError("HAMasterService is not started")
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def master_epoch(self) -> int:
        return self._master_epoch

    async def start(self, bind_host: str, port: int) -> None:
        if self._listener is not None:
            raise RuntimeError("HAMasterService already started")
        last_epoch = self._store.epoch_file.last_epoch()
        if last_epoch != self._master_epoch:
            # Slaves would be told one epoch and sent batches of another: refuse.
            raise RuntimeError(
                f"HA master for epoch {self._master_epoch} cannot start: the epoch file's last "
                f"epoch is {last_epoch}; append (masterEpoch, maxPhyOffset) before starting"
            )
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        listener = socket.socket(
            socket.AF_INET6 if ":" in bind_host else socket.AF_INET, socket.SOCK_STREAM
        )
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((bind_host, port))
            listener.listen(64)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._stopping = False
        self._accept_task = asyncio.create_task(self._accept_loop(), name="ha-master-accept")
        log.info(
            "HA master (epoch %d) listening on %s:%d",
            self._master_epoch,
            *self.bound_address,
        )

    async def stop(self) -> None:
        """Close the listener and every slave connection; waits for their tasks.

        Streaming connections are drained first, for at most
        ``stop_drain_timeout_ms``: each sends the confirmOffset its slave has not
        heard yet, at once, then half-closes, and the slave reads that frame before
        the end of the stream (master_stream.SlaveStreams.send_loop). So a slave
        promoted next, or acting as master, starts from everything this master
        acknowledged. The rest is cancelled."""
        self._stopping = True
        tasks: list[asyncio.Task[None]] = []
        if self._accept_task is not None:
            tasks.append(self._accept_task)
            self._accept_task = None
        draining: list[asyncio.Task[None]] = []
        for conn in list(self._connections):
            if conn.task is None:
                continue
            # Streaming (past the handshake): drain it; still shaking hands: cut it.
            (draining if conn.next_offset >= 0 else tasks).append(conn.task)
        for task in tasks:
            task.cancel()
        if draining:
            self._wake_all()
            await asyncio.wait(draining, timeout=self._config.stop_drain_timeout_ms / 1000)
            tasks.extend(draining)
        for task in tasks:
            task.cancel()
        # Tasks close their own sockets; the listener goes after its accept task ended, so
        # no selector registration outlives the fd.
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def writes_stopped(self) -> None:
        """No more appends under this master (its role stopped taking writes): a moved
        confirmOffset goes to the slaves at once, as no batch will come to carry it."""
        self._writes_stopped = True
        self.notify_appended()

    def set_confirm_offset(self, offset: int) -> None:
        """The confirmOffset carried in every following transfer header; an idle link
        carries a change in an empty transfer `confirm_publish_delay_ms` later, unless a
        batch carried it first."""
        if offset < 0:
            raise ValueError(f"confirm offset {offset} must be >= 0")
        if offset != self._confirm_offset:
            self._confirm_offset = offset
            self.notify_appended()

    @property
    def confirm_offset(self) -> int:
        return self._confirm_offset

    def notify_appended(self) -> None:
        """Wake every sender: the commit log (or confirm offset) moved. Thread-safe."""
        loop = self._loop
        if loop is None:
            return
        if threading.get_ident() == self._loop_thread:
            self._wake_all()
        else:
            with contextlib.suppress(RuntimeError):  # loop already closed
                loop.call_soon_threadsafe(self._wake_all)

    def slaves(self) -> dict[int, SlaveProgress]:
        """brokerId -> progress for every slave seen since start (disconnected included)."""
        return dict(self._progress)

    # ------------------------------------------------------------------ accept / serve

    def _wake_all(self) -> None:
        for conn in self._connections:
            conn.wake.set()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        listener = self._listener
        assert listener is not None
        while not self._stopping:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:
                if self._stopping:
                    return
                log.warning("HA master: accept failed: %s", exc)
                await asyncio.sleep(0.05)  # e.g. EMFILE: do not spin
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conn = SlaveConnection(
                    sock=sock,
                    address=f"{peer[0]}:{peer[1]}",
                    decoder=SlaveFrameDecoder(self._config.max_frame_body_bytes),
                )
            except OSError as exc:  # the peer may already be gone
                log.warning("HA master: could not set up connection from %s: %s", peer, exc)
                sock.close()
                continue
            self._connections.add(conn)
            conn.task = asyncio.create_task(self._serve(conn), name=f"ha-master-{conn.address}")

    async def _serve(self, conn: SlaveConnection) -> None:
        try:
            await self._serve_inner(conn)
        except asyncio.CancelledError:
            raise
        except SlaveNeedsDeletedData as exc:
            log.warning("HA master: closing the connection to %s: %s", conn.address, exc)
        except HAProtocolError as exc:
            log.error(
                "HA master: slave %s (broker %s) broke the protocol: %s",
                conn.address,
                conn.broker_id,
                exc,
            )
        except ConnectionClosed:
            log.info(
                "HA master: slave %s (broker %s) closed the connection",
                conn.address,
                conn.broker_id,
            )
        except TimeoutError:
            log.warning(
                "HA master: slave %s (broker %s) timed out (read %d ms / write %d ms)",
                conn.address,
                conn.broker_id,
                self._config.read_timeout_ms,
                self._config.write_timeout_ms,
            )
        except OSError as exc:
            log.warning(
                "HA master: connection to slave %s (broker %s) failed: %s",
                conn.address,
                conn.broker_id,
                exc,
            )
        except Exception:
            log.exception(
                "HA master: unexpected error serving slave %s (broker %s)",
                conn.address,
                conn.broker_id,
            )
        finally:
            self._close(conn)

    def _close(self, conn: SlaveConnection) -> None:
        self._connections.discard(conn)
        with contextlib.suppress(OSError):
            conn.sock.close()
        broker_id = conn.broker_id
        if broker_id is None or self._by_broker.get(broker_id) is not conn:
            return  # never identified itself, or already replaced by a newer connection
        del self._by_broker[broker_id]
        self._publish(conn, False)
        try:
            self._on_slave_disconnect(broker_id)
        except Exception:
            log.exception("HA master: on_slave_disconnect(%d) failed", broker_id)

    async def _authenticate(self, conn: SlaveConnection) -> None:
        """ha/auth.py: fixed-length challenge and proof, checked before any frame."""
        secret = self._config.secret
        if secret is None:
            return
        nonce = os.urandom(auth.NONCE_BYTES)
        await self._streams.send(conn, auth.challenge(nonce))
        proof = await self._read_exact(conn, auth.SLAVE_PROOF_BYTES)
        try:
            slave_nonce = auth.check_slave_proof(secret, nonce, proof)
        except auth.HAAuthError as exc:
            raise HAProtocolError(f"authentication failed: {exc}") from exc
        await self._streams.send(conn, auth.master_proof(secret, nonce, slave_nonce))

    async def _read_exact(self, conn: SlaveConnection, n: int) -> bytes:
        assert conn.link is not None
        data = b""
        async with asyncio.timeout(self._config.read_timeout_ms / 1000):
            while len(data) < n:
                chunk = await conn.link.recv(n - len(data))
                if not chunk:
                    raise ConnectionClosed()
                data += chunk
        return data

    async def _open_tls(self, conn: SlaveConnection) -> None:
        """Mutual TLS first when configured (ha/link.py): the slave's certificate must chain
        to the CA, or the connection ends here, before the HA secret's challenge."""
        context = self._config.tls_server
        if context is None:
            return
        link = TlsLink(conn.sock, context, server_side=True)
        try:
            async with asyncio.timeout(self._config.read_timeout_ms / 1000):
                await link.handshake()
        except ssl.SSLError as exc:
            raise HAProtocolError(f"no TLS session: {exc}") from exc
        conn.link = link

    async def _serve_inner(self, conn: SlaveConnection) -> None:
        await self._open_tls(conn)
        await self._authenticate(conn)
        handshake = await self._streams.read_frame(conn)
        if not isinstance(handshake, SlaveHandshake):
            raise HAProtocolError(f"expected a handshake first, got {handshake!r}")
        self._register(conn, handshake)

        entries = self._store.epoch_file.entries()
        max_offset = self._store.max_offset
        reply = MasterHandshake(
            max_phy_offset=max_offset,
            last_epoch=self._store.epoch_file.last_epoch(),
            epoch_entries=tuple(WireEpochEntry(e.epoch, e.start_offset) for e in entries),
        )
        await self._streams.send(conn, reply.encode())

        request = await self._streams.read_frame(conn)
        if not isinstance(request, SlaveAck):
            raise HAProtocolError(
                f"expected the slave's first ack (its max offset), got {request!r}"
            )
        start = self._start_offset(conn, request.max_offset, handshake.is_sync_from_last_file)
        conn.next_offset = start
        self._streams.accept_ack(conn, request.max_offset, first=True)
        log.info(
            "HA master: slave broker %d at %s requests offset %d; transfer starts at %d "
            "(master max %d, min %d)",
            conn.broker_id,
            conn.address,
            request.max_offset,
            start,
            self._store.max_offset,
            self._store.min_offset,
        )

        sender = asyncio.create_task(self._streams.send_loop(conn), name=f"ha-send-{conn.address}")
        reader = asyncio.create_task(self._streams.ack_loop(conn), name=f"ha-acks-{conn.address}")
        try:
            done, _ = await asyncio.wait({sender, reader}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done and not sender.cancelled() and sender.exception() is None:
                await self._finish_drain(conn, reader)
                return
        finally:
            for task in (sender, reader):
                task.cancel()
            for task in (sender, reader):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        for task in done:
            if not task.cancelled() and (exc := task.exception()) is not None:
                raise exc

    async def _finish_drain(self, conn: SlaveConnection, reader: asyncio.Task[None]) -> None:
        """The sender returned (``stop``): its last frame is queued. Half-close and read
        acks until the slave, having read every frame before our end of stream, closes
        its side. Closing at once could reset the connection under a frame the slave
        has not read (a close with unread acks sends RST); ``stop`` bounds the wait."""
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_WR)
        with contextlib.suppress(ConnectionClosed, OSError, HAProtocolError, TimeoutError):
            await reader
        log.info(
            "HA master: stream to slave broker %s at %s drained (last confirmOffset %d)",
            conn.broker_id,
            conn.address,
            self._confirm_offset,
        )

    def _register(self, conn: SlaveConnection, handshake: SlaveHandshake) -> None:
        broker_id = handshake.slave_broker_id
        if self._registered_host is not None:
            # A broker id is accepted only from the address the controller registered
            # for it: another process (even with the secret) cannot take its place.
            expected = self._registered_host(broker_id)
            peer_host = conn.address.rsplit(":", 1)[0]
            if expected != peer_host:
                raise HAProtocolError(
                    f"handshake claims broker {broker_id} from {peer_host}, but the controller "
                    f"registered broker {broker_id} at {expected or 'no address'}"
                )
        old = self._by_broker.get(broker_id)
        if old is not None and old is not conn:
            # A reconnect can beat the old socket's timeout: the newest connection wins.
            log.warning(
                "HA master: broker %d reconnected from %s; closing its old connection %s",
                broker_id,
                conn.address,
                old.address,
            )
            # Its task closes its own socket once cancelled, after its selector callbacks
            # are gone (closing it here could let a new socket reuse the registered fd).
            if old.task is not None:
                old.task.cancel()
            conn.last_caught_up_ms = old.last_caught_up_ms
        previous = self._progress.get(broker_id)
        if previous is not None:
            conn.last_caught_up_ms = max(conn.last_caught_up_ms, previous.last_caught_up_ms)
        conn.broker_id = broker_id
        conn.is_async_learner = handshake.is_async_learner
        self._by_broker[broker_id] = conn
        self._publish(conn, connected=True)
        log.info(
            "HA master: handshake from slave broker %d at %s (learner=%s, fromLastFile=%s)",
            broker_id,
            conn.address,
            handshake.is_async_learner,
            handshake.is_sync_from_last_file,
        )

    def _start_offset(self, conn: SlaveConnection, requested: int, from_last_file: bool) -> int:
        store = self._store
        min_offset, max_offset = store.min_offset, store.max_offset
        if requested > max_offset:
            raise HAProtocolError(
                f"slave broker {conn.broker_id} requests offset {requested} beyond the master's "
                f"max offset {max_offset}: it did not truncate to the handshake's point"
            )
        if requested >= min_offset and not (requested == 0 and from_last_file):
            return requested
        if from_last_file and requested == 0:
            segment = store.config.commit_log_segment_bytes
            last_file_start = max(min_offset, max_offset - max_offset % segment)
            return last_file_start
        # The master no longer holds the slave's next byte: full resync from our min.
        log.warning(
            "HA master: slave broker %d requests offset %d below the master's min offset %d; "
            "it restarts from %d (full resync)",
            conn.broker_id,
            requested,
            min_offset,
            min_offset,
        )
        return min_offset

    def _publish(self, conn: SlaveConnection, connected: bool) -> None:
        assert conn.broker_id is not None
        self._progress[conn.broker_id] = SlaveProgress(
            broker_id=conn.broker_id,
            ack_offset=conn.ack_offset,
            last_caught_up_ms=conn.last_caught_up_ms,
            connected=connected,
            is_async_learner=conn.is_async_learner,
            address=conn.address,
        )
