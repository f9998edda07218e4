"""A socket tap for the TLS tests: a loopback TCP proxy between a client and a port that
records every byte each way, so a test can look for a message body in what crossed the
wire (issue 36: "a capture ... shows no message body in clear").

The proxy is real TCP on both sides; it relays bytes unchanged (so TLS still verifies the
far end) and keeps them per connection, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass
class SocketTap:
    """Listens on (host, port), relays to `target`; `seen` holds the bytes both ways."""

    target: tuple[str, int]
    host: str = "127.0.0.1"
    to_server: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)
    connections: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, port: int = 0) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._relay, self.host, port)
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    @property
    def seen(self) -> bytes:
        return bytes(self.to_server) + bytes(self.to_client)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        pumps = [
            asyncio.create_task(_pump(reader, up_writer, self.to_server)),
            asyncio.create_task(_pump(up_reader, writer, self.to_client)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.ALL_COMPLETED)
        finally:
            for task in pumps:
                self._tasks.discard(task)
            writer.close()
            up_writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: bytearray) -> None:
    try:
        while data := await reader.read(65536):
            log += data
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()
