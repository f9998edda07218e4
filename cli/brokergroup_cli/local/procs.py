"""Signalling processes by pid, safely (Linux /proc; degrades elsewhere).

A pid is only trusted together with the process's start time (field 22 of
/proc/<pid>/stat, in clock ticks since boot): if the pid now belongs to a
different process (recycled), it is treated as dead and never signalled.
Zombies count as dead.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any


def process_start_ticks(pid: int) -> int | None:
    """Start time of `pid`, or None if unknown (no /proc, or no such process)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 overall; fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None


def _is_zombie(pid: int) -> bool:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = raw[raw.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] in ("Z", "X")


def is_alive(pid: int | None, start_ticks: int | None) -> bool:
    """Is the process we recorded (pid + start time) still running?"""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process: certainly not ours
    if _is_zombie(pid):
        return False
    if start_ticks is not None:
        current = process_start_ticks(pid)
        if current is not None and current != start_ticks:
            return False
    return True


def send_signal(pid: int | None, start_ticks: int | None, sig: signal.Signals) -> bool:
    """Signal our recorded process; False if it is already gone (nothing sent)."""
    if pid is None or not is_alive(pid, start_ticks):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def wait_gone(
    processes: list[tuple[int, int | None]], timeout_s: float, poll_s: float = 0.05
) -> list[tuple[int, int | None]]:
    """Wait (bounded) until all exit; returns those still alive at the deadline."""
    deadline = time.monotonic() + timeout_s
    alive = [p for p in processes if is_alive(*p)]
    while alive and time.monotonic() < deadline:
        time.sleep(poll_s)
        alive = [p for p in alive if is_alive(*p)]
    return alive


def group_kwargs(gid: int | None) -> dict[str, Any]:
    """`subprocess.Popen` keyword arguments that start a child in group `gid` with no
    supplementary groups, the uid unchanged ({}: the parent's groups). The chaos faults
    tell such a child's sockets apart by it (iptables' owner match: a stock RocketMQ JVM
    dials every link from 127.0.0.1; docs/reliability.md "Every link of a stock node").
    Setting it needs root (CAP_SETGID)."""
    return {} if gid is None else {"group": gid, "extra_groups": []}


def group_preexec(gid: int | None) -> dict[str, Any]:
    """The same for `asyncio.create_subprocess_exec` on any loop: uvloop's takes no
    `group`/`extra_groups` ("unexpected kwargs"), only `preexec_fn`, run in the forked
    child before exec; it makes two system calls and touches no lock."""
    if gid is None:
        return {}

    def enter_group() -> None:
        os.setgroups([])
        os.setgid(gid)

    return {"preexec_fn": enter_group}
