"""py-spy sampling of one server process over a benchmark's measured window, reduced to the
top functions by self and inclusive share (issue 38 item 3: native code only where a
profile shows one function above 10 % of a core)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def _function(frame: str) -> str:
    """`name (path/file.py:line)` -> `name (file.py)`: samples add up per function."""
    name, _, where = frame.partition(" (")
    if not where:
        return frame
    return f"{name} ({where.rstrip(')').rsplit('/', 1)[-1].rsplit(':', 1)[0]})"


def top_functions(collapsed: str, count: int = 25) -> dict[str, Any]:
    """py-spy's raw (collapsed) stacks -> the top functions by self and inclusive samples,
    as shares of all samples (idle included: a thread waiting in epoll is a sample too)."""
    self_samples: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in collapsed.splitlines():
        stack, _, number = line.rpartition(" ")
        if not stack or not number.isdigit():
            continue
        n = int(number)
        total += n
        frames = [_function(f) for f in stack.split(";")]
        self_samples[frames[-1]] = self_samples.get(frames[-1], 0) + n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n

    def share(table: dict[str, int]) -> list[list[Any]]:
        ranked = sorted(table.items(), key=lambda kv: -kv[1])[:count]
        return [[name, round(n / total, 4)] for name, n in ranked]

    return {"samples": total, "self": share(self_samples), "inclusive": share(inclusive)}


def start_profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
         "--rate", "100", "--format", "raw", "--nonblocking", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
