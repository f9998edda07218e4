"""The two streams of one slave connection on the HA master (DESIGN.md §3.2,
seed controller-mode-design "transfer"): log batches and heartbeats out
(sendfile from segments, each batch headed by its epoch and confirmOffset),
acks in (never beyond what was sent on this connection). `HAMasterService` makes
one `SlaveStreams` and serves every connection through it; the master owns the
connections, confirmOffset and the published progress, and hands in what this
needs as callables."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import os
import socket
from collections.abc import Callable

from brokergroup_broker.ha.codec import (
    NEED_DATA,
    HAProtocolError,
    SlaveAck,
    SlaveFrame,
    Transfer,
    encode_transfer_header,
)
from brokergroup_broker.ha.config import HAConfig
from brokergroup_broker.ha.link import TlsLink
from brokergroup_broker.ha.master_connection import (
    ConnectionClosed,
    SlaveConnection,
    set_done,
)
from brokergroup_broker.store import MessageStore

log = logging.getLogger(__name__)


class SlaveNeedsDeletedData(Exception):
    """A slave's next byte is below the master's min offset (retention deleted it)."""


class SlaveStreams:
    """Sends and acks of the HA master's slave connections."""

    def __init__(
        self,
        store: MessageStore,
        config: HAConfig,
        *,
        master_epoch: int,
        now_ms: Callable[[], int],
        confirm_offset: Callable[[], int],
        publish: Callable[[SlaveConnection, bool], None],
        on_slave_ack: Callable[[int, int], None],
        writes_stopped: Callable[[], bool] = lambda: False,
        stopping: Callable[[], bool] = lambda: False,
    ) -> None:
        """`confirm_offset()`: the master's current confirmOffset for transfer headers;
        `publish(conn, connected)`: the master records the connection's progress;
        `writes_stopped()`: no batch will come to carry a moved confirmOffset, so it
        goes at once; `stopping()`: the master stops, `send_loop` sends what
        confirmOffset it has not sent and returns (the drain, see `send_loop`)."""
        self._store = store
        self._config = config
        self._master_epoch = master_epoch
        self._now_ms = now_ms
        self._confirm_offset = confirm_offset
        self._publish = publish
        self._on_slave_ack = on_slave_ack
        self._writes_stopped = writes_stopped
        self._stopping = stopping

    async def ack_loop(self, conn: SlaveConnection) -> None:
        while True:
            frame = await self.read_frame(conn)
            if not isinstance(frame, SlaveAck):
                raise HAProtocolError(f"expected an ack during transfer, got {frame!r}")
            self.accept_ack(conn, frame.max_offset, first=False)

    def accept_ack(self, conn: SlaveConnection, ack: int, *, first: bool) -> None:
        assert conn.broker_id is not None
        if not first:
            if ack < conn.ack_offset:
                raise HAProtocolError(
                    f"slave broker {conn.broker_id} ack went back from {conn.ack_offset} to {ack}"
                )
            if ack > conn.next_offset:
                raise HAProtocolError(
                    f"slave broker {conn.broker_id} acks {ack} but only {conn.next_offset} was sent"
                )
        conn.ack_offset = ack
        # Seed: ack >= lastMasterMaxOffset => lastCaughtUpTimeMs = lastTransferTimeMs,
        # applied to every pipelined send the ack covers.
        while conn.inflight and conn.inflight[0][0] <= ack:
            _, sent_ms = conn.inflight.popleft()
            conn.last_caught_up_ms = max(conn.last_caught_up_ms, sent_ms)
        self._publish(conn, True)
        try:
            self._on_slave_ack(conn.broker_id, ack)
        except Exception:
            log.exception("HA master: on_slave_ack(%d, %d) failed", conn.broker_id, ack)

    def _epoch_of(self, offset: int) -> tuple[int, int, int | None] | None:
        """(epoch, its start, next epoch's start or None) of the epoch holding ``offset``."""
        entries = self._store.epoch_file.entries()
        starts = [e.start_offset for e in entries]
        i = bisect.bisect_right(starts, offset) - 1
        if i < 0:
            return None
        end = entries[i + 1].start_offset if i + 1 < len(entries) else None
        return entries[i].epoch, entries[i].start_offset, end

    def _mark_sent(self, conn: SlaveConnection, master_max: int) -> None:
        if len(conn.inflight) >= self._config.max_inflight_batches:
            conn.inflight.popleft()  # forget the oldest: caught-up only gets stricter
        conn.inflight.append((master_max, self._now_ms()))

    async def send_loop(self, conn: SlaveConnection) -> None:
        """Batches, heartbeats and confirmOffset changes to one slave until cancelled, or,
        once the master stops (`stopping()`), until the slave has been sent the current
        confirmOffset: then it returns and the caller half-closes the stream.

        The drain sends no more log data: what is not yet on a slave was not
        acknowledged, while the last confirmOffset is exactly what was, and is held
        back by `confirm_publish_delay_ms` (or a batch still in flight) at any
        instant. Cancelling instead left a slave promoted by the next election one
        commit round behind what the old master acknowledged."""
        loop = asyncio.get_running_loop()
        heartbeat_s = self._config.heartbeat_interval_ms / 1000
        confirm_delay_s = self._config.confirm_publish_delay_ms / 1000
        last_write = loop.time()
        sent_confirm = -1
        confirm_due: float | None = None  # when a moved confirmOffset gets a frame of its own
        while True:
            conn.wake.clear()  # before reading max_offset: an append after this re-sets it
            store_max = self._store.max_offset
            if self._stopping():
                if sent_confirm != self._confirm_offset():
                    await self._send_heartbeat(conn, store_max)
                return
            if conn.next_offset < store_max:
                await self._send_batch(conn, store_max)
                sent_confirm = self._confirm_offset()
                confirm_due = None
                last_write = loop.time()
                # sock_sendall/sendfile finish without yielding while the socket buffer
                # has room: yield so a long catch-up does not starve the loop.
                await asyncio.sleep(0)
                continue
            now = loop.time()
            if sent_confirm != self._confirm_offset():
                # Idle but the confirm offset moved. Under load the next batch carries it
                # within a round, and a heartbeat of its own costs a frame and an ack each
                # way per slave: wait confirm_publish_delay_ms for that batch first.
                if confirm_due is None:
                    # A new session's first frame tells the slave at once.
                    confirm_due = now + confirm_delay_s if sent_confirm >= 0 else now
                if self._writes_stopped():
                    confirm_due = now  # no batch will come to carry it
                if now >= confirm_due:
                    await self._send_heartbeat(conn, store_max)
                    sent_confirm = self._confirm_offset()
                    confirm_due = None
                    last_write = loop.time()
                    continue
            else:
                confirm_due = None
            remaining = last_write + heartbeat_s - now
            if remaining <= 0:
                await self._send_heartbeat(conn, store_max)
                sent_confirm = self._confirm_offset()
                confirm_due = None
                last_write = loop.time()
                continue
            if confirm_due is not None:
                remaining = min(remaining, confirm_due - now)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await conn.wake.wait()

    async def _send_batch(self, conn: SlaveConnection, store_max: int) -> None:
        offset = conn.next_offset
        if offset < self._store.min_offset:
            # Retention deleted what this slave needs next: close; at its reconnect the
            # handshake starts it at our min offset and it resyncs from there (master.py).
            raise SlaveNeedsDeletedData(
                f"slave broker {conn.broker_id} needs offset {offset}, which retention deleted "
                f"(master min offset {self._store.min_offset}); it resyncs from there"
            )
        epoch_info = self._epoch_of(offset)
        if epoch_info is None:
            raise RuntimeError(
                f"offset {offset} lies before the first epoch entry of the master's epoch file; "
                "cannot name its epoch for slave broker " + str(conn.broker_id)
            )
        epoch, epoch_start, epoch_end = epoch_info
        limit = store_max if epoch_end is None else min(store_max, epoch_end)
        want = min(self._config.transfer_batch_bytes, limit - offset)
        if want <= 0:
            raise RuntimeError(f"empty batch at {offset}: epoch {epoch} ends at {epoch_end}")
        # Our own fd of the segment: retention may delete it while sendfile runs.
        rng = self._store.hold_range(offset, want)
        if rng is None:
            raise RuntimeError(f"store returned no data at {offset} below its max {store_max}")
        try:
            if rng.length <= 0 or rng.offset != offset:
                raise RuntimeError(f"store returned no data at {offset} below its max {store_max}")
            header = encode_transfer_header(
                offset=offset,
                epoch=epoch,
                epoch_start_offset=epoch_start,
                confirm_offset=self._confirm_offset(),
                body_size=rng.length,
            )
            # Advance first: the ack for these bytes may be processed before sendfile returns.
            conn.next_offset = offset + rng.length
            self._mark_sent(conn, store_max)
            async with asyncio.timeout(self._config.write_timeout_ms / 1000):
                link = conn.link
                if isinstance(link, TlsLink):
                    await link.send_range(header, rng.fd, rng.file_position, rng.length)
                else:
                    await _send_corked(conn.sock, header)
                    await _sendfile(conn.sock, rng.fd, rng.file_position, rng.length)
        finally:
            os.close(rng.fd)

    async def _send_heartbeat(self, conn: SlaveConnection, store_max: int) -> None:
        offset = conn.next_offset
        epoch_info = self._epoch_of(offset)
        epoch, epoch_start = (
            (epoch_info[0], epoch_info[1]) if epoch_info is not None else (self._master_epoch, 0)
        )
        frame = Transfer(
            offset=offset,
            epoch=epoch,
            epoch_start_offset=min(epoch_start, offset),
            confirm_offset=self._confirm_offset(),
        )
        self._mark_sent(conn, store_max)
        await self.send(conn, frame.encode())

    async def send(self, conn: SlaveConnection, data: bytes) -> None:
        assert conn.link is not None
        async with asyncio.timeout(self._config.write_timeout_ms / 1000):
            await conn.link.sendall(data)

    async def read_frame(self, conn: SlaveConnection) -> SlaveFrame:
        assert conn.link is not None
        while True:
            event = conn.decoder.next_event()
            if event is not NEED_DATA:
                return event
            async with asyncio.timeout(self._config.read_timeout_ms / 1000):
                data = await conn.link.recv(self._config.read_chunk_bytes)
            if not data:
                raise ConnectionClosed()
            conn.decoder.receive_data(data)


async def _send_corked(sock: socket.socket, header: bytes) -> None:
    """Queue a transfer header with MSG_MORE: the sendfile that follows (whose last
    chunk goes without it) pushes header and data out together, so the slave
    wakes once per batch instead of once for 36 bytes and again for the data."""
    try:
        sent = sock.send(header, socket.MSG_MORE)
    except BlockingIOError:
        sent = 0
    if sent < len(header):
        await asyncio.get_running_loop().sock_sendall(sock, header[sent:])


async def _sendfile(sock: socket.socket, fd: int, position: int, count: int) -> None:
    """Copy ``count`` bytes of ``fd`` from ``position`` to the non-blocking ``sock``
    with ``os.sendfile`` (kernel to kernel). Unlike ``loop.sock_sendfile`` this never
    moves the file's own position, which the store shares."""
    loop = asyncio.get_running_loop()
    out = sock.fileno()
    while count > 0:
        try:
            sent = os.sendfile(out, fd, position, count)
        except BlockingIOError:
            sent = -1
        if sent == 0:
            raise OSError(f"segment file ended {count} bytes early at position {position}")
        if sent > 0:
            position += sent
            count -= sent
            continue
        writable = loop.create_future()
        loop.add_writer(out, set_done, writable)
        try:
            await writable
        finally:
            loop.remove_writer(out)
