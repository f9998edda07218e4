"""The local runtime a chaos run (and the failover benchmark) drives from
outside, the way a user would: `brokergroup local up --detach`, its
state.json for PIDs, the controller API for roles, `local down` at the end.

Only processes recorded in this runtime's state.json are signalled, by PID
and start time (a recycled PID is never hit). Optional per-broker tmpfs
mounts (root only) give each broker a disk of its own to fill.

A runtime with TLS on (`--set local.tls=…`) is read over HTTPS and its brokers
reached over TLS, verified against its CA: `tls()` is what its status says
(`chaos.client_tls`).
"""

from __future__ import annotations

import contextlib
import json
import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brokergroup_broker.protocol.client import ClientConfig
from brokergroup_cli.chaos.client_tls import ClientTls, choose
from brokergroup_cli.chaos.targets.base import Node, TargetError
from brokergroup_cli.local.procs import is_alive, send_signal
from brokergroup_cli.local.state import ChildKind, ChildRecord, RuntimeState, read_state
from brokergroup_remoting.keys import read_key_file
from brokergroup_remoting.net import Credentials

CLUSTER = "DefaultCluster"
BROKER_NAME = "broker-a"
CONTROLLER_API_PORT = 9878
BROKER_CLIENT_PORT = 10911


#: Address lanes inside the local runtime's 127.0.0.0/23, clear of a default
#: `local up` (controllers 127.0.1.1-3, brokers 127.0.0.x): (first controller
#: host, first broker, last broker) in 127.0.1.0/24. Lanes 0 and 1: chaos
#: runs; lane 2: the failover benchmark.
_LANES = {0: (101, 110, 159), 1: (161, 170, 199), 2: (201, 210, 254)}


@dataclass(frozen=True)
class Addresses:
    """Where one runtime lives: its own lane of 127.0.1.0/24, so runs never collide."""

    lane: int

    def __post_init__(self) -> None:
        if self.lane not in _LANES:
            raise ValueError(f"lane must be one of {sorted(_LANES)}")

    @property
    def controller_hosts(self) -> tuple[str, ...]:
        first = _LANES[self.lane][0]
        return tuple(f"127.0.1.{first + i}" for i in range(3))

    @property
    def settings(self) -> tuple[str, ...]:
        _, low, high = _LANES[self.lane]
        first = _LANES[self.lane][0]
        return (
            f"local.controllerHosts={','.join(self.controller_hosts)}",
            f"local.brokerFirstHost=127.0.1.{low}",
            f"local.brokerLastHost=127.0.1.{high}",
            # The stable master address in the lane too (the address after its controllers).
            f"local.masterEndpointHost=127.0.1.{first + 3}",
        )

    @property
    def api_addresses(self) -> list[str]:
        return [f"{h}:{CONTROLLER_API_PORT}" for h in self.controller_hosts]


class LocalRuntimeError(TargetError):
    pass


class LocalRuntime:
    """One `brokergroup local` installation in `root`, driven by its CLI."""

    def __init__(
        self,
        root: Path,
        addresses: Addresses,
        *,
        brokers: int = 3,
        settings: Sequence[str] = (),
        broker_disk_bytes: int | None = None,
        engine: str = "builtin",
        up_timeout_s: float = 120.0,
    ) -> None:
        self.root = root
        self.up_timeout_s = up_timeout_s
        self.engine = engine
        self.addresses = addresses
        self.brokers = brokers
        self.settings = tuple(settings)
        self.broker_disk_bytes = broker_disk_bytes
        self.paused: set[tuple[int, int | None]] = set()
        self._mounts: list[Path] = []
        self._tls: tuple[ClientTls, ssl.SSLContext | None] | None = None

    def _cli(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "brokergroup_cli.local", *args, "--dir", str(self.root)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def broker_dir(self, slot: int) -> Path:
        return self.root / "brokers" / str(slot)

    def up(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.broker_disk_bytes is not None:
            for slot in range(self.brokers):
                self._mount_tmpfs(self.broker_dir(slot), self.broker_disk_bytes)
        result = self._cli(
            "up",
            "--detach",
            "--brokers",
            str(self.brokers),
            *(("--engine", self.engine) if self.engine != "builtin" else ()),
            *(x for s in (*self.addresses.settings, *self.settings) for x in ("--set", s)),
            timeout_s=self.up_timeout_s,
        )
        if result.returncode != 0:
            raise LocalRuntimeError(f"local up failed:\n{result.stdout}\n{result.stderr}")
        self._tls = None
        self.tls()  # a runtime whose TLS material cannot be read stops the run here

    def _mount_tmpfs(self, path: Path, size: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise LocalRuntimeError(f"cannot mount a tmpfs on {path}: {done.stderr.strip()}")
        self._mounts.append(path)

    def tls(self) -> ClientTls:
        """The runtime's TLS as `local status --json` shows it (tlsMode, caFile), and
        whether its brokers' HTTP ports are HTTPS (local.tlsHttp): read once."""
        return self._tls_material()[0]

    def tls_context(self) -> ssl.SSLContext | None:
        """The client context for every connection to this runtime (None: plaintext):
        the controllers' API, the brokers' client and HTTP ports."""
        return self._tls_material()[1]

    def _tls_material(self) -> tuple[ClientTls, ssl.SSLContext | None]:
        if self._tls is None:
            # Here, not at the top: `local status` brings the certificates' library, which
            # the base install (`brokergroup --help`, tests/unit/test_extras.py) has not.
            from brokergroup_cli.local.commands import LocalError, namesrv_fields
            from brokergroup_cli.local.config import LocalConfig
            from brokergroup_cli.local.plan import Layout

            layout = Layout(self.root)
            try:
                fields = namesrv_fields(layout)
                config = LocalConfig.from_json(json.loads(layout.config_file.read_text()))
                tls = choose(fields, http_tls=config.tls_http)
                self._tls = (tls, tls.context())
            except (LocalError, OSError, ValueError, TypeError) as exc:
                raise LocalRuntimeError(f"cannot read the TLS of {self.root}: {exc}") from exc
        return self._tls

    def client_config(self, **fields: Any) -> ClientConfig:
        """A `ClientConfig` of the project's clients for this runtime: `fields` plus TLS
        to the brokers and HTTPS to the controllers when the runtime has TLS on."""
        context = self.tls_context()
        return ClientConfig(tls=context, controller_tls=context, **fields)

    def api_url(self, host_port: str, path: str) -> str:
        return f"{self.tls().api_scheme}://{host_port}{path}"

    def token(self) -> str:
        """The admin credential (status reads, faults that clean or elect)."""
        return (self.root / "token").read_text().strip()

    def client_credential(self) -> str:
        """The group's client credential: what producers and consumers use."""
        return (self.root / "client-credential").read_text().strip()

    def client_pair(self) -> Credentials:
        """The group's client key pair: what every broker connection proves."""
        return read_key_file(str(self.root / "client-keys.json"), "client key file")

    def broker_credential(self) -> str:
        """The group's broker credential: brokers' HTTP port asks it (but for probes)."""
        return (self.root / "broker-credential").read_text().strip()

    def state(self) -> RuntimeState:
        state = read_state(self.root / "state.json")
        if state is None:
            raise LocalRuntimeError(f"no state.json in {self.root}")
        return state

    def live_children(self, kind: ChildKind) -> list[ChildRecord]:
        return [
            c
            for c in self.state().children()
            if c.kind is kind and c.pid is not None and is_alive(c.pid, c.start_ticks)
        ]

    def broker_on(self, host: str) -> ChildRecord:
        for child in self.live_children(ChildKind.BROKER):
            if child.host == host:
                return child
        raise LocalRuntimeError(f"no live broker process recorded on {host}")

    def controller_leader(self) -> ChildRecord | None:
        for child in self.live_children(ChildKind.CONTROLLER):
            raft = self._get_json(self.api_url(f"{child.host}:{CONTROLLER_API_PORT}", "/v1/raft"))
            if raft is not None and raft.get("isLeader"):
                return child
        return None

    def replica_info(self) -> dict[str, object] | None:
        for address in self.addresses.api_addresses:
            info = self._get_json(
                self.api_url(
                    address, f"/v1/replica-info?clusterName={CLUSTER}&brokerName={BROKER_NAME}"
                )
            )
            if info is not None and info.get("code") == "SUCCESS":
                return info
        return None

    def broker_status(self, host: str) -> dict[str, object] | None:
        scheme = self.tls().broker_http_scheme
        return self._get_json(
            f"{scheme}://{host}:{BROKER_CLIENT_PORT + 2}/v1/status", token=self.broker_credential()
        )

    def _get_json(
        self, url: str, timeout_s: float = 1.0, token: str | None = None
    ) -> dict[str, object] | None:
        # The admin credential by default: controller reads need one.
        bearer = token or self.token()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {bearer}"})
        try:
            with urllib.request.urlopen(
                request, timeout=timeout_s, context=self.tls_context()
            ) as response:
                body = json.loads(response.read())
        except (OSError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def signal(self, child: ChildRecord | Node, sig: signal.Signals) -> bool:
        process = (child.pid or 0, child.start_ticks)
        if sig is signal.SIGSTOP:
            self.paused.add(process)
        sent = send_signal(child.pid, child.start_ticks, sig)
        if sig in (signal.SIGCONT, signal.SIGKILL):
            self.paused.discard(process)
        return sent

    def down(self) -> None:
        """`local down`, then SIGKILL by PID whatever state.json still shows alive."""
        for paused_pid, paused_ticks in list(self.paused):
            send_signal(paused_pid, paused_ticks, signal.SIGCONT)
        self.paused.clear()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._cli("down", timeout_s=90)
        try:
            state = read_state(self.root / "state.json")
        except Exception:
            state = None
        if state is not None:
            leftovers: list[tuple[int | None, int | None]] = [
                (state.supervisor_pid, state.supervisor_start_ticks)
            ]
            leftovers += [(c.pid, c.start_ticks) for c in state.children()]
            for pid, ticks in leftovers:
                if pid is not None and is_alive(pid, ticks):
                    send_signal(pid, ticks, signal.SIGKILL)
        while self._mounts:
            subprocess.run(["umount", "-l", str(self._mounts.pop())], check=False)
