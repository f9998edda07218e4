"""DIR/state.json: what the supervisor runs, for other commands to act on.

The supervisor is the only writer; it rewrites the whole file atomically
(temp file + rename) whenever a child starts, exits or changes role, and
every poll interval. Readers (`local status`, `kill`, `down`, `up`'s
already-running check) never trust a pid alone: a pid is acted on only if
the process with that pid still has the recorded start time (`startTicks`,
field 22 of /proc/<pid>/stat), so a recycled pid is never signalled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any


class ChildKind(StrEnum):
    CONTROLLER = "controller"
    BROKER = "broker"
    PROXY = "proxy"  # engine rocketmq: the stock RocketMQ proxy


class Phase(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    BACKOFF = "backoff"
    STOPPED = "stopped"


@dataclass(frozen=True)
class ChildRecord:
    kind: ChildKind
    index: int
    """Controller node id (1-based) or broker slot (0-based)."""
    host: str
    port: int
    """Controller API port / broker client port."""
    pid: int | None = None
    start_ticks: int | None = None
    phase: Phase = Phase.STARTING
    started_at_ms: int | None = None
    restarts: int = 0
    last_exit_code: int | None = None
    restart_at_ms: int | None = None
    broker_id: int | None = None
    role: str | None = None
    previous_hosts: tuple[str, ...] = ()
    log_file: str = ""
    gid: int | None = None
    """The group id the process runs in when it has one of its own (local.nodeGidBase)."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def name(self) -> str:
        if self.kind is ChildKind.CONTROLLER:
            return f"controller-{self.index}"
        if self.kind is ChildKind.PROXY:
            return "proxy"
        return f"broker slot {self.index}"

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "index": self.index,
            "host": self.host,
            "port": self.port,
            "address": self.address,
            "pid": self.pid,
            "startTicks": self.start_ticks,
            "phase": self.phase.value,
            "startedAtMs": self.started_at_ms,
            "restarts": self.restarts,
            "lastExitCode": self.last_exit_code,
            "restartAtMs": self.restart_at_ms,
            "brokerId": self.broker_id,
            "role": self.role,
            "previousHosts": list(self.previous_hosts),
            "logFile": self.log_file,
            # Only with local.nodeGidBase: the state file as it always was otherwise.
            **({"gid": self.gid} if self.gid is not None else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChildRecord:
        return cls(
            kind=ChildKind(data["kind"]),
            index=int(data["index"]),
            host=str(data["host"]),
            port=int(data["port"]),
            pid=_opt_int(data.get("pid")),
            start_ticks=_opt_int(data.get("startTicks")),
            phase=Phase(data.get("phase", Phase.STOPPED.value)),
            started_at_ms=_opt_int(data.get("startedAtMs")),
            restarts=int(data.get("restarts", 0)),
            last_exit_code=_opt_int(data.get("lastExitCode")),
            restart_at_ms=_opt_int(data.get("restartAtMs")),
            broker_id=_opt_int(data.get("brokerId")),
            role=data.get("role"),
            previous_hosts=tuple(str(h) for h in data.get("previousHosts", [])),
            log_file=str(data.get("logFile", "")),
            gid=_opt_int(data.get("gid")),
        )


@dataclass(frozen=True)
class RuntimeState:
    root_dir: str
    supervisor_pid: int | None
    supervisor_start_ticks: int | None
    started_at_ms: int
    updated_at_ms: int
    stopped_at_ms: int | None = None
    address_cursor: int | None = None
    controllers: tuple[ChildRecord, ...] = ()
    brokers: tuple[ChildRecord, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    master_target: str | None = None
    """Where the stable master address forwards new connections now (None: no master)."""
    proxies: tuple[ChildRecord, ...] = ()
    event_loop: str | None = None
    """The event loop the supervisor and its children run on (asyncio, uvloop)."""
    other_groups_brokers: tuple[ChildRecord, ...] = ()
    """`local up --groups N`: the brokers of the groups after the first (slots N..), kept
    apart from `brokers` (the status view's rows) so `local down` can still stop them by
    pid when the supervisor is gone."""

    def children(self) -> tuple[ChildRecord, ...]:
        return (*self.proxies, *self.brokers, *self.other_groups_brokers, *self.controllers)

    def stopped(self, now_ms: int) -> RuntimeState:
        def down(c: ChildRecord) -> ChildRecord:
            return replace(c, pid=None, start_ticks=None, phase=Phase.STOPPED, restart_at_ms=None)

        return replace(
            self,
            supervisor_pid=None,
            supervisor_start_ticks=None,
            updated_at_ms=now_ms,
            stopped_at_ms=now_ms,
            controllers=tuple(down(c) for c in self.controllers),
            brokers=tuple(down(b) for b in self.brokers),
            proxies=tuple(down(p) for p in self.proxies),
            other_groups_brokers=tuple(down(b) for b in self.other_groups_brokers),
            master_target=None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rootDir": self.root_dir,
            "supervisorPid": self.supervisor_pid,
            "supervisorStartTicks": self.supervisor_start_ticks,
            "startedAtMs": self.started_at_ms,
            "updatedAtMs": self.updated_at_ms,
            "stoppedAtMs": self.stopped_at_ms,
            "addressCursor": self.address_cursor,
            "controllers": [c.to_json() for c in self.controllers],
            "brokers": [b.to_json() for b in self.brokers],
            "config": self.config,
            "masterTarget": self.master_target,
            "proxies": [p.to_json() for p in self.proxies],
            "eventLoop": self.event_loop,
            # One group: the state file as it always was.
            **(
                {"otherGroupsBrokers": [b.to_json() for b in self.other_groups_brokers]}
                if self.other_groups_brokers
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RuntimeState:
        return cls(
            root_dir=str(data["rootDir"]),
            supervisor_pid=_opt_int(data.get("supervisorPid")),
            supervisor_start_ticks=_opt_int(data.get("supervisorStartTicks")),
            started_at_ms=int(data.get("startedAtMs", 0)),
            updated_at_ms=int(data.get("updatedAtMs", 0)),
            stopped_at_ms=_opt_int(data.get("stoppedAtMs")),
            address_cursor=_opt_int(data.get("addressCursor")),
            controllers=tuple(ChildRecord.from_json(c) for c in data.get("controllers", [])),
            brokers=tuple(ChildRecord.from_json(b) for b in data.get("brokers", [])),
            config=dict(data.get("config", {})),
            master_target=data.get("masterTarget"),
            proxies=tuple(ChildRecord.from_json(p) for p in data.get("proxies", [])),
            event_loop=data.get("eventLoop"),
            other_groups_brokers=tuple(
                ChildRecord.from_json(b) for b in data.get("otherGroupsBrokers", [])
            ),
        )


class StateFileError(RuntimeError):
    """DIR/state.json exists but cannot be read."""


def read_state(path: Path) -> RuntimeState | None:
    """None if there is no state file (nothing was ever started in this dir)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return RuntimeState.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as exc:
        raise StateFileError(f"{path} is not a readable state file: {exc}") from exc


def write_state(path: Path, state: RuntimeState) -> None:
    """Atomic replace, so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
