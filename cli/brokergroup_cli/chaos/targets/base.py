"""The Target interface: what a chaos run needs from the group it breaks.

One schedule and one seed run against three targets (issue 37 item 1): `local` (the
built-in `local up`), `local-rocketmq` (`local up --engine rocketmq`: stock RocketMQ
brokers under brokergroup's controller) and `rocketmq` (a plain Apache RocketMQ 5.3
controller-mode group). The runner and the faults see a group only through this narrow
interface, so a fault written once breaks all three the same way:

- `nodes(kind)`: the live processes with their role, PID (+ start time: a recycled PID
  is never hit) and loopback address (a partition cuts addresses, not processes);
- `signal(node, sig)`: SIGKILL / SIGSTOP / SIGCONT / SIGTERM by PID, nothing else;
- `master()` / `controller_leader()`: who the controllers say leads right now;
- `healthy()`: a live master with every broker in the SyncStateSet and every controller
  back with a leader (the next fault must not meet a group still recovering);
- `revive()`: bring back what a fault ended for good; a target whose own supervisor
  restarts killed processes (the local runtime) does nothing here;
- `client()`: where a stock RocketMQ client sends (name server, key pair);
- `replica_stores()`: every broker slot's store directory, read back from disk after
  the run (`disklog`), whatever address the slot last ran on.

Faults and the workload get no other handle: no controller API, no state.json.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol


class TargetError(RuntimeError):
    """The target cannot do what was asked (no master, nothing to kill, a start failed)."""


class NodeKind(StrEnum):
    BROKER = "broker"
    CONTROLLER = "controller"
    NAMESRV = "namesrv"


@dataclass(frozen=True)
class Node:
    """One running process of a target."""

    kind: NodeKind
    name: str
    """Stable within a run: `broker-<slot>`, `controller-<n>`."""
    index: int
    """Broker slot (0-based) or controller number: what stays the same across restarts."""
    host: str
    """Its loopback address (what a partition cuts)."""
    pid: int
    start_ticks: int | None = None
    """The process's start time (/proc stat field 22): with `pid`, one process only."""
    data_dir: Path | None = None
    """A broker's own directory (a disk-filling fault fills the filesystem under it)."""
    commitlog_dir: Path | None = None
    """A broker's commit log segments."""
    ha_port: int | None = None
    """A broker's HA listening port when its slaves dial it from an unbound socket (a stock
    RocketMQ broker's AutoSwitchHAClient: source 127.0.0.1, not the slave's own address),
    which no address-pair cut matches: a fault cutting its slaves off cuts this port too."""
    gid: int | None = None
    """The process's own group id when its links cannot be told apart by address (a stock
    RocketMQ JVM dials every link from 127.0.0.1): address-pair faults match its sockets
    by owner too (`netfault.owner_matches`)."""


@dataclass(frozen=True)
class ClientEndpoint:
    """Where a stock RocketMQ client reaches the group."""

    namesrv: str
    access_key: str = ""
    secret_key: str = ""
    jvm_options: tuple[str, ...] = ()
    """The client JVM's TLS options when the group runs TLS (`ClientTls.stock_jvm_options`)."""


@dataclass(frozen=True)
class ReplicaStore:
    """One broker slot's store, read back after the run."""

    name: str
    commitlog_dir: Path


class Target(Protocol):
    """A group a chaos run starts, breaks, heals and reads back (module docstring)."""

    @property
    def name(self) -> str:
        """`local`, `local-rocketmq` or `rocketmq`."""
        ...

    @property
    def brokers(self) -> int:
        """Brokers of the one broker set (`broker-a`) the workload writes to."""
        ...

    def up(self) -> None: ...

    def down(self) -> None:
        """Stop every process this target started (by PID), paused ones resumed first."""
        ...

    def nodes(self, kind: NodeKind | None = None) -> list[Node]:
        """The live processes (of `kind`)."""
        ...

    def master(self) -> Node | None:
        """The broker the controllers name master, if it is alive."""
        ...

    def controller_leader(self) -> Node | None: ...

    def healthy(self) -> bool: ...

    def revive(self) -> None: ...

    def signal(self, node: Node, sig: signal.Signals) -> bool:
        """Send `sig` to exactly that process; False if it was gone."""
        ...

    def client(self) -> ClientEndpoint: ...

    def create_topic(self, topic: str, queues: int) -> None: ...

    def replica_stores(self) -> list[ReplicaStore]: ...


def hosts(nodes: Sequence[Node]) -> list[str]:
    return [n.host for n in nodes]
