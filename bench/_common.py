"""Small helpers shared by the benchmarks in bench/ (see bench/README.md).

Public API (keep it small; other benchmarks import it):

- `percentile(values, q)`: nearest-rank percentile, `q` in [0, 100].
- `summarize(values)`: `{"count", "min", "p50", "p90", "p99", "max", "mean"}`.
- `machine_info()`: what the numbers were measured on (CPU count, platform).
- `loopback_tcp_ceiling(...)`: round-trip time and one-stream throughput of a
  plain TCP socket on loopback, the ceiling a networked benchmark is held to.
- `write_result(name, data)`: writes bench/results/<name>.json (with
  `machine` and `measuredAt` added) and returns its path.
- `print_last_line(data)`: the one-line JSON summary every benchmark ends with.

Percentiles use the nearest-rank definition (the smallest sample with at
least q% of the samples at or below it), so a p99 of 20 samples is their
maximum: a reported percentile is always a value that was measured, never an
interpolation between two.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import platform
import socket
import statistics
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of `values` (`q` in [0, 100]); NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(values: Sequence[float], digits: int = 4) -> dict[str, float | int | None]:
    """Count, min, p50, p90, p99, max and mean of `values`, rounded to
    `digits`; every statistic is None when there are no values."""
    if not values:
        return {k: (0 if k == "count" else None) for k in _SUMMARY_KEYS}
    return {
        "count": len(values),
        "min": round(min(values), digits),
        "p50": round(percentile(values, 50), digits),
        "p90": round(percentile(values, 90), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
        "mean": round(statistics.fmean(values), digits),
    }


_SUMMARY_KEYS = ("count", "min", "p50", "p90", "p99", "max", "mean")


def machine_info() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


@dataclass(frozen=True)
class LoopbackCeiling:
    """What plain sockets on loopback do on this machine, right now."""

    rtt_p50_us: float
    """Round trip of a 64-byte ping-pong on one connection (TCP_NODELAY)."""
    rtt_p99_us: float
    stream_mb_per_s: float
    """One stream of `chunk_bytes` writes to a reader that discards them."""

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 1) for k, v in asdict(self).items()}


def loopback_tcp_ceiling(
    host: str = "127.0.0.1",
    *,
    round_trips: int = 2000,
    stream_bytes: int = 256 << 20,
    chunk_bytes: int = 1 << 20,
) -> LoopbackCeiling:
    """Measure loopback TCP with blocking sockets and a helper thread (no
    asyncio, no protocol): the best any benchmark over loopback can do."""
    with socket.create_server((host, 0)) as server:
        port = server.getsockname()[1]
        ready = threading.Event()

        def serve() -> None:
            ready.set()
            conn, _ = server.accept()
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for _ in range(round_trips):
                    data = _recv_exact(conn, 64)
                    conn.sendall(data)
                buf = bytearray(chunk_bytes)
                while conn.recv_into(buf):
                    pass

        thread = threading.Thread(target=serve, name="loopback-ceiling", daemon=True)
        thread.start()
        ready.wait()
        with socket.create_connection((host, port)) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            payload = b"x" * 64
            rtts: list[float] = []
            for _ in range(round_trips):
                start = time.perf_counter()
                client.sendall(payload)
                _recv_exact(client, 64)
                rtts.append((time.perf_counter() - start) * 1e6)
            chunk = b"\0" * chunk_bytes
            sent = 0
            start = time.perf_counter()
            while sent < stream_bytes:
                client.sendall(chunk)
                sent += chunk_bytes
            client.shutdown(socket.SHUT_WR)
            thread.join(timeout=30)
            elapsed = time.perf_counter() - start
    return LoopbackCeiling(
        rtt_p50_us=percentile(rtts, 50),
        rtt_p99_us=percentile(rtts, 99),
        stream_mb_per_s=sent / elapsed / 1e6,
    )


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    parts = bytearray()
    while len(parts) < size:
        chunk = conn.recv(size - len(parts))
        if not chunk:
            raise ConnectionError("peer closed during the loopback measurement")
        parts += chunk
    return bytes(parts)


def portable(value: Any) -> Any:
    """`value` with no absolute machine paths: paths in the repository become relative
    to it, any other absolute path becomes `<tmp>/<name>` (results are committed)."""
    if isinstance(value, Mapping):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable(v) for v in value]
    if isinstance(value, str) and value.startswith("/") and len(value) > 1:
        path = Path(value)
        root = RESULTS_DIR.parents[1]
        if path == root or root in path.parents:
            return str(path.relative_to(root)) or "."
        return f"<tmp>/{path.name}"
    return value


def write_result(name: str, data: Mapping[str, Any], results_dir: Path = RESULTS_DIR) -> Path:
    """Write `<results_dir>/<name>.json` atomically; adds `machine` and `measuredAt`.
    Absolute paths are made portable first (results are committed)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.json"
    body = {
        **portable(data),
        "machine": machine_info(),
        "measuredAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def print_last_line(data: Mapping[str, Any]) -> None:
    """The benchmark's final stdout line: one compact JSON object."""
    print(json.dumps(data, separators=(",", ":")), flush=True)


@contextlib.contextmanager
def holding(lock: Path | None) -> Iterator[None]:
    """An exclusive flock on `lock` (if given) for one run: a machine shared with other test
    runs gets its turns between runs instead of waiting out a whole benchmark."""
    if lock is None:
        yield
        return
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
