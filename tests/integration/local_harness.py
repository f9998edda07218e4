"""Drives one `brokergroup local` installation through its CLI (DESIGN.md §4).

The runtime under test uses its own ports (not the defaults), so a developer's
running `local up` is not disturbed. Every process is started by the runtime
and stopped by `local down`; `local_runtime` then SIGKILLs, by pid and start
time, any process it saw in state.json that is somehow still alive.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from brokergroup_cli.local.procs import send_signal

TEST_SETTINGS = (
    "local.restartInitialDelayMs=100",
    "local.pollIntervalMs=300",
    "local.stopTimeoutMs=3000",
    "local.controllerApiPort=19878",
    "local.controllerRaftPort=19880",
    "local.namesrvPort=19876",
    "local.brokerClientPort=20911",
    "local.masterEndpointPort=20900",
)
CONTROLLER_API_ADDRESSES = "127.0.1.1:19878,127.0.1.2:19878,127.0.1.3:19878"


@dataclass
class Runtime:
    """One `local` installation in a temp dir, driven through the CLI."""

    root: Path
    command: list[str]
    settings: list[str]
    seen: set[tuple[int, int | None]] = field(default_factory=set)

    def run(self, *args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [*self.command, *args, "--dir", str(self.root)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        self._remember()
        return result

    def up(self, brokers: int = 3, engine: str = "builtin") -> subprocess.CompletedProcess[str]:
        args = ["up", "--detach", "--brokers", str(brokers), "--engine", engine]
        for item in self.settings:
            args += ["--set", item]
        return self.run(*args, timeout_s=240)

    def status(self) -> dict[str, Any]:
        result = self.run("status", "--json")
        assert result.returncode == 0, result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "state.json").read_text())
        return data

    def _remember(self) -> None:
        try:
            state = self.state()
        except (OSError, ValueError):
            return
        if state.get("supervisorPid"):
            self.seen.add((state["supervisorPid"], state.get("supervisorStartTicks")))
        children = ("controllers", "brokers", "proxies", "otherGroupsBrokers")
        for child in [c for kind in children for c in state.get(kind, [])]:
            if child.get("pid"):
                self.seen.add((child["pid"], child.get("startTicks")))

    def logs(self) -> str:
        out = []
        for path in sorted((self.root / "logs").glob("*.log")):
            out.append(f"--- {path.name}\n" + "\n".join(path.read_text().splitlines()[-15:]))
        return "\n".join(out)


def wait_for(
    what: str, check: Callable[[], dict[str, Any] | None], timeout_s: float, runtime: Runtime
) -> dict[str, Any]:
    """Poll `check` (bounded) until it returns a value; fail with the logs."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        found = check()
        if found is not None:
            return found
        last = runtime.status()
        time.sleep(0.3)
    pytest.fail(
        f"timed out after {timeout_s}s waiting for {what}; last status {last}\n{runtime.logs()}"
    )


@contextmanager
def local_runtime(root: Path, extra_settings: tuple[str, ...] = ()) -> Iterator[Runtime]:
    rt = Runtime(
        root=root,
        command=[sys.executable, "-m", "brokergroup_cli.main", "local"],
        settings=[*TEST_SETTINGS, *extra_settings],
    )
    try:
        yield rt
    finally:
        rt.run("down", timeout_s=60)
        for pid, ticks in rt.seen:  # safety net: only processes this test started
            send_signal(pid, ticks, signal.SIGKILL)


def brokergroup(
    *args: str, timeout_s: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`brokergroup ARGS` as a user runs it (a fresh process, output captured)."""
    return subprocess.run(
        [sys.executable, "-m", "brokergroup_cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env=env,
    )
