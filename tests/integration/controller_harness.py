"""Real controller processes on loopback, for integration tests and benchmarks.

    with ControllerCluster(tmp_path, block=3) as cluster:
        cluster.start_all()
        leader = cluster.wait_for_leader()
        cluster.kill(leader)                  # SIGKILL by PID
        cluster.wait_for_leader(exclude={leader})
        cluster.start(leader)                 # restart on the same address and data dir

Each node runs `python -m brokergroup_controller.cli controller` (the same
code as `brokergroup controller`, without importing the other components) on
its own address `127.0.<block>.<i>` with the default ports, so a test picks a
block in 2..9 and never collides with another test or with the local runtime
(127.0.0.x/127.0.1.x). Only processes this harness started are signalled,
by PID; `stop_all` (also run by the context manager) ends them all.
The helpers are synchronous (stdlib HTTP) so they work from sync tests, async
tests (briefly blocking) and scripts alike.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from brokergroup_controller.client import may_resend

RAFT_PORT = 9880
API_PORT = 9878
DEFAULT_TOKEN = "integration-test-token"
# The liveness reports a controller client re-sends without a requestId (client.py).
IDEMPOTENT_PATHS = frozenset({"/v1/brokers/heartbeat", "/v1/brokers/inactive"})


def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait for `process` to exit; SIGKILL it (by PID) if it has not by then."""
    try:
        process.wait(timeout=max(0.1, timeout_s))
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def terminate_all(processes: Iterable[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGCONT + SIGTERM every running process, SIGKILL whatever outlives `grace_s`."""
    running = [p for p in processes if p.poll() is None]
    for process in running:
        os.kill(process.pid, signal.SIGCONT)  # a paused process cannot handle SIGTERM
        os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for process in running:
        wait_or_kill(process, deadline - time.monotonic())


@dataclass
class ControllerProcess:
    node_id: int
    host: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{RAFT_PORT}"

    @property
    def api_address(self) -> str:
        return f"{self.host}:{API_PORT}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class HttpResult:
    status: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


class ControllerCluster:
    """`size` controller nodes on 127.0.<block>.1..size, data under `base_dir`."""

    def __init__(
        self,
        base_dir: Path,
        *,
        block: int,
        size: int = 3,
        token: str = DEFAULT_TOKEN,
        config: Mapping[str, Any] | None = None,
        python: str = sys.executable,
        insecure: bool = False,
        log_level: str = "INFO",
    ) -> None:
        if not 2 <= block <= 9:
            raise ValueError("tests use loopback blocks 127.0.2.0/24 .. 127.0.9.0/24")
        self.base_dir = Path(base_dir)
        self.block = block
        self.token = token
        self.python = python
        self.log_level = log_level
        self.insecure = insecure
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.token_file = self.base_dir / "token"
        self.token_file.write_text(token + "\n")
        self.raft_password = f"raft-password-of-{token}"
        self.raft_password_file = self.base_dir / "raft-password"
        self.raft_password_file.write_text(self.raft_password + "\n")
        self.broker_credential_root = f"broker-credential-root-of-{token}"
        self.broker_credential_root_file = self.base_dir / "broker-credential-root"
        self.broker_credential_root_file.write_text(self.broker_credential_root + "\n")
        self.config_file: Path | None = None
        if config:
            self.config_file = self.base_dir / "controller.json"
            self.config_file.write_text(json.dumps(dict(config)))
        self.nodes = {
            i: ControllerProcess(
                node_id=i,
                host=f"127.0.{block}.{i}",
                data_dir=self.base_dir / f"node{i}",
                log_path=self.base_dir / f"node{i}.log",
            )
            for i in range(1, size + 1)
        }

    # -------------------------------------------------------------- addresses

    @property
    def peers(self) -> str:
        return ",".join(n.raft_address for n in self.nodes.values())

    @property
    def api_addresses(self) -> list[str]:
        return [n.api_address for n in self.nodes.values()]

    def api_address(self, node_id: int) -> str:
        return self.nodes[node_id].api_address

    def node_of_api(self, api_address: str) -> int | None:
        for node in self.nodes.values():
            if node.api_address == api_address:
                return node.node_id
        return None

    # -------------------------------------------------------------- processes

    def command(self, node_id: int) -> list[str]:
        node = self.nodes[node_id]
        cmd = [
            self.python,
            "-m",
            "brokergroup_controller.cli",
            "controller",
            "--node-id",
            str(node_id),
            "--peers",
            self.peers,
            "--data-dir",
            str(node.data_dir),
            "--bind-address",
            node.host,
            "--log-level",
            self.log_level,
        ]
        if self.insecure:
            cmd += ["--insecure-no-auth"]
        else:
            cmd += [
                "--token-file",
                str(self.token_file),
                "--raft-password-file",
                str(self.raft_password_file),
                "--broker-credential-root-file",
                str(self.broker_credential_root_file),
            ]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        return cmd

    def start(self, node_id: int) -> ControllerProcess:
        node = self.nodes[node_id]
        if node.running():
            return node
        node.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(node.log_path, "ab")  # noqa: SIM115  # the child owns it from here
        log.write(f"--- start #{node.starts + 1} at {time.time():.3f}\n".encode())
        log.flush()
        try:
            node.process = subprocess.Popen(
                self.command(node_id),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            log.close()
        node.starts += 1
        return node

    def start_all(self) -> None:
        """Start every node and wait until each one's API accepts connections
        (a slow start on a loaded machine is not what any test is about)."""
        for node_id in self.nodes:
            self.start(node_id)
        for node_id in self.nodes:
            self.wait_listening(node_id)

    def wait_listening(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Until `node_id`'s HTTP API answers anything (healthy or not)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                self.request(node_id, "GET", "/healthz", token=None, timeout_s=2.0)
                return
            except OSError:
                node = self.nodes[node_id]
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(f"node {node_id} exited\n" + self.logs(node_id)) from None
                time.sleep(0.05)
        raise TimeoutError(
            f"node {node_id} API not listening within {timeout_s}s\n" + self.logs(node_id)
        )

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Signal one node we started, by PID, and reap it (SIGKILL/SIGTERM)."""
        node = self.nodes[node_id]
        if node.process is None or node.process.poll() is not None:
            return
        os.kill(node.process.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            wait_or_kill(node.process, 10)

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        for node_id in self.nodes:
            self.kill(node_id, sig)

    def restart(self, node_id: int) -> ControllerProcess:
        self.kill(node_id)
        return self.start(node_id)

    def stop_all(self) -> None:
        """SIGTERM every running node, SIGKILL what does not exit in 5 s."""
        terminate_all((n.process for n in self.nodes.values() if n.process is not None), 5)

    def __enter__(self) -> ControllerCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def logs(self, node_id: int | None = None, tail_lines: int = 40) -> str:
        ids = [node_id] if node_id is not None else list(self.nodes)
        parts = []
        for i in ids:
            path = self.nodes[i].log_path
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"==== node {i} ====\n" + "\n".join(text.splitlines()[-tail_lines:]))
        return "\n".join(parts)

    # -------------------------------------------------------------- HTTP

    def request(
        self,
        node_id: int,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "default",
        raw: bytes | None = None,
        timeout_s: float = 5.0,
    ) -> HttpResult:
        """One HTTP request to one node (no retries); `token=None` sends none."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(
            f"http://{self.api_address(node_id)}{path}", data=data, method=method
        )
        req.add_header("Content-Type", "application/json")
        if token is not None:
            req.add_header("Authorization", f"Bearer {self.token if token == 'default' else token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as response:
                return HttpResult(response.status, _json(response.read()), dict(response.headers))
        except urllib.error.HTTPError as err:
            return HttpResult(err.code, _json(err.read()), dict(err.headers))

    def request_retrying(
        self,
        node_id: int,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "default",
        timeout_s: float = 5.0,
        budget_s: float = 30.0,
    ) -> HttpResult:
        """`request`, re-sent to the same node while it answers 503 NOT_LEADER, as a
        broker's controller client does: only reads, the liveness reports and bodies
        carrying a requestId (`may_resend`), anything else is sent once. A stall of a
        loaded machine can start an election between two steps of a test (CI run 50);
        once a leader is elected the node serves or forwards again."""
        path_only = path.split("?", 1)[0]
        retry = may_resend(method, body, idempotent=path_only in IDEMPOTENT_PATHS)
        deadline = time.monotonic() + budget_s
        while True:
            result = self.request(node_id, method, path, body, token=token, timeout_s=timeout_s)
            not_leader = result.status == 503 and result.body.get("code") == "NOT_LEADER"
            if not (retry and not_leader) or time.monotonic() > deadline:
                return result
            time.sleep(0.1)

    def raft_status(self, node_id: int, timeout_s: float = 1.0) -> dict[str, Any] | None:
        if not self.nodes[node_id].running():
            return None
        try:
            result = self.request(node_id, "GET", "/v1/raft", timeout_s=timeout_s)
        except OSError:
            return None
        return result.body if result.status == 200 else None

    def leader(self, exclude: Iterable[int] = ()) -> int | None:
        """The node every running node (but `exclude`) agrees is leader, ready to serve."""
        excluded = set(exclude)
        seen: set[str | None] = set()
        ready_leader: int | None = None
        for node_id, node in self.nodes.items():
            if node_id in excluded or not node.running():
                continue
            status = self.raft_status(node_id)
            if status is None:
                continue
            seen.add(status.get("leader"))
            if status.get("isLeader") and status.get("ready"):
                ready_leader = node_id
        if ready_leader is None or len(seen) != 1:
            return None
        return ready_leader

    def wait_for_leader(self, timeout_s: float = 30.0, exclude: Iterable[int] = ()) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for node in self.nodes.values():
                if node.process is not None and node.process.poll() not in (None, -9, -15):
                    raise RuntimeError(
                        f"controller node {node.node_id} exited with {node.process.returncode}\n"
                        + self.logs(node.node_id)
                    )
            leader = self.leader(exclude)
            if leader is not None:
                return leader
            time.sleep(0.05)
        raise TimeoutError(f"no controller leader within {timeout_s}s\n" + self.logs())

    def wait_ready(self, node_id: int, timeout_s: float = 30.0) -> None:
        """Wait until `node_id` knows the leader and has applied up to its commit index."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.raft_status(node_id)
            if status is not None and status.get("ready"):
                return
            time.sleep(0.05)
        raise TimeoutError(f"node {node_id} not ready within {timeout_s}s\n" + self.logs(node_id))


def _json(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data) if data else {}
    except ValueError:
        return {"raw": data.decode(errors="replace")}
    return value if isinstance(value, dict) else {"value": value}
