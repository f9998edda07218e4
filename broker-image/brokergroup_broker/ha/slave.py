"""Slave side of AutoSwitch HA (DESIGN.md §3.2; seed controller-mode-design;
RocketMQ ``AutoSwitchHAClient``).

Theory of operation
-------------------
``run(master)`` loops until ``stop()``: connect, handshake, truncate, transfer;
any failure closes the socket and reconnects after a bounded exponential
backoff (reset once a session reaches the transfer stage). One session::

    -> SlaveHandshake(brokerId, isSyncFromLastFile, isAsyncLearner)
    <- MasterHandshake(maxPhyOffset, lastEpoch, epoch entries)
       find_truncation_point(local epochs, master epochs, local max, master max)
       common epoch: store.truncate(point); epoch_file.truncate_suffix(point)
       no common epoch / no local epochs: drop the whole local log (full resync;
       logged at ERROR unless this is a new, empty replica)
    -> SlaveAck(store.max_offset)          (the transfer request, see master.py)
    <- Transfer ...   for each: check, record epoch, append, ack, report confirm

Per transfer frame, in this order:

1. ``offset`` must equal ``store.max_offset`` -- otherwise the streams
   disagree and the session ends (the next handshake re-truncates). The one
   exception is the *first* batch starting beyond the slave's end when the
   master no longer holds the requested offset (see master.py): the slave
   then drops its log and restarts it at that offset (full resync, loud).
2. A non-empty body whose ``epoch`` differs from the local last epoch first
   appends ``(epoch, epochStartOffset)`` to the epoch file, **before** the
   data is written: a crash in between leaves an epoch entry without data
   (harmless, truncation ignores the gap) rather than data without its epoch.
3. ``store.append_replicated(offset, body, flush=False)`` (on the loop: a
   page-cache write), then on SYNC_FLUSH ask the group commit thread (``GroupCommitService``) to
   fdatasync up to the new max offset; the reader goes on to the next frame
   meanwhile, so receiving, writing and syncing overlap and one fdatasync
   covers every frame that arrived while the previous one ran.
4. Ack the *durable* offset: on SYNC_FLUSH ``min(flushed_offset, max_offset)``,
   sent by the ack task whenever a sync finishes, so an ack never covers a
   byte a crash could lose (DESIGN §3.1); on ASYNC_FLUSH the max offset. Every
   frame leads to an ack (heartbeats at once), so the master's caught-up clock
   and read timeout keep moving on an idle group; acks of frames that arrive
   together may be coalesced into one (the highest), which covers them all.
5. ``on_confirm_offset(min(header confirmOffset, own max))`` when it changed.

Before the first ack (the transfer request) the session fdatasyncs the log, so
the request -- the max offset -- is durable and later durable acks never go
below it.

Invariants
----------
* Every appended byte is at the offset the master says it is, and lies in the
  epoch the local epoch file says it does.
* The epoch file's epochs never decrease (a transfer with an epoch below the
  local last epoch is a protocol error).
* Buffers and waits are bounded: one decoder (one frame + one read), reads
  by ``read_timeout_ms``, connect/handshake by ``connect_timeout_ms``, writes
  by ``write_timeout_ms``, backoff by ``reconnect_backoff_max_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
from collections.abc import Callable

from brokergroup_broker.ha import auth
from brokergroup_broker.ha.codec import (
    NEED_DATA,
    HAProtocolError,
    MasterFrame,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveHandshake,
    Transfer,
)
from brokergroup_broker.ha.config import HAConfig
from brokergroup_broker.ha.link import Link, PlainLink, TlsLink
from brokergroup_broker.ha.truncation import (
    TruncationPoint,
    TruncationReason,
    find_truncation_point,
)
from brokergroup_broker.store import FlushDiskType, GroupCommitService, MessageStore, StoreError
from brokergroup_controller.backoff import BackoffPolicy

__all__ = ["HASlaveService", "ReplicationDiverged"]

log = logging.getLogger(__name__)


class ReplicationDiverged(Exception):
    """A transfer does not continue the local log; reconnect and re-handshake."""


class _ConnectionClosed(Exception):
    """The master closed the socket."""


class HASlaveService:
    """Follows one master: truncates at handshake, then appends what it streams.

    ``on_confirm_offset`` runs on the event loop and must not block.
    """

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        *,
        broker_id: int,
        on_confirm_offset: Callable[[int], None],
    ) -> None:
        self._store = store
        self._config = config
        self._broker_id = broker_id
        self._on_confirm_offset = on_confirm_offset
        self._stop_requested = asyncio.Event()
        self._session: asyncio.Task[None] | None = None
        self._running = False
        self._run_finished = asyncio.Event()
        self._run_finished.set()
        self._reported_confirm = -1
        self._last_truncation: TruncationPoint | None = None
        self._connected = False
        self._sessions = 0
        self._committer: GroupCommitService | None = None
        self._ack_wanted: asyncio.Event | None = None  # the current session's

    # ------------------------------------------------------------------ public API

    @property
    def connected(self) -> bool:
        """True while a session is in the transfer stage."""
        return self._connected

    @property
    def last_truncation(self) -> TruncationPoint | None:
        """The truncation decision of the latest handshake (for status and tests)."""
        return self._last_truncation

    @property
    def sessions(self) -> int:
        """How many sessions reached the transfer stage since construction."""
        return self._sessions

    async def run(self, master_ha_address: tuple[str, int]) -> None:
        """Replicate from ``master_ha_address`` until ``stop()``; reconnects on any failure.

        ``stop()`` is final: it also wins when called before this coroutine got to run
        (a task created and stopped at once), and a later ``run`` returns immediately.
        Following another master means a new HASlaveService (a cheap object).
        """
        if self._running:
            raise RuntimeError("HASlaveService.run is already running")
        self._running = True
        self._run_finished.clear()
        backoff = BackoffPolicy(
            initial_ms=self._config.reconnect_backoff_min_ms,
            max_ms=self._config.reconnect_backoff_max_ms,
        )
        backoff_ms = backoff.initial_ms
        if self._store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            loop = asyncio.get_running_loop()

            def flushed(_offset: int) -> None:
                with contextlib.suppress(RuntimeError):  # loop already closed
                    loop.call_soon_threadsafe(self._flushed)

            self._committer = GroupCommitService(
                self._store, on_flushed=flushed, name=f"ha-slave-{self._broker_id}-commit"
            )
            self._committer.start()
        try:
            while not self._stop_requested.is_set():
                sessions_before = self._sessions
                self._session = asyncio.create_task(
                    self._run_session(master_ha_address), name=f"ha-slave-{self._broker_id}"
                )
                try:
                    await asyncio.wait({self._session})
                finally:
                    if not self._session.done():  # run() itself was cancelled
                        self._session.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await self._session
                self._connected = False
                if self._stop_requested.is_set():
                    break
                if self._sessions > sessions_before:
                    backoff_ms = backoff.initial_ms
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff_ms / 1000):
                        await self._stop_requested.wait()
                backoff_ms = backoff.next_ms(backoff_ms)
        finally:
            self._connected = False
            self._session = None
            committer, self._committer = self._committer, None
            if committer is not None:
                await asyncio.shield(asyncio.to_thread(committer.stop))
            self._running = False
            self._run_finished.set()

    async def stop(self) -> None:
        """End the session and make ``run`` return (now and for good); waits, bounded."""
        self._stop_requested.set()
        if self._session is not None:
            self._session.cancel()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._config.write_timeout_ms / 1000 + 1):
                await self._run_finished.wait()

    # ------------------------------------------------------------------ one session

    async def _run_session(self, master: tuple[str, int]) -> None:
        where = f"{master[0]}:{master[1]}"
        try:
            await self._session_inner(master)
        except asyncio.CancelledError:
            raise
        except HAProtocolError as exc:
            log.error("HA slave %d: master %s broke the protocol: %s", self._broker_id, where, exc)
        except ReplicationDiverged as exc:
            log.warning("HA slave %d: %s; reconnecting to %s", self._broker_id, exc, where)
        except _ConnectionClosed:
            log.info("HA slave %d: master %s closed the connection", self._broker_id, where)
        except TimeoutError:
            log.warning("HA slave %d: master %s timed out", self._broker_id, where)
        except StoreError as exc:
            log.error(
                "HA slave %d: store refused replicated data from %s: %s",
                self._broker_id,
                where,
                exc,
            )
        except OSError as exc:
            log.info("HA slave %d: connection to master %s failed: %s", self._broker_id, where, exc)
        except Exception:
            log.exception(
                "HA slave %d: unexpected error replicating from %s", self._broker_id, where
            )

    async def _session_inner(self, master: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        family = socket.AF_INET6 if ":" in master[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            decoder = MasterFrameDecoder(self._config.max_frame_body_bytes)
            connect_s = self._config.connect_timeout_ms / 1000
            if self._config.source_host is not None:
                sock.bind((self._config.source_host, 0))
            async with asyncio.timeout(connect_s):
                await loop.sock_connect(sock, master)
            link = await self._open_link(sock, master[0])
            async with asyncio.timeout(connect_s):
                await self._authenticate(link)
                await link.sendall(
                    SlaveHandshake(
                        slave_broker_id=self._broker_id,
                        is_sync_from_last_file=self._config.sync_from_last_file,
                        is_async_learner=self._config.async_learner,
                    ).encode(),
                )
            handshake = await self._read_frame(link, decoder, self._config.read_timeout_ms)
            if not isinstance(handshake, MasterHandshake):
                raise HAProtocolError(f"expected the master's handshake first, got {handshake!r}")
            point = self._truncate(handshake)
            if self._committer is not None:
                # Earlier sessions' writes may still await their sync: make the request
                # durable, so no later (durable) ack can be below it.
                await asyncio.to_thread(self._store.sync_log)
            requested = self._store.max_offset
            await self._send(link, SlaveAck(max_offset=requested).encode())
            self._connected = True
            self._sessions += 1
            log.info(
                "HA slave %d: replicating from %s:%d at offset %d (%s)",
                self._broker_id,
                master[0],
                master[1],
                requested,
                point.reason.name,
            )
            first = True
            ack_wanted = self._ack_wanted = asyncio.Event()
            acker = asyncio.create_task(self._ack_loop(link, ack_wanted, requested))
            try:
                while True:
                    frame = await self._read_frame(link, decoder, self._config.read_timeout_ms)
                    if not isinstance(frame, Transfer):
                        raise HAProtocolError("a second master handshake during transfer")
                    if acker.done():
                        acker.result()  # raises what ended it
                        raise _ConnectionClosed()
                    await self._apply(frame, first=first, requested=requested)
                    first = False
                    if frame.body and self._committer is not None:
                        self._committer.request(self._store.max_offset)  # acked once synced
                    else:
                        ack_wanted.set()
                    self._report_confirm(frame.confirm_offset)
            finally:
                self._ack_wanted = None
                acker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await acker
        finally:
            self._connected = False
            with contextlib.suppress(OSError):
                sock.close()

    def _flushed(self) -> None:
        """A sync finished: ack it, and serve what it made readable to held pulls (a
        record below confirmOffset is readable on SYNC_FLUSH once it is durable here)."""
        self._wake_acker()
        self._store.flushed_moved()

    def _wake_acker(self) -> None:
        if self._ack_wanted is not None:
            self._ack_wanted.set()

    def _durable_offset(self) -> int:
        store = self._store
        if self._committer is None:
            return store.max_offset
        return min(store.flushed_offset, store.max_offset)

    async def _ack_loop(self, link: Link, wanted: asyncio.Event, floor: int) -> None:
        """Send the durable offset whenever a frame or a finished sync asks for an ack.
        One task owns the socket's write side, so acks never interleave."""
        last = floor
        while True:
            await wanted.wait()
            wanted.clear()
            offset = max(self._durable_offset(), last)
            last = offset
            await self._send(link, SlaveAck(max_offset=offset).encode())

    # ------------------------------------------------------------------ decisions + store

    def _truncate(self, handshake: MasterHandshake) -> TruncationPoint:
        store = self._store
        local_max = store.max_offset
        point = find_truncation_point(
            store.epoch_file.entries(),
            handshake.epoch_entries,
            local_max,
            handshake.max_phy_offset,
        )
        self._last_truncation = point
        if point.full_resync:
            empty = local_max == store.min_offset
            if point.reason is TruncationReason.EMPTY_LOCAL and empty:
                log.info(
                    "HA slave %d: new replica, copying from the master (%s)",
                    self._broker_id,
                    point.detail,
                )
            else:
                log.error(
                    "HA slave %d: FULL RESYNC, dropping the local commit log: %s (%s)",
                    self._broker_id,
                    point.reason.value,
                    point.detail,
                )
            # Restart the log at the segment boundary at or below the master's min offset; if
            # that is still below what the master holds, its first batch moves us up (_apply).
            segment = store.config.commit_log_segment_bytes
            restart = point.offset - point.offset % segment
            if not (empty and store.min_offset == restart):
                store.reset(restart)
            store.epoch_file.truncate_suffix(-1)  # drops every entry
            return point
        if point.offset < store.min_offset:
            # The common prefix ends before our log starts (our old segments are gone):
            # nothing local is usable; restart at the boundary below the point.
            segment = store.config.commit_log_segment_bytes
            log.error(
                "HA slave %d: FULL RESYNC, truncation point %d is below the local min offset "
                "%d: %s",
                self._broker_id,
                point.offset,
                store.min_offset,
                point.detail,
            )
            store.reset(point.offset - point.offset % segment)
        elif point.offset < local_max:
            log.warning(
                "HA slave %d: truncating %d bytes of divergent tail: %s",
                self._broker_id,
                local_max - point.offset,
                point.detail,
            )
            store.truncate(point.offset)
        else:
            log.info("HA slave %d: no truncation needed: %s", self._broker_id, point.detail)
        store.epoch_file.truncate_suffix(point.offset)
        return point

    async def _apply(self, frame: Transfer, *, first: bool, requested: int) -> None:
        store = self._store
        local_max = store.max_offset
        if frame.offset != local_max:
            if first and frame.offset > requested:
                # The master no longer holds our next byte (see master.py): restart there.
                log.error(
                    "HA slave %d: FULL RESYNC, master's log starts at %d beyond ours at "
                    "%d; dropping the local commit log",
                    self._broker_id,
                    frame.offset,
                    local_max,
                )
                self._restart_log_at(frame.offset)
            else:
                raise ReplicationDiverged(
                    f"master sent offset {frame.offset} but the local log ends at {local_max}"
                )
        if not frame.body:
            return
        last_epoch = store.epoch_file.last_epoch()
        if frame.epoch != last_epoch:
            if frame.epoch < last_epoch:
                raise HAProtocolError(
                    f"batch at {frame.offset} is in epoch {frame.epoch}, below the local last "
                    f"epoch {last_epoch}"
                )
            # Epoch first, data second (see module docstring).
            store.epoch_file.append(frame.epoch, frame.epoch_start_offset)
        # On the event loop, never with an fdatasync: on SYNC_FLUSH that is the group commit
        # thread's (see the module docstring), on ASYNC_FLUSH the store's flush timer's. A
        # pwrite into the page cache is short, a thread hop per frame cost more CPU than it
        # saved, and a write done inline cannot outlive a cancelled session (so it cannot
        # land after the next handshake computed its truncation point).
        store.append_replicated(frame.offset, frame.body, flush=False)

    def _restart_log_at(self, offset: int) -> None:
        self._store.reset(offset)  # a segment boundary: the master's min offset
        self._store.epoch_file.truncate_suffix(-1)

    def _report_confirm(self, header_confirm: int) -> None:
        confirm = min(header_confirm, self._store.max_offset)
        if confirm == self._reported_confirm:
            return
        self._reported_confirm = confirm
        try:
            self._on_confirm_offset(confirm)
        except Exception:
            log.exception("HA slave %d: on_confirm_offset(%d) failed", self._broker_id, confirm)

    # ------------------------------------------------------------------ socket helpers

    async def _open_link(self, sock: socket.socket, master_host: str) -> Link:
        """TLS to the master when configured (ha/link.py): its certificate is verified
        against the CA for `master_host`, ours presented; else the bare socket."""
        context = self._config.tls_client
        if context is None:
            return PlainLink(sock)
        name = self._config.tls_server_name or master_host
        link = TlsLink(sock, context, server_side=False, server_hostname=name)
        try:
            async with asyncio.timeout(self._config.connect_timeout_ms / 1000):
                await link.handshake()
        except ssl.SSLError as exc:
            raise HAProtocolError(f"no TLS session with the master: {exc}") from exc
        return link

    async def _authenticate(self, link: Link) -> None:
        """ha/auth.py, slave side: prove the secret, then check the master's proof."""
        secret = self._config.secret
        if secret is None:
            return
        challenge = await self._read_exact(link, auth.CHALLENGE_BYTES)
        slave_nonce = os.urandom(auth.NONCE_BYTES)
        try:
            await link.sendall(auth.slave_proof(secret, challenge, slave_nonce))
            proof = await self._read_exact(link, auth.MASTER_PROOF_BYTES)
            auth.check_master_proof(secret, challenge[len(auth.MAGIC) :], slave_nonce, proof)
        except auth.HAAuthError as exc:
            raise HAProtocolError(f"authentication failed: {exc}") from exc

    async def _read_exact(self, link: Link, n: int) -> bytes:
        data = b""
        async with asyncio.timeout(self._config.read_timeout_ms / 1000):
            while len(data) < n:
                chunk = await link.recv(n - len(data))
                if not chunk:
                    raise _ConnectionClosed()
                data += chunk
        return data

    async def _send(self, link: Link, data: bytes) -> None:
        async with asyncio.timeout(self._config.write_timeout_ms / 1000):
            await link.sendall(data)

    async def _read_frame(
        self, link: Link, decoder: MasterFrameDecoder, timeout_ms: int
    ) -> MasterFrame:
        while True:
            event = decoder.next_event()
            if event is not NEED_DATA:
                return event
            async with asyncio.timeout(timeout_ms / 1000):
                data = await link.recv(self._config.read_chunk_bytes)
            if not data:
                raise _ConnectionClosed()
            decoder.receive_data(data)
