"""A packet capture of the loopback interface for the TLS tests (issue 36: "a capture of
every port's traffic ... shows no message body in clear"), where a socket tap cannot sit:
links the runtime's own processes open to each other (HA replication, brokers → name
servers, the supervisor → the brokers' HTTP ports).

An AF_PACKET socket on `lo` (needs CAP_NET_RAW: root, as the partition tests) sees every
TCP segment twice, once leaving (PACKET_OUTGOING) and once arriving (PACKET_HOST); only the
arriving copy is kept. Payloads are appended per TCP stream (src, sport, dst, dport) in the
order they arrive, so a marker split across two segments is still found. The kernel's
drop counter (PACKET_STATISTICS) is read at the end: a capture that dropped segments says
so, and a test can refuse to trust it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

ETH_P_ALL = 0x0003
PACKET_HOST = 0
SOL_PACKET = 263
PACKET_STATISTICS = 6
ETH_HEADER = 14

Stream = tuple[str, int, str, int]


def capture_unavailable() -> str | None:
    """Why no capture can be made here (None: it can)."""
    try:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as s:
            s.bind(("lo", 0))
    except (OSError, AttributeError) as exc:
        return f"no packet capture on lo ({type(exc).__name__}: {exc}); needs CAP_NET_RAW"
    return None


@dataclass
class LoopbackCapture:
    """Captures TCP payloads to or from `ports` on `lo` between `start` and `stop`."""

    ports: frozenset[int]
    streams: dict[Stream, bytearray] = field(default_factory=dict)
    drops: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _sock: socket.socket | None = None

    def start(self) -> None:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        with contextlib.suppress(OSError):  # root may force a bigger buffer
            sock.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
        sock.bind(("lo", 0))
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="loopback-capture", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                stats = self._sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
                self.drops += struct.unpack("II", stats)[1]
            self._sock.close()

    def _run(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                frame, address = self._sock.recvfrom(1 << 17)
            except TimeoutError:
                continue
            except OSError:
                return
            if address[2] == PACKET_HOST:
                self._take(frame)

    def _take(self, frame: bytes) -> None:
        if frame[12:14] != b"\x08\x00" or len(frame) < ETH_HEADER + 20:
            return  # IPv4 only: the runtime is on 127.0.x.x
        ip = frame[ETH_HEADER:]
        if ip[9] != 6:
            return
        ihl = (ip[0] & 0x0F) * 4
        total = int.from_bytes(ip[2:4])
        tcp = ip[ihl:total]
        sport, dport = int.from_bytes(tcp[0:2]), int.from_bytes(tcp[2:4])
        if sport not in self.ports and dport not in self.ports:
            return
        payload = tcp[(tcp[12] >> 4) * 4 :]
        if not payload:
            return
        key = (socket.inet_ntoa(ip[12:16]), sport, socket.inet_ntoa(ip[16:20]), dport)
        self.streams.setdefault(key, bytearray()).extend(payload)

    def of_port(self, port: int, hosts: Iterable[str] | None = None) -> list[bytes]:
        """Every stream to or from `port` (on one of `hosts`, when given), both directions."""
        wanted = None if hosts is None else set(hosts)
        out = []
        for (src, sport, dst, dport), data in list(self.streams.items()):
            if (dport == port and (wanted is None or dst in wanted)) or (
                sport == port and (wanted is None or src in wanted)
            ):
                out.append(bytes(data))
        return out
