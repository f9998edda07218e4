"""CPU time of a benchmark's processes and of the machine over one measured window, from /proc.

On a shared 2-core machine the client, the brokers and the controllers all draw on the same
cores, so CPU seconds per message is what caps msg/s. A window is two `Sample`s (at its start
and at its end); `cpu_window` turns them into cores per role and the machine's busy cores.

Pure (unit-tested in tests/unit/test_bench_cpu.py): `parse_proc_stat`, `parse_machine_stat`,
`label_tree`, `cpu_window`, `load_report`. Reading /proc: `read_procs`, `take_sample`.
Nothing here signals a process; it only reads /proc.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Clock ticks per second: the unit of utime/stime in /proc/<pid>/stat and of /proc/stat.
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/<pid>/stat a CPU window needs."""

    pid: int
    comm: str
    ppid: int
    cpu_ticks: int
    """utime + stime (fields 14 and 15): the process's own CPU, not its reaped children's."""
    kernel_ticks: int
    """stime (field 15): the part of `cpu_ticks` spent in the kernel (syscalls, the TCP
    stack, fsync): what no faster user-space code can remove."""
    start_ticks: int
    """starttime (field 22): with the pid, names one process (pids are recycled)."""


def parse_proc_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat line. comm (field 2) is in parentheses and may itself hold
    spaces and parentheses, so it ends at the *last* ')'."""
    opened, closed = text.find("("), text.rfind(")")
    if opened < 0 or closed < opened:
        raise ValueError(f"not a /proc/<pid>/stat line (no '(comm)'): {text[:80]!r}")
    rest = text[closed + 1 :].split()  # rest[0] is field 3 (state)
    if len(rest) < 20:
        raise ValueError(f"/proc/<pid>/stat line has {len(rest) + 2} fields, need 22")
    try:
        return ProcStat(
            pid=int(text[:opened]),
            comm=text[opened + 1 : closed],
            ppid=int(rest[1]),
            cpu_ticks=int(rest[11]) + int(rest[12]),
            kernel_ticks=int(rest[12]),
            start_ticks=int(rest[19]),
        )
    except ValueError as e:
        raise ValueError(f"/proc/<pid>/stat line with a non-numeric field: {text[:80]!r}") from e


@dataclass(frozen=True)
class MachineTicks:
    """The aggregate `cpu` line of /proc/stat: ticks summed over all CPUs since boot."""

    busy: int
    """user + nice + system + irq + softirq + steal (guest time is already in user/nice)."""
    idle: int
    """idle + iowait."""
    cpus: int
    """How many `cpuN` lines follow: the cores the ticks are summed over."""


def parse_machine_stat(text: str) -> MachineTicks:
    total: list[int] | None = None
    cpus = 0
    for line in text.splitlines():
        name, _, values = line.partition(" ")
        if name == "cpu":
            total = [int(v) for v in values.split()]
        elif name.startswith("cpu") and name[3:].isdigit():
            cpus += 1
    if total is None or len(total) < 8 or cpus == 0:
        raise ValueError("/proc/stat has no aggregate 'cpu' line with 8 fields and cpuN lines")
    user, nice, system, idle, iowait, irq, softirq, steal = total[:8]
    return MachineTicks(
        busy=user + nice + system + irq + softirq + steal, idle=idle + iowait, cpus=cpus
    )


def label_tree(procs: Mapping[int, ProcStat], named: Mapping[int, str]) -> dict[int, str]:
    """Every process in `procs` that is a named pid or descends from one, labelled with the
    role of its nearest named ancestor (itself included): a broker's helper counts as that
    broker. Processes outside every named tree are left out."""
    labels: dict[int, str] = {}
    for pid in procs:
        chain: list[int] = []
        at: int | None = pid
        role: str | None = None
        while at is not None and at not in chain:
            if at in labels:
                role = labels[at]
                break
            if at in named:
                role = named[at]
                break
            chain.append(at)
            parent = procs.get(at)
            at = parent.ppid if parent is not None and parent.ppid > 0 else None
        if role is not None:
            for walked in chain:
                labels[walked] = role
            labels[pid] = role
    return labels


@dataclass(frozen=True)
class Sample:
    """One moment of a window: each labelled process's CPU ticks and the machine's."""

    at_s: float
    """time.monotonic() when taken."""
    procs: Mapping[tuple[int, int], tuple[str, int, int]]
    """(pid, start_ticks) → (role, cpu_ticks, kernel_ticks)."""
    machine: MachineTicks


@dataclass(frozen=True)
class CpuWindow:
    wall_s: float
    cpu_s: dict[str, float]
    """CPU seconds per role over the window."""
    kernel_s: dict[str, float]
    """The kernel's part of `cpu_s`, per role."""
    machine_busy_cores: float
    """Busy share of the machine's ticks × its cores: every process, ours or not."""

    def cores(self) -> dict[str, float]:
        return {role: s / self.wall_s for role, s in self.cpu_s.items()}


def cpu_window(before: Sample, after: Sample, ticks_per_s: int = TICKS_PER_S) -> CpuWindow:
    """CPU per role between two samples. A process only in `after` was born in the window:
    all its CPU counts. One only in `before` died in it: its last ticks are unknown and it
    counts nothing (the benchmark kills nothing while it measures a load)."""
    wall_s = after.at_s - before.at_s
    if wall_s <= 0:
        raise ValueError(f"the window must move forward: {before.at_s} → {after.at_s}")
    ticks: dict[str, int] = {}
    kernel: dict[str, int] = {}
    for key, (role, now, now_kernel) in after.procs.items():
        then = before.procs.get(key)
        ticks[role] = ticks.get(role, 0) + now - (then[1] if then is not None else 0)
        kernel[role] = kernel.get(role, 0) + now_kernel - (then[2] if then is not None else 0)
    busy = after.machine.busy - before.machine.busy
    idle = after.machine.idle - before.machine.idle
    return CpuWindow(
        wall_s=wall_s,
        cpu_s={role: t / ticks_per_s for role, t in sorted(ticks.items())},
        kernel_s={role: t / ticks_per_s for role, t in sorted(kernel.items())},
        machine_busy_cores=busy / (busy + idle) * after.machine.cpus if busy + idle else 0.0,
    )


def load_report(window: CpuWindow, messages: int, client_role: str = "client") -> dict[str, object]:
    """A load's CPU keys: cores per role, the client's and the server's (every other role)
    CPU milliseconds per message, the machine's busy cores and those no role accounts for."""
    client_s = window.cpu_s.get(client_role, 0.0)
    server_s = sum(s for role, s in window.cpu_s.items() if role != client_role)
    client_kernel_s = window.kernel_s.get(client_role, 0.0)
    server_kernel_s = sum(s for role, s in window.kernel_s.items() if role != client_role)

    def per_msg(cpu_s: float) -> float | None:
        return round(cpu_s * 1000 / messages, 4) if messages > 0 else None

    return {
        "cpu": {role: round(c, 3) for role, c in window.cores().items()},
        "cpuWindowS": round(window.wall_s, 3),
        "client_cpu_ms_per_msg": per_msg(client_s),
        "server_cpu_ms_per_msg": per_msg(server_s),
        "client_kernel_cpu_ms_per_msg": per_msg(client_kernel_s),
        "server_kernel_cpu_ms_per_msg": per_msg(server_kernel_s),
        "machine_busy_cores": round(window.machine_busy_cores, 3),
        # Busy cores no role accounts for: other processes, and interrupt time the kernel
        # charges to no process.
        "other_busy_cores": round(window.machine_busy_cores - sum(window.cores().values()), 3),
    }


# ---- reading /proc -------------------------------------------------------------------------


def read_procs(proc: Path = Path("/proc")) -> dict[int, ProcStat]:
    """Every process's stat now; one that exits while being read is skipped."""
    found: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found[int(entry.name)] = parse_proc_stat((entry / "stat").read_text())
        except (OSError, ValueError):
            continue
    return found


def take_sample(named: Mapping[int, str], proc: Path = Path("/proc")) -> Sample:
    """The named processes and their descendants (labelled by `label_tree`) and the machine."""
    machine = parse_machine_stat((proc / "stat").read_text())
    at_s = time.monotonic()
    procs = read_procs(proc)
    labels = label_tree(procs, named)
    return Sample(
        at_s=at_s,
        procs={
            (pid, procs[pid].start_ticks): (role, procs[pid].cpu_ticks, procs[pid].kernel_ticks)
            for pid, role in labels.items()
        },
        machine=machine,
    )
