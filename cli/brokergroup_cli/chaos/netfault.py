"""A real network partition between loopback addresses: packets are dropped,
no FIN or RST reaches the other side (DESIGN.md §8 "partition").

How: Linux policy routing. A `blackhole` rule per (source, destination)
pair, both ways, makes the kernel discard those packets before delivery;
established TCP connections just stop moving (the sender retransmits into
the void), new connects from a cut address fail at once. The kernel looks
up its `local` table from the rule at priority 0, before any other rule,
so that rule is moved below ours for the duration (same lookup, later
priority: nothing else changes) and put back by `heal()`.

Needs root and iproute2's `ip`; `unavailable_reason()` says why not, and
callers skip with it. Only the addresses a test names are touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from types import TracebackType

#: Our blackhole rules sit in [_FIRST_PREF, _LOCAL_PREF); the local table moves to _LOCAL_PREF.
_FIRST_PREF = 100
_LOCAL_PREF = 1000


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "a real partition needs root (policy-routing blackhole rules)"
    if shutil.which("ip") is None:
        return "a real partition needs iproute2's `ip`"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _host(address: str) -> str:
    return address.rpartition(":")[0] if ":" in address else address


class LoopbackPartition:
    """Cut every packet between two groups of addresses; `heal()` (or leaving
    the `with` block) removes exactly the rules this object added."""

    def __init__(self) -> None:
        self._rules: list[tuple[int, str, str]] = []
        self._added_local = False
        self._deleted_zero = False

    def cut(self, side_a: Iterable[str], side_b: Iterable[str]) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        self._move_local_lookup()
        pairs = [(_host(a), _host(b)) for a in side_a for b in side_b]
        for a, b in pairs:
            for source, destination in ((a, b), (b, a)):
                pref = _FIRST_PREF + len(self._rules)
                if pref >= _LOCAL_PREF:
                    raise RuntimeError("too many partition rules")
                _ip("rule", "add", "pref", str(pref), "from", source, "to", destination,
                    "blackhole")  # fmt: skip
                self._rules.append((pref, source, destination))
        _ip("route", "flush", "cache", check=False)

    def heal(self) -> None:
        while self._rules:
            pref, source, destination = self._rules.pop()
            _ip("rule", "del", "pref", str(pref), "from", source, "to", destination,
                "blackhole", check=False)  # fmt: skip
        if self._deleted_zero:
            _ip("rule", "add", "pref", "0", "lookup", "local", check=False)
            self._deleted_zero = False
        if self._added_local:
            _ip("rule", "del", "pref", str(_LOCAL_PREF), "lookup", "local", check=False)
            self._added_local = False
        _ip("route", "flush", "cache", check=False)

    def _move_local_lookup(self) -> None:
        lines = _ip("rule", "show").stdout.splitlines()

        def has(pref: int) -> bool:
            return any(line.startswith(f"{pref}:") and "lookup local" in line for line in lines)

        if not has(_LOCAL_PREF):
            _ip("rule", "add", "pref", str(_LOCAL_PREF), "lookup", "local")
            self._added_local = True
        if has(0):
            _ip("rule", "del", "pref", "0", "lookup", "local")
            self._deleted_zero = True

    def __enter__(self) -> LoopbackPartition:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.heal()
